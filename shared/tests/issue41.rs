//! Issue 41: answers that never come, answers that come late, and a server that refuses a
//! burst with a bare 429. Each case against the simulated strict server (or the engine alone),
//! with the figure the issue asked for.

use sluice_shared::budget::BudgetState;
use sluice_shared::config::{Algorithm, BudgetConfig, EngineConfig, RetryConfig, Window};
use sluice_shared::engine::{Engine, Response};
use sluice_shared::random::Rng;
use sluice_shared::sim::{self, HeaderStyle, Report, RetryAfterForm, Scenario, ServerModel};
use sluice_shared::time::DurationMs;

fn budget(limit: u32, concurrency: u32) -> BudgetConfig {
    BudgetConfig {
        name: "api".into(),
        windows: vec![Window {
            limit,
            length_ms: 1_000,
        }],
        concurrency,
        ..BudgetConfig::default()
    }
}

/// `jobs` creates against a strict server of `limit` a second, 4 in flight.
fn run(seed: u64, limit: u32, jobs: usize, config: BudgetConfig, server: ServerModel) -> Report {
    sim::run(&Scenario {
        seed,
        engine: EngineConfig {
            budgets: vec![config],
            ..EngineConfig::default()
        },
        server: ServerModel { limit, ..server },
        arrivals: vec![sim::bulk_creates("api", jobs, 0)],
        rebuilds: vec![],
        save_ms: 3,
        horizon_ms: 3_600_000,
    })
}

fn assert_clean(r: &Report, jobs: u64) {
    assert_eq!(r.done, jobs, "{}", r.summary());
    assert_eq!(r.duplicate_creates, 0, "{}", r.summary());
    assert_eq!(r.rate_limited, 0, "{}", r.summary());
}

/// An engine of one budget, driven by hand.
fn engine_with(config: BudgetConfig) -> Engine {
    Engine::new(
        EngineConfig {
            budgets: vec![config],
            ..EngineConfig::default()
        },
        Rng::seeded(1),
    )
    .expect("a valid configuration")
}

/// 1% of answers lost: each was given up after about a second (not the 15 s timeout), tried
/// again with its key, and held neither its slot nor the other slots' pacing meanwhile. Before:
/// 0.19 of the limit at 20 a second, 0.15 at 100.
#[test]
fn one_percent_of_answers_lost_keeps_nine_tenths_of_the_limit() {
    for seed in 1..=3 {
        for (limit, jobs) in [(20, 600), (100, 2_000)] {
            let server = ServerModel {
                lost_response_rate: 0.01,
                ..ServerModel::default()
            };
            let r = run(seed, limit, jobs, budget(limit, 4), server);
            assert_clean(&r, jobs as u64);
            assert!(r.max_arrivals_in_window <= limit, "{}", r.summary());
            assert!(
                r.share_of_limit >= 0.9,
                "limit {limit}, seed {seed}: {}",
                r.summary()
            );
        }
    }
}

/// A server that answers 1% of requests 2 s late (and applies them). Given up at the
/// estimated timeout (1 s: no answer that slow was ever seen, and one given up is not
/// measured), each slow answer costs one request more, sent with the same idempotency key:
/// the server applies it once. That is the price of giving lost answers up in a second, and
/// it stays that: no job fails, no record is made twice, no slot or pacing is held, and the
/// share stays at 0.9 of the limit or more.
#[test]
fn a_slow_but_answering_server_costs_one_request_per_slow_answer_and_no_record_twice() {
    for seed in 1..=3 {
        let server = ServerModel {
            slow_rate: 0.01,
            slow_ms: 2_000,
            ..ServerModel::default()
        };
        let r = run(seed, 20, 600, budget(20, 4), server);
        assert_clean(&r, 600);
        assert!(r.requests <= 612, "seed {seed}: {}", r.summary());
        assert!(r.share_of_limit >= 0.9, "seed {seed}: {}", r.summary());
    }
}

