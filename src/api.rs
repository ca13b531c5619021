//! A strict, rate-limited demo API that records every arrival.
//!
//! It stands in for the real APIs that Sluice's worker talks to, strict in the ways that make
//! client-side limiting hard: it counts requests when they *arrive* (after the network has
//! bunched them up), with an exact sliding-window log, answers everything over the limit with
//! 429, and can add latency, jitter, server errors and "applied, but the response never came"
//! faults. Everything is recorded so tests can assert on what the server saw.
//!
//! # Semantics
//! - **Limit**: at most `limit` admitted arrivals in any half-open window `(t - window, t]`.
//!   An arrival is stamped when it arrives: after the arrival hold below, before the answer's
//!   latency. The limit check, the 429 decision, the rate-limit headers and the recorded
//!   `atMs`/`atNs` (and so "most arrivals in any window") all use that instant.
//! - **Arrival jitter** (`arrivalJitterMs`): each `/api/` request is held a uniform 0..=J ms
//!   (from the seeded generator) after the server receives it and before it arrives, as if the
//!   network had delayed the way there. Requests sent in order can therefore arrive reordered,
//!   and are counted and applied in arrival order. A held request arrives, is counted and is
//!   applied even if the client gives up meanwhile: the server saw it. With 0 (the default)
//!   requests arrive the instant they are received, as before, and no random number is drawn.
//! - **Rejected arrivals do not count** against the limit (unless `countRejected`), so a client
//!   that retries too early is refused but not punished further. Real servers differ; this
//!   choice makes "arrivals admitted per window" the one number a client can be judged on.
//! - **Order of decisions** for an arrival under `/api/`: a scripted response, if one is queued
//!   for it, decides; otherwise the limiter (429, not applied), then the fault roll (500/503,
//!   counted, not applied), then the hang roll (applied, response held back for `hangMs`).
//! - **Latency** (`latencyMs ± jitterMs`, uniform) delays every `/api/` response, 429s included,
//!   as a network round trip would. It starts at the arrival, so it comes on top of any hold.
//! - **Headers** on every `/api/` response: `Date`, and per `headers` mode `X-RateLimit-Limit`,
//!   `X-RateLimit-Remaining`, `X-RateLimit-Reset` and/or IETF `RateLimit-Policy` / `RateLimit`.
//!   Reset is the delta in seconds (rounded up) until Remaining is back to Limit. A 429 carries
//!   `Retry-After`: the time until a slot frees, as delta seconds (rounded up) or an HTTP-date.
//! - **Idempotency-Key**: a successful non-GET request's response is stored under its key; a
//!   repeat with the same method and path is not applied again and gets the stored response
//!   (a create's 201 becomes 200) with `Idempotent-Replayed: true`; the same key on a different
//!   method or path gets 422. 429s, faults and 4xx answers are not stored, so they may be retried.
//! - **CORS**: any origin; preflights are answered at once (never held) and never counted.
//!
//! # Resources
//! `POST /api/contacts` creates (201 + `Location`), `GET /api/contacts` lists,
//! `GET/PATCH/PUT/DELETE /api/contacts/{id}` (PATCH is a JSON merge patch, DELETE answers 204).
//! `GET /api/large?bytes=N` answers N bytes of text, streamed in 16 KiB chunks; how many the
//! server handed to the connection is in the stats (`largeBytesSent`), so a test can tell a
//! client that stops reading from one that reads everything.
//! Any other method and path under `/api/` is answered 200 with a JSON echo, which says
//! whether the request carried cookies (`cookie`).
//!
//! # Control API (JSON, never rate-limited or recorded)
//! `GET|POST /__sluice/config`, `GET /__sluice/stats[?windowMs=]`,
//! `GET /__sluice/arrivals[?since=seq]`, `POST /__sluice/reset`,
//! `GET|POST|DELETE /__sluice/script`, `GET /__sluice/contacts`, `POST /__sluice/seed`
//! (`{"count": 2000, "fields": {...}}`: creates contacts until the store holds `count`, at
//! once, so a demo page has its data without spending the rate limit or the visitor's time).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use hold::Holds;

/// How a 429's `Retry-After` is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RetryAfterForm {
    /// Whole seconds, rounded up.
    #[default]
    Delta,
    /// An HTTP-date, rounded up to the next whole second.
    Date,
}

/// Which rate-limit headers every `/api/` response carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum HeaderMode {
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (delta seconds).
    #[default]
    Xrate,
    /// `RateLimit-Policy: "default";q=N;w=S` and `RateLimit: "default";r=N;t=S`.
    Ietf,
    Both,
    None,
}

