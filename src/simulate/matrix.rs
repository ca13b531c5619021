//! The matrix: a fixed grid of conditions ([`matrix_cells`]), each run over several seeds and
//! judged against its target ([`run_cell`], [`run_matrix`]), and the table `sluice simulate
//! --matrix` prints ([`matrix_table`]).

use super::*;

/// One condition of the matrix.
#[derive(Clone, Debug)]
pub struct MatrixCell {
    pub name: String,
    pub options: SimulateOptions,
    pub target: Target,
}

/// The seeds every cell runs.
pub const MATRIX_SEEDS: std::ops::RangeInclusive<u64> = 1..=5;

/// The grid: 2,000 jobs at 100 per second, K = 4, 30 ms round trip unless a cell says
/// otherwise. From `base` only the algorithm, the interactive share, the target utilization,
/// the save time and how the server counts its windows carry over.
pub fn matrix_cells(base: &SimulateOptions) -> Vec<MatrixCell> {
    let grid = SimulateOptions {
        algorithm: base.algorithm,
        server_counting: base.server_counting,
        interactive_share: base.interactive_share,
        target_utilization: base.target_utilization,
        save_ms: base.save_ms,
        // 30 ms round trips on average with the default 5 ms of jitter each way.
        one_way_ms: 12,
        ..SimulateOptions::default()
    };
    let no_429s = |share: f64| Target {
        max_429_per_run: Some(0),
        min_share: Some(share),
        ..Target::default()
    };
    // A cell's latency is its mean round trip, as `--latency-ms` is: each way varies over the
    // jitter around half of it.
    let one_way = |latency_ms: u64, jitter_ms: u64| latency_ms.saturating_sub(jitter_ms) / 2;
    let cell = |name: &str, options: SimulateOptions, target: Target| MatrixCell {
        name: name.into(),
        options,
        target,
    };
    vec![
        cell(
            "true limit, jitter 5",
            SimulateOptions {
                one_way_ms: one_way(30, 5),
                jitter_ms: 5,
                ..grid.clone()
            },
            no_429s(0.975),
        ),
        cell(
            "true limit, jitter 10",
            SimulateOptions {
                one_way_ms: one_way(30, 10),
                jitter_ms: 10,
                ..grid.clone()
            },
            no_429s(0.97),
        ),
        cell(
            "60 ms, jitter 30, K=8",
            SimulateOptions {
                one_way_ms: one_way(60, 30),
                jitter_ms: 30,
                concurrency: 8,
                ..grid.clone()
            },
            no_429s(0.94),
        ),
        cell(
            "60 ms, jitter 50, K=8",
            SimulateOptions {
                one_way_ms: one_way(60, 50),
                jitter_ms: 50,
                concurrency: 8,
                ..grid.clone()
            },
            no_429s(0.92),
        ),
        cell(
            "10/s, 150 ms, jitter 50",
            SimulateOptions {
                jobs: 600,
                limit: 10,
                one_way_ms: one_way(150, 50),
                jitter_ms: 50,
                ..grid.clone()
            },
            no_429s(0.92),
        ),
        cell(
            "10/s + 3000/h, 4000 jobs",
            SimulateOptions {
                jobs: 4_000,
                windows: Some(vec![
                    Window {
                        limit: 10,
                        length_ms: 1_000,
                    },
                    Window {
                        limit: 3_000,
                        length_ms: 3_600_000,
                    },
                ]),
                ..grid.clone()
            },
            Target {
                never_above_windows: true,
                max_finish_over_ideal: Some(1.03),
                ..Target::default()
            },
        ),
        cell(
            "told 200/s, real 100, xrate",
            SimulateOptions {
                configured_limit: Some(200),
                headers: HeaderStyle::XRateLimit,
                ..grid.clone()
            },
            Target {
                max_429_per_run: Some(2),
                min_share: Some(0.93),
                ..Target::default()
            },
        ),
        cell(
            "told 200/s, no headers",
            SimulateOptions {
                configured_limit: Some(200),
                headers: HeaderStyle::None,
                retry_after: RetryAfterForm::None,
                ..grid.clone()
            },
            Target {
                max_429_per_run: Some(5),
                min_share: Some(0.88),
                ..Target::default()
            },
        ),
        cell(
            "others 20/s, xrate",
            SimulateOptions {
                other_callers_per_s: 20.0,
                headers: HeaderStyle::XRateLimit,
                ..grid.clone()
            },
            no_429s(0.93),
        ),
        cell(
            "300 ms, K=4",
            SimulateOptions {
                one_way_ms: one_way(300, 5),
                ..grid.clone()
            },
            Target {
                min_share: Some(0.97),
                ..Target::default()
            },
        ),
    ]
}

