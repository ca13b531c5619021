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