/// 1% of requests hang for 20 s (beyond the 15 s timeout): the other slots keep the rate,
/// paced or not. Before: 0.25 of the limit paced (arrivals stopped for the whole timeout),
/// 16-18 a second of 20 without pacing.
#[test]
fn hung_requests_do_not_stall_the_other_slots() {
    for seed in 1..=3 {
        let server = ServerModel {
            slow_rate: 0.01,
            slow_ms: 20_000,
            ..ServerModel::default()
        };
        for pacing in [true, false] {
            let config = BudgetConfig {
                pacing,
                ..budget(20, 4)
            };
            let r = run(seed, 20, 600, config, server.clone());
            assert_clean(&r, 600);
            assert!(r.max_arrivals_in_window <= 20, "{}", r.summary());
            assert!(
                r.share_of_limit >= 0.9,
                "seed {seed}, pacing {pacing}: {}",
                r.summary()
            );
        }
    }
}

/// One request that is never answered, the others answered in 30 ms: starts go on at the
/// limit while it hangs, and the status says a request is overdue.
#[test]
fn one_hung_request_leaves_the_others_at_the_limit_and_the_status_says_so() {
    let mut e = engine_with(budget(20, 4));
    for spec in sim::bulk_creates("api", 400, 0).specs {
        e.enqueue(spec, 0).unwrap();
    }
    let mut pending: Vec<(u64, String)> = Vec::new();
    let mut starts: Vec<u64> = Vec::new();
    let mut hung: Option<String> = None;
    let mut saw_overdue = false;
    for now in 0..10_000u64 {
        e.handle_timeout(now);
        while let Some(t) = e.poll_transmit(now) {
            starts.push(now);
            if t.save_first {
                e.on_sent(&t.job_id, now);
            }
            // The 100th start hangs: no answer, ever.
            if starts.len() == 100 {
                hung = Some(t.job_id.clone());
            } else {
                pending.push((now + 30, t.job_id.clone()));
            }
        }
        let (due, rest): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(at, _)| *at <= now);
        pending = rest;
        for (_, id) in due {
            let response = Response {
                status: 201,
                headers: vec![],
                body: "{}".into(),
            };
            e.on_response(&id, response, now);
        }
        let changes = e.persistence().take_changes();
        e.persistence().on_saved(changes.save);
        if hung.is_some() && now % 100 == 0 {
            let status = e.snapshot(now);
            saw_overdue |= status.budgets[0].overdue.is_some();
        }
    }
    let hung_at = starts[99];
    // The 4 s after the hang (while it is still unanswered) hold about 80 starts.
    let after = starts
        .iter()
        .filter(|&&t| t > hung_at + 500 && t <= hung_at + 4_500)
        .count();
    assert!(after >= 72, "{after} starts in the 4 s after a hang");
    assert!(saw_overdue, "the status never said a request was overdue");
    let _ = hung;
}

/// nginx's `limit_req rate=20r/s` without burst, answering a bare 429: the first request's
/// preflight makes the second arrive 30 ms after it, inside the 50 ms nginx allows. That 429
/// is not read as other callers spending the quota (before: 1 a second for 17 minutes); the
/// budget pauses a second (our default, and says so), spaces its starts strictly, and runs at
/// 0.9 of the limit or more from a few seconds on.
#[test]
fn an_early_bare_429_from_a_server_without_burst_is_recovered_from_in_seconds() {
    for algorithm in [Algorithm::Gcra, Algorithm::SlidingLog] {
        for seed in 1..=3 {
            let server = ServerModel {
                no_burst: true,
                first_extra_ms: 30,
                headers: HeaderStyle::None,
                retry_after: RetryAfterForm::None,
                ..ServerModel::default()
            };
            let config = BudgetConfig {
                algorithm,
                ..budget(20, 4)
            };
            let r = run(seed, 20, 600, config, server);
            assert_eq!(r.done, 600, "{}", r.summary());
            assert!(r.rate_limited <= 2, "{algorithm:?} {seed}: {}", r.summary());
            // From 5 s on: starts per second against the limit.
            let later: Vec<u64> = r.starts.iter().copied().filter(|&t| t >= 5_000).collect();
            let span = later.last().copied().unwrap_or(5_000).saturating_sub(5_000);
            let rate = later.len() as f64 / (span.max(1) as f64 / 1_000.0) / 20.0;
            assert!(
                rate >= 0.9,
                "{algorithm:?} {seed}: {rate:.3}: {}",
                r.summary()
            );
        }
    }
}

