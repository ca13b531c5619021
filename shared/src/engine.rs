//! The scheduler: which job goes next, and when.
//!
//! Shaped like `quinn-proto`: the engine owns no clock, socket or timer. Inputs arrive as method
//! calls that carry `now` ([`Engine::enqueue`], [`Engine::on_response`], ...); outputs are pulled
//! ([`Engine::poll_transmit`] for the next request to start, [`Engine::take_changes`] for what to
//! persist and broadcast), and [`Engine::poll_timeout`] names the single next instant at which
//! anything could start, so the worker arms exactly one timer and never polls.
//!
//! Ordering rules, in the order they apply:
//! 1. Per key, one at a time, in enqueue order: only the oldest unfinished job of a key is
//!    eligible. A waiting interactive job lends its lane to the head of its key's chain, so a
//!    person's edit is not stuck behind a bulk job for the same record longer than that one job.
//! 2. Lanes: interactive, then bulk, then background; a job rises one lane for every
//!    `aging.step` it waits, so nothing starves (see [`crate::config::AgingConfig::bound`]).
//!    While a risen job outranks a fresh one of a higher lane, it takes one start in
//!    [`AGED_TURN_EVERY`], so an aged backlog never shuts people's actions out.
//! 3. Within a lane, oldest first (a 429'd job keeps its place, so it goes first again).
//!    Budgets are independent: a pause on one never holds up another.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

// Fx rather than std's SipHash: the keys are the worker's own, so flooding resistance buys
// nothing, and SipHash's code is larger in the wasm.
use rustc_hash::{FxHashMap, FxHasher};

use serde::{Deserialize, Serialize};

use crate::budget::{BudgetState, Trip};
use crate::config::{BudgetConfig, ConfigError, EngineConfig};
use crate::headers::read_signal;
use crate::id_map::IdMap;
use crate::job::{Job, JobError, JobId, JobKind, JobOutcome, JobSpec, JobState, Lane};
use crate::preflight::{needs_preflight, Preflights};
use crate::protocol::ProtocolError;
use crate::random::{uuid_v4_from, IdentifierSource, Rng};
use crate::request_options::RequestOptions;
use crate::retry::{backoff, classify, default_pause, Verdict};
use crate::round_trips::RoundTrips;
use crate::scope::{Scope, Target};
use crate::status::{
    capacity_warning, percentile, BudgetStatus, GroupStatus, LaneStatus, StateCounts, Status,
};
use crate::time::{human_duration, DurationMs, Millis};

/// Queue waits remembered per lane for the p50/p95 figures.
const WAIT_SAMPLES: usize = 1_000;
/// While a job that has aged past its lane's bound outranks a fresh job of a higher lane, it
/// takes one start in this many, and the fresh jobs the rest.
///
/// Why not simply serve the aged job first: aging counts from enqueue, so a bulk backlog ages
/// as a whole, and after one step all 2,000 jobs of a bulk edit would rank with (and, being
/// older, ahead of) every interactive action for the rest of the run. A share keeps both
/// promises: an aged job still starts within a known bound (its aging bound plus this many
/// starts per aged job ahead of it), and a person's action still overtakes the backlog, waiting
/// at most one start more only when people alone keep the budget busy. The count of starts in
/// a row given to fresh jobs resets whenever nothing fresher competes, so sporadic actions
/// during a long aged backlog always go first.
pub const AGED_TURN_EVERY: u32 = 4;
/// Longest time between probes while the network is down.
const OFFLINE_PROBE_MAX_MS: DurationMs = 60_000;

/// A request the worker should start now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transmit {
    pub job_id: JobId,
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
    /// How the browser makes it (`None`: its defaults); see [`crate::request_options`].
    pub options: Option<RequestOptions>,
    /// Abort the request after this long and report [`TransportError::Timeout`].
    pub timeout_ms: DurationMs,
    /// Save [`Engine::take_changes`] before starting this request. When false, the request
    /// may start at once and its start be saved by the next save, which need not wait for
    /// earlier ones: the saved budget already says that starts may go out unsaved, and a
    /// restore counts `concurrency` of them (see [`Engine::restore`]). The engine keeps that
    /// true by asking to save first until [`Engine::on_saved`] confirms the save that marked
    /// the budget, and whenever `concurrency` starts are out unsaved, until it confirms some.
    /// Saving first would hold every request back by a storage commit, a few milliseconds on
    /// every start, which with a few requests in flight is what keeps a worker under the
    /// limit's rate.
    pub save_first: bool,
}

/// A response as the transport saw it (headers hidden by CORS are simply absent).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// Why no response arrived.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "message", rename_all = "kebab-case")]
pub enum TransportError {
    /// The device is offline: the job waits without spending an attempt.
    Offline,
    /// No answer within the timeout; the server may have applied the request.
    Timeout,
    /// The connection failed (DNS, reset, CORS refusal, ...).
    Network(String),
}

/// The result of an enqueue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Enqueued {
    /// The job that will carry this action (an earlier one when it was folded into it).
    pub id: JobId,
    pub coalesced: bool,
    pub state: JobState,
}

/// What changed since the last call to [`Engine::take_changes`]: save it, then broadcast it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Changes {
    /// Jobs to save (then broadcast).
    pub jobs: Vec<Job>,
    /// Jobs that only started (`sending`) since: to broadcast, not worth a write. A restore
    /// sends a job saved as waiting exactly as it would one saved as sending (again, with
    /// the same idempotency key), so saving the start would buy nothing but a second write
    /// per request.
    #[serde(default)]
    pub started: Vec<Job>,
    pub removed: Vec<JobId>,
    pub budgets: Vec<BudgetState>,
    /// Names this save for [`Engine::on_saved`].
    #[serde(default)]
    pub save: SaveId,
}

/// One [`Engine::take_changes`], in the order they were taken.
pub type SaveId = u64;

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.started.is_empty()
            && self.removed.is_empty()
            && self.budgets.is_empty()
    }
}

/// A ready job's place in line: its lane after aging, then enqueue time and sequence.
type Rank = (i64, Millis, u64);

/// Whose turn a start was, for [`AGED_TURN_EVERY`].
#[derive(Clone, Copy)]
enum Turn {
    /// The head of the top lane also ranked first.
    Uncontested,
    /// An aged job outranked it, but the fresh job went.
    Fresh,
    /// The aged job went.
    Aged,
}

/// Ready jobs are ordered by (enqueued at, enqueue sequence): oldest first.
type ReadyKey = (Millis, u64, JobId);

enum Placement {
    Ready {
        budget: String,
        lane: usize,
        key: ReadyKey,
    },
    Delayed((Millis, u64, JobId)),
}

struct Budget {
    config: BudgetConfig,
    state: BudgetState,
    ready: [SortedQueue<ReadyKey>; 3],
    /// Each attempt in flight (at most `concurrency`: a list).
    in_flight: Vec<InFlight>,
    /// Smoothed response time, for the ETA when concurrency rather than the limit binds.
    latency_ms: Option<f64>,
    /// Starts in a row that went to a fresh job of a higher lane while an aged job of a lower
    /// lane outranked it (see [`AGED_TURN_EVERY`]).
    aged_passed_over: u32,
    /// Starts that went out before being saved ([`Transmit::save_first`] false) and are not
    /// known to be saved yet. Never more than `concurrency`: that is what a restore counts.
    unsaved_starts: u32,
    /// Of those, the ones no [`Engine::take_changes`] has taken yet.
    untaken_starts: u32,
    /// Where the saved `sends_before_saving` mark stands: a start may go out unsaved only once
    /// storage holds the mark, or a restore would not count it.
    mark: Mark,
    /// The preflights the browser sends ahead of this budget's requests, counted when the API
    /// counts them ([`BudgetConfig::count_preflights`]).
    preflights: Preflights,
    /// Recent round trips: where an answered request may have arrived, and the windows'
    /// margin for those still under way.
    round_trips: RoundTrips,
}

/// Whether storage holds a budget's `sends_before_saving` mark (see [`Budget::mark`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mark {
    /// Not set, or set but no save has taken it yet.
    NotSaved,
    /// Taken by this save, not yet confirmed.
    Saving(SaveId),
    /// In storage: starts may go out unsaved.
    Saved,
}

/// An attempt in flight, as the limiter logged it and as it really went.
struct InFlight {
    job: JobId,
    /// Where the limiter's log holds its start: `sent`, moved later by every narrowing of the
    /// margin since (see [`Budget::follow_round_trips`]) and while it is overdue (see
    /// [`Budget::count_overdue_as_arriving`]).
    logged: Millis,
    /// When it was handed to the network: what its round trip is measured from.
    sent: Millis,
    /// How far narrowings moved the whole log since it was sent: real instants about this
    /// attempt are that much later in the log's frame.
    shifted: DurationMs,
    /// Saved first and not handed to the network yet ([`Engine::on_sent`]): it reaches the
    /// server no earlier than any instant it is still waiting at.
    unsent: bool,
}

impl Budget {
    fn has_ready(&self) -> bool {
        self.ready.iter().any(|r| !r.is_empty())
    }

