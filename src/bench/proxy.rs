//! `sluice bench --proxy`: the proxy against the strict demo API, measured as issue 19 asks.
//!
//! - **shared**: three instances on one real Redis, 20 callers each asking again as soon as
//!   answered, the API at 100 per sliding second: share of the limit the API admitted
//!   (target >= 0.95), API 429s (target 0), most arrivals in any window, and Redis round
//!   trips per request (from Redis's own `INFO commandstats`).
//! - **memory**: the same with one in-memory instance.
//! - **added latency**: with a limit far above what the callers ask (nothing waits), the time
//!   a request takes through the proxy less the time straight to the API, p50 and p99.
//!
//! The instances run in this process (each with its own store connection and HTTP client);
//! Redis is a `redis-server` of the benchmark's own. Figures are measurements on whatever else
//! the machine is doing: a shared machine makes latency noisy.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use serde::Serialize;

use crate::api::{self, ApiConfig, ApiHandle};
use crate::proxy::redis_server::{self, RedisServer};
use crate::proxy::{ProxyArgs, ProxyConfig};

const LIMIT: u32 = 100;
const WINDOW_MS: u64 = 1_000;
const CALLERS: usize = 20;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyRun {
    pub name: String,
    pub instances: usize,
    pub callers: usize,
    pub seconds: f64,
    /// One window over the mean time from an admitted arrival back to the `limit`-th before
    /// it (see [`share_of_limit`]).
    pub share_of_limit: f64,
    pub upstream_429: usize,
    pub most_in_any_window: usize,
    pub limit: u32,
    pub answered_200: usize,
    /// 429s from the proxy (a caller's turn further off than it holds requests).
    pub proxy_429: usize,
    pub other_answers: usize,
    /// Round trips to Redis per request answered (asks, releases, upstream signals).
    pub redis_round_trips_per_request: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Latency {
    pub name: String,
    pub direct_p50_ms: f64,
    pub direct_p99_ms: f64,
    pub proxied_p50_ms: f64,
    pub proxied_p99_ms: f64,
    pub added_p50_ms: f64,
    pub added_p99_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyReport {
    pub runs: Vec<ProxyRun>,
    pub latency: Vec<Latency>,
    /// Why a part did not run (no `redis-server`).
    pub skipped: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyBenchError {
    #[error("{0}")]
    Setup(String),
}

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    args: ProxyArgs,
}

async fn start_instance(
    upstream: SocketAddr,
    extra: &[&str],
) -> Result<SocketAddr, ProxyBenchError> {
    let setup = |e: String| ProxyBenchError::Setup(e);
    let up = format!("http://{upstream}");
    let mut argv = vec!["proxy", "--upstream", &up, "--route", "/api/"];
    argv.extend_from_slice(extra);
    let flags = Flags::try_parse_from(argv).map_err(|e| setup(e.to_string()))?;
    let config = ProxyConfig::resolve(&flags.args, &|_| None).map_err(|e| setup(e.to_string()))?;
    crate::proxy::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), config)
        .await
        .map_err(|e| setup(format!("cannot start a proxy instance: {e}")))
}

/// Round trips to Redis so far: script calls (decisions and upstream signals) and releases,
/// from Redis's own `INFO commandstats`. The commands a script runs inside are not round
/// trips, and the scripts release nothing with a plain ZREM, so that count is the releases.
async fn redis_round_trips(url: &str) -> Option<u64> {
    let client = redis::Client::open(url).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .ok()?;
    let calls = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(calls("evalsha") + calls("eval") + calls("zrem") + calls("script|load"))
}

