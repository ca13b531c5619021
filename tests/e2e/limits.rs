//! What the server sees: the limit is kept and every create is applied once.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice::api::{ApiConfig, Arrival, ConfigPatch, HeaderMode, ScriptedResponse};
use sluice::browser;

use crate::e2e;
use crate::support::{
    cpu_note, js, report, shortest_span_note, test_api_config, BrowserHarness, Harness, Options,
    PageScript,
};

e2e!(a_burst_stays_within_the_servers_limit, 90, |h| {
    h.api
        .update_config(&ConfigPatch {
            limit: Some(60),
            window_ms: Some(1000),
            latency_ms: Some(10),
            ..Default::default()
        })
        .expect("server config");
    let tab = h.open_e2e().await;
    tab.eval(
        "await e2e.configure({ budgets: [{ name: 'api', windows: [{ limit: 60, lengthMs: 1000 }], \
         concurrency: 6, matchPrefixes: [location.origin + '/api/'], targetUtilization: 0.9 }] });",
    )
    .await;
    let started = std::time::Instant::now();
    let statuses: Vec<u16> = tab
        .eval_as(
            r#"
            const jobs = Array.from({ length: 150 }, (_, i) => ({
              url: '/api/contacts', kind: 'create', body: { name: 'c' + i },
            }));
            const r = await sluice.enqueueMany(jobs, 'burst');
            return await Promise.all(r.ids.map(async (id) => (await sluice.done(id)).status));
            "#,
        )
        .await;
    let took = started.elapsed();
    assert_eq!(statuses.len(), 150);
    assert!(statuses.iter().all(|s| *s == 201), "{statuses:?}");
    let stats = h.api.stats();
    assert_eq!(stats.rate_limited, 0, "{stats:?}");
    assert!(stats.max_in_window <= 60, "{stats:?}");
    assert_eq!(stats.contacts, 150, "{stats:?}");
    assert_eq!(stats.duplicate_creates, 0, "{stats:?}");
    // 150 at 54/s (0.9 of 60) is about 2.8 s; anything far slower means the limiter idles.
    assert!(took.as_secs_f64() < 8.0, "150 jobs took {took:?}");
    eprintln!("150 creates in {took:.1?}: {stats:?}");
});

/// The server of issue 4's bulk scenario: 100 per sliding second, 30 ms round trip (in either
/// browser; the Firefox test runs it too).
pub fn bulk_api() -> ApiConfig {
    ApiConfig {
        limit: 100,
        window_ms: 1000,
        latency_ms: 30,
        seed: Some(7),
        ..ApiConfig::default()
    }
}

e2e!(
    /// Issue 4, scenario 1: 2,000 creates at once against 100/s with 30 ms latency and 4 in
    /// flight all finish, each applied once, with no 429 and never above the limit. How close
    /// to the ideal time they finish is printed here and judged by `sluice bench` (its "bulk,
    /// 30 ms: share of the limit" target): a timed assertion on a shared 2-core machine fails
    /// on the machine's load, not on Sluice.
    bulk_of_2000_at_the_limit_without_429s,
    150,
    Options::api(bulk_api()).exclusive(),
    |h| {
        bulk_at_the_limit_draws_no_429_and_never_exceeds_the_limit(h, 2000, false).await;
    }
);

e2e!(
    /// Where users are: the API on another origin (CORS, preflights), each request held
    /// 0-10 ms on its way and answered ±10 ms around 30 ms. 2,000 creates at 100/s draw no 429,
    /// never more than 100 arrivals in any second, each applied once, and the browser's
    /// preflight cache is used (at most one preflight per 5 s of sending, the browser's cache
    /// time without `Access-Control-Max-Age`), not one per request.
    cross_origin_bulk_with_jitter_both_ways_stays_under_the_limit,
    150,
    Options::api(bulk_api()).cross_origin(10).exclusive(),
    |h| {
        bulk_at_the_limit_draws_no_429_and_never_exceeds_the_limit(h, 2000, true).await;
    }
);

