//! `sluice simulate`: the engine against the simulated strict server, on a fake clock.
//!
//! Hours of traffic run in milliseconds, so this is where the engine's figures (429s per
//! 1,000, share of the limit, the most starts in any window) are measured without a browser.

use serde::Serialize;
use sluice_shared::config::{BudgetConfig, EngineConfig, RetryConfig, Window};
use sluice_shared::sim::{self, HeaderStyle, Report, RetryAfterForm, Scenario, ServerModel};

/// The knobs of one simulated run.
#[derive(Clone, Debug)]
pub struct SimulateOptions {
    pub jobs: usize,
    pub limit: u32,
    pub window_ms: u64,
    pub concurrency: u32,
    pub one_way_ms: u64,
    pub jitter_ms: u64,
    pub retry_after: RetryAfterForm,
    pub headers: HeaderStyle,
    pub fault_rate: f64,
    pub lost_response_rate: f64,
    pub other_callers_per_s: f64,
    /// The limit the engine is told (defaults to the server's real one).
    pub configured_limit: Option<u32>,
    pub target_utilization: f64,
    pub rebuilds: usize,
    pub save_ms: u64,
    pub seed: u64,
}

impl Default for SimulateOptions {
    fn default() -> Self {
        Self {
            jobs: 2_000,
            limit: 100,
            window_ms: 1_000,
            concurrency: 4,
            one_way_ms: 15,
            jitter_ms: 5,
            retry_after: RetryAfterForm::Delta,
            headers: HeaderStyle::XRateLimit,
            fault_rate: 0.0,
            lost_response_rate: 0.0,
            other_callers_per_s: 0.0,
            configured_limit: None,
            target_utilization: BudgetConfig::default().target_utilization,
            rebuilds: 0,
            save_ms: 3,
            seed: 1,
        }
    }
}

/// The run's figures and the options that produced them.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SimulateReport {
    pub limit: u32,
    pub window_ms: u64,
    pub concurrency: u32,
    pub latency_ms: u64,
    pub seed: u64,
    #[serde(flatten)]
    pub report: Report,
    pub finish_over_ideal: f64,
}

pub fn scenario(o: &SimulateOptions) -> Result<Scenario, String> {
    if o.jobs == 0 || o.limit == 0 || o.window_ms == 0 || o.concurrency == 0 {
        return Err("--jobs, --limit, --window-ms and --concurrency must be above 0".into());
    }
    for (name, v) in [
        ("--fault-rate", o.fault_rate),
        ("--lost-rate", o.lost_response_rate),
    ] {
        if !(0.0..=1.0).contains(&v) {
            return Err(format!("{name} must be between 0 and 1, got {v}"));
        }
    }
    let horizon_ms = 24 * 3_600_000;
    let rebuilds = (1..=o.rebuilds)
        .map(|i| {
            // Spread over the run's ideal length, so the kills land mid-run.
            let ideal = o.jobs as u64 * o.window_ms / o.limit as u64;
            ideal * i as u64 / (o.rebuilds as u64 + 1) + 7 * i as u64
        })
        .collect();
    Ok(Scenario {
        seed: o.seed,
        engine: EngineConfig {
            budgets: vec![BudgetConfig {
                name: "api".into(),
                windows: vec![Window {
                    limit: o.configured_limit.unwrap_or(o.limit),
                    length_ms: o.window_ms,
                }],
                concurrency: o.concurrency,
                target_utilization: o.target_utilization,
                ..BudgetConfig::default()
            }],
            retry: RetryConfig::default(),
            ..EngineConfig::default()
        },
        server: ServerModel {
            limit: o.limit,
            window_ms: o.window_ms,
            one_way_ms: o.one_way_ms,
            jitter_ms: o.jitter_ms,
            retry_after: o.retry_after,
            headers: o.headers,
            fault_rate: o.fault_rate,
            lost_response_rate: o.lost_response_rate,
            other_callers_per_s: o.other_callers_per_s,
            ..ServerModel::default()
        },
        arrivals: vec![sim::bulk_creates("api", o.jobs, 0)],
        rebuilds,
        save_ms: o.save_ms,
        horizon_ms,
    })
}

pub fn run(o: &SimulateOptions) -> Result<SimulateReport, String> {
    let s = scenario(o)?;
    let report = sim::run(&s);
    let ideal = report.ideal_ms.max(1) as f64;
    Ok(SimulateReport {
        limit: o.limit,
        window_ms: o.window_ms,
        concurrency: o.concurrency,
        latency_ms: 2 * o.one_way_ms,
        seed: o.seed,
        finish_over_ideal: report.finished_at_ms as f64 / ideal,
        report,
    })
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
    fn bad_options_are_explained() {
        let err = run(&SimulateOptions {
            fault_rate: 2.0,
            ..SimulateOptions::default()
        })
        .unwrap_err();
        assert!(err.contains("--fault-rate"), "{err}");
    }
}
