//! Nothing lost, nothing doubled, the limit kept: through reloads, several tabs, a worker that
//! is killed, offline spells, closed tabs and a new worker version.

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use sluice::api::ScriptedResponse;

use crate::e2e;
use crate::support::{eventually, js, report, BrowserHarness, Harness, Options, PageScript, Tab};

/// Where users are: the API on another origin (CORS and its preflights), each request held
/// 0-10 ms on its way and answered ±10 ms around the latency. Every lifecycle case runs there.
fn where_users_are() -> Options {
    Options::default().cross_origin(10)
}

/// The page's view of a group: (state, attempts) per job.
async fn group_states(tab: &Tab, group: &str) -> Vec<(String, u64)> {
    let jobs: Vec<Value> = tab
        .eval_as(&format!("return await sluice.jobs('{group}');"))
        .await;
    jobs.iter()
        .map(|j| {
            (
                j["state"].as_str().unwrap_or("?").to_string(),
                j["attempts"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect()
}

/// Polls the page until the budget reports a pause; returns its end (ms since the epoch).
/// `jobs` creates in `group` at 5 per second, then, once `sent` of them arrived, the tab closed
/// and the worker stopped with the rest waiting: nothing more arrives (checked for a second).
/// Returns how many arrived.
async fn leave_work_behind(h: &Harness, jobs: usize, group: &str, sent: usize) -> usize {
    let tab = h.open_e2e().await;
    tab.eval(&js::configure(5, 1, "")).await;
    tab.eval(&js::enqueue_group(jobs, group)).await;
    h.wait_until(&format!("{sent} contacts"), Duration::from_secs(10), || {
        h.api.contacts().len() >= sent
    })
    .await;
    tab.close().await;
    h.stop_worker().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let at_close = h.api.contacts().len();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        h.api.contacts().len(),
        at_close,
        "nothing runs with no tab and no worker"
    );
    at_close
}

async fn wait_for_pause(tab: &Tab) -> f64 {
    tab.eval_as(js::WAIT_FOR_PAUSE).await
}

e2e!(
    /// Scenario 7: a reload in the middle of a run, while a 429's pause holds: the page finds
    /// every job, the pause holds (also across a worker restart), nothing is lost or doubled.
    a_reload_mid_run_loses_nothing_doubles_nothing_and_keeps_the_pause,
    90,
    where_users_are(),
    |h| {
        let tab = h.open_e2e_with("keepAliveMs=300").await;
        tab.eval(&js::configure(10, 2, "")).await;
        let ids: Vec<String> = tab.eval_as(&js::enqueue_group(30, "r")).await;
        h.wait_until("5 contacts", Duration::from_secs(10), || {
            h.api.contacts().len() >= 5
        })
        .await;
        h.api
            .push_script(
                ScriptedResponse::status(429)
                    .with_header("Retry-After", "3")
                    .for_request(Some("POST"), Some("/api/contacts")),
            )
            .expect("script");
        let paused_until = wait_for_pause(&tab).await;

        tab.reload().await;
        tab.wait_ready().await;
        let after_reload = tab.eval("return await sluice.snapshot();").await;
        let budget = &after_reload["budgets"][0];
        // The status shows only pauses still ahead; on a busy machine the reload can outlast
        // it. Whether anything was sent during the pause is checked on the arrivals below.
        if after_reload["now"].as_f64().is_some_and(|now| now < paused_until) {
            assert_eq!(budget["pausedUntil"].as_f64(), Some(paused_until), "{budget}");
            assert!(budget["pauseReason"].is_string(), "{budget}");
        }
        let listed: Vec<String> = tab
            .eval_as("return (await sluice.jobs('r')).map((j) => j.id);")
            .await;
        assert_eq!(
            listed.iter().collect::<BTreeSet<_>>(),
            ids.iter().collect::<BTreeSet<_>>(),
            "jobs('r') after the reload"
        );

        // The pause is saved, not just remembered: a restarted worker keeps it too.
        let starts = h.worker_starts();
        h.stop_worker().await;
        h.wait_until("the worker to start again", Duration::from_secs(10), || {
            h.worker_starts() > starts
        })
        .await;
        let after_restart = tab.eval("return await sluice.snapshot();").await;
        if after_restart["now"].as_f64().is_some_and(|now| now < paused_until) {
            assert_eq!(
                after_restart["budgets"][0]["pausedUntil"].as_f64(),
                Some(paused_until),
                "{after_restart}"
            );
        }

        let ids_json = serde_json::to_string(&ids).expect("ids");
        let results: Vec<String> = tab.eval_as(&js::settle_ids(&ids_json)).await;
        assert!(js::all_done(&results), "{results:?}");
        crate::support::assert_one_pause_kept(&h.api, 3000.0);
        h.assert_each_applied_once(30, 10);
    }
);

e2e!(
    /// Scenario 8: three tabs enqueue at once. One worker sends for all of them within one
    /// limit, and every tab hears about every job.
    three_tabs_share_one_sender_one_limit_and_see_every_status,
    90,
    // Alone: it checks the told limit on the server's arrivals, and a second browser on the
    // two cores delays single requests by more than the arrival margin absorbs (31 on 30 once
    // with the fixed 2% margin, before margins were measured).
    where_users_are().exclusive(),
    |h| {
        let tabs = [h.open_e2e().await, h.open_e2e().await, h.open_e2e().await];
        tabs[0].eval(&js::configure(50, 4, "")).await;
        let scripts: Vec<String> = (0..3)
            .map(|i| js::enqueue_group(40, &format!("tab{i}")))
            .collect();
        let (a, b, c) = tokio::join!(
            tabs[0].eval_as::<Vec<String>>(&scripts[0]),
            tabs[1].eval_as::<Vec<String>>(&scripts[1]),
            tabs[2].eval_as::<Vec<String>>(&scripts[2]),
        );
        let all: BTreeSet<String> = a.into_iter().chain(b).chain(c).collect();
        assert_eq!(all.len(), 120);
        for (i, tab) in tabs.iter().enumerate() {
            let results: Vec<String> = tab.eval_as(&js::settle_group(&format!("tab{i}"))).await;
            assert!(js::all_done(&results), "tab {i}: {results:?}");
        }
        let running: Vec<Value> = h
            .browser
            .cdp
            .state()
            .versions
            .values()
            .filter(|v| v["runningStatus"] == "running")
            .cloned()
            .collect();
        assert_eq!(running.len(), 1, "one worker sends for every tab: {running:?}");
        h.assert_each_applied_once(120, 50);
        assert_eq!(h.api.count_429(), 0);

        for (i, tab) in tabs.iter().enumerate() {
            eventually(
                &format!("tab {i} to hear every job end and the final status"),
                Duration::from_secs(10),
                || async {
                    let seen: Value = tab
                        .eval(
                            "const done = new Set();\
                             for (const m of e2e.broadcasts) {\
                               if (m.type !== 'jobs') continue;\
                               for (const u of m.updates) if (u.state === 'done') done.add(u.id);\
                             }\
                             const last = e2e.broadcasts.filter((m) => m.type === 'status').pop();\
                             return { done: [...done], counts: last && last.status.counts };",
                        )
                        .await;
                    let done: BTreeSet<String> =
                        serde_json::from_value(seen["done"].clone()).unwrap_or_default();
                    let final_status = seen["counts"]["done"] == 120
                        && seen["counts"]["queued"] == 0
                        && seen["counts"]["sending"] == 0;
                    (done.is_superset(&all) && final_status).then_some(())
                },
            )
            .await;
        }
    }
);

/// A small deterministic generator for "random" moments, reproducible from its seed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

e2e!(
    /// Scenario 9: the worker is stopped (as the browser may at any time) five times at random
    /// moments of a bulk job: every job ends done, none is applied twice, and the limit holds
    /// across the restarts. `SLUICE_E2E_SEED` replays a run.
    a_worker_killed_five_times_mid_bulk_finishes_every_job_once_within_the_limit,
    120,
    where_users_are(),
    |h| {
        let seed = std::env::var("SLUICE_E2E_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
                    | 1
            });
        report(&format!("worker kills: SLUICE_E2E_SEED={seed}"));
        let mut rng = XorShift(seed);
        let tab = h.open_e2e_with("keepAliveMs=300").await;
        tab.eval(&js::configure(
            50,
            4,
            "retry: { baseDelayMs: 50, maxDelayMs: 1000, timeoutMs: 2000 }",
        ))
        .await;
        tab.eval(&js::enqueue_group(300, "k")).await;
        let stops = h.worker_stops();
        for i in 0..5 {
            tokio::time::sleep(Duration::from_millis(rng.between(300, 1100))).await;
            h.wait_until("the worker to run", Duration::from_secs(10), || {
                h.worker_running()
            })
            .await;
            h.note(format!("test: kill {} at {} contacts", i + 1, h.api.contacts().len()));
            h.stop_worker().await;
        }
        let results: Vec<String> = tab.eval_as(&js::settle_group("k")).await;
        assert!(js::all_done(&results), "{results:?}");
        assert!(h.worker_stops() >= stops + 5);
        h.assert_each_applied_once(300, 50);
        let stats = h.api.stats();
        assert_eq!(stats.rate_limited, 0, "{stats:?}");
        report(&format!(
            "worker kills: {} requests for 300 jobs ({} replays of unanswered starts)",
            stats.total, stats.replays
        ));
    }
);

e2e!(
    /// Scenario 10: the worker goes offline mid-run. Jobs wait without spending attempts, a
    /// Background Sync is registered, and when the network is back the queue resumes by itself.
    an_offline_spell_mid_run_costs_no_attempts_and_the_queue_resumes_by_itself,
    90,
    where_users_are(),
    |h| {
        let tab = h.open_e2e().await;
        tab.eval(&js::configure(20, 2, "")).await;
        tab.eval(&js::enqueue_group(60, "off")).await;
        h.wait_until("15 contacts", Duration::from_secs(10), || {
            h.api.contacts().len() >= 15
        })
        .await;
        h.set_worker_offline(true).await;
        eventually("the worker to notice", Duration::from_secs(10), || async {
            let s = tab.eval("return await sluice.snapshot();").await;
            (s["offline"] == true).then_some(())
        })
        .await;
        let frozen = h.api.total();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(h.api.total(), frozen, "requests reached the server while offline");
        let states = group_states(&tab, "off").await;
        let waiting: Vec<_> = states.iter().filter(|(s, _)| s != "done").collect();
        assert!(!waiting.is_empty());
        assert!(
            waiting.iter().all(|(s, a)| s == "queued" && *a == 0),
            "offline jobs must wait without spending attempts: {waiting:?}"
        );
        let tags: Vec<String> = tab
            .eval_as("return await (await navigator.serviceWorker.ready).sync.getTags();")
            .await;
        assert!(tags.iter().any(|t| t == "sluice"), "no Background Sync registered: {tags:?}");

        let back = Instant::now();
        let before = h.api.total();
        h.set_worker_offline(false).await;
        h.wait_until("the queue to resume", Duration::from_secs(30), || {
            h.api.total() > before
        })
        .await;
        report(&format!("back online: first send after {:.1?}", back.elapsed()));
        let results: Vec<String> = tab.eval_as(&js::settle_group("off")).await;
        assert!(js::all_done(&results), "{results:?}");
        let states = group_states(&tab, "off").await;
        assert!(
            states.iter().all(|(s, a)| s == "done" && *a == 1),
            "every job done in one attempt: {states:?}"
        );
        h.assert_each_applied_once(60, 20);
    }
);

/// `sw.js` as a browser without Background Sync runs it.
const NO_SYNC_PRELUDE: &str = "// Background Sync unavailable, as in Firefox and Safari.\n\
     Object.defineProperty(ServiceWorkerRegistration.prototype, 'sync', { get() { return undefined; } });\n";

e2e!(
    /// Scenario 10 without Background Sync: work left waiting offline resumes the next time the
    /// worker starts.
    without_background_sync_offline_work_resumes_on_the_next_start,
    90,
    where_users_are().with_www_copy(),
    |h| {
        let dir = h.www_dir();
        let sw = std::fs::read_to_string(dir.join("sw.js")).expect("sw.js");
        std::fs::write(dir.join("sw-nosync.js"), format!("{NO_SYNC_PRELUDE}{sw}"))
            .expect("sw-nosync.js");
        // No keep-alives: only the page's own requests may start the stopped worker.
        let tab = h.open_e2e_with("sw=/sw-nosync.js&keepAliveMs=600000").await;
        tab.eval(&js::configure(20, 2, "")).await;
        tab.eval(&js::enqueue_group(40, "ns")).await;
        h.wait_until("10 contacts", Duration::from_secs(10), || {
            h.api.contacts().len() >= 10
        })
        .await;
        h.set_worker_offline(true).await;
        eventually("the worker to notice", Duration::from_secs(10), || async {
            let s = tab.eval("return await sluice.snapshot();").await;
            (s["offline"] == true).then_some(())
        })
        .await;
        let tags: Vec<String> = tab
            .eval_as("return await (await navigator.serviceWorker.ready).sync.getTags();")
            .await;
        assert!(tags.is_empty(), "this worker cannot register a sync: {tags:?}");
        // The browser stops idle workers; then the network comes back while none runs.
        h.stop_worker().await;
        h.set_worker_offline(false).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = h.api.total();
        let started = Instant::now();
        // Any event starts it: here the page asking for the status.
        let s = tab.eval("return await sluice.snapshot();").await;
        assert_eq!(s["offline"], false, "a fresh start assumes the network works: {s}");
        h.wait_until("the queue to resume", Duration::from_secs(5), || {
            h.api.total() > before
        })
        .await;
        report(&format!(
            "no Background Sync: first send {:.1?} after the start",
            started.elapsed()
        ));
        let results: Vec<String> = tab.eval_as(&js::settle_group("ns")).await;
        assert!(js::all_done(&results), "{results:?}");
        let states = group_states(&tab, "ns").await;
        assert!(
            states.iter().all(|(s, a)| s == "done" && *a == 1),
            "every job done in one attempt: {states:?}"
        );
        h.assert_each_applied_once(40, 20);
    }
);

e2e!(
    /// Scenario 11: every tab closed with work pending, the worker stopped; the page opened
    /// again finds how much is left from last time, and the work resumes.
    work_left_when_every_tab_closed_resumes_when_the_page_opens_again,
    90,
    where_users_are(),
    |h| {
        let at_close = leave_work_behind(h, 40, "left", 8).await;

        let tab = h.open_e2e().await;
        let left = tab
            .eval(
                "const jobs = await sluice.jobs('left');\
                 const status = await sluice.snapshot();\
                 const group = status.groups.find((g) => g.id === 'left');\
                 return { listed: jobs.length, ids: jobs.map((j) => j.id),\
                          done: jobs.filter((j) => j.state === 'done').length, group };",
            )
            .await;
        report(&format!("reopened: {}", left["group"]));
        assert_eq!(left["listed"], 40, "{left}");
        let group = &left["group"];
        assert_eq!(group["total"], 40, "{left}");
        let (done, pending) = (
            group["done"].as_u64().unwrap_or(0),
            group["pending"].as_u64().unwrap_or(0),
        );
        assert_eq!(done + pending, 40, "{left}");
        assert!(pending > 0, "work was left: {left}");
        // The one request in flight at the stop may have been applied with its answer lost: the
        // worker sends it again (same key) and only then counts it done.
        assert!(done as usize + 1 >= at_close, "{at_close} applied; {left}");

        let ids_json = left["ids"].to_string();
        let results: Vec<String> = tab.eval_as(&js::settle_ids(&ids_json)).await;
        assert!(js::all_done(&results), "{results:?}");
        h.assert_each_applied_once(40, 5);
    }
);

e2e!(
    /// Issue 40: a page load starts the queue as the navigation begins, not once the page's
    /// client asks. Here the page loaded has no Sluice client at all (a plain page of the
    /// site), so only the navigation can have woken the worker that was stopped with work
    /// left; the work then finishes with nothing doubled.
    a_page_load_wakes_the_queue_even_on_a_page_without_sluice,
    90,
    where_users_are().with_www_copy(),
    |h| {
        std::fs::write(
            h.www_dir().join("plain.html"),
            "<!doctype html><title>About</title><p>A page of the site with no Sluice on it.</p>",
        )
        .expect("plain.html");
        let at_close = leave_work_behind(h, 20, "nav", 4).await;

        let started = Instant::now();
        let _plain = h.open("/plain.html").await;
        h.wait_until("the queue to resume", Duration::from_secs(10), || {
            h.api.contacts().len() > at_close
        })
        .await;
        report(&format!(
            "a plain page's load: first send {:.1?} after the navigation began",
            started.elapsed()
        ));
        h.wait_until("all 20 contacts", Duration::from_secs(30), || {
            h.api.contacts().len() >= 20
        })
        .await;
        h.assert_each_applied_once(20, 5);
    }
);

e2e!(
    /// Scenario 12: a new worker version is deployed while jobs wait; it takes over with
    /// nothing lost or doubled and the limit kept.
    a_new_worker_version_takes_over_the_queue_with_nothing_lost_or_doubled,
    90,
    where_users_are().with_www_copy(),
    |h| {
        let tab = h.open_e2e().await;
        tab.eval(&js::configure(10, 2, "")).await;
        tab.eval(&js::enqueue_group(40, "u")).await;
        h.wait_until("10 contacts", Duration::from_secs(10), || {
            h.api.contacts().len() >= 10
        })
        .await;
        let first_versions: BTreeSet<String> =
            h.browser.cdp.state().versions.keys().cloned().collect();
        let sw = h.www_dir().join("sw.js");
        let mut script = std::fs::read_to_string(&sw).expect("sw.js");
        script.push_str("\n// deployed: version 2\n");
        std::fs::write(&sw, script).expect("sw.js");
        let changed = tab
            .eval(
                "const reg = await navigator.serviceWorker.getRegistration();\
                 const changed = new Promise((r) => navigator.serviceWorker.addEventListener(\
                   'controllerchange', () => r(true), { once: true }));\
                 await reg.update();\
                 return await Promise.race([changed, e2e.sleep(10000).then(() => false)]);",
            )
            .await;
        assert_eq!(changed, true, "the new version did not take control");
        h.wait_until("the new version to be activated", Duration::from_secs(10), || {
            let st = h.browser.cdp.state();
            let new_active = st
                .versions
                .iter()
                .filter(|(id, v)| !first_versions.contains(*id) && v["status"] == "activated")
                .count();
            let old_gone = st
                .versions
                .iter()
                .filter(|(id, _)| first_versions.contains(*id))
                .all(|(_, v)| v["status"] == "redundant");
            new_active == 1 && old_gone
        })
        .await;
        report(&format!(
            "worker update: new version took over at {} contacts",
            h.api.contacts().len()
        ));
        let results: Vec<String> = tab.eval_as(&js::settle_group("u")).await;
        assert!(js::all_done(&results), "{results:?}");
        h.assert_each_applied_once(40, 10);
        assert_eq!(h.api.count_429(), 0);
    }
);

e2e!(
    /// Scenario 12, strictly: the new version takes over while jobs still wait (within a few
    /// seconds of the deploy), not once the old one has finished the queue, and the two never
    /// send side by side: the old one finishes what it has in flight before it lets go, so no
    /// request reaches the server twice.
    a_new_worker_version_takes_over_while_jobs_still_wait,
    90,
    where_users_are().with_www_copy(),
    |h| {
        let tab = h.open_e2e().await;
        tab.eval(&js::configure(10, 2, "")).await;
        tab.eval(&js::enqueue_group(80, "w")).await;
        h.wait_until("10 contacts", Duration::from_secs(10), || {
            h.api.contacts().len() >= 10
        })
        .await;
        let sw = h.www_dir().join("sw.js");
        let mut script = std::fs::read_to_string(&sw).expect("sw.js");
        script.push_str("\n// deployed: version 2\n");
        std::fs::write(&sw, script).expect("sw.js");
        tab.eval(
            "window.tookOver = false;\
             navigator.serviceWorker.addEventListener('controllerchange', \
               () => { window.tookOver = true; });\
             await (await navigator.serviceWorker.getRegistration()).update();",
        )
        .await;
        let deployed = Instant::now();
        let took_over = tab
            .eval(
                "const reg = await navigator.serviceWorker.getRegistration();\
                 for (let i = 0; i < 100; i++) {\
                   if (window.tookOver && !reg.waiting && reg.active \
                       && reg.active.state === 'activated') return true;\
                   await e2e.sleep(50);\
                 }\
                 return false;",
            )
            .await;
        let at = h.api.contacts().len();
        report(&format!(
            "worker update: {} after {:.1?}, at {at} of 80 contacts",
            if took_over == true { "took over" } else { "not yet taken over" },
            deployed.elapsed()
        ));
        assert_eq!(took_over, true, "the new version did not take over within 5 s");
        assert!(at < 80, "taken over only when the queue was done");
        let results: Vec<String> = tab.eval_as(&js::settle_group("w")).await;
        assert!(js::all_done(&results), "{results:?}");
        h.assert_each_applied_once(80, 10);
        let arrivals = h.api.arrivals();
        let keys: BTreeSet<Option<&str>> =
            arrivals.iter().map(|a| a.idempotency_key.as_deref()).collect();
        assert_eq!(
            keys.len(),
            arrivals.len(),
            "a create was sent again after the handover (both versions sent it)"
        );
    }
);