/// One seed of a cell, with the figures the matrix reads.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MatrixRun {
    pub seed: u64,
    /// Share and finish time against the cell's bound (the run's own `shareOfLimit` and
    /// `finishOverIdeal` are against the real windows alone).
    pub against_bound: AgainstBound,
    pub run: SimulateReport,
}

/// The most of our arrivals (refused ones included) in any placement of one real window,
/// against its limit.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeakFigure {
    pub limit: u32,
    pub length_ms: u64,
    pub median: f64,
    pub max: u32,
}

/// Medians over a cell's seeds.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CellMedians {
    pub rate_limited_per_1000: f64,
    pub share: f64,
    pub finish_over_ideal: f64,
    pub lost: f64,
    pub doubled: f64,
    pub interactive_p50_ms: Option<f64>,
    pub interactive_p95_ms: Option<f64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CellResult {
    pub name: String,
    pub target: Target,
    pub target_text: String,
    pub bound: Bound,
    pub medians: CellMedians,
    pub peaks: Vec<PeakFigure>,
    pub worst_rate_limited: u64,
    pub worst_lost: u64,
    pub worst_doubled: u64,
    pub pass: bool,
    /// What missed the target, in words.
    pub misses: Vec<String>,
    pub runs: Vec<MatrixRun>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MatrixReport {
    pub algorithm: Algorithm,
    /// How the server counted its windows.
    pub server_counting: WindowCounting,
    pub interactive_share: f64,
    pub seeds: Vec<u64>,
    pub elapsed_ms: u64,
    pub cells: Vec<CellResult>,
    pub met: usize,
    pub total: usize,
}

fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[mid]
    } else {
        (xs[mid - 1] + xs[mid]) / 2.0
    }
}

/// Runs one cell over `seeds` and judges it.
pub fn run_cell(cell: &MatrixCell, seeds: &[u64]) -> Result<CellResult, String> {
    let mut runs = Vec::new();
    let mut bound = Bound::RealLimit;
    for &seed in seeds {
        let o = SimulateOptions {
            seed,
            ..cell.options.clone()
        };
        let run = run(&o)?;
        let against_bound = against_bound(&o, &run.report);
        bound = against_bound.bound;
        runs.push(MatrixRun {
            seed,
            against_bound,
            run,
        });
    }
    let of = |f: &dyn Fn(&MatrixRun) -> f64| median(runs.iter().map(f).collect());
    let interactive = |f: &dyn Fn(&LaneWaits) -> u64| {
        let xs: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.run.waits_of(Lane::Interactive).map(|w| f(w) as f64))
            .collect();
        (!xs.is_empty()).then(|| median(xs))
    };
    let medians = CellMedians {
        rate_limited_per_1000: of(&|r| r.run.report.rate_limited_per_1000),
        share: of(&|r| r.against_bound.share),
        finish_over_ideal: of(&|r| r.against_bound.finish_over_ideal),
        lost: of(&|r| r.run.report.lost as f64),
        doubled: of(&|r| r.run.report.duplicate_creates as f64),
        interactive_p50_ms: interactive(&|w| w.p50_ms),
        interactive_p95_ms: interactive(&|w| w.p95_ms),
    };
    let peaks: Vec<PeakFigure> = cell
        .options
        .real_windows()
        .iter()
        .enumerate()
        .map(|(i, w)| {
            // Arrivals at the server, refused ones included: the server's own count can never
            // pass the limit.
            let per_run = |r: &MatrixRun| {
                r.run
                    .report
                    .per_window
                    .get(i)
                    .map_or(0, |p: &WindowPeak| p.max_attempts)
            };
            PeakFigure {
                limit: w.limit,
                length_ms: w.length_ms,
                median: median(runs.iter().map(|r| f64::from(per_run(r))).collect()),
                max: runs.iter().map(per_run).max().unwrap_or(0),
            }
        })
        .collect();
    let worst =
        |f: &dyn Fn(&Report) -> u64| runs.iter().map(|r| f(&r.run.report)).max().unwrap_or(0);
    let worst_rate_limited = worst(&|r| r.rate_limited);
    let worst_lost = worst(&|r| r.lost);
    let worst_doubled = worst(&|r| r.duplicate_creates);

    let t = &cell.target;
    let mut misses = Vec::new();
    if let Some(max) = t.max_429_per_run {
        if worst_rate_limited > max {
            misses.push(format!(
                "{worst_rate_limited} 429s in a run (at most {max})"
            ));
        }
    }
    if let Some(min) = t.min_share {
        if medians.share < min {
            misses.push(format!("share {:.3} (at least {min})", medians.share));
        }
    }
    if t.never_above_windows {
        for p in peaks.iter().filter(|p| p.max > p.limit) {
            misses.push(format!(
                "{} arrivals in one {} window (limit {})",
                p.max,
                length_text(p.length_ms),
                p.limit
            ));
        }
    }
    if let Some(max) = t.max_finish_over_ideal {
        if medians.finish_over_ideal > max {
            misses.push(format!(
                "finish {:.3} of the ideal (at most {max})",
                medians.finish_over_ideal
            ));
        }
    }
    if worst_lost > 0 {
        misses.push(format!("{worst_lost} jobs lost in a run"));
    }
    if worst_doubled > 0 {
        misses.push(format!("{worst_doubled} jobs applied twice in a run"));
    }
    Ok(CellResult {
        name: cell.name.clone(),
        target: t.clone(),
        target_text: t.describe(),
        bound,
        medians,
        peaks,
        worst_rate_limited,
        worst_lost,
        worst_doubled,
        pass: misses.is_empty(),
        misses,
        runs,
    })
}

