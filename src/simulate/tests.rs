//! `sluice simulate`'s own tests: options, runs and a small matrix cell.
use super::*;

#[test]
fn default_run_is_at_the_limit_without_429s() {
    let r = run(&SimulateOptions::default()).unwrap();
    assert_eq!(r.report.done, 2_000);
    assert_eq!(r.report.rate_limited, 0);
    assert!(
        r.report.share_of_limit >= 0.97,
        "{}",
        r.report.share_of_limit
    );
}

#[test]
fn windows_are_read_with_their_units() {
    let w = |limit, length_ms| Window { limit, length_ms };
    assert_eq!(
        parse_windows("10/1s,3000/1h").unwrap(),
        vec![w(10, 1_000), w(3_000, 3_600_000)]
    );
    assert_eq!(
        parse_windows(" 5/250ms , 60/2m,7/s").unwrap(),
        vec![w(5, 250), w(60, 120_000), w(7, 1_000)]
    );
    assert_eq!(
        "10/1s,3000/1h".parse::<WindowList>().unwrap().0,
        vec![w(10, 1_000), w(3_000, 3_600_000)]
    );
    assert_eq!(windows_text(&[w(10, 1_000), w(3, 250)]), "10/1s,3/250ms");
}

#[test]
fn bad_windows_name_the_bad_part() {
    let part = |p: &str| p.to_string();
    for (input, expected) in [
        ("", WindowsError::Empty),
        ("  ", WindowsError::Empty),
        (
            "10/1s,,5/1m",
            WindowsError::EmptyEntry {
                input: "10/1s,,5/1m".into(),
                index: 2,
            },
        ),
        ("10/1s,100", WindowsError::NoSlash { part: part("100") }),
        (
            "x/1s",
            WindowsError::BadLimit {
                part: part("x/1s"),
                limit: "x".into(),
            },
        ),
        (
            "0/1s",
            WindowsError::BadLimit {
                part: part("0/1s"),
                limit: "0".into(),
            },
        ),
        (
            "-3/1s",
            WindowsError::BadLimit {
                part: part("-3/1s"),
                limit: "-3".into(),
            },
        ),
        (
            "99999999999/1s",
            WindowsError::BadLimit {
                part: part("99999999999/1s"),
                limit: "99999999999".into(),
            },
        ),
        (
            "10/1000",
            WindowsError::BadLength {
                part: part("10/1000"),
                length: "1000".into(),
            },
        ),
        (
            "10/",
            WindowsError::BadLength {
                part: part("10/"),
                length: String::new(),
            },
        ),
        (
            "10/1d",
            WindowsError::BadUnit {
                part: part("10/1d"),
                unit: "d".into(),
            },
        ),
        (
            "10/1.5s",
            WindowsError::BadUnit {
                part: part("10/1.5s"),
                unit: ".5s".into(),
            },
        ),
        (
            "10/1s/2",
            WindowsError::BadUnit {
                part: part("10/1s/2"),
                unit: "s/2".into(),
            },
        ),
        (
            "10/0s",
            WindowsError::ZeroLength {
                part: part("10/0s"),
            },
        ),
        (
            "10/99999999999999999999h",
            WindowsError::TooLong {
                part: part("10/99999999999999999999h"),
            },
        ),
        (
            "10/9999999999999999h",
            WindowsError::TooLong {
                part: part("10/9999999999999999h"),
            },
        ),
    ] {
        let err = parse_windows(input).unwrap_err();
        assert_eq!(err, expected, "{input:?}");
        // The message names the entry at fault.
        if let WindowsError::NoSlash { part }
        | WindowsError::BadLimit { part, .. }
        | WindowsError::BadLength { part, .. }
        | WindowsError::BadUnit { part, .. }
        | WindowsError::ZeroLength { part }
        | WindowsError::TooLong { part } = &expected
        {
            assert!(err.to_string().contains(&format!("'{part}'")), "{err}");
        }
    }
}

#[test]
fn several_windows_reach_the_server_and_the_engine() {
    let o = SimulateOptions {
        jobs: 60,
        windows: Some(parse_windows("10/1s,25/1m").unwrap()),
        ..SimulateOptions::default()
    };
    let s = scenario(&o).unwrap();
    assert_eq!(s.server.windows(), o.real_windows());
    assert_eq!(s.engine.budgets[0].windows, o.real_windows());
    let r = run(&o).unwrap();
    assert_eq!(r.report.done, 60);
    // 25 in the first minute, 25 in the second, 10 more at its start.
    assert_eq!(r.report.ideal_ms, 120_900);
    assert_eq!(r.report.per_window.len(), 2);
    assert!(
        r.report.per_window[1].max_attempts <= 25,
        "{}",
        r.report.summary()
    );
    assert!(run(&SimulateOptions {
        configured_limit: Some(5),
        ..o
    })
    .unwrap_err()
    .contains("--configured-windows"));
}