    /// A request in flight for longer than any usual trip may still be on its way, or have
    /// arrived at any moment since it left (a lost answer, a stalled connection): it is counted
    /// as if it arrived now, for as long as it stays unanswered. While it is one of the recent
    /// starts that costs nothing; once it is as old as a window, it is what keeps the window's
    /// count true. Returns whether anything moved.
    fn count_overdue_as_arriving(&mut self, now: Millis) -> bool {
        let overdue_after = self
            .round_trips
            .overdue_after()
            .unwrap_or_else(|| self.state.limiter.margin());
        let mut moved = false;
        for attempt in &mut self.in_flight {
            // A start still waiting for its save has not left: each later start counts it as
            // arriving now (its stamp ages while it waits, and a slow save let later starts
            // fill the window it would go out into).
            if !attempt.unsent && now.saturating_sub(attempt.sent) <= overdue_after {
                continue;
            }
            let latest = now.saturating_add(attempt.shifted);
            if let Some(to) = self.state.limiter.reached_server_by(attempt.logged, latest) {
                attempt.logged = to;
                moved = true;
            }
        }
        moved
    }

    /// Adopts the margin the measured round trips ask for, if it changed by enough to matter.
    /// A narrower margin moves the logged starts later: the starts in flight, which the limiter
    /// knows by their logged instant, move with them.
    fn follow_round_trips(&mut self) -> bool {
        let Some(margin) = self.round_trips.margin_update(self.state.limiter.margin()) else {
            return false;
        };
        let moved = self.state.limiter.set_margin(margin);
        for attempt in &mut self.in_flight {
            attempt.logged = attempt.logged.saturating_add(moved);
            attempt.shifted = attempt.shifted.saturating_add(moved);
        }
        true
    }
}

/// Keys in ascending order: what the engine's queues need (add, remove, take the first)
/// without a B-tree. `BTreeSet` cost the worker's wasm 6.5 KB more than this and [`IdSet`]
/// (2.6 KB gzipped).
///
/// The keys lie in blocks of at most [`QUEUE_BLOCK`] * 2, each a ring buffer, so that no
/// change moves more than a block and the list of blocks: a queue of a million keys adds or
/// removes anywhere in a few microseconds, as the B-tree did. Taking the first key moves
/// nothing.
struct SortedQueue<T> {
    /// Not empty, and each block's keys come before the next block's.
    blocks: Vec<VecDeque<T>>,
}

/// See [`SortedQueue`]: a block is split in two when it grows past twice this.
const QUEUE_BLOCK: usize = 512;

impl<T> Default for SortedQueue<T> {
    fn default() -> Self {
        SortedQueue { blocks: Vec::new() }
    }
}

impl<T: Ord> SortedQueue<T> {
    /// The block where `key` is or belongs: the first whose last key is not below it, else
    /// the last block. `None` when there are no blocks.
    fn block_of(&self, key: &T) -> Option<usize> {
        let i = self
            .blocks
            .partition_point(|b| b.back().is_some_and(|last| last < key));
        i.min(self.blocks.len().checked_sub(1)?).into()
    }

    fn insert(&mut self, key: T) {
        let Some(i) = self.block_of(&key) else {
            let mut block = VecDeque::new();
            block.push_back(key);
            self.blocks.push(block);
            return;
        };
        let block = &mut self.blocks[i];
        if let Err(at) = block.binary_search(&key) {
            block.insert(at, key);
            if block.len() > 2 * QUEUE_BLOCK {
                let upper = block.split_off(QUEUE_BLOCK);
                self.blocks.insert(i + 1, upper);
            }
        }
    }

    fn remove(&mut self, key: &T) {
        let Some(i) = self.block_of(key) else { return };
        let block = &mut self.blocks[i];
        if let Ok(at) = block.binary_search(key) {
            block.remove(at);
            if block.is_empty() {
                self.blocks.remove(i);
            }
        }
    }

    fn first(&self) -> Option<&T> {
        self.blocks.first()?.front()
    }

    fn pop_first(&mut self) -> Option<T> {
        let block = self.blocks.first_mut()?;
        let first = block.pop_front();
        if block.is_empty() {
            self.blocks.remove(0);
        }
        first
    }

    fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    fn clear(&mut self) {
        self.blocks.clear();
    }
}

/// A set of ids, taken in id order. Added as they come (an id may be added many times) and
/// sorted once, when taken: ids are random, and keeping them in order as they come would move
/// memory on every add (a 10,000-job `enqueueMany` adds 10,000).
#[derive(Default)]
struct IdSet(Vec<String>);

impl IdSet {
    fn insert(&mut self, id: String) {
        self.0.push(id);
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Empties the set, in id order, each id once.
    fn take(&mut self) -> Vec<String> {
        let mut ids = std::mem::take(&mut self.0);
        heapsort(&mut ids);
        // A loop rather than `dedup`, which is twice its size in the wasm.
        let mut once: Vec<String> = Vec::with_capacity(ids.len());
        for id in ids {
            if once.last() != Some(&id) {
                once.push(id);
            }
        }
        once
    }
}

/// Sorts in place. By hand: the standard sort for one more element type is 2-3 KB of wasm (see
/// [`crate::job::sorted_order`]), this is a tenth of that, and O(n log n) as well.
fn heapsort(v: &mut [String]) {
    let n = v.len();
    for root in (0..n / 2).rev() {
        sift_down(v, root, n);
    }
    for end in (1..n).rev() {
        v.swap(0, end);
        sift_down(v, 0, end);
    }
}

/// Restores the max-heap order of `v[..end]` below `root`.
fn sift_down(v: &mut [String], mut root: usize, end: usize) {
    loop {
        let mut child = 2 * root + 1;
        if child >= end {
            return;
        }
        if child + 1 < end && v[child] < v[child + 1] {
            child += 1;
        }
        if v[root] >= v[child] {
            return;
        }
        v.swap(root, child);
        root = child;
    }
}

/// Adds one to `key`'s count, keeping `counts` in key order.
fn count_in<K: Ord + Clone>(counts: &mut Vec<(K, u64)>, key: &K) {
    match counts.binary_search_by(|(k, _)| k.cmp(key)) {
        Ok(i) => counts[i].1 += 1,
        Err(i) => counts.insert(i, (key.clone(), 1)),
    }
}

pub struct Engine {
    config: EngineConfig,
    /// `config`'s allowed scopes, parsed once per configuration rather than per job.
    allowed: Vec<Scope>,
    rng: Rng,
    /// Where job ids and idempotency keys come from: `rng` unless the caller gave a source
    /// (see [`Engine::set_identifier_source`]).
    identifiers: Option<IdentifierSource>,
    jobs: FxHashMap<JobId, Job>,
    budgets: IdMap<Budget>,
    placed: FxHashMap<JobId, Placement>,
    delayed: SortedQueue<(Millis, u64, JobId)>,
    /// Unfinished jobs per ordering key, in enqueue order.
    chains: FxHashMap<String, VecDeque<JobId>>,
    /// Waiting idempotent jobs by a hash of what they send, to fold identical ones.
    /// Keyed by the hash's digits and with a `VecDeque`, the shape of [`Engine::chains`]: one
    /// hash map type less in the wasm.
    identical: FxHashMap<String, VecDeque<JobId>>,
    /// Done and cancelled jobs by finish time, to forget them after the retention time.
    /// (finish time, 0, id): shaped like the ready keys so that both share one queue type in
    /// the wasm.
    expiring: SortedQueue<(Millis, u64, JobId)>,
    next_seq: u64,
    offline_until: Option<Millis>,
    offline_streak: u32,
    changed_jobs: IdSet,
    /// Jobs that started since the last [`Engine::take_changes`] (see [`Changes::started`]).
    started_jobs: IdSet,
    removed_jobs: IdSet,
    changed_budgets: IdSet,
    waits: [VecDeque<DurationMs>; 3],
    finished_jobs: u64,
    finished_attempts: u64,
    /// The id of the next [`Engine::take_changes`].
    next_save: SaveId,
    /// Saves taken but not yet confirmed by [`Engine::on_saved`] that carry unsaved starts,
    /// oldest first, with how many each carries per budget.
    saves_with_starts: VecDeque<(SaveId, Vec<(String, u32)>)>,
}

impl Engine {
    /// An empty engine. `rng` supplies all randomness (ids, jitter): seed it from a real source
    /// in the browser and from a fixed number in tests.
    pub fn new(config: EngineConfig, rng: Rng) -> Result<Self, ConfigError> {
        config.validate()?;
        let allowed = config.allowed_scopes()?;
        let mut budgets = IdMap::new();
        for b in &config.budgets {
            budgets.insert(b.name.clone(), Self::fresh_budget(b, &config)?);
        }
        Ok(Self {
            config,
            allowed,
            rng,
            identifiers: None,
            jobs: FxHashMap::default(),
            budgets,
            placed: FxHashMap::default(),
            delayed: SortedQueue::default(),
            chains: FxHashMap::default(),
            identical: FxHashMap::default(),
            expiring: SortedQueue::default(),
            next_seq: 0,
            offline_until: None,
            offline_streak: 0,
            changed_jobs: IdSet::default(),
            started_jobs: IdSet::default(),
            removed_jobs: IdSet::default(),
            changed_budgets: IdSet::default(),
            waits: Default::default(),
            finished_jobs: 0,
            finished_attempts: 0,
            next_save: 0,
            saves_with_starts: VecDeque::new(),
        })
    }

    fn fresh_budget(config: &BudgetConfig, engine: &EngineConfig) -> Result<Budget, ConfigError> {
        Ok(Budget {
            config: config.clone(),
            state: BudgetState::new(config, &engine.retry)?,
            ready: Default::default(),
            in_flight: Vec::new(),
            latency_ms: None,
            aged_passed_over: 0,
            unsaved_starts: 0,
            untaken_starts: 0,
            mark: Mark::NotSaved,
            preflights: Preflights::default(),
            round_trips: RoundTrips::default(),
        })
    }