/// Callers asking in a closed loop for `run_for`; returns (status, elapsed) per answer.
async fn callers(
    targets: &[SocketAddr],
    callers: usize,
    run_for: Duration,
) -> Vec<(u16, Duration)> {
    let answers = Arc::new(Mutex::new(Vec::new()));
    let client = reqwest::Client::new();
    let end = Instant::now() + run_for;
    let mut tasks = Vec::new();
    for caller in 0..callers {
        let addr = targets[caller % targets.len()];
        let (client, answers) = (client.clone(), answers.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let started = Instant::now();
                let r = client
                    .get(format!("http://{addr}/api/contacts"))
                    .header("x-sluice-caller", format!("caller-{caller}"))
                    .send()
                    .await;
                let (status, wait) = match r {
                    Ok(r) => {
                        let wait = r
                            .headers()
                            .get("retry-after")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse::<u64>().ok());
                        let status = r.status().as_u16();
                        let _ = r.bytes().await;
                        (status, wait)
                    }
                    Err(_) => (0, Some(1)),
                };
                if let Ok(mut a) = answers.lock() {
                    a.push((status, started.elapsed()));
                }
                if status != 200 {
                    tokio::time::sleep(Duration::from_secs(wait.unwrap_or(1))).await;
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let answers = answers.lock().map(|a| a.clone()).unwrap_or_default();
    answers
}

/// The share of the limit the upstream admitted, whatever the phase of its windows: the limit
/// lets an arrival in no sooner than a whole window after the `limit`-th arrival before it, so
/// the share is one window over the mean time from each admitted arrival back to that one.
///
/// (A count of arrivals in whole windows from the first one is fooled by bunching: a budget
/// that lets `limit` in at the start of each window and loses 40 ms of every window to its
/// margins fills every one of the first twenty windows all the same.)
pub fn share_of_limit(api: &ApiHandle, limit: u32, window_ms: u64) -> f64 {
    let mut arrivals: Vec<f64> = api
        .arrivals()
        .into_iter()
        .filter(|a| a.admitted)
        .map(|a| a.at_ms)
        .collect();
    arrivals.sort_by(f64::total_cmp);
    let limit = limit as usize;
    if limit == 0 || arrivals.len() <= limit {
        return 0.0;
    }
    let back: f64 = arrivals
        .iter()
        .skip(limit)
        .zip(&arrivals)
        .map(|(later, earlier)| later - earlier)
        .sum();
    if back <= 0.0 {
        return 0.0;
    }
    (arrivals.len() - limit) as f64 * window_ms as f64 / back
}

async fn saturated(
    name: &str,
    instances: usize,
    redis: Option<&str>,
    run_for: Duration,
) -> Result<ProxyRun, ProxyBenchError> {
    let (up, api) = api::spawn(ApiConfig {
        limit: LIMIT,
        window_ms: WINDOW_MS,
        latency_ms: 20,
        jitter_ms: 5,
        seed: Some(19),
        ..ApiConfig::default()
    })
    .await
    .map_err(|e| ProxyBenchError::Setup(format!("cannot start the demo API: {e}")))?;
    let windows = format!("{LIMIT}/1s");
    let mut extra = vec!["--windows", windows.as_str(), "--concurrency", "16"];
    if let Some(url) = redis {
        extra.extend_from_slice(&["--redis", url]);
    }
    let mut targets = Vec::new();
    for _ in 0..instances {
        targets.push(start_instance(up, &extra).await?);
    }
    let before = match redis {
        Some(url) => redis_round_trips(url).await,
        None => None,
    };
    let answers = callers(&targets, CALLERS, run_for).await;
    let after = match redis {
        Some(url) => redis_round_trips(url).await,
        None => None,
    };
    let count = |s: u16| answers.iter().filter(|a| a.0 == s).count();
    let answered = answers.len().max(1) as f64;
    Ok(ProxyRun {
        name: name.into(),
        instances,
        callers: CALLERS,
        seconds: run_for.as_secs_f64(),
        share_of_limit: share_of_limit(&api, LIMIT, WINDOW_MS),
        upstream_429: api.count_429(),
        most_in_any_window: api.max_in_window(WINDOW_MS),
        limit: LIMIT,
        answered_200: count(200),
        proxy_429: count(429),
        other_answers: answers.len() - count(200) - count(429),
        redis_round_trips_per_request: before
            .zip(after)
            .map(|(b, a)| a.saturating_sub(b) as f64 / answered),
    })
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

async fn added_latency(
    name: &str,
    redis: Option<&str>,
    run_for: Duration,
) -> Result<Latency, ProxyBenchError> {
    let (up, _api) = api::spawn(ApiConfig {
        limit: 1_000_000,
        latency_ms: 0,
        ..ApiConfig::default()
    })
    .await
    .map_err(|e| ProxyBenchError::Setup(format!("cannot start the demo API: {e}")))?;
    // A limit no caller comes near and a short first window, so nothing waits.
    let mut extra = vec![
        "--windows",
        "1000000/100ms",
        "--algorithm",
        "gcra",
        "--concurrency",
        "1000",
    ];
    if let Some(url) = redis {
        extra.extend_from_slice(&["--redis", url]);
    }
    let proxy = start_instance(up, &extra).await?;
    // The fresh budget's one window.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sorted = |answers: Vec<(u16, Duration)>| {
        let mut ms: Vec<f64> = answers
            .iter()
            .filter(|a| a.0 == 200)
            .map(|a| a.1.as_secs_f64() * 1_000.0)
            .collect();
        ms.sort_by(f64::total_cmp);
        ms
    };
    let direct = sorted(callers(&[up], 4, run_for).await);
    let proxied = sorted(callers(&[proxy], 4, run_for).await);
    let (d50, d99) = (quantile(&direct, 0.5), quantile(&direct, 0.99));
    let (p50, p99) = (quantile(&proxied, 0.5), quantile(&proxied, 0.99));
    Ok(Latency {
        name: name.into(),
        direct_p50_ms: d50,
        direct_p99_ms: d99,
        proxied_p50_ms: p50,
        proxied_p99_ms: p99,
        added_p50_ms: p50 - d50,
        added_p99_ms: p99 - d99,
    })
}

pub async fn run(quick: bool, progress: &dyn Fn(&str)) -> Result<ProxyReport, ProxyBenchError> {
    let run_for = Duration::from_secs(if quick { 4 } else { 12 });
    let latency_for = Duration::from_secs(if quick { 2 } else { 5 });
    let mut report = ProxyReport {
        runs: Vec::new(),
        latency: Vec::new(),
        skipped: Vec::new(),
    };
    if redis_server::installed() {
        let server = RedisServer::start().map_err(|e| ProxyBenchError::Setup(e.to_string()))?;
        progress("three instances on one Redis, 20 callers");
        report
            .runs
            .push(saturated("redis, 3 instances", 3, Some(&server.url()), run_for).await?);
        progress("added latency through Redis");
        report
            .latency
            .push(added_latency("redis", Some(&server.url()), latency_for).await?);
    } else {
        report
            .skipped
            .push("the Redis runs: redis-server is not installed".into());
    }
    progress("one in-memory instance, 20 callers");
    report
        .runs
        .push(saturated("memory, 1 instance", 1, None, run_for).await?);
    progress("added latency in memory");
    report
        .latency
        .push(added_latency("memory", None, latency_for).await?);
    Ok(report)
}

pub fn table(r: &ProxyReport) -> String {
    let mut out = String::from(
        "sluice proxy: 20 callers against the strict API (100 per sliding second)\n\
         run                  share of limit (>= 0.95)  API 429s (0)  most in a window  \
         200s   proxy 429s  Redis trips/request\n",
    );
    for run in &r.runs {
        out.push_str(&format!(
            "{:<20} {:>24.3}  {:>12}  {:>10} / {:<4} {:>5}  {:>10}  {:>18}\n",
            run.name,
            run.share_of_limit,
            run.upstream_429,
            run.most_in_any_window,
            run.limit,
            run.answered_200,
            run.proxy_429,
            run.redis_round_trips_per_request
                .map_or("-".into(), |c| format!("{c:.2}")),
        ));
    }
    out.push_str("\nadded latency per request (through the proxy less straight to the API)\n");
    for l in &r.latency {
        out.push_str(&format!(
            "{:<8} p50 {:.2} ms (direct {:.2}, proxied {:.2})  p99 {:.2} ms (direct {:.2}, \
             proxied {:.2})\n",
            l.name,
            l.added_p50_ms,
            l.direct_p50_ms,
            l.proxied_p50_ms,
            l.added_p99_ms,
            l.direct_p99_ms,
            l.proxied_p99_ms
        ));
    }
    for s in &r.skipped {
        out.push_str(&format!("skipped: {s}\n"));
    }
    out
}
