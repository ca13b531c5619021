//! What the proxy forwards and what it refuses, against a real HTTP upstream that reports the
//! headers it received: the proxy's credential replaces the browser's, only configured routes
//! under the upstream go out, and browsers from other origins are refused before anything is
//! counted or sent.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::http::HeaderMap;
use axum::routing::any;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::support::{held_ms, proxy_config};

/// An upstream that answers every request with the headers it got, and counts them.
async fn header_echo() -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = Router::new().fallback(any(move |headers: HeaderMap| {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            let seen: serde_json::Map<String, Value> = headers
                .iter()
                .map(|(n, v)| (n.to_string(), json!(v.to_str().unwrap_or("<binary>"))))
                .collect();
            (
                [
                    ("x-ratelimit-limit", "1000"),
                    ("x-ratelimit-remaining", "999"),
                ],
                Json(Value::Object(seen)),
            )
        }
    }));
    let addr = sluice::server::serve_in_background(SocketAddr::from(([127, 0, 0, 1], 0)), app)
        .await
        .expect("echo upstream");
    (addr, hits)
}

async fn proxy_for(upstream: SocketAddr) -> SocketAddr {
    let env = |name: &str| {
        (name == sluice::proxy::config::CREDENTIAL_ENV).then(|| "Bearer proxy-secret".to_owned())
    };
    let config = proxy_config(
        &[
            "--upstream",
            &format!("http://{upstream}/"),
            // A short window: the first ask of a fresh budget waits one.
            "--windows",
            "50/200ms",
            "--route",
            "/api/",
            "--allow-origin",
            "http://app.example:8080",
        ],
        &env,
    );
    sluice::proxy::spawn(SocketAddr::from(([127, 0, 0, 1], 0)), config)
        .await
        .expect("proxy")
}

#[tokio::test]
async fn the_proxy_sends_its_own_credential_and_states_the_callers_share() {
    let (up, hits) = header_echo().await;
    let proxy = proxy_for(up).await;
    let r = reqwest::Client::new()
        .get(format!("http://{proxy}/api/contacts?page=2"))
        .header("authorization", "Bearer from-the-browser")
        .header("cookie", "session=browser")
        .header("x-sluice-caller", "device-7")
        .header("origin", "http://app.example:8080")
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    let seen: Value = serde_json::from_slice(&r.bytes().await.expect("body")).expect("json");
    assert_eq!(seen["authorization"], "Bearer proxy-secret", "{seen}");
    assert!(seen.get("cookie").is_none(), "{seen}");
    assert!(seen.get("x-sluice-caller").is_none(), "{seen}");
    assert!(seen.get("origin").is_none(), "{seen}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    // The caller's share, not the whole key's budget.
    assert_eq!(
        h.get("ratelimit-policy").and_then(|v| v.to_str().ok()),
        Some("\"caller\";q=50;w=1")
    );
    assert!(h.get("x-ratelimit-limit").is_none());
    assert_eq!(
        h.get("access-control-allow-origin")
            .and_then(|v| v.to_str().ok()),
        Some("http://app.example:8080")
    );
    let exposed = h
        .get("access-control-expose-headers")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(exposed.contains("RateLimit-Policy") && exposed.contains("Retry-After"));
    // How long it held the request for its turn, where the worker reads it (and the page may).
    assert!(
        held_ms(&h).is_some_and(|ms| ms <= 2_000),
        "{:?}",
        h.get("server-timing")
    );
    assert!(exposed.contains("Server-Timing"), "{exposed}");
}

#[tokio::test]
async fn the_proxy_forwards_only_its_routes_and_only_for_its_origins() {
    let (up, hits) = header_echo().await;
    let proxy = proxy_for(up).await;
    let client = reqwest::Client::new();
    let status = |r: reqwest::Response| r.status().as_u16();

    let outside = client
        .get(format!("http://{proxy}/admin/keys"))
        .send()
        .await
        .expect("answer");
    assert_eq!(status(outside), 404);
    let prefix_lookalike = client
        .get(format!("http://{proxy}/apix"))
        .send()
        .await
        .expect("answer");
    assert_eq!(status(prefix_lookalike), 404);
    let other_site = client
        .post(format!("http://{proxy}/api/contacts"))
        .header("origin", "https://evil.example")
        .body("{}")
        .send()
        .await
        .expect("answer");
    assert_eq!(status(other_site), 403);
    let preflight = client
        .request(
            reqwest::Method::OPTIONS,
            format!("http://{proxy}/api/contacts"),
        )
        .header("origin", "http://app.example:8080")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type, idempotency-key",
        )
        .send()
        .await
        .expect("answer");
    assert_eq!(preflight.status(), 204);
    assert_eq!(
        preflight
            .headers()
            .get("access-control-allow-headers")
            .and_then(|v| v.to_str().ok()),
        Some("content-type, idempotency-key")
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "nothing refused (or preflighted) reached the upstream"
    );
}
