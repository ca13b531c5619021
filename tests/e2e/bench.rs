//! `sluice bench --quick`, `sluice bench --peers` and `sluice bench --limiters` end to end, so that the bench cannot rot
//! unnoticed. Their figures are not judged here (a shared test machine is no place for that):
//! only that every measurement ran and produced sane numbers, and the safety facts.

use sluice::bench::limiters::{self, LimiterOptions};
use sluice::bench::peers::{self, Client, PeerFiles, PeerOptions};
use sluice::bench::{run, table, BenchError, BenchOptions};

use crate::support::{ci, report, Turn};

/// Whether a browser and the wasm bundles are here; skips (or fails under CI) without them.
fn can_run(test: &str) -> bool {
    if sluice::browser::find_chromium().is_some() && sluice::browser::wasm_built() {
        return true;
    }
    // The e2e harness skips (or fails under CI) for these; the other tests say so.
    if ci() {
        panic!("no Chromium or no wasm bundles (CI is set)");
    }
    report(&format!("SKIPPED {test}: no Chromium or no wasm"));
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_quick_runs_every_measurement() {
    if !can_run("bench_quick_runs_every_measurement") {
        return;
    }
    // Alone: it runs several browsers one after another and measures time.
    let _turn = Turn::take(true).await;
    let options = BenchOptions {
        quick: true,
        ..BenchOptions::default()
    };
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        run(&options, &|line| report(&format!("bench: {line}"))),
    )
    .await
    .expect("the quick bench took over 2 minutes");
    let r = result.unwrap_or_else(|e| panic!("bench failed: {e}"));
    report(&table(&r));
    assert!(r.quick);
    assert_eq!(r.bulk.len(), 3);
    assert!(
        r.bulk[0].cross_origin,
        "the first bulk run calls another origin"
    );
    // The concurrency bound was measured beside the cross-origin run, and only there.
    let plain = r.bulk[0].plain_rate_per_s.expect("a plain loop's rate");
    assert!(plain.is_finite() && plain > 0.0, "{:?}", r.bulk[0]);
    assert!(r.bulk[1..].iter().all(|b| b.plain_rate_per_s.is_none()));
    for b in &r.bulk {
        assert_eq!(b.rate_limited, 0, "told the limit, so no 429s: {b:?}");
        assert!(b.finish_s > 0.0 && b.finish_s.is_finite(), "{b:?}");
        assert_eq!(b.duplicate_creates, 0, "{b:?}");
        assert!(b.max_in_window <= 100, "{b:?}");
    }
    assert_eq!(r.enqueue.ack.samples, r.sizes.single_enqueues);
    assert_eq!(r.enqueue.ack_held_back.samples, r.sizes.single_enqueues);
    assert_eq!(r.interactive.start.samples, r.sizes.interactive_samples);
    assert!(r.interactive.start.p50_ms.is_finite() && r.interactive.start.p50_ms > 0.0);
    assert!(r.cold_start.first_send_ms > 0.0 && r.cold_start.first_send_ms < 20_000.0);
    assert!(r.cold_start.jobs_held > 0);
    assert!(!r.targets.is_empty());
    let json = serde_json::to_value(&r).expect("JSON");
    for key in ["bulk", "enqueue", "interactive", "coldStart", "targets"] {
        assert!(
            json.get(key).is_some(),
            "{key} missing from the JSON report"
        );
    }
}