/// Runs every cell of [`matrix_cells`] over [`MATRIX_SEEDS`].
pub fn run_matrix(base: &SimulateOptions) -> Result<MatrixReport, String> {
    let started = std::time::Instant::now();
    let seeds: Vec<u64> = MATRIX_SEEDS.collect();
    let cells = matrix_cells(base)
        .iter()
        .map(|c| run_cell(c, &seeds))
        .collect::<Result<Vec<_>, _>>()?;
    let met = cells.iter().filter(|c| c.pass).count();
    Ok(MatrixReport {
        algorithm: base.algorithm,
        server_counting: base.server_counting,
        interactive_share: base.interactive_share,
        seeds,
        elapsed_ms: started.elapsed().as_millis() as u64,
        total: cells.len(),
        met,
        cells,
    })
}

fn figure(median: f64) -> String {
    if median.fract() == 0.0 {
        format!("{median}")
    } else {
        format!("{median:.1}")
    }
}

/// The matrix as a text table: one row per cell, medians over seeds, then the verdict.
pub fn matrix_table(m: &MatrixReport) -> String {
    let interactive = m
        .cells
        .iter()
        .any(|c| c.medians.interactive_p95_ms.is_some());
    let mut header = vec![
        "cell",
        "429/1k",
        "share",
        "of",
        "finish/ideal",
        "peak/limit",
        "lost",
        "doubled",
        "worst 429s",
    ];
    if interactive {
        header.extend(["int p50", "int p95"]);
    }
    header.extend(["target", "result"]);
    let rows: Vec<Vec<String>> = m
        .cells
        .iter()
        .map(|c| {
            let peaks = c
                .peaks
                .iter()
                .map(|p| {
                    let worst = if f64::from(p.max) != p.median {
                        format!(" (max {})", p.max)
                    } else {
                        String::new()
                    };
                    format!("{}/{}{worst}", figure(p.median), p.limit)
                })
                .collect::<Vec<_>>()
                .join(", ");
            let mut row = vec![
                c.name.clone(),
                format!("{:.2}", c.medians.rate_limited_per_1000),
                format!("{:.3}", c.medians.share),
                c.bound.short().to_string(),
                format!("{:.3}", c.medians.finish_over_ideal),
                peaks,
                figure(c.medians.lost),
                figure(c.medians.doubled),
                c.worst_rate_limited.to_string(),
            ];
            if interactive {
                let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0} ms"));
                row.push(ms(c.medians.interactive_p50_ms));
                row.push(ms(c.medians.interactive_p95_ms));
            }
            row.push(c.target_text.clone());
            row.push(if c.pass { "PASS" } else { "FAIL" }.into());
            row
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join(" | ")
            .trim_end()
            .to_string()
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "sluice simulate --matrix: algorithm {}, {} server, seeds {}..={}, medians over seeds",
        serde_json::to_value(m.algorithm)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        serde_json::to_value(m.server_counting)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        m.seeds.first().copied().unwrap_or(0),
        m.seeds.last().copied().unwrap_or(0),
    );
    let _ = writeln!(
        out,
        "{}",
        line(header.iter().map(|h| h.to_string()).collect())
    );
    let _ = writeln!(
        out,
        "{}",
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("-|-")
    );
    for r in rows {
        let _ = writeln!(out, "{}", line(r));
    }
    for c in m.cells.iter().filter(|c| !c.pass) {
        let _ = writeln!(out, "  {} missed: {}", c.name, c.misses.join("; "));
    }
    let _ = writeln!(
        out,
        "share of: limit = the real limit, left = what other callers leave of it, K/rtt = the \
         concurrency bound (K over the mean round trip), ideal = ideal time over time taken (several windows). 429s, peaks, \
         lost and doubled are judged on the worst seed, share and finish on the median."
    );
    let _ = writeln!(out, "{} of {} cells meet their target", m.met, m.total);
    out
}
