//! The engine: one surface over the parts that decide which job goes next, and when.
//!
//! Shaped like `quinn-proto`: the engine owns no clock, socket or timer. Inputs arrive as method
//! calls that carry `now` ([`Engine::enqueue`], [`Engine::on_response`], ...); outputs are pulled
//! ([`Engine::poll_transmit`] for the next request to start, [`Engine::take_changes`] for what to
//! persist and broadcast), and [`Engine::poll_timeout`] names the single next instant at which
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

mod in_flight;
mod jobs;
mod ledger;
mod queue;
mod scheduler;
mod snapshot;
mod tally;

use serde::{Deserialize, Serialize};

use crate::body_rules::apply_body_rules;
use crate::budget::{BudgetState, Trip};
use crate::config::{ConfigError, EngineConfig};
use crate::headers::{read_signal, ServerSignal};
use crate::id_map::IdMap;
use crate::job::{Job, JobError, JobId, JobKind, JobOutcome, JobSpec, JobState};
use crate::preflight::needs_preflight;
use crate::protocol::ProtocolError;
use crate::random::{uuid_v4_from, IdentifierSource, Rng};
use crate::request_options::RequestOptions;
use crate::retry::{backoff, classify, default_pause, Verdict};
use crate::scope::{Scope, Target};
use crate::status::{capacity_warning, Status};
use crate::time::{human_duration, DurationMs, Millis};