/// One short run of each client of `sluice bench --peers` (300 creates instead of 2,000, so
/// that CI stays fast): each ran through the page or the worker, the server counted its
/// requests and preflights, and its finish time is a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_peers_runs_each_client_once() {
    if !can_run("bench_peers_runs_each_client_once") {
        return;
    }
    let options = BenchOptions {
        quick: true,
        peers: true,
        peer_options: PeerOptions {
            runs: Some(1),
            jobs: Some(300),
            dir: None,
        },
        ..BenchOptions::default()
    };
    let files = match PeerFiles::find(&options.peer_options) {
        Ok(files) => files,
        Err(e) if ci() => panic!("{e} (.ci/run installs them)"),
        Err(e) => {
            report(&format!("SKIPPED bench_peers_runs_each_client_once: {e}"));
            return;
        }
    };
    // Alone: it runs browsers one after another and measures time.
    let _turn = Turn::take(true).await;
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        peers::run_with(&options, &files, &|line| report(&format!("bench: {line}"))),
    )
    .await
    .expect("one run of each peer took over 2 minutes");
    let r = result.unwrap_or_else(|e| panic!("bench --peers failed: {e}"));
    report(&peers::table(&r));
    let clients: Vec<Client> = r.clients.iter().map(|c| c.client).collect();
    assert_eq!(clients, Client::ALL);
    for c in &r.clients {
        assert_eq!(c.runs.len(), 1, "{}", c.label);
        for run in &c.runs {
            let label = &c.label;
            assert!(
                run.requests >= r.jobs,
                "{label}: {} requests for {} creates",
                run.requests,
                r.jobs
            );
            assert!(
                run.finish_s.is_finite() && run.finish_s > 0.0,
                "{label}: {run:?}"
            );
            assert!(
                run.page_s.is_finite() && run.page_s > 0.0,
                "{label}: {run:?}"
            );
            // A JSON POST to another origin: a fresh browser asks first.
            assert!(
                run.preflights >= 1,
                "{label}: no preflight counted: {run:?}"
            );
            assert!(c.share_of_limit.median.is_finite(), "{label}: {c:?}");
        }
    }
    // Sluice's promise, told the limit: none over it.
    for run in &r.clients[0].runs {
        assert_eq!(run.rate_limited, 0, "sluice: {run:?}");
        assert!(run.max_in_window <= 100, "sluice: {run:?}");
    }
    let json = serde_json::to_value(&r).expect("JSON");
    assert_eq!(
        json["clients"].as_array().map(Vec::len),
        Some(3),
        "the clients in the JSON report: {json}"
    );
}

/// One short run of each client of `sluice bench --limiters` against one nginx and one node
/// limiter (40 creates each, so that CI stays fast): each ran, the limiter logged its answers,
/// and every create is counted once, more than once or lost. Sluice, configured as the browser
/// tests configure it for these two limiters (`nginx_with_burst_at_its_rate`,
/// `rate_limiter_flexible_at_its_rate`), draws no 429 and applies every create once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_limiters_runs_each_client_once() {
    if !can_run("bench_limiters_runs_each_client_once") {
        return;
    }
    let options = BenchOptions::default();
    let limiter_options = LimiterOptions {
        runs: Some(1),
        jobs: Some(40),
        only: vec!["nginx-burst-5".into(), "rlf".into()],
    };
    // Alone: it runs browsers one after another and measures time.
    let _turn = Turn::take(true).await;
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(90),
        limiters::run(&options, &limiter_options, &|line| {
            report(&format!("bench: {line}"))
        }),
    )
    .await
    .expect("one run of each client against two limiters took over 90 s");
    let r = match result {
        Ok(r) => r,
        Err(e @ (BenchError::PeersNotInstalled { .. } | BenchError::Limiter(_))) if !ci() => {
            report(&format!(
                "SKIPPED bench_limiters_runs_each_client_once: {e}"
            ));
            return;
        }
        Err(e) => panic!("bench --limiters failed: {e}"),
    };
    report(&limiters::table(&r));
    let names: Vec<&str> = r.limiters.iter().map(|l| l.config.name).collect();
    assert_eq!(names, ["nginx-burst-5", "rlf"]);
    for l in &r.limiters {
        let clients: Vec<Client> = l.clients.iter().map(|c| c.client).collect();
        assert_eq!(clients, Client::ALL, "{}", l.limiter);
        for c in &l.clients {
            let label = format!("{} against {}", c.label, l.limiter);
            assert_eq!(c.runs.len(), 1, "{label}");
            for run in &c.runs {
                assert_eq!(
                    run.applied_once + run.applied_more + run.lost,
                    r.jobs,
                    "{label}: {run:?}"
                );
                // A JSON POST to another origin: a fresh browser asks first, and the limiter
                // answers (and logs) the preflight itself.
                assert!(run.preflights >= 1, "{label}: no preflight logged: {run:?}");
                assert!(run.share.is_finite() && run.share > 0.0, "{label}: {run:?}");
            }
        }
        let sluice = &l.clients[0];
        for run in &sluice.runs {
            assert!(
                !run.stalled && run.not_done == 0,
                "sluice against {}: {run:?}",
                l.limiter
            );
            assert_eq!(
                (run.rate_limited, run.applied_once),
                (0, r.jobs),
                "sluice against {}: {run:?}",
                l.limiter
            );
        }
    }
    let json = serde_json::to_value(&r).expect("JSON");
    assert_eq!(
        json["limiters"][1]["clients"].as_array().map(Vec::len),
        Some(3),
        "the clients in the JSON report: {json}"
    );
}