/// Issue 4's bulk scenario, written once for both browsers (Firefox's test runs it too, with
/// 1,000): `n` creates at once against [`bulk_api`]'s 100 per sliding second, 4 in flight, on
/// the page's origin or (`cross_origin`, which the harness must have been started with) on the
/// API's own. All finish; no 429; never more than 100 in any window of the server's or any
/// second of the arrivals; no request sent twice; each create applied once by its key, none
/// without one; and the preflight cache used (at most one preflight per 5 s of sending, the
/// browser's cache time without `Access-Control-Max-Age`), none on the same origin. How close
/// to the ideal time they finish is printed, not judged (see the Chromium test).
pub async fn bulk_at_the_limit_draws_no_429_and_never_exceeds_the_limit<H: BrowserHarness>(
    h: &H,
    n: usize,
    cross_origin: bool,
) {
    const LIMIT: usize = 100;
    let config = h.api().config();
    assert_eq!(
        config.limit as usize, LIMIT,
        "the bulk API's limit: {config:?}"
    );
    let latency_ms = config.latency_ms as f64;
    let tab = h.open_e2e().await;
    let site = h.site();
    if cross_origin {
        assert_ne!(
            site.api_origin, site.origin,
            "the API on an origin of its own"
        );
    } else {
        assert_eq!(site.api_origin, site.origin, "the API on the page's origin");
    }
    tab.eval(&js::configure(LIMIT as u32, 4, "")).await;
    let cpu = h.cpu_sample();
    let ids: Vec<String> = tab.eval_as(&js::enqueue_group(n, "bulk")).await;
    assert_eq!(ids.len(), n);
    let results: Vec<String> = tab.eval_as(&js::settle_group("bulk")).await;
    assert!(js::all_done(&results), "not all done: {results:?}");

    let stats = h.api().stats();
    let preflights = h.api().preflights();
    // From the first arrival to the last response (the server answers after its latency).
    let arrivals = h.saved_arrivals();
    let first = arrivals.first().expect("arrivals").at_ms;
    let last = arrivals.last().expect("arrivals").at_ms;
    let finish_ms = last + latency_ms - first;
    let seconds = finish_ms / 1000.0;
    let ideal_ms = (n as f64 - 1.0) / LIMIT as f64 * 1000.0 + latency_ms;
    let ratio = finish_ms / ideal_ms;
    let share = n as f64 / seconds / LIMIT as f64;
    let origin = if cross_origin {
        format!(
            "other origin, {} ms ± {}, arrival jitter 0-{} ms",
            config.latency_ms, config.jitter_ms, config.arrival_jitter_ms
        )
    } else {
        format!("same origin, {} ms", config.latency_ms)
    };
    let tightest = shortest_span_note(h.api(), LIMIT);
    report(&format!(
        "{} bulk {n} @{LIMIT}/s, {origin}: finish {seconds:.2} s, ideal {:.2} s, ratio \
         {ratio:.3}, share of limit {share:.3}, 429s {}, most in a window {}, shortest span \
         of {} arrivals {tightest}, preflights {preflights}; {}",
        H::BROWSER,
        ideal_ms / 1000.0,
        stats.rate_limited,
        stats.max_in_window,
        LIMIT + 1,
        cpu_note(h, cpu)
    ));
    assert_eq!(stats.rate_limited, 0, "{stats:?}");
    assert!(stats.max_in_window <= LIMIT, "{stats:?}");
    assert_eq!(stats.total, n, "no request was sent twice: {stats:?}");
    // Contacts, no duplicate create, none without a key, each key applied once, and the
    // densest second of the arrivals within the limit.
    h.assert_each_applied_once(n, LIMIT);
    if cross_origin {
        let allowed = (seconds / 5.0).ceil() as u64 + 1;
        assert!(
            preflights <= allowed,
            "{preflights} preflights in {seconds:.1} s: the preflight cache is not used"
        );
    } else {
        assert_eq!(preflights, 0, "preflights on the page's own origin");
    }
}

