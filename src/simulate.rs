//! `sluice simulate`: the engine against the simulated strict server, on a fake clock.
//!
//! Hours of traffic run in milliseconds, so this is where the engine's figures (429s per
//! 1,000, share of the limit, the most starts in any window) are measured without a browser.
//! [`run_matrix`] runs a fixed grid of conditions over several seeds and judges each against
//! its target: the measuring instrument for limiter changes.

use std::fmt::Write as _;

use serde::Serialize;
use sluice_shared::config::{Algorithm, BudgetConfig, EngineConfig, RetryConfig, Window};
use sluice_shared::job::Lane;
use sluice_shared::random::Rng;
use sluice_shared::sim::{
    self, HeaderStyle, Report, RetryAfterForm, Scenario, ServerModel, WindowPeak,
};
use sluice_shared::sim_tokens::{token_jobs, tokens_resource};

/// The knobs of one simulated run.
#[derive(Clone, Debug)]
pub struct SimulateOptions {
    pub jobs: usize,
    pub limit: u32,
    pub window_ms: u64,
    /// Several windows enforced together (`--windows`); replaces `limit` per `window_ms`.
    pub windows: Option<Vec<Window>>,
    pub concurrency: u32,
    pub one_way_ms: u64,
    pub jitter_ms: u64,
    /// The way there's jitter when it differs from the way back's (`jitter_ms`).
    pub arrival_jitter_ms: Option<u64>,
    pub retry_after: RetryAfterForm,
    pub headers: HeaderStyle,
    pub fault_rate: f64,
    pub lost_response_rate: f64,
    /// Share of requests answered `slow_ms` late (`--slow-rate`, `--slow-ms`).
    pub slow_rate: f64,
    pub slow_ms: u64,
    /// The server allows no burst (`--no-burst`, nginx's `limit_req` without `burst=`).
    pub no_burst: bool,
    /// The first request's way there is this much longer (`--first-extra-ms`: its preflight).
    pub first_extra_ms: u64,
    pub other_callers_per_s: f64,
    /// The limit the engine is told (defaults to the server's real one).
    pub configured_limit: Option<u32>,
    /// The windows the engine is told (defaults to the server's real ones).
    pub configured_windows: Option<Vec<Window>>,
    pub algorithm: Algorithm,
    /// Share (0..1) of the jobs that are interactive-lane creates, arriving one by one spread
    /// over the run; the rest are one bulk job enqueued at the start.
    pub interactive_share: f64,
    pub target_utilization: f64,
    pub rebuilds: usize,
    pub save_ms: u64,
    pub seed: u64,
    /// Tokens a minute the server also counts (`--tokens-per-minute`): the bulk jobs are then
    /// completions of random size, told to the budget as its `tokens` resource (see
    /// `sluice_shared::sim_tokens`).
    pub tokens_per_minute: Option<u32>,
    /// The completions' mean bound in tokens (`--mean-tokens`).
    pub mean_tokens: u64,
}

impl Default for SimulateOptions {
    fn default() -> Self {
        Self {
            jobs: 2_000,
            limit: 100,
            window_ms: 1_000,
            windows: None,
            concurrency: 4,
            one_way_ms: 15,
            jitter_ms: 5,
            arrival_jitter_ms: None,
            retry_after: RetryAfterForm::Delta,
            headers: HeaderStyle::XRateLimit,
            fault_rate: 0.0,
            lost_response_rate: 0.0,
            slow_rate: 0.0,
            slow_ms: 2_000,
            no_burst: false,
            first_extra_ms: 0,
            other_callers_per_s: 0.0,
            configured_limit: None,
            configured_windows: None,
            algorithm: Algorithm::default(),
            interactive_share: 0.0,
            target_utilization: BudgetConfig::default().target_utilization,
            rebuilds: 0,
            save_ms: 3,
            seed: 1,
            tokens_per_minute: None,
            mean_tokens: 1_000,
        }
    }
}

impl SimulateOptions {
    /// The windows the server really enforces.
    pub fn real_windows(&self) -> Vec<Window> {
        self.windows.clone().unwrap_or_else(|| {
            vec![Window {
                limit: self.limit,
                length_ms: self.window_ms,
            }]
        })
    }

