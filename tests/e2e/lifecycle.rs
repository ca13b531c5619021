//! The worker's life outside the happy path: restarts, offline, Background Sync, several
//! tabs, reloads, and the client keeping the worker awake.

use std::time::Duration;

use serde_json::Value;
use sluice::api::ApiConfig;
use sluice_shared::config::{BudgetConfig, EngineConfig, Window};
use sluice_shared::engine::Engine;
use sluice_shared::job::{JobKind, JobSpec, Lane};
use sluice_shared::random::Rng;

use crate::e2e;
use crate::support::js::{enqueue_group as enqueue_group_js, settle_group as settle_group_js};
use crate::support::{report, BrowserHarness, Options, PageScript};

e2e!(a_stopped_worker_resumes_the_queue_from_storage, 90, |h| {
    let tab = h.open_e2e_with("keepAliveMs=300").await;
    // A job that was sending when the worker stopped has an unknown outcome: it is sent again
    // (same key) once its attempt timed out, so the timeout bounds this test.
    tab.eval(
        "await e2e.configure({ budgets: [{ name: 'api', windows: [{ limit: 5, lengthMs: 1000 }], \
         concurrency: 2, matchPrefixes: [location.origin + '/api/'] }], \
         retry: { baseDelayMs: 50, maxDelayMs: 1000, timeoutMs: 2000 } });",
    )
    .await;
    let ids: Vec<String> = tab.eval_as(&enqueue_group_js(15, "restart")).await;
    assert_eq!(ids.len(), 15);
    h.wait_until("3 contacts", Duration::from_secs(10), || {
        h.api.contacts().len() >= 3
    })
    .await;
    let starts = h.worker_starts();
    h.stop_worker().await;

    // The client's keep-alives wake the worker, which picks the queue up from IndexedDB. A job
    // that ended just before the stop may have lost its broadcast: the client must notice from
    // the statuses (at the latest the one the quiet queue sends last), well before its 15 s
    // "no news" fallback.
    let settling = std::time::Instant::now();
    let results: Vec<String> = tab.eval_as(&settle_group_js("restart")).await;
    let took = settling.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "settling after the restart took {took:?}"
    );
    assert!(
        results.iter().all(|r| r == "done 201" || r == "done 200"),
        "{results:?}"
    );
    assert!(
        h.worker_starts() > starts,
        "the worker was not started again"
    );
    let stats = h.api.stats();
    assert_eq!(stats.contacts, 15, "{stats:?}");
    assert_eq!(stats.duplicate_creates, 0, "{stats:?}");
    assert_eq!(stats.creates_without_key, 0, "{stats:?}");
});

e2e!(
    an_offline_worker_holds_jobs_until_the_network_returns,
    90,
    |h| {
        let tab = h.open_e2e().await;
        tab.eval("await e2e.configure();").await;
        h.set_worker_offline(true).await;
        tab.eval(
        r#"
        const job = await sluice.enqueue({ url: '/api/contacts', kind: 'create', body: { name: 'Offline' } });
        window.offlineDone = job.done.then((o) => o.status, (e) => 'failed: ' + e.message);
        "#,
    )
    .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            h.api.total(),
            0,
            "nothing may reach the server while offline"
        );
        let status = tab.eval("return await sluice.snapshot();").await;
        assert_eq!(status["counts"]["done"], 0, "{status}");
        assert_eq!(
            status["counts"]["failed"], 0,
            "an offline job must wait, not fail: {status}"
        );
        assert_eq!(status["offline"], true, "{status}");

        h.set_worker_offline(false).await;
        // Going online fires the sync the worker registered; fire one ourselves as well.
        h.dispatch_sync("sluice", false).await;
        let outcome = tab.eval("return await window.offlineDone;").await;
        assert_eq!(outcome, 201, "{outcome}");
        assert_eq!(h.api.contacts().len(), 1);
    }
);

e2e!(a_sync_event_with_nothing_to_do_is_harmless, 60, |h| {
    let tab = h.open_e2e().await;
    tab.eval("await e2e.configure();").await;
    h.dispatch_sync("sluice", false).await;
    h.dispatch_sync("sluice", true).await;
    let r = tab
        .eval(
            "const job = await sluice.enqueue({ url: '/api/ping', method: 'POST', body: 'x' }); \
             return (await job.done).status;",
        )
        .await;
    assert_eq!(r, 200);
});

