//! What is sent, and in which order: one record per idempotency key, coalesced patches, per-key
//! order across lanes, and lanes with aging during a bulk job.

use std::time::Duration;

use serde_json::Value;
use sluice::api::{ApiConfig, ScriptedResponse};

use crate::e2e;
use crate::support::{
    cpu_note, js, report, test_api_config, BrowserHarness, Options, PageScript, Tab,
};

e2e!(
    /// Scenario 4: the server applies a create but its response never comes. The worker's
    /// attempt times out, the retry carries the same Idempotency-Key, and exactly one record
    /// exists.
    a_create_whose_response_is_lost_is_retried_with_the_same_key_and_applied_once,
    60,
    |h| {
        a_create_whose_answer_is_lost_is_retried_with_its_key_and_applied_once(h).await;
    }
);

/// The lost answer of scenario 4, written once for both browsers (Firefox's test runs it
/// too).
pub async fn a_create_whose_answer_is_lost_is_retried_with_its_key_and_applied_once(
    h: &impl BrowserHarness,
) {
    h.api()
        .push_script(
            ScriptedResponse::apply_then_hang(Some(10_000))
                .for_request(Some("POST"), Some("/api/contacts")),
        )
        .expect("script");
    let tab = h.open_e2e().await;
    tab.eval(&js::configure(
        50,
        4,
        "retry: { baseDelayMs: 50, maxDelayMs: 200, timeoutMs: 800 }",
    ))
    .await;
    let r = tab
        .eval(
            r#"
            const job = await sluice.enqueue({
              url: '/api/contacts', kind: 'create', lane: 'interactive',
              body: { name: 'Once Only' },
            });
            const outcome = await job.done;
            const [listed] = (await sluice.jobs()).filter((j) => j.id === job.id);
            return { status: outcome.status, headers: outcome.headers, attempts: listed.attempts };
            "#,
        )
        .await;
    let creates = h.arrivals_where(|a| a.method == "POST" && a.path == "/api/contacts");
    assert_eq!(creates.len(), 2, "one lost attempt, one retry: {creates:?}");
    assert!(creates[0].hung && creates[0].applied, "{creates:?}");
    assert!(creates[0].idempotency_key.is_some(), "{creates:?}");
    assert_eq!(
        creates[1].idempotency_key, creates[0].idempotency_key,
        "the retry must carry the same key: {creates:?}"
    );
    assert!(
        !creates[1].applied,
        "the retry must not apply again: {creates:?}"
    );
    // The server's stored answer, replayed.
    assert_eq!(r["status"], 200, "{r}");
    assert_eq!(r["headers"]["idempotent-replayed"], "true", "{r}");
    assert_eq!(r["attempts"], 2, "{r}");
    // Not long before the timeout: the first attempt was given its 800 ms, counted from
    // before it reached the server (how long before depends on the machine's load).
    let waited = creates[1].at_ms - creates[0].at_ms;
    report(&format!(
        "lost response: retried {waited:.0} ms after the first arrival"
    ));
    assert!(waited >= 600.0, "retried after only {waited:.0} ms");
    // One key, applied once, one contact; and never above the page's limit of 50 a second.
    h.assert_each_applied_once(1, 50);
}

/// Creates one contact through the queue and returns its id.
async fn create_contact(tab: &Tab, name: &str) -> u64 {
    let body: String = tab
        .eval_as(&format!(
            "const job = await sluice.enqueue({{ url: '/api/contacts', kind: 'create', \
             lane: 'interactive', body: {{ name: '{name}' }} }}); \
             return (await job.done).body;"
        ))
        .await;
    let v: Value = serde_json::from_str(&body).expect("JSON contact");
    v["id"].as_u64().expect("contact id")
}

