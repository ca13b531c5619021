//! Browsers running Sluice as the proxy's callers: the worker in headless Chromium sends a bulk
//! job through one of three instances on one Redis while plain callers use all three, against
//! the strict demo API. The worker is told only the upstream's limit (as a ceiling) and the
//! proxy's origin; what it paces to is what the proxy's answers state for it
//! (`RateLimit-Policy: "caller";q=N;w=S` and `RateLimit`).
//!
//! Asserted at the API: never above the limit in any window, no 429, each create applied once
//! by its idempotency key; every job done and every plain request answered; the worker adopted
//! the share the proxy stated and drew few 429s from it; the browser within 10% of its fair
//! share while the plain callers ask, and they within 10% of one another. How long the proxy
//! held the browser's requests is printed: the worker sends when its share allows, so they
//! are held seldom and briefly, where a plain caller's are held until its turn.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::Method;
use axum::middleware::{self, Next};
use serde_json::Value;
use sluice::browser::{Rig, RigOptions, Tab};

use crate::support::{
    browser_available, load, one_at_a_time, proxy_config, redis_available, report, Redis,
};
use crate::{assert_upstream_kept, shared_args, start_proxies, upstream_config, LIMIT, WINDOW_MS};

/// The browser's bulk job.
const CREATES: usize = 40;
/// Plain callers beside the browser, each asking again as soon as answered.
const PLAIN_CALLERS: usize = 3;
/// How long the plain callers keep asking: about as long as the browser's job takes at its
/// share, so that most of it runs beside them and its tail alone.
const PLAIN_FOR: Duration = Duration::from_secs(8);
/// What the worker names itself with (as an app would with a user or device id).
const BROWSER_CALLER: &str = "browser";

/// One answer of the browser's instance to a caller (preflights left out).
#[derive(Clone, Debug)]
struct Answered {
    caller: Option<String>,
    status: u16,
    /// From the request's arrival at the proxy to its answer: the upstream's latency plus
    /// however long the proxy held it for its turn.
    took: Duration,
    policy: Option<String>,
}

