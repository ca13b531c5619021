//! The engine: one surface over the parts that decide which job goes next, and when.
//!
//! Shaped like `quinn-proto`: the engine owns no clock, socket or timer. Inputs arrive as method
//! calls that carry `now` ([`Engine::enqueue`], [`Engine::on_response`], ...); outputs are pulled
//! ([`Engine::poll_transmit`] for the next request to start, [`Persistence::take_changes`] for
//! what to persist and broadcast), and [`Engine::poll_timeout`] names the single next instant at which
//! anything could start, so the worker arms exactly one timer and never polls.
//!
//! [`Engine`] holds no algorithm of its own beyond the order in which an input touches its
//! parts. None of them reaches back into the engine, and their imports of each other run one
//! way (`snapshot` reads `jobs` and `in_flight`; a budget in `in_flight` holds its
//! `scheduler` lanes and `ledger` save ids; `jobs` and `scheduler` keep their orders in
//! `queue`; `jobs` keeps its counts in `tally`):
//! - `jobs`: the job table, its per-key chains, and folding of identical jobs;
//! - `tally`: the table's running counts per state, budget, lane and group, for the status;
//! - `scheduler`: where each eligible job waits, and which goes next (the ordering rules);
//! - `in_flight`: a budget's attempts in flight and how its limiter's log follows them;
//! - `ledger`: what changed since the last save, and which starts are saved;
//! - `snapshot`: the status counters and the snapshot every tab shows;
//! - `queue`: the sorted queue the others keep their orders in.
//!
//! `impl Engine` itself is split along its sections, a file each: `enqueue` (a page's jobs
//! checked and made) and `validate` (the checks), `placement` (where each waiting job stands;
//! `handle_timeout`), `sending` (`poll_transmit`, `poll_timeout`, and the room a job's cost
//! needs), `answers` (`on_sent`, `on_response`, `on_transport_error`), `endings` (how a job
//! ends or is retried), `actions` (cancel, retry, dismiss), `credentials` (`set_credentials`,
//! what the worker script's function gives, the wait after a refusal), `persistence`
//! (the save protocol around `take_changes`, behind the [`Persistence`] view that
//! `Engine::persistence` gives); this file keeps the type, its construction and restore, and
//! the getters.
//!
//! # The order of calls
//!
//! What the worker's pump (`crate::pump`) and the simulator do, on every wake-up:
//! 1. the inputs that arrived, each with its `now`: `enqueue`/`enqueue_many`, `on_response`,
//!    `on_transport_error`, `on_sent` (a request saved first went out), `persistence().on_saved`
//!    (a save landed), `cancel`/`retry`/`dismiss`, `configure`;
//! 2. `handle_timeout(now)`: what fell due happens (backoffs end, done jobs are forgotten);
//! 3. `poll_transmit(now)` until it returns `None`, starting each request it returns (saving
//!    `persistence().take_changes` first when its `save_first` says so);
//! 4. `persistence().take_changes` when `has_changes`, saved and broadcast, its landing
//!    reported with `persistence().on_saved`;
//! 5. one timer for `poll_timeout(now)`, whose firing is the next wake-up.
//!
//! Getters (`job`, `jobs`, `budget_state`, `snapshot`) may be called at any time.

mod actions;
mod answers;
mod batch_answers;
mod batching;
mod credentials;
mod dependencies;
mod endings;
mod enqueue;
mod error;
mod etags;
mod in_flight;
mod jobs;
mod ledger;
mod persistence;
mod placement;
mod queue;
mod scheduler;
mod sending;
mod snapshot;
mod tally;
mod validate;

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::body_rules::apply_body_rules;
use crate::budget::{BudgetState, Trip};
use crate::config::{ConfigError, EngineConfig};
use crate::headers::{read_signal, Headers, ServerSignal};
use crate::id_map::IdMap;
use crate::job::{
    headers_set_over, Job, JobError, JobId, JobKind, JobOutcome, JobSpec, JobState, RetryWith,
};
use crate::preflight::needs_preflight;
use crate::random::{uuid_v4_from, IdentifierSource, Rng};
use crate::request_options::RequestOptions;
use crate::retry::{backoff, classify, default_pause, Verdict};
use crate::scope::{Scope, Target};
use crate::status::{capacity_warning, Status};
use crate::time::{human_duration, DurationMs, Millis};
use answers::Answer;

pub use error::EngineError;
use etags::KeyEtags;
use in_flight::{Budget, InFlight, Mark};
use jobs::JobTable;
use ledger::SaveLedger;
pub use ledger::{Changes, SaveId};
pub use persistence::{Persistence, StorageMode};
pub use scheduler::AGED_TURN_EVERY;
use scheduler::{Rank, Scheduler, Turn};
use snapshot::{count_in, StatusCounters};
pub use tally::QueueCounts;
pub use validate::validate_url;

