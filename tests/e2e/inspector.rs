//! Issue 39, part 5: `<sluice-inspector>`, the element the package ships for any page (see
//! `client/js/sluice-inspector.js`), in the driver page with its real client: axe-core finds
//! nothing in it (inside its shadow root) with jobs of every kind listed, a keyboard alone
//! opens it and cancels a waiting job, and a conflict it shows is resolved from the page's
//! API; a job discarded from it ends its `done` with the code `discarded` in every tab.

use serde_json::Value;

use crate::e2e;
use crate::support::axe::{axe_source, inject_axe};
use crate::support::{report, BrowserHarness, Harness, PageScript, Tab};
use sluice::browser::Key;

/// Adds the inspector to the driver page, for its client, as an app would; page helpers:
/// `inspector`, `shadow`, `row(id)` (the job's row as shown: state, text, button names),
/// `waitRow(id, predicate)`, and `said` (every text its live region took, as a screen reader
/// would hear them).
const ADD_INSPECTOR: &str = r#"
    const { inspect } = await import('/pkg/sluice-inspector.js');
    window.inspector = inspect(sluice);
    window.shadow = inspector.shadowRoot;
    window.said = [];
    const live = shadow.querySelector('[role=status]');
    new MutationObserver(() => said.push(live.textContent))
      .observe(live, { childList: true, characterData: true, subtree: true });
    window.row = (id) => {
      const r = shadow.querySelector(`tr[data-job="${CSS.escape(id)}"]`);
      return r && { state: r.dataset.state, text: r.textContent,
        buttons: [...r.querySelectorAll('button')].map((b) => b.getAttribute('aria-label')) };
    };
    window.waitRow = async (id, predicate, ms = 15000) => {
      const until = Date.now() + ms;
      for (;;) {
        const r = row(id);
        if (r && predicate(r)) return r;
        if (Date.now() > until) throw new Error(`row ${id} never matched: ${JSON.stringify(r)}`);
        await e2e.sleep(50);
      }
    };
"#;

/// A budget that sends one job a minute: the first job goes, the rest wait, as long as a test
/// needs them waiting.
const ONE_A_MINUTE: &str = r#"
    await e2e.configure({ budgets: [{ name: 'api', windows: [{ limit: 1, lengthMs: 60000 }],
      concurrency: 1, matchPrefixes: [location.origin + '/api/'] }] });
"#;

async fn open_with_inspector(h: &Harness) -> Tab {
    let tab = h.open_e2e().await;
    tab.set_viewport(1280, 900).await;
    tab.eval(ADD_INSPECTOR).await;
    tab
}

/// What the inspector's shadow root holds focused: `aria-label`, else tag name.
async fn focused_in_inspector(tab: &Tab) -> String {
    tab.eval_as(
        "const e = document.activeElement === inspector ? shadow.activeElement : null;\
         return e ? (e.getAttribute('aria-label') || e.tagName.toLowerCase()) : \
           'outside: ' + (document.activeElement ? document.activeElement.tagName : 'nothing');",
    )
    .await
}

/// Presses Tab until the inspector's focused element is `name` (its `aria-label` or tag name);
/// returns the way there. Panics after `max` presses.
async fn tab_to(tab: &Tab, name: &str, max: usize) -> Vec<String> {
    let mut path = Vec::new();
    for _ in 0..max {
        tab.press(Key::Tab).await;
        let now = focused_in_inspector(tab).await;
        path.push(now.clone());
        if now == name {
            return path;
        }
    }
    panic!("{name} never got focus in {max} presses of Tab: {path:?}");
}

