//! `sluice bench --quick` end to end, so that the bench cannot rot unnoticed. Its figures are
//! not judged here (a shared test machine is no place for that): only that every measurement
//! ran and produced sane numbers.

use sluice::bench::{run, table, BenchOptions};

use crate::support::{report, Turn};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_quick_runs_every_measurement() {
    if sluice::browser::find_chromium().is_none() || !sluice::browser::wasm_built() {
        // The e2e harness skips (or fails under CI) for these; the other tests say so.
        if std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false") {
            panic!("no Chromium or no wasm bundles (CI is set)");
        }
        report("SKIPPED bench_quick_runs_every_measurement: no Chromium or no wasm");
        return;
    }
    // Alone: it runs several browsers one after another and measures time.
    let _turn = Turn::take(true).await;
    let options = BenchOptions {
        quick: true,
        chromium: None,
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