e2e!(a_second_tab_sees_the_queue_and_can_cancel_it, 90, |h| {
    let a = h.open_e2e().await;
    a.eval(
        "await e2e.configure({ budgets: [{ name: 'api', windows: [{ limit: 2, lengthMs: 1000 }], \
         concurrency: 1, matchPrefixes: [location.origin + '/api/'] }] });",
    )
    .await;
    let b = h.open_e2e().await;
    let ids: Vec<String> = a.eval_as(&enqueue_group_js(8, "g")).await;
    let cancelled: Vec<String> = b.eval_as("return await sluice.cancel('g');").await;
    assert!(!cancelled.is_empty(), "nothing was left to cancel");
    assert!(
        cancelled.iter().all(|id| ids.contains(id)),
        "{cancelled:?} vs {ids:?}"
    );

    let results: Vec<String> = a.eval_as(&settle_group_js("g")).await;
    let n_cancelled = results.iter().filter(|r| *r == "cancelled").count();
    let n_done = results.iter().filter(|r| r.starts_with("done")).count();
    assert_eq!(n_cancelled, cancelled.len(), "{results:?}");
    assert_eq!(n_done + n_cancelled, 8, "{results:?}");
    assert_eq!(
        h.api.contacts().len(),
        n_done,
        "cancelled jobs must not be sent"
    );

    // Tab B heard about tab A's jobs. Its broadcast is posted with tab A's, which settled the
    // group: it may still be on its way to tab B (seen on a loaded machine), so B waits for it
    // a little.
    let seen: Vec<Value> = b
        .eval_as(
            "const seen = () => e2e.broadcasts.filter((m) => m.type === 'jobs')\
               .flatMap((m) => m.updates).filter((u) => u.groupId === 'g');\
             const until = Date.now() + 2000;\
             while (!seen().some((u) => u.state === 'cancelled') && Date.now() < until) {\
               await e2e.sleep(20);\
             }\
             return seen();",
        )
        .await;
    assert!(
        seen.iter().any(|u| u["state"] == "cancelled"),
        "tab B saw no cancellations: {seen:?}"
    );
    a.screenshot("tab-a").await;
    b.close().await;
});

e2e!(a_reload_finds_the_queue_and_its_outcomes, 90, |h| {
    let tab = h.open_e2e().await;
    tab.eval(
        "await e2e.configure({ budgets: [{ name: 'api', windows: [{ limit: 3, lengthMs: 1000 }], \
         concurrency: 1, matchPrefixes: [location.origin + '/api/'] }] });",
    )
    .await;
    let ids: Vec<String> = tab.eval_as(&enqueue_group_js(6, "r")).await;
    tab.reload().await;
    tab.wait_ready().await;
    let listed: Vec<String> = tab
        .eval_as("return (await sluice.jobs('r')).map((j) => j.id);")
        .await;
    let mut sorted = listed.clone();
    sorted.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(sorted, want, "jobs('r') after reload");
    let ids_json = serde_json::to_string(&ids).unwrap();
    let statuses: Vec<u16> = tab
        .eval_as(&format!(
            "return await Promise.all({ids_json}.map(async (id) => (await sluice.done(id)).status));"
        ))
        .await;
    assert!(statuses.iter().all(|s| *s == 201), "{statuses:?}");
    assert_eq!(h.api.contacts().len(), 6);
});

e2e!(
    the_client_keeps_the_worker_awake_only_while_work_is_pending,
    90,
    |h| {
        let tab = h.open_e2e_with("keepAliveMs=250").await;
        tab.eval(
        r#"
        window.sent = [];
        const post = ServiceWorker.prototype.postMessage;
        ServiceWorker.prototype.postMessage = function (message, ...rest) {
          try { window.sent.push(JSON.parse(message).type); } catch (_) { window.sent.push(typeof message); }
          return post.call(this, message, ...rest);
        };
        await e2e.configure({ budgets: [{ name: 'api', windows: [{ limit: 4, lengthMs: 1000 }],
          concurrency: 1, matchPrefixes: [location.origin + '/api/'] }] });
        "#,
    )
    .await;
        let results: Vec<String> = {
            tab.eval(&enqueue_group_js(8, "k")).await;
            tab.eval_as(&settle_group_js("k")).await
        };
        assert!(results.iter().all(|r| r.starts_with("done")), "{results:?}");
        let count = r#"return window.sent.filter((t) => t === 'keepAlive').length;"#;
        let during: u64 = tab.eval_as(count).await;
        assert!(
            during >= 3,
            "only {during} keep-alives while ~2 s of work was pending"
        );
        // Idle now: at most a last one in flight, then silence.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let settled: u64 = tab.eval_as(count).await;
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let later: u64 = tab.eval_as(count).await;
        assert_eq!(
            settled, later,
            "keep-alives went on after the queue was empty"
        );
    }
);

