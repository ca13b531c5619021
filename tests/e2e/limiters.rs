//! Real rate limiters, not the project's own demo API: nginx's `limit_req` (with and without
//! `burst`), express-rate-limit (draft-8, draft-7 and legacy headers) and rate-limiter-flexible,
//! each in front of a counting backend on loopback, with Sluice in headless Chromium configured
//! as each limiter's documentation suggests.
//!
//! The backend is the demo API with a limit no test reaches and no rate-limit headers of its
//! own (`HeaderMode::None`): it counts what the limiter let through and records each create's
//! `Idempotency-Key`, so "applied once" is checked where it is applied. A limiter's 429s never
//! reach it; they are counted from the limiter's own log (nginx's access log, server.js's
//! lines). The page and worker come from the demo server; the API is the limiter's origin,
//! which the worker script is allowed to send to (`Options::also_allow`) and the budget covers
//! (`matchPrefixes`).
//!
//! Two questions per limiter:
//! - *At its rate*: Sluice told the limiter's own figures draws no 429 and reaches at least 0.9
//!   of the nominal rate once it has measured its path (over the second half of the creates;
//!   0.86 over all of them), every create applied once.
//! - *Told twice the real limit* (40/s where the server allows 20/s), or told a burst the
//!   server does not have (GCRA at 20 per 1,000 ms in front of nginx without burst): it learns
//!   the real one with at most a handful (5) of 429s, every create applied once.
//!
//! Each limiter is a child process on a free loopback port (`sluice::real_limiters`, shared with
//! `sluice bench --limiters`), killed when its test ends (also on a panic). Without nginx, node
//! or `npm ci --prefix tests/limiters` the tests skip, unless `CI` is set. They measure time, so they run alone (`Turn::take(true)`).
//!
//! Run: `cargo test --test e2e limiters` (each case prints its figures).

use std::time::{Duration, Instant};

use sluice::api::ApiHandle;
use sluice::browser;
use sluice::real_limiters::{
    backend_creates, counting_backend, limiters_dir, rate_of, Limiter, LimiterProcess,
};

use crate::support::{
    cpu_note, js, report, require, save_arrivals, BrowserHarness, Harness, Options, PageScript,
    Turn,
};

/// What every limiter here allows: 20 requests a second.
const RATE: u32 = 20;
/// Creates per test: about 10 s at 20/s.
const JOBS: usize = 200;
/// The most 429s a budget told twice the real limit may draw while it learns.
const LEARNING_429S: usize = 5;
/// The share of the nominal rate a budget told the limiter's own figures must reach once it
/// has measured its path: over the second half of the creates.
const RATE_TARGET: f64 = 0.9;
/// The same over every create, the first round trips included: a pause or a stall at the
/// start still fails it. A server without burst told its rate is the one that needs the
/// difference: until the fastest of its trips is placed (16 trips; its slack narrows at 32)
/// each start is spaced from the last one's answer rather than from a bet on how much of the
/// trip was the way there, about 10 ms more each (the bet drew a 429 about one CI run in
/// nine), up to 0.03 of a 200-create run. Measured against nginx: 0.904-0.913 over the whole
/// run and 0.922-0.935 over its second half on an idle machine, 0.876-0.898 and 0.910-0.920
/// with a core kept busy beside it, 0.890 and 0.917 in a CI run; every other case here
/// reaches 0.98.
const WHOLE_RUN_TARGET: f64 = 0.86;
/// How many sittings a told limit's share may take: a case whose share alone misses is
/// measured once more (fresh browser, limiter and backend) before it fails; its 429s and
/// its creates applied once are checked in every sitting. The share is a timing figure, and
/// the one case that spaces each start from the last one's answer (a server without burst
/// told its rate) loses 5-6 ms a start while other work holds the machine's cores: against
/// nginx with a quarter of the machine kept busy in bursts beside it, 0.880-0.910 of the rate
/// over the second half (0.917-0.938 idle, the same sitting); once in a local run of the
/// whole suite (other work 12%), 0.868.
const SHARE_SITTINGS: u32 = 2;
/// How long the creates may take to get through before the case reports what it saw and fails:
/// 4.5 times the nominal 10 s.
const STALL_SECS: u64 = 45;
/// How long one case may take, browser start included.
const CASE_SECS: u64 = 120;

