//! The engine's own cost per decision, with 1,000, 100,000 and 1,000,000 jobs queued.
//!
//! A decision must not scan the queue: a worker holding a million jobs still answers each
//! wake-up in microseconds. Each measured step keeps the queue at its size: one job is
//! enqueued, the next one started and answered (`enqueue` + `poll_transmit` + `on_response` +
//! `take_changes`, the work of one request), and `poll_timeout` is measured on its own.
//!
//! Run: `cargo bench -p sluice-shared --bench engine` (criterion prints the time per step).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sluice_shared::config::{BudgetConfig, EngineConfig, Window};
use sluice_shared::engine::{Engine, Response};
use sluice_shared::job::{JobKind, JobSpec, Lane};
use sluice_shared::random::Rng;

const SIZES: [usize; 3] = [1_000, 100_000, 1_000_000];

fn spec(n: usize) -> JobSpec {
    JobSpec {
        budget: "api".into(),
        lane: if n.is_multiple_of(10) {
            Lane::Interactive
        } else {
            Lane::Bulk
        },
        key: Some(format!("contact:{n}")),
        kind: JobKind::Patch,
        method: "PATCH".into(),
        url: format!("https://api.example/contacts/{n}"),
        body: Some(format!("{{\"owner\":\"o{n}\"}}")),
        ..JobSpec::default()
    }
}

/// An engine with `queued` jobs waiting, on a budget loose enough that only the engine's own
/// work is measured (the limiter still runs: a sliding log over a window of a million).
fn engine_with(queued: usize) -> (Engine, usize) {
    let config = EngineConfig {
        budgets: vec![BudgetConfig {
            name: "api".into(),
            windows: vec![Window {
                limit: 1_000_000,
                length_ms: 1_000,
            }],
            concurrency: 64,
            pacing: false,
            ..BudgetConfig::default()
        }],
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(config, Rng::seeded(7)).expect("valid configuration");
    let specs: Vec<JobSpec> = (0..queued).map(spec).collect();
    engine
        .enqueue_many(specs, Some("bench".into()), 0)
        .expect("valid jobs");
    engine.persistence().take_changes();
    (engine, queued)
}

fn one_request(c: &mut Criterion) {
    let mut group = c.benchmark_group("enqueue + start + answer one job");
    group.sample_size(20);
    for queued in SIZES {
        let (mut engine, mut next) = engine_with(queued);
        let mut now = 1u64;
        group.bench_with_input(BenchmarkId::from_parameter(queued), &queued, |b, _| {
            b.iter(|| {
                now += 1;
                engine.enqueue(spec(next), now).expect("valid job");
                next += 1;
                engine.handle_timeout(now);
                let t = engine.poll_transmit(now).expect("a job is ready");
                engine.on_response(
                    &t.job_id,
                    Response {
                        status: 200,
                        ..Response::default()
                    },
                    now,
                );
                engine.persistence().take_changes()
            });
        });
    }
    group.finish();
}

fn next_deadline(c: &mut Criterion) {
    let mut group = c.benchmark_group("poll_timeout");
    group.sample_size(20);
    for queued in SIZES {
        let (engine, _) = engine_with(queued);
        group.bench_with_input(BenchmarkId::from_parameter(queued), &queued, |b, _| {
            b.iter(|| engine.poll_timeout(1))
        });
    }
    group.finish();
}

criterion_group!(benches, one_request, next_deadline);
criterion_main!(benches);
