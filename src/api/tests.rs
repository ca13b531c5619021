//! Tests run the router in-process with tokio's paused clock, so window edges are hit exactly
//! and latency or hangs cost no real time.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tokio::time::{advance, Instant};
use tower::ServiceExt;

use super::*;

pub(super) struct Res {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: Value,
}

impl Res {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub(super) async fn send(
    app: &Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Res {
    let mut req = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Body::from(body.to_owned()))
        .expect("valid request");
    let res = app.clone().oneshot(req).await.expect("infallible");
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    Res {
        status,
        headers,
        body,
    }
}

async fn get(app: &Router, path: &str) -> Res {
    send(app, "GET", path, &[], "").await
}

pub(super) fn app(config: ApiConfig) -> (Router, ApiHandle) {
    // On tokio's paused clock, which only tokio's timer moves.
    let api = ApiHandle::with_holds(config, Holds::Runtime);
    (router(api.clone()), api)
}

pub(super) fn limited(limit: u32, window_ms: u64) -> ApiConfig {
    ApiConfig {
        limit,
        window_ms,
        ..ApiConfig::instant()
    }
}

#[tokio::test(start_paused = true)]
async fn limit_is_an_exact_sliding_window_over_admitted_arrivals() {
    let (app, api) = app(limited(3, 1000));

    // 0 ms, 400 ms, 800 ms: all admitted.
    for (i, wait) in [0, 400, 400].into_iter().enumerate() {
        advance(Duration::from_millis(wait)).await;
        let r = get(&app, "/api/x").await;
        assert_eq!(r.status, StatusCode::OK, "request {i}");
        assert_eq!(
            r.header("x-ratelimit-remaining"),
            Some(&*(2 - i).to_string())
        );
    }
    // 999 ms: the first is still inside (t - 1000, t].
    advance(Duration::from_millis(199)).await;
    let r = get(&app, "/api/x").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    // 1000 ms: the first has left; the rejected arrival at 999 ms took no slot.
    advance(Duration::from_millis(1)).await;
    assert_eq!(get(&app, "/api/x").await.status, StatusCode::OK);
    // 1100 ms: 400, 800 and 1000 are inside; the next slot frees at 1400 ms.
    advance(Duration::from_millis(100)).await;
    let r = get(&app, "/api/x").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.body["retryAfterMs"], 300);
    advance(Duration::from_millis(300)).await;
    assert_eq!(get(&app, "/api/x").await.status, StatusCode::OK);

    assert_eq!(api.total(), 7);
    assert_eq!(api.count_429(), 2);
    assert_eq!(api.max_in_window(1000), 3);
    // 0, 400, 800, 1000 fall inside one 1001 ms window.
    assert_eq!(api.max_in_window(1001), 4);
    // Admitted at 0, 400, 800, 1000 and 1400 ms: a client at the limit of 3 per second.
    assert_eq!(api.shortest_span(3), Some(1000.0));
    assert_eq!(api.shortest_span(2), Some(600.0));
    assert_eq!(api.shortest_span(5), None);
    let s = api.stats();
    assert_eq!((s.admitted, s.rate_limited, s.applied), (5, 2, 5));
    let a = api.arrivals();
    assert_eq!(a[3].at_ns, 999_000_000);
    assert!(!a[3].admitted && !a[3].applied);
    assert_eq!(a[3].outcome, Outcome::RateLimited);
}