e2e!(
    /// An `enqueue` whose reply is lost is sent again by the client, naming the same job (its
    /// id is fixed before the first send), and the worker answers with the job it saved the
    /// first time instead of saving a second one: for every kind, for `enqueueMany`, and for a
    /// patch that was folded into an earlier one which has been sent since.
    an_enqueue_sent_again_after_a_lost_reply_is_saved_once_for_every_kind,
    60,
    |h| {
        // Unanswered enqueues are sent again after 1 s (10/3 of 300 ms).
        let tab = h.open_e2e_with("resendAfterMs=300").await;
        // Swallows the next `dropReplies` enqueue replies before the client sees them, whether
        // they come as events or over the page's port (its listener goes first, installed
        // before the client makes its port).
        tab.eval(
            r#"
            window.dropped = [];
            window.dropReplies = 0;
            const swallow = (event) => {
              let m = event.data;
              if (typeof m === 'string') { try { m = JSON.parse(m); } catch (_) { return; } }
              const enqueued = m && m.type === 'reply' && m.body
                && (m.body.type === 'enqueued' || m.body.type === 'enqueuedMany');
              if (enqueued && window.dropReplies > 0) {
                window.dropReplies--;
                window.dropped.push(m);
                event.stopImmediatePropagation();
              }
            };
            navigator.serviceWorker.addEventListener('message', swallow, { capture: true });
            const Channel = window.MessageChannel;
            window.MessageChannel = class extends Channel {
              constructor() { super(); this.port1.addEventListener('message', swallow); }
            };
            "#,
        )
        .await;
        tab.eval(&js::configure(50, 4, "")).await;
        let lost = tab
            .eval(
                r#"
                const base = await sluice.enqueue({ url: '/api/contacts', kind: 'create',
                  body: { name: 'base' } });
                await base.done;
                const jobs = {
                  create: { url: '/api/contacts', kind: 'create', body: { name: 'second' } },
                  patch: { url: '/api/contacts/1', method: 'PATCH', kind: 'patch',
                           key: 'contact:1', body: { owner: 'Ada' } },
                  custom: { url: '/api/echo', method: 'POST', body: { n: 1 } },
                  delete: { url: '/api/contacts/2', method: 'DELETE', kind: 'delete',
                            key: 'contact:2' },
                };
                const out = {};
                const listed = async (id) => (await sluice.jobs()).filter((j) => j.id === id).length;
                for (const [kind, job] of Object.entries(jobs)) {
                  window.dropReplies = 1;
                  const e = await sluice.enqueue(job);
                  const outcome = await e.done;
                  const first = window.dropped[window.dropped.length - 1];
                  out[kind] = { id: e.id, firstReplyId: first && first.body.id,
                                status: outcome.status, listed: await listed(e.id) };
                }
                window.dropReplies = 1;
                const many = await sluice.enqueueMany([1, 2, 3].map((n) => ({
                  url: '/api/contacts', kind: 'create', body: { name: 'many ' + n } })), 'many');
                await Promise.all(many.ids.map((id) => sluice.done(id)));
                const firstMany = window.dropped[window.dropped.length - 1];
                out.many = { ids: many.ids, firstReplyIds: firstMany && firstMany.body.ids,
                             listed: (await sluice.jobs('many')).length };
                out.dropped = window.dropped.length;
                return out;
                "#,
            )
            .await;
        report(&format!("lost enqueue replies: {lost}"));
        assert_eq!(lost["dropped"], 5, "every first reply was swallowed: {lost}");
        for kind in ["create", "patch", "custom", "delete"] {
            let r = &lost[kind];
            assert_eq!(r["firstReplyId"], r["id"], "{kind}: the same job both times: {lost}");
            assert_eq!(r["listed"], 1, "{kind}: saved once: {lost}");
        }
        assert_eq!(lost["many"]["firstReplyIds"], lost["many"]["ids"], "{lost}");
        assert_eq!(lost["many"]["listed"], 3, "{lost}");

        // A patch folded into an earlier one, which is then sent: the same enqueue arriving
        // again is answered with the job that carried it, and nothing is sent again.
        h.api
            .push_script(ScriptedResponse {
                delay_ms: Some(1_500),
                ..ScriptedResponse::default().for_request(Some("PATCH"), Some("/api/contacts/1"))
            })
            .expect("script");
        let folded = tab
            .eval(
                r#"
                const patch = (step, id) => ({ id, url: '/api/contacts/1', method: 'PATCH',
                  kind: 'patch', key: 'contact:1', body: { step } });
                // In flight for 1.5 s: later patches of the key wait behind it, unsent.
                const ahead = await sluice.enqueue(patch(0));
                await e2e.sleep(200);
                const carrier = await sluice.enqueue(patch(1));
                const folded = await sluice.enqueue(patch(2, 'folded-into-carrier'));
                await ahead.done;
                await carrier.done;
                const job = patch(2, 'folded-into-carrier');
                job.url = location.origin + job.url;
                job.body = JSON.stringify(job.body);
                navigator.serviceWorker.controller.postMessage(JSON.stringify(
                  { requestId: 'sent-again', type: 'enqueue', job }));
                const again = await e2e.waitFor((m) => m.requestId === 'sent-again', 5000);
                await e2e.sleep(500);
                return { carrier: carrier.id, folded: { id: folded.id, coalesced: folded.coalesced },
                         again: again.body || again.error,
                         listed: (await sluice.jobs()).filter((j) => j.id === 'folded-into-carrier').length };
                "#,
            )
            .await;
        report(&format!("folded enqueue sent again: {folded}"));
        assert_eq!(folded["folded"]["id"], folded["carrier"], "{folded}");
        assert_eq!(folded["folded"]["coalesced"], true, "{folded}");
        assert_eq!(folded["again"]["type"], "enqueued", "{folded}");
        assert_eq!(folded["again"]["id"], folded["carrier"], "{folded}");
        assert_eq!(folded["again"]["coalesced"], true, "{folded}");
        assert_eq!(folded["listed"], 0, "{folded}");

        let count = |method: &str, path: &str| {
            h.arrivals_where(|a| a.method == method && a.path == path)
                .len()
        };
        assert_eq!(count("POST", "/api/contacts"), 5, "base, second and three of many");
        assert_eq!(h.api.stats().duplicate_creates, 0);
        assert_eq!(count("PATCH", "/api/contacts/1"), 3, "one, then the one ahead and the carrier");
        assert_eq!(count("POST", "/api/echo"), 1);
        assert_eq!(count("DELETE", "/api/contacts/2"), 1);
    }
);

