//! `sluice bench`'s host tests: options, targets and the table.
use super::*;

#[test]
fn percentiles_use_nearest_rank() {
    let v: Vec<f64> = (1..=100).map(f64::from).collect();
    let p = Percentiles::of(&v);
    assert_eq!(
        (p.p50_ms, p.p95_ms, p.max_ms, p.samples),
        (50.0, 95.0, 100.0, 100)
    );
    assert!(Percentiles::of(&[]).p50_ms.is_nan());
}

#[test]
fn quick_runs_are_smaller() {
    let quick = Sizes::for_options(&BenchOptions {
        quick: true,
        ..BenchOptions::default()
    });
    let full = Sizes::for_options(&BenchOptions::default());
    assert!(quick.bulk_jobs < full.bulk_jobs);
    assert_eq!(full.bulk_jobs, 2_000);
    assert_eq!(full.many_jobs, 10_000);
}

#[test]
fn a_spread_is_min_median_max_and_nan_when_empty() {
    use super::peers::Spread;
    let s = Spread::of(&[3.0, 1.0, 2.0]);
    assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 3.0));
    let s = Spread::of(&[4.0, 1.0, 2.0, 3.0, f64::NAN]);
    assert_eq!((s.min, s.median, s.max), (1.0, 2.5, 4.0));
    assert!(Spread::of(&[]).median.is_nan());
}

/// The share targets of the cross-origin path are relative to the engine's own share there:
/// for the bench's 2,000 jobs it is what `sluice simulate --latency-ms 35 --arrival-jitter-ms
/// 10 --jitter-ms 20` gives over seeds 1-5 (0.9738-0.9749, median 0.9744 today), under the
/// old fixed 0.975; the targets follow it.
#[test]
fn the_cross_origin_share_targets_follow_the_engines_share_on_that_path() {
    let ceiling = simulated_ceiling(2_000, 30).expect("the simulator runs");
    assert!((0.97..0.975).contains(&ceiling), "{ceiling}");
    let cli_median = {
        let mut shares: Vec<f64> = (1..=5)
            .map(|seed| {
                let options = crate::simulate::SimulateOptions {
                    one_way_ms: crate::simulate::SimulateOptions::one_way_for(35, 20, Some(10)),
                    jitter_ms: 20,
                    arrival_jitter_ms: Some(10),
                    seed,
                    ..crate::simulate::SimulateOptions::default()
                };
                crate::simulate::run(&options)
                    .expect("runs")
                    .report
                    .share_of_limit
            })
            .collect();
        shares.sort_by(f64::total_cmp);
        shares[2]
    };
    assert_eq!(
        ceiling, cli_median,
        "the same runs as the command's defaults"
    );
    let least = MEDIAN_OF_CEILING * ceiling;
    assert!((0.96..0.97).contains(&least), "{least}");
}
