//! What pages hand the worker: garbage gets a clear, typed error for the sender alone, and a
//! plain `fetch` of a configured route is queued like any job.

use std::time::Duration;

use serde_json::Value;

use crate::e2e;
use crate::support::{js, report, BrowserHarness, Options, PageScript};

e2e!(
    /// Scenario 13: malformed and oversized messages, invalid URLs, unknown budgets and a bad
    /// configuration from one tab: each gets a clear error, only that tab hears of it, and
    /// another tab's bulk job goes on at its limit.
    bad_input_from_one_tab_gets_clear_errors_and_the_queue_keeps_working_for_others,
    90,
    // Alone: it checks the told limit on the server's arrivals, and a second browser on the
    // two cores delays single requests by more than the arrival margin absorbs (31 on 30 once
    // with the fixed 2% margin, before margins were measured).
    Options::default().exclusive(),
    |h| {
        let worker_tab = h.open_e2e().await;
        worker_tab.eval(&js::configure(30, 4, "")).await;
        worker_tab.eval(&js::enqueue_group(60, "others")).await;
        let sender = h.open_e2e().await;
        let r = sender
            .eval(
                r#"
                const grab = async (p) => {
                  try { await p; return null; }
                  catch (e) { return { code: e.code, message: e.message }; }
                };
                const worker = navigator.serviceWorker.controller;
                const raw = async (message, pred) => {
                  const from = e2e.raw.length;
                  worker.postMessage(message);
                  return await e2e.waitFor((m) => m && m.type === 'error' && pred(m), 10000, from);
                };
                const before = (await sluice.snapshot()).counts;
                const out = {
                  // 33 MB of text: refused before it is parsed.
                  oversized: await raw('x'.repeat(33 << 20), () => true),
                  notJson: await raw('{"requestId": "n1", "type": "enqueue"', () => true),
                  badUrlRaw: await raw(JSON.stringify({ requestId: 'u1', type: 'enqueue',
                    job: { url: 'ftp://example.com/x', budget: 'api' } }), (m) => m.requestId === 'u1'),
                  spaceUrlRaw: await raw(JSON.stringify({ requestId: 'u2', type: 'enqueue',
                    job: { url: 'http://exa mple.com/x', budget: 'api' } }), (m) => m.requestId === 'u2'),
                  bigBody: await grab(sluice.enqueue({ url: '/api/contacts', kind: 'create',
                    body: 'y'.repeat(2 << 20) })),
                  badUrl: await grab(sluice.enqueue({ url: 'http://[::1' })),
                  noBudget: await grab(sluice.enqueue({ url: 'http://127.0.0.2:9/elsewhere', method: 'POST', body: 'x' })),
                  // Naming a budget does not take a job outside what the script allows.
                  namedElsewhere: await grab(sluice.enqueue({ budget: 'api',
                    url: 'http://127.0.0.2:9/elsewhere', method: 'POST', body: 'x' })),
                  // A page cannot add a budget for another origin, nor one whose prefix is
                  // this host without its port (a raw string prefix of this origin).
                  pageElsewhere: await grab(sluice.configure({ budgets: [{ name: 'evil',
                    windows: [{ limit: 10, lengthMs: 1000 }],
                    matchPrefixes: ['http://127.0.0.2:9/'] }] })),
                  rawPrefix: await grab(sluice.configure({ budgets: [{ name: 'raw',
                    windows: [{ limit: 10, lengthMs: 1000 }], matchPrefixes: ['http://127.0.0.1'] }] })),
                  unknownBudget: await grab(sluice.enqueue({ url: '/api/contacts', budget: 'nope', body: {} })),
                  oneBadOfMany: await grab(sluice.enqueueMany([
                    { url: '/api/contacts', kind: 'create', body: { name: 'fine' } },
                    { url: '/api/contacts', kind: 'create', budget: 'nope', body: {} },
                  ], 'mixed')),
                  badConfig: await grab(sluice.configure({ budgets: [{ name: 'api', windows: [] }] })),
                  // Read by the worker, not the page client: its reader's words reach the page.
                  unreadableConfig: await grab(sluice.configure({ budgets: [{ name: 1 }] })),
                };
                out.mixedJobs = (await sluice.jobs('mixed')).length;
                const after = (await sluice.snapshot()).counts;
                out.enqueuedMeanwhile = (after.queued + after.sending + after.retryWait + after.done
                  + after.failed + after.cancelled) - (before.queued + before.sending
                  + before.retryWait + before.done + before.failed + before.cancelled);
                // The sender itself still gets served.
                const ok = await sluice.enqueue({ url: '/api/contacts', kind: 'create', lane: 'interactive',
                  body: { name: 'after the garbage' } });
                out.afterwards = (await ok.done).status;
                return out;
                "#,
            )
            .await;
        report(&format!(
            "bad input errors: {}",
            serde_json::to_string(&r).unwrap_or_default()
        ));
        let code = |k: &str| r[k]["code"].as_str().map(str::to_owned);
        let raw_code = |k: &str| r[k]["error"]["code"].as_str().map(str::to_owned);
        let message = |k: &str| r[k]["message"].as_str().unwrap_or("").to_owned();
        assert_eq!(raw_code("oversized").as_deref(), Some("too-large"), "{r}");
        assert_eq!(r["oversized"]["error"]["maxBytes"], 32 << 20, "{r}");
        assert_eq!(raw_code("notJson").as_deref(), Some("malformed"), "{r}");
        assert_eq!(code("unreadableConfig").as_deref(), Some("malformed"), "{r}");
        assert!(
            message("unreadableConfig")
                .starts_with("malformed message: invalid type: integer `1`, expected a string"),
            "{r}"
        );
        assert_eq!(raw_code("badUrlRaw").as_deref(), Some("invalid-url"), "{r}");
        assert_eq!(raw_code("spaceUrlRaw").as_deref(), Some("invalid-url"), "{r}");
        assert_eq!(r["oversized"]["error"]["what"], "message", "{r}");
        assert_eq!(code("bigBody").as_deref(), Some("too-large"), "{r}");
        assert!(
            message("bigBody").starts_with("the job's body is too large: 2097152 bytes (2.0 MiB) \
             where at most 1048576 bytes (1.0 MiB) are allowed (maxBodyBytes"),
            "says what is too large and the limit: {r}"
        );
        assert_eq!(code("badUrl").as_deref(), Some("invalid-job"), "{r}");
        assert!(message("badUrl").contains("bad url"), "{r}");
        for k in ["noBudget", "namedElsewhere"] {
            assert_eq!(code(k).as_deref(), Some("url-not-allowed"), "{k}: {r}");
            assert!(
                message(k).contains("outside what the worker script allows"),
                "{k}: {r}"
            );
        }
        for k in ["pageElsewhere", "rawPrefix"] {
            assert_eq!(code(k).as_deref(), Some("invalid-config"), "{k}: {r}");
            assert!(
                message(k).contains("outside what the worker script allows"),
                "{k}: {r}"
            );
        }
        assert_eq!(code("unknownBudget").as_deref(), Some("unknown-budget"), "{r}");
        assert!(message("unknownBudget").contains("api"), "{r}");
        assert!(message("oneBadOfMany").contains("job 2 of 2"), "{r}");
        assert!(message("oneBadOfMany").contains("nothing was enqueued"), "{r}");
        assert_eq!(r["mixedJobs"], 0, "{r}");
        assert_eq!(code("badConfig").as_deref(), Some("invalid-config"), "{r}");
        assert!(message("badConfig").contains("window"), "{r}");
        assert_eq!(r["afterwards"], 201, "{r}");

        let results: Vec<String> = worker_tab.eval_as(&js::settle_group("others")).await;
        assert!(js::all_done(&results), "{results:?}");
        let errors_elsewhere: Vec<Value> = worker_tab
            .eval_as(
                "return e2e.raw.map((m) => typeof m === 'string' ? JSON.parse(m) : m)\
                 .filter((m) => m && m.type === 'error');",
            )
            .await;
        assert!(
            errors_elsewhere.is_empty(),
            "errors went to a tab that sent nothing wrong: {errors_elsewhere:?}"
        );
        let stats = h.api.stats();
        assert_eq!(stats.contacts, 61, "{stats:?}");
        assert_eq!(stats.duplicate_creates, 0, "{stats:?}");
        assert!(
            stats.max_in_window <= 30,
            "the refused configuration changed the limit: {stats:?}"
        );
    }
);

