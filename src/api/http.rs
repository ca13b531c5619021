//! The HTTP side: the router, CORS, the `/api/` handler and the `/__sluice/` control API.

use std::net::SocketAddr;
use std::time::SystemTime;

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::*;

// ---------------------------------------------------------------------------------------------
// HTTP

/// Headers a cross-origin page or worker may read. Without this list a cross-origin `fetch`
/// sees none of the rate-limit signals.
pub(super) const EXPOSE_HEADERS: &str = "Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, \
     X-RateLimit-Reset, RateLimit, RateLimit-Policy, Date, Location, Idempotent-Replayed, ETag";
pub(super) const ALLOW_METHODS: &str = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";
pub(super) const ALLOW_HEADERS: &str =
    "Content-Type, Idempotency-Key, Authorization, Accept, If-Match";
/// Without it Chromium re-sends every preflight after 5 s, doubling the request count.
pub(super) const PREFLIGHT_MAX_AGE: &str = "600";

/// The demo API and the control API, with CORS, for merging into a larger router.
pub fn router(api: ApiHandle) -> Router {
    let control = Router::new()
        .route("/__sluice/config", get(get_config).post(post_config))
        .route("/__sluice/stats", get(get_stats))
        .route("/__sluice/arrivals", get(get_arrivals))
        .route("/__sluice/reset", post(post_reset))
        .route(
            "/__sluice/script",
            get(get_script).post(post_script).delete(delete_script),
        )
        .route("/__sluice/contacts", get(get_contacts))
        .route("/__sluice/seed", post(post_seed));
    Router::new()
        .route("/api/session", post(post_session))
        .route("/api", any(api_request))
        .route("/api/", any(api_request))
        .route("/api/{*rest}", any(api_request))
        .merge(control)
        .layer(middleware::from_fn_with_state(api.clone(), cors))
        .with_state(api)
}

/// Serves [`router`] alone on `127.0.0.1` at a free port, in the background of the current
/// tokio runtime (it stops with the runtime).
pub async fn spawn(config: ApiConfig) -> std::io::Result<(SocketAddr, ApiHandle)> {
    config
        .validate()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let api = ApiHandle::new(config);
    let addr = crate::listen::serve_in_background(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        router(api.clone()),
    )
    .await?;
    Ok((addr, api))
}

pub(super) async fn api_request(
    State(api): State<ApiHandle>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(token) = api.config().bearer {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if given != Some(format!("Bearer {token}").as_str()) {
            api.lock().refused_tokens += 1;
            let mut res =
                Json(serde_json::json!({ "error": "invalid or expired token" })).into_response();
            *res.status_mut() = StatusCode::UNAUTHORIZED;
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return res;
        }
    }
    let idempotency_key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let req = ApiRequest {
        method,
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        idempotency_key,
        cookie: headers.contains_key(header::COOKIE),
        if_match: headers
            .get(header::IF_MATCH)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body,
    };
    let large = (req.path == "/api/large").then(|| large_size(req.query.as_deref()));
    let received = Instant::now();
    let hold = api.arrival_hold();
    let reply = if hold.is_zero() {
        api.arrive(req, received)
    } else {
        // The held request travels in a task of its own: a client that gives up drops this
        // handler, but a request already on its way still arrives, is counted and applied.
        let held = api.clone();
        let arrival = tokio::spawn(async move {
            held.holds.until(received + hold).await;
            held.arrive(req, received)
        });
        match arrival.await {
            Ok(reply) => reply,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Only when the runtime shuts down: nobody is left to read this.
            Err(_) => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
        }
    };
    if !reply.delay.is_zero() {
        api.holds.until(reply.arrived + reply.delay).await;
    }
    let mut res = match (reply.body, large) {
        (Some(_), Some(bytes)) if reply.status == StatusCode::OK => {
            large_body(bytes, api.large_bytes_sent()).into_response()
        }
        (Some(b), _) if reply.status != StatusCode::NO_CONTENT => Json(b).into_response(),
        _ => Body::empty().into_response(),
    };
    *res.status_mut() = reply.status;
    let h = res.headers_mut();
    // Stamped when sent, as a real server does; a scripted Date below may replace it.
    if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(SystemTime::now())) {
        h.insert(header::DATE, v);
    }
    for (k, v) in reply.headers {
        h.insert(k, v);
    }
    res
}

