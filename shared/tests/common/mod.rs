//! The engine set-up the integration tests share: a budget `api` for the URLs under
//! `https://api.example/`, an engine with that budget alone, a bulk create, and the wake-up
//! that takes every start the engine allows. Each test file says what it changes from here
//! (`BudgetConfig { batches, ..budget(10, 1_000, 4) }`), so what differs is what is written.
//!
//! Each test file is its own crate and uses some of these, so the rest are unused there.
#![allow(dead_code)]

use sluice_shared::config::{BudgetConfig, EngineConfig, Window};
use sluice_shared::engine::{Engine, Transmit};
use sluice_shared::job::{JobKind, JobSpec, Lane};
use sluice_shared::random::Rng;

/// The origin of the tests' API.
pub const API: &str = "https://api.example";

/// Budget `api`: `limit` requests per `window_ms`, `concurrency` at once, for every URL under
/// [`API`], starts paced (the default).
pub fn budget(limit: u32, window_ms: u64, concurrency: u32) -> BudgetConfig {
    BudgetConfig {
        name: "api".into(),
        windows: vec![Window {
            limit,
            length_ms: window_ms,
        }],
        concurrency,
        match_prefixes: vec![format!("{API}/")],
        ..BudgetConfig::default()
    }
}

/// `budget` without pacing: whatever may go, goes at once, so a test can start several
/// requests at the same instant and read what is sent when.
pub fn burst(budget: BudgetConfig) -> BudgetConfig {
    BudgetConfig {
        pacing: false,
        ..budget
    }
}

/// A configuration with `budget` alone, the rest as by default.
pub fn config_with(budget: BudgetConfig) -> EngineConfig {
    EngineConfig {
        budgets: vec![budget],
        ..EngineConfig::default()
    }
}

/// An engine with `budget` alone, its randomness seeded with `seed` so runs repeat.
pub fn engine_with(budget: BudgetConfig, seed: u64) -> Engine {
    Engine::new(config_with(budget), Rng::seeded(seed)).expect("the test configuration is valid")
}

/// A bulk `POST` creating contact `n`.
pub fn create(n: usize) -> JobSpec {
    JobSpec {
        kind: JobKind::Create,
        lane: Lane::Bulk,
        method: "POST".into(),
        url: format!("{API}/contacts"),
        body: Some(format!("{{\"n\":{n}}}")),
        ..JobSpec::default()
    }
}

/// A wake-up at `now`: what fell due happens, then every start the engine allows is taken.
pub fn drain(engine: &mut Engine, now: u64) -> Vec<Transmit> {
    engine.handle_timeout(now);
    std::iter::from_fn(|| engine.poll_transmit(now)).collect()
}