e2e!(
    /// The inspector open, listing a job done, two waiting, one waiting for another's answer,
    /// a failed one, a conflict and a group: axe-core, run on the element (its open shadow root included: a nameless button
    /// put there for a moment is caught), finds no violation of any impact.
    the_open_inspector_has_no_accessibility_violations,
    90,
    |h| {
        let Some(axe) = axe_source() else {
            return;
        };
        let tab = open_with_inspector(h).await;
        inject_axe(&tab, &axe).await;
        let listed: Value = tab
            .eval(&format!(
                r#"
                await e2e.configure();
                await fetch('/__sluice/script', {{ method: 'POST', body: JSON.stringify([
                  {{ method: 'PATCH', path: '/api/contacts/901', status: 422,
                    body: {{ error: 'this contact is locked by a merge' }} }},
                  {{ method: 'PATCH', path: '/api/contacts/902', status: 409,
                    body: {{ error: 'changed by someone else' }} }}]) }});
                const jobs = [
                  {{ id: 'create-1', url: '/api/contacts', kind: 'create', body: {{ name: 'Ada' }} }},
                  {{ id: 'locked', url: '/api/contacts/901', method: 'PATCH', body: {{ name: 'x' }} }},
                  {{ id: 'stale', url: '/api/contacts/902', method: 'PATCH', body: {{ name: 'y' }} }},
                ];
                const ends = [];
                for (const job of jobs) {{
                  const {{ done }} = await sluice.enqueue(job);
                  ends.push(done.then(() => 'done', (e) => e.code));
                }}
                const codes = await Promise.all(ends);
                {ONE_A_MINUTE}
                await sluice.enqueueMany([1, 2, 3].map((i) => ({{ id: 'import-' + i,
                  url: '/api/contacts/' + (10 + i) }})), 'import');
                // A job that waits for another's answer says so where a countdown would be.
                await sluice.enqueue({{ id: 'follow-up', method: 'PATCH', body: {{ note: 'x' }},
                  url: '/api/contacts/' + sluice.ref('import-3', 'body.id') }});
                inspector.open = true;
                await waitRow('import-3', (r) => r.state === 'queued');
                await waitRow('follow-up', (r) => r.text.includes('after job import-3'));
                await waitRow('stale', (r) => r.state === 'conflict');
                await waitRow('create-1', (r) => r.state === 'done');
                // The group's progress comes with the status.
                const until = Date.now() + 10000;
                while (shadow.querySelector('.groups-part').hidden && Date.now() < until) {{
                  await e2e.sleep(50);
                }}
                return {{ codes, rows: shadow.querySelectorAll('.jobs tbody tr').length,
                  groups: shadow.querySelectorAll('.groups tbody tr').length,
                  summary: shadow.querySelector('summary').textContent }};"#
            ))
            .await;
        report(&format!("listed for axe: {listed}"));
        let shot = tab.screenshot("open").await;
        report(&format!("the open inspector: {}", shot.display()));
        assert_eq!(listed["codes"], serde_json::json!(["done", "failed", "conflict"]), "{listed}");
        assert_eq!(listed["groups"], 1, "the group is listed for axe too: {listed}");
        let r: Value = tab
            .eval(
                r#"
                // axe sees inside the shadow root: a button without a name is caught there.
                const bare = document.createElement('button');
                shadow.querySelector('.panel').append(bare);
                let caught;
                try {
                  caught = (await axe.run({ include: [['sluice-inspector']] },
                    { runOnly: ['button-name'] })).violations.map((v) => v.id);
                } finally { bare.remove(); }
                const r = await axe.run({ include: [['sluice-inspector']] });
                return { caught,
                  violations: r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
                    nodes: v.nodes.map((n) => JSON.stringify(n.target)).slice(0, 5) })),
                  passed: r.passes.map((p) => p.id + ':' + p.nodes.length),
                  incomplete: r.incomplete.map((v) => v.id + ':' + v.nodes.length) };
                "#,
            )
            .await;
        report(&format!("axe on the open inspector: {r}"));
        assert_eq!(r["caught"], serde_json::json!(["button-name"]), "{r}");
        assert_eq!(r["violations"], serde_json::json!([]), "{r}");
        let passed = r["passed"].to_string();
        for rule in ["button-name", "th-has-data-cells", "color-contrast"] {
            assert!(passed.contains(&format!("\"{rule}:")), "{rule} checked: {r}");
        }
    }
);

e2e!(
    /// A keyboard alone: Tab reaches the collapsed inspector, Enter opens it, Tab reaches the
    /// Cancel button of a waiting job (named after the job), Enter cancels that job and no
    /// other; focus stays in the inspector, the live region says what happened, and Escape
    /// closes it with focus back on its summary.
    the_inspector_opens_and_cancels_a_job_from_the_keyboard,
    90,
    |h| {
        let tab = open_with_inspector(h).await;
        let setup: Value = tab
            .eval(&format!(
                r#"{ONE_A_MINUTE}
                for (const id of ['first', 'second', 'third']) {{
                  await sluice.enqueue({{ id, url: '/api/contacts/' + id }});
                }}
                return {{ open: inspector.open, summary: shadow.querySelector('summary').textContent }};"#
            ))
            .await;
        report(&format!("before: {setup}"));
        assert_eq!(setup["open"], false, "collapsed until asked: {setup}");
        let path = tab_to(&tab, "summary", 5).await;
        report(&format!("Tab stops to the summary: {path:?}"));
        tab.press(Key::Enter).await;
        let opened: Value = tab
            .eval(
                r#"
                await waitRow('third', (r) => r.state === 'queued');
                return { open: inspector.open, third: row('third') };
                "#,
            )
            .await;
        assert_eq!(opened["open"], true, "Enter opens it: {opened}");
        assert!(
            opened["third"]["buttons"]
                .to_string()
                .contains("Cancel job third"),
            "{opened}"
        );
        let path = tab_to(&tab, "Cancel job third", 40).await;
        report(&format!("Tab stops to the cancel button: {path:?}"));
        tab.press(Key::Enter).await;
        let after: Value = tab
            .eval(
                r#"
                const r = await waitRow('third', (r) => r.state === 'cancelled');
                const states = Object.fromEntries((await sluice.jobs())
                  .map((j) => [j.id, j.state]));
                await e2e.sleep(100);
                return { row: r, states, said,
                  focusInside: document.activeElement === inspector && !!shadow.activeElement };
                "#,
            )
            .await;
        report(&format!("after Enter: {after}"));
        assert_eq!(after["states"]["third"], "cancelled", "{after}");
        assert_eq!(after["states"]["second"], "queued", "only that job: {after}");
        assert!(
            after["said"].to_string().contains("Cancelled: job third."),
            "the live region says what the button did: {after}"
        );
        assert_eq!(after["focusInside"], true, "focus stays in the inspector: {after}");
        tab.press(Key::Escape).await;
        let closed: Value = tab
            .eval("return { open: inspector.open, focused: shadow.activeElement && shadow.activeElement.tagName };")
            .await;
        assert_eq!(closed["open"], false, "{closed}");
        assert_eq!(closed["focused"], "SUMMARY", "{closed}");
    }
);