    /// Rebuilds an engine from what was saved. Jobs that were sending when the worker stopped
    /// have an unknown outcome: they go back to the queue and are sent again with the same
    /// idempotency key, and that interrupted attempt is not counted against them.
    ///
    /// A budget saved while its starts could go out before being saved
    /// ([`Transmit::save_first`] false) may have lost the record of its last starts: at most
    /// `concurrency` of them (the engine never lets more be out unsaved), which are counted at
    /// `now` so the limit holds across the restart. A start saved before it went out is
    /// counted at `now` as well: the instant it really went out was not saved.
    /// Its jobs need nothing: a job sent but saved as waiting is sent again with its key, as
    /// if it had been saved as sending.
    pub fn restore(
        config: EngineConfig,
        rng: Rng,
        jobs: Vec<Job>,
        budgets: Vec<BudgetState>,
        now: Millis,
    ) -> Result<Self, ConfigError> {
        let mut engine = Self::new(config, rng)?;
        for saved in budgets {
            if let Some(b) = engine.budgets.get_mut(&saved.name) {
                b.state = saved;
                b.state.reconfigure(&b.config, now)?;
            }
        }
        // The jobs first: a start they move to `now` must still be in the log, and counting
        // the unsaved starts at `now` drops what has aged out.
        engine.restore_more(jobs, now);
        for (name, b) in engine.budgets.iter_mut() {
            if b.state.sends_before_saving {
                b.state.count_unsaved_starts(b.config.concurrency, now);
                // Counted in memory only: until a save holds them, the next starts are saved
                // first (the mark is not saved), or a second stop would lose them with
                // whatever went out unsaved in between.
                engine.changed_budgets.insert(name.clone());
            }
        }
        Ok(engine)
    }

    /// Adds saved jobs that a restore left out, as [`Engine::restore`] would have taken them;
    /// a job the engine knows already is skipped (its version here is the newer one).
    ///
    /// For a worker that restores in two steps, so it can send before a large queue is read:
    /// first every waiting job up to some point in enqueue order (all earlier waiting jobs of
    /// any key are among them, so per-key order holds), then the rest. Until the rest is in,
    /// only the pump may use the engine: an enqueue, cancel or status would see part of the
    /// queue.
    pub fn restore_more(&mut self, jobs: Vec<Job>, now: Millis) {
        let order = crate::job::sorted_order(jobs.iter().map(|j| j.seq));
        // Plain loops: each mapped or filtered `collect` is several generic functions in the
        // wasm.
        let mut jobs: Vec<Option<Job>> = jobs.into_iter().map(Some).collect();
        for i in order {
            let Some(mut job) = jobs[i].take() else {
                continue;
            };
            if self.jobs.contains_key(&job.id) {
                continue;
            }
            self.next_seq = self.next_seq.max(job.seq + 1);
            if job.state == JobState::Sending {
                // Saved as sending, so its start is in the saved log, but at the instant it
                // was polled: a start saved first went out later, when its save landed, and
                // that instant was in memory only. It is counted as going out at the restore.
                if let (Some(started), Some(b)) =
                    (job.started_at, self.budgets.get_mut(&job.budget))
                {
                    b.state.limiter.sent_by(started, now);
                    self.changed_budgets.insert(job.budget.clone());
                }
                job.state = JobState::Queued;
                self.changed_jobs.insert(job.id.clone());
            }
            self.admit(job);
        }
        self.replace_all(now);
    }

    /// Puts a job into the indexes (not into ready/delayed: see `place`).
    fn admit(&mut self, job: Job) {
        let id = job.id.clone();
        if !job.state.is_terminal() {
            if let Some(key) = &job.key {
                self.chains
                    .entry(key.clone())
                    .or_default()
                    .push_back(id.clone());
            }
        }
        if job.state.is_waiting() && job.is_idempotent_method() {
            self.identical
                .entry(fingerprint(&job))
                .or_default()
                .push_back(id.clone());
        }
        if matches!(job.state, JobState::Done | JobState::Cancelled) {
            self.expiring
                .insert((job.finished_at.unwrap_or(job.enqueued_at), 0, id.clone()));
        }
        self.jobs.insert(id, job);
    }

    /// Replaces the configuration at run time. Refused when it would drop a budget that still
    /// has unfinished jobs (they would wait forever).
    pub fn configure(&mut self, config: EngineConfig, now: Millis) -> Result<(), ConfigError> {
        config.validate()?;
        let allowed = config.allowed_scopes()?;
        for name in self.budgets.keys() {
            if config.budgets.iter().any(|b| &b.name == name) {
                continue;
            }
            let pending = self
                .jobs
                .values()
                .filter(|j| &j.budget == name && !j.state.is_terminal())
                .count();
            if pending > 0 {
                return Err(ConfigError(format!(
                    "budget '{name}' still has {pending} unfinished jobs; cancel them before removing it"
                )));
            }
        }
        let mut budgets = IdMap::new();
        for b in &config.budgets {
            let budget = match self.budgets.remove(&b.name) {
                Some(mut old) => {
                    old.state.reconfigure(b, now)?;
                    old.config = b.clone();
                    old
                }
                None => Self::fresh_budget(b, &config)?,
            };
            self.changed_budgets.insert(b.name.clone());
            budgets.insert(b.name.clone(), budget);
        }
        self.budgets = budgets;
        self.config = config;
        self.allowed = allowed;
        self.replace_all(now);
        Ok(())
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    // ----- enqueue -------------------------------------------------------------------------

    /// Job ids and idempotency keys from now on come from `source` (the worker's is
    /// `crypto.getRandomValues`); a source that fails (returns false) falls back to the
    /// engine's own generator for that identifier.
    pub fn set_identifier_source(&mut self, source: IdentifierSource) {
        self.identifiers = Some(source);
    }

    fn new_identifier(&mut self) -> String {
        let mut bytes = [0u8; 16];
        let filled = self
            .identifiers
            .as_mut()
            .is_some_and(|source| source(&mut bytes));
        if !filled {
            self.rng.fill(&mut bytes);
        }
        uuid_v4_from(bytes)
    }

    /// Accepts one action. The result names the job that will carry it: a new one, or an
    /// earlier waiting one it was folded into (`coalesced`).
    pub fn enqueue(&mut self, spec: JobSpec, now: Millis) -> Result<Enqueued, ProtocolError> {
        let (budget, method) = self.validate(&spec)?;
        Ok(self.enqueue_valid(spec, budget, method, now))
    }

    /// Accepts many actions as one group, all or none: if any is invalid nothing is enqueued.
    /// Also returns a warning when the group needs more than a whole window of its budget.
    pub fn enqueue_many(
        &mut self,
        specs: Vec<JobSpec>,
        group_id: Option<String>,
        now: Millis,
    ) -> Result<(Vec<Enqueued>, Option<String>), ProtocolError> {
        let total = specs.len();
        let mut checked = Vec::with_capacity(total);
        for (i, spec) in specs.into_iter().enumerate() {
            match self.validate(&spec) {
                Ok((budget, method)) => checked.push((spec, budget, method)),
                Err(e) => {
                    return Err(ProtocolError::InvalidRequest {
                        message: format!("job {} of {total}: {e}; nothing was enqueued", i + 1),
                    })
                }
            }
        }
        let mut per_budget: Vec<(String, u64)> = Vec::new();
        let mut results = Vec::with_capacity(total);
        for (mut spec, budget, method) in checked {
            if group_id.is_some() {
                spec.group_id = group_id.clone();
            }
            count_in(&mut per_budget, &budget);
            results.push(self.enqueue_valid(spec, budget, method, now));
        }
        let warning = per_budget
            .iter()
            .filter_map(|(name, n)| {
                let b = self.budgets.get(name)?;
                capacity_warning(*n, b.state.limiter.windows())
            })
            .next();
        Ok((results, warning))
    }

    fn validate(&self, spec: &JobSpec) -> Result<(String, String), ProtocolError> {
        validate_url(&spec.url)?;
        let method = if spec.method.trim().is_empty() {
            "GET".to_string()
        } else {
            spec.method.trim().to_ascii_uppercase()
        };
        if !method.bytes().all(is_token_byte) {
            return Err(ProtocolError::InvalidRequest {
                message: format!("'{}' is not an HTTP method", spec.method),
            });
        }
        if matches!(method.as_str(), "CONNECT" | "TRACE" | "TRACK") {
            return Err(ProtocolError::InvalidRequest {
                message: format!("browsers do not allow {method} requests"),
            });
        }
        if matches!(method.as_str(), "GET" | "HEAD") && spec.body.is_some() {
            return Err(ProtocolError::InvalidRequest {
                message: format!("a {method} request cannot have a body"),
            });
        }
        if let Some(body) = &spec.body {
            if body.len() > self.config.max_body_bytes {
                return Err(ProtocolError::TooLarge {
                    what: crate::protocol::TOO_LARGE_BODY.into(),
                    bytes: body.len(),
                    max_bytes: self.config.max_body_bytes,
                });
            }
        }
        for (name, value) in &spec.headers {
            if name.is_empty() || !name.bytes().all(is_token_byte) {
                return Err(ProtocolError::InvalidRequest {
                    message: format!("'{name}' is not a valid header name"),
                });
            }
            if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(ProtocolError::InvalidRequest {
                    message: format!("the value of header '{name}' contains a line break"),
                });
            }
        }
        if let Some(options) = &spec.options {
            options.validate()?;
        }
        // Where the job may go is checked first, and for every job: naming a budget never
        // takes a job past what the worker script allows.
        let target = Target::parse(&spec.url).map_err(|e| ProtocolError::InvalidUrl {
            url: spec.url.chars().take(200).collect(),
            message: e.0,
        })?;
        if !self.allowed.is_empty() && !self.allowed.iter().any(|s| s.covers(&target)) {
            return Err(ProtocolError::UrlNotAllowed {
                url: spec.url.chars().take(200).collect(),
                allowed: self.config.allowed_list(),
            });
        }
        let budget = if spec.budget.is_empty() {
            self.config
                .budget_for_url(&target)
                .map(|b| b.name.clone())
                .ok_or_else(|| ProtocolError::NoBudgetForUrl {
                    url: spec.url.clone(),
                })?
        } else if self.budgets.contains_key(&spec.budget) {
            spec.budget.clone()
        } else {
            return Err(ProtocolError::UnknownBudget {
                budget: spec.budget.clone(),
                known: self.budgets.keys().cloned().collect(),
            });
        };
        Ok((budget, method))
    }

