//! Issue 39, conflicts: a 409 or 412 is an outcome of its own that the page resolves, never a
//! retry. The engine's side (never retried by itself, a new idempotency key, headers set over
//! the job's) is tested in `shared/tests/scenarios.rs`; here, what a page sees and does in the
//! browser against the demo API's conditional changes (`If-Match` and `ETag`).

use serde_json::Value;

use crate::e2e;
use crate::support::{report, BrowserHarness, PageScript};

e2e!(
    /// A page edits a contact with the `ETag` it read; meanwhile another client changed it.
    /// The server answers 412 with the contact as it is now: the job's `done` rejects with code
    /// "conflict" and that answer, every tab's status counts one conflict, nothing is sent
    /// again by itself, and the page resolves it by merging its change into the current
    /// record and retrying with the new `ETag`.
    a_stale_edit_is_a_conflict_the_page_resolves_with_the_servers_answer,
    60,
    |h| {
        let tab = h.open_e2e().await;
        let r: Value = tab
            .eval(
                r#"
                const created = await fetch('/api/contacts', { method: 'POST',
                  headers: { 'Content-Type': 'application/json' },
                  body: JSON.stringify({ name: 'Ada', city: 'London' }) });
                const { id } = await created.json();
                const readTag = created.headers.get('etag');
                // Another client changes the contact after this page read it.
                const other = await fetch('/api/contacts/' + id, { method: 'PATCH',
                  headers: { 'Content-Type': 'application/json', 'If-Match': readTag },
                  body: JSON.stringify({ city: 'Paris' }) });
                const sentBefore = (await (await fetch('/__sluice/stats')).json()).total;
                const edit = await sluice.enqueue({ url: '/api/contacts/' + id, method: 'PATCH',
                  key: 'contact-' + id, headers: { 'If-Match': readTag },
                  body: { name: 'Ada Lovelace' } });
                let error = null;
                try { await edit.done; } catch (e) { error = e; }
                await e2e.sleep(1500);
                const during = await sluice.snapshot();
                const sentAfterWait = (await (await fetch('/__sluice/stats')).json()).total;
                // The page merges its change into the record the server answered with.
                const current = JSON.parse(error.outcome.body).current;
                const merged = { ...current, name: 'Ada Lovelace' };
                const retried = await sluice.retry(edit.id,
                  { body: merged, headers: { 'If-Match': error.outcome.headers.etag } });
                const outcome = await retried.done;
                const after = await sluice.snapshot();
                const stored = await (await fetch('/api/contacts/' + id)).json();
                return { otherStatus: other.status, readTag,
                  code: error && error.code, name: error && error.name, state: error.state,
                  status: error.status, message: error.message,
                  answerStatus: error.outcome.status, answerTag: error.outcome.headers.etag,
                  conflictsDuring: during.counts.conflict,
                  sentWhileWaiting: sentAfterWait - sentBefore,
                  retriedStatus: outcome.status, retriedTag: outcome.headers.etag,
                  conflictsAfter: after.counts.conflict, stored };
                "#,
            )
            .await;
        report(&format!("a stale edit and its resolution: {r}"));
        assert_eq!(r["otherStatus"], 200, "{r}");
        assert_eq!(r["code"], "conflict", "{r}");
        assert_eq!(r["name"], "SluiceError", "{r}");
        assert_eq!(r["state"], "conflict", "{r}");
        assert_eq!(r["status"], 412, "{r}");
        assert!(
            r["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("conflict: HTTP 412: precondition failed")),
            "the server's words: {r}"
        );
        assert_eq!(r["answerStatus"], 412, "{r}");
        assert_eq!(r["answerTag"], "\"v2\"", "{r}");
        assert_eq!(r["conflictsDuring"], 1, "{r}");
        assert_eq!(
            r["sentWhileWaiting"], 1,
            "only the one refused edit reached the server: {r}"
        );
        assert_eq!(r["retriedStatus"], 200, "{r}");
        assert_eq!(r["retriedTag"], "\"v3\"", "{r}");
        assert_eq!(r["conflictsAfter"], 0, "{r}");
        assert_eq!(r["stored"]["name"], "Ada Lovelace", "{r}");
        assert_eq!(r["stored"]["city"], "Paris", "the other client's change kept: {r}");
    }
);

e2e!(
    /// Retry options a page gets wrong are refused on the page with what to change, and the
    /// conflict stays as it was; `dismiss` discards it.
    a_conflict_retried_with_bad_options_says_why_and_can_be_dismissed,
    60,
    |h| {
        let tab = h.open_e2e().await;
        let r: Value = tab
            .eval(
                r#"
                const created = await fetch('/api/contacts', { method: 'POST',
                  headers: { 'Content-Type': 'application/json' },
                  body: JSON.stringify({ name: 'Eve' }) });
                const { id } = await created.json();
                const edit = await sluice.enqueue({ url: '/api/contacts/' + id, method: 'PATCH',
                  headers: { 'If-Match': '"v0"' }, body: { name: 'Eve B.' } });
                let code = null;
                try { await edit.done; } catch (e) { code = e.code; }
                const errors = [];
                for (const options of [{ bodyy: 1 }, { headers: { 'If Match': 'x' } }, 5]) {
                  try { await sluice.retry(edit.id, options); errors.push(null); }
                  catch (e) { errors.push({ code: e.code, message: e.message }); }
                }
                const still = (await sluice.jobs()).find((j) => j.id === edit.id);
                await sluice.dismiss(edit.id);
                const gone = (await sluice.jobs()).find((j) => j.id === edit.id);
                return { code, errors, stillState: still && still.state, gone: gone === undefined };
                "#,
            )
            .await;
        report(&format!("bad retry options: {r}"));
        assert_eq!(r["code"], "conflict", "{r}");
        let errors = r["errors"].as_array().cloned().unwrap_or_default();
        assert_eq!(errors.len(), 3, "{r}");
        assert!(
            errors[0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("bodyy")),
            "a misspelt option is named: {r}"
        );
        assert!(
            errors[1]["message"]
                .as_str()
                .is_some_and(|m| m.contains("not a valid header name")),
            "a bad header is refused by the worker: {r}"
        );
        assert!(
            errors[2]["message"]
                .as_str()
                .is_some_and(|m| m.contains("retry options")),
            "{r}"
        );
        assert_eq!(r["stillState"], "conflict", "{r}");
        assert_eq!(r["gone"], true, "{r}");
    }
);

e2e!(
    /// A read and an edit under one key, the edit asking for its key's last `ETag`: when
    /// another client changes the contact in between, the edit reaches the server with the
    /// read's version and is a conflict rather than overwriting that change; a second edit
    /// queued after a successful one goes with the version that one produced.
    an_edit_sent_with_its_keys_last_etag_does_not_overwrite_another_change,
    60,
    |h| {
        let tab = h.open_e2e().await;
        let r: Value = tab
            .eval(
                r#"
                const created = await fetch('/api/contacts', { method: 'POST',
                  headers: { 'Content-Type': 'application/json' },
                  body: JSON.stringify({ name: 'Grace' }) });
                const { id } = await created.json();
                const url = '/api/contacts/' + id, key = 'contact-' + id;
                const read = await sluice.enqueue({ url, key });
                const readAnswer = await read.done;
                await fetch(url, { method: 'PATCH', headers: { 'Content-Type': 'application/json' },
                  body: JSON.stringify({ city: 'Arlington' }) });
                const stale = await sluice.enqueue({ url, method: 'PATCH', key,
                  ifMatchFromKey: true, body: { name: 'Grace Hopper' } });
                let code = null;
                try { await stale.done; } catch (e) { code = e.code; }
                const fresh = await sluice.enqueue({ url, key });
                await fresh.done;
                const one = await sluice.enqueue({ url, method: 'PATCH', key,
                  ifMatchFromKey: true, body: { name: 'Grace Hopper' } });
                const oneAnswer = await one.done;
                const two = await sluice.enqueue({ url, method: 'PATCH', key,
                  ifMatchFromKey: true, body: { rank: 'Rear Admiral' } });
                const twoAnswer = await two.done;
                let keyless = null;
                try {
                  await sluice.enqueue({ url, method: 'PATCH', ifMatchFromKey: true, body: {} });
                } catch (e) { keyless = e.message; }
                const stored = await (await fetch(url)).json();
                return { readTag: readAnswer.headers.etag, code,
                  oneStatus: oneAnswer.status, oneTag: oneAnswer.headers.etag,
                  twoStatus: twoAnswer.status, twoTag: twoAnswer.headers.etag, keyless, stored };
                "#,
            )
            .await;
        report(&format!("edits with their key's ETag: {r}"));
        assert_eq!(r["readTag"], "\"v1\"", "{r}");
        assert_eq!(
            r["code"], "conflict",
            "sent with the read's version, after another change: {r}"
        );
        assert_eq!(r["oneStatus"], 200, "{r}");
        assert_eq!(r["oneTag"], "\"v3\"", "{r}");
        assert_eq!(r["twoStatus"], 200, "with the version the edit before produced: {r}");
        assert_eq!(r["twoTag"], "\"v4\"", "{r}");
        assert!(
            r["keyless"]
                .as_str()
                .is_some_and(|m| m.contains("ifMatchFromKey needs a key")),
            "{r}"
        );
        assert_eq!(r["stored"]["city"], "Arlington", "the other change kept: {r}");
        assert_eq!(r["stored"]["rank"], "Rear Admiral", "{r}");
    }
);