/// A belief about others learned from 429s alone gives our share back in a minute of
/// sending, not in a thousand windows' worth of our (by then few) starts: two refusals of the
/// eighth request of a window, 3 s apart, leave us 8 starts of 20 a second (the first is put
/// down to our timing, the second to others spending the other 12 and 2 more); a minute later
/// we have more than half of that back.
#[test]
fn a_belief_about_others_from_429s_fades_in_seconds() {
    let config = budget(20, 4);
    let retry = RetryConfig::default();
    let mut s = BudgetState::new(&config, &retry).unwrap();
    for round in 0..2u64 {
        let at = 3_000 * round;
        for i in 0..8 {
            s.record_start(at + 10 * i, false, &retry);
        }
        s.observe_rate_limited(at + 70, None, at + 100);
    }
    let learned = s.others;
    assert!(learned >= 12.0, "{learned}");
    // Sending at what is left, one start a second, for 60 s.
    let mut now = 10_000;
    while now < 70_000 {
        s.record_start(now, false, &retry);
        now += 1_000;
    }
    assert!(
        s.others <= learned * 0.55,
        "{learned} -> {} after a minute",
        s.others
    );
}

/// The pause after a 429 says whose wait it is: a bare 429 named none, and "the server asked
/// to wait 1 s" had a person look for a Retry-After that was not there.
#[test]
fn the_pause_reason_says_when_the_wait_is_our_default() {
    for (headers, said) in [
        (
            vec![],
            "HTTP 429 without Retry-After: pausing 1 s (our default)",
        ),
        (
            vec![("Retry-After".to_string(), "3".to_string())],
            "the server asked to wait 3 s (HTTP 429)",
        ),
    ] {
        // Refused with a third of the window used: not an early refusal of our spacing (see
        // the next test), a quota's.
        let mut e = engine_with(BudgetConfig {
            pacing: false,
            ..budget(20, 8)
        });
        let mut specs = sim::bulk_creates("api", 8, 0).specs;
        let last = specs.pop().expect("8 specs");
        for spec in specs {
            e.enqueue(spec, 0).unwrap();
        }
        let sent: Vec<_> = std::iter::from_fn(|| e.poll_transmit(0)).collect();
        assert_eq!(sent.len(), 7);
        for t in &sent {
            let ok = Response {
                status: 201,
                ..Response::default()
            };
            e.on_response(&t.job_id, ok, 30);
        }
        e.enqueue(last, 30).unwrap();
        let t = e.poll_transmit(30).expect("the eighth");
        let response = Response {
            status: 429,
            headers,
            body: String::new(),
        };
        e.on_response(&t.job_id, response, 60);
        let status = e.snapshot(70);
        assert_eq!(status.budgets[0].pause_reason.as_deref(), Some(said));
    }
}

/// nginx without burst refuses a request that came too soon after the one before, bare: the
/// first 429 with little of the window used is our spacing's, not a quota's. It pauses nothing
/// (a second's pause and its ramp cost a tenth of a 10 s run at 20 a second): the job goes
/// back to the front and the budget spaces its starts strictly from then on.
#[test]
fn an_early_bare_429_pauses_nothing_and_spaces_strictly() {
    let mut e = engine_with(budget(20, 4));
    let spec = sim::bulk_creates("api", 1, 0).specs.remove(0);
    let id = e.enqueue(spec, 0).unwrap().id;
    let t = e.poll_transmit(0).unwrap();
    let response = Response {
        status: 429,
        headers: vec![],
        body: String::new(),
    };
    e.on_response(&t.job_id, response, 40);
    let status = e.snapshot(50);
    assert_eq!(status.budgets[0].pause_reason, None);
    assert_eq!(status.budgets[0].rate_limited, 1);
    assert!(e.budget_state("api").is_some_and(|b| b.limiter.no_burst()));
    // Sent again one interval (50 ms) and the spread after the refused start, not a second on.
    let again = (40..1_000)
        .find(|&now| {
            e.handle_timeout(now);
            e.poll_transmit(now).is_some()
        })
        .expect("sent again");
    assert!((50..200).contains(&again), "sent again at {again}");
    assert_eq!(e.job(&id).map(|j| j.attempts), Some(0));
}