    fn enqueue_valid(
        &mut self,
        spec: JobSpec,
        budget: String,
        method: String,
        now: Millis,
    ) -> Enqueued {
        let seq = self.next_seq;
        self.next_seq += 1;
        let job = Job {
            // A page fixes its jobs' ids (see `JobSpec::id`); the caller made sure it is new.
            id: spec.id.unwrap_or_else(|| self.new_identifier()),
            budget,
            lane: spec.lane,
            key: spec.key.filter(|k| !k.is_empty()),
            kind: spec.kind,
            method,
            url: spec.url,
            headers: spec.headers,
            body: spec.body,
            options: spec.options.filter(|o| !o.is_default()),
            idempotency_key: self.new_identifier(),
            state: JobState::Queued,
            attempts: 0,
            not_before: now,
            enqueued_at: now,
            coalesced: 0,
            group_id: spec.group_id,
            last_error: None,
            outcome: None,
            finished_at: None,
            started_at: None,
            seq,
            folded: Vec::new(),
        };
        if let Some(result) = self.try_cancel_out(&job, now) {
            return result;
        }
        if let Some(id) = self.try_coalesce(&job, now) {
            return Enqueued {
                id,
                coalesced: true,
                state: JobState::Queued,
            };
        }
        let id = job.id.clone();
        let key = job.key.clone();
        self.admit(job);
        self.changed_jobs.insert(id.clone());
        match key.and_then(|k| self.chains.get(&k).and_then(|c| c.front().cloned())) {
            // The chain head may inherit this job's lane.
            Some(head) => self.place(&head, now),
            None => self.place(&id, now),
        }
        Enqueued {
            id,
            coalesced: false,
            state: JobState::Queued,
        }
    }

    /// A delete whose record's create has not been sent: neither needs to be (nor anything
    /// queued for the record in between).
    fn try_cancel_out(&mut self, delete: &Job, now: Millis) -> Option<Enqueued> {
        if delete.kind != JobKind::Delete {
            return None;
        }
        let chain = self.chains.get(delete.key.as_ref()?)?;
        let create_pos = chain.iter().rposition(|id| {
            self.jobs
                .get(id)
                .is_some_and(|j| j.kind == JobKind::Create && j.budget == delete.budget)
        })?;
        let doomed: Vec<JobId> = chain.iter().skip(create_pos).cloned().collect();
        let untouched = doomed.iter().all(|id| {
            self.jobs
                .get(id)
                .is_some_and(|j| j.state == JobState::Queued && j.started_at.is_none())
        });
        if !untouched {
            return None;
        }
        let reason = JobError {
            status: None,
            message: "a create and a later delete of the same record cancelled out before either was sent".into(),
        };
        for id in &doomed {
            self.finish(id, JobState::Cancelled, Some(reason.clone()), now);
        }
        let mut delete = delete.clone();
        delete.state = JobState::Cancelled;
        delete.finished_at = Some(now);
        delete.last_error = Some(reason);
        let id = delete.id.clone();
        self.admit(delete);
        self.changed_jobs.insert(id.clone());
        Some(Enqueued {
            id,
            coalesced: false,
            state: JobState::Cancelled,
        })
    }

    /// Folds a patch into the newest unsent patch of its key, or an idempotent request into an
    /// identical waiting one. Returns the id of the job it was folded into.
    fn try_coalesce(&mut self, job: &Job, now: Millis) -> Option<JobId> {
        let newest_of_key = job
            .key
            .as_ref()
            .and_then(|k| self.chains.get(k))
            .and_then(|c| c.back().cloned());
        if job.kind == JobKind::Patch {
            if let Some(target) = newest_of_key.clone() {
                let mergeable = self.jobs.get(&target).is_some_and(|t| {
                    t.kind == JobKind::Patch
                        && t.state == JobState::Queued
                        && t.started_at.is_none()
                        && t.attempts == 0
                        && t.budget == job.budget
                        && t.method == job.method
                        && t.url == job.url
                        && t.options == job.options
                });
                if mergeable {
                    self.merge_patch(&target, job, now);
                    return Some(target);
                }
            }
        }
        if job.is_idempotent_method() && job.kind != JobKind::Create {
            let fp = fingerprint(job);
            let candidates = self.identical.get(&fp)?;
            let target = candidates.iter().find(|id| {
                self.jobs.get(*id).is_some_and(|t| {
                    t.state.is_waiting()
                        && t.budget == job.budget
                        && t.method == job.method
                        && t.url == job.url
                        && t.body == job.body
                        && t.headers == job.headers
                        && t.options == job.options
                        && t.key == job.key
                        // Never reorder a key: only the newest job of the key can absorb it.
                        && (t.key.is_none() || newest_of_key.as_ref() == Some(&t.id))
                })
            })?;
            let target = target.clone();
            if let Some(t) = self.jobs.get_mut(&target) {
                t.lane = t.lane.min(job.lane);
                t.coalesced += 1;
                t.folded.push(job.id.clone());
            }
            self.changed_jobs.insert(target.clone());
            self.replace_head_of(&target, now);
            return Some(target);
        }
        None
    }

    fn merge_patch(&mut self, target: &JobId, later: &Job, now: Millis) {
        if let Some(t) = self.jobs.get_mut(target) {
            t.body = merge_bodies(t.body.take(), later.body.clone());
            for (name, value) in &later.headers {
                match t
                    .headers
                    .iter_mut()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                {
                    Some(existing) => existing.1 = value.clone(),
                    None => t.headers.push((name.clone(), value.clone())),
                }
            }
            t.lane = t.lane.min(later.lane);
            t.coalesced += 1 + later.coalesced;
            t.folded.push(later.id.clone());
        }
        self.changed_jobs.insert(target.clone());
        self.replace_head_of(target, now);
    }

    // ----- placement -----------------------------------------------------------------------

    fn unplace(&mut self, id: &JobId) {
        match self.placed.remove(id) {
            Some(Placement::Ready { budget, lane, key }) => {
                if let Some(b) = self.budgets.get_mut(&budget) {
                    b.ready[lane].remove(&key);
                }
            }
            Some(Placement::Delayed(key)) => {
                self.delayed.remove(&key);
            }
            None => {}
        }
    }

    /// Puts a job where the scheduler will find it: ready (per budget and effective lane),
    /// delayed (until its backoff ends), or nowhere (not waiting, or not the head of its key).
    fn place(&mut self, id: &JobId, now: Millis) {
        self.unplace(id);
        let Some(job) = self.jobs.get(id) else { return };
        if !job.state.is_waiting() {
            return;
        }
        if let Some(key) = &job.key {
            if self.chains.get(key).and_then(|c| c.front()) != Some(id) {
                return;
            }
        }
        if job.not_before > now {
            let key = (job.not_before, job.seq, id.clone());
            self.delayed.insert(key.clone());
            self.placed.insert(id.clone(), Placement::Delayed(key));
            return;
        }
        let lane = self.effective_lane(job).index();
        let key = (job.enqueued_at, job.seq, id.clone());
        let budget = job.budget.clone();
        // A job whose budget is not configured waits (and is reported) until it is.
        if let Some(b) = self.budgets.get_mut(&budget) {
            b.ready[lane].insert(key.clone());
            self.placed
                .insert(id.clone(), Placement::Ready { budget, lane, key });
        }
    }

    /// The most urgent lane among the waiting jobs of a key: the head runs at that priority.
    fn effective_lane(&self, job: &Job) -> Lane {
        let Some(chain) = job.key.as_ref().and_then(|k| self.chains.get(k)) else {
            return job.lane;
        };
        chain
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .filter(|j| j.state.is_waiting())
            .map(|j| j.lane)
            .min()
            .unwrap_or(job.lane)
    }

    fn replace_head_of(&mut self, id: &JobId, now: Millis) {
        let head = self
            .jobs
            .get(id)
            .and_then(|j| j.key.as_ref())
            .and_then(|k| self.chains.get(k))
            .and_then(|c| c.front().cloned());
        match head {
            Some(h) => self.place(&h, now),
            None => self.place(id, now),
        }
    }