/// Longest time between probes while the network is down.
const OFFLINE_PROBE_MAX_MS: DurationMs = 60_000;

/// How many ready jobs behind each lane's head [`Engine::backfill`] looks at: enough to fill a
/// window's gap, few enough that a poll stays cheap with thousands queued.
const BACKFILL_SCAN: usize = 32;

/// A request the worker should start now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transmit {
    pub job_id: JobId,
    /// The budget it counts against (whose credentials the worker script's function gives).
    pub budget: String,
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
    /// How the browser makes it (`None`: its defaults); see [`crate::request_options`].
    pub options: Option<RequestOptions>,
    /// Abort the request after this long and report [`TransportError::Timeout`].
    pub timeout_ms: DurationMs,
    /// Save [`Persistence::take_changes`] before starting this request. When false, the request
    /// may start at once and its start be saved by the next save, which need not wait for
    /// earlier ones: the saved budget already says that starts may go out unsaved, and a
    /// restore counts `concurrency` of them (see [`Engine::restore`]). The engine keeps that
    /// true by asking to save first until [`Persistence::on_saved`] confirms the save that marked
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

pub struct Engine {
    config: EngineConfig,
    /// `config`'s allowed scopes, parsed once per configuration rather than per job.
    allowed: Vec<Scope>,
    rng: Rng,
    /// Where job ids and idempotency keys come from: `rng` unless the caller gave a source
    /// (see [`Engine::set_identifier_source`]).
    identifiers: Option<IdentifierSource>,
    /// The jobs and the per-key chains and folding indexes over them.
    table: JobTable,
    budgets: IdMap<Budget>,
    /// Where each job that may go waits: ready (in its budget's lanes) or delayed.
    scheduler: Scheduler,
    offline_until: Option<Millis>,
    offline_streak: u32,
    /// What changed since the last [`Persistence::take_changes`], and the unsaved starts of the
    /// saves not yet confirmed.
    saves: SaveLedger,
    /// Queue waits and attempts per finished job, for the status.
    counters: StatusCounters,
    /// Whether starts wait for a save, go out unrecorded, or are held (see [`StorageMode`]).
    storage: StorageMode,
    /// The last `ETag` answered per key, for jobs sent with it as `If-Match`.
    etags: KeyEtags,
    /// Credentials given per budget (see `credentials`), set over each job's own when it is
    /// sent. In memory only: credentials are not kept at rest.
    credentials: IdMap<credentials::GivenCredentials>,
    /// Batches in flight, by the id their attempt carries (see `batching`).
    batches: IdMap<batching::InFlightBatch>,
    /// Batches whose answer was lost, to go again with the same members.
    resend_batches: batching::ResendGroups,
    /// The jobs waiting for each job's answer (see `dependencies`).
    dependents: dependencies::Dependents,
    /// The counts of the saved jobs a two-step restore has not read yet (see
    /// [`Engine::expect_unread`]), which the status adds to the table's until they are in.
    unread: Option<QueueCounts>,
}