#[tokio::test(start_paused = true)]
async fn counting_rejected_arrivals_punishes_early_retries() {
    let (app, _api) = app(ApiConfig {
        count_rejected: true,
        ..limited(1, 1000)
    });
    assert_eq!(get(&app, "/api/x").await.status, StatusCode::OK);
    advance(Duration::from_millis(900)).await;
    assert_eq!(
        get(&app, "/api/x").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    advance(Duration::from_millis(200)).await;
    // The first left at 1000 ms, but the rejected one at 900 ms is still inside.
    assert_eq!(
        get(&app, "/api/x").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_in_both_forms_rounds_up() {
    let (app, api) = app(limited(1, 2500));
    get(&app, "/api/x").await;
    advance(Duration::from_millis(100)).await;
    let r = get(&app, "/api/x").await;
    // 2.4 s left: rounding down would invite an early retry.
    assert_eq!(r.header("retry-after"), Some("3"));
    assert_eq!(r.header("x-ratelimit-reset"), Some("3"));

    api.update_config(&ConfigPatch {
        retry_after_form: Some(RetryAfterForm::Date),
        ..Default::default()
    })
    .expect("valid");
    let r = get(&app, "/api/x").await;
    let date = r.header("retry-after").expect("Retry-After");
    let at = httpdate::parse_http_date(date).expect("HTTP-date");
    let wait = at
        .duration_since(SystemTime::now())
        .expect("Retry-After in the future");
    assert!(
        wait >= Duration::from_millis(2300) && wait <= Duration::from_millis(3500),
        "{wait:?}"
    );
    assert!(httpdate::parse_http_date(r.header("date").expect("Date")).is_ok());
}

#[tokio::test(start_paused = true)]
async fn idempotency_key_applies_a_create_once() {
    let (app, api) = app(limited(100, 1000));
    let key = [
        ("idempotency-key", "k1"),
        ("content-type", "application/json"),
    ];
    let first = send(&app, "POST", "/api/contacts", &key, r#"{"name":"Ada"}"#).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.body, json!({"name": "Ada", "id": 1}));
    assert_eq!(first.header("location"), Some("/api/contacts/1"));

    let again = send(&app, "POST", "/api/contacts", &key, r#"{"name":"Ada"}"#).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));

    let other = send(&app, "POST", "/api/contacts", &[], r#"{"name":"Bob"}"#).await;
    assert_eq!(other.body["id"], 2);
    let reused = send(&app, "POST", "/api/elsewhere", &key, "{}").await;
    assert_eq!(reused.status, StatusCode::UNPROCESSABLE_ENTITY);

    assert_eq!(api.contacts().len(), 2);
    assert_eq!(api.applied_creates_by_key(), [("k1".to_string(), 1)].into());
    let s = api.stats();
    assert_eq!(
        (s.duplicate_creates, s.creates_without_key, s.replays),
        (0, 1, 1)
    );
    let a = api.arrivals();
    assert!(a[0].applied && !a[1].applied);
    assert_eq!(a[1].outcome, Outcome::Replayed);
    assert_eq!(a[1].idempotency_key.as_deref(), Some("k1"));
}

#[tokio::test(start_paused = true)]
async fn a_rejected_or_failed_create_can_be_retried_with_its_key() {
    let (app, api) = app(ApiConfig {
        fault_rate: 1.0,
        seed: Some(7),
        ..limited(1, 1000)
    });
    let key = [("idempotency-key", "k")];
    let r = send(&app, "POST", "/api/contacts", &key, "{}").await;
    assert!(matches!(r.status.as_u16(), 500 | 503));
    let r = send(&app, "POST", "/api/contacts", &key, "{}").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    api.update_config(&ConfigPatch {
        fault_rate: Some(0.0),
        ..Default::default()
    })
    .expect("valid");
    advance(Duration::from_millis(1000)).await;
    let r = send(&app, "POST", "/api/contacts", &key, "{}").await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(api.applied_creates_by_key(), [("k".to_string(), 1)].into());
    // The fault was admitted (counted), the 429 not.
    assert_eq!(api.arrivals().iter().filter(|a| a.admitted).count(), 2);
}

/// Conditional changes (RFC 9110's `If-Match`): every contact answer carries its version as
/// `ETag`; a change naming another version is refused with 412 and the contact as it is now,
/// and nothing changes.
#[tokio::test(start_paused = true)]
async fn a_change_whose_if_match_names_an_old_version_is_refused_with_412() {
    let (app, api) = app(limited(100, 1000));
    let created = send(&app, "POST", "/api/contacts", &[], r#"{"name":"Ada"}"#).await;
    assert_eq!(created.headers["etag"], "\"v1\"");
    let r = send(
        &app,
        "PATCH",
        "/api/contacts/1",
        &[("If-Match", "\"v1\"")],
        r#"{"name":"Ada L."}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["etag"], "\"v2\"");
    let stale = send(
        &app,
        "PATCH",
        "/api/contacts/1",
        &[("If-Match", "\"v1\"")],
        r#"{"name":"Lovelace"}"#,
    )
    .await;
    assert_eq!(stale.status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(stale.headers["etag"], "\"v2\"");
    assert_eq!(stale.body["current"], json!({"id": 1, "name": "Ada L."}));
    assert!(stale.body["error"]
        .as_str()
        .is_some_and(|e| e.contains("precondition failed")));
    assert!(!api.arrivals().last().is_some_and(|a| a.applied));
    // `*` and a list that names the current version both match; no `If-Match` always does.
    for tag in ["*", "\"v9\", \"v3\""] {
        let r = send(&app, "PATCH", "/api/contacts/1", &[("If-Match", tag)], "{}").await;
        assert_eq!(r.status, StatusCode::OK, "{tag}");
    }
    let r = send(&app, "GET", "/api/contacts/1", &[], "").await;
    assert_eq!(r.headers["etag"], "\"v4\"");
    let gone = send(
        &app,
        "DELETE",
        "/api/contacts/1",
        &[("If-Match", "\"v1\"")],
        "",
    )
    .await;
    assert_eq!(gone.status, StatusCode::PRECONDITION_FAILED);
}

#[tokio::test(start_paused = true)]
async fn contacts_support_patch_put_delete() {
    let (app, _api) = app(limited(100, 1000));
    send(
        &app,
        "POST",
        "/api/contacts",
        &[],
        r#"{"name":"Ada","tags":{"a":1}}"#,
    )
    .await;
    let r = send(
        &app,
        "PATCH",
        "/api/contacts/1",
        &[],
        r#"{"email":"a@x","tags":{"b":2},"name":null}"#,
    )
    .await;
    assert_eq!(
        r.body,
        json!({"id": 1, "email": "a@x", "tags": {"a": 1, "b": 2}})
    );
    let r = send(
        &app,
        "PUT",
        "/api/contacts/1",
        &[],
        r#"{"name":"Eve","id":9}"#,
    )
    .await;
    assert_eq!(r.body, json!({"id": 1, "name": "Eve"}));
    assert_eq!(
        get(&app, "/api/contacts").await.body,
        json!([{"id": 1, "name": "Eve"}])
    );
    assert_eq!(
        send(&app, "POST", "/api/contacts", &[], "[1]").await.status,
        StatusCode::BAD_REQUEST
    );
    let r = send(&app, "DELETE", "/api/contacts/1", &[], "").await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(
        get(&app, "/api/contacts/1").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&app, "/api/contacts/nope").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(start_paused = true)]
async fn other_paths_are_echoed() {
    let (app, _api) = app(limited(100, 1000));
    let r = send(
        &app,
        "PUT",
        "/api/things/7?x=1",
        &[("idempotency-key", "e")],
        r#"{"a":1}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body,
        json!({"ok": true, "method": "PUT", "path": "/api/things/7", "query": "x=1",
               "idempotencyKey": "e", "cookie": false, "body": {"a": 1}})
    );
    assert_eq!(get(&app, "/api").await.status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn scripted_responses_stage_a_scenario() {
    let (app, api) = app(limited(10, 1000));
    let script = json!([
        {"status": 429, "headers": {"Retry-After": "2"}},
        {"headers": {"X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "1"}},
        {"method": "POST", "applyThenHang": true, "hangMs": 5000},
    ]);
    let r = send(&app, "POST", "/__sluice/script", &[], &script.to_string()).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(api.pending_script().len(), 3);

    let r = get(&app, "/api/a").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header("retry-after"), Some("2"));
    // A scripted status speaks alone: no computed headers to contradict it.
    assert_eq!(r.header("x-ratelimit-remaining"), None);

    let r = get(&app, "/api/b").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("x-ratelimit-remaining"), Some("2"));
    assert_eq!(r.header("x-ratelimit-limit"), Some("10"));

    // The method filter lets this GET pass the POST entry by.
    assert_eq!(get(&app, "/api/c").await.status, StatusCode::OK);

    let started = Instant::now();
    let hanging = tokio::spawn({
        let app = app.clone();
        async move {
            send(
                &app,
                "POST",
                "/api/contacts",
                &[("idempotency-key", "h")],
                "{}",
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!hanging.is_finished());
    assert_eq!(api.contacts().len(), 1, "applied before the response");
    let r = hanging.await.expect("task");
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(started.elapsed(), Duration::from_millis(5000));

    let a = api.arrivals();
    assert!(a[0].scripted && !a[0].admitted && !a[0].applied);
    assert!(a[3].hung && a[3].applied && a[3].scripted);
    assert_eq!(api.count_429(), 1);
    assert!(api.pending_script().is_empty());

    let bad = send(&app, "POST", "/__sluice/script", &[], r#"{"stauts": 500}"#).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

#[tokio::test(start_paused = true)]
async fn scripted_error_can_apply_first() {
    let (app, api) = app(limited(10, 1000));
    api.push_script(ScriptedResponse {
        apply: Some(true),
        ..ScriptedResponse::status(503)
    })
    .expect("valid");
    let key = [("idempotency-key", "z")];
    let r = send(&app, "POST", "/api/contacts", &key, "{}").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    let r = send(&app, "POST", "/api/contacts", &key, "{}").await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "the retry finds the applied create"
    );
    assert_eq!(api.contacts().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn latency_jitter_and_random_hangs() {
    let (app, api) = app(ApiConfig {
        latency_ms: 300,
        jitter_ms: 50,
        seed: Some(1),
        ..limited(100, 1000)
    });
    for _ in 0..20 {
        let t = Instant::now();
        get(&app, "/api/x").await;
        let ms = t.elapsed().as_millis();
        assert!((250..=350).contains(&ms), "{ms}");
    }
    // Arrivals are stamped before the latency.
    let a = api.arrivals();
    assert!(a[1].at_ns - a[0].at_ns >= 250_000_000);

    api.update_config(&ConfigPatch {
        hang_rate: Some(1.0),
        hang_ms: Some(60_000),
        ..Default::default()
    })
    .expect("valid");
    let t = Instant::now();
    let r = send(&app, "POST", "/api/contacts", &[], "{}").await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(t.elapsed(), Duration::from_secs(60));
    assert_eq!(api.stats().hangs, 1);
}

/// The holds a fresh API seeded with `seed` gives its first `n` requests, when nothing else
/// draws from its generator meanwhile (no answer jitter, faults or hangs).
fn holds(seed: u64, jitter_ms: u64, n: usize) -> Vec<Duration> {
    let mut rng = SplitMix64::new(Some(seed));
    (0..n).map(|_| rng.arrival_hold(jitter_ms)).collect()
}

#[tokio::test(start_paused = true)]
async fn a_request_is_counted_only_after_its_hold() {
    let config = ApiConfig {
        arrival_jitter_ms: 100,
        seed: Some(3),
        ..limited(1, 1000)
    };
    let hold = holds(3, 100, 1)[0];
    assert!(
        hold > Duration::from_millis(1),
        "{hold:?}: the seed gives no hold to observe"
    );
    let (app, api) = app(config);
    let start = Instant::now();
    let sent = tokio::spawn({
        let app = app.clone();
        async move { send(&app, "POST", "/api/contacts", &[], "{}").await }
    });

    tokio::time::sleep(hold - Duration::from_millis(1)).await;
    assert_eq!(api.total(), 0, "still on its way");
    assert!(api.contacts().is_empty(), "not applied before it arrives");
    let t = Instant::now();
    assert_eq!(get(&app, "/__sluice/stats").await.body["total"], 0);
    assert_eq!(t.elapsed(), Duration::ZERO, "the control API is never held");

    let r = sent.await.expect("request task");
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(
        start.elapsed(),
        hold,
        "answered at arrival (no latency configured)"
    );
    let a = api.arrivals();
    assert_eq!(a.len(), 1);
    assert_eq!(
        a[0].at_ns,
        hold.as_nanos() as u64,
        "stamped at arrival, not receipt"
    );
    assert!(a[0].admitted);

    // Preflights are still answered at once and never counted.
    let t = Instant::now();
    let r = send(
        &app,
        "OPTIONS",
        "/api/contacts",
        &[("access-control-request-method", "POST")],
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(t.elapsed(), Duration::ZERO);
    assert_eq!((api.total(), api.preflights()), (1, 1));

    // The window is judged from the arrival: a window after receipt the slot is still taken,
    // and frees a window after the arrival.
    api.update_config(&ConfigPatch {
        arrival_jitter_ms: Some(0),
        ..Default::default()
    })
    .expect("valid");
    tokio::time::sleep_until(start + Duration::from_millis(1000)).await;
    let r = get(&app, "/api/x").await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.body["retryAfterMs"], hold.as_millis() as u64);
    tokio::time::sleep_until(start + hold + Duration::from_millis(1000)).await;
    assert_eq!(get(&app, "/api/x").await.status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_held_request_arrives_even_if_the_client_gave_up() {
    let (app, api) = app(ApiConfig {
        arrival_jitter_ms: 100,
        seed: Some(3),
        ..limited(1, 1000)
    });
    let hold = holds(3, 100, 1)[0];
    let gave_up = tokio::time::timeout(
        hold / 2,
        send(&app, "POST", "/api/contacts", &[], r#"{"name":"Ada"}"#),
    )
    .await;
    assert!(
        gave_up.is_err(),
        "the client stopped waiting during the hold"
    );
    assert_eq!(api.total(), 0);

    tokio::time::sleep(hold).await;
    let a = api.arrivals();
    assert_eq!(a.len(), 1, "the server saw it");
    assert!(a[0].admitted && a[0].applied);
    assert_eq!(a[0].at_ns, hold.as_nanos() as u64);
    assert_eq!(api.contacts().len(), 1);
    assert_eq!(
        get(&app, "/api/x").await.status,
        StatusCode::TOO_MANY_REQUESTS,
        "and it took the one slot"
    );
}

#[tokio::test(start_paused = true)]
async fn arrival_jitter_reorders_requests_and_the_limit_judges_arrivals() {
    const N: usize = 8;
    const SEED: u64 = 6;
    let (app, api) = app(ApiConfig {
        arrival_jitter_ms: 20,
        seed: Some(SEED),
        ..limited(3, 1000)
    });
    // Sent in order, 1 ms apart; request i arrives at i ms + its hold.
    let expected: Vec<u64> = holds(SEED, 20, N)
        .iter()
        .enumerate()
        .map(|(i, h)| i as u64 * 1_000_000 + h.as_nanos() as u64)
        .collect();
    let mut by_arrival: Vec<usize> = (0..N).collect();
    by_arrival.sort_by_key(|&i| expected[i]);
    assert!(
        expected.windows(2).any(|w| w[1] < w[0]),
        "the seed must reorder: {expected:?}"
    );
    let mut distinct = expected.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), N, "no two arrive at once: {expected:?}");

    let run = |app: Router| async move {
        let mut sent = Vec::new();
        for i in 0..N {
            let app = app.clone();
            sent.push(tokio::spawn(async move {
                send(&app, "GET", &format!("/api/r{i}"), &[], "")
                    .await
                    .status
            }));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut statuses = Vec::new();
        for s in sent {
            statuses.push(s.await.expect("request task"));
        }
        statuses
    };
    let statuses = run(app.clone()).await;

    let a = api.arrivals();
    let paths: Vec<String> = a.iter().map(|x| x.path.clone()).collect();
    let expected_paths: Vec<String> = by_arrival.iter().map(|i| format!("/api/r{i}")).collect();
    assert_eq!(paths, expected_paths, "recorded in arrival order");
    let at: Vec<u64> = a.iter().map(|x| x.at_ns).collect();
    let mut sorted = expected.clone();
    sorted.sort_unstable();
    assert_eq!(at, sorted, "stamped at arrival");
    assert!(a.windows(2).all(|w| w[0].seq < w[1].seq));

    // The first three to arrive are admitted, whatever order they were sent in.
    for (rank, &i) in by_arrival.iter().enumerate() {
        let want = if rank < 3 {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        assert_eq!(statuses[i], want, "request {i}, arrival {rank}");
        assert_eq!(a[rank].admitted, rank < 3);
    }
    assert_eq!(
        statuses[0],
        StatusCode::TOO_MANY_REQUESTS,
        "the first sent came too late: {by_arrival:?}"
    );
    assert!(
        by_arrival[..3].iter().any(|&i| i >= 3),
        "a later-sent request took its slot: {by_arrival:?}"
    );
    assert_eq!(api.max_in_window(1000), 3);
    assert_eq!(api.stats().max_in_window, 3);

    // Reproducible: the same seed after a reset gives the same arrival order.
    advance(Duration::from_secs(2)).await;
    api.reset();
    assert_eq!(run(app).await, statuses);
    let again: Vec<String> = api.arrivals().iter().map(|x| x.path.clone()).collect();
    assert_eq!(again, expected_paths);
}

#[tokio::test(start_paused = true)]
async fn without_arrival_jitter_requests_arrive_when_received() {
    let cfg = ApiConfig {
        latency_ms: 300,
        jitter_ms: 50,
        seed: Some(1),
        ..limited(2, 1000)
    };
    assert_eq!(cfg.arrival_jitter_ms, 0, "off by default");
    // The answer jitter draws exactly what it drew before the knob existed.
    let mut rng = SplitMix64::new(Some(1));
    let latencies: Vec<Duration> = (0..3).map(|_| rng.latency(&cfg)).collect();
    let (app, api) = app(cfg);
    let start = Instant::now();
    let mut sent_at = Vec::new();
    let mut statuses = Vec::new();
    for latency in &latencies {
        let t = Instant::now();
        sent_at.push(t.duration_since(start).as_nanos() as u64);
        statuses.push(get(&app, "/api/x").await.status);
        assert_eq!(t.elapsed(), *latency);
    }
    let at: Vec<u64> = api.arrivals().iter().map(|a| a.at_ns).collect();
    assert_eq!(at, sent_at, "counted the instant they were received");
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );

    // The knob through the control API, and back off.
    let r = send(
        &app,
        "POST",
        "/__sluice/config",
        &[],
        r#"{"arrivalJitterMs":40}"#,
    )
    .await;
    assert_eq!(r.body["arrivalJitterMs"], 40);
    assert_eq!(api.config().arrival_jitter_ms, 40);
    assert_eq!(
        get(&app, "/__sluice/config").await.body["arrivalJitterMs"],
        40
    );
    let r = send(
        &app,
        "POST",
        "/__sluice/config",
        &[],
        r#"{"arrivalJitterMs":0}"#,
    )
    .await;
    assert_eq!(r.body["arrivalJitterMs"], 0);
    api.reset();
    let t = Instant::now();
    get(&app, "/api/x").await;
    assert_eq!(api.arrivals()[0].at_ns, 0, "arrives at receipt again");
    assert!(t.elapsed() >= Duration::from_millis(250));
}

#[tokio::test(start_paused = true)]
async fn ietf_and_no_headers_modes() {
    let (app, api) = app(ApiConfig {
        headers: HeaderMode::Ietf,
        ..limited(5, 2000)
    });
    let r = get(&app, "/api/x").await;
    assert_eq!(r.header("ratelimit-policy"), Some("\"default\";q=5;w=2"));
    assert_eq!(r.header("ratelimit"), Some("\"default\";r=4;t=2"));
    assert_eq!(r.header("x-ratelimit-limit"), None);
    api.update_config(&ConfigPatch {
        headers: Some(HeaderMode::None),
        ..Default::default()
    })
    .expect("valid");
    let r = get(&app, "/api/x").await;
    assert_eq!(r.header("ratelimit"), None);
    assert!(r.header("date").is_some());
}

#[tokio::test(start_paused = true)]
async fn preflights_get_cors_and_are_not_counted() {
    let (app, api) = app(limited(1, 1000));
    let r = send(
        &app,
        "OPTIONS",
        "/api/contacts",
        &[
            ("origin", "http://127.0.0.1:9"),
            ("access-control-request-method", "POST"),
            (
                "access-control-request-headers",
                "content-type,idempotency-key",
            ),
        ],
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(r.header("access-control-max-age"), Some("600"));
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("content-type,idempotency-key")
    );
    assert!(r
        .header("access-control-allow-methods")
        .is_some_and(|m| m.contains("PATCH")));
    let expose = r.header("access-control-expose-headers").expect("expose");
    for h in [
        "Retry-After",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
        "RateLimit-Policy",
    ] {
        assert!(expose.contains(h), "{h}");
    }
    assert_eq!((api.total(), api.preflights()), (0, 1));

    // The one slot is still free, and real responses carry CORS too.
    let r = send(
        &app,
        "POST",
        "/api/contacts",
        &[("origin", "http://127.0.0.1:9")],
        "{}",
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert!(r
        .header("access-control-expose-headers")
        .is_some_and(|e| e.contains("Retry-After")));
}

#[tokio::test(start_paused = true)]
async fn control_api_changes_config_and_resets() {
    let (app, api) = app(limited(10, 1000));
    let r = send(
        &app,
        "POST",
        "/__sluice/config",
        &[],
        r#"{"limit":1,"retryAfterForm":"date"}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["limit"], 1);
    assert_eq!(api.config().retry_after_form, RetryAfterForm::Date);
    for body in [
        r#"{"limt":1}"#,
        r#"{"faultRate":2}"#,
        r#"{"windowMs":0}"#,
        "nope",
    ] {
        let r = send(&app, "POST", "/__sluice/config", &[], body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
        assert!(r.body["error"].is_string());
    }

    get(&app, "/api/x").await;
    assert_eq!(
        get(&app, "/api/x").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let stats = get(&app, "/__sluice/stats").await.body;
    assert_eq!(
        (stats["total"].clone(), stats["rateLimited"].clone()),
        (json!(2), json!(1))
    );
    let arrivals = get(&app, "/__sluice/arrivals?since=1").await.body;
    assert_eq!(arrivals.as_array().map(Vec::len), Some(1));
    assert_eq!(arrivals[0]["status"], 429);
    assert_eq!(get(&app, "/__sluice/config").await.body["limit"], 1);

    send(&app, "POST", "/__sluice/reset", &[], "").await;
    assert_eq!(api.total(), 0);
    assert_eq!(
        get(&app, "/api/x").await.status,
        StatusCode::OK,
        "the window was cleared"
    );
    assert_eq!(api.arrivals()[0].seq, 1);
    assert_eq!(api.config().limit, 1, "config survives a reset");
}

#[tokio::test]
async fn seed_fills_the_store_once_without_spending_the_limit() {
    let (app, api) = app(limited(1, 1000));
    send(&app, "POST", "/api/contacts", &[], r#"{"name":"Ada"}"#).await;
    let body = r#"{"count": 3, "fields": {"owner": "Unassigned"}}"#;
    let r = send(&app, "POST", "/__sluice/seed", &[], body).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body, json!({ "created": 2, "contacts": 3 }));
    let again = send(&app, "POST", "/__sluice/seed", &[], body).await;
    assert_eq!(
        again.body,
        json!({ "created": 0, "contacts": 3 }),
        "at least, not more"
    );
    let contacts = api.contacts();
    assert_eq!(contacts[0], json!({ "id": 1, "name": "Ada" }));
    assert_eq!(contacts[2], json!({ "id": 3, "owner": "Unassigned" }));
    assert_eq!(api.total(), 1, "seeding is not an arrival");
    assert_eq!(
        get(&app, "/api/contacts/3").await.status,
        StatusCode::TOO_MANY_REQUESTS,
        "nor did it use the window: the one create did"
    );

    let too_many = send(&app, "POST", "/__sluice/seed", &[], r#"{"count": 1000000}"#).await;
    assert_eq!(too_many.status, StatusCode::BAD_REQUEST);
    let typo = send(&app, "POST", "/__sluice/seed", &[], r#"{"cuont": 1}"#).await;
    assert_eq!(typo.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn spawn_serves_on_a_real_socket() {
    let (addr, api) = spawn(ApiConfig::instant()).await.expect("spawn");
    let res = raw_get(addr, "/api/contacts").await;
    assert!(res.starts_with("HTTP/1.1 200"), "{res}");
    assert!(res.to_ascii_lowercase().contains("x-ratelimit-limit: 10"));
    assert_eq!(api.total(), 1);
}

#[tokio::test]
async fn whole_site_serves_pages_worker_and_bundles() {
    let (addr, api) = crate::server::spawn(ApiConfig::instant())
        .await
        .expect("spawn");
    let index = raw_get(addr, "/").await;
    assert!(
        index.starts_with("HTTP/1.1 200") && index.contains("text/html"),
        "{index}"
    );
    let sw = raw_get(addr, "/sw.js").await.to_ascii_lowercase();
    assert!(sw.contains("service-worker-allowed: /") && sw.contains("cache-control: no-cache"));
    assert!(sw.contains("content-type: text/javascript"));
    let package = crate::package::Package::embedded().expect("package");
    let wasm = raw_get(addr, &format!("/pkg/{}", package.worker_wasm())).await;
    assert!(wasm.starts_with("HTTP/1.1 200") && wasm.contains("application/wasm"));
    let entry = raw_get(addr, "/pkg/sluice-worker.js").await;
    assert!(entry.starts_with("HTTP/1.1 200") && entry.contains("text/javascript"));
    assert!(
        entry.contains(package.worker_wasm()),
        "the entry names its wasm"
    );
    let manifest = raw_get(addr, "/pkg/package.json").await;
    assert!(manifest.starts_with("HTTP/1.1 200") && manifest.contains("application/json"));
    assert!(raw_get(addr, "/pkg/nope.js")
        .await
        .starts_with("HTTP/1.1 404"));
    assert!(raw_get(addr, "/api/contacts")
        .await
        .starts_with("HTTP/1.1 200"));
    assert_eq!(api.total(), 1, "static files are not API arrivals");
}

/// One HTTP/1.1 GET, response read to the end (head and body, lossy text).
async fn raw_get(addr: SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    String::from_utf8_lossy(&buf).into_owned()
}

/// With a `bearer` token set, `/api/` answers 401 to other tokens (counted as
/// `refused_tokens`, not as arrivals), and the sign-in endpoint hands out the current token
/// without counting as an arrival either.
#[tokio::test(start_paused = true)]
async fn a_bearer_token_is_handed_out_by_the_session_and_others_are_refused() {
    let (app, api) = app(ApiConfig {
        bearer: Some("s1".into()),
        ..limited(10, 1000)
    });
    let session = send(&app, "POST", "/api/session", &[], "").await;
    assert_eq!(session.status, StatusCode::OK);
    assert_eq!(session.body["token"], "s1");
    let refused = send(
        &app,
        "POST",
        "/api/contacts",
        &[("authorization", "Bearer old")],
        "{}",
    )
    .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let taken = send(
        &app,
        "POST",
        "/api/contacts",
        &[("authorization", "Bearer s1")],
        "{}",
    )
    .await;
    assert_eq!(taken.status, StatusCode::CREATED);
    let stats = api.stats();
    assert_eq!((stats.total, stats.refused_tokens), (1, 1));
}