/// A server that refuses every request (others spent the quota), bare: only the first refusal
/// in a row is taken for our spacing and answered without a pause; the next pauses, so the
/// budget never sends one request an interval into a wall of refusals.
#[test]
fn bare_refusals_in_a_row_pause_after_the_first() {
    let mut e = engine_with(BudgetConfig {
        windows: vec![Window {
            limit: 1,
            length_ms: 50,
        }],
        ..budget(20, 4)
    });
    for spec in sim::bulk_creates("api", 20, 0).specs {
        e.enqueue(spec, 0).unwrap();
    }
    let refused = || Response {
        status: 429,
        headers: vec![],
        body: String::new(),
    };
    let mut sent_in_3s = 0;
    let mut now = 0;
    while now < 3_000 {
        e.handle_timeout(now);
        while let Some(t) = e.poll_transmit(now) {
            sent_in_3s += 1;
            e.on_response(&t.job_id, refused(), now + 5);
        }
        now += 5;
    }
    // One free retry after the first refusal, then pauses of 1 s, 2 s...: a handful of
    // requests, not sixty.
    assert!(
        sent_in_3s <= 5,
        "{sent_in_3s} requests into refusals in 3 s"
    );
    assert!(e.snapshot(now).budgets[0].pause_reason.is_some());
}

/// express-rate-limit's fixed window opens at the first arrival, and the first create arrives
/// late behind its CORS preflight: the creates sent behind it on the pacing grid arrived closer
/// to it than the grid spaced them, and the 21st reached the server inside its first window (one
/// 429 in about one run of four in Chromium). The grid now continues from where the
/// preflighted start arrived. The simulated server's exact sliding window is as strict as that
/// first window, so it stands in for it here.
#[test]
fn a_fixed_window_behind_a_slow_preflight_stays_inside_the_first_window() {
    for first_extra_ms in [20, 45, 50, 60, 120] {
        for seed in 1..=10 {
            // Arrivals spread over 20 ms (the first requests open connections): before, one
            // run in five of these drew one or two 429s.
            let server = ServerModel {
                first_extra_ms,
                one_way_ms: 3,
                jitter_ms: 1,
                arrival_jitter_ms: Some(20),
                service_ms: 10,
                headers: HeaderStyle::None,
                ..ServerModel::default()
            };
            let config = BudgetConfig {
                algorithm: Algorithm::FixedWindow,
                ..budget(20, 4)
            };
            // Enqueued 700 ms into a second: the fixed window's first count is then a short
            // one, and the pacing grid, not the count, spaces the starts of the server's first
            // window (as in a browser, whose clock is anywhere in its second).
            let r = sim::run(&Scenario {
                seed,
                engine: EngineConfig {
                    budgets: vec![config],
                    ..EngineConfig::default()
                },
                server: ServerModel {
                    limit: 20,
                    ..server
                },
                arrivals: vec![sim::bulk_creates("api", 200, 700)],
                rebuilds: vec![],
                save_ms: 3,
                horizon_ms: 3_600_000,
            });
            assert_clean(&r, 200);
            assert!(
                r.share_of_limit >= 0.9,
                "preflight {first_extra_ms} ms, seed {seed}: {}",
                r.summary()
            );
        }
    }
}