e2e!(
    /// Scenario 5a: five patches to one record enqueued while the budget is paused by a 429
    /// become one request carrying the last value of every field.
    patches_to_one_record_during_a_pause_coalesce_into_one_request,
    60,
    |h| {
        let tab = h.open_e2e().await;
        tab.eval(&js::configure(50, 4, "")).await;
        let id = create_contact(&tab, "Ada").await;
        h.api
            .push_script(
                ScriptedResponse::status(429)
                    .with_header("Retry-After", "2")
                    .for_request(Some("POST"), Some("/api/ping")),
            )
            .expect("script");
        tab.eval(
            "await sluice.enqueue({ url: '/api/ping', method: 'POST', body: 'ping' });\
             for (;;) {\
               const s = await sluice.snapshot();\
               if (s.budgets[0].pausedUntil) break;\
               await e2e.sleep(10);\
             }",
        )
        .await;
        let r = tab
            .eval(&format!(
                r#"
                const patch = (body) => sluice.enqueue({{
                  url: '/api/contacts/{id}', kind: 'patch', method: 'PATCH', key: 'contact:{id}',
                  body,
                }});
                const all = [];
                for (const body of [
                  {{ name: 'v1' }}, {{ name: 'v2', email: 'ada@example.com' }}, {{ name: 'v3' }},
                  {{ title: 'Countess' }}, {{ name: 'v5' }},
                ]) all.push(await patch(body));
                const outcome = await all[0].done;
                return {{
                  ids: all.map((e) => e.id), coalesced: all.map((e) => e.coalesced),
                  status: outcome.status,
                  paused: (await sluice.snapshot()).budgets[0].pausedUntil,
                }};
                "#
            ))
            .await;
        let ids: Vec<String> = serde_json::from_value(r["ids"].clone()).expect("ids");
        assert!(ids.iter().all(|i| *i == ids[0]), "one job carries all five: {r}");
        assert_eq!(
            r["coalesced"],
            serde_json::json!([false, true, true, true, true]),
            "{r}"
        );
        assert_eq!(r["status"], 200, "{r}");
        let path = format!("/api/contacts/{id}");
        let patches = h.arrivals_where(|a| a.method == "PATCH" && a.path == path);
        assert_eq!(patches.len(), 1, "{patches:?}");
        let rejected = h.arrivals_where(|a| a.status == 429);
        assert!(
            patches[0].at_ms >= rejected[0].at_ms + 2000.0,
            "the patch went out during the pause: {patches:?} {rejected:?}"
        );
        let contact = h
            .api
            .contacts()
            .into_iter()
            .find(|c| c["id"] == id)
            .expect("the contact");
        assert_eq!(contact["name"], "v5", "{contact}");
        assert_eq!(contact["email"], "ada@example.com", "{contact}");
        assert_eq!(contact["title"], "Countess", "{contact}");
    }
);

