//! One request through the proxy: CORS, route, caller, wait (or refuse), forward with the
//! proxy's own credential, learn from the upstream's answer, and tell the caller its share.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde_json::json;
use sluice_shared::headers::{read_signal, HOLD_FIELD};
use sluice_shared::scope::Target;
use tokio::time::Instant;

use super::config::{ProxyBudget, ProxyConfig};
use super::memory_store::MemoryStore;
use super::redis_store::{RedisStore, StoreError};
use super::rule::{Decision, Observation, RuleParams, Share, WaitReason, DEFAULT_PAUSE_MS};
use super::store::{BudgetStore, Holder};
use sluice_shared::round_trips::RoundTrips;

/// Largest request body forwarded.
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Headers of one hop only (RFC 9110 §7.6.1), never forwarded either way.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Rate-limit headers of the upstream: they describe the whole key's budget, which would
/// mislead a caller pacing itself to its own share, so they are replaced by the caller's.
const UPSTREAM_LIMIT_HEADERS: [&str; 6] = [
    "retry-after",
    "ratelimit",
    "ratelimit-policy",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

const EXPOSED: &str = "Retry-After, RateLimit, RateLimit-Policy, Date, Location, \
                       Idempotent-Replayed, Content-Type, Server-Timing";

pub struct Proxy {
    config: ProxyConfig,
    store: BudgetStore,
    client: reqwest::Client,
    /// Names this instance's leases, so two instances never pick the same id.
    instance: String,
    next_lease: AtomicU64,
    /// Per budget: this instance's round trips, from decision to answer (`shared`'s model of
    /// where a request can have reached the server, and the margin for those under way).
    trips: Vec<std::sync::Mutex<RoundTrips>>,
    /// The origin of `trips`' instants.
    epoch: Instant,
}

impl Proxy {
    pub fn new(config: ProxyConfig) -> Result<Self, StoreError> {
        let store = match &config.redis {
            None => BudgetStore::Memory(MemoryStore::new(config.budgets.len())),
            Some(url) => {
                let names: Vec<String> = config.budgets.iter().map(|b| b.name.clone()).collect();
                BudgetStore::Redis {
                    redis: Box::new(RedisStore::new(
                        url,
                        &config.key_prefix,
                        &names,
                        Duration::from_millis(config.redis_timeout_ms),
                    )?),
                    fallback: config
                        .fail_open
                        .then(|| MemoryStore::new(config.budgets.len())),
                }
            }
        };
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.upstream_timeout_ms))
            // The upstream's redirects go back to the caller, who decides; the proxy forwards
            // only to the upstream it was given.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| StoreError::Malformed(format!("cannot build the HTTP client: {e}")))?;
        let trips = config
            .budgets
            .iter()
            .map(|_| std::sync::Mutex::new(RoundTrips::default()))
            .collect();
        Ok(Self {
            config,
            store,
            client,
            instance: instance_id(),
            next_lease: AtomicU64::new(0),
            trips,
            epoch: Instant::now(),
        })
    }

    /// The budget's rule with the margin this instance's round trips call for, or
    /// `--margin-ms` until it has measured enough of them to say (as the worker starts from
    /// its initial margin and then follows its trips).
    fn rule_for(&self, index: usize, budget: &ProxyBudget) -> RuleParams {
        let measured = self
            .trips
            .get(index)
            .and_then(|t| t.lock().ok().and_then(|t| t.margin()));
        RuleParams {
            margin_ms: measured.unwrap_or(budget.rule.margin_ms),
            ..budget.rule.clone()
        }
    }

    /// Records the trip of a request whose granted ask left at `asked` and whose answer came
    /// at `answered`, and returns the latest instant it can have reached the upstream.
    fn arrived_by(&self, index: usize, asked: Instant, answered: Instant) -> Instant {
        let ms = |t: Instant| t.saturating_duration_since(self.epoch).as_millis() as u64;
        let (d, a) = (ms(asked), ms(answered));
        let Some(Ok(mut trips)) = self.trips.get(index).map(|t| t.lock()) else {
            return answered;
        };
        trips.record(a.saturating_sub(d));
        let at = trips.arrived_by(d, a);
        // Never later than the answer, whole milliseconds rounded down: only ever earlier
        // than `answered` by what the model allows.
        answered
            .checked_sub(Duration::from_millis(a.saturating_sub(at)))
            .unwrap_or(answered)
    }

    fn lease_id(&self) -> String {
        let n = self.next_lease.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.instance)
    }
}