pub(super) async fn cors(State(api): State<ApiHandle>, req: Request, next: Next) -> Response {
    if req.method() == Method::OPTIONS {
        if req.uri().path().starts_with("/api") {
            api.lock().preflights += 1;
        }
        let allow_headers = req
            .headers()
            .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
            .cloned()
            .unwrap_or(HeaderValue::from_static(ALLOW_HEADERS));
        let mut res = StatusCode::NO_CONTENT.into_response();
        let h = res.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOW_METHODS),
        );
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, allow_headers);
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(PREFLIGHT_MAX_AGE),
        );
        h.insert(
            header::VARY,
            HeaderValue::from_static("Access-Control-Request-Headers"),
        );
        add_cors(h);
        return res;
    }
    let mut res = next.run(req).await;
    add_cors(res.headers_mut());
    res
}

pub(super) fn add_cors(h: &mut HeaderMap) {
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSE_HEADERS),
    );
}

/// Errors of the control API, answered 400 with `{"error": ...}`.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Config(#[from] ApiConfigError),
    #[error(transparent)]
    Script(#[from] ScriptError),
    #[error("count must be at most {max}, got {found}")]
    SeedTooLarge { max: usize, found: usize },
}

impl IntoResponse for ControlError {
    fn into_response(self) -> Response {
        (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": self.to_string() })),
        )
            .into_response()
    }
}

/// The demo's sign-in (`POST /api/session`): the token `/api/` takes now (`bearer`), as an
/// app's sign-in endpoint answers once it checked a password; `demo` when none is asked for.
/// The sign-in service, not the rate-limited API: not counted as an arrival.
pub(super) async fn post_session(State(api): State<ApiHandle>) -> Json<serde_json::Value> {
    let token = api.config().bearer.unwrap_or_else(|| "demo".into());
    Json(serde_json::json!({ "token": token }))
}

pub(super) async fn get_config(State(api): State<ApiHandle>) -> Json<ApiConfig> {
    Json(api.config())
}

pub(super) async fn post_config(
    State(api): State<ApiHandle>,
    body: Bytes,
) -> Result<Json<ApiConfig>, ControlError> {
    let patch: ConfigPatch = serde_json::from_slice(&body)?;
    Ok(Json(api.update_config(&patch)?))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StatsQuery {
    pub(super) window_ms: Option<u64>,
}

pub(super) async fn get_stats(
    State(api): State<ApiHandle>,
    Query(q): Query<StatsQuery>,
) -> Json<Stats> {
    Json(match q.window_ms {
        Some(w) => api.stats_for_window(w),
        None => api.stats(),
    })
}

#[derive(Deserialize)]
pub(super) struct ArrivalsQuery {
    pub(super) since: Option<u64>,
}

pub(super) async fn get_arrivals(
    State(api): State<ApiHandle>,
    Query(q): Query<ArrivalsQuery>,
) -> Json<Vec<Arrival>> {
    Json(api.arrivals_since(q.since.unwrap_or(0)))
}

pub(super) async fn post_reset(State(api): State<ApiHandle>) -> Json<Value> {
    api.reset();
    Json(json!({ "ok": true }))
}

pub(super) async fn get_script(State(api): State<ApiHandle>) -> Json<Vec<ScriptedResponse>> {
    Json(api.pending_script())
}

/// Takes one entry or an array of entries, queued in order.
pub(super) async fn post_script(
    State(api): State<ApiHandle>,
    body: Bytes,
) -> Result<Json<Vec<ScriptedResponse>>, ControlError> {
    let entries = match serde_json::from_slice::<Value>(&body)? {
        v @ Value::Array(_) => serde_json::from_value::<Vec<ScriptedResponse>>(v)?,
        v => vec![serde_json::from_value::<ScriptedResponse>(v)?],
    };
    api.script(entries)?;
    Ok(Json(api.pending_script()))
}

pub(super) async fn delete_script(State(api): State<ApiHandle>) -> Json<Value> {
    api.clear_script();
    Json(json!({ "ok": true }))
}

pub(super) async fn get_contacts(State(api): State<ApiHandle>) -> Json<Vec<Value>> {
    Json(api.contacts())
}

/// The most contacts one seed may ask for: far above any demo, far below a memory problem.
pub(super) const MAX_SEED: usize = 100_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SeedRequest {
    pub(super) count: usize,
    /// The fields of every created contact (its `id` is added).
    #[serde(default)]
    pub(super) fields: Map<String, Value>,
}

pub(super) async fn post_seed(
    State(api): State<ApiHandle>,
    body: Bytes,
) -> Result<Json<Value>, ControlError> {
    let seed: SeedRequest = serde_json::from_slice(&body)?;
    if seed.count > MAX_SEED {
        return Err(ControlError::SeedTooLarge {
            max: MAX_SEED,
            found: seed.count,
        });
    }
    let created = api.seed_contacts(seed.count, &seed.fields);
    let contacts = api.lock().contacts.len();
    Ok(Json(json!({ "created": created, "contacts": contacts })))
}