    fn replace_all(&mut self, now: Millis) {
        self.placed.clear();
        self.delayed.clear();
        for b in self.budgets.values_mut() {
            b.ready = Default::default();
        }
        let mut ids: Vec<JobId> = Vec::new();
        for job in self.jobs.values() {
            if job.state.is_waiting() {
                ids.push(job.id.clone());
            }
        }
        for id in ids {
            self.place(&id, now);
        }
    }

    fn promote_due(&mut self, now: Millis) {
        while self.delayed.first().is_some_and(|first| first.0 <= now) {
            let Some(first) = self.delayed.pop_first() else {
                break;
            };
            self.placed.remove(&first.2);
            self.place(&first.2, now);
        }
    }

    fn forget_expired(&mut self, now: Millis) {
        let retention = self.config.retention_ms;
        while self
            .expiring
            .first()
            .is_some_and(|first| first.0.saturating_add(retention) <= now)
        {
            let Some(first) = self.expiring.pop_first() else {
                break;
            };
            if self
                .jobs
                .get(&first.2)
                .is_some_and(|j| matches!(j.state, JobState::Done | JobState::Cancelled))
            {
                // It may stay among the changed jobs: `take_changes` skips ids it no longer
                // knows (and one added again since is changed indeed).
                self.jobs.remove(&first.2);
                self.removed_jobs.insert(first.2);
            }
        }
    }

    fn aged_rank(&self, lane: Lane, since: Millis, now: Millis) -> i64 {
        match self.config.aging.step(lane) {
            None => lane.rank(),
            Some(step) => lane.rank() - (now.saturating_sub(since) / step) as i64,
        }
    }

    // ----- sending -------------------------------------------------------------------------

    /// The next request to start now, if any may. Call repeatedly until `None`, then arm a timer
    /// for [`Engine::poll_timeout`]. The start is counted against the budget at once. Persist
    /// [`Engine::take_changes`] before the fetch when [`Transmit::save_first`] says so (then
    /// report [`Engine::on_sent`]), else start the fetch at once and persist with the next
    /// save. Report every save that lands with [`Engine::on_saved`].
    pub fn poll_transmit(&mut self, now: Millis) -> Option<Transmit> {
        self.poll_start(now, false)
    }

    /// As [`Engine::poll_transmit`], for a start that goes out only once a save taken after it
    /// landed, whatever the engine would allow (a page request's save carries it): it is
    /// counted as saved first ([`Transmit::save_first`]), so a restore knows that it went out
    /// later than its saved stamp.
    pub fn poll_transmit_saved_first(&mut self, now: Millis) -> Option<Transmit> {
        self.poll_start(now, true)
    }

    fn poll_start(&mut self, now: Millis, saved_first: bool) -> Option<Transmit> {
        self.forget_expired(now);
        if self.offline_until.is_some_and(|t| t > now) {
            return None;
        }
        self.offline_until = None;
        self.promote_due(now);
        for b in self.budgets.values_mut() {
            if !b.in_flight.is_empty() && b.count_overdue_as_arriving(now) {
                self.changed_budgets.insert(b.config.name.clone());
            }
        }
        // Per budget: the head of its top lane, and the head that ranks first once aged.
        let mut best: Option<(Rank, String, JobId, Turn)> = None;
        for (name, b) in self.budgets.iter() {
            if !b.has_ready() {
                continue;
            }
            match b
                .state
                .next_start_at(now, b.in_flight.len(), b.config.concurrency)
            {
                Some(t) if t <= now => {}
                _ => continue,
            }
            let heads = Lane::ALL.into_iter().filter_map(|lane| {
                let (since, seq, id) = b.ready[lane.index()].first()?;
                Some(((self.aged_rank(lane, *since, now), *since, *seq), lane, id))
            });
            let Some(top) = heads.clone().next() else {
                continue;
            };
            let Some(aged) = heads.min_by_key(|(rank, _, _)| *rank) else {
                continue;
            };
            let (pick, turn) = if aged.1 == top.1 {
                (aged, Turn::Uncontested)
            } else if b.aged_passed_over + 1 < AGED_TURN_EVERY {
                (top, Turn::Fresh)
            } else {
                (aged, Turn::Aged)
            };
            let (rank, _, id) = pick;
            if best.as_ref().is_none_or(|(r, _, _, _)| rank < *r) {
                best = Some((rank, name.clone(), id.clone(), turn));
            }
        }
        let (_, budget_name, id, turn) = best?;
        if let Some(b) = self.budgets.get_mut(&budget_name) {
            b.aged_passed_over = match turn {
                Turn::Fresh => b.aged_passed_over + 1,
                Turn::Uncontested | Turn::Aged => 0,
            };
        }
        self.unplace(&id);
        let retry_config = self.config.retry.clone();
        let timeout_ms = retry_config.timeout_ms;
        let job = self.jobs.get_mut(&id)?;
        let lane = job.lane;
        if job.transition(JobState::Sending).is_err() {
            return None;
        }
        if job.started_at.is_none() {
            let wait = now.saturating_sub(job.enqueued_at);
            let samples = &mut self.waits[lane.index()];
            if samples.len() == WAIT_SAMPLES {
                samples.pop_front();
            }
            samples.push_back(wait);
        }
        job.started_at = Some(now);
        let is_retry = job.attempts > 0;
        let transmit = Transmit {
            job_id: id.clone(),
            method: job.method.clone(),
            url: job.url.clone(),
            headers: job.request_headers(),
            body: job.body.clone(),
            options: job.options.clone(),
            timeout_ms,
            save_first: false,
        };
        let b = self.budgets.get_mut(&budget_name)?;
        let save_first =
            saved_first || b.mark != Mark::Saved || b.unsaved_starts >= b.config.concurrency;
        b.state.sends_before_saving = true;
        if !save_first {
            b.unsaved_starts += 1;
            b.untaken_starts += 1;
        }
        b.state.record_start(now, is_retry, &retry_config);
        if b.config.count_preflights
            && needs_preflight(&transmit.method, &transmit.headers)
            && b.preflights
                .on_start(&transmit.url, now, b.config.preflight_max_age_ms)
        {
            b.state.count_preflight(now);
        }
        b.in_flight.push(InFlight {
            job: id.clone(),
            logged: now,
            sent: now,
            shifted: 0,
            unsent: save_first,
        });
        if save_first {
            // Written as sending (a plain start is not: see `Changes::started`), so that a
            // restore knows its start went out later than the saved log says (see
            // `Engine::restore_more`).
            self.changed_jobs.insert(id.clone());
        }
        self.started_jobs.insert(id);
        self.changed_budgets.insert(budget_name);
        Some(Transmit {
            save_first,
            ..transmit
        })
    }

    /// The next instant at which a request could start (or a backoff ends), if anything waits.
    /// `Some(t)` with `t <= now` means "call `poll_transmit` now". `None`: nothing can happen
    /// until an input arrives (a response, an enqueue, a retry).
    pub fn poll_timeout(&self, now: Millis) -> Option<Millis> {
        let waiting = !self.placed.is_empty();
        if let Some(t) = self.offline_until.filter(|&t| t > now) {
            return waiting.then_some(t);
        }
        let mut next = self.delayed.first().map(|d| d.0);
        for b in self.budgets.values() {
            if !b.has_ready() {
                continue;
            }
            if let Some(t) = b
                .state
                .next_start_at(now, b.in_flight.len(), b.config.concurrency)
            {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        // Forgetting done jobs needs no timer of its own: it rides along with every poll.
        next
    }

    /// The request of a job that was saved before it went out ([`Transmit::save_first`]) has
    /// just been handed to the network: its start counts from now, not from when it was
    /// polled, so a slow save cannot push its arrival past the windows' margin.
    pub fn on_sent(&mut self, id: &str, now: Millis) {
        let Some(budget_name) = self.jobs.get(id).map(|j| j.budget.clone()) else {
            return;
        };
        let Some(b) = self.budgets.get_mut(&budget_name) else {
            return;
        };
        let Some(entry) = b.in_flight.iter_mut().find(|a| a.job == id) else {
            return;
        };
        entry.unsent = false;
        if now > entry.sent {
            let logged = entry.logged.max(now.saturating_add(entry.shifted));
            b.state.limiter.restamp(entry.logged, logged);
            entry.logged = logged;
            entry.sent = now;
            self.changed_budgets.insert(budget_name);
        }
    }

    /// The response to a job's request arrived.
    pub fn on_response(&mut self, id: &str, response: Response, now: Millis) {
        let Some((budget_name, trip)) = self.take_in_flight(id, now, true) else {
            return;
        };
        let started = trip.started;
        let id: JobId = id.to_string();
        let signal = read_signal(response.status, &response.headers, now);
        if let Some(b) = self.budgets.get_mut(&budget_name) {
            if let Some(quota) = &signal.quota {
                // Every start after this request's, in flight or already answered, came after
                // the count the server reported.
                let later = u64::from(
                    b.state
                        .limiter
                        .starts_within(now, now.saturating_sub(started)),
                );
                b.state
                    .apply_quota(quota, trip, later, &b.config.windows, now);
            }
        }
        self.changed_budgets.insert(budget_name.clone());
        match classify(response.status, signal.rate_limited) {
            Verdict::Success => {
                if let Some(b) = self.budgets.get_mut(&budget_name) {
                    b.state.consecutive_rate_limits = 0;
                }
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.attempts += 1;
                    job.outcome = Some(JobOutcome {
                        status: response.status,
                        headers: response.headers,
                        body: response.body,
                    });
                }
                self.finish(&id, JobState::Done, None, now);
            }
            Verdict::RateLimited => {
                let retry = self.config.retry.clone();
                if let Some(b) = self.budgets.get_mut(&budget_name) {
                    b.state.counters.rate_limited += 1;
                    let own_timing =
                        b.state
                            .observe_rate_limited(started, signal.retry_after_ms, now);
                    if own_timing {
                        b.round_trips.widen();
                        b.follow_round_trips();
                    }
                    // The answers to requests already in flight when the first 429 of a pause
                    // came are the same refusal, not new ones: they neither double the pause
                    // (four of them would make a second's pause eight) nor count as a streak.
                    let in_pause = b.state.paused_until.is_some_and(|p| p > now);
                    let streak = if in_pause {
                        b.state.consecutive_rate_limits.saturating_sub(1)
                    } else {
                        b.state.consecutive_rate_limits
                    };
                    let wait = signal
                        .retry_after_ms
                        .unwrap_or_else(|| default_pause(streak, &retry));
                    if !in_pause {
                        b.state.consecutive_rate_limits += 1;
                    }
                    let reason = format!(
                        "the server asked to wait {} (HTTP {})",
                        human_duration(wait),
                        response.status
                    );
                    b.state.pause(now, wait, reason, &mut self.rng);
                }
                if let Some(job) = self.jobs.get_mut(&id) {
                    // Back to its place at the front of its lane; a 429 is not an attempt.
                    let _ = job.transition(JobState::Queued);
                }
                self.changed_jobs.insert(id.clone());
                self.place(&id, now);
            }
            Verdict::Retryable => {
                let error = JobError {
                    status: Some(response.status),
                    message: server_message(response.status, &response.body),
                };
                self.fail_or_retry(&id, &budget_name, error, now);
            }
            Verdict::Fatal => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.attempts += 1;
                }
                let error = JobError {
                    status: Some(response.status),
                    message: server_message(response.status, &response.body),
                };
                self.finish(&id, JobState::Failed, Some(error), now);
            }
        }
    }