e2e!(
    /// A 409 shows in the inspector as a conflict with the server's status; the page resolves
    /// it with `retry(id, {body})` and the inspector shows the job done, with the new body at
    /// the server. A failed job discarded with the inspector's Discard button: its `done`
    /// rejects with the code `discarded`, in the tab that dismissed it and in another tab.
    a_conflict_shown_in_the_inspector_is_resolved_and_a_discarded_job_says_so,
    90,
    |h| {
        let tab = open_with_inspector(h).await;
        let other = h.open_e2e().await;
        let r: Value = tab
            .eval(
                r#"
                await e2e.configure();
                const created = await fetch('/api/contacts', { method: 'POST',
                  headers: { 'Content-Type': 'application/json' },
                  body: JSON.stringify({ name: 'Ada', city: 'London' }) });
                const { id } = await created.json();
                const url = '/api/contacts/' + id;
                await fetch('/__sluice/script', { method: 'POST', body: JSON.stringify([
                  { method: 'PATCH', path: url, status: 409,
                    body: { error: 'changed by someone else' } },
                  { method: 'PATCH', path: '/api/contacts/999001', status: 422,
                    body: { error: 'this contact is locked by a merge' } }]) });
                inspector.open = true;
                const edit = await sluice.enqueue({ id: 'edit', url, method: 'PATCH',
                  body: { name: 'Ada L.' } });
                const code = await edit.done.then(() => 'done', (e) => e.code);
                const conflict = await waitRow('edit', (r) => r.state === 'conflict');
                const retried = await sluice.retry('edit', { body: { name: 'Ada Lovelace' } });
                const answer = await retried.done;
                const done = await waitRow('edit', (r) => r.state === 'done');
                const stored = await (await fetch(url)).json();

                const locked = await sluice.enqueue({ id: 'locked', url: '/api/contacts/999001',
                  method: 'PATCH', body: { name: 'x' } });
                const lockedCode = await locked.done.then(() => 'done', (e) => e.code);
                await waitRow('locked', (r) => r.state === 'failed');
                shadow.querySelector('button[aria-label="Discard job locked"]').click();
                const until = Date.now() + 10000;
                while (row('locked') && Date.now() < until) await e2e.sleep(50);
                const afterwards = await sluice.done('locked').then(() => null, (e) => e);
                return { code, conflict, answerStatus: answer.status, done, stored, lockedCode,
                  rowGone: row('locked') === null,
                  said,
                  discarded: afterwards && { code: afterwards.code, name: afterwards.name,
                    jobId: afterwards.jobId, message: afterwards.message } };
                "#,
            )
            .await;
        report(&format!("a conflict and a discard through the inspector: {r}"));
        assert_eq!(r["code"], "conflict", "{r}");
        assert!(
            r["conflict"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("Conflict") && t.contains("HTTP 409")),
            "the inspector says conflict and the server's status in words: {r}"
        );
        assert!(
            r["conflict"]["buttons"].to_string().contains("Retry job edit"),
            "{r}"
        );
        assert_eq!(r["answerStatus"], 200, "{r}");
        assert!(
            r["done"]["text"].as_str().is_some_and(|t| t.contains("Done")),
            "{r}"
        );
        assert_eq!(r["stored"]["name"], "Ada Lovelace", "{r}");
        assert_eq!(r["lockedCode"], "failed", "{r}");
        assert_eq!(r["rowGone"], true, "{r}");
        assert!(
            r["said"].to_string().contains("Discarded: job locked."),
            "{r}"
        );
        assert_eq!(r["discarded"]["code"], "discarded", "{r}");
        assert_eq!(r["discarded"]["name"], "SluiceError", "{r}");
        assert_eq!(r["discarded"]["jobId"], "locked", "{r}");
        // Another tab heard the dismissal: its `done` of that job says so too.
        let elsewhere: Value = other
            .eval(
                r#"
                const until = Date.now() + 10000;
                while (!e2e.broadcasts.some((m) => m.type === 'jobs'
                    && (m.discarded || []).includes('locked')) && Date.now() < until) {
                  await e2e.sleep(50);
                }
                return await sluice.done('locked').then(() => null, (e) => e.code);
                "#,
            )
            .await;
        assert_eq!(elsewhere, "discarded", "in another tab");
    }
);