/// The server's behaviour; changeable at run time through [`ApiHandle::update_config`] or
/// `POST /__sluice/config`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApiConfig {
    /// Admitted arrivals allowed per window.
    pub limit: u32,
    pub window_ms: u64,
    pub latency_ms: u64,
    /// Latency varies uniformly within `latency_ms ± jitter_ms` (never below zero).
    pub jitter_ms: u64,
    /// Each `/api/` request is held a uniform 0..=`arrival_jitter_ms` ms before it arrives (is
    /// counted against the limit and applied), as a network delays the way there; 0 is off.
    pub arrival_jitter_ms: u64,
    /// Share (0..=1) of admitted requests answered 500 or 503 without being applied.
    pub fault_rate: f64,
    /// Share (0..=1) of admitted requests that are applied but answered only after `hang_ms`.
    pub hang_rate: f64,
    pub hang_ms: u64,
    pub retry_after_form: RetryAfterForm,
    pub headers: HeaderMode,
    /// Whether rejected arrivals also enter the sliding window (a punitive server).
    pub count_rejected: bool,
    /// Seed for arrival and latency jitter and fault rolls; `None` seeds from the clock.
    pub seed: Option<u64>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            limit: 10,
            window_ms: 1000,
            latency_ms: 300,
            jitter_ms: 0,
            arrival_jitter_ms: 0,
            fault_rate: 0.0,
            hang_rate: 0.0,
            hang_ms: 120_000,
            retry_after_form: RetryAfterForm::Delta,
            headers: HeaderMode::Xrate,
            count_rejected: false,
            seed: None,
        }
    }
}

impl ApiConfig {
    /// Defaults without latency, for tests that want fast answers.
    pub fn instant() -> Self {
        Self {
            latency_ms: 0,
            ..Self::default()
        }
    }

    pub fn validate(&self) -> Result<(), ApiConfigError> {
        if self.window_ms == 0 {
            return Err(ApiConfigError::ZeroWindow);
        }
        for (field, rate) in [("faultRate", self.fault_rate), ("hangRate", self.hang_rate)] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(ApiConfigError::RateOutOfRange { field, value: rate });
            }
        }
        Ok(())
    }
}

/// A partial [`ApiConfig`]: fields left out keep their value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ConfigPatch {
    pub limit: Option<u32>,
    pub window_ms: Option<u64>,
    pub latency_ms: Option<u64>,
    pub jitter_ms: Option<u64>,
    pub arrival_jitter_ms: Option<u64>,
    pub fault_rate: Option<f64>,
    pub hang_rate: Option<f64>,
    pub hang_ms: Option<u64>,
    pub retry_after_form: Option<RetryAfterForm>,
    pub headers: Option<HeaderMode>,
    pub count_rejected: Option<bool>,
    pub seed: Option<u64>,
}

impl ConfigPatch {
    pub fn apply_to(&self, c: &mut ApiConfig) {
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { c.$f = v; } )* };
        }
        set!(
            limit,
            window_ms,
            latency_ms,
            jitter_ms,
            arrival_jitter_ms,
            fault_rate,
            hang_rate,
            hang_ms,
            retry_after_form,
            headers,
            count_rejected
        );
        if self.seed.is_some() {
            c.seed = self.seed;
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiConfigError {
    #[error("windowMs must be positive")]
    ZeroWindow,
    #[error("{field} must be between 0 and 1, got {value}")]
    RateOutOfRange { field: &'static str, value: f64 },
}

/// A response staged for the next matching request under `/api/`.
///
/// With `status`, the entry decides alone: the limiter is bypassed, the response carries only
/// the scripted headers (no computed rate-limit headers), and the request is applied only if
/// `apply` is true. A scripted 429 is not counted by the limiter; any other scripted status is.
/// Without `status`, the request is handled normally (limiter included, random faults skipped)
/// and the scripted headers replace or add to the computed ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ScriptedResponse {
    /// Only requests with this method take the entry (any method if absent).
    pub method: Option<String>,
    /// Only requests whose path starts with this take the entry (any path if absent).
    pub path: Option<String>,
    pub status: Option<u16>,
    pub headers: BTreeMap<String, String>,
    /// Response body for a scripted status (a small JSON note if absent).
    pub body: Option<Value>,
    /// With `status`: apply the request anyway (for "applied, but answered with an error").
    pub apply: Option<bool>,
    /// Apply the request, then hold the response back for `hang_ms`.
    pub apply_then_hang: bool,
    pub hang_ms: Option<u64>,
    /// Replaces the configured latency for this response.
    pub delay_ms: Option<u64>,
}

impl ScriptedResponse {
    /// A response with this status that decides alone (see the type's docs).
    pub fn status(status: u16) -> Self {
        Self {
            status: Some(status),
            ..Self::default()
        }
    }

    /// A normally handled request that is applied and then not answered for `hang_ms`
    /// (configured `hangMs` if `None`).
    pub fn apply_then_hang(hang_ms: Option<u64>) -> Self {
        Self {
            apply_then_hang: true,
            hang_ms,
            ..Self::default()
        }
    }

    /// A normally handled request whose response gets these headers.
    pub fn headers<K: Into<String>, V: Into<String>>(
        headers: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self::default().with_headers(headers)
    }

    pub fn with_headers<K: Into<String>, V: Into<String>>(
        mut self,
        headers: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.headers
            .extend(headers.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    pub fn with_header(self, name: &str, value: &str) -> Self {
        self.with_headers([(name, value)])
    }

    pub fn for_request(mut self, method: Option<&str>, path_prefix: Option<&str>) -> Self {
        self.method = method.map(str::to_owned);
        self.path = path_prefix.map(str::to_owned);
        self
    }

    pub fn validate(&self) -> Result<(), ScriptError> {
        if let Some(s) = self.status {
            StatusCode::from_u16(s).map_err(|_| ScriptError::Status(s))?;
        }
        if let Some(m) = &self.method {
            Method::from_bytes(m.as_bytes()).map_err(|_| ScriptError::Method(m.clone()))?;
        }
        for (k, v) in &self.headers {
            HeaderName::from_bytes(k.as_bytes()).map_err(|_| ScriptError::Header(k.clone()))?;
            HeaderValue::from_str(v).map_err(|_| ScriptError::Header(k.clone()))?;
        }
        Ok(())
    }

    fn matches(&self, method: &Method, path: &str) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method.as_str()))
            && self.path.as_deref().is_none_or(|p| path.starts_with(p))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("invalid status {0}")]
    Status(u16),
    #[error("invalid method {0:?}")]
    Method(String),
    #[error("invalid header {0:?}")]
    Header(String),
}