    /// The windows the engine is told.
    pub fn told_windows(&self) -> Vec<Window> {
        self.configured_windows
            .clone()
            .or_else(|| self.windows.clone())
            .unwrap_or_else(|| {
                vec![Window {
                    limit: self.configured_limit.unwrap_or(self.limit),
                    length_ms: self.window_ms,
                }]
            })
    }

    /// Jobs in the interactive lane (the rest are bulk).
    pub fn interactive_jobs(&self) -> usize {
        ((self.jobs as f64 * self.interactive_share).round() as usize).min(self.jobs)
    }

    /// The mean round trip the simulator produces: each way takes `one_way_ms` plus up to
    /// its jitter (uniform, never less), so the two jitters add half their sum on average.
    pub fn mean_round_trip_ms(&self) -> f64 {
        let there = self.arrival_jitter_ms.unwrap_or(self.jitter_ms);
        (2 * self.one_way_ms) as f64 + (there as f64 + self.jitter_ms as f64) / 2.0
    }

    /// Requests per millisecond the concurrency allows: K in flight, each taking the mean
    /// round trip.
    pub fn concurrency_rate_per_ms(&self) -> f64 {
        f64::from(self.concurrency) / self.mean_round_trip_ms().max(1.0)
    }

    /// How long all the jobs take at best: at the real windows' limits, or at the concurrency
    /// bound when that is slower.
    fn ideal_span_ms(&self) -> u64 {
        let by_windows = sim::ideal_time_windows(self.jobs as u64, &self.real_windows());
        let by_concurrency = (self.jobs as f64 / self.concurrency_rate_per_ms()) as u64;
        by_windows.max(by_concurrency)
    }
}

pub use sluice_shared::windows_text::{
    length_text, parse_windows, windows_text, WindowList, WindowsError,
};

/// How long the jobs of one lane waited from enqueue to their first start.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaneWaits {
    pub lane: Lane,
    pub jobs: usize,
    pub p50_ms: u64,
    pub p95_ms: u64,
    pub max_ms: u64,
}

fn lane_waits(report: &Report) -> Vec<LaneWaits> {
    Lane::ALL
        .iter()
        .filter_map(|&lane| {
            let mut waits: Vec<u64> = report
                .waits
                .iter()
                .filter(|(_, _, l)| *l == lane)
                .map(|(enqueued, started, _)| started.saturating_sub(*enqueued))
                .collect();
            if waits.is_empty() {
                return None;
            }
            waits.sort_unstable();
            // Nearest rank.
            let rank = |p: f64| {
                waits[((p * waits.len() as f64).ceil() as usize).clamp(1, waits.len()) - 1]
            };
            Some(LaneWaits {
                lane,
                jobs: waits.len(),
                p50_ms: rank(0.50),
                p95_ms: rank(0.95),
                max_ms: waits[waits.len() - 1],
            })
        })
        .collect()
}

/// The run's figures and the options that produced them.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SimulateReport {
    pub limit: u32,
    pub window_ms: u64,
    /// Every window the server enforced.
    pub windows: Vec<Window>,
    /// The windows the engine was told.
    pub configured_windows: Vec<Window>,
    pub algorithm: Algorithm,
    pub concurrency: u32,
    pub latency_ms: u64,
    pub jitter_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arrival_jitter_ms: Option<u64>,
    pub seed: u64,
    pub interactive_share: f64,
    #[serde(flatten)]
    pub report: Report,
    pub finish_over_ideal: f64,
    /// Per lane that had jobs: the wait from enqueue to the first start.
    pub lane_waits: Vec<LaneWaits>,
}

impl SimulateReport {
    pub fn waits_of(&self, lane: Lane) -> Option<&LaneWaits> {
        self.lane_waits.iter().find(|w| w.lane == lane)
    }
}

