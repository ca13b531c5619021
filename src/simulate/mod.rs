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
    self, HeaderStyle, Report, RetryAfterForm, Scenario, ServerModel, WindowCounting, WindowPeak,
};
use sluice_shared::sim_tokens::{token_jobs, tokens_resource};

mod judge;
mod matrix;
#[cfg(test)]
mod tests;

pub use judge::*;
pub use matrix::*;

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
    /// How the server counts its windows (`--fixed-server`: fixed ones).
    pub server_counting: WindowCounting,
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

impl SimulateOptions {
    /// The fixed part of each way for a path whose mean round trip is `latency_ms`: each way's
    /// jitter adds half its spread to the mean (`arrival_jitter_ms` the way there's when it
    /// differs from `jitter_ms`, the way back's).
    pub fn one_way_for(latency_ms: u64, jitter_ms: u64, arrival_jitter_ms: Option<u64>) -> u64 {
        latency_ms.saturating_sub(
            arrival_jitter_ms
                .unwrap_or(jitter_ms)
                .saturating_add(jitter_ms)
                / 2,
        ) / 2
    }
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
            server_counting: WindowCounting::Sliding,
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
            counting: o.server_counting,
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
