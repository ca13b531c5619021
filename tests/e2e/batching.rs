//! Issue 38, batch endpoints: ready jobs of a budget's batch rule go together to the demo
//! API's batch endpoints (one arrival each against its limit), each job keeping its own
//! `done` and outcome. The engine's side (grouping, per-item outcomes, retries, order, both
//! budgets) is tested in `shared/tests/batching.rs`.

use std::time::Duration;

use serde_json::{Map, Value};
use sluice::api::ConfigPatch;

use crate::e2e;
use crate::support::{js, report, BrowserHarness, PageScript};

e2e!(
    /// 2,000 edits of seeded contacts through the HubSpot-shaped `batch/update` endpoint of an
    /// API that allows 10 requests a second, with 2% of items answered 503 on their own: every
    /// edit is applied once, in about 2.5 s (without batching the limit alone needs 200 s), with
    /// no 429, the failed items retried alone in later batches.
    two_thousand_edits_go_through_the_batch_endpoint_in_seconds,
    90,
    |h| {
        const CONTACTS: u64 = 2_000;
        h.api
            .update_config(&ConfigPatch {
                limit: Some(10),
                latency_ms: Some(50),
                batch_item_fail_rate: Some(0.02),
                seed: Some(38),
                ..Default::default()
            })
            .expect("server config");
        h.api.seed_contacts(CONTACTS as usize, &Map::new());
        let tab = h.open_e2e().await;
        let run: Value = tab
            .eval(
                r#"
                await e2e.configure({ budgets: [{
                  name: 'api', windows: [{ limit: 10, lengthMs: 1000 }], concurrency: 4,
                  matchPrefixes: [location.origin + '/api/'],
                  batches: [{ method: 'PATCH', url: '/api/contacts/:id', shape: 'inputs',
                              endpoint: '/api/contacts/batch/update', maxItems: 100 }],
                }] });
                const jobs = Array.from({ length: 2000 }, (_, i) => ({
                  url: '/api/contacts/' + (i + 1), method: 'PATCH', kind: 'patch', lane: 'bulk',
                  key: 'contact:' + (i + 1), body: { properties: { owner: 'Maya Patel' } } }));
                const started = performance.now();
                const r = await sluice.enqueueMany(jobs, 'owners');
                const acknowledged = performance.now() - started;
                const early = await sluice.snapshot();
                const outcomes = await Promise.all(r.ids.map((id) => sluice.done(id).then(
                  (o) => o.status, (e) => e.code)));
                const finished = performance.now() - started;
                const counts = {};
                for (const o of outcomes) counts[o] = (counts[o] || 0) + 1;
                return { acknowledged, finished, counts, earlyEtaMs: early.etaMs,
                         group: await sluice.group('owners') };
                "#,
            )
            .await;
        let stats = h.api.stats();
        let twice = (1..=CONTACTS).filter(|&id| h.api.patches_of(id) > 1).count();
        let never = (1..=CONTACTS).filter(|&id| h.api.patches_of(id) == 0).count();
        let failed_items = stats.batch_items - stats.batch_items_applied;
        report(&format!(
            "2,000 edits: {run}; {} requests ({} batches carrying {} items, {} of them answered \
             503 and retried), {} 429s, at most {} in a second; patched twice {twice}, never \
             {never}",
            stats.total, stats.batches, stats.batch_items, failed_items, stats.rate_limited,
            stats.max_in_window
        ));
        assert_eq!(run["counts"]["200"], 2000, "{run}");
        assert_eq!((twice, never), (0, 0));
        assert_eq!(stats.rate_limited, 0);
        assert!(stats.max_in_window <= 10, "{stats:?}");
        assert!(failed_items > 0, "no item failed: the retries were not exercised");
        assert_eq!(stats.batch_items_applied, 2000);
        assert!(
            stats.total <= 30,
            "{} requests for 2,000 edits in batches of 100",
            stats.total
        );
        let finished = run["finished"].as_f64().unwrap_or(f64::MAX);
        assert!(finished < 3_000.0, "2,000 edits took {finished:.0} ms");
        let eta = run["earlyEtaMs"].as_f64().unwrap_or(f64::MAX);
        assert!(eta < 10_000.0, "the ETA counted requests per job: {run}");
    }
);