/// Random enough to tell instances apart: std's hasher keys are drawn from the OS per process.
fn instance_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{:016x}", h.finish())
}

/// Gives the lease back however the request ends, the caller hanging up included.
struct LeaseGuard {
    proxy: Arc<Proxy>,
    budget: usize,
    lease: String,
    caller: String,
    holder: Holder,
    /// Where its start is to be counted (see `lua/finish.lua`), once answered.
    counted_at: Option<Instant>,
    /// Whether it was handed to the upstream: one dropped on the way (the caller hung up) may
    /// have arrived any time until then.
    sending: bool,
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let (proxy, budget, lease, caller, holder) = (
            self.proxy.clone(),
            self.budget,
            std::mem::take(&mut self.lease),
            std::mem::take(&mut self.caller),
            self.holder,
        );
        let now = Instant::now();
        let counted_ms_ago = self
            .counted_at
            .or(self.sending.then_some(now))
            .map(|t| now.saturating_duration_since(t).as_secs_f64() * 1_000.0);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                proxy
                    .store
                    .release(budget, &lease, &caller, holder, counted_ms_ago)
                    .await
            });
        }
    }
}

fn json_answer(status: StatusCode, body: serde_json::Value) -> Response {
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn refuse(status: StatusCode, error: &str, message: String) -> Response {
    json_answer(status, json!({ "error": error, "message": message }))
}

fn seconds_up(ms: u64) -> u64 {
    ms.div_ceil(1_000).max(1)
}

fn set(headers: &mut HeaderMap, name: &'static str, value: String) {
    if let Ok(v) = HeaderValue::try_from(value) {
        headers.insert(HeaderName::from_static(name), v);
    }
}

/// The caller's share, as IETF `RateLimit-Policy` / `RateLimit` (what Sluice's worker reads).
fn state_share(headers: &mut HeaderMap, budget: &ProxyBudget, share: &Share, reset_ms: u64) {
    let w = seconds_up(budget.share_window.length_ms);
    set(
        headers,
        "ratelimit-policy",
        format!("\"caller\";q={};w={w}", share.share),
    );
    set(
        headers,
        "ratelimit",
        format!(
            "\"caller\";r={};t={}",
            share.share.saturating_sub(share.used),
            seconds_up(reset_ms)
        ),
    );
}

fn add_cors(headers: &mut HeaderMap, origin: &Option<String>) {
    if let Some(o) = origin {
        set(headers, "access-control-allow-origin", o.clone());
        set(headers, "access-control-expose-headers", EXPOSED.into());
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
    }
}

fn preflight(origin: &str, request: &HeaderMap) -> Response {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    let h = r.headers_mut();
    set(h, "access-control-allow-origin", origin.into());
    set(
        h,
        "access-control-allow-methods",
        "GET, HEAD, POST, PUT, PATCH, DELETE".into(),
    );
    if let Some(asked) = request
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .and_then(|v| v.to_str().ok())
    {
        // Only well-formed header names are echoed.
        let names: Vec<&str> = asked
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty() && HeaderName::try_from(*n).is_ok())
            .collect();
        set(h, "access-control-allow-headers", names.join(", "));
    }
    // Chromium's cap: one preflight per URL per two hours.
    set(h, "access-control-max-age", "7200".into());
    h.append(header::VARY, HeaderValue::from_static("Origin"));
    r
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What to tell every instance about an upstream answer; `None` when it says nothing new (a
/// limit no lower than the configured one), which spares a store round trip per request.
fn observation(budget: &ProxyBudget, status: u16, headers: &HeaderMap) -> Option<Observation> {
    let pairs: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let signal = read_signal(status, &pairs, now_ms());
    let stated_limit = signal.quota.as_ref().and_then(|q| q.limit);
    let stated_window_ms = signal.quota.as_ref().and_then(|q| q.window_ms);
    let windows = &budget.rule.windows;
    let named = stated_window_ms
        .and_then(|w| windows.iter().find(|x| x.length_ms == w))
        .unwrap_or(&budget.share_window);
    let lower = stated_limit.is_some_and(|l| l < u64::from(named.limit));
    (signal.rate_limited || lower).then_some(Observation {
        rate_limited: signal.rate_limited,
        retry_after_ms: signal.retry_after_ms,
        stated_limit,
        stated_window_ms,
    })
}

pub async fn handle(
    State(proxy): State<Arc<Proxy>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let config = &proxy.config;
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(o) = &origin {
        if !config.origin_allowed(o) {
            // Refused before anything is counted or forwarded: another site's page must not
            // spend this key's budget through a visitor's browser.
            return refuse(
                StatusCode::FORBIDDEN,
                "origin-not-allowed",
                format!("origin '{o}' is not among the proxy's allowed origins (--allow-origin)"),
            );
        }
    }
    if let (Some(o), true) = (
        &origin,
        req.method() == Method::OPTIONS
            && req
                .headers()
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD),
    ) {
        return preflight(o, req.headers());
    }
    let mut answer = forward(&proxy, peer, req).await;
    add_cors(answer.headers_mut(), &origin);
    answer
}

async fn forward(proxy: &Arc<Proxy>, peer: SocketAddr, req: Request) -> Response {
    let config = &proxy.config;
    let path = req.uri().path().to_owned();
    let query = req.uri().query().map(str::to_owned);
    let url = format!("{}{path}", config.upstream);
    let target = match Target::parse(&url) {
        Ok(t) if config.upstream_scope.covers(&t) => t,
        Ok(_) | Err(_) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "bad-path",
                format!("'{path}' is no path under the upstream"),
            )
        }
    };
    let Some(index) = config.budget_for(&target) else {
        return refuse(
            StatusCode::NOT_FOUND,
            "not-a-route",
            format!("'{path}' is not among the proxy's routes"),
        );
    };
    let budget = &config.budgets[index];

    let caller = match req.headers().get(&config.caller_header) {
        None => peer.ip().to_string(),
        Some(v) => match v.to_str() {
            Ok(s) if !s.is_empty() && s.len() <= 200 => s.to_owned(),
            _ => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "bad-caller",
                    format!(
                        "the {} header must be 1 to 200 visible ASCII characters",
                        config.caller_header
                    ),
                )
            }
        },
    };

    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body-unreadable",
                format!("the request body could not be read (at most {MAX_BODY_BYTES} bytes): {e}"),
            )
        }
    };

    // Ask until granted, holding the request while the wait fits in --max-wait-ms.
    let lease = proxy.lease_id();
    let first_ask = Instant::now();
    let deadline = first_ask + Duration::from_millis(config.max_wait_ms);
    let (share, holder, asked_at) = loop {
        let rule = proxy.rule_for(index, budget);
        // The trip is measured from the ask, not from its answer: the way back from the store
        // and this instance's own scheduling lie between the decision and the send too, so
        // their spread belongs in the margin.
        let asked_at = Instant::now();
        match proxy.store.acquire(index, &rule, &caller, &lease).await {
            Ok((Decision::Granted(share), holder)) => break (share, holder, asked_at),
            Ok((
                Decision::Wait {
                    wait_ms,
                    reason,
                    share,
                },
                _,
            )) => {
                let wake = Instant::now() + Duration::from_millis(wait_ms);
                if wake <= deadline {
                    tokio::time::sleep_until(wake).await;
                    continue;
                }
                let mut r = must_wait(budget, wait_ms, reason, &share);
                say_held(&mut r, first_ask.elapsed(), None);
                return r;
            }
            Err(e) => {
                let mut r = refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "budget-unavailable",
                    format!("the shared budget cannot be asked, so nothing is sent: {e}"),
                );
                set(r.headers_mut(), "retry-after", "1".into());
                return r;
            }
        }
    };
    let mut guard = LeaseGuard {
        proxy: proxy.clone(),
        budget: index,
        lease,
        caller,
        holder,
        counted_at: None,
        sending: false,
    };

    let mut url = url;
    if let Some(q) = &query {
        url.push('?');
        url.push_str(q);
    }
    let mut out = proxy.client.request(parts.method.clone(), &url);
    for (name, value) in parts.headers.iter() {
        let n = name.as_str();
        let dropped = HOP_BY_HOP.contains(&n)
            || matches!(n, "host" | "content-length" | "origin" | "cookie")
            || n.starts_with("access-control-")
            || name == config.caller_header
            || config.credential.as_ref().is_some_and(|c| c.header == name);
        if !dropped {
            out = out.header(name, value);
        }
    }
    if let Some(c) = &config.credential {
        out = out.header(&c.header, &c.value);
    }
    guard.sending = true;
    let sent = out.body(body).send().await;
    let upstream = match sent {
        Ok(r) => {
            guard.counted_at = Some(proxy.arrived_by(index, asked_at, Instant::now()));
            r
        }
        Err(e) => {
            // It may have arrived any time until now.
            guard.counted_at = Some(Instant::now());
            let (status, error) = if e.is_timeout() {
                (StatusCode::GATEWAY_TIMEOUT, "upstream-timeout")
            } else {
                (StatusCode::BAD_GATEWAY, "upstream-unreachable")
            };
            return refuse(status, error, format!("the upstream did not answer: {e}"));
        }
    };
    let status = upstream.status();
    let headers = upstream.headers().clone();
    let bytes: Bytes = match upstream.bytes().await {
        Ok(b) => b,
        Err(e) => {
            return refuse(
                StatusCode::BAD_GATEWAY,
                "upstream-body",
                format!("the upstream's answer broke off: {e}"),
            )
        }
    };

    if let Some(seen) = observation(budget, status.as_u16(), &headers) {
        let paused_ms = match proxy.store.observe(index, &budget.rule, &seen).await {
            Ok(ms) => ms,
            Err(e) => {
                eprintln!("sluice proxy: what the upstream said is not shared: {e}");
                seen.retry_after_ms.unwrap_or(DEFAULT_PAUSE_MS)
            }
        };
        if seen.rate_limited {
            // Our own timing may explain it (an arrival that trailed its decision by more than
            // the margin allowed): widen this instance's margin for a while.
            if let Some(Ok(mut trips)) = proxy.trips.get(index).map(|t| t.lock()) {
                trips.widen();
            }
            // The caller waits like any other: told by the proxy, not by the upstream.
            let mut r = must_wait(budget, paused_ms, WaitReason::Paused, &share);
            say_held(&mut r, asked_at.saturating_duration_since(first_ask), None);
            return r;
        }
    }

    let mut r = Response::new(Body::from(bytes));
    *r.status_mut() = status;
    let h = r.headers_mut();
    for (name, value) in headers.iter() {
        let n = name.as_str();
        if HOP_BY_HOP.contains(&n)
            || UPSTREAM_LIMIT_HEADERS.contains(&n)
            || matches!(n, "content-length" | "set-cookie" | "server-timing")
            || n.starts_with("access-control-")
        {
            continue;
        }
        h.append(name, value.clone());
    }
    state_share(h, budget, &share, budget.share_window.length_ms);
    say_held(
        &mut r,
        asked_at.saturating_duration_since(first_ask),
        Some(&headers),
    );
    r
}