/// `q` of a `RateLimit-Policy: "caller";q=N;w=S` value.
fn stated_share(policy: &str) -> Option<u32> {
    policy
        .split(';')
        .find_map(|part| part.trim().strip_prefix("q="))
        .and_then(|q| q.parse().ok())
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

async fn eval(tab: &Tab, body: &str) -> Value {
    tab.eval(body)
        .await
        .unwrap_or_else(|e| panic!("page script failed: {e}\n--- script ---\n{body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_running_sluice_paces_to_its_share_beside_plain_callers() {
    let test = "a_browser_running_sluice_paces_to_its_share_beside_plain_callers";
    if !redis_available(test) || !browser_available(test) {
        return;
    }
    let _turn = one_at_a_time().await;
    let run = tokio::time::timeout(Duration::from_secs(120), browser_beside_plain_callers(test));
    run.await.unwrap_or_else(|_| panic!("{test} timed out"));
}

async fn browser_beside_plain_callers(test: &str) {
    let redis = Redis::start();
    // The browser's instance listens before the site starts: the worker script served by the
    // site must name its origin among those it may send to.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port for the browser's instance");
    let proxy_addr = listener.local_addr().expect("its address");
    let proxy_origin = format!("http://{proxy_addr}");
    let artifacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("proxy")
        .join(test);
    std::fs::create_dir_all(&artifacts).expect("artifacts dir");
    let rig = Rig::start(RigOptions {
        api: upstream_config(),
        browser_log: Some(artifacts.join("chromium.log")),
        also_allow: vec![proxy_origin.clone()],
        ..RigOptions::default()
    })
    .await
    .expect("the site and Chromium start");

    // Every instance forwards to the site's API and serves the site's pages.
    let mut flags = shared_args(&redis, 2_000);
    flags.extend(["--allow-origin".to_string(), rig.origin.clone()]);
    let upstream = format!("http://{}", rig.addr);
    let mut in_process: Vec<&str> = vec!["--upstream", &upstream];
    in_process.extend(flags.iter().map(String::as_str));
    let answered: Arc<Mutex<Vec<Answered>>> = Arc::default();
    let log = answered.clone();
    let app = sluice::proxy::router(proxy_config(&in_process, &|_| None))
        .expect("the browser's instance")
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            let log = log.clone();
            async move {
                let preflight = req.method() == Method::OPTIONS;
                let caller = req
                    .headers()
                    .get("x-sluice-caller")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let arrived = Instant::now();
                let answer = next.run(req).await;
                if !preflight {
                    let policy = answer
                        .headers()
                        .get("ratelimit-policy")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    log.lock().expect("answers").push(Answered {
                        caller,
                        status: answer.status().as_u16(),
                        took: arrived.elapsed(),
                        policy,
                    });
                }
                answer
            }
        }));
    tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await;
    });
    let others = start_proxies(rig.addr, 2, &flags);
    let mut instances = vec![proxy_addr];
    instances.extend(others.iter().map(|p| p.addr));

    let tab = rig.open_driver("").await.expect("the driver page");
    // Told the upstream's limit as a ceiling, nothing of the proxy's shares.
    eval(
        &tab,
        &format!(
            "await e2e.configure({{ budgets: [{{ name: 'proxy', windows: [{{ limit: {LIMIT}, \
             lengthMs: {WINDOW_MS} }}], concurrency: 4, matchPrefixes: ['{proxy_origin}/api/'] \
             }}] }});"
        ),
    )
    .await;

    let plain = tokio::spawn(load(
        Arc::new(Mutex::new(instances)),
        PLAIN_CALLERS,
        PLAIN_FOR,
    ));
    let ids = eval(
        &tab,
        &format!(
            r#"
            const jobs = Array.from({{ length: {CREATES} }}, (_, i) => ({{
              url: '{proxy_origin}/api/contacts', kind: 'create', body: {{ name: 'b' + i }},
              headers: [['X-Sluice-Caller', '{BROWSER_CALLER}']],
            }}));
            const r = await sluice.enqueueMany(jobs, 'bulk');
            window.dones = r.ids.map((id) => sluice.done(id).then(
              (o) => 'done ' + o.status, (e) => e.code));
            return r.ids;
            "#
        ),
    )
    .await;
    assert_eq!(ids.as_array().map(Vec::len), Some(CREATES), "{ids}");

    // The windows the worker enforces, as it goes.
    let mut enforced: Vec<u32> = Vec::new();
    let worker_429s = loop {
        let snapshot = eval(&tab, "return await sluice.snapshot();").await;
        let budget = &snapshot["budgets"][0];
        for w in budget["windows"].as_array().into_iter().flatten() {
            if let Some(limit) = w["limit"].as_u64() {
                let limit = limit as u32;
                if enforced.last() != Some(&limit) {
                    enforced.push(limit);
                }
            }
        }
        let counts = &snapshot["counts"];
        if ["queued", "sending", "retryWait"]
            .iter()
            .all(|state| counts[state].as_u64() == Some(0))
        {
            break budget["rateLimited"].as_u64().unwrap_or(0);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let results: Vec<String> =
        serde_json::from_value(eval(&tab, "return await Promise.all(window.dones);").await)
            .expect("job results");
    let tally = plain.await.expect("the plain callers");

    // At the upstream: the limit kept, no 429, each create applied once by its key.
    let api = &rig.api;
    assert_upstream_kept(api, test);
    assert!(
        results.iter().all(|r| r == "done 201"),
        "not every job done: {results:?}"
    );
    let stats = api.stats();
    assert_eq!(stats.contacts, CREATES, "{stats:?}");
    assert_eq!(stats.duplicate_creates, 0, "{stats:?}");
    assert_eq!(stats.creates_without_key, 0, "{stats:?}");
    let by_key = api.applied_creates_by_key();
    assert_eq!(by_key.len(), CREATES, "{by_key:?}");
    assert!(by_key.values().all(|n| *n == 1), "{by_key:?}");

    // Every plain request answered: served, or told when to come back.
    let unanswered: Vec<_> = tally
        .answers
        .iter()
        .filter(|a| a.1 != 200 && a.1 != 429)
        .collect();
    assert!(
        unanswered.is_empty(),
        "answers other than 200/429: {unanswered:?}"
    );
    let per: Vec<usize> = (0..PLAIN_CALLERS).map(|c| tally.ok_of(c)).collect();
    let mean = per.iter().sum::<usize>() as f64 / PLAIN_CALLERS as f64;
    let (fewest, most) = (
        per.iter().copied().min().unwrap_or(0) as f64 / mean,
        per.iter().copied().max().unwrap_or(0) as f64 / mean,
    );

    // What the proxy told the browser, and what the worker made of it.
    let answered = answered.lock().expect("answers").clone();
    let browser: Vec<&Answered> = answered
        .iter()
        .filter(|a| a.caller.as_deref() == Some(BROWSER_CALLER))
        .collect();
    let told: Vec<u32> = browser
        .iter()
        .filter_map(|a| a.policy.as_deref().and_then(stated_share))
        .collect();
    let proxy_429s = browser.iter().filter(|a| a.status == 429).count();
    let mut held_ms: Vec<f64> = browser
        .iter()
        .filter(|a| a.status != 429)
        .map(|a| a.took.as_secs_f64() * 1_000.0)
        .collect();
    held_ms.sort_by(f64::total_cmp);
    let mut plain_ms: Vec<f64> = answered
        .iter()
        .filter(|a| a.caller.as_deref() != Some(BROWSER_CALLER) && a.status == 200)
        .map(|a| a.took.as_secs_f64() * 1_000.0)
        .collect();
    plain_ms.sort_by(f64::total_cmp);

    // The browser's creates per second at the API while the plain callers were asking, beside
    // its fair share then (the limit over every caller).
    let arrivals = api.arrivals();
    let plain_at: Vec<f64> = arrivals
        .iter()
        .filter(|a| a.method == "GET" && a.admitted)
        .map(|a| a.at_ms)
        .collect();
    let (from, to) = (
        plain_at.first().copied().unwrap_or(0.0),
        plain_at.last().copied().unwrap_or(0.0),
    );
    let beside = arrivals
        .iter()
        .filter(|a| a.method == "POST" && a.admitted && a.at_ms >= from && a.at_ms <= to)
        .count();
    let fair = f64::from(LIMIT) / (PLAIN_CALLERS + 1) as f64;
    let rate = beside as f64 / ((to - from) / 1_000.0).max(f64::EPSILON);
    report(&format!(
        "{test}: the proxy stated the browser's share as q={:?} per {WINDOW_MS} ms; the worker \
         enforced windows of {enforced:?} in turn (configured {LIMIT}); {} answers to the \
         browser, {proxy_429s} of them 429 from the proxy ({worker_429s} counted by the worker); \
         time in the proxy for the browser's requests p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms \
         (a plain caller's at the same instance p50 {:.0} ms, p90 {:.0} ms); beside the plain \
         callers the browser created {rate:.2}/s, {:.2} of its fair share of {fair:.2}/s; plain \
         callers {per:?} answered 200 ({} answered 429), fewest {fewest:.2} and most \
         {most:.2} of their mean",
        {
            let mut distinct = told.clone();
            distinct.dedup();
            distinct
        },
        browser.len(),
        quantile(&held_ms, 0.5),
        quantile(&held_ms, 0.9),
        held_ms.last().copied().unwrap_or(0.0),
        quantile(&plain_ms, 0.5),
        quantile(&plain_ms, 0.9),
        rate / fair,
        tally.count(429),
    ));

    // The worker paced to what the proxy stated: it took up a share the proxy told it, below
    // the configured ceiling, and was seldom told to come back.
    assert!(
        enforced.iter().any(|l| *l < LIMIT && told.contains(l)),
        "the worker never enforced a share the proxy stated: enforced {enforced:?}, told {told:?}"
    );
    assert!(
        proxy_429s <= CREATES / 10,
        "{proxy_429s} of the browser's {} requests were refused by the proxy",
        browser.len()
    );
    assert!(
        fewest >= 0.9 && most <= 1.1,
        "plain callers beyond 10% of one another: {per:?}"
    );
    assert!(
        (0.9..=1.1).contains(&(rate / fair)),
        "the browser created {rate:.2}/s beside the plain callers, its fair share {fair:.2}/s"
    );
}
