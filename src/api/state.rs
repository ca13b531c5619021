//! The demo API's state behind its handle: the limiter's log, the contacts, the idempotency
//! store, the scripted responses, and the handle's reads and settings. How one arrival is
//! decided is in `arrival.rs`, the limiter's answers in `limiter.rs`, carrying a request out in
//! `store.rs`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
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
    /// Requests answered 401 because they lacked the `bearer` token (not arrivals).
    pub(super) refused_tokens: u64,
    pub(super) large_bytes_sent: Arc<AtomicU64>,
    /// Applied PATCHes per contact id, single or batched: a test's check that no change was
    /// applied twice.
    pub(super) patches: BTreeMap<u64, u64>,
    /// Applied creates per `name` field (string names only), single or batched, likewise.
    pub(super) creates_by_name: BTreeMap<String, u64>,
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
    /// For a batch carried out: what its items did.
    pub(super) batch: Option<Tally>,
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
            batch: None,
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
            batch: None,
        }
    }

    /// Whether the arrival changed or read state: carried out, and for a batch, with at least
    /// one item applied (a batch whose every item failed changed nothing).
    pub(super) fn applied(&self) -> bool {
        self.outcome == Outcome::Applied && self.batch.is_none_or(|t| t.applied > 0)
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
                refused_tokens: 0,
                large_bytes_sent: Arc::default(),
                patches: BTreeMap::new(),
                creates_by_name: BTreeMap::new(),
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

    /// Forgets arrivals, the limiter's window, contacts, idempotency keys, the script and the
    /// `$batch` 429s still staged (`batchSubRateLimited` back to 0); keeps the rest of the
    /// config. Times restart from zero.
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
        inner.refused_tokens = 0;
        inner.large_bytes_sent.store(0, Ordering::Relaxed);
        inner.patches.clear();
        inner.creates_by_name.clear();
        inner.config.batch_sub_rate_limited = 0;
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

    /// How many PATCHes of contact `id` were applied, sent alone or in a batch (a `$batch`
    /// sub-request or a HubSpot-style input): with each change sent once, at most 1. Idempotent
    /// replays, refusals and failed items are not applications.
    pub fn patches_of(&self, id: u64) -> u64 {
        self.lock().patches.get(&id).copied().unwrap_or(0)
    }

    /// How many contacts were created with this `name`, alone or in a batch (seeded ones not
    /// counted), whatever became of them since: with each create sent once, at most 1.
    pub fn creates_named(&self, name: &str) -> u64 {
        self.lock().creates_by_name.get(name).copied().unwrap_or(0)
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
            refused_tokens: inner.refused_tokens,
            large_bytes_sent: inner.large_bytes_sent.load(Ordering::Relaxed),
            max_in_window: max_in_window(a, window_ms),
            limit: inner.config.limit,
            window_ms,
            first_at_ms: a.first().map(|x| x.at_ms),
            last_at_ms: a.last().map(|x| x.at_ms),
            status_counts,
            batches: count(&|x| x.batch_items.is_some()),
            batch_items: a
                .iter()
                .filter_map(|x| x.batch_items)
                .map(|n| n as usize)
                .sum(),
            batch_items_applied: a.iter().map(|x| x.items_applied as usize).sum(),
            patches_applied: inner.patches.values().sum::<u64>() as usize,
            contacts: inner.contacts.len(),
            duplicate_creates: creates_by_key.values().map(|n| n - 1).sum(),
            creates_without_key,
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