/// Says in `Server-Timing` how long the request waited here for its turn: that is no part of
/// the caller's way here or back, and a worker that took a second's hold for network spread
/// would stretch its windows by half of it (see `shared`'s `headers::HOLD_FIELD`). First in the
/// field, where the worker reads it; the upstream's own metrics follow.
fn say_held(r: &mut Response, held: Duration, upstream: Option<&HeaderMap>) {
    let mut timing = format!("{HOLD_FIELD}{}", held.as_millis());
    for theirs in upstream
        .into_iter()
        .flat_map(|h| h.get_all("server-timing"))
    {
        if let Ok(theirs) = theirs.to_str() {
            timing.push_str(", ");
            timing.push_str(theirs);
        }
    }
    if let Ok(v) = HeaderValue::try_from(timing) {
        r.headers_mut()
            .insert(HeaderName::from_static("server-timing"), v);
    }
}

/// 429 from the proxy: the caller's turn is further off than the proxy holds requests.
fn must_wait(budget: &ProxyBudget, wait_ms: u64, reason: WaitReason, share: &Share) -> Response {
    let mut r = json_answer(
        StatusCode::TOO_MANY_REQUESTS,
        json!({
            "error": "rate-limited",
            "reason": reason.as_str(),
            "retryAfterMs": wait_ms,
            "message": format!("this caller's turn comes in {wait_ms} ms ({})", reason.as_str()),
        }),
    );
    let h = r.headers_mut();
    set(h, "retry-after", seconds_up(wait_ms).to_string());
    let none_left = Share {
        used: share.share,
        ..*share
    };
    state_share(h, budget, &none_left, wait_ms);
    r
}