    /// The job's request got no response.
    pub fn on_transport_error(&mut self, id: &str, error: TransportError, now: Millis) {
        let Some((budget_name, _)) = self.take_in_flight(id, now, false) else {
            return;
        };
        let id: JobId = id.to_string();
        match error {
            TransportError::Offline => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    let _ = job.transition(JobState::Queued);
                }
                let probe = (2_000u64 << self.offline_streak.min(5)).min(OFFLINE_PROBE_MAX_MS);
                self.offline_streak += 1;
                self.offline_until = Some(now + probe);
                self.changed_jobs.insert(id.clone());
                self.place(&id, now);
            }
            TransportError::Timeout => {
                let error = JobError {
                    status: None,
                    message: format!(
                        "no response within {}",
                        human_duration(self.config.retry.timeout_ms)
                    ),
                };
                self.fail_or_retry(&id, &budget_name, error, now);
            }
            TransportError::Network(message) => {
                let error = JobError {
                    status: None,
                    message: format!("network error: {message}"),
                };
                self.fail_or_retry(&id, &budget_name, error, now);
            }
        }
    }

    /// The network is back (the browser said so): stop waiting for the next probe.
    pub fn set_online(&mut self) {
        self.offline_until = None;
        self.offline_streak = 0;
    }

    pub fn is_offline(&self, now: Millis) -> bool {
        self.offline_until.is_some_and(|t| t > now)
    }

    /// Ends a request's time in flight: `answered` when a response came (its trip is measured),
    /// not when it failed without one (it may have reached the server at any time until now).
    fn take_in_flight(&mut self, id: &str, now: Millis, answered: bool) -> Option<(String, Trip)> {
        let job = self.jobs.get(id)?;
        if job.state != JobState::Sending {
            return None;
        }
        let budget_name = job.budget.clone();
        let b = self.budgets.get_mut(&budget_name)?;
        let at = b.in_flight.iter().position(|a| a.job == id)?;
        let attempt = b.in_flight.swap_remove(at);
        let sent = attempt.sent;
        // A request that took longer than the fastest may have spent the extra time on its way
        // to the server (a busy network process, a connection to open): it is counted where it
        // may have arrived, its answer time less the fastest trip (see `round_trips` for why
        // that is safe). With no trip measured yet (the first answer since this instance
        // started, whose trip often opened the connection), the whole trip may have been on
        // the way there: in the browser, such a first request arrived 25 ms after its start
        // while the next ones took 3, and with nothing moved the first second held 11 arrivals
        // on a limit of 10.
        let (mut logged, mut shifted) = (attempt.logged, attempt.shifted);
        let latest = if answered {
            b.round_trips.record(now.saturating_sub(sent));
            let before = b.state.limiter.margin();
            if b.follow_round_trips() {
                // This attempt is out of the list the narrowing moved: it moves by as much.
                let moved = before.saturating_sub(b.state.limiter.margin());
                logged = logged.saturating_add(moved);
                shifted = shifted.saturating_add(moved);
                self.changed_budgets.insert(budget_name.clone());
            }
            b.round_trips.arrived_by(sent, now)
        } else {
            now
        };
        // In the log's frame.
        let latest = latest.saturating_add(shifted);
        if b.state.limiter.reached_server_by(logged, latest).is_some() {
            self.changed_budgets.insert(budget_name.clone());
        }
        let started = logged;
        let arrived_by = latest;
        let sample = now.saturating_sub(sent) as f64;
        b.latency_ms = Some(match b.latency_ms {
            Some(avg) => avg * 0.8 + sample * 0.2,
            None => sample,
        });
        Some((
            budget_name,
            Trip {
                started,
                arrived_by,
            },
        ))
    }

    fn fail_or_retry(&mut self, id: &JobId, budget_name: &str, error: JobError, now: Millis) {
        let max_attempts = self.config.retry.max_attempts;
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        job.attempts += 1;
        let attempts = job.attempts;
        if attempts >= max_attempts {
            let error = JobError {
                message: format!("{} (gave up after {attempts} attempts)", error.message),
                ..error
            };
            self.finish(id, JobState::Failed, Some(error), now);
            return;
        }
        let has_token = self
            .budgets
            .get_mut(budget_name)
            .is_some_and(|b| b.state.take_retry_token());
        if !has_token {
            if let Some(b) = self.budgets.get_mut(budget_name) {
                b.state.trouble = Some(format!(
                    "the service behind '{budget_name}' is having trouble (last error: {}); sending is stopped until you retry",
                    error.message
                ));
            }
            self.changed_budgets.insert(budget_name.to_string());
            let error = JobError {
                message: format!(
                    "{} (retries stopped: the service is having trouble)",
                    error.message
                ),
                ..error
            };
            self.finish(id, JobState::Failed, Some(error), now);
            return;
        }
        let delay = backoff(attempts, &self.config.retry, &mut self.rng);
        if let Some(job) = self.jobs.get_mut(id) {
            let _ = job.transition(JobState::RetryWait);
            job.not_before = now + delay;
            job.last_error = Some(error);
        }
        self.changed_jobs.insert(id.clone());
        self.place(id, now);
    }

    /// Moves a job to a terminal state and lets the next job of its key go.
    fn finish(&mut self, id: &JobId, state: JobState, error: Option<JobError>, now: Millis) {
        self.unplace(id);
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        if job.transition(state).is_err() {
            return;
        }
        job.finished_at = Some(now);
        if error.is_some() {
            job.last_error = error;
        }
        // What it sent (an `Authorization` header, the body) is never sent again once it is
        // done or cancelled, so it does not stay in storage for the retention time; a failed
        // job keeps it for a retry unless the configuration says otherwise.
        match state {
            JobState::Done | JobState::Cancelled => {
                job.headers = Vec::new();
                job.body = None;
            }
            JobState::Failed if self.config.drop_failed_headers => job.headers = Vec::new(),
            _ => {}
        }
        if matches!(state, JobState::Done | JobState::Failed) {
            self.finished_jobs += 1;
            self.finished_attempts += job.attempts as u64;
        }
        if matches!(state, JobState::Done | JobState::Cancelled) {
            self.expiring.insert((now, 0, id.clone()));
        }
        let key = job.key.clone();
        self.changed_jobs.insert(id.clone());
        self.leave_chain(id, key, now);
    }

    fn leave_chain(&mut self, id: &JobId, key: Option<String>, now: Millis) {
        let Some(key) = key else { return };
        let Some(chain) = self.chains.get_mut(&key) else {
            return;
        };
        if let Some(pos) = chain.iter().position(|x| x == id) {
            // Swapped to the front and popped: the same order for the rest as `remove`, whose
            // ring-buffer shifting is about a kilobyte of wasm per element type.
            for i in (1..=pos).rev() {
                chain.swap(i, i - 1);
            }
            chain.pop_front();
        }
        match chain.front().cloned() {
            Some(head) => self.place(&head, now),
            None => {
                self.chains.remove(&key);
            }
        }
    }

    // ----- user actions --------------------------------------------------------------------

    /// Cancels a waiting job, or every waiting job of a group. Jobs already sending cannot be
    /// called back; they are left out of the returned list.
    pub fn cancel(&mut self, target: &str, now: Millis) -> Result<Vec<JobId>, ProtocolError> {
        let ids: Vec<JobId> = if self.jobs.contains_key(target) {
            vec![target.to_string()]
        } else {
            let mut jobs: Vec<&Job> = Vec::new();
            for job in self.jobs.values() {
                if job.group_id.as_deref() == Some(target) {
                    jobs.push(job);
                }
            }
            if jobs.is_empty() {
                return Err(ProtocolError::NotFound { id: target.into() });
            }
            crate::job::sort_by_seq(&mut jobs);
            let mut ids = Vec::with_capacity(jobs.len());
            for job in jobs {
                ids.push(job.id.clone());
            }
            ids
        };
        if ids.len() == 1 && ids[0] == target {
            let state = self.jobs.get(target).map(|j| j.state);
            if let Some(state) = state.filter(|s| !s.is_waiting()) {
                return Err(ProtocolError::IllegalTransition {
                    message: format!("job {target} is {state} and can no longer be cancelled"),
                });
            }
        }
        let mut cancelled = Vec::new();
        for id in ids.into_iter().rev() {
            if self.jobs.get(&id).is_some_and(|j| j.state.is_waiting()) {
                self.finish(&id, JobState::Cancelled, None, now);
                cancelled.push(id);
            }
        }
        cancelled.reverse();
        Ok(cancelled)
    }

    /// Sends a failed job again from scratch (attempts reset), and lifts a budget's hold.
    pub fn retry(&mut self, id: &str, now: Millis) -> Result<(), ProtocolError> {
        let retry = self.config.retry.clone();
        let job = self
            .jobs
            .get_mut(id)
            .ok_or_else(|| ProtocolError::NotFound { id: id.into() })?;
        job.transition(JobState::Queued)
            .map_err(|e| ProtocolError::IllegalTransition {
                message: format!("{e}: only failed jobs can be retried"),
            })?;
        job.attempts = 0;
        job.not_before = now;
        job.finished_at = None;
        job.last_error = None;
        let (key, budget) = (job.key.clone(), job.budget.clone());
        let id: JobId = id.to_string();
        if let Some(key) = key {
            self.chains.entry(key).or_default().push_back(id.clone());
        }
        if let Some(b) = self.budgets.get_mut(&budget) {
            b.state.clear_trouble(&retry);
        }
        self.changed_budgets.insert(budget);
        self.changed_jobs.insert(id.clone());
        self.replace_head_of(&id, now);
        Ok(())
    }

    /// Forgets a finished job (a failed one the user does not want to retry).
    pub fn dismiss(&mut self, id: &str) -> Result<(), ProtocolError> {
        let job = self
            .jobs
            .get(id)
            .ok_or_else(|| ProtocolError::NotFound { id: id.into() })?;
        if !job.state.is_terminal() {
            return Err(ProtocolError::IllegalTransition {
                message: format!(
                    "job {id} is {} and cannot be dismissed; cancel it first",
                    job.state
                ),
            });
        }
        // It may stay among the changed jobs (see `forget_expired`).
        self.jobs.remove(id);
        self.removed_jobs.insert(id.to_string());
        Ok(())
    }

    // ----- observation ---------------------------------------------------------------------

    /// Whether any request is out waiting for its answer.
    pub fn is_sending(&self) -> bool {
        self.budgets.values().any(|b| !b.in_flight.is_empty())
    }

    /// Whether [`Engine::take_changes`] has anything to take (besides what it decides itself).
    pub fn has_changes(&self) -> bool {
        !(self.changed_jobs.is_empty()
            && self.started_jobs.is_empty()
            && self.removed_jobs.is_empty()
            && self.changed_budgets.is_empty())
    }

    /// Everything that changed since the last call, to save (then broadcast).
    pub fn take_changes(&mut self) -> Changes {
        // Both in id order: a job that also changed otherwise is saved, not just told.
        // Plain loops here: each filtered `collect` is several generic functions in the wasm.
        let changed = self.changed_jobs.take();
        let mut started = Vec::new();
        for id in self.started_jobs.take() {
            if changed.binary_search(&id).is_err() {
                if let Some(job) = self.jobs.get(&id) {
                    started.push(job.clone());
                }
            }
        }
        let mut jobs = Vec::with_capacity(changed.len());
        for id in &changed {
            if let Some(job) = self.jobs.get(id) {
                jobs.push(job.clone());
            }
        }
        let removed = self.removed_jobs.take();
        let save = self.next_save;
        self.next_save += 1;
        let mut carried = Vec::new();
        for (name, b) in self.budgets.iter_mut() {
            // A budget with nothing in flight and nothing ready has no start that could go out
            // unsaved: its next start is saved first again, and a restore owes nothing. (Starts
            // carried by earlier saves are saved once this one is: saves land in order.)
            if b.state.sends_before_saving && b.in_flight.is_empty() && !b.has_ready() {
                b.state.sends_before_saving = false;
                b.mark = Mark::NotSaved;
                self.changed_budgets.insert(name.clone());
            }
            if b.state.sends_before_saving && b.mark == Mark::NotSaved {
                b.mark = Mark::Saving(save);
                self.changed_budgets.insert(name.clone());
            }
            if b.untaken_starts > 0 {
                carried.push((name.clone(), std::mem::take(&mut b.untaken_starts)));
            }
        }
        if !carried.is_empty() {
            self.saves_with_starts.push_back((save, carried));
        }
        let mut budgets = Vec::new();
        for name in self.changed_budgets.take() {
            if let Some(b) = self.budgets.get(&name) {
                budgets.push(b.state.clone());
            }
        }
        Changes {
            jobs,
            started,
            removed,
            budgets,
            save,
        }
    }

    /// The save `save` (and so every earlier one: saves land in the order they were taken, or
    /// the worker stops) is durable: the unsaved starts it carried are unsaved no longer, and
    /// that many more may go out before being saved.
    pub fn on_saved(&mut self, save: SaveId) {
        for b in self.budgets.values_mut() {
            if matches!(b.mark, Mark::Saving(s) if s <= save) {
                b.mark = Mark::Saved;
            }
        }
        while let Some((id, _)) = self.saves_with_starts.front() {
            if *id > save {
                break;
            }
            let Some((_, carried)) = self.saves_with_starts.pop_front() else {
                break;
            };
            for (name, n) in carried {
                if let Some(b) = self.budgets.get_mut(&name) {
                    b.unsaved_starts = b.unsaved_starts.saturating_sub(n);
                }
            }
        }
    }

    /// This instance starts nothing more: a successor takes the queue over from storage. A
    /// budget with nothing in flight and every start taken by a save drops its mark that
    /// starts may be out unsaved, so that the successor's restore does not count
    /// `concurrency` starts that never happened. Those phantom starts held the successor's
    /// window, and its pacing then made up for them at twice the rate, second after second.
    /// Returns whether a mark changed (a save must take it; the caller saves next).
    pub fn hand_over(&mut self) -> bool {
        let mut changed = false;
        for (name, b) in self.budgets.iter_mut() {
            if b.state.sends_before_saving && b.in_flight.is_empty() && b.untaken_starts == 0 {
                b.state.sends_before_saving = false;
                b.mark = Mark::NotSaved;
                self.changed_budgets.insert(name.clone());
                changed = true;
            }
        }
        changed
    }

    pub fn job(&self, id: &str) -> Option<&Job> {
        self.jobs.get(id)
    }

    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values()
    }

    pub fn budget_state(&self, name: &str) -> Option<&BudgetState> {
        self.budgets.get(name).map(|b| &b.state)
    }

    pub fn budget_states(&self) -> impl Iterator<Item = &BudgetState> {
        self.budgets.values().map(|b| &b.state)
    }

    /// A status snapshot for every tab.
    pub fn snapshot(&self, now: Millis) -> Status {
        let mut counts = StateCounts::default();
        let mut pending_per_budget: Vec<(&str, u64)> = Vec::new();
        // Groups in id order, kept sorted as they are found and found by binary search: a map
        // keyed by id would be a B-tree in the wasm, and collecting a group id per job to sort
        // afterwards is too much for a snapshot of a million jobs (there are few groups).
        let mut group_ids: Vec<String> = Vec::new();
        let mut last: Option<&str> = None;
        for g in self.jobs.values().filter_map(|j| j.group_id.as_deref()) {
            if last != Some(g) {
                if let Err(at) = group_ids.binary_search_by(|known| known.as_str().cmp(g)) {
                    group_ids.insert(at, g.to_string());
                }
                last = Some(g);
            }
        }
        // Plain loops in this function: each mapped `collect` is several generic functions in
        // the wasm.
        let mut groups: Vec<GroupStatus> = Vec::with_capacity(group_ids.len());
        for id in group_ids {
            groups.push(GroupStatus {
                id,
                total: 0,
                done: 0,
                failed: 0,
                cancelled: 0,
                pending: 0,
                warning: None,
            });
        }
        let mut waiting_per_lane = [0u64; 3];
        let mut orphans: Vec<(&str, u64)> = Vec::new();
        for job in self.jobs.values() {
            match job.state {
                JobState::Queued => counts.queued += 1,
                JobState::Sending => counts.sending += 1,
                JobState::RetryWait => counts.retry_wait += 1,
                JobState::Done => counts.done += 1,
                JobState::Failed => counts.failed += 1,
                JobState::Cancelled => counts.cancelled += 1,
            }
            let pending = matches!(
                job.state,
                JobState::Queued | JobState::Sending | JobState::RetryWait
            );
            if pending {
                count_in(&mut pending_per_budget, &job.budget.as_str());
                if !self.budgets.contains_key(&job.budget) {
                    count_in(&mut orphans, &job.budget.as_str());
                }
            }
            if job.state.is_waiting() {
                waiting_per_lane[job.lane.index()] += 1;
            }
            let group = job
                .group_id
                .as_deref()
                .and_then(|g| groups.binary_search_by(|s| s.id.as_str().cmp(g)).ok());
            if let Some(i) = group {
                let entry = &mut groups[i];
                entry.total += 1;
                match job.state {
                    JobState::Done => entry.done += 1,
                    JobState::Failed => entry.failed += 1,
                    JobState::Cancelled => entry.cancelled += 1,
                    _ => entry.pending += 1,
                }
            }
        }
        let mut budgets = Vec::new();
        let mut eta_all: Option<DurationMs> = None;
        for (name, b) in self.budgets.iter() {
            let pending = pending_per_budget
                .binary_search_by(|(n, _)| (*n).cmp(name.as_str()))
                .map_or(0, |i| pending_per_budget[i].1);
            let blocked = b.state.blocked_until(now);
            let eta_ms = if b.state.trouble.is_some() {
                None
            } else if pending == 0 {
                Some(0)
            } else {
                let mut rate = b.state.limiter.sustained_rate_per_ms();
                if let Some(latency) = b.latency_ms.filter(|l| *l > 0.0) {
                    rate = rate.min(b.config.concurrency as f64 / latency);
                }
                let wait = blocked.map_or(0, |t| t - now);
                (rate > 0.0).then(|| wait + (pending as f64 / rate).ceil() as u64)
            };
            if let Some(e) = eta_ms {
                eta_all = Some(eta_all.map_or(e, |a| a.max(e)));
            }
            let tightest = b.state.limiter.windows().iter().min_by(|x, y| {
                let rx = x.limit as f64 / x.length_ms as f64;
                let ry = y.limit as f64 / y.length_ms as f64;
                rx.total_cmp(&ry)
            });
            let achieved_share = tightest.map_or(0.0, |w| {
                b.state.limiter.starts_within(now, w.length_ms) as f64 / w.limit as f64
            });
            let c = &b.state.counters;
            let server = b.state.server.as_ref().filter(|s| s.reset_at > now);
            budgets.push(BudgetStatus {
                name: name.clone(),
                windows: b.state.limiter.windows().to_vec(),
                concurrency: b.config.concurrency,
                in_flight: b.in_flight.len() as u64,
                pending,
                paused_until: b.state.paused_until.filter(|&t| t > now).or_else(|| {
                    b.state
                        .server
                        .as_ref()
                        .filter(|s| s.remaining == 0 && s.reset_at > now)
                        .map(|s| s.reset_at)
                }),
                pause_reason: if b.state.paused_until.is_some_and(|t| t > now) {
                    b.state.pause_reason.clone()
                } else if server.is_some_and(|s| s.remaining == 0) {
                    Some("the server reports no requests left until its limit resets".into())
                } else {
                    None
                },
                trouble: b.state.trouble.clone(),
                server_remaining: server.map(|s| s.remaining),
                server_reset_at: server.map(|s| s.reset_at),
                eta_ms,
                requests: c.requests,
                rate_limited: c.rate_limited,
                retries: c.retries,
                rate_limited_per_1000: if c.requests == 0 {
                    0.0
                } else {
                    c.rate_limited as f64 * 1000.0 / c.requests as f64
                },
                achieved_share,
            });
        }
        let mut warnings: Vec<String> = Vec::new();
        for (budget, n) in &orphans {
            warnings.push(format!(
                "{n} jobs wait for budget '{budget}', which is not configured"
            ));
        }
        for g in &mut groups {
            if g.pending > 0 {
                let budget = self
                    .jobs
                    .values()
                    .find(|j| j.group_id.as_deref() == Some(g.id.as_str()))
                    .and_then(|j| self.budgets.get(&j.budget));
                if let Some(b) = budget {
                    g.warning = capacity_warning(g.pending, b.state.limiter.windows());
                }
            }
        }
        for g in &groups {
            if let Some(w) = &g.warning {
                warnings.push(w.clone());
            }
        }
        let mut lanes = Vec::with_capacity(Lane::ALL.len());
        for lane in Lane::ALL {
            let samples: Vec<DurationMs> = self.waits[lane.index()].iter().copied().collect();
            lanes.push(LaneStatus {
                lane,
                waiting: waiting_per_lane[lane.index()],
                wait_p50_ms: percentile(&samples, 50.0),
                wait_p95_ms: percentile(&samples, 95.0),
            });
        }
        Status {
            now,
            counts,
            budgets,
            groups,
            lanes,
            eta_ms: eta_all,
            attempts_per_job: if self.finished_jobs == 0 {
                0.0
            } else {
                self.finished_attempts as f64 / self.finished_jobs as f64
            },
            offline: self.is_offline(now),
            warnings,
        }
    }
}

