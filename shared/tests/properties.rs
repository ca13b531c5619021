//! Invariants over random traffic: never above the limit, every job ends, no create applied
//! twice, no key reordered, and the aging bound holds.

use proptest::prelude::*;

use sluice_shared::config::{BudgetConfig, EngineConfig, RetryConfig, Window};
use sluice_shared::engine::{Engine, Response};
use sluice_shared::job::{JobKind, JobSpec, Lane};
use sluice_shared::random::Rng;
use sluice_shared::sim::{self, Arrival, HeaderStyle, RetryAfterForm, Scenario, ServerModel};

fn lane(i: u8) -> Lane {
    Lane::ALL[(i % 3) as usize]
}

prop_compose! {
    fn job_spec()(kind in 0u8..4, l in 0u8..3, key in prop::option::of(0u8..5), n in 0u32..1000)
        -> JobSpec {
        let (kind, method) = match kind {
            0 => (JobKind::Create, "POST"),
            1 => (JobKind::Patch, "PATCH"),
            2 => (JobKind::Delete, "DELETE"),
            _ => (JobKind::Custom, "PUT"),
        };
        JobSpec {
            budget: "api".into(),
            lane: lane(l),
            key: key.map(|k| format!("record:{k}")),
            kind,
            method: method.into(),
            url: format!("https://api.example/records/{}", key.unwrap_or(9)),
            body: if method == "DELETE" { None } else { Some(format!("{{\"v\":{n}}}")) },
            ..JobSpec::default()
        }
    }
}

prop_compose! {
    fn scenario()(
        seed in any::<u64>(),
        limit in 3u32..60,
        window_ms in 200u64..2_000,
        concurrency in 1u32..8,
        batches in prop::collection::vec((0u64..5_000, prop::collection::vec(job_spec(), 1..40)), 1..5),
        fault_rate in 0.0f64..0.04,
        lost_rate in 0.0f64..0.03,
        rebuilds in prop::collection::vec(0u64..20_000, 0..4),
        headers in 0u8..3,
        retry_after in 0u8..3,
        one_way in 1u64..40,
        save_ms in prop_oneof![Just(0u64), 1u64..30],
    ) -> Scenario {
        let budget = BudgetConfig {
            name: "api".into(),
            windows: vec![Window { limit, length_ms: window_ms }],
            concurrency,
            ..BudgetConfig::default()
        };
        Scenario {
            seed,
            engine: EngineConfig {
                budgets: vec![budget],
                retry: RetryConfig { max_attempts: 5, timeout_ms: 2_000, ..RetryConfig::default() },
                ..EngineConfig::default()
            },
            server: ServerModel {
                limit,
                window_ms,
                one_way_ms: one_way,
                // Jitter within the initial margin, with rebuilds and faults: see
                // `never_above_the_limit_with_jitter_up_to_a_tenth_of_the_window` for more.
                jitter_ms: window_ms / 60,
                fault_rate,
                lost_response_rate: lost_rate,
                headers: [HeaderStyle::None, HeaderStyle::XRateLimit, HeaderStyle::Ietf][headers as usize],
                retry_after: [RetryAfterForm::Delta, RetryAfterForm::HttpDate, RetryAfterForm::None][retry_after as usize],
                ..ServerModel::default()
            },
            arrivals: batches.into_iter().map(|(at, specs)| Arrival { at, specs }).collect(),
            rebuilds,
            save_ms,
            horizon_ms: 4 * 3_600_000,
        }
    }
}

prop_compose! {
    /// One-way jitter up to a tenth of the window, faults and lost answers, no rebuilds: the
    /// margins are measured from the round trips, not a share of the window kept in reserve.
    fn jittery_scenario()(base in scenario(), per_mille in 0u64..=100) -> Scenario {
        let mut s = base;
        s.server.jitter_ms = s.server.window_ms * per_mille / 1_000;
        s.rebuilds.clear();
        s
    }
}