/// An early refusal again while starts are already spaced strictly (a server without burst
/// told twice its rate): the spacing was too tight, and half our rate is left to the server's
/// unknown. Read as others spending the rest of the count, it left 2 of 40 a second (nginx told
/// twice its rate reached 0.34 of it); halved, 20 of 40, which is the server's rate. In the
/// simulator: at most 5 refusals and 0.6 of the rate over 10 s (was 0.35).
#[test]
fn a_second_early_refusal_halves_the_rate_instead_of_reading_others() {
    let config = budget(40, 4);
    let retry = RetryConfig::default();
    let mut s = BudgetState::new(&config, &retry).unwrap();
    s.record_start(0, false, &retry);
    s.record_start(25, false, &retry);
    s.observe_rate_limited(25, None, 40);
    assert!(
        s.limiter.no_burst(),
        "spaced strictly after an early refusal"
    );
    assert_eq!(s.others, 0.0, "the first is put down to our spacing");
    s.record_start(100, false, &retry);
    s.record_start(125, false, &retry);
    s.observe_rate_limited(125, None, 140);
    assert!((19.0..=21.0).contains(&s.others), "{}", s.others);

    for seed in 1..=3 {
        let server = ServerModel {
            no_burst: true,
            first_extra_ms: 30,
            one_way_ms: 5,
            jitter_ms: 1,
            headers: HeaderStyle::None,
            retry_after: RetryAfterForm::None,
            ..ServerModel::default()
        };
        let config = BudgetConfig {
            algorithm: Algorithm::Gcra,
            ..budget(40, 4)
        };
        let r = run(seed, 20, 200, config, server);
        assert_eq!(r.done, 200, "{}", r.summary());
        assert_eq!(r.duplicate_creates, 0, "{}", r.summary());
        assert!(r.rate_limited <= 5, "{seed}: {}", r.summary());
        assert!(r.share_of_limit >= 0.6, "{seed}: {}", r.summary());
    }
}

/// nginx's `limit_req rate=20r/s burst=5 nodelay` (a leaky bucket with a burst of 5 and no
/// window besides), Sluice on GCRA told twice its rate (6 per 150 ms) and told its figures (6
/// per 300 ms). Told twice: the first refusal is put down to our timing, the second halves our
/// share (3 a window: the rate), a refused probe goes back to the share that held, each probe
/// comes four times later than the last, and a single refusal's pause ramps up over its own
/// 150 ms, not a second: 4 refusals, 0.97-0.99 of the rate (before: 5, at 0.70-0.79, the
/// fifth at 9.5 s and a sixth due at 17 s). Told its figures: none, at 0.98 of the rate.
#[test]
fn nginx_with_burst_told_twice_its_rate_learns_with_a_handful_of_refusals() {
    for seed in 1..=4 {
        let server = nginx_with_burst();
        let twice = run(seed, 20, 200, gcra(6, 150), server.clone());
        assert_eq!(twice.done, 200, "{}", twice.summary());
        assert_eq!(twice.duplicate_creates, 0, "{}", twice.summary());
        assert!(twice.rate_limited <= 4, "{seed}: {}", twice.summary());
        assert!(twice.share_of_limit >= 0.95, "{seed}: {}", twice.summary());
        let exact = run(seed, 20, 200, gcra(6, 300), server);
        assert_clean(&exact, 200);
        assert!(exact.share_of_limit >= 0.98, "{seed}: {}", exact.summary());
    }
}

/// The same, for 200 s: after the handful that taught it the rate, probes back off until one
/// step is 2,000 of our starts, so the steady state keeps the promise of at most one refusal
/// per thousand requests (before: 16 refusals in 4,000 requests, at 0.77 of the rate).
#[test]
fn nginx_with_burst_told_twice_its_rate_probes_seldom_in_steady_state() {
    for seed in 1..=2 {
        let r = run(seed, 20, 4_000, gcra(6, 150), nginx_with_burst());
        assert_eq!(r.done, 4_000, "{}", r.summary());
        assert_eq!(r.duplicate_creates, 0, "{}", r.summary());
        assert!(
            r.rate_limited <= 4 + 4,
            "{seed}: {} refusals",
            r.rate_limited
        );
        assert!(r.share_of_limit >= 0.95, "{seed}: {}", r.share_of_limit);
    }
}