/// Scenario 2: the first of four in-flight requests is answered 429 with `retry_after`. Checks
/// that the rate-limited job is the first to start after the pause and every job ends done;
/// returns when the 429 was answered (API time) and that first arrival after it.
async fn four_in_flight_then_429(h: &Harness, retry_after: &str) -> (f64, Arrival) {
    h.api
        .push_script(
            ScriptedResponse::status(429)
                .with_header("Retry-After", retry_after)
                .for_request(Some("POST"), Some("/api/contacts")),
        )
        .expect("script");
    let tab = h.open_e2e().await;
    // 50/s paces starts 20 ms apart: all four are out before the first answer.
    tab.eval(&js::configure(50, 4, "")).await;
    tab.eval(&js::enqueue_group(12, "p")).await;
    let results: Vec<String> = tab.eval_as(&js::settle_group("p")).await;
    assert!(js::all_done(&results), "{results:?}");

    let arrivals = h.api.arrivals();
    let rejected = arrivals
        .iter()
        .find(|a| a.status == 429)
        .expect("the scripted 429")
        .clone();
    assert_eq!(
        rejected.seq, 1,
        "the first request takes the 429: {arrivals:?}"
    );
    let in_flight = arrivals
        .iter()
        .filter(|a| a.seq > 1 && a.at_ms < rejected.at_ms + PAUSE_TEST_LATENCY_MS)
        .count();
    assert_eq!(
        in_flight, 3,
        "four requests should have been in flight together: {arrivals:?}"
    );
    let answered_at = rejected.at_ms + PAUSE_TEST_LATENCY_MS;
    let next = arrivals
        .iter()
        .find(|a| a.at_ms > answered_at)
        .expect("an arrival after the pause")
        .clone();
    assert_eq!(
        next.idempotency_key, rejected.idempotency_key,
        "the rate-limited job must go first after the pause: {arrivals:?}"
    );
    assert_eq!(next.status, 201, "{next:?}");
    let stats = h.api.stats();
    assert_eq!(stats.contacts, 12, "{stats:?}");
    assert_eq!(stats.duplicate_creates, 0, "{stats:?}");
    assert_eq!(stats.rate_limited, 1, "{stats:?}");
    (answered_at, next)
}

/// Long enough that all four requests are out before the first answer, even on a busy machine
/// (they start about 20 ms apart at 50/s).
const PAUSE_TEST_LATENCY_MS: f64 = 250.0;

fn pause_api() -> ApiConfig {
    ApiConfig {
        latency_ms: PAUSE_TEST_LATENCY_MS as u64,
        ..test_api_config()
    }
}

e2e!(
    /// Scenario 2: `Retry-After: 2` on the first of four requests in flight pauses the whole
    /// budget: nothing starts for 2 s, then that job goes first.
    a_429_with_retry_after_seconds_pauses_everything_and_that_job_goes_first,
    60,
    Options::api(pause_api()),
    |h| {
        let (answered_at, next) = four_in_flight_then_429(h, "2").await;
        let gap = next.at_ms - answered_at;
        report(&format!("Retry-After: 2 -> next start {gap:.0} ms after the 429"));
        // The client read the answer no earlier than the server sent it; a millisecond of
        // clock rounding either way.
        assert!(gap >= 2000.0 - 2.0, "next start only {gap:.0} ms after the 429");
        // The pause ends with a random ramp of up to 1 s, no more.
        assert!(gap <= 3000.0 + 500.0, "next start {gap:.0} ms after the 429");
    }
);

e2e!(
    /// Scenario 2 with an HTTP-date: nothing starts before that date.
    a_429_with_retry_after_date_pauses_everything_until_that_date,
    60,
    Options::api(pause_api()),
    |h| {
        // Whole seconds, 3-4 s ahead: the request arrives well before that.
        let now = SystemTime::now();
        let secs = now
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs()
            + 4;
        let until = UNIX_EPOCH + Duration::from_secs(secs);
        let date = httpdate::fmt_http_date(until);
        let (answered_at, next) = four_in_flight_then_429(h, &date).await;
        let until_api_ms = h.api_ms(browser::unix_ms(until));
        report(&format!(
            "Retry-After: {date} -> next start {:.0} ms after that date ({:.0} ms after the 429)",
            next.at_ms - until_api_ms,
            next.at_ms - answered_at
        ));
        assert!(
            next.at_ms >= until_api_ms - 2.0,
            "a request arrived {:.0} ms before the Retry-After date",
            until_api_ms - next.at_ms
        );
        // The date is read against the server's `Date`, which has whole seconds too (up to
        // 1 s more wait), then the random ramp of up to 1 s.
        assert!(
            next.at_ms <= until_api_ms + 2000.0 + 500.0,
            "next start {:.0} ms after the date",
            next.at_ms - until_api_ms
        );
    }
);