/// What a run against a server whose limit the engine was told must show: never above the
/// limit, no 429, nothing lost, every job ended, no create applied twice, no key reordered.
fn told_limit_invariants(s: &Scenario, report: &sim::Report) -> Result<(), TestCaseError> {
    let limit = s.server.limit;
    prop_assert!(
        report.max_starts_in_window <= limit,
        "starts {} > limit {limit}",
        report.max_starts_in_window
    );
    prop_assert_eq!(
        report.rate_limited,
        0,
        "told the limit, so no 429s: {}",
        report.summary()
    );
    prop_assert_eq!(report.lost, 0);
    prop_assert_eq!(report.unfinished, 0, "every job ends: {}", report.summary());
    prop_assert_eq!(report.duplicate_creates, 0, "{}", report.summary());
    for (key, seqs) in &report.applied_per_key {
        prop_assert!(
            seqs.windows(2).all(|w| w[0] <= w[1]),
            "key {key} reordered: {seqs:?}"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn never_above_the_limit_with_jitter_up_to_a_tenth_of_the_window(s in jittery_scenario()) {
        told_limit_invariants(&s, &sim::run(&s))?;
    }

    #[test]
    fn engine_invariants_hold_against_a_strict_server(s in scenario()) {
        told_limit_invariants(&s, &sim::run(&s))?;
    }

    #[test]
    fn aging_bound_holds_under_endless_interactive_load(
        seed in any::<u64>(),
        overload in 1u32..4,
        bg_times in prop::collection::vec(0u64..60_000, 1..5),
        bulk_times in prop::collection::vec(0u64..60_000, 0..5),
    ) {
        let limit = 10u32;
        let config = EngineConfig {
            budgets: vec![BudgetConfig {
                name: "api".into(),
                windows: vec![Window { limit, length_ms: 1_000 }],
                concurrency: 20,
                ..BudgetConfig::default()
            }],
            ..EngineConfig::default()
        };
        let mut e = Engine::new(config.clone(), Rng::seeded(seed)).unwrap();
        let mut watched = Vec::new();
        let mut now = 0u64;
        let mut n = 0u64;
        let end = 60_000 + config.aging.bound(Lane::Background).unwrap() + 5_000;
        let token = 1_000 / limit as u64;
        let mut started = std::collections::HashMap::new();
        while now < end {
            for _ in 0..overload {
                let spec = JobSpec {
                    budget: "api".into(), lane: Lane::Interactive, kind: JobKind::Custom,
                    method: "POST".into(), url: "https://api.example/chat".into(),
                    body: Some(n.to_string()), ..JobSpec::default()
                };
                e.enqueue(spec, now).unwrap();
                n += 1;
            }
            for (&t, l) in bg_times.iter().map(|t| (t, Lane::Background))
                .chain(bulk_times.iter().map(|t| (t, Lane::Bulk))) {
                if t >= now && t < now + token {
                    let spec = JobSpec {
                        budget: "api".into(), lane: l, kind: JobKind::Custom, method: "POST".into(),
                        url: "https://api.example/refresh".into(), body: Some(format!("bg{n}")),
                        ..JobSpec::default()
                    };
                    watched.push((e.enqueue(spec, now).unwrap().id, now, l));
                    n += 1;
                }
            }
            e.handle_timeout(now);
            while let Some(t) = e.poll_transmit(now) {
                started.insert(t.job_id.clone(), now);
                e.on_response(&t.job_id, Response { status: 200, ..Response::default() }, now);
            }
            now += token;
        }
        for (i, (id, enqueued, l)) in watched.iter().enumerate() {
            // Once risen above every fresh interactive job, a job is behind only older jobs
            // that rose too, and the aged take one start in `AGED_TURN_EVERY` from the
            // interactive stream: each aged job ahead, and this one, cost that many intervals.
            let older = watched[..i].len() as u64;
            let turns = u64::from(sluice_shared::engine::AGED_TURN_EVERY);
            let bound = config.aging.bound(*l).unwrap() + (older + 1) * turns * token;
            let s = started.get(id).copied();
            prop_assert!(s.is_some(), "{l:?} job enqueued at {enqueued} never started");
            let waited = s.unwrap() - enqueued;
            prop_assert!(waited <= bound + 2 * token, "{l:?} waited {waited} ms, bound {bound}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Job URLs and scopes come from pages and configurations: no text makes the parser
    /// panic, and a scope never covers a URL on another origin or outside its path segments.
    #[test]
    fn url_scopes_parse_any_text_and_match_only_within_their_origin_and_path(
        text in ".{0,80}",
        scope in "https?://[a-c.]{1,6}(:[0-9]{1,5})?(/[a-c.]{0,3}){0,3}/?",
        url in "https?://[a-c.]{1,6}(:[0-9]{1,5})?(/[a-c.]{0,3}){0,3}/?([?#][a-c]{0,3})?",
    ) {
        use sluice_shared::scope::{Scope, Target};
        let _ = Target::parse(&text);
        let _ = Scope::parse(&text);
        if let (Ok(s), Ok(t)) = (Scope::parse(&scope), Target::parse(&url)) {
            let scope_target = Target::parse(&scope).unwrap();
            if s.covers(&t) {
                prop_assert_eq!(scope_target.origin(), t.origin());
                let p = scope_target.path.trim_end_matches('/');
                prop_assert!(
                    t.path == scope_target.path
                        || t.path.starts_with(&format!("{p}/"))
                        || p.is_empty(),
                    "{} covers {}", scope, url
                );
            }
        }
    }
}