e2e!(
    /// Also a regression test for the worker: started while offline, it must still load its
    /// wasm, and a failed start must not leave it broken once the network is back.
    a_worker_restarted_while_offline_stays_offline,
    60,
    |h| {
        let tab = h.open_e2e_with("keepAliveMs=300").await;
        tab.eval("await e2e.configure();").await;
        h.set_worker_offline(true).await;
        tab.eval(
            r#"
            const job = await sluice.enqueue({ url: '/api/contacts', kind: 'create', body: { name: 'Restarted' } });
            window.restartedDone = job.done.then((o) => o.status, (e) => 'failed: ' + e.message);
            "#,
        )
        .await;
        let starts = h.worker_starts();
        h.stop_worker().await;
        // Keep-alives wake it again; the harness must take the new instance offline before it runs.
        h.wait_until(
            "the worker to start again",
            std::time::Duration::from_secs(10),
            || h.worker_starts() > starts && h.worker_running(),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            h.api.total(),
            0,
            "a restarted worker reached the server while offline"
        );

        h.set_worker_offline(false).await;
        let outcome = tab.eval("return await window.restartedDone;").await;
        assert_eq!(outcome, 201, "{outcome}");
        assert_eq!(h.api.stats().duplicate_creates, 0);
    }
);

e2e!(
    /// Jobs the worker forgets (done ones past their retention time, a dismissed failed one)
    /// are announced to every tab, so that no view keeps showing them.
    forgotten_jobs_are_dropped_from_every_tabs_view,
    60,
    |h| {
        h.api
            .push_script(
                sluice::api::ScriptedResponse::status(422)
                    .for_request(Some("POST"), Some("/api/contacts")),
            )
            .expect("script");
        let actor = h.open_e2e().await;
        let watcher = h.open_e2e().await;
        actor
            .eval(&crate::support::js::configure(50, 4, "retentionMs: 1000"))
            .await;
        let r = actor
            .eval(
                r#"
                const one = (name) => sluice.enqueue({ url: '/api/contacts', kind: 'create',
                  lane: 'interactive', body: { name } });
                const failed = await one('refused');
                const failure = await failed.done.then(() => 'done', (e) => e.code);
                const kept = await Promise.all(['a', 'b'].map(one));
                await Promise.all(kept.map((j) => j.done));
                await sluice.dismiss(failed.id);
                // Past the retention time, the next event lets the worker forget the done jobs.
                await e2e.sleep(1500);
                await sluice.snapshot();
                return { failed: failed.id, failure, done: kept.map((j) => j.id) };
                "#,
            )
            .await;
        assert_eq!(r["failure"], "failed", "{r}");
        let mut expected: Vec<String> = vec![r["failed"].as_str().unwrap_or_default().to_owned()];
        expected.extend(
            r["done"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned)),
        );
        for tab in [&actor, &watcher] {
            let removed: Vec<String> = crate::support::eventually(
                "every forgotten job announced",
                Duration::from_secs(5),
                || async {
                    let removed: Vec<String> = tab
                        .eval_as(
                            "return e2e.broadcasts.filter((m) => m.type === 'jobs')\
                             .flatMap((m) => m.removed || []);",
                        )
                        .await;
                    expected.iter().all(|id| removed.contains(id)).then_some(removed)
                },
            )
            .await;
            assert_eq!(removed.len(), 3, "each announced once: {removed:?}");
            let listed: u64 = tab.eval_as("return (await sluice.jobs()).length;").await;
            assert_eq!(listed, 0, "the worker forgot them");
        }
    }
);