/// What happened to one arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Carried out (including reads and echoes).
    Applied,
    /// An Idempotency-Key repeat: answered from the store, not applied again.
    Replayed,
    /// 429 from the limiter.
    RateLimited,
    /// Injected 500/503.
    Fault,
    /// Answered by a scripted status.
    Scripted,
    /// Refused as a client error (bad JSON, unknown id, key reuse): 4xx, not applied.
    Refused,
}

/// One request that reached the `/api/` handler.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Arrival {
    /// 1-based, in arrival order, restarting at reset.
    pub seq: u64,
    /// Arrival time since server start (or the last reset).
    pub at_ms: f64,
    /// The same, exact: window computations use this.
    pub at_ns: u64,
    /// When the request reached the handler, before its arrival hold (ms, as `at_ms`): the
    /// client's start plus the loopback.
    #[serde(default)]
    pub received_ms: f64,
    /// When its answer is due to leave (ms, as `at_ms`): the arrival plus the answer's delay.
    #[serde(default)]
    pub answer_ms: f64,
    pub method: String,
    pub path: String,
    pub idempotency_key: Option<String>,
    /// The status sent (or to be sent, for a held-back response).
    pub status: u16,
    /// Whether the request changed or read state (false for 429, faults, replays, refusals).
    pub applied: bool,
    /// Whether the limiter counted it.
    pub admitted: bool,
    pub outcome: Outcome,
    /// Whether the response was held back (applied-then-hang).
    pub hung: bool,
    pub scripted: bool,
}

/// Totals over the recorded arrivals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub total: usize,
    pub admitted: usize,
    pub applied: usize,
    /// Responses with status 429, scripted ones included.
    pub rate_limited: usize,
    pub faults: usize,
    pub hangs: usize,
    pub replays: usize,
    pub scripted: usize,
    pub preflights: u64,
    /// Bytes of `/api/large` bodies handed to connections.
    pub large_bytes_sent: u64,
    /// Most admitted arrivals in any window of `window_ms`.
    pub max_in_window: usize,
    pub limit: u32,
    pub window_ms: u64,
    pub first_at_ms: Option<f64>,
    pub last_at_ms: Option<f64>,
    pub status_counts: BTreeMap<u16, usize>,
    /// Contacts in the store now.
    pub contacts: usize,
    /// Applied creates beyond the first for the same Idempotency-Key (should be 0).
    pub duplicate_creates: usize,
    /// Applied creates that carried no Idempotency-Key.
    pub creates_without_key: usize,
}

/// Shared, cloneable access to the API's state: read recordings, change config, stage
/// scripted responses. Every method takes the lock briefly; none awaits.
#[derive(Clone)]
pub struct ApiHandle {
    inner: Arc<Mutex<Inner>>,
    /// What ends the arrival holds and answer delays.
    holds: Holds,
}

struct Inner {
    config: ApiConfig,
    epoch: Instant,
    /// Admitted arrivals still inside the window, oldest first.
    window_log: VecDeque<Instant>,
    arrivals: Vec<Arrival>,
    contacts: BTreeMap<u64, Value>,
    next_id: u64,
    idempotency: HashMap<String, Stored>,
    script: VecDeque<ScriptedResponse>,
    rng: SplitMix64,
    preflights: u64,
    large_bytes_sent: Arc<AtomicU64>,
}

struct Stored {
    method: Method,
    path: String,
    status: StatusCode,
    body: Option<Value>,
    location: Option<String>,
}

/// What the request asked for, read before taking the lock.
struct ApiRequest {
    method: Method,
    path: String,
    query: Option<String>,
    idempotency_key: Option<String>,
    /// Whether a `Cookie` header came with it (the echo says so).
    cookie: bool,
    body: Bytes,
}

/// The answer decided at arrival, sent `delay` after it.
struct Reply {
    status: StatusCode,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Option<Value>,
    arrived: Instant,
    delay: Duration,
}

/// The result of carrying out a request against the store.
struct Handled {
    status: StatusCode,
    body: Option<Value>,
    location: Option<String>,
    outcome: Outcome,
    replayed: bool,
}

impl Handled {
    fn refused(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            body: Some(json!({ "error": message.into() })),
            location: None,
            outcome: Outcome::Refused,
            replayed: false,
        }
    }

    fn ok(status: StatusCode, body: Option<Value>) -> Self {
        Self {
            status,
            body,
            location: None,
            outcome: Outcome::Applied,
            replayed: false,
        }
    }
}

