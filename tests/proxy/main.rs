//! `sluice proxy` with real parts: Debian's `redis-server`, proxy processes, and the strict
//! demo API (src/api.rs) as the upstream, which counts every arrival against its limit.
//!
//! Figures (the share of the upstream's limit reached, answers by status) are printed, not
//! asserted: the machine is shared and slow. What is asserted is what the proxy promises: the
//! upstream never sees more than its limit in any window, never answers 429, and every
//! request is answered.

mod browser;
mod equivalence;
mod forwarding;
mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice::api::{self, ApiConfig, ApiHandle, ScriptedResponse};
use support::{
    held_ms, load, one_at_a_time, redis_available, report, share_of_limit, Proxy, Redis,
};

const LIMIT: u32 = 20;
const WINDOW_MS: u64 = 1_000;

/// The strict demo API every test's instances forward to.
fn upstream_config() -> ApiConfig {
    ApiConfig {
        limit: LIMIT,
        window_ms: WINDOW_MS,
        latency_ms: 10,
        jitter_ms: 5,
        seed: Some(19),
        ..ApiConfig::default()
    }
}

async fn upstream() -> (SocketAddr, ApiHandle) {
    api::spawn(upstream_config())
        .await
        .expect("the demo API starts")
}

/// Flags of instances sharing `redis`; requests are held up to `max_wait_ms` for their turn.
fn shared_args(redis: &Redis, max_wait_ms: u64) -> Vec<String> {
    [
        "--windows",
        "20/1s",
        "--concurrency",
        "8",
        "--route",
        "/api/",
        "--max-wait-ms",
        &max_wait_ms.to_string(),
        "--redis",
        &redis.url(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn start_proxies(upstream: SocketAddr, n: usize, args: &[String]) -> Vec<Proxy> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (0..n).map(|_| Proxy::start(upstream, &args)).collect()
}

fn addrs(proxies: &[Proxy]) -> Arc<Mutex<Vec<SocketAddr>>> {
    Arc::new(Mutex::new(proxies.iter().map(|p| p.addr).collect()))
}

/// What every run must show at the upstream: never above the limit, never a 429.
fn assert_upstream_kept(api: &ApiHandle, test: &str) {
    let most = api.max_in_window(WINDOW_MS);
    let refused = api.count_429();
    report(&format!(
        "{test}: upstream saw {} requests, at most {most} in any {WINDOW_MS} ms (limit {LIMIT}), \
         {refused} answered 429; share of the limit reached {:.3}",
        api.total(),
        share_of_limit(api, LIMIT, WINDOW_MS)
    ));
    if refused > 0 {
        // What the upstream saw around each refusal, to tell what went wrong.
        let arrivals = api.arrivals();
        for r in arrivals.iter().filter(|a| a.status == 429) {
            let near: Vec<String> = arrivals
                .iter()
                .filter(|a| (a.at_ms - r.at_ms).abs() < 1_100.0)
                .map(|a| format!("{:.1}:{}", a.at_ms, a.status))
                .collect();
            report(&format!(
                "{test}: refused at {:.1}; near it {near:?}",
                r.at_ms
            ));
        }
    }
    assert!(most <= LIMIT as usize, "{test}: {most} in one window");
    assert_eq!(refused, 0, "{test}: the upstream refused requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_share_one_budget_fairly() {
    let test = "three_instances_share_one_budget_fairly";
    if !redis_available(test) {
        return;
    }
    let _turn = one_at_a_time().await;
    let redis = Redis::start();
    let (up, api) = upstream().await;
    let proxies = start_proxies(up, 3, &shared_args(&redis, 3_000));
    let callers = 10;
    let tally = load(addrs(&proxies), callers, Duration::from_secs(6)).await;

    assert_upstream_kept(&api, test);
    let others: Vec<_> = tally
        .answers
        .iter()
        .filter(|a| a.1 != 200 && a.1 != 429)
        .collect();
    assert!(others.is_empty(), "answers other than 200/429: {others:?}");
    let per: Vec<usize> = (0..callers).map(|c| tally.ok_of(c)).collect();
    let mean = per.iter().sum::<usize>() as f64 / callers as f64;
    let (lo, hi) = (
        *per.iter().min().unwrap_or(&0) as f64 / mean,
        *per.iter().max().unwrap_or(&0) as f64 / mean,
    );
    report(&format!(
        "{test}: {} answered 200, {} answered 429 by the proxy; per caller {per:?}: fewest \
         {lo:.2} and most {hi:.2} of the fair share",
        tally.count(200),
        tally.count(429)
    ));
    assert!(
        lo >= 0.9 && hi <= 1.1,
        "callers beyond 10% of the fair share: {per:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_frozen_fails_closed_and_recovers_without_a_burst() {
    let test = "redis_frozen_fails_closed_and_recovers_without_a_burst";
    if !redis_available(test) {
        return;
    }
    let _turn = one_at_a_time().await;
    let redis = Redis::start();
    let (up, api) = upstream().await;
    let proxies = start_proxies(up, 2, &shared_args(&redis, 3_000));
    let run = tokio::spawn(load(addrs(&proxies), 6, Duration::from_secs(7)));
    tokio::time::sleep(Duration::from_secs(2)).await;
    redis.freeze();
    let frozen_at = Instant::now();
    let before = api.total();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let during = api.total() - before;
    redis.thaw();
    let thawed_at = Instant::now();
    let tally = run.await.expect("load");

    assert_upstream_kept(&api, test);
    let unavailable = tally
        .answers
        .iter()
        .filter(|a| a.1 == 503 && a.2 > frozen_at && a.2 < thawed_at)
        .count();
    let served_after = tally
        .answers
        .iter()
        .filter(|a| a.1 == 200 && a.2 > thawed_at + Duration::from_millis(500))
        .count();
    report(&format!(
        "{test}: while frozen {unavailable} answers 503 and {during} requests reached the \
         upstream (those granted just before); after thawing {served_after} answered 200"
    ));
    assert!(unavailable > 0, "a frozen Redis must fail closed (503)");
    assert!(
        served_after > 0,
        "the proxy must recover once Redis answers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_opens_no_burst() {
    let test = "redis_restarted_empty_opens_no_burst";
    if !redis_available(test) {
        return;
    }
    let _turn = one_at_a_time().await;
    let mut redis = Redis::start();
    let (up, api) = upstream().await;
    let proxies = start_proxies(up, 2, &shared_args(&redis, 3_000));
    let run = tokio::spawn(load(addrs(&proxies), 6, Duration::from_secs(6)));
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    redis.restart_empty();
    let restarted_at = Instant::now();
    let tally = run.await.expect("load");

    assert_upstream_kept(&api, test);
    let served_after = tally
        .answers
        .iter()
        .filter(|a| a.1 == 200 && a.2 > restarted_at)
        .count();
    report(&format!(
        "{test}: {} answers 503 around the restart; {served_after} answered 200 after it",
        tally.count(503)
    ));
    assert!(served_after > 0, "the proxy must go on with the new Redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_holds_concurrency_no_longer_than_its_leases() {
    let test = "a_killed_instance_holds_concurrency_no_longer_than_its_leases";
    if !redis_available(test) {
        return;
    }
    let _turn = one_at_a_time().await;
    let redis = Redis::start();
    let (up, api) = upstream().await;
    let lease_ms = 3_000;
    let args: Vec<String> = [
        "--windows",
        "20/1s",
        "--concurrency",
        "2",
        "--route",
        "/api/",
        "--max-wait-ms",
        "1500",
        "--lease-ms",
        "3000",
        "--upstream-timeout-ms",
        "2500",
        "--redis",
        &redis.url(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut doomed = start_proxies(up, 1, &args).remove(0);
    let survivor = start_proxies(up, 1, &args).remove(0);
    let client = reqwest::Client::new();
    let get = |addr: SocketAddr| {
        client
            .get(format!("http://{addr}/api/contacts"))
            .header("x-sluice-caller", "one")
            .send()
    };
    // The first ask of a new Redis waits a window (see the rule's step 1).
    assert_eq!(get(survivor.addr).await.expect("warm-up").status(), 200);

    for _ in 0..2 {
        api.push_script(ScriptedResponse::apply_then_hang(Some(30_000)))
            .expect("script");
    }
    for _ in 0..2 {
        let url = format!("http://{}/api/contacts", doomed.addr);
        let c = client.clone();
        tokio::spawn(async move { c.get(url).send().await });
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while api.total() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(api.total(), 3, "both hanging requests reached the upstream");
    let granted_at = Instant::now();
    doomed.kill();

    // Both slots are held by the dead instance's leases: the survivor's caller is told to
    // wait (after being held --max-wait-ms), until the leases expire.
    let first = get(survivor.addr).await.expect("answer");
    assert_eq!(
        first.status(),
        429,
        "the dead instance's leases still count"
    );
    let mut served = None;
    while granted_at.elapsed() < Duration::from_millis(lease_ms + 5_000) {
        let r = get(survivor.addr).await.expect("answer");
        if r.status() == 200 {
            served = Some(granted_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let served = served.expect("the leases expired and the survivor was served");
    report(&format!(
        "{test}: the survivor was served {} ms after the dead instance's requests started \
         (lease {lease_ms} ms)",
        served.as_millis()
    ));
    assert!(
        served >= Duration::from_millis(lease_ms - 200),
        "served before the leases could have expired: the cap was exceeded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_429_pauses_every_instance() {
    let test = "an_upstream_429_pauses_every_instance";
    if !redis_available(test) {
        return;
    }
    let _turn = one_at_a_time().await;
    let redis = Redis::start();
    let (up, api) = upstream().await;
    // Held no longer than the pause below, so the pause is told as a 429.
    let proxies = start_proxies(up, 2, &shared_args(&redis, 1_500));
    let client = reqwest::Client::new();
    let get = |addr: SocketAddr| {
        client
            .get(format!("http://{addr}/api/contacts"))
            .header("x-sluice-caller", "one")
            .send()
    };
    assert_eq!(get(proxies[0].addr).await.expect("warm-up").status(), 200);
    api.push_script(ScriptedResponse::status(429).with_header("Retry-After", "3"))
        .expect("script");
    let told = get(proxies[0].addr).await.expect("answer");
    assert_eq!(told.status(), 429);
    assert_eq!(
        told.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("3")
    );
    let seen = api.total();
    // The other instance heard it: its caller is refused without anything being sent, and
    // without being held (a refusal says its hold too, for the worker's round trips).
    let other = get(proxies[1].addr).await.expect("answer");
    assert_eq!(other.status(), 429);
    assert!(
        held_ms(other.headers()).is_some_and(|ms| ms < 100),
        "{:?}",
        other.headers().get("server-timing")
    );
    let body: serde_json::Value =
        serde_json::from_slice(&other.bytes().await.expect("body")).expect("json");
    assert_eq!(body["reason"], "paused", "{body}");
    assert_eq!(api.total(), seen, "nothing was forwarded during the pause");
    tokio::time::sleep(Duration::from_millis(3_100)).await;
    assert_eq!(get(proxies[1].addr).await.expect("answer").status(), 200);
    report(&format!(
        "{test}: one upstream 429 (scripted), the other instance paused too"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_mode_keeps_the_limit_with_nothing_installed() {
    let test = "in_memory_mode_keeps_the_limit_with_nothing_installed";
    let _turn = one_at_a_time().await;
    let (up, api) = upstream().await;
    let proxy = Proxy::start(
        up,
        &[
            "--windows",
            "20/1s",
            "--concurrency",
            "8",
            "--route",
            "/api/",
        ],
    );
    let tally = load(
        addrs(std::slice::from_ref(&proxy)),
        8,
        Duration::from_secs(5),
    )
    .await;
    assert_upstream_kept(&api, test);
    report(&format!(
        "{test}: {} answered 200, {} answered 429 by the proxy",
        tally.count(200),
        tally.count(429)
    ));
    assert!(tally.count(200) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_decides_with_the_instances_own_budget_while_redis_is_frozen() {
    let test = "fail_open_decides_with_the_instances_own_budget_while_redis_is_frozen";
    if !redis_available(test) {
        return;
    }
    let _turn = one_at_a_time().await;
    let redis = Redis::start();
    let (up, api) = upstream().await;
    let mut args = shared_args(&redis, 3_000);
    args.push("--fail-open".into());
    let proxies = start_proxies(up, 1, &args);
    let client = reqwest::Client::new();
    let get = || {
        client
            .get(format!("http://{}/api/contacts", proxies[0].addr))
            .header("x-sluice-caller", "one")
            .send()
    };
    assert_eq!(get().await.expect("warm-up").status(), 200);
    redis.freeze();
    // The local budget is new: its first ask waits a window (held), then it serves.
    let during = get().await.expect("answer");
    redis.thaw();
    assert_eq!(
        during.status(),
        200,
        "fail-open serves while Redis is frozen"
    );
    assert_upstream_kept(&api, test);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_redis_at_all_fails_closed_with_retry_after() {
    let test = "no_redis_at_all_fails_closed_with_retry_after";
    let _turn = one_at_a_time().await;
    let (up, api) = upstream().await;
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let url = format!("redis://127.0.0.1:{port}");
    let proxy = Proxy::start(up, &["--route", "/api/", "--redis", &url]);
    let r = reqwest::Client::new()
        .get(format!("http://{}/api/contacts", proxy.addr))
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status(), 503);
    assert_eq!(
        r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert_eq!(api.total(), 0, "nothing is sent without the shared budget");
    report(&format!("{test}: 503 with Retry-After, nothing sent"));
}