e2e!(
    /// Scenario 14: while offline, a page's plain `fetch` of a configured route is answered
    /// 202 with a job id at once; back online, the requests go out within the limit.
    an_intercepted_fetch_while_offline_gets_202_and_is_sent_later_within_the_limit,
    90,
    // Alone: it checks the told limit on the server's arrivals, and a second browser on the
    // two cores delays single requests by more than the arrival margin absorbs (31 on 30 once
    // with the fixed 2% margin, before margins were measured).
    Options::default().exclusive(),
    |h| {
        let tab = h.open_e2e().await;
        tab.eval(&js::configure(10, 2, "")).await;
        h.set_worker_offline(true).await;
        tab.set_offline(true).await;
        let r = tab
            .eval(
                r#"
                const plain = await fetch('/api/contacts', { method: 'POST', body: '{}',
                  headers: { 'Content-Type': 'application/json' } }).then(
                  (res) => 'answered ' + res.status, (e) => 'failed: ' + e.message);
                const accepted = [];
                for (let i = 0; i < 15; i++) {
                  const res = await fetch('/api/contacts', {
                    method: 'POST',
                    headers: { 'Content-Type': 'application/json', 'X-Sluice-Lane': 'bulk',
                               'X-Sluice-Group': 'fetched' },
                    body: JSON.stringify({ name: 'fetched ' + i }),
                  });
                  accepted.push({ status: res.status, body: await res.json() });
                }
                return { plain, accepted };
                "#,
            )
            .await;
        assert!(
            r["plain"].as_str().is_some_and(|s| s.starts_with("failed")),
            "a fetch without the opt-in header is not queued, and the page is offline: {r}"
        );
        let accepted = r["accepted"].as_array().expect("answers");
        assert_eq!(accepted.len(), 15);
        for a in accepted {
            assert_eq!(a["status"], 202, "{a}");
            assert!(a["body"]["jobId"].as_str().is_some_and(|s| !s.is_empty()), "{a}");
            assert_eq!(a["body"]["coalesced"], false, "{a}");
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(h.api.total(), 0, "nothing may reach the server while offline");

        tab.set_offline(false).await;
        h.set_worker_offline(false).await;
        let ids: Vec<String> = accepted
            .iter()
            .filter_map(|a| a["body"]["jobId"].as_str().map(str::to_owned))
            .collect();
        let ids_json = serde_json::to_string(&ids).expect("ids");
        let results: Vec<String> = tab.eval_as(&js::settle_ids(&ids_json)).await;
        assert!(js::all_done(&results), "{results:?}");
        let stats = h.api.stats();
        assert_eq!(stats.contacts, 15, "{stats:?}");
        assert_eq!(stats.duplicate_creates, 0, "{stats:?}");
        assert_eq!(stats.creates_without_key, 0, "{stats:?}");
        assert_eq!(stats.rate_limited, 0, "{stats:?}");
        assert!(stats.max_in_window <= 10, "{stats:?}");
        let grouped: u64 = tab
            .eval_as("return (await sluice.jobs('fetched')).length;")
            .await;
        assert_eq!(grouped, 15, "X-Sluice-Group put them in one group");
    }
);

e2e!(
    /// A page's bodies, read for an `enqueueMany` from one `JSON.stringify` of all its jobs:
    /// an object arrives as the same JSON value (floats, escapes and nesting included), a
    /// string as it is; a body JSON cannot carry, or would carry as something else, refuses the
    /// whole call with the job's place and the reason, and nothing of it is queued.
    a_many_jobs_bodies_arrive_as_the_page_wrote_them_and_bad_ones_name_their_job,
    60,
    |h| {
        let tab = h.open_e2e().await;
        tab.eval(&js::configure(50, 4, "")).await;
        let r = tab
            .eval(
                r#"
                const grab = async (p) => {
                  try { await p; return null; } catch (e) { return e.message; }
                };
                const odd = {
                  name: 'odd', half: 1.5, big: 1e21, tiny: 1e-7, third: 1 / 3, neg: -42,
                  huge: 18446744073709551616, text: 'quote " slash \\ line\u2028 tab\t é 😀',
                  nested: { list: [1, 'two', { three: null }, [], {}], yes: true },
                };
                const jobs = [
                  { url: '/api/contacts', kind: 'create', body: odd },
                  { url: '/api/contacts', kind: 'create', body: '{"name":"as text","kept":"x"}' },
                  { url: '/api/contacts', kind: 'create', body: { name: 'plain ' + 1 } },
                ];
                const before = (await sluice.snapshot()).counts.queued;
                const refused = {
                  blob: await grab(sluice.enqueueMany([jobs[2], { url: '/api/contacts',
                    method: 'POST', body: new Blob(['x']) }])),
                  date: await grab(sluice.enqueueMany([jobs[2], jobs[2], { url: '/api/contacts',
                    method: 'POST', body: new Date(0) }])),
                  bigint: await grab(sluice.enqueueMany([jobs[2], { url: '/api/contacts',
                    method: 'POST', body: { n: 10n } }])),
                  notAJob: await grab(sluice.enqueueMany([jobs[2], 'a job'])),
                  unknownField: await grab(sluice.enqueueMany([{ url: '/api/contacts',
                    metod: 'POST' }])),
                  oneBigint: await grab(sluice.enqueue({ url: '/api/contacts', method: 'POST',
                    body: { n: 10n } })),
                };
                const after = (await sluice.snapshot()).counts.queued;
                const many = await sluice.enqueueMany(jobs, 'bodies');
                const outcomes = await Promise.all(many.ids.map((id) => sluice.done(id)));
                const answered = outcomes.map((o) => JSON.parse(o.body));
                const same = (a, b) => {
                  if (typeof a !== 'object' || a === null || typeof b !== 'object' || b === null)
                    return Object.is(a, b);
                  const ka = Object.keys(a), kb = Object.keys(b);
                  return ka.length === kb.length && ka.every((k) => same(a[k], b[k]));
                };
                const { id: _id, ...stored } = answered[0];
                return {
                  refused, queuedBefore: before, queuedAfter: after,
                  oddArrivedAsWritten: same(stored, odd), odd: stored,
                  text: answered[1], plain: answered[2],
                };
                "#,
            )
            .await;
        let refused = &r["refused"];
        let says = |what: &str, parts: &[&str]| {
            let message = refused[what].as_str().unwrap_or_default();
            for part in parts {
                assert!(message.contains(part), "{what}: {message:?} lacks {part:?}: {r}");
            }
        };
        says("blob", &["job 1: ", "a body must be a string or plain data"]);
        says("date", &["job 2: ", "a body must be a string or plain data"]);
        says("bigint", &["job 1: body: ", "BigInt"]);
        says("notAJob", &["job 1: ", "a job is an object"]);
        says("unknownField", &["job 0: ", "unknown field `metod`"]);
        says("oneBigint", &["body: ", "BigInt"]);
        assert_eq!(
            r["queuedBefore"], r["queuedAfter"],
            "a refused call queues nothing: {r}"
        );
        assert_eq!(r["oddArrivedAsWritten"], true, "{r}");
        assert_eq!(r["text"]["name"], "as text", "{r}");
        assert_eq!(r["text"]["kept"], "x", "{r}");
        assert_eq!(r["plain"]["name"], "plain 1", "{r}");
    }
);