e2e!(
    /// A stopped worker holding a queue larger than what a start reads first (100 waiting
    /// jobs) sends from its head at once and reads the rest meanwhile: every job ends done,
    /// each key's jobs still go out in enqueue order across that boundary, and a request
    /// answered meanwhile sees the whole queue.
    a_large_queue_restarts_from_its_head_and_keeps_every_keys_order,
    90,
    |h| {
        let tab = h.open_e2e_with("keepAliveMs=300").await;
        tab.eval(&crate::support::js::configure(200, 4, "")).await;
        const JOBS: usize = 800;
        const KEYS: usize = 10;
        tab.eval(&format!(
            r#"
            const jobs = Array.from({{ length: {JOBS} }}, (_, i) => ({{
              url: '/api/echo/k' + (i % {KEYS}) + '/' + i, method: 'POST', kind: 'create',
              key: 'k' + (i % {KEYS}), body: {{ i }} }}));
            const r = await sluice.enqueueMany(jobs, 'big');
            window.dones = {{ big: r.ids.map((id) => sluice.done(id).then(
              (o) => 'done ' + o.status, (e) => e.code)) }};
            "#
        ))
        .await;
        h.wait_until("40 sent", Duration::from_secs(10), || h.api.total() >= 40)
            .await;
        h.stop_worker().await;
        let sent_before = h.api.total();
        let status = tab.eval("return await sluice.snapshot();").await;
        let counts = &status["counts"];
        let total: u64 = ["queued", "sending", "retryWait", "done", "failed", "cancelled"]
            .iter()
            .map(|k| counts[*k].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(total as usize, JOBS, "the first answer counts every job: {status}");
        assert!(
            sent_before < JOBS / 2,
            "the restart must happen with most of the queue waiting ({sent_before} sent)"
        );
        let results: Vec<String> =
            tab.eval_as(&crate::support::js::settle_group("big")).await;
        assert!(crate::support::js::all_done(&results), "{results:?}");
        // Each key's first arrivals in enqueue order (a request in flight at the stop may
        // arrive twice: same key, replayed by the server).
        let arrivals = h.api.arrivals();
        let mut seen = std::collections::BTreeSet::new();
        let mut last_of_key = [None::<usize>; KEYS];
        for a in &arrivals {
            let mut parts = a.path.trim_start_matches("/api/echo/k").split('/');
            let (Some(Ok(key)), Some(Ok(i))) = (
                parts.next().map(str::parse::<usize>),
                parts.next().map(str::parse::<usize>),
            ) else {
                continue;
            };
            if !seen.insert(i) {
                continue;
            }
            assert!(
                last_of_key[key].is_none_or(|last| last < i),
                "key k{key}: job {i} went out after job {:?}",
                last_of_key[key]
            );
            last_of_key[key] = Some(i);
        }
        assert_eq!(seen.len(), JOBS, "every job sent");
    }
);

e2e!(
    /// Issue 40: a restarted worker answers the status of a large queue from the counts its
    /// last save kept, before the rest of the queue is read: a list of the jobs (which needs
    /// the jobs themselves), asked first, is answered after it. Those counts are every job's,
    /// per state, group and lane, as the whole queue's status says them once it is read.
    a_large_queues_status_is_answered_before_the_rest_is_read,
    90,
    |h| {
        let tab = h.open_e2e_with("keepAliveMs=600000").await;
        tab.eval(&crate::support::js::configure(20, 2, "")).await;
        // In calls of 150: a larger one is saved as a journal entry first, and a worker
        // stopped before that entry is written one job per record reads the whole queue at
        // once (see `sw/src/worker/journal.rs`), with no rest to answer before.
        const CALLS: usize = 12;
        const BULK: usize = CALLS * 150;
        const INTERACTIVE: usize = 30;
        tab.eval(&format!(
            r#"
            const job = (i, lane) => ({{ url: '/api/contacts', method: 'POST', kind: 'create',
              lane, body: {{ i }} }});
            for (let call = 0; call < {CALLS}; call++) {{
              await sluice.enqueueMany(
                Array.from({{ length: 150 }}, (_, i) => job(call * 150 + i, 'bulk')), 'big');
            }}
            await sluice.enqueueMany(
              Array.from({{ length: {INTERACTIVE} }}, (_, i) => job(i, 'interactive')), 'now');
            "#
        ))
        .await;
        h.wait_until("40 sent", Duration::from_secs(10), || h.api.total() >= 40)
            .await;
        // The last answers saved, then the worker stopped as the browser stops it. Both
        // requests below then go as events, in order, the first of which starts the worker:
        // the page has no keep-alives to start it before (`keepAliveMs` above), and a status
        // request goes over the page's port only while the worker spoke within the last 2 s
        // (`port_heard_ms` in `client/src/core`); over a port that died with the worker it
        // would wait 100 ms before going again as an event.
        tokio::time::sleep(Duration::from_millis(200)).await;
        h.stop_worker().await;
        tokio::time::sleep(Duration::from_millis(2_300)).await;
        let first = tab
            .eval(
                "const listed = sluice.jobs('big').then(() => performance.now());\
                 const status = await sluice.snapshot();\
                 const answered = performance.now();\
                 return { status, answered, listed: await listed };",
            )
            .await;
        let time = |k: &str| first[k].as_f64().unwrap_or_else(|| panic!("no {k}: {first}"));
        let (answered, listed) = (time("answered"), time("listed"));
        report(&format!(
            "restart with {} jobs: status answered {:.0} ms before the list",
            BULK + INTERACTIVE,
            listed - answered
        ));
        assert!(
            answered < listed,
            "the status must not wait for the whole queue: {first}"
        );
        let early = &first["status"];
        let whole = tab.eval("return await sluice.snapshot();").await;
        let counts = |s: &Value| -> (u64, u64) {
            let c = &s["counts"];
            let n = |k: &str| c[k].as_u64().unwrap_or(0);
            (
                n("queued") + n("sending") + n("retryWait"),
                n("done") + n("failed") + n("cancelled") + n("conflict"),
            )
        };
        let (early_pending, early_ended) = counts(early);
        let (pending, ended) = counts(&whole);
        assert_eq!(
            (early_pending + early_ended) as usize,
            BULK + INTERACTIVE,
            "every job counted: {early}"
        );
        assert_eq!((pending + ended) as usize, BULK + INTERACTIVE, "{whole}");
        // Between the two answers a few more jobs may have ended, none more than sent.
        assert!(
            ended >= early_ended && ended - early_ended <= 10,
            "{early_ended} ended, then {ended}"
        );
        let group = |s: &Value, id: &str| -> (u64, u64) {
            let g = s["groups"]
                .as_array()
                .and_then(|gs| gs.iter().find(|g| g["id"] == id).cloned())
                .unwrap_or(Value::Null);
            (g["total"].as_u64().unwrap_or(0), g["pending"].as_u64().unwrap_or(0))
        };
        assert_eq!(group(early, "big").0 as usize, BULK, "{early}");
        assert_eq!(group(early, "now").0 as usize, INTERACTIVE, "{early}");
        let waiting = |s: &Value| -> u64 {
            s["lanes"]
                .as_array()
                .map_or(0, |ls| ls.iter().map(|l| l["waiting"].as_u64().unwrap_or(0)).sum())
        };
        assert!(
            waiting(early) + 2 >= early_pending && waiting(early) <= early_pending,
            "waiting per lane {} of {early_pending} unfinished: {early}",
            waiting(early)
        );
    }
);

e2e!(
    /// A page's requests go over its own port to the worker once the worker took it (fewer
    /// hops than `postMessage`). A worker stopped behind the page's back leaves the port dead
    /// without a word; a request sent over it goes again as an event, which starts the worker,
    /// after a tenth of a second, not after the 10 s an unanswered enqueue otherwise waits.
    requests_go_over_the_pages_port_and_survive_a_worker_stopped_behind_it,
    90,
    |h| {
        let tab = h.open_e2e().await;
        tab.eval(
            "window.sent = { port: 0, event: 0 };\
             const viaPort = MessagePort.prototype.postMessage;\
             MessagePort.prototype.postMessage = function (...a) {\
               window.sent.port++; return viaPort.apply(this, a); };\
             const viaEvent = ServiceWorker.prototype.postMessage;\
             ServiceWorker.prototype.postMessage = function (...a) {\
               window.sent.event++; return viaEvent.apply(this, a); };",
        )
        .await;
        tab.eval("await e2e.configure();").await;
        let sent: Value = tab
            .eval(
                "const before = { ...window.sent };\
                 for (let i = 0; i < 20; i++) {\
                   const r = await sluice.enqueue({ url: '/api/contacts', kind: 'create',\
                     body: { name: 'port ' + i } });\
                   await r.done;\
                 }\
                 return { port: window.sent.port - before.port,\
                          event: window.sent.event - before.event };",
            )
            .await;
        assert_eq!(sent["port"], 20, "every enqueue over the port: {sent}");

        let starts = h.worker_starts();
        h.stop_worker().await;
        let acked: Value = tab
            .eval(
                "const before = { ...window.sent };\
                 const t0 = performance.now();\
                 const r = await sluice.enqueue({ url: '/api/contacts', kind: 'create',\
                   body: { name: 'after the stop' } });\
                 const ms = performance.now() - t0;\
                 const outcome = await r.done;\
                 return { ms, status: outcome.status,\
                          port: window.sent.port - before.port,\
                          event: window.sent.event - before.event };",
            )
            .await;
        let ms = acked["ms"].as_f64().unwrap_or(f64::NAN);
        assert!(ms < 5_000.0, "the enqueue after the stop took {ms} ms: {acked}");
        assert_eq!(acked["status"], 201, "{acked}");
        assert_eq!(acked["port"], 1, "first over the dead port: {acked}");
        assert!(acked["event"].as_u64() >= Some(1), "then as an event: {acked}");
        assert!(h.worker_starts() > starts, "the worker was not started again");
        let stats = h.api.stats();
        assert_eq!(stats.contacts, 21, "{stats:?}");
        assert_eq!(stats.duplicate_creates, 0, "{stats:?}");
    }
);

e2e!(
    /// Storage written by the previous schema (version 3: three more indexes on the jobs,
    /// which no read used) is upgraded in place: every job in it is sent, each once and within
    /// the limit, and the unread indexes are gone.
    a_queue_saved_by_the_previous_schema_is_upgraded_with_every_job,
    90,
    |h| {
        const JOBS: usize = 20;
        // The jobs as a worker of version 3 stored them: the engine's own records, queued.
        let config = EngineConfig {
            budgets: vec![BudgetConfig {
                name: "demo".into(),
                windows: vec![Window {
                    limit: 10,
                    length_ms: 1_000,
                }],
                match_prefixes: vec![format!("{}/api/", h.api_origin)],
                ..BudgetConfig::default()
            }],
            ..EngineConfig::default()
        };
        let mut engine = Engine::new(config, Rng::seeded(3)).expect("engine");
        let mut records = Vec::new();
        for i in 0..JOBS {
            let spec = JobSpec {
                budget: "demo".into(),
                lane: Lane::Bulk,
                kind: JobKind::Create,
                method: "POST".into(),
                url: format!("{}/api/contacts", h.api_origin),
                headers: vec![("content-type".into(), "application/json".into())],
                body: Some(format!("{{\"name\":\"Upgraded {i}\"}}")),
                ..JobSpec::default()
            };
            let id = engine.enqueue(spec, 0).expect("enqueue").id;
            let job = engine.job(&id).expect("the job just enqueued");
            records.push(serde_json::to_value(job).expect("job record"));
        }
        let records = serde_json::to_string(&records).expect("records");

        // Written from a page of the origin before any worker is registered.
        let page = h.open("/no-worker-here").await;
        page.eval(&format!(
            r#"
            const records = {records};
            await new Promise((resolve, reject) => {{
              const open = indexedDB.open('sluice', 3);
              open.onupgradeneeded = () => {{
                const db = open.result;
                const jobs = db.createObjectStore('jobs', {{ keyPath: 'id' }});
                jobs.createIndex('state', 'state');
                jobs.createIndex('budget_state', ['budget', 'state']);
                jobs.createIndex('key', 'key');
                jobs.createIndex('state_seq', ['state', 'seq']);
                db.createObjectStore('budgets', {{ keyPath: 'name' }});
                db.createObjectStore('meta', {{ keyPath: 'k' }});
                db.createObjectStore('journal', {{ keyPath: 'id' }});
              }};
              open.onerror = () => reject(open.error);
              open.onsuccess = () => {{
                const db = open.result;
                const tx = db.transaction(['jobs', 'meta'], 'readwrite');
                for (const r of records) tx.objectStore('jobs').put(r);
                tx.objectStore('meta').put({{ k: 'schema', version: 3, recordFormat: 1 }});
                tx.oncomplete = () => {{ db.close(); resolve(); }};
                tx.onerror = () => reject(tx.error);
              }};
            }});
            "#
        ))
        .await;
        page.close().await;

        let tab = h.open_e2e().await;
        h.wait_until(
            "every job of the old schema sent",
            Duration::from_secs(30),
            || h.api.contacts().len() >= JOBS,
        )
        .await;
        h.assert_each_applied_once(JOBS, 10);
        let db = tab
            .eval(
                "const db = await new Promise((resolve, reject) => { \
                   const open = indexedDB.open('sluice'); \
                   open.onsuccess = () => resolve(open.result); \
                   open.onerror = () => reject(open.error); }); \
                 const jobs = db.transaction('jobs').objectStore('jobs'); \
                 const out = { version: db.version, indexes: [...jobs.indexNames] }; \
                 db.close(); return out;",
            )
            .await;
        assert_eq!(db["version"], 4, "{db}");
        assert_eq!(db["indexes"], serde_json::json!(["state_seq"]), "{db}");
    }
);

e2e!(
    /// Issue 40: a large `enqueueMany` is saved as one journal record, then written one job per
    /// record, eight jobs a save, outcomes counted first. Where the worker itself is the limit
    /// (the API's limit lifted, 5 ms round trips, 32 in flight: several outcomes a save),
    /// counted at IndexedDB's `put` in the worker, 2,000 creates make at most 1.5 puts a job
    /// into `jobs` (before, 2.0: nearly every job was written from the journal just before it
    /// went out, and again with its outcome). The journal entry is gone once all are done,
    /// and a worker stopped then starts from the per-job records: every job still done, none
    /// sent again.
    a_bulk_send_at_the_workers_own_limit_writes_each_job_about_once,
    90,
    // Alone: how many outcomes a save carries depends on the rate the machine allows.
    Options::api(ApiConfig {
        limit: u32::MAX,
        latency_ms: 5,
        seed: Some(1),
        ..ApiConfig::default()
    })
    .exclusive(),
    |h| {
        const JOBS: usize = 2_000;
        let tab = h.open_e2e_with("keepAliveMs=300").await;
        tab.eval(&crate::support::js::configure(2_000, 32, "")).await;
        let starts = h.worker_starts();
        h.browser
            .eval_in_worker(
                r#"(() => {
                  const put = IDBObjectStore.prototype.put;
                  self.jobPuts = 0;
                  IDBObjectStore.prototype.put = function (...args) {
                    if (this.name === 'jobs') self.jobPuts += 1;
                    return put.apply(this, args);
                  };
                  return true;
                })()"#,
                Duration::from_secs(10),
            )
            .await
            .unwrap_or_else(|e| panic!("counting the worker's puts: {e}"));
        let ids: Vec<String> = tab.eval_as(&enqueue_group_js(JOBS, "bulk")).await;
        assert_eq!(ids.len(), JOBS);
        let results: Vec<String> = tab.eval_as(&settle_group_js("bulk")).await;
        assert!(crate::support::js::all_done(&results), "{results:?}");
        let journal_entries = "const db = await new Promise((resolve, reject) => { \
               const open = indexedDB.open('sluice'); \
               open.onsuccess = () => resolve(open.result); \
               open.onerror = () => reject(open.error); }); \
             const n = await new Promise((resolve, reject) => { \
               const count = db.transaction('journal').objectStore('journal').count(); \
               count.onsuccess = () => resolve(count.result); \
               count.onerror = () => reject(count.error); }); \
             db.close(); return n;";
        let mut entries = Value::Null;
        for _ in 0..50 {
            entries = tab.eval(journal_entries).await;
            if entries == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(entries, 0, "the journal entry outlived its jobs");
        let puts = h
            .browser
            .eval_in_worker("self.jobPuts", Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("reading the worker's puts: {e}"));
        assert_eq!(
            h.worker_starts(),
            starts,
            "the worker restarted, which lost the count"
        );
        let puts = puts.as_u64().unwrap_or_else(|| panic!("puts: {puts}"));
        crate::support::report(&format!(
            "{JOBS} creates in one enqueueMany: {puts} puts into `jobs` ({:.2} a job)",
            puts as f64 / JOBS as f64
        ));
        assert!(
            puts as usize >= JOBS && puts as usize <= JOBS * 3 / 2,
            "{puts} puts for {JOBS} jobs"
        );
        let sent = h.api.total();
        assert_eq!(sent, JOBS, "each job sent once");
        h.stop_worker().await;
        let status = tab.eval("return await sluice.snapshot();").await;
        assert_eq!(status["counts"]["done"], JOBS, "{status}");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(h.api.total(), JOBS, "a job was sent again after the restart");
        h.assert_each_applied_once(JOBS, 2_000);
    }
);