e2e!(
    /// Scenario 5b: an interactive patch never overtakes a bulk patch to the same record that is
    /// already in flight; it starts after that one's response and its values win.
    an_interactive_patch_waits_for_an_in_flight_bulk_patch_to_the_same_record,
    60,
    |h| {
        let tab = h.open_e2e().await;
        tab.eval(&js::configure(50, 4, "")).await;
        let id = create_contact(&tab, "Grace").await;
        let path = format!("/api/contacts/{id}");
        h.api
            .push_script(ScriptedResponse {
                delay_ms: Some(800),
                ..ScriptedResponse::default().for_request(Some("PATCH"), Some(&path))
            })
            .expect("script");
        tab.eval(&format!(
            "window.bulkPatch = await sluice.enqueue({{ url: '{path}', kind: 'patch', \
             method: 'PATCH', key: 'contact:{id}', lane: 'bulk', body: {{ name: 'bulk' }} }});"
        ))
        .await;
        h.wait_until("the bulk patch to reach the server", Duration::from_secs(5), || {
            h.api.arrivals().iter().any(|a| a.method == "PATCH")
        })
        .await;
        let r = tab
            .eval(&format!(
                r#"
                const quick = await sluice.enqueue({{
                  url: '{path}', kind: 'patch', method: 'PATCH', key: 'contact:{id}',
                  lane: 'interactive', body: {{ name: 'interactive' }},
                }});
                const [a, b] = await Promise.all([window.bulkPatch.done, quick.done]);
                return {{ coalesced: quick.coalesced, same: quick.id === window.bulkPatch.id,
                          statuses: [a.status, b.status] }};
                "#
            ))
            .await;
        assert_eq!(r["coalesced"], false, "{r}");
        assert_eq!(r["same"], false, "{r}");
        assert_eq!(r["statuses"], serde_json::json!([200, 200]), "{r}");
        let patches = h.arrivals_where(|a| a.method == "PATCH" && a.path == path);
        assert_eq!(patches.len(), 2, "{patches:?}");
        let (bulk, quick) = (&patches[0], &patches[1]);
        assert!(
            quick.at_ms >= bulk.at_ms + 800.0,
            "the interactive patch started {:.0} ms after the bulk one, before its answer",
            quick.at_ms - bulk.at_ms
        );
        let contact = h
            .api
            .contacts()
            .into_iter()
            .find(|c| c["id"] == id)
            .expect("the contact");
        assert_eq!(contact["name"], "interactive", "{contact}");
    }
);

/// The bulk scenario's server: 100 per sliding second, 30 ms round trip.
fn priority_api() -> ApiConfig {
    ApiConfig {
        limit: 100,
        window_ms: 1000,
        latency_ms: 30,
        seed: Some(7),
        ..test_api_config()
    }
}