e2e!(
    /// 100 creates through a Graph-shaped `$batch` endpoint (20 sub-requests a request), one
    /// sub-request answered 429 with `Retry-After: 1` inside the 200: the budget pauses as for
    /// any 429, that create goes again after the pause, and every contact is created once
    /// (each sub-request carried its create's own idempotency key).
    a_sub_request_429_in_a_graph_batch_pauses_and_every_create_lands_once,
    60,
    |h| {
        h.api
            .update_config(&ConfigPatch {
                limit: Some(10),
                latency_ms: Some(30),
                batch_sub_rate_limited: Some(1),
                ..Default::default()
            })
            .expect("server config");
        let tab = h.open_e2e().await;
        let run: Value = tab
            .eval(
                r#"
                await e2e.configure({ budgets: [{
                  name: 'api', windows: [{ limit: 10, lengthMs: 1000 }], concurrency: 4,
                  matchPrefixes: [location.origin + '/api/'],
                  batches: [{ method: 'POST', url: '/api/contacts', shape: 'requests',
                              endpoint: '/api/$batch', maxItems: 20 }],
                }] });
                const jobs = Array.from({ length: 100 }, (_, i) => ({
                  url: '/api/contacts', kind: 'create', lane: 'bulk',
                  body: { name: 'graph ' + i } }));
                const r = await sluice.enqueueMany(jobs, 'graph');
                let paused = null;
                const watching = (async () => {
                  for (let i = 0; i < 300 && !paused; i++) {
                    const s = await sluice.snapshot();
                    paused = s.budgets[0].pauseReason || null;
                    await e2e.sleep(10);
                  }
                })();
                const outcomes = await Promise.all(r.ids.map((id) => sluice.done(id).then(
                  (o) => o.status, (e) => e.code)));
                await watching;
                const counts = {};
                for (const o of outcomes) counts[o] = (counts[o] || 0) + 1;
                const s = await sluice.snapshot();
                return { counts, paused, rateLimited: s.budgets[0].rateLimited };
                "#,
            )
            .await;
        let stats = h.api.stats();
        let once = (0..100)
            .filter(|i| h.api.creates_named(&format!("graph {i}")) == 1)
            .count();
        report(&format!(
            "100 creates through $batch: {run}; {} requests ({} batches, {} items), {} contacts \
             created once of 100, duplicate creates {}",
            stats.total, stats.batches, stats.batch_items, once, stats.duplicate_creates
        ));
        assert_eq!(run["counts"]["201"], 100, "{run}");
        assert_eq!(once, 100);
        assert_eq!(stats.duplicate_creates, 0);
        let reason = run["paused"].as_str().unwrap_or_default();
        assert!(reason.contains("429"), "no pause for the sub-request's 429: {run}");
        // Five batches of 20, and the refused create again after the pause (alone: nothing
        // else is left to go with it).
        assert_eq!(stats.batches, 5, "{stats:?}");
        assert_eq!(stats.total, 6, "{stats:?}");
    }
);

e2e!(
    /// The worker is stopped while an `array` batch of creates is at the server (applied there,
    /// its answer still on the way): its successor sends the same members again under the same
    /// batch key, the API answers from what it kept, and every contact is created once. (That
    /// the members stay together when another job would take them as companions is shown
    /// without a browser: `shared/tests/batching.rs`, `a_restart_sends_...`.)
    a_worker_stopped_while_a_batch_is_out_sends_the_same_batch_again,
    90,
    |h| {
        h.api
            .update_config(&ConfigPatch {
                limit: Some(10),
                latency_ms: Some(1_500),
                ..Default::default()
            })
            .expect("server config");
        let tab = h.open_e2e_with("keepAliveMs=300").await;
        tab.eval(
            r#"
            await e2e.configure({ budgets: [{
              name: 'api', windows: [{ limit: 10, lengthMs: 1000 }], concurrency: 4,
              matchPrefixes: [location.origin + '/api/'],
              batches: [{ method: 'POST', url: '/api/contacts', shape: 'array',
                          endpoint: '/api/contacts/batch', maxItems: 20 }],
            }] });
            const jobs = Array.from({ length: 60 }, (_, i) => ({
              url: '/api/contacts', kind: 'create', lane: 'bulk', body: { name: 'kept ' + i } }));
            window.keptIds = (await sluice.enqueueMany(jobs, 'kept')).ids;
            "#,
        )
        .await;
        h.wait_until("a batch at the server", Duration::from_secs(10), || {
            h.api.stats().batches >= 1
        })
        .await;
        let starts = h.worker_starts();
        h.stop_worker().await;
        let at_stop = h.api.stats();
        // A page's next job wakes the queue: an interactive create, which goes first and
        // would take the stopped batch's members as its companions if they were free.
        tab.eval(
            "const j = await sluice.enqueue({ url: '/api/contacts', kind: 'create', \
               lane: 'interactive', body: { name: 'kept first' } }); \
             window.keptIds.push(j.id); return null;",
        )
        .await;
        h.wait_until("the successor starts", Duration::from_secs(20), || {
            h.worker_starts() > starts
        })
        .await;
        let results: Vec<String> = tab.eval_as(&js::settle_ids("window.keptIds")).await;
        let stats = h.api.stats();
        let once = (0..60)
            .filter(|i| h.api.creates_named(&format!("kept {i}")) == 1)
            .count();
        report(&format!(
            "stopped with {} batches at the server; then {} requests in all ({} batches, {} \
             replayed from the batch key), {once} of 60 created once",
            at_stop.batches, stats.total, stats.batches, stats.replays
        ));
        assert!(js::all_done(&results), "{results:?}");
        assert_eq!(once, 60, "a create was applied twice or never");
        assert_eq!(h.api.creates_named("kept first"), 1);
        assert!(stats.replays >= 1, "no batch went again under its key: {stats:?}");
    }
);