pub fn scenario(o: &SimulateOptions) -> Result<Scenario, String> {
    if o.jobs == 0 || o.limit == 0 || o.window_ms == 0 || o.concurrency == 0 {
        return Err("--jobs, --limit, --window-ms and --concurrency must be above 0".into());
    }
    for (name, v) in [
        ("--fault-rate", o.fault_rate),
        ("--lost-rate", o.lost_response_rate),
        ("--slow-rate", o.slow_rate),
        ("--interactive-share", o.interactive_share),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return Err(format!("{name} must be between 0 and 1, got {v}"));
        }
    }
    if o.windows.is_some() && o.configured_limit.is_some() {
        return Err(
            "--configured-limit goes with --limit/--window-ms; with --windows give --configured-windows"
                .into(),
        );
    }
    let real = o.real_windows();
    let told = o.told_windows();
    for (name, ws) in [("--windows", &real), ("--configured-windows", &told)] {
        if ws.is_empty() || ws.iter().any(|w| w.limit == 0 || w.length_ms == 0) {
            return Err(format!(
                "{name} needs at least one window, each with a limit and a length above 0"
            ));
        }
    }
    let horizon_ms = 24 * 3_600_000;
    let span = o.ideal_span_ms();
    let rebuilds = (1..=o.rebuilds)
        .map(|i| {
            // Spread over the run's ideal length, so the kills land mid-run.
            span * i as u64 / (o.rebuilds as u64 + 1) + 7 * i as u64
        })
        .collect();
    let interactive = o.interactive_jobs();
    let mut arrivals = Vec::new();
    if o.jobs > interactive {
        match o.tokens_per_minute {
            Some(_) => {
                let mut rng = Rng::seeded(o.seed ^ 0x746f6b656e73);
                let specs = token_jobs("api", o.jobs - interactive, o.mean_tokens, &mut rng);
                arrivals.push(sim::Arrival { at: 0, specs });
            }
            None => arrivals.push(sim::bulk_creates("api", o.jobs - interactive, 0)),
        }
    }
    arrivals.extend(sim::spread_creates(
        "api",
        Lane::Interactive,
        interactive,
        0,
        span,
    ));
    Ok(Scenario {
        seed: o.seed,
        engine: EngineConfig {
            budgets: vec![BudgetConfig {
                name: "api".into(),
                windows: told,
                concurrency: o.concurrency,
                algorithm: o.algorithm,
                target_utilization: o.target_utilization,
                resources: o
                    .tokens_per_minute
                    .map(tokens_resource)
                    .into_iter()
                    .collect(),
                ..BudgetConfig::default()
            }],
            retry: RetryConfig::default(),
            ..EngineConfig::default()
        },
        server: ServerModel {
            limit: real[0].limit,
            window_ms: real[0].length_ms,
            extra_windows: real[1..].to_vec(),
            one_way_ms: o.one_way_ms,
            jitter_ms: o.jitter_ms,
            arrival_jitter_ms: o.arrival_jitter_ms,
            retry_after: o.retry_after,
            headers: o.headers,
            fault_rate: o.fault_rate,
            lost_response_rate: o.lost_response_rate,
            slow_rate: o.slow_rate,
            slow_ms: o.slow_ms,
            no_burst: o.no_burst,
            first_extra_ms: o.first_extra_ms,
            other_callers_per_s: o.other_callers_per_s,
            tokens_per_minute: o.tokens_per_minute,
            ..ServerModel::default()
        },
        arrivals,
        rebuilds,
        save_ms: o.save_ms,
        horizon_ms,
    })
}

pub fn run(o: &SimulateOptions) -> Result<SimulateReport, String> {
    let s = scenario(o)?;
    let report = sim::run(&s);
    let ideal = report.ideal_ms.max(1) as f64;
    let real = o.real_windows();
    Ok(SimulateReport {
        limit: real[0].limit,
        window_ms: real[0].length_ms,
        windows: real,
        configured_windows: o.told_windows(),
        algorithm: o.algorithm,
        concurrency: o.concurrency,
        latency_ms: 2 * o.one_way_ms,
        jitter_ms: o.jitter_ms,
        arrival_jitter_ms: o.arrival_jitter_ms,
        seed: o.seed,
        interactive_share: o.interactive_share,
        finish_over_ideal: report.finished_at_ms as f64 / ideal,
        lane_waits: lane_waits(&report),
        report,
    })
}

// ---- the matrix ----

/// What a matrix cell must achieve. 429s, window peaks, lost and doubled jobs are judged on the
/// worst seed; share and finish time on the median over seeds. Every cell also requires no
/// lost and no doubled jobs.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// Most 429s in any one run.
    pub max_429_per_run: Option<u64>,
    /// Least median share of the cell's bound (see [`Bound`]).
    pub min_share: Option<f64>,
    /// No run's arrivals above any real window's limit.
    pub never_above_windows: bool,
    /// Most median finish time over the ideal.
    pub max_finish_over_ideal: Option<f64>,
}