/// One test: a limiter, and the budget Sluice is given for it (the JS object's fields besides
/// its name, `concurrency` and `matchPrefixes`).
struct Case {
    limiter: Limiter,
    budget: &'static str,
    /// Told the limiter's own figures (0 429s, the rate target), or wrong ones (few 429s).
    told: Told,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Told {
    TheLimit,
    /// Twice the real limit, or a burst the server does not have.
    Wrong,
}

macro_rules! limiter_test {
    ($(#[$meta:meta])* $name:ident, $case:expr) => {
        $(#[$meta])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            run(stringify!($name), $case).await;
        }
    };
}

// nginx: `rate=20r/s` is a leaky bucket that admits one request per 50 ms, none early (in whole
// milliseconds); `burst=5 nodelay` lets 5 more through at once, then one per 50 ms again.
// Sluice's GCRA is the same meter with a burst tolerance of its window's limit: `rate=20r/s`
// read as the README says (the algorithm that mirrors the server, the server's figures) is
// GCRA at 20 per 1,000 ms; with `burst=5`, 6 at once and one per 50 ms is GCRA at 6 per 300 ms.

limiter_test!(
    /// nginx `limit_req rate=20r/s` without burst, Sluice on GCRA at 20 per 1,000 ms: told a
    /// burst tolerance of 19 the server does not have (docs/choosing-an-algorithm.md maps
    /// nginx without burst to one per 50 ms, the next case), so judged as told wrong: at most
    /// a handful of 429s while it learns to space its starts.
    nginx_without_burst_told_a_burst_it_lacks,
    Case {
        limiter: Limiter::Nginx { burst: 0 },
        budget: "algorithm: 'gcra', windows: [{ limit: 20, lengthMs: 1000 }]",
        told: Told::Wrong,
    }
);

limiter_test!(
    /// nginx without burst, Sluice on GCRA as the burst case maps it: a burst of one, so one
    /// per 50 ms. What a user who reads "no burst" as GCRA's burst tolerance writes.
    nginx_without_burst_as_one_per_50_ms_at_its_rate,
    Case {
        limiter: Limiter::Nginx { burst: 0 },
        budget: "algorithm: 'gcra', windows: [{ limit: 1, lengthMs: 50 }]",
        told: Told::TheLimit,
    }
);

limiter_test!(
    /// nginx `limit_req rate=20r/s burst=5 nodelay`, Sluice on GCRA with that burst: 6 per
    /// 300 ms.
    nginx_with_burst_at_its_rate,
    Case {
        limiter: Limiter::Nginx { burst: 5 },
        budget: "algorithm: 'gcra', windows: [{ limit: 6, lengthMs: 300 }]",
        told: Told::TheLimit,
    }
);

limiter_test!(
    /// nginx without burst, Sluice told 40 per second: only bare 429s can teach it.
    nginx_without_burst_told_twice_the_limit,
    Case {
        limiter: Limiter::Nginx { burst: 0 },
        budget: "algorithm: 'gcra', windows: [{ limit: 40, lengthMs: 1000 }]",
        told: Told::Wrong,
    }
);

limiter_test!(
    /// nginx with `burst=5`, Sluice told twice its rate (6 per 150 ms): 4 refusals in the
    /// simulator (`shared/tests/issue41.rs`), the next probe due after about 20 s.
    nginx_with_burst_told_twice_the_limit,
    Case {
        limiter: Limiter::Nginx { burst: 5 },
        budget: "algorithm: 'gcra', windows: [{ limit: 6, lengthMs: 150 }]",
        told: Told::Wrong,
    }
);

// express-rate-limit's memory store and rate-limiter-flexible's RateLimiterMemory both count in
// a fixed window that starts at a client's first request: Sluice's `fixed-window`, which aligns
// to the reset the server reports.

limiter_test!(
    /// express-rate-limit, `standardHeaders: 'draft-8'` (`RateLimit: "20-in-1sec"; r=19; t=1`,
    /// `RateLimit-Policy: "20-in-1sec"; q=20; w=1`).
    express_rate_limit_draft_8_at_its_rate,
    Case {
        limiter: Limiter::Node("erl-draft-8"),
        budget: "algorithm: 'fixed-window', windows: [{ limit: 20, lengthMs: 1000 }]",
        told: Told::TheLimit,
    }
);

limiter_test!(
    /// express-rate-limit, `standardHeaders: 'draft-7'` (`RateLimit: limit=20, remaining=19,
    /// reset=1`, `RateLimit-Policy: 20;w=1`).
    express_rate_limit_draft_7_at_its_rate,
    Case {
        limiter: Limiter::Node("erl-draft-7"),
        budget: "algorithm: 'fixed-window', windows: [{ limit: 20, lengthMs: 1000 }]",
        told: Told::TheLimit,
    }
);

limiter_test!(
    /// express-rate-limit, legacy headers only (`X-RateLimit-Limit/-Remaining/-Reset`, the
    /// reset in epoch seconds).
    express_rate_limit_legacy_headers_at_its_rate,
    Case {
        limiter: Limiter::Node("erl-legacy"),
        budget: "algorithm: 'fixed-window', windows: [{ limit: 20, lengthMs: 1000 }]",
        told: Told::TheLimit,
    }
);

limiter_test!(
    /// rate-limiter-flexible's RateLimiterMemory, 20 points per second, with the headers its
    /// README suggests (a fractional `Retry-After` on the 429).
    rate_limiter_flexible_at_its_rate,
    Case {
        limiter: Limiter::Node("rlf"),
        budget: "algorithm: 'fixed-window', windows: [{ limit: 20, lengthMs: 1000 }]",
        told: Told::TheLimit,
    }
);

limiter_test!(
    /// express-rate-limit draft-8, Sluice told 40 per second.
    express_rate_limit_draft_8_told_twice_the_limit,
    Case {
        limiter: Limiter::Node("erl-draft-8"),
        budget: "algorithm: 'fixed-window', windows: [{ limit: 40, lengthMs: 1000 }]",
        told: Told::Wrong,
    }
);

limiter_test!(
    /// express-rate-limit draft-7, Sluice told 40 per second.
    express_rate_limit_draft_7_told_twice_the_limit,
    Case {
        limiter: Limiter::Node("erl-draft-7"),
        budget: "algorithm: 'fixed-window', windows: [{ limit: 40, lengthMs: 1000 }]",
        told: Told::Wrong,
    }
);

limiter_test!(
    /// express-rate-limit with legacy headers, Sluice told 40 per second.
    express_rate_limit_legacy_headers_told_twice_the_limit,
    Case {
        limiter: Limiter::Node("erl-legacy"),
        budget: "algorithm: 'fixed-window', windows: [{ limit: 40, lengthMs: 1000 }]",
        told: Told::Wrong,
    }
);

limiter_test!(
    /// rate-limiter-flexible, Sluice told 40 per second.
    rate_limiter_flexible_told_twice_the_limit,
    Case {
        limiter: Limiter::Node("rlf"),
        budget: "algorithm: 'fixed-window', windows: [{ limit: 40, lengthMs: 1000 }]",
        told: Told::Wrong,
    }
);

/// Runs one case alone, under [`CASE_SECS`], or skips it (see [`available`]).
async fn run(name: &str, case: Case) {
    if !available(case.limiter) {
        return;
    }
    let _turn = Turn::take(true).await;
    let started = Instant::now();
    for sitting in 1..=SHARE_SITTINGS {
        let missed = tokio::time::timeout(Duration::from_secs(CASE_SECS), measure(name, &case))
            .await
            .unwrap_or_else(|_| panic!("{name} timed out after {CASE_SECS} s"));
        match missed {
            None => break,
            Some(miss) if sitting < SHARE_SITTINGS => {
                report(&format!("{name}: {miss}; measured once more"));
            }
            Some(miss) => panic!("{miss} (in each of {SHARE_SITTINGS} sittings)"),
        }
    }
    report(&format!("{name} took {:.1?}", started.elapsed()));
}

/// Measures one case in a fresh browser, limiter and backend, and checks it; returns what
/// missed when only the share of the rate did (see [`SHARE_SITTINGS`]).
async fn measure(name: &str, case: &Case) -> Option<String> {
    let (backend_addr, backend) = counting_backend()
        .await
        .expect("the counting backend starts");
    // Starting it waits for its readiness (up to 10 s), off the runtime's two threads.
    let kind = case.limiter;
    let limiter = tokio::task::spawn_blocking(move || {
        LimiterProcess::start(kind, backend_addr, RATE, &limiters_dir())
            .unwrap_or_else(|e| panic!("{e}"))
    })
    .await
    .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    let Some(h) = Harness::start_with(
        name,
        Options::default().exclusive().also_allow(&limiter.origin),
    )
    .await
    else {
        return None;
    };
    let tab = h.open_e2e().await;
    let origin = &limiter.origin;
    tab.eval(&format!(
        "window.API = sessionStorage.API = '{origin}';\
         await e2e.configure({{ budgets: [{{ name: 'api', {}, concurrency: 4, \
         matchPrefixes: ['{origin}/api/'] }}] }});",
        case.budget
    ))
    .await;
    let cpu = h.cpu_sample();
    let sending = Instant::now();
    let ids: Vec<String> = tab.eval_as(&js::enqueue_group(JOBS, "lim")).await;
    assert_eq!(ids.len(), JOBS);
    // Progress is watched at the backend, so that a run that crawls is reported with its
    // figures (how many got through, how many 429s) instead of only timing out.
    let finished = browser::wait_for(
        "every create applied at the backend",
        Duration::from_secs(STALL_SECS),
        || backend.stats().contacts >= JOBS,
    )
    .await
    .is_ok();
    if finished {
        // The limiter logs an answer once it is sent: wait until it logged every create the
        // backend saw, so that no 429 is missed.
        h.wait_until(
            "the limiter to log every create the backend answered",
            Duration::from_secs(5),
            || limiter.logged_creates() >= backend_creates(&backend),
        )
        .await;
    }
    let sent_for = sending.elapsed();
    let figures = Figures::read(&backend, &limiter, &h);
    report(&format!(
        "{name}: {} in front, Sluice {{ {} }}: {}; {:.1} s from enqueueing to the last create; \
         {}",
        case.limiter.describe(RATE),
        case.budget,
        figures.describe(),
        sent_for.as_secs_f64(),
        cpu_note(&h, cpu)
    ));
    assert!(
        finished,
        "only {} of {JOBS} creates applied after {STALL_SECS} s (nominally {} s): {}",
        figures.applied,
        JOBS as u32 / RATE,
        figures.describe()
    );
    let results: Vec<String> = tab.eval_as(&js::settle_group("lim")).await;
    let failed: Vec<&String> = results
        .iter()
        .filter(|r| !js::all_done(std::slice::from_ref(*r)))
        .collect();
    assert!(failed.is_empty(), "not all done: {failed:?}");
    figures.assert_applied_once(&backend);
    match case.told {
        Told::TheLimit => {
            assert_eq!(
                figures.rejected,
                0,
                "told the limiter's own figures, Sluice drew 429s: {}; arrivals.json in {}",
                figures.describe(),
                h.artifacts.display()
            );
            if figures.second_half_share < RATE_TARGET || figures.share < WHOLE_RUN_TARGET {
                return Some(format!(
                    "{:.3} of the nominal rate over the second half of the creates (at least \
                     {RATE_TARGET}), {:.3} over all (at least {WHOLE_RUN_TARGET}): {}; \
                     arrivals.json in {}",
                    figures.second_half_share,
                    figures.share,
                    figures.describe(),
                    h.artifacts.display()
                ));
            }
        }
        Told::Wrong => {
            assert!(
                figures.rejected <= LEARNING_429S,
                "told wrong figures, Sluice drew more than {LEARNING_429S} 429s learning \
                 it: {}",
                figures.describe()
            );
        }
    }
    None
}

/// What a case measured, at the backend and at the limiter.
struct Figures {
    /// Creates applied at the backend.
    applied: usize,
    /// 429s the limiter answered.
    rejected: usize,
    /// When those came, in seconds after the limiter's first answer to a create.
    rejected_at_s: Vec<f64>,
    preflights: usize,
    /// Creates per second at the backend, first to last: intervals over the time they took.
    rate: f64,
    span_s: f64,
    /// `rate` over the nominal [`RATE`]: 1.0 is one create per 1/RATE s all the way.
    share: f64,
    /// The same over the second half of the creates only: a pause at the start (a 429's) and
    /// a rate that stays low tell apart here.
    second_half_share: f64,
    replays: usize,
    /// Each create applied so far was applied once, by its key.
    applied_once: bool,
}

impl Figures {
    /// Reads them, and saves the backend's arrivals among the test's artifacts.
    fn read(backend: &ApiHandle, limiter: &LimiterProcess, h: &Harness) -> Self {
        let answers = limiter.answers();
        let first_create = answers
            .iter()
            .find(|a| a.method == "POST")
            .map_or(0.0, |a| a.at_s);
        let rejected_at_s: Vec<f64> = answers
            .iter()
            .filter(|a| a.status == 429)
            .map(|a| a.at_s - first_create)
            .collect();
        let preflights = answers.iter().filter(|a| a.method == "OPTIONS").count();
        let arrivals = save_arrivals(backend, &h.artifacts);
        let posts: Vec<f64> = arrivals
            .iter()
            .filter(|a| a.method == "POST")
            .map(|a| a.at_ms)
            .collect();
        let span_s = match (posts.first(), posts.last()) {
            (Some(first), Some(last)) => (last - first) / 1000.0,
            _ => 0.0,
        };
        let rate = rate_of(&posts);
        let second_half_share = rate_of(&posts[posts.len() / 2..]) / f64::from(RATE);
        let stats = backend.stats();
        let by_key = backend.applied_creates_by_key();
        Figures {
            applied: stats.contacts,
            rejected: rejected_at_s.len(),
            rejected_at_s,
            preflights,
            rate,
            span_s,
            share: rate / f64::from(RATE),
            second_half_share,
            replays: stats.replays,
            // Of those applied so far (a run that stalled is reported too).
            applied_once: stats.duplicate_creates == 0
                && stats.creates_without_key == 0
                && by_key.len() == stats.contacts
                && by_key.values().all(|c| *c == 1),
        }
    }

    fn describe(&self) -> String {
        let mut at: Vec<String> = self
            .rejected_at_s
            .iter()
            .take(12)
            .map(|s| format!("{s:.2}"))
            .collect();
        if self.rejected_at_s.len() > at.len() {
            at.push("...".into());
        }
        format!(
            "{} of {JOBS} creates applied, 429s {} (at {} s), share of the nominal {RATE}/s \
             {:.3} ({:.2}/s over {:.2} s; second half {:.3}), applied once {}, replays {}, \
             preflights {}",
            self.applied,
            self.rejected,
            if at.is_empty() {
                "-".to_string()
            } else {
                at.join(", ")
            },
            self.share,
            self.rate,
            self.span_s,
            self.second_half_share,
            if self.applied_once { "yes" } else { "NO" },
            self.replays,
            self.preflights
        )
    }

    /// Every create applied exactly once, by its key, none without one.
    fn assert_applied_once(&self, backend: &ApiHandle) {
        let stats = backend.stats();
        assert_eq!(stats.contacts, JOBS, "{stats:?}");
        assert_eq!(stats.duplicate_creates, 0, "{stats:?}");
        assert_eq!(stats.creates_without_key, 0, "{stats:?}");
        let by_key = backend.applied_creates_by_key();
        assert_eq!(by_key.len(), JOBS, "one key per create: {stats:?}");
        assert!(
            by_key.values().all(|c| *c == 1),
            "a key applied more than once: {:?}",
            by_key.iter().filter(|(_, c)| **c != 1).collect::<Vec<_>>()
        );
    }
}

/// Whether this limiter can run here; skips with a message, or fails under CI, if not.
fn available(limiter: Limiter) -> bool {
    match limiter.missing(&limiters_dir()) {
        None => true,
        Some(missing) => require(false, &missing.what, &missing.install),
    }
}