use in_flight::{Budget, InFlight, Mark};
use jobs::JobTable;
use ledger::SaveLedger;
pub use ledger::{Changes, SaveId};
pub use scheduler::AGED_TURN_EVERY;
use scheduler::{Rank, Scheduler, Turn};
use snapshot::{count_in, StatusCounters};

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
    /// What changed since the last [`Engine::take_changes`], and the unsaved starts of the
    /// saves not yet confirmed.
    saves: SaveLedger,
    /// Queue waits and attempts per finished job, for the status.
    counters: StatusCounters,
    /// Storage refuses every save (it is full): starts go out without waiting for one (see
    /// [`Engine::send_unrecorded`]).
    unrecorded: bool,
    /// Nothing starts while `unrecorded` (see [`Engine::hold_while_full`]).
    held_while_full: bool,
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
            unrecorded: false,
            held_while_full: false,
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
            self.table.admit(job);
        }
        self.replace_all(now);
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
        let seq = self.table.next_seq();
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
            cost: spec.cost,
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
        self.table.admit(job);
        self.saves.job_changed(id.clone());
        match self.table.head_of(&id) {
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
        let doomed = self.table.cancelled_out_by(delete)?;
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
        self.table.admit(delete);
        self.saves.job_changed(id.clone());
        Some(Enqueued {
            id,
            coalesced: false,
            state: JobState::Cancelled,
        })
    }

    /// Folds a patch into the newest unsent patch of its key, or an idempotent request into an
    /// identical waiting one. Returns the id of the job it was folded into.
    fn try_coalesce(&mut self, job: &Job, now: Millis) -> Option<JobId> {
        let target = self.table.fold(job)?;
        self.saves.job_changed(target.clone());
        self.replace_head_of(&target, now);
        Some(target)
    }

    // ----- placement -----------------------------------------------------------------------

    fn unplace(&mut self, id: &JobId) {
        let budgets = &mut self.budgets;
        self.scheduler
            .unplace(id, |name| budgets.get_mut(name).map(|b| &mut b.ready));
    }

    /// Puts a job where the scheduler will find it: ready (per budget and effective lane),
    /// delayed (until its backoff ends), or nowhere (not waiting, or not the head of its key).
    fn place(&mut self, id: &JobId, now: Millis) {
        self.unplace(id);
        let Some(job) = self.table.get(id) else {
            return;
        };
        if !job.state.is_waiting() {
            return;
        }
        if !self.table.heads_its_chain(job) {
            return;
        }
        if job.not_before > now {
            self.scheduler.delay(job);
            return;
        }
        let lane = self.table.effective_lane(job);
        // A job whose budget is not configured waits (and is reported) until it is.
        if let Some(b) = self.budgets.get_mut(&job.budget) {
            self.scheduler.make_ready(job, lane, &mut b.ready);
        }
    }

    fn replace_head_of(&mut self, id: &JobId, now: Millis) {
        match self.table.head_of(id) {
            Some(h) => self.place(&h, now),
            None => self.place(id, now),
        }
    }

    fn replace_all(&mut self, now: Millis) {
        self.scheduler.clear();
        for b in self.budgets.values_mut() {
            b.ready.clear();
        }
        let mut ids: Vec<JobId> = Vec::new();
        for job in self.table.iter() {
            if job.state.is_waiting() {
                ids.push(job.id.clone());
            }
        }
        for id in ids {
            self.place(&id, now);
        }
    }

    fn promote_due(&mut self, now: Millis) {
        while let Some(id) = self.scheduler.pop_due(now) {
            self.place(&id, now);
        }
    }

    fn forget_expired(&mut self, now: Millis) {
        let retention = self.config.retention_ms;
        while let Some(id) = self.table.pop_expired(now, retention) {
            // It may stay among the changed jobs: `take_changes` skips ids it no longer
            // knows (and one added again since is changed indeed).
            self.saves.job_removed(id);
        }
    }

    // ----- time ----------------------------------------------------------------------------

    /// Time passed: what falls due by `now` happens here, and only here. Jobs whose backoff
    /// ended join their lanes, the offline probe's wait ends, requests out longer than their
    /// budget allows for a trip are counted as arriving now, and finished jobs past their
    /// retention are forgotten. Call it whenever [`Engine::poll_timeout`]'s instant has passed,
    /// and before polling starts after any other wake-up: it is cheap when nothing is due, so
    /// the pump calls it on every turn ([`crate::pump::Pump::turn`]).
    ///
    /// Kept apart from [`Engine::poll_transmit`] (as `quinn-proto` keeps `handle_timeout` apart
    /// from `poll_transmit`) so that polling is a pure pick among what is ready: asking what
    /// may start never changes what the queue holds.
    pub fn handle_timeout(&mut self, now: Millis) {
        self.forget_expired(now);
        if self.offline_until.is_some_and(|t| t <= now) {
            self.offline_until = None;
        }
        self.promote_due(now);
        for b in self.budgets.values_mut() {
            if !b.in_flight.is_empty() && b.count_overdue_as_arriving(now) {
                self.saves.budget_changed(b.config.name.clone());
            }
        }
    }

    // ----- sending -------------------------------------------------------------------------

    /// The next request to start now among the jobs ready, if any may. Call
    /// [`Engine::handle_timeout`] first when time has passed, then this repeatedly until `None`,
    /// then arm a timer for [`Engine::poll_timeout`]. The start is counted against the budget at once. Persist
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
        if self.is_offline(now) || self.unrecorded && self.held_while_full {
            return None;
        }
        // Per budget: the head of its top lane, and the head that ranks first once aged.
        let mut best: Option<(Rank, String, JobId, Turn)> = None;
        // Heads that wait for room in a resource (see `Engine::backfill`), and those that no
        // longer do.
        let mut head_waits: Vec<(String, Option<(JobId, Millis)>)> = Vec::new();
        for (name, b) in self.budgets.iter() {
            if !b.has_ready() {
                continue;
            }
            match self.start_at(b, now) {
                Some(t) if t <= now => {}
                _ => continue,
            }
            let Some((rank, mut id, turn)) = b.ready.pick(&self.config.aging, now) else {
                continue;
            };
            if let Some(job) = self
                .table
                .get(id)
                .filter(|_| !b.config.resources.is_empty())
            {
                let margin = b.state.limiter.margin();
                let resources = &b.state.resources;
                if resources.room_at(&b.config.resources, &job.cost, margin, now) > now {
                    let since = b
                        .head_wait
                        .as_ref()
                        .filter(|(waiting, _)| waiting == id)
                        .map_or(now, |&(_, since)| since);
                    head_waits.push((name.clone(), Some((id.clone(), since))));
                    match self.backfill(b, id, now) {
                        Some(other) => id = other,
                        None => continue,
                    }
                } else if b.head_wait.is_some() {
                    head_waits.push((name.clone(), None));
                }
            }
            if best.as_ref().is_none_or(|(r, _, _, _)| rank < *r) {
                best = Some((rank, name.clone(), id.clone(), turn));
            }
        }
        for (name, wait) in head_waits {
            if let Some(b) = self.budgets.get_mut(&name) {
                b.head_wait = wait;
            }
        }
        let (_, budget_name, id, turn) = best?;
        if let Some(b) = self.budgets.get_mut(&budget_name) {
            b.ready.took(turn);
        }
        self.unplace(&id);
        let retry_config = self.config.retry.clone();
        let resend_is_safe = self.table.get(&id).is_some_and(may_resend_early);
        let timeout_ms = self
            .budgets
            .get(&budget_name)
            .filter(|_| resend_is_safe)
            .map_or(retry_config.timeout_ms, |b| {
                b.attempt_timeout(&id, retry_config.timeout_ms)
            });
        let retried_early = self
            .budgets
            .get(&budget_name)
            .is_some_and(|b| b.given_up.iter().any(|(j, _)| *j == id));
        let job = self.table.transition(&id, JobState::Sending)?.ok()?;
        let lane = job.lane;
        let cost = job.cost.clone();
        if job.started_at.is_none() {
            let wait = now.saturating_sub(job.enqueued_at);
            self.counters.waited(lane, wait);
        }
        job.started_at = Some(now);
        // A job whose last attempt was given up early is retried too (see `rto`).
        let is_retry = job.attempts > 0 || retried_early;
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
        let save_first = saved_first
            || (!self.unrecorded
                && (b.mark != Mark::Saved || b.unsaved_starts >= b.config.concurrency));
        b.state.sends_before_saving = true;
        if !save_first {
            b.unsaved_starts += 1;
            b.untaken_starts += 1;
        }
        b.state.record_start(now, is_retry, &retry_config);
        // A request the browser sends a CORS preflight ahead of reaches the server a round
        // trip late: after one that had none (or first of all), a server without burst would
        // see the next one too soon after it. Requests that all carry one are late alike.
        let preflighted = needs_preflight(&transmit.method, &transmit.headers)
            && b.preflights
                .on_start(&transmit.url, now, b.config.preflight_max_age_ms);
        if preflighted && !b.last_start_preflighted {
            b.state.limiter.await_preflight();
        }
        b.last_start_preflighted = preflighted;
        b.state.resources.record(&b.config.resources, &cost, now);
        if b.config.count_preflights && preflighted {
            b.state.count_preflight(now);
        }
        b.in_flight.push(InFlight {
            job: id.clone(),
            logged: now,
            sent: now,
            shifted: 0,
            unsent: save_first,
            timeout_ms,
        });
        if save_first {
            // Written as sending (a plain start is not: see `Changes::started`), so that a
            // restore knows its start went out later than the saved log says (see
            // `Engine::restore_more`).
            self.saves.job_changed(id.clone());
        }
        self.saves.job_started(id);
        self.saves.budget_changed(budget_name);
        Some(Transmit {
            save_first,
            ..transmit
        })
    }

    /// When budget `b`'s next job may start: when its request windows and concurrency allow
    /// one, and its other resources (tokens, points) have room for what the job at the head of
    /// its lanes costs. The head waits for that room rather than letting cheaper jobs pass it,
    /// so that a large job is never starved by a stream of small ones.
    fn start_at(&self, b: &Budget, now: Millis) -> Option<Millis> {
        let t = b.next_start_at(now)?;
        if b.config.resources.is_empty() {
            return Some(t);
        }
        let (_, id, _) = b.ready.pick(&self.config.aging, now)?;
        let cost = &self.table.get(id)?.cost;
        let room =
            b.state
                .resources
                .room_at(&b.config.resources, cost, b.state.limiter.margin(), t);
        if room > t && self.backfill(b, id, t).is_some() {
            return Some(t);
        }
        Some(room)
    }

    /// A ready job that may start at `t` in place of `head`, the job at the head of `b`'s
    /// lanes, which waits for room in a resource: the first of those behind it (in lane order,
    /// [`BACKFILL_SCAN`] per lane) that fits every resource now. Without it, what is left below
    /// the head's cost in each window goes unused while the head waits for the window to
    /// turn: 0.89-0.91 of a token limit with bounds of 1-10% of it (`sluice simulate
    /// --tokens-per-minute`). The head is passed for one window of its resources from when it
    /// started waiting, no longer: then nothing passes it, and it starts once the window has
    /// room for it, within a second window at most.
    fn backfill<'b>(&self, b: &'b Budget, head: &JobId, t: Millis) -> Option<&'b JobId> {
        let longest = b
            .config
            .resources
            .iter()
            .flat_map(|r| r.windows.iter().map(|w| w.length_ms))
            .max()?;
        let since = b
            .head_wait
            .as_ref()
            .filter(|(waiting, _)| waiting == head)
            .map_or(t, |&(_, since)| since);
        if t.saturating_sub(since) >= longest {
            return None;
        }
        let margin = b.state.limiter.margin();
        b.ready.behind_heads(BACKFILL_SCAN).find(|id| {
            self.table.get(*id).is_some_and(|job| {
                b.state
                    .resources
                    .room_at(&b.config.resources, &job.cost, margin, t)
                    <= t
            })
        })
    }

    /// The next instant at which a request could start (or a backoff ends), if anything waits.
    /// `Some(t)` with `t <= now` means "call `poll_transmit` now". `None`: nothing can happen
    /// until an input arrives (a response, an enqueue, a retry).
    pub fn poll_timeout(&self, now: Millis) -> Option<Millis> {
        let waiting = self.scheduler.has_waiting();
        if let Some(t) = self.offline_until.filter(|&t| t > now) {
            return waiting.then_some(t);
        }
        let mut next = self.scheduler.next_due();
        if self.unrecorded && self.held_while_full {
            // Nothing starts until a save lands, which wakes the pump anyway.
            return next;
        }
        for b in self.budgets.values() {
            if !b.has_ready() {
                continue;
            }
            if let Some(t) = self.start_at(b, now) {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        // Forgetting done jobs needs no timer of its own: it rides along with every
        // `handle_timeout`, which the pump runs on each turn.
        next
    }

    /// The request of a job that was saved before it went out ([`Transmit::save_first`]) has
    /// just been handed to the network: its start counts from now, not from when it was
    /// polled, so a slow save cannot push its arrival past the windows' margin.
    pub fn on_sent(&mut self, id: &str, now: Millis) {
        let Some(budget_name) = self.table.get(id).map(|j| j.budget.clone()) else {
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
            self.saves.budget_changed(budget_name);
        }
    }

    /// The response to a job's request arrived.
    pub fn on_response(&mut self, id: &str, response: Response, now: Millis) {
        let mut signal = read_signal(response.status, &response.headers, now);
        let Some((budget_name, trip, _)) = self.take_in_flight(id, now, Some(&signal)) else {
            return;
        };
        let started = trip.started;
        let id: JobId = id.to_string();
        let said_by_body = self.budgets.get(&budget_name).is_some_and(|b| {
            apply_body_rules(
                &b.config.body_rules,
                response.status,
                &response.body,
                &mut signal,
            )
        });
        if let (Some(b), Some(job)) = (self.budgets.get_mut(&budget_name), self.table.get(&id)) {
            if !b.config.resources.is_empty() {
                let success = (200..300).contains(&response.status) && !signal.rate_limited;
                b.state.resources.on_answer(
                    &b.config.resources,
                    &job.cost,
                    started,
                    success.then_some(response.body.as_str()),
                    &signal.resources,
                    now,
                );
            }
        }
        if signal.concurrency_limited {
            self.saves.budget_changed(budget_name.clone());
            self.on_concurrency_refused(&id, &budget_name, now);
            return;
        }
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
        self.saves.budget_changed(budget_name.clone());
        match classify(response.status, signal.rate_limited) {
            Verdict::Success => {
                if let Some(b) = self.budgets.get_mut(&budget_name) {
                    b.state.consecutive_rate_limits = 0;
                    b.concurrency_cap.on_success(b.config.concurrency, now);
                }
                if let Some(job) = self.table.get_mut(&id) {
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
                    // A bare refusal of our own spacing by a server without burst (see
                    // `BudgetState::observe_rate_limited`): it refused that one request, not a
                    // quota. The strict spacing from now on is the answer, not a pause: a
                    // second's pause and its ramp cost nginx's 20 a second a tenth of a 10 s run.
                    if own_timing && signal.retry_after_ms.is_none() && b.state.limiter.no_burst() {
                        let _ = self.table.transition(&id, JobState::Queued);
                        self.saves.job_changed(id.clone());
                        self.place(&id, now);
                        return;
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
                    // Say whose wait it is: a bare 429 named none, and a person reading "the
                    // server asked to wait 1 s" would look for a Retry-After that is not there.
                    let answer = if said_by_body {
                        format!("HTTP {} whose body says rate limited", response.status)
                    } else {
                        format!("HTTP {}", response.status)
                    };
                    let reason = if signal.retry_after_ms.is_some() {
                        format!(
                            "the server asked to wait {} ({answer})",
                            human_duration(wait)
                        )
                    } else {
                        format!(
                            "{answer} without Retry-After: pausing {} (our default)",
                            human_duration(wait)
                        )
                    };
                    b.state.pause(now, wait, reason, &mut self.rng);
                }
                // Back to its place at the front of its lane; a 429 is not an attempt.
                let _ = self.table.transition(&id, JobState::Queued);
                self.saves.job_changed(id.clone());
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
                if let Some(job) = self.table.get_mut(&id) {
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

    /// The server refused the job's request for concurrency (too many open at once), not for
    /// its rate: the budget keeps fewer in flight for a while and the job goes back to the
    /// front of its lane, without a pause and without spending an attempt.
    fn on_concurrency_refused(&mut self, id: &JobId, budget_name: &str, now: Millis) {
        let wait = match self.budgets.get_mut(budget_name) {
            Some(b) => {
                b.state.counters.rate_limited += 1;
                let open = b.in_flight.len() + 1;
                b.concurrency_cap
                    .on_refused(open, b.config.concurrency, now)
            }
            None => 0,
        };
        let _ = self.table.transition(id, JobState::Queued);
        if let Some(job) = self.table.get_mut(id) {
            job.not_before = job.not_before.max(now.saturating_add(wait));
        }
        self.saves.job_changed(id.clone());
        self.place(id, now);
    }

    /// The job's request got no response.
    pub fn on_transport_error(&mut self, id: &str, error: TransportError, now: Millis) {
        let Some((budget_name, _, given_ms)) = self.take_in_flight(id, now, None) else {
            return;
        };
        let id: JobId = id.to_string();
        let configured = self.config.retry.timeout_ms;
        match error {
            TransportError::Offline => {
                let _ = self.table.transition(&id, JobState::Queued);
                let probe = (2_000u64 << self.offline_streak.min(5)).min(OFFLINE_PROBE_MAX_MS);
                self.offline_streak += 1;
                self.offline_until = Some(now + probe);
                self.saves.job_changed(id.clone());
                self.place(&id, now);
            }
            TransportError::Timeout if given_ms < configured => {
                // Given up at the estimate from measured trips (see `rto`), not at the
                // configured timeout: most likely a lost answer. Tried again with the same
                // idempotency key and twice the time; not an attempt of the job's, so a server
                // slower than anything measured costs a few early tries, never the job.
                if let Some(b) = self.budgets.get_mut(&budget_name) {
                    b.gave_up_early(&id);
                }
                let error = JobError {
                    status: None,
                    message: format!(
                        "no response within {} (2 to 4 times the usual round trip; tried again)",
                        human_duration(given_ms)
                    ),
                };
                self.retry_early(&id, &budget_name, error, now);
            }
            TransportError::Timeout => {
                let error = JobError {
                    status: None,
                    message: format!("no response within {}", human_duration(given_ms)),
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

    /// Ends a request's time in flight: `answer` is what its response said when one came (its
    /// trip is measured), `None` when it failed without one (it may have reached the server at
    /// any time until now).
    fn take_in_flight(
        &mut self,
        id: &str,
        now: Millis,
        answer: Option<&ServerSignal>,
    ) -> Option<(String, Trip, DurationMs)> {
        let job = self.table.get(id)?;
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
        let latest = if let Some(answer) = answer {
            // A wait the server says it held the request for its turn (`sluice proxy`) is no
            // part of the way there or back: the trip measured is the rest (see
            // `headers::HOLD_FIELD`).
            let trip = now.saturating_sub(sent);
            let measured = trip.saturating_sub(answer.held_ms.unwrap_or(0));
            b.round_trips.record(measured);
            // Karn's rule: only answered attempts are measured (see `rto`). The whole trip, a
            // proxy's hold included: the timeout is about when an answer may still come.
            b.rto.record(trip);
            b.answered(id);
            let before = b.state.limiter.margin();
            if b.follow_round_trips() {
                // This attempt is out of the list the narrowing moved: it moves by as much.
                let moved = before.saturating_sub(b.state.limiter.margin());
                logged = logged.saturating_add(moved);
                shifted = shifted.saturating_add(moved);
                self.saves.budget_changed(budget_name.clone());
            }
            let arrived_by = b.round_trips.arrived_by(sent, now);
            b.state.limiter.answered(sent, arrived_by);
            arrived_by
        } else {
            now
        };
        // In the log's frame.
        let latest = latest.saturating_add(shifted);
        if b.state.limiter.reached_server_by(logged, latest).is_some() {
            self.saves.budget_changed(budget_name.clone());
        }
        let started = logged;
        let arrived_by = latest;
        if answer.is_none() && latest > logged {
            b.ended_unanswered(sent.saturating_add(shifted), latest, now);
        }
        let unplaced = b.unplaced(arrived_by);
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
                unplaced,
            },
            attempt.timeout_ms,
        ))
    }

    fn fail_or_retry(&mut self, id: &JobId, budget_name: &str, error: JobError, now: Millis) {
        let max_attempts = self.config.retry.max_attempts;
        let Some(job) = self.table.get_mut(id) else {
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
        self.retry_after_backoff(id, budget_name, error, attempts, now);
    }

    /// An attempt given up before the configured timeout (see `rto`): retried as any failed
    /// attempt is (a retry token, a backoff by how many were given up in a row), without
    /// counting it among the job's attempts.
    fn retry_early(&mut self, id: &JobId, budget_name: &str, error: JobError, now: Millis) {
        let given_up = self.budgets.get(budget_name).map_or(1, |b| {
            b.given_up
                .iter()
                .find(|(j, _)| j == id)
                .map_or(1, |&(_, n)| n)
        });
        // The first give-up retries at once, as TCP retransmits when its timer fires: the
        // wait was the timeout itself. Later ones back off as failures do.
        self.retry_after_backoff(id, budget_name, error, given_up - 1, now);
    }

    /// Retries a job after the backoff for its `backoff_step`th failure (none for 0), if the
    /// budget has a retry token; without one the service is in trouble and the job fails.
    fn retry_after_backoff(
        &mut self,
        id: &JobId,
        budget_name: &str,
        error: JobError,
        backoff_step: u32,
        now: Millis,
    ) {
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
            self.saves.budget_changed(budget_name.to_string());
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
        let delay = if backoff_step == 0 {
            0
        } else {
            backoff(backoff_step, &self.config.retry, &mut self.rng)
        };
        let _ = self.table.transition(id, JobState::RetryWait);
        if let Some(job) = self.table.get_mut(id) {
            job.not_before = now + delay;
            job.last_error = Some(error);
        }
        self.saves.job_changed(id.clone());
        self.place(id, now);
    }

    /// Moves a job to a terminal state and lets the next job of its key go.
    fn finish(&mut self, id: &JobId, state: JobState, error: Option<JobError>, now: Millis) {
        self.unplace(id);
        let Some(Ok(job)) = self.table.transition(id, state) else {
            return;
        };
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
            self.counters.finished(job.attempts);
        }
        let key = job.key.clone();
        if matches!(state, JobState::Done | JobState::Cancelled) {
            self.table.expire_from(now, id.clone());
        }
        self.saves.job_changed(id.clone());
        self.leave_chain(id, key, now);
    }

    fn leave_chain(&mut self, id: &JobId, key: Option<String>, now: Millis) {
        if let Some(head) = self.table.leave_chain(id, key) {
            self.place(&head, now);
        }
    }

    // ----- user actions --------------------------------------------------------------------

    /// Cancels a waiting job, or every waiting job of a group. Jobs already sending cannot be
    /// called back; they are left out of the returned list.
    pub fn cancel(&mut self, target: &str, now: Millis) -> Result<Vec<JobId>, ProtocolError> {
        let ids: Vec<JobId> = if self.table.contains(target) {
            vec![target.to_string()]
        } else {
            let mut jobs: Vec<&Job> = Vec::new();
            for job in self.table.iter() {
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
            let state = self.table.get(target).map(|j| j.state);
            if let Some(state) = state.filter(|s| !s.is_waiting()) {
                return Err(ProtocolError::IllegalTransition {
                    message: format!("job {target} is {state} and can no longer be cancelled"),
                });
            }
        }
        let mut cancelled = Vec::new();
        for id in ids.into_iter().rev() {
            if self.table.get(&id).is_some_and(|j| j.state.is_waiting()) {
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
            .table
            .transition(id, JobState::Queued)
            .ok_or_else(|| ProtocolError::NotFound { id: id.into() })?
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
            self.table.join_chain(key, id.clone());
        }
        if let Some(b) = self.budgets.get_mut(&budget) {
            b.state.clear_trouble(&retry);
        }
        self.saves.budget_changed(budget);
        self.saves.job_changed(id.clone());
        self.replace_head_of(&id, now);
        Ok(())
    }

    /// Forgets a finished job (a failed one the user does not want to retry).
    pub fn dismiss(&mut self, id: &str) -> Result<(), ProtocolError> {
        let job = self
            .table
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
        self.table.forget(id);
        self.saves.job_removed(id.to_string());
        Ok(())
    }

    // ----- observation ---------------------------------------------------------------------

    /// Whether any request is out waiting for its answer.
    pub fn is_sending(&self) -> bool {
        self.budgets.values().any(|b| !b.in_flight.is_empty())
    }

    /// Whether [`Engine::take_changes`] has anything to take (besides what it decides itself).
    pub fn has_changes(&self) -> bool {
        self.saves.has_changes()
    }

    /// Everything that changed since the last call, to save (then broadcast).
    pub fn take_changes(&mut self) -> Changes {
        // Both in id order: a job that also changed otherwise is saved, not just told.
        // Plain loops here: each filtered `collect` is several generic functions in the wasm.
        let changed = self.saves.take_changed_jobs();
        let mut started = Vec::new();
        for id in self.saves.take_started_jobs() {
            if changed.binary_search(&id).is_err() {
                if let Some(job) = self.table.get(&id) {
                    started.push(job.clone());
                }
            }
        }
        let mut jobs = Vec::with_capacity(changed.len());
        for id in &changed {
            if let Some(job) = self.table.get(id) {
                jobs.push(job.clone());
            }
        }
        let removed = self.saves.take_removed();
        let save = self.saves.begin_save();
        let mut carried = Vec::new();
        for (name, b) in self.budgets.iter_mut() {
            // A budget with nothing in flight and nothing ready has no start that could go out
            // unsaved: its next start is saved first again, and a restore owes nothing. (Starts
            // carried by earlier saves are saved once this one is: saves land in order.)
            if b.state.sends_before_saving && b.in_flight.is_empty() && !b.has_ready() {
                b.state.sends_before_saving = false;
                b.mark = Mark::NotSaved;
                self.saves.budget_changed(name.clone());
            }
            if b.state.sends_before_saving && b.mark == Mark::NotSaved {
                b.mark = Mark::Saving(save);
                self.saves.budget_changed(name.clone());
            }
            if b.untaken_starts > 0 {
                carried.push((name.clone(), std::mem::take(&mut b.untaken_starts)));
            }
        }
        self.saves.carries(save, carried);
        let mut budgets = Vec::new();
        for name in self.saves.take_changed_budgets() {
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
        while let Some(carried) = self.saves.pop_confirmed(save) {
            for (name, n) in carried {
                if let Some(b) = self.budgets.get_mut(&name) {
                    b.unsaved_starts = b.unsaved_starts.saturating_sub(n);
                }
            }
        }
    }

    /// Storage refused the save `changes` (it is full): nothing of it landed. What it held is
    /// held apart from the next saves until [`Engine::release_held`], which marks it again
    /// for the save after, taken as it is by then.
    pub fn retake(&mut self, changes: &Changes) {
        self.saves.hold(changes);
    }

    /// Marks again everything [`Engine::retake`] held: call before the save that tries
    /// storage again.
    pub fn release_held(&mut self) {
        self.saves.release_held();
    }

    /// Whether starts go out without a save first, `true` while storage refuses every save
    /// (it is full). A start that waited for a save would then wait for space, and the queue
    /// would stop for want of storage it does not need to send. The price is the record of
    /// the starts: the worker marks storage as missing them (a delete still goes through on a
    /// full storage), and the next start from storage counts every window as full
    /// ([`Engine::count_unrecorded_sends`]).
    pub fn send_unrecorded(&mut self, on: bool) {
        self.unrecorded = on;
    }

    /// While starts go out unrecorded ([`Engine::send_unrecorded`]), whether none goes out at
    /// all. The worker holds the queue so while a journal entry in storage still holds jobs
    /// (a large batch saved in one record, then written one job per record): a restart fills
    /// in from the entry every job whose own record is missing, and while storage is full the
    /// record of a job that ends is deleted, so a job that ended then would come back from the
    /// entry and be sent again. Requests already out may still end meanwhile: a restart while
    /// storage is still full sends those again, with the same keys, as after a crash.
    pub fn hold_while_full(&mut self, on: bool) {
        self.held_while_full = on;
    }

    /// A restore from storage that misses the record of some starts (they went out while
    /// storage was full, [`Engine::send_unrecorded`]): each budget counts its largest window's
    /// limit at `now`, the careful side, as none of those starts can have been later than
    /// `now`. Sending resumes once the windows have moved past them.
    pub fn count_unrecorded_sends(&mut self, now: Millis) {
        for (name, b) in self.budgets.iter_mut() {
            let mut most = 0;
            for w in b.state.limiter.windows() {
                most = most.max(w.limit);
            }
            b.state.count_unsaved_starts(most, now);
            b.state
                .resources
                .count_unrecorded(&b.config.resources, most, now);
            self.saves.budget_changed(name.clone());
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
                self.saves.budget_changed(name.clone());
                changed = true;
            }
        }
        changed
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
        self.counters
            .snapshot(&self.table, &self.budgets, self.is_offline(now), now)
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