impl Engine {
    /// An empty engine. `rng` supplies all randomness (ids, jitter): seed it from a real source
    /// in the browser and from a fixed number in tests.
    pub fn new(config: EngineConfig, rng: Rng) -> Result<Self, ConfigError> {
        config.validate()?;
        let allowed = config.allowed_scopes()?;
        let mut budgets = IdMap::new();
        for b in &config.budgets {
            budgets.insert(b.name.clone(), Budget::new(b, &config)?);
        }
        Ok(Self {
            config,
            allowed,
            rng,
            identifiers: None,
            table: JobTable::default(),
            budgets,
            scheduler: Scheduler::default(),
            offline_until: None,
            offline_streak: 0,
            saves: SaveLedger::default(),
            counters: StatusCounters::default(),
            storage: StorageMode::Recorded,
            etags: KeyEtags::default(),
            credentials: Default::default(),
            batches: Default::default(),
            resend_batches: Default::default(),
            dependents: Default::default(),
            unread: None,
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
                b.state
                    .resources
                    .count_unrecorded(&b.config.resources, b.config.concurrency, now);
                // Counted in memory only: until a save holds them, the next starts are saved
                // first (the mark is not saved), or a second stop would lose them with
                // whatever went out unsaved in between.
                engine.saves.budget_changed(name.clone());
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
    /// only the pump may use the engine: an enqueue, cancel or list would see part of the
    /// queue. The status may, once told what is not read yet ([`Engine::expect_unread`]).
    pub fn restore_more(&mut self, jobs: Vec<Job>, now: Millis) {
        let order = crate::job::sorted_order(jobs.iter().map(|j| j.seq));
        // Plain loops: each mapped or filtered `collect` is several generic functions in the
        // wasm.
        let mut jobs: Vec<Option<Job>> = jobs.into_iter().map(Some).collect();
        self.table.reserve(jobs.len());
        for i in order {
            let Some(mut job) = jobs[i].take() else {
                continue;
            };
            if self.table.contains(&job.id) {
                continue;
            }
            self.table.restored_seq(job.seq);
            if job.state == JobState::Sending {
                // Saved as sending, so its start is in the saved log, but at the instant it
                // was polled: a start saved first went out later, when its save landed, and
                // that instant was in memory only. It is counted as going out at the restore.
                if let (Some(started), Some(b)) =
                    (job.started_at, self.budgets.get_mut(&job.budget))
                {
                    b.state.limiter.sent_by(started, now);
                    self.saves.budget_changed(job.budget.clone());
                }
                job.state = JobState::Queued;
                self.saves.job_changed(job.id.clone());
            }
            self.etags.learn(&job);
            self.table.admit(job);
        }
        self.regroup_restored_batches();
        self.settle_all(now);
        self.replace_all(now);
        // The rest is in (or this was the head, before anything was expected).
        self.unread = None;
    }

    /// Between the two steps of a restore (see [`Engine::restore_more`]): `saved` are the
    /// counts the last save left ([`Engine::tally_to_save`]), `head` those of the jobs just
    /// restored as they were read ([`QueueCounts::of`]). The difference is what is not read yet,
    /// which the status counts from now on, so that it is answered before the rest is read.
    /// Returns false, and expects nothing, when `saved` cannot be the counts of a queue `head`
    /// was read from (it counts fewer of something): the status then waits for the rest.
    pub fn expect_unread(&mut self, saved: &QueueCounts, head: &QueueCounts) -> bool {
        self.unread = saved
            .clone()
            .into_saved()
            .without(&head.clone().into_saved());
        self.unread.is_some()
    }

    /// Whether the status counts jobs not read yet (see [`Engine::expect_unread`]): it holds the
    /// whole queue's counts, though the table does not hold the whole queue.
    pub fn counts_unread_jobs(&self) -> bool {
        self.unread.is_some()
    }

    /// The counts for a save to keep with the jobs it writes, for the next start (see
    /// [`Engine::expect_unread`]): every job the engine holds and every saved one it has not
    /// read yet, as [`QueueCounts::into_saved`] counts them.
    pub fn tally_to_save(&self) -> QueueCounts {
        self.queue_counts().into_owned().into_saved()
    }

    /// The status counts of the whole queue: the table's, and those of the saved jobs not
    /// read yet (see [`Engine::expect_unread`]).
    fn queue_counts(&self) -> Cow<'_, QueueCounts> {
        match &self.unread {
            Some(unread) => Cow::Owned(self.table.tally().with(unread)),
            None => Cow::Borrowed(self.table.tally()),
        }
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
                .table
                .iter()
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
                None => Budget::new(b, &config)?,
            };
            self.saves.budget_changed(b.name.clone());
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

    pub fn job(&self, id: &str) -> Option<&Job> {
        self.table.get(id)
    }

    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.table.iter()
    }

    pub fn budget_state(&self, name: &str) -> Option<&BudgetState> {
        self.budgets.get(name).map(|b| &b.state)
    }

    pub fn budget_states(&self) -> impl Iterator<Item = &BudgetState> {
        self.budgets.values().map(|b| &b.state)
    }

    /// A status snapshot for every tab.
    pub fn snapshot(&self, now: Millis) -> Status {
        #[cfg(debug_assertions)]
        {
            let kept = self.table.tally();
            let counted = QueueCounts::of(self.table.iter());
            assert!(
                kept.agrees_with(&counted),
                "the kept status counts differ from a count of the jobs: kept {kept:?}, \
                 counted {counted:?}"
            );
        }
        self.counters.snapshot(
            &self.queue_counts(),
            &self.budgets,
            self.is_offline(now),
            now,
        )
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

/// Whether an attempt may be given up at the timeout learned from round trips (see `rto`) and
/// sent again while the first may still be on its way: only when a second arrival cannot apply
/// the job twice. A create carries one idempotency key for all its attempts, and GET, HEAD,
/// PUT, DELETE and OPTIONS are idempotent by HTTP's definition. Anything else (a PATCH, a custom
/// POST) waits for the configured `retry.timeoutMs`: an answer that is only slow must not make
/// the server apply it twice.
fn may_resend_early(job: &Job) -> bool {
    if job.kind == JobKind::Create {
        return true;
    }
    let method = if job.method.is_empty() {
        "GET"
    } else {
        job.method.as_str()
    };
    ["GET", "HEAD", "PUT", "DELETE", "OPTIONS"]
        .iter()
        .any(|m| method.eq_ignore_ascii_case(m))
}