impl Target {
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.never_above_windows {
            parts.push("never above a window".to_string());
        }
        match self.max_429_per_run {
            Some(0) => parts.push("0 429s".into()),
            Some(n) => parts.push(format!("<= {n} 429s/run")),
            None => {}
        }
        if let Some(s) = self.min_share {
            parts.push(format!("share >= {s}"));
        }
        if let Some(f) = self.max_finish_over_ideal {
            parts.push(format!("finish <= {f} ideal"));
        }
        parts.join(", ")
    }
}

/// What a cell's share is a share of: the least of what the server allows us and what the
/// concurrency allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bound {
    /// The server's real limit (whatever the engine was told).
    RealLimit,
    /// The real limit less what other callers spent (measured over the run).
    LeftAfterOthers,
    /// K requests in flight over the mean round trip (latency plus the mean of the jitters).
    Concurrency,
    /// Several windows: the ideal time over the time taken.
    Windows,
}

impl Bound {
    fn short(self) -> &'static str {
        match self {
            Bound::RealLimit => "limit",
            Bound::LeftAfterOthers => "left",
            Bound::Concurrency => "K/rtt",
            Bound::Windows => "ideal",
        }
    }
}

/// How a run did against its cell's bound.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgainstBound {
    pub bound: Bound,
    /// Achieved rate while work waited over the bound's rate.
    pub share: f64,
    /// The time the accepted requests take at exactly the bound.
    pub ideal_ms: u64,
    pub finish_over_ideal: f64,
}

/// The share of the bound a run achieved, and which bound it was.
pub fn against_bound(o: &SimulateOptions, r: &Report) -> AgainstBound {
    let accepted = r.requests.saturating_sub(r.rate_limited);
    let (share, bound, ideal_ms) = share_of_bound(o, r);
    let ideal_ms = ideal_ms.unwrap_or(r.ideal_ms);
    AgainstBound {
        bound,
        share,
        ideal_ms,
        finish_over_ideal: if accepted == 0 {
            0.0
        } else {
            r.finished_at_ms as f64 / ideal_ms.max(1) as f64
        },
    }
}

fn share_of_bound(o: &SimulateOptions, r: &Report) -> (f64, Bound, Option<u64>) {
    let real = o.real_windows();
    if real.len() > 1 {
        return (r.share_of_limit, Bound::Windows, None);
    }
    let w = real[0];
    let limit_rate = f64::from(w.limit) / w.length_ms as f64;
    // Others call from the start to the end of the run.
    let others_rate = r.other_arrivals as f64 / r.finished_at_ms.max(1) as f64;
    let (server_rate, server_bound) = if r.other_arrivals > 0 {
        (limit_rate - others_rate, Bound::LeftAfterOthers)
    } else {
        (limit_rate, Bound::RealLimit)
    };
    let concurrency_rate = o.concurrency_rate_per_ms();
    let (allowed, bound) = if concurrency_rate < server_rate {
        (concurrency_rate, Bound::Concurrency)
    } else {
        (server_rate, server_bound)
    };
    let accepted = r.requests.saturating_sub(r.rate_limited);
    if r.busy_ms == 0 || allowed <= 0.0 {
        return (0.0, bound, None);
    }
    let ideal = (accepted.saturating_sub(1) as f64 / allowed) as u64;
    let achieved = accepted as f64 / r.busy_ms as f64;
    (achieved / allowed, bound, Some(ideal))
}

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
/// otherwise. From `base` only the algorithm, the interactive share, the target utilization
/// and the save time carry over.
pub fn matrix_cells(base: &SimulateOptions) -> Vec<MatrixCell> {
    let grid = SimulateOptions {
        algorithm: base.algorithm,
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
        "sluice simulate --matrix: algorithm {}, seeds {}..={}, medians over seeds",
        serde_json::to_value(m.algorithm)
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

#[cfg(test)]
mod tests {
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

    #[test]
    fn bad_options_are_explained() {
        let err = run(&SimulateOptions {
            fault_rate: 2.0,
            ..SimulateOptions::default()
        })
        .unwrap_err();
        assert!(err.contains("--fault-rate"), "{err}");
    }
}