/// One token interval at 100 per second, in ms.
const TOKEN_INTERVAL_MS: f64 = 10.0;
/// What an interactive start may take beyond one token interval: two IndexedDB commits (the
/// enqueue, then the start), the hops between page, worker and server, and a free slot of the
/// four in flight (each held ~30 ms). Typically 15-25 ms in all on a quiet machine; the rest
/// is for a machine shared with builds. Without the lane it would wait ~10 s behind the bulk
/// job, so this still tells the lanes work; `sluice bench` holds the tight target.
const INTERACTIVE_SLACK_MS: f64 = 60.0;
/// No interactive start may take longer than this, busy machine or not: it is far below the
/// seconds a bulk backlog would hold it without lanes.
const STRUCTURAL_BOUND_MS: f64 = 500.0;

e2e!(
    /// Scenario 6: during a bulk job at the limit, interactive actions start within one token
    /// interval (+ slack) of being enqueued, and a background job within its aging bound.
    lanes_during_a_bulk_job_interactive_at_once_background_within_its_aging_bound,
    90,
    Options::api(priority_api()).exclusive(),
    |h| {
        let tab = h.open_e2e().await;
        // Background rises a lane per second: it outranks fresh bulk work after 2 s, and
        // `aging.bound` (3 steps for background) is 3 s.
        tab.eval(&js::configure(
            100,
            4,
            "aging: { bulkMs: 10000, backgroundMs: 1000 }",
        ))
        .await;
        tab.eval(&js::enqueue_group(1200, "bulk")).await;
        h.wait_until("the bulk job to be under way", Duration::from_secs(10), || {
            h.api.total() >= 150
        })
        .await;
        let offset = h.page_clock_offset_ms(&tab.inner).await.expect("clock");
        let cpu = h.browser.cpu_sample();
        let background_at: f64 = tab
            .eval_as(
                "const at = performance.timeOrigin + performance.now();\
                 await sluice.enqueue({ url: '/api/background', method: 'POST', \
                   lane: 'background', body: { b: 1 } });\
                 return at;",
            )
            .await;
        let samples = 12;
        let enqueued_at: Vec<f64> = tab
            .eval_as(&format!(
                "const at = [];\
                 for (let i = 0; i < {samples}; i++) {{\
                   await e2e.sleep(120 + Math.random() * 200);\
                   const job = {{ url: '/api/interactive/' + i, method: 'POST', \
                     lane: 'interactive', body: {{ i }} }};\
                   at.push(performance.timeOrigin + performance.now());\
                   await sluice.enqueue(job);\
                 }}\
                 return at;"
            ))
            .await;
        h.wait_until("the background job to start", Duration::from_secs(10), || {
            h.api.arrivals().iter().any(|a| a.path == "/api/background")
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        tab.eval("await sluice.cancel('bulk');").await;

        let arrivals = h.api.arrivals();
        let start_of = |path: &str, page_at: f64| {
            let a = arrivals
                .iter()
                .find(|a| a.path == path)
                .unwrap_or_else(|| panic!("{path} never arrived"));
            h.arrival_unix_ms(a) - (page_at - offset)
        };
        let mut latencies: Vec<f64> = enqueued_at
            .iter()
            .enumerate()
            .map(|(i, at)| start_of(&format!("/api/interactive/{i}"), *at))
            .collect();
        let background = start_of("/api/background", background_at);
        latencies.sort_by(f64::total_cmp);
        report(&format!(
            "interactive starts during bulk (ms): {:?}; background after {background:.0} ms; {}",
            latencies.iter().map(|l| l.round()).collect::<Vec<_>>(),
            cpu_note(h, cpu)
        ));
        // The limit first: a 429's pause would hold every start, and a late start must not hide
        // that it came from a breach. The latency failures below name what the server saw, so a
        // stall can be told from a pause.
        let stats = h.api.stats();
        assert_eq!(stats.rate_limited, 0, "{stats:?}");
        assert!(stats.max_in_window <= 100, "{stats:?}");
        // The typical start holds the tight bound; a single one may catch a machine busy with
        // builds, which is the benchmark's business (`sluice bench` prints p95). Without the
        // lane each would wait ~10 s behind the bulk job, far beyond the structural bound.
        let median = latencies[latencies.len() / 2];
        assert!(
            median <= TOKEN_INTERVAL_MS + INTERACTIVE_SLACK_MS,
            "the median interactive start took {median:.1} ms: {latencies:?}"
        );
        let worst = latencies.last().copied().unwrap_or(f64::NAN);
        assert!(
            worst <= STRUCTURAL_BOUND_MS,
            "an interactive start took {worst:.1} ms: {latencies:?}; the server saw {stats:?}"
        );
        // Bulk jobs enqueued earlier outrank it until it has aged by two steps.
        assert!(
            background >= 1000.0,
            "the background job started after {background:.0} ms, ahead of older bulk work"
        );
        assert!(
            background <= 3000.0 + 100.0,
            "the background job waited {background:.0} ms, beyond its aging bound of 3 s; \
             the server saw {stats:?}"
        );
    }
);

e2e!(
    /// Scenario 6, later in the bulk job: once the bulk jobs have waited longer than their
    /// aging steps, an interactive action must still start within a token interval (+ slack),
    /// not behind the rest of the backlog.
    an_interactive_action_is_not_held_behind_a_bulk_backlog_that_has_aged,
    60,
    Options::api(priority_api()).exclusive(),
    |h| {
        let tab = h.open_e2e().await;
        // Short aging steps, so that the backlog ages within the test: bulk jobs rise a lane
        // per second.
        tab.eval(&js::configure(
            100,
            4,
            "aging: { bulkMs: 1000, backgroundMs: 30000 }",
        ))
        .await;
        tab.eval(&js::enqueue_group(800, "bulk")).await;
        // Past two steps: every waiting bulk job now ranks above a fresh interactive one.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let offset = h.page_clock_offset_ms(&tab.inner).await.expect("clock");
        let samples = 6;
        let enqueued_at: Vec<f64> = tab
            .eval_as(&format!(
                "const at = [];\
                 for (let i = 0; i < {samples}; i++) {{\
                   await e2e.sleep(200);\
                   const job = {{ url: '/api/interactive/' + i, method: 'POST', \
                     lane: 'interactive', body: {{ i }} }};\
                   at.push(performance.timeOrigin + performance.now());\
                   await sluice.enqueue(job);\
                 }}\
                 return at;"
            ))
            .await;
        let paths: Vec<String> = (0..samples)
            .map(|i| format!("/api/interactive/{i}"))
            .collect();
        h.wait_until("every interactive request", Duration::from_secs(20), || {
            let arrivals = h.api.arrivals();
            paths.iter().all(|p| arrivals.iter().any(|a| &a.path == p))
        })
        .await;
        let left: u64 = tab
            .eval_as("return (await sluice.cancel('bulk')).length;")
            .await;
        let arrivals = h.api.arrivals();
        let latencies: Vec<f64> = enqueued_at
            .iter()
            .zip(&paths)
            .map(|(at, path)| {
                let a = arrivals
                    .iter()
                    .find(|a| &a.path == path)
                    .expect("arrived");
                (h.arrival_unix_ms(a) - (at - offset)).round()
            })
            .collect();
        report(&format!(
            "interactive starts behind an aged backlog (ms): {latencies:?}; {left} bulk jobs \
             were still waiting"
        ));
        let mut sorted = latencies.clone();
        sorted.sort_by(f64::total_cmp);
        assert!(
            sorted[sorted.len() / 2] <= TOKEN_INTERVAL_MS + INTERACTIVE_SLACK_MS,
            "interactive starts waited {latencies:?} ms"
        );
        assert!(
            latencies.iter().all(|l| *l <= STRUCTURAL_BOUND_MS),
            "interactive starts waited {latencies:?} ms"
        );
    }
);