/// nginx without burst told as it is, one per 50 ms, on a path whose jitter is all on the way
/// there (4 ms each way, up to 6 ms more there, 1 ms back; 2 in flight): the promise for a told
/// limit is no 429 at all. A start after a quick answer is spaced from that answer, not from
/// the bet that half of a trip's extra time was on the way back (13 refusals in these 10 runs
/// with the bet, which a request 5 ms late on its way to a real nginx drew about one CI run in
/// nine), and still runs near the rate the path allows (0.87 of the limit).
#[test]
fn nginx_without_burst_told_its_rate_draws_no_429_when_trips_are_late_on_the_way_there() {
    for seed in 1..=10 {
        let server = ServerModel {
            no_burst: true,
            window_ms: 50,
            one_way_ms: 4,
            jitter_ms: 1,
            arrival_jitter_ms: Some(6),
            headers: HeaderStyle::None,
            retry_after: RetryAfterForm::None,
            ..ServerModel::default()
        };
        let config = BudgetConfig {
            concurrency: 2,
            ..gcra(1, 50)
        };
        let r = run(seed, 1, 300, config, server);
        assert_clean(&r, 300);
        assert!(r.share_of_limit >= 0.85, "{seed}: {}", r.summary());
    }
}

/// nginx's `limit_req rate=20r/s burst=5 nodelay`, bare 429s.
fn nginx_with_burst() -> ServerModel {
    ServerModel {
        no_burst: true,
        burst: 5,
        first_extra_ms: 30,
        one_way_ms: 5,
        jitter_ms: 2,
        headers: HeaderStyle::None,
        retry_after: RetryAfterForm::None,
        ..ServerModel::default()
    }
}

/// A budget on GCRA of one window, 4 in flight.
fn gcra(limit: u32, length_ms: DurationMs) -> BudgetConfig {
    BudgetConfig {
        algorithm: Algorithm::Gcra,
        windows: vec![Window { limit, length_ms }],
        ..budget(20, 4)
    }
}

/// nginx without burst, Sluice on GCRA at 20 per 1,000 ms (`rate=20r/s` read as a window):
/// the pacing grid's 50 ms meets the server's 50 ms exactly, and jitter draws a refusal of our
/// full window (put down to our timing, a window's pause). After the pause two starts 50 ms
/// apart draw an early refusal: that one makes the spacing strict, and is no longer read as
/// others spending half the limit although it came soon after the first (0.39-0.54 of the rate
/// on every seed before; now most seeds reach about 0.9). A seed whose second refusal came
/// with 8 starts in the window (not early: a fourth of our share is 5) is read as others'
/// still.
#[test]
fn nginx_without_burst_told_a_window_spaces_strictly_after_an_early_refusal() {
    let mut near_the_rate = 0;
    for seed in 1..=12 {
        let server = ServerModel {
            no_burst: true,
            first_extra_ms: 30,
            one_way_ms: 5,
            jitter_ms: 1,
            headers: HeaderStyle::None,
            retry_after: RetryAfterForm::None,
            ..ServerModel::default()
        };
        let r = run(seed, 20, 400, gcra(20, 1_000), server);
        assert_eq!(r.done, 400, "{}", r.summary());
        assert_eq!(r.duplicate_creates, 0, "{}", r.summary());
        assert!(r.rate_limited <= 2, "{seed}: {} refusals", r.rate_limited);
        assert!(r.share_of_limit >= 0.35, "{seed}: {}", r.share_of_limit);
        if r.share_of_limit >= 0.85 {
            near_the_rate += 1;
        }
    }
    assert!(
        near_the_rate >= 9,
        "{near_the_rate} of 12 seeds at 0.85 of the rate"
    );
}