/// What identifies "the same request" for folding identical idempotent jobs: a hash, in
/// decimal digits (see [`Engine::identical`]).
fn fingerprint(job: &Job) -> String {
    let mut h = FxHasher::default();
    (
        &job.budget,
        &job.method,
        &job.url,
        &job.body,
        &job.headers,
        &job.key,
    )
        .hash(&mut h);
    h.finish().to_string()
}

/// Later patch fields win. Both JSON objects: merged field by field; otherwise the later body
/// replaces the earlier one (it is the newer statement of what the record should be).
fn merge_bodies(earlier: Option<String>, later: Option<String>) -> Option<String> {
    let (Some(a), Some(b)) = (&earlier, &later) else {
        return later.or(earlier);
    };
    use crate::json::{parse, to_string, Json};
    match (parse(a), parse(b)) {
        (Ok(Json::Obj(mut base)), Ok(Json::Obj(update))) => {
            // Written as a `serde_json::Value` map writes it (sorted, last duplicate wins).
            base.extend(update);
            Some(to_string(&Json::Obj(base)))
        }
        _ => later,
    }
}

/// The server's own words where it gave any (a JSON `message` or `error`, or the text), short.
fn server_message(status: u16, body: &str) -> String {
    let from_json = crate::json::parse(body).ok().and_then(|v| {
        ["message", "error", "detail", "title"]
            .iter()
            .find_map(|k| v.get(k).and_then(|m| m.as_str()).map(str::to_owned))
    });
    let text = from_json.unwrap_or_else(|| body.trim().to_string());
    let short: String = text.chars().take(300).collect();
    if short.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {short}")
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// An absolute http(s) URL with a host and no spaces or control characters. (The worker has
/// already resolved relative URLs against its origin.)
pub fn validate_url(url: &str) -> Result<(), ProtocolError> {
    let invalid = |message: &str| ProtocolError::InvalidUrl {
        url: url.chars().take(200).collect(),
        message: message.into(),
    };
    if url.len() > 16_384 {
        return Err(invalid("longer than 16,384 characters"));
    }
    let rest = if let Some(r) = url.strip_prefix("https://") {
        r
    } else if let Some(r) = url.strip_prefix("http://") {
        r
    } else {
        return Err(invalid(
            "only absolute http:// and https:// URLs can be sent",
        ));
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("contains spaces or control characters"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    if host.is_empty() || host.starts_with(':') {
        return Err(invalid("has no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// `SortedQueue` keeps the order and contents a `BTreeSet` would, over enough keys to split
    /// and empty many blocks, with adds and removals at the ends and in the middle.
    #[test]
    fn sorted_queue_is_an_ordered_set() {
        let mut rng = Rng::seeded(3);
        let mut queue = SortedQueue::default();
        let mut reference = BTreeSet::new();
        for round in 0..40_000u64 {
            let key = match rng.below_or_equal(3) {
                // Mostly the newest key, as enqueues bring.
                0 | 1 => (round, rng.below_or_equal(2), String::new()),
                _ => (
                    rng.below_or_equal(round),
                    0,
                    rng.below_or_equal(9).to_string(),
                ),
            };
            match rng.below_or_equal(9) {
                0..=4 => {
                    queue.insert(key.clone());
                    reference.insert(key);
                }
                5 | 6 => {
                    // A key present, if any: the middle of the set.
                    let present = reference.iter().nth(reference.len() / 2).cloned();
                    if let Some(k) = present {
                        queue.remove(&k);
                        reference.remove(&k);
                    }
                }
                7 => {
                    queue.remove(&key);
                    reference.remove(&key);
                }
                _ => assert_eq!(queue.pop_first(), reference.pop_first()),
            }
            assert_eq!(queue.first(), reference.first());
            assert_eq!(queue.is_empty(), reference.is_empty());
        }
        assert!(queue.blocks.len() > 2, "blocks were split");
        let mut all = Vec::new();
        while let Some(k) = queue.pop_first() {
            all.push(k);
        }
        assert_eq!(all, reference.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn id_set_takes_each_id_once_in_order() {
        let mut rng = Rng::seeded(5);
        let mut set = IdSet::default();
        let mut reference = BTreeSet::new();
        for _ in 0..3_000 {
            let id = rng.below_or_equal(1_000).to_string();
            set.insert(id.clone());
            reference.insert(id);
        }
        assert_eq!(set.take(), reference.into_iter().collect::<Vec<_>>());
        assert!(set.is_empty());
        assert!(set.take().is_empty());
    }
}