impl ApiHandle {
    pub fn new(config: ApiConfig) -> Self {
        Self::with_holds(config, Holds::Precise)
    }

    fn with_holds(config: ApiConfig, holds: Holds) -> Self {
        let rng = SplitMix64::new(config.seed);
        Self {
            inner: Arc::new(Mutex::new(Inner {
                config,
                epoch: Instant::now(),
                window_log: VecDeque::new(),
                arrivals: Vec::new(),
                contacts: BTreeMap::new(),
                next_id: 1,
                idempotency: HashMap::new(),
                script: VecDeque::new(),
                rng,
                preflights: 0,
                large_bytes_sent: Arc::default(),
            })),
            holds,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind, still usable for a test
        // server; refusing every later request would hide the original panic.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn config(&self) -> ApiConfig {
        self.lock().config.clone()
    }

    pub fn set_config(&self, config: ApiConfig) -> Result<(), ApiConfigError> {
        config.validate()?;
        let mut inner = self.lock();
        if config.seed.is_some() && config.seed != inner.config.seed {
            inner.rng = SplitMix64::new(config.seed);
        }
        inner.config = config;
        Ok(())
    }

    pub fn update_config(&self, patch: &ConfigPatch) -> Result<ApiConfig, ApiConfigError> {
        let mut config = self.config();
        patch.apply_to(&mut config);
        self.set_config(config.clone())?;
        Ok(config)
    }

    /// Forgets arrivals, the limiter's window, contacts, idempotency keys and the script;
    /// keeps the config. Times restart from zero.
    pub fn reset(&self) {
        let mut inner = self.lock();
        inner.epoch = Instant::now();
        inner.window_log.clear();
        inner.arrivals.clear();
        inner.contacts.clear();
        inner.next_id = 1;
        inner.idempotency.clear();
        inner.script.clear();
        inner.preflights = 0;
        inner.large_bytes_sent.store(0, Ordering::Relaxed);
        inner.rng = SplitMix64::new(inner.config.seed);
    }

    /// Queues scripted responses after any already queued.
    pub fn script(
        &self,
        entries: impl IntoIterator<Item = ScriptedResponse>,
    ) -> Result<(), ScriptError> {
        let entries: Vec<_> = entries.into_iter().collect();
        for e in &entries {
            e.validate()?;
        }
        self.lock().script.extend(entries);
        Ok(())
    }

    pub fn push_script(&self, entry: ScriptedResponse) -> Result<(), ScriptError> {
        self.script([entry])
    }

    /// Scripted responses not yet used.
    pub fn pending_script(&self) -> Vec<ScriptedResponse> {
        self.lock().script.iter().cloned().collect()
    }

    pub fn clear_script(&self) {
        self.lock().script.clear();
    }

    pub fn arrivals(&self) -> Vec<Arrival> {
        self.lock().arrivals.clone()
    }

    /// Arrivals with `seq` greater than `seq`.
    pub fn arrivals_since(&self, seq: u64) -> Vec<Arrival> {
        let inner = self.lock();
        let start = inner.arrivals.partition_point(|a| a.seq <= seq);
        inner.arrivals[start..].to_vec()
    }

    pub fn total(&self) -> usize {
        self.lock().arrivals.len()
    }

    pub fn count_status(&self, status: u16) -> usize {
        self.lock()
            .arrivals
            .iter()
            .filter(|a| a.status == status)
            .count()
    }

    pub fn count_429(&self) -> usize {
        self.count_status(429)
    }

    /// The most admitted arrivals in any half-open window of `window_ms`, the quantity the
    /// limiter bounds by `limit`.
    pub fn max_in_window(&self, window_ms: u64) -> usize {
        max_in_window(&self.lock().arrivals, window_ms)
    }

    /// How close a client came to the limit: the shortest time, in ms, from an admitted
    /// arrival to the `count`-th admitted arrival after it (`None` with fewer arrivals). With
    /// `count` the limit, a client that kept to it leaves at least the window; how much more
    /// is the margin it kept, the figure that shows a breach coming before `max_in_window`
    /// does.
    pub fn shortest_span(&self, count: usize) -> Option<f64> {
        let times = admitted_times(&self.lock().arrivals);
        (count > 0)
            .then(|| times.windows(count + 1).map(|w| w[count] - w[0]).min())
            .flatten()
            .map(|ns| ns as f64 / 1e6)
    }

    /// Applied `POST /api/contacts` per Idempotency-Key: every value should be exactly 1.
    pub fn applied_creates_by_key(&self) -> BTreeMap<String, usize> {
        let mut by_key = BTreeMap::new();
        for a in self.lock().arrivals.iter().filter(|a| is_applied_create(a)) {
            if let Some(k) = &a.idempotency_key {
                *by_key.entry(k.clone()).or_insert(0) += 1;
            }
        }
        by_key
    }

    /// The contact store, ordered by id.
    pub fn contacts(&self) -> Vec<Value> {
        self.lock().contacts.values().cloned().collect()
    }

    /// Creates contacts with `fields` (and the next free ids) until the store holds at least
    /// `count`; returns how many it created. Neither rate-limited nor recorded as arrivals:
    /// it is setup, not traffic. Under one lock, so two pages seeding at once create the
    /// missing contacts once.
    pub fn seed_contacts(&self, count: usize, fields: &Map<String, Value>) -> usize {
        let mut inner = self.lock();
        let missing = count.saturating_sub(inner.contacts.len());
        for _ in 0..missing {
            let id = inner.next_id;
            inner.next_id += 1;
            let mut record = fields.clone();
            record.insert("id".into(), id.into());
            inner.contacts.insert(id, Value::Object(record));
        }
        missing
    }

    /// The counter of `/api/large` bytes, for the streams that add to it.
    fn large_bytes_sent(&self) -> Arc<AtomicU64> {
        self.lock().large_bytes_sent.clone()
    }

    pub fn preflights(&self) -> u64 {
        self.lock().preflights
    }

    pub fn stats(&self) -> Stats {
        let window_ms = self.lock().config.window_ms;
        self.stats_for_window(window_ms)
    }

    /// [`Self::stats`] with `max_in_window` taken over another window length.
    pub fn stats_for_window(&self, window_ms: u64) -> Stats {
        let inner = self.lock();
        let a = &inner.arrivals;
        let count = |f: &dyn Fn(&Arrival) -> bool| a.iter().filter(|x| f(x)).count();
        let mut status_counts = BTreeMap::new();
        for x in a {
            *status_counts.entry(x.status).or_insert(0) += 1;
        }
        let mut creates_by_key: HashMap<&str, usize> = HashMap::new();
        let mut creates_without_key = 0;
        for x in a.iter().filter(|x| is_applied_create(x)) {
            match &x.idempotency_key {
                Some(k) => *creates_by_key.entry(k).or_insert(0) += 1,
                None => creates_without_key += 1,
            }
        }
        Stats {
            total: a.len(),
            admitted: count(&|x| x.admitted),
            applied: count(&|x| x.applied),
            rate_limited: count(&|x| x.status == 429),
            faults: count(&|x| x.outcome == Outcome::Fault),
            hangs: count(&|x| x.hung),
            replays: count(&|x| x.outcome == Outcome::Replayed),
            scripted: count(&|x| x.scripted),
            preflights: inner.preflights,
            large_bytes_sent: inner.large_bytes_sent.load(Ordering::Relaxed),
            max_in_window: max_in_window(a, window_ms),
            limit: inner.config.limit,
            window_ms,
            first_at_ms: a.first().map(|x| x.at_ms),
            last_at_ms: a.last().map(|x| x.at_ms),
            status_counts,
            contacts: inner.contacts.len(),
            duplicate_creates: creates_by_key.values().map(|n| n - 1).sum(),
            creates_without_key,
        }
    }

    /// How long a request just received is held before it arrives (see the module docs).
    fn arrival_hold(&self) -> Duration {
        let mut inner = self.lock();
        let jitter_ms = inner.config.arrival_jitter_ms;
        inner.rng.arrival_hold(jitter_ms)
    }

    /// Decides the answer to one arrival, records it, and carries it out, all under one lock so
    /// the arrival order, the limiter's log and the record agree.
    fn arrive(&self, req: ApiRequest, received: Instant) -> Reply {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let now = Instant::now();
        let cfg = inner.config.clone();
        let window = Duration::from_millis(cfg.window_ms);
        while inner
            .window_log
            .front()
            .is_some_and(|&t| now.duration_since(t) >= window)
        {
            inner.window_log.pop_front();
        }

        let script = inner
            .script
            .iter()
            .position(|s| s.matches(&req.method, &req.path))
            .and_then(|i| inner.script.remove(i));

        let mut headers: Vec<(HeaderName, HeaderValue)> = Vec::new();
        let mut rate_headers = true;
        let mut hang: Option<Duration> = None;
        let admitted;
        let status;
        let body;
        let outcome;
        let mut applied = false;

        if let Some(scripted_status) = script.as_ref().and_then(|s| s.status) {
            let s = script.as_ref().expect("checked above");
            status = StatusCode::from_u16(scripted_status).unwrap_or(StatusCode::OK);
            admitted = status != StatusCode::TOO_MANY_REQUESTS;
            if admitted || cfg.count_rejected {
                inner.window_log.push_back(now);
            }
            rate_headers = false;
            if s.apply == Some(true) {
                let h = inner.carry_out(&req);
                applied = h.outcome == Outcome::Applied;
            }
            if s.apply_then_hang {
                hang = Some(Duration::from_millis(s.hang_ms.unwrap_or(cfg.hang_ms)));
            }
            body = Some(
                s.body
                    .clone()
                    .unwrap_or_else(|| json!({ "scripted": true, "status": scripted_status })),
            );
            outcome = Outcome::Scripted;
        } else if inner.window_log.len() >= cfg.limit as usize {
            if cfg.count_rejected {
                inner.window_log.push_back(now);
            }
            admitted = false;
            let wait = inner.wait_for_slot(now, &cfg);
            headers.push((header::RETRY_AFTER, retry_after(wait, cfg.retry_after_form)));
            status = StatusCode::TOO_MANY_REQUESTS;
            body = Some(json!({
                "error": "rate limited",
                "limit": cfg.limit,
                "windowMs": cfg.window_ms,
                "retryAfterMs": wait.as_millis() as u64,
            }));
            outcome = Outcome::RateLimited;
        } else {
            inner.window_log.push_back(now);
            admitted = true;
            // A scripted entry without a status asks for normal handling, so random faults
            // would only make the staged scenario flaky.
            let random = script.is_none();
            if random && inner.rng.chance(cfg.fault_rate) {
                status = if inner.rng.chance(0.5) {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                body = Some(json!({ "error": "injected fault" }));
                outcome = Outcome::Fault;
            } else {
                let hang_ms = match &script {
                    Some(s) if s.apply_then_hang => Some(s.hang_ms.unwrap_or(cfg.hang_ms)),
                    None if inner.rng.chance(cfg.hang_rate) => Some(cfg.hang_ms),
                    _ => None,
                };
                hang = hang_ms.map(Duration::from_millis);
                let h = inner.carry_out(&req);
                applied = h.outcome == Outcome::Applied;
                if h.replayed {
                    headers.push((
                        HeaderName::from_static("idempotent-replayed"),
                        HeaderValue::from_static("true"),
                    ));
                }
                if let Some(loc) = h.location.and_then(|l| HeaderValue::from_str(&l).ok()) {
                    headers.push((header::LOCATION, loc));
                }
                status = h.status;
                body = h.body;
                outcome = h.outcome;
            }
        }

        if rate_headers {
            headers.extend(inner.rate_limit_headers(now, &cfg));
        }
        if let Some(s) = &script {
            for (k, v) in &s.headers {
                // Validated when queued.
                let (Ok(k), Ok(v)) = (
                    HeaderName::from_bytes(k.as_bytes()),
                    HeaderValue::from_str(v),
                ) else {
                    continue;
                };
                headers.retain(|(n, _)| *n != k);
                headers.push((k, v));
            }
        }

        let latency = match script.as_ref().and_then(|s| s.delay_ms) {
            Some(ms) => Duration::from_millis(ms),
            None => inner.rng.latency(&cfg),
        };
        let delay = hang.unwrap_or(latency);

        let at = now.duration_since(inner.epoch);
        let seq = inner.arrivals.last().map_or(1, |a| a.seq + 1);
        inner.arrivals.push(Arrival {
            seq,
            at_ms: at.as_secs_f64() * 1000.0,
            at_ns: at.as_nanos() as u64,
            received_ms: received
                .saturating_duration_since(inner.epoch)
                .as_secs_f64()
                * 1000.0,
            answer_ms: (at + delay).as_secs_f64() * 1000.0,
            method: req.method.to_string(),
            path: req.path.clone(),
            idempotency_key: req.idempotency_key.clone(),
            status: status.as_u16(),
            applied,
            admitted,
            outcome,
            hung: hang.is_some(),
            scripted: script.is_some(),
        });

        Reply {
            status,
            headers,
            body,
            arrived: now,
            delay,
        }
    }
}

fn is_applied_create(a: &Arrival) -> bool {
    a.applied && a.method == "POST" && a.path.trim_end_matches('/') == "/api/contacts"
}

/// The instants (ns) of the arrivals the server's window counted, in arrival order.
fn admitted_times(arrivals: &[Arrival]) -> Vec<u64> {
    arrivals
        .iter()
        .filter(|a| a.admitted)
        .map(|a| a.at_ns)
        .collect()
}

fn max_in_window(arrivals: &[Arrival], window_ms: u64) -> usize {
    let window_ns = window_ms.saturating_mul(1_000_000);
    let times = admitted_times(arrivals);
    let mut best = 0;
    let mut start = 0;
    for (end, &t) in times.iter().enumerate() {
        while t - times[start] >= window_ns {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

impl Inner {
    /// How long until the limiter admits another arrival.
    fn wait_for_slot(&self, now: Instant, cfg: &ApiConfig) -> Duration {
        let window = Duration::from_millis(cfg.window_ms);
        let n = self.window_log.len();
        let limit = cfg.limit as usize;
        if n < limit {
            return Duration::ZERO;
        }
        if limit == 0 {
            return window;
        }
        // Once the arrival at this index leaves the window, fewer than `limit` remain.
        let freeing = self.window_log[n - limit];
        (freeing + window).saturating_duration_since(now)
    }

    fn rate_limit_headers(&self, now: Instant, cfg: &ApiConfig) -> Vec<(HeaderName, HeaderValue)> {
        let window = Duration::from_millis(cfg.window_ms);
        let remaining = (cfg.limit as usize).saturating_sub(self.window_log.len());
        let reset = self.window_log.back().map_or(Duration::ZERO, |&t| {
            (t + window).saturating_duration_since(now)
        });
        let reset_s = ceil_secs(reset);
        let window_s = ceil_secs(window);
        let mut h = Vec::new();
        let num = |n: u64| HeaderValue::from(n);
        if matches!(cfg.headers, HeaderMode::Xrate | HeaderMode::Both) {
            h.push((
                HeaderName::from_static("x-ratelimit-limit"),
                num(cfg.limit.into()),
            ));
            h.push((
                HeaderName::from_static("x-ratelimit-remaining"),
                num(remaining as u64),
            ));
            h.push((HeaderName::from_static("x-ratelimit-reset"), num(reset_s)));
        }
        if matches!(cfg.headers, HeaderMode::Ietf | HeaderMode::Both) {
            let policy = format!("\"default\";q={};w={window_s}", cfg.limit);
            let state = format!("\"default\";r={remaining};t={reset_s}");
            for (name, v) in [("ratelimit-policy", policy), ("ratelimit", state)] {
                if let Ok(v) = HeaderValue::from_str(&v) {
                    h.push((HeaderName::from_static(name), v));
                }
            }
        }
        h
    }

    /// Carries out a request against the store, honouring Idempotency-Key.
    fn carry_out(&mut self, req: &ApiRequest) -> Handled {
        let keyed = req
            .idempotency_key
            .as_ref()
            .filter(|_| !matches!(req.method, Method::GET | Method::HEAD | Method::OPTIONS));
        if let Some(key) = keyed {
            if let Some(s) = self.idempotency.get(key) {
                if s.method != req.method || s.path != req.path {
                    return Handled::refused(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Idempotency-Key already used for a different request",
                    );
                }
                let status = if s.status == StatusCode::CREATED {
                    StatusCode::OK
                } else {
                    s.status
                };
                return Handled {
                    status,
                    body: s.body.clone(),
                    location: s.location.clone(),
                    outcome: Outcome::Replayed,
                    replayed: true,
                };
            }
        }
        let h = self.route(req);
        if let Some(key) = keyed {
            if h.outcome == Outcome::Applied && h.status.is_success() {
                self.idempotency.insert(
                    key.clone(),
                    Stored {
                        method: req.method.clone(),
                        path: req.path.clone(),
                        status: h.status,
                        body: h.body.clone(),
                        location: h.location.clone(),
                    },
                );
            }
        }
        h
    }

    fn route(&mut self, req: &ApiRequest) -> Handled {
        let rest = req.path.strip_prefix("/api").unwrap_or(&req.path);
        let segs: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
        let m = &req.method;
        match segs.as_slice() {
            ["contacts"] if *m == Method::POST => match parse_object(&req.body) {
                Ok(mut fields) => {
                    let id = self.next_id;
                    self.next_id += 1;
                    fields.insert("id".into(), id.into());
                    let record = Value::Object(fields);
                    self.contacts.insert(id, record.clone());
                    Handled {
                        location: Some(format!("/api/contacts/{id}")),
                        ..Handled::ok(StatusCode::CREATED, Some(record))
                    }
                }
                Err(e) => Handled::refused(StatusCode::BAD_REQUEST, e),
            },
            ["contacts"] if *m == Method::GET || *m == Method::HEAD => {
                let all: Vec<Value> = self.contacts.values().cloned().collect();
                Handled::ok(StatusCode::OK, Some(Value::Array(all)))
            }
            ["contacts"] => Handled::refused(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
            ["contacts", id] => {
                let Some(id) = id
                    .parse::<u64>()
                    .ok()
                    .filter(|id| self.contacts.contains_key(id))
                else {
                    return Handled::refused(StatusCode::NOT_FOUND, "no such contact");
                };
                self.contact(m, id, &req.body)
            }
            _ => Handled::ok(StatusCode::OK, Some(echo(req))),
        }
    }

    /// One existing contact.
    fn contact(&mut self, m: &Method, id: u64, body: &Bytes) -> Handled {
        match *m {
            Method::GET | Method::HEAD => {
                Handled::ok(StatusCode::OK, self.contacts.get(&id).cloned())
            }
            Method::PATCH | Method::PUT => {
                let fields = match parse_object(body) {
                    Ok(f) => f,
                    Err(e) => return Handled::refused(StatusCode::BAD_REQUEST, e),
                };
                let Some(record) = self.contacts.get_mut(&id) else {
                    return Handled::refused(StatusCode::NOT_FOUND, "no such contact");
                };
                if *m == Method::PUT {
                    *record = Value::Object(fields);
                } else {
                    merge_patch(record, &Value::Object(fields));
                }
                // The id is the resource's name, not a field a client may change.
                if let Value::Object(o) = record {
                    o.insert("id".into(), id.into());
                }
                Handled::ok(StatusCode::OK, Some(record.clone()))
            }
            Method::DELETE => {
                self.contacts.remove(&id);
                Handled::ok(StatusCode::NO_CONTENT, None)
            }
            _ => Handled::refused(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        }
    }
}

fn parse_object(body: &Bytes) -> Result<Map<String, Value>, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("body must be a JSON object".into()),
        Err(e) => Err(format!("invalid JSON: {e}")),
    }
}

/// RFC 7396 JSON merge patch: objects merge recursively, `null` removes a field.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in patch {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

fn echo(req: &ApiRequest) -> Value {
    let body = if req.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&req.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&req.body).into_owned()))
    };
    json!({
        "ok": true,
        "method": req.method.as_str(),
        "path": req.path,
        "query": req.query,
        "idempotencyKey": req.idempotency_key,
        "cookie": req.cookie,
        "body": body,
    })
}

/// `bytes=N` of `/api/large`: 1 MiB unless given, at most 1 GiB.
fn large_size(query: Option<&str>) -> u64 {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("bytes="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1 << 20)
        .min(1 << 30)
}

/// `bytes` of `x`, made a chunk at a time as the connection takes them, each counted in
/// `sent` when handed over: a client that stops reading stops the count (after what the
/// connection's buffers hold).
fn large_body(bytes: u64, sent: Arc<AtomicU64>) -> Body {
    const CHUNK: u64 = 16 << 10;
    let chunks = futures::stream::unfold(0u64, move |done| {
        let sent = sent.clone();
        async move {
            if done >= bytes {
                return None;
            }
            let n = CHUNK.min(bytes - done);
            sent.fetch_add(n, Ordering::Relaxed);
            let chunk = Bytes::from(vec![b'x'; n as usize]);
            Some((Ok::<_, std::convert::Infallible>(chunk), done + n))
        }
    });
    Body::from_stream(chunks)
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_nanos().div_ceil(1_000_000_000) as u64
}

fn retry_after(wait: Duration, form: RetryAfterForm) -> HeaderValue {
    match form {
        RetryAfterForm::Delta => HeaderValue::from(ceil_secs(wait)),
        RetryAfterForm::Date => {
            // An HTTP-date has whole seconds; rounding down would invite a retry that is early.
            let at = SystemTime::now() + wait;
            let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or_default();
            let rounded = UNIX_EPOCH + Duration::from_secs(ceil_secs(since_epoch));
            HeaderValue::from_str(&httpdate::fmt_http_date(rounded))
                .unwrap_or_else(|_| HeaderValue::from(ceil_secs(wait)))
        }
    }
}

/// Small seeded generator for arrival holds, jitter and fault rolls: reproducible with a seed,
/// no dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn new(seed: Option<u64>) -> Self {
        let seed = seed.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0x5eed, |d| d.as_nanos() as u64)
        });
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Draws only when `p > 0`, so enabling faults does not shift other sequences in tests
    /// that leave them off.
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// A uniform 0..=`jitter_ms` ms; draws only when `jitter_ms > 0`, like [`Self::chance`].
    fn arrival_hold(&mut self, jitter_ms: u64) -> Duration {
        if jitter_ms == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(self.next_u64() % (jitter_ms + 1))
    }

    fn latency(&mut self, cfg: &ApiConfig) -> Duration {
        let ms = if cfg.jitter_ms == 0 {
            cfg.latency_ms
        } else {
            let spread = self.next_u64() % (2 * cfg.jitter_ms + 1);
            (cfg.latency_ms + spread).saturating_sub(cfg.jitter_ms)
        };
        Duration::from_millis(ms)
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

/// Headers a cross-origin page or worker may read. Without this list a cross-origin `fetch`
/// sees none of the rate-limit signals.
const EXPOSE_HEADERS: &str = "Retry-After, X-RateLimit-Limit, X-RateLimit-Remaining, \
     X-RateLimit-Reset, RateLimit, RateLimit-Policy, Date, Location, Idempotent-Replayed";
const ALLOW_METHODS: &str = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";
const ALLOW_HEADERS: &str = "Content-Type, Idempotency-Key, Authorization, Accept";
/// Without it Chromium re-sends every preflight after 5 s, doubling the request count.
const PREFLIGHT_MAX_AGE: &str = "600";

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

async fn api_request(
    State(api): State<ApiHandle>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
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

async fn cors(State(api): State<ApiHandle>, req: Request, next: Next) -> Response {
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

fn add_cors(h: &mut HeaderMap) {
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

async fn get_config(State(api): State<ApiHandle>) -> Json<ApiConfig> {
    Json(api.config())
}

async fn post_config(
    State(api): State<ApiHandle>,
    body: Bytes,
) -> Result<Json<ApiConfig>, ControlError> {
    let patch: ConfigPatch = serde_json::from_slice(&body)?;
    Ok(Json(api.update_config(&patch)?))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatsQuery {
    window_ms: Option<u64>,
}

async fn get_stats(State(api): State<ApiHandle>, Query(q): Query<StatsQuery>) -> Json<Stats> {
    Json(match q.window_ms {
        Some(w) => api.stats_for_window(w),
        None => api.stats(),
    })
}

#[derive(Deserialize)]
struct ArrivalsQuery {
    since: Option<u64>,
}

async fn get_arrivals(
    State(api): State<ApiHandle>,
    Query(q): Query<ArrivalsQuery>,
) -> Json<Vec<Arrival>> {
    Json(api.arrivals_since(q.since.unwrap_or(0)))
}

async fn post_reset(State(api): State<ApiHandle>) -> Json<Value> {
    api.reset();
    Json(json!({ "ok": true }))
}

async fn get_script(State(api): State<ApiHandle>) -> Json<Vec<ScriptedResponse>> {
    Json(api.pending_script())
}

/// Takes one entry or an array of entries, queued in order.
async fn post_script(
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

async fn delete_script(State(api): State<ApiHandle>) -> Json<Value> {
    api.clear_script();
    Json(json!({ "ok": true }))
}

async fn get_contacts(State(api): State<ApiHandle>) -> Json<Vec<Value>> {
    Json(api.contacts())
}

/// The most contacts one seed may ask for: far above any demo, far below a memory problem.
const MAX_SEED: usize = 100_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SeedRequest {
    count: usize,
    /// The fields of every created contact (its `id` is added).
    #[serde(default)]
    fields: Map<String, Value>,
}

async fn post_seed(State(api): State<ApiHandle>, body: Bytes) -> Result<Json<Value>, ControlError> {
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

mod hold;
#[cfg(test)]
mod tests;
