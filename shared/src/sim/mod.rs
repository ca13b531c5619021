//! A deterministic simulation of the engine against a strict server.
//!
//! This is how the engine's promises are proven: a fake clock, a server that counts arrivals
//! in an exact sliding window (or, as configured, in fixed windows) and answers 429 the moment a request would exceed it, network
//! latency with jitter between our start and the server's count, an idempotency store that
//! counts applied creates, injected 5xx and "applied, then the response was lost" timeouts,
//! other callers spending the same quota, and rebuilds of the engine from its saved state at
//! random moments — the browser killing the worker. Everything is driven by one seed, so a
//! failing run can be replayed exactly.
//!
//! The parts, to read in this order:
//! - `simulation.rs`: one run, as the `Simulation` that drives the worker's engine and pump
//!   against the fake clock, with one method per kind of event;
//! - `server.rs`: the strict server, what it enforces and how it answers;
//! - `headers.rs`: the rate-limit headers it writes, in each style it can speak;
//! - `disk.rs`: the worker's storage and its saves in flight;
//! - `report.rs`: the figures a run ends with.

use serde::{Deserialize, Serialize};

use crate::config::EngineConfig;
use crate::job::{JobKind, JobSpec, Lane};
use crate::time::{DurationMs, Millis};

mod disk;
mod headers;
mod report;
mod server;
mod simulation;

pub use report::{ideal_time, ideal_time_windows, max_in_window, Report, WindowPeak};
pub use server::{HeaderStyle, RetryAfterForm, ServerModel, WindowCounting};

use simulation::Simulation;

/// One batch of work handed to the engine at a moment.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Arrival {
    pub at: Millis,
    pub specs: Vec<JobSpec>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scenario {
    pub seed: u64,
    pub engine: EngineConfig,
    pub server: ServerModel,
    pub arrivals: Vec<Arrival>,
    /// Moments at which the worker is killed and the engine rebuilt from its saved state.
    pub rebuilds: Vec<Millis>,
    /// How long one save takes to become durable. The simulated worker runs the real one's
    /// pump ([`crate::pump`]): one save of its own in flight, what changes meanwhile in the
    /// next, and each enqueue saved in a transaction of its own with the starts it makes
    /// possible. Saves wait for the one before them, as IndexedDB's transactions on the same
    /// stores do; a kill loses those in flight. 0: a save lands in the same millisecond, after
    /// what was already due then.
    #[serde(default)]
    pub save_ms: DurationMs,
    /// Give up after this much simulated time.
    pub horizon_ms: DurationMs,
}

/// Runs a scenario to completion (or the horizon) and reports.
pub fn run(scenario: &Scenario) -> Report {
    let mut simulation = Simulation::new(scenario);
    while simulation.step() {}
    simulation.finish()
}

/// `n` single creates in `lane`, one arrival each, spread evenly over `span_ms` from `from`.
pub fn spread_creates(
    budget: &str,
    lane: Lane,
    n: usize,
    from: Millis,
    span_ms: DurationMs,
) -> Vec<Arrival> {
    (0..n)
        .map(|i| Arrival {
            at: from + span_ms * (i as u64 + 1) / (n as u64 + 1),
            specs: vec![JobSpec {
                budget: budget.into(),
                lane,
                kind: JobKind::Create,
                method: "POST".into(),
                url: format!("https://api.example/contacts?{}={i}", lane.name()),
                body: Some(format!("{{\"{}\":{i}}}", lane.name())),
                ..JobSpec::default()
            }],
        })
        .collect()
}

/// A bulk job of `n` creates on one budget, all enqueued at `at`.
pub fn bulk_creates(budget: &str, n: usize, at: Millis) -> Arrival {
    Arrival {
        at,
        specs: (0..n)
            .map(|i| JobSpec {
                budget: budget.into(),
                lane: Lane::Bulk,
                kind: JobKind::Create,
                method: "POST".into(),
                url: format!("https://api.example/contacts?n={i}"),
                body: Some(format!("{{\"n\":{i}}}")),
                ..JobSpec::default()
            })
            .collect(),
    }
}