#[test]
fn a_way_there_steadier_than_the_way_back_is_its_own_jitter() {
    // `sluice bench`'s path: 0-10 ms there, ±10 ms back, 35 ms on average.
    let bench_path = SimulateOptions {
        jobs: 1_000,
        one_way_ms: 10,
        jitter_ms: 20,
        arrival_jitter_ms: Some(10),
        ..SimulateOptions::default()
    };
    assert_eq!(bench_path.mean_round_trip_ms(), 35.0);
    let steady_arrivals = SimulateOptions {
        arrival_jitter_ms: Some(0),
        ..bench_path.clone()
    };
    let both_ways_wide = SimulateOptions {
        arrival_jitter_ms: None,
        ..bench_path.clone()
    };
    let shares: Vec<f64> = [steady_arrivals, bench_path, both_ways_wide]
        .iter()
        .map(|o| {
            let r = run(o).unwrap();
            assert_eq!(r.report.done, 1_000);
            assert_eq!(r.report.rate_limited, 0, "{}", r.report.summary());
            assert!(r.report.max_arrivals_in_window <= 100);
            r.report.share_of_limit
        })
        .collect();
    // What the limiter cannot know of a request's way there is what each window loses.
    assert!(shares[0] > shares[1] && shares[1] > shares[2], "{shares:?}");
}

#[test]
fn interactive_jobs_arrive_over_the_run_and_report_their_waits() {
    let r = run(&SimulateOptions {
        jobs: 400,
        interactive_share: 0.1,
        ..SimulateOptions::default()
    })
    .unwrap();
    assert_eq!(r.report.done, 400);
    let i = r.waits_of(Lane::Interactive).expect("interactive waits");
    assert_eq!(i.jobs, 40);
    assert!(i.p50_ms <= i.p95_ms && i.p95_ms <= i.max_ms);
    assert_eq!(r.waits_of(Lane::Bulk).map(|w| w.jobs), Some(360));
}

#[test]
fn a_small_matrix_cell_runs_and_fills_every_column() {
    let cells = matrix_cells(&SimulateOptions::default());
    assert_eq!(cells.len(), 10);
    let small = MatrixCell {
        options: SimulateOptions {
            jobs: 200,
            ..cells[0].options.clone()
        },
        ..cells[0].clone()
    };
    let c = run_cell(&small, &[1, 2, 3]).unwrap();
    assert_eq!(c.runs.len(), 3);
    assert_eq!(c.bound, Bound::RealLimit);
    assert_eq!(c.peaks.len(), 1);
    assert_eq!(c.peaks[0].limit, 100);
    assert!(c.peaks[0].max >= 1 && c.peaks[0].max <= 100);
    assert!(
        c.medians.share > 0.5 && c.medians.share <= 1.01,
        "{:?}",
        c.medians
    );
    assert!(c.medians.finish_over_ideal >= 0.99, "{:?}", c.medians);
    assert_eq!((c.worst_lost, c.worst_doubled), (0, 0));
    assert_eq!(c.target_text, "0 429s, share >= 0.975");
    assert_eq!(c.pass, c.misses.is_empty());

    let m = MatrixReport {
        algorithm: Algorithm::SlidingLog,
        server_counting: WindowCounting::Sliding,
        interactive_share: 0.0,
        seeds: vec![1, 2, 3],
        elapsed_ms: 0,
        total: 1,
        met: usize::from(c.pass),
        cells: vec![c],
    };
    let table = matrix_table(&m);
    for column in [
        "429/1k",
        "share",
        "finish/ideal",
        "peak/limit",
        "lost",
        "doubled",
        "worst 429s",
        "target",
        "result",
    ] {
        assert!(table.contains(column), "{column}: {table}");
    }
    assert!(table.contains("true limit, jitter 5"), "{table}");
    assert!(table.contains("sliding server"), "{table}");
    assert!(table
        .lines()
        .last()
        .unwrap()
        .ends_with("of 1 cells meet their target"));
    let json = serde_json::to_value(&m).unwrap();
    let cell = &json["cells"][0];
    for key in [
        "medians",
        "peaks",
        "worstRateLimited",
        "pass",
        "targetText",
        "runs",
    ] {
        assert!(!cell[key].is_null(), "{key}: {cell}");
    }
    assert!(!cell["runs"][0]["againstBound"]["share"].is_null());
}

/// `--fixed-server` reaches the server of every matrix cell, and a fixed-window budget runs
/// against it at the limit.
#[test]
fn a_fixed_server_carries_into_the_matrix_and_into_a_run() {
    let base = SimulateOptions {
        server_counting: WindowCounting::Fixed,
        algorithm: Algorithm::FixedWindow,
        ..SimulateOptions::default()
    };
    let cells = matrix_cells(&base);
    assert!(cells
        .iter()
        .all(|c| c.options.server_counting == WindowCounting::Fixed));
    let s = scenario(&base).unwrap();
    assert_eq!(s.server.counting, WindowCounting::Fixed);
    let r = run(&SimulateOptions {
        jobs: 600,
        limit: 20,
        ..base
    })
    .unwrap();
    assert_eq!(r.report.rate_limited, 0);
    assert!(
        r.report.share_of_limit >= 0.98,
        "{}",
        r.report.share_of_limit
    );
}

#[test]
fn bad_options_are_explained() {
    let err = run(&SimulateOptions {
        fault_rate: 2.0,
        ..SimulateOptions::default()
    })
    .unwrap_err();
    assert!(err.contains("--fault-rate"), "{err}");
}
