//! The demo API's state behind its handle: the limiter's log, the contacts, the idempotency
//! store, the scripted responses, and how one arrival is decided and answered.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::*;

/// Shared, cloneable access to the API's state: read recordings, change config, stage
/// scripted responses. Every method takes the lock briefly; none awaits.
#[derive(Clone)]
pub struct ApiHandle {
    pub(super) inner: Arc<Mutex<Inner>>,
    /// What ends the arrival holds and answer delays.
    pub(super) holds: Holds,
}

pub(super) struct Inner {
    pub(super) config: ApiConfig,
    pub(super) epoch: Instant,
    /// Admitted arrivals still inside the window, oldest first.
    pub(super) window_log: VecDeque<Instant>,
    pub(super) arrivals: Vec<Arrival>,
    pub(super) contacts: BTreeMap<u64, Value>,
    /// Each contact's version, its `ETag` (`"v3"`): 1 when created, one more with each change.
    pub(super) versions: BTreeMap<u64, u64>,
    pub(super) next_id: u64,
    pub(super) idempotency: HashMap<String, Stored>,
    pub(super) script: VecDeque<ScriptedResponse>,
    pub(super) rng: SplitMix64,
    pub(super) preflights: u64,
    pub(super) large_bytes_sent: Arc<AtomicU64>,
}

pub(super) struct Stored {
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) status: StatusCode,
    pub(super) body: Option<Value>,
    pub(super) location: Option<String>,
}

/// What the request asked for, read before taking the lock.
pub(super) struct ApiRequest {
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) query: Option<String>,
    pub(super) idempotency_key: Option<String>,
    /// Whether a `Cookie` header came with it (the echo says so).
    pub(super) cookie: bool,
    /// Its `If-Match`: a change of a contact whose `ETag` it does not name is refused with 412.
    pub(super) if_match: Option<String>,
    pub(super) body: Bytes,
}

/// The answer decided at arrival, sent `delay` after it.
pub(super) struct Reply {
    pub(super) status: StatusCode,
    pub(super) headers: Vec<(HeaderName, HeaderValue)>,
    pub(super) body: Option<Value>,
    pub(super) arrived: Instant,
    pub(super) delay: Duration,
}

/// The result of carrying out a request against the store.
pub(super) struct Handled {
    pub(super) status: StatusCode,
    pub(super) body: Option<Value>,
    pub(super) location: Option<String>,
    /// A contact's version, sent as `ETag`.
    pub(super) etag: Option<String>,
    pub(super) outcome: Outcome,
    pub(super) replayed: bool,
}

impl Handled {
    pub(super) fn refused(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            body: Some(json!({ "error": message.into() })),
            location: None,
            etag: None,
            outcome: Outcome::Refused,
            replayed: false,
        }
    }

    pub(super) fn ok(status: StatusCode, body: Option<Value>) -> Self {
        Self {
            status,
            body,
            location: None,
            etag: None,
            outcome: Outcome::Applied,
            replayed: false,
        }
    }
}

impl ApiHandle {
    pub fn new(config: ApiConfig) -> Self {
        Self::with_holds(config, Holds::Precise)
    }

    pub(super) fn with_holds(config: ApiConfig, holds: Holds) -> Self {
        let rng = SplitMix64::new(config.seed);
        Self {
            inner: Arc::new(Mutex::new(Inner {
                config,
                epoch: Instant::now(),
                window_log: VecDeque::new(),
                arrivals: Vec::new(),
                contacts: BTreeMap::new(),
                versions: BTreeMap::new(),
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

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
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
        inner.versions.clear();
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
    pub(super) fn large_bytes_sent(&self) -> Arc<AtomicU64> {
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
    pub(super) fn arrival_hold(&self) -> Duration {
        let mut inner = self.lock();
        let jitter_ms = inner.config.arrival_jitter_ms;
        inner.rng.arrival_hold(jitter_ms)
    }

    /// Decides the answer to one arrival, records it, and carries it out, all under one lock so
    /// the arrival order, the limiter's log and the record agree.
    pub(super) fn arrive(&self, req: ApiRequest, received: Instant) -> Reply {
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
                if let Some(tag) = h.etag.and_then(|t| HeaderValue::from_str(&t).ok()) {
                    headers.push((header::ETAG, tag));
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

pub(super) fn is_applied_create(a: &Arrival) -> bool {
    a.applied && a.method == "POST" && a.path.trim_end_matches('/') == "/api/contacts"
}

/// The instants (ns) of the arrivals the server's window counted, in arrival order.
pub(super) fn admitted_times(arrivals: &[Arrival]) -> Vec<u64> {
    arrivals
        .iter()
        .filter(|a| a.admitted)
        .map(|a| a.at_ns)
        .collect()
}

pub(super) fn max_in_window(arrivals: &[Arrival], window_ms: u64) -> usize {
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
    pub(super) fn wait_for_slot(&self, now: Instant, cfg: &ApiConfig) -> Duration {
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

    pub(super) fn rate_limit_headers(
        &self,
        now: Instant,
        cfg: &ApiConfig,
    ) -> Vec<(HeaderName, HeaderValue)> {
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
    pub(super) fn carry_out(&mut self, req: &ApiRequest) -> Handled {
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
                    etag: None,
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

    pub(super) fn route(&mut self, req: &ApiRequest) -> Handled {
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
                    self.versions.insert(id, 1);
                    Handled {
                        location: Some(format!("/api/contacts/{id}")),
                        etag: Some(etag(1)),
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
                self.contact(m, id, req.if_match.as_deref(), &req.body)
            }
            _ => Handled::ok(StatusCode::OK, Some(echo(req))),
        }
    }

    /// One existing contact. A change whose `If-Match` does not name the contact's `ETag` is
    /// refused with 412 and the contact as it is now (RFC 9110, 13.1.1), for the client to
    /// merge its change into.
    pub(super) fn contact(
        &mut self,
        m: &Method,
        id: u64,
        if_match: Option<&str>,
        body: &Bytes,
    ) -> Handled {
        let version = self.versions.get(&id).copied().unwrap_or(1);
        let current = etag(version);
        let changes = matches!(*m, Method::PATCH | Method::PUT | Method::DELETE);
        if let Some(wanted) = if_match.filter(|_| changes) {
            let matches = wanted
                .split(',')
                .map(str::trim)
                .any(|t| t == "*" || t == current);
            if !matches {
                return Handled {
                    body: Some(json!({
                        "error": format!(
                            "precondition failed: contact {id} is at {current}, not {wanted}"
                        ),
                        "current": self.contacts.get(&id).cloned(),
                    })),
                    etag: Some(current),
                    ..Handled::refused(StatusCode::PRECONDITION_FAILED, "")
                };
            }
        }
        match *m {
            Method::GET | Method::HEAD => Handled {
                etag: Some(current),
                ..Handled::ok(StatusCode::OK, self.contacts.get(&id).cloned())
            },
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
                let record = record.clone();
                self.versions.insert(id, version + 1);
                Handled {
                    etag: Some(etag(version + 1)),
                    ..Handled::ok(StatusCode::OK, Some(record))
                }
            }
            Method::DELETE => {
                self.contacts.remove(&id);
                self.versions.remove(&id);
                Handled::ok(StatusCode::NO_CONTENT, None)
            }
            _ => Handled::refused(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        }
    }
}

/// A contact version's entity tag, as `ETag` and `If-Match` carry it.
fn etag(version: u64) -> String {
    format!("\"v{version}\"")
}