e2e!(
    /// Scenario 3: the server says 2 remain (X-RateLimit-Remaining, reset in 3 s) while the
    /// client's own count allows ~49 more: at most 2 more arrivals before the reset.
    the_servers_remaining_count_caps_starts_until_its_reset,
    60,
    Options::api(ApiConfig {
        headers: HeaderMode::None,
        ..test_api_config()
    })
    .exclusive(),
    |h| {
        h.api
            .push_script(
                ScriptedResponse::headers([
                    ("X-RateLimit-Limit", "50"),
                    ("X-RateLimit-Remaining", "2"),
                    ("X-RateLimit-Reset", "3"),
                ])
                .for_request(Some("POST"), Some("/api/contacts")),
            )
            .expect("script");
        let tab = h.open_e2e().await;
        tab.eval(&js::configure(50, 4, "")).await;
        tab.eval(&js::enqueue_group(6, "s")).await;
        let results: Vec<String> = tab.eval_as(&js::settle_group("s")).await;
        assert!(js::all_done(&results), "{results:?}");

        let arrivals = h.api.arrivals();
        let told = arrivals
            .iter()
            .find(|a| a.scripted)
            .expect("the scripted answer")
            .clone();
        // The reset counts from the answer, which left the server 5 ms after the arrival.
        let before_reset: Vec<_> = arrivals
            .iter()
            .filter(|a| a.seq > told.seq && a.at_ms < told.at_ms + 3000.0)
            .collect();
        report(&format!(
            "remaining 2: {} starts before the reset; after it: {:?}",
            before_reset.len(),
            arrivals
                .iter()
                .filter(|a| a.at_ms >= told.at_ms + 3000.0)
                .map(|a| (a.at_ms - told.at_ms).round())
                .collect::<Vec<_>>()
        ));
        assert!(
            before_reset.len() <= 2,
            "{} starts before the reset: {before_reset:?}",
            before_reset.len()
        );
        let stats = h.api.stats();
        assert_eq!(stats.contacts, 6, "{stats:?}");
        assert_eq!(stats.rate_limited, 0, "{stats:?}");
    }
);

e2e!(
    /// The limit at low rates, where the arrival margin is a few ms of a 1 s window: a server as
    /// strict as the budget (5 per second) sees no more than 5 in any second, through worker
    /// restarts, and answers no 429.
    a_slow_budget_is_never_exceeded_at_the_server,
    90,
    Options::api(ApiConfig {
        limit: 5,
        ..test_api_config()
    }),
    |h| {
        let tab = h.open_e2e_with("keepAliveMs=300").await;
        tab.eval(&js::configure(5, 1, "")).await;
        tab.eval(&js::enqueue_group(40, "slow")).await;
        for contacts in [8, 16, 24] {
            h.wait_until("progress", Duration::from_secs(15), || {
                h.api.contacts().len() >= contacts
            })
            .await;
            h.stop_worker().await;
        }
        let results: Vec<String> = tab.eval_as(&js::settle_group("slow")).await;
        assert!(js::all_done(&results), "{results:?}");
        let arrivals = h.api.arrivals();
        let times: Vec<f64> = arrivals.iter().map(|a| a.at_ms.round()).collect();
        let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        report(&format!("5/s through restarts: gaps between arrivals {gaps:?} ms"));
        let stats = h.api.stats();
        assert_eq!(stats.rate_limited, 0, "{stats:?}; gaps {gaps:?}");
        assert!(stats.max_in_window <= 5, "{stats:?}; gaps {gaps:?}");
        assert_eq!(stats.duplicate_creates, 0, "{stats:?}");
    }
);
