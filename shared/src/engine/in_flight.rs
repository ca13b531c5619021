//! A budget as the engine runs it: its limiter state, its attempts in flight, and whether
//! storage holds enough for its next start to go out unsaved.
//!
//! Why attempts are tracked apart from the limiter's log: the log knows a start by the
//! instant it holds, and that instant moves (a narrower margin, an overdue answer, a save that
//! delayed the real send); each attempt here remembers where the log holds it and how it
//! really went, so the two can be matched when its answer comes.

use super::ledger::SaveId;
use super::scheduler::ReadyLanes;
use crate::budget::BudgetState;
use crate::concurrency_cap::ConcurrencyCap;
use crate::config::{BudgetConfig, ConfigError, EngineConfig};
use crate::job::JobId;
use crate::preflight::Preflights;
use crate::round_trips::RoundTrips;
use crate::rto::Rto;
use crate::time::{human_duration, DurationMs, Millis};

pub(super) struct Budget {
    pub(super) config: BudgetConfig,
    pub(super) state: BudgetState,
    /// Its jobs that may start now, by lane (the scheduler's).
    pub(super) ready: ReadyLanes,
    /// Each attempt in flight (at most `concurrency`: a list).
    pub(super) in_flight: Vec<InFlight>,
    /// Smoothed response time, for the ETA when concurrency rather than the limit binds.
    pub(super) latency_ms: Option<f64>,
    /// Starts that went out before being saved
    /// ([`Transmit::save_first`](super::Transmit::save_first) false) and are not known to be
    /// saved yet. Never more than `concurrency`: that is what a restore counts.
    pub(super) unsaved_starts: u32,
    /// Of those, the ones no [`Persistence::take_changes`](super::Persistence::take_changes) has taken yet.
    pub(super) untaken_starts: u32,
    /// Where the saved `sends_before_saving` mark stands: a start may go out unsaved only once
    /// storage holds the mark, or a restore would not count it.
    pub(super) mark: Mark,
    /// The preflights the browser sends ahead of this budget's requests, counted when the API
    /// counts them ([`BudgetConfig::count_preflights`]).
    pub(super) preflights: Preflights,
    /// Recent round trips: where an answered request may have arrived, and the windows'
    /// margin for those still under way.
    pub(super) round_trips: RoundTrips,
    /// The answered trips again, as the attempt timeout needs them (see `rto`).
    pub(super) rto: Rto,
    /// Jobs whose last attempts were given up at the estimated timeout, before the configured
    /// one, and how many times in a row: their next attempt is given twice as long for each
    /// (TCP's backoff). Dropped at the job's next answer; a few entries at most (one per job
    /// retrying after a lost answer), capped at [`GIVEN_UP_KEPT`].
    pub(super) given_up: Vec<(JobId, u32)>,
    /// Attempts that ended without an answer, as (sent, where the log holds them) in the
    /// log's frame, for as long as a server's count may hold them (see [`Budget::unplaced`]).
    pub(super) unanswered: Vec<(Millis, Millis)>,
    /// The in-flight cap as lowered by concurrency refusals (see `concurrency_cap`).
    pub(super) concurrency_cap: ConcurrencyCap,
    /// The job at the head of the lanes while it waits for room in a resource, and since
    /// when: jobs behind it may pass it for one window of the resource, no longer (see
    /// `Engine::backfill`).
    pub(super) head_wait: Option<(JobId, Millis)>,
    /// Whether the last start carried a CORS preflight (see `Limiter::await_preflight`).
    pub(super) last_start_preflighted: bool,
    /// Jobs per start, smoothed (a batch carries many): the ETA counts requests, not jobs.
    /// `None` until something started.
    pub(super) jobs_per_start: Option<f64>,
}

/// Most jobs [`Budget::given_up`] remembers: a job that ends without an answer (cancelled,
/// failed) leaves its entry behind, and the oldest ones go first.
const GIVEN_UP_KEPT: usize = 64;

/// Whether storage holds a budget's `sends_before_saving` mark (see [`Budget::mark`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mark {
    /// Not set, or set but no save has taken it yet.
    NotSaved,
    /// Taken by this save, not yet confirmed.
    Saving(SaveId),
    /// In storage: starts may go out unsaved.
    Saved,
}

/// An attempt in flight, as the limiter logged it and as it really went.
pub(super) struct InFlight {
    pub(super) job: JobId,
    /// Where the limiter's log holds its start: `sent`, moved later by every narrowing of the
    /// margin since (see [`Budget::follow_round_trips`]) and while it is overdue (see
    /// [`Budget::count_overdue_as_arriving`]).
    pub(super) logged: Millis,
    /// When it was handed to the network: what its round trip is measured from.
    pub(super) sent: Millis,
    /// How far narrowings moved the whole log since it was sent: real instants about this
    /// attempt are that much later in the log's frame.
    pub(super) shifted: DurationMs,
    /// Saved first and not handed to the network yet
    /// ([`Engine::on_sent`](super::Engine::on_sent)): it reaches the server no earlier than
    /// any instant it is still waiting at.
    pub(super) unsent: bool,
    /// How long it was given before the transport gives it up (see `rto`).
    pub(super) timeout_ms: DurationMs,
    /// It carried a CORS preflight that the start before it did not: its trip is two round
    /// trips, which say nothing of how the budget's single trips vary, so it is not measured
    /// as one (see `round_trips`); its answer still bounds where it arrived.
    pub(super) after_preflight: bool,
    /// Which credentials it went with (their generation, see `credentials`; 0: the job's own
    /// headers only).
    pub(super) credentials: u64,
}

impl Budget {
    /// A budget that has started nothing yet.
    pub(super) fn new(config: &BudgetConfig, engine: &EngineConfig) -> Result<Budget, ConfigError> {
        Ok(Budget {
            config: config.clone(),
            state: BudgetState::new(config, &engine.retry)?,
            ready: Default::default(),
            in_flight: Vec::new(),
            latency_ms: None,
            unsaved_starts: 0,
            untaken_starts: 0,
            mark: Mark::NotSaved,
            preflights: Preflights::default(),
            round_trips: RoundTrips::default(),
            rto: Rto::default(),
            given_up: Vec::new(),
            unanswered: Vec::new(),
            concurrency_cap: ConcurrencyCap::default(),
            head_wait: None,
            last_start_preflighted: false,
            jobs_per_start: None,
        })
    }

    /// Since when `head`, the job at the head of the lanes, has waited for room in a resource
    /// (see [`Budget::head_wait`]); `now` when it has not been seen waiting before.
    pub(super) fn head_waiting_since(&self, head: &JobId, now: Millis) -> Millis {
        self.head_wait
            .as_ref()
            .filter(|(waiting, _)| waiting == head)
            .map_or(now, |&(_, since)| since)
    }

    /// How long the next attempt of `job` is given, the configured `ceiling` at most.
    pub(super) fn attempt_timeout(&self, job: &str, ceiling: DurationMs) -> DurationMs {
        let given_up = self
            .given_up
            .iter()
            .find(|(j, _)| j == job)
            .map_or(0, |&(_, n)| n);
        self.rto.timeout(ceiling, given_up)
    }

    /// An attempt of `job` was given up before the configured timeout.
    pub(super) fn gave_up_early(&mut self, job: &str) {
        match self.given_up.iter_mut().find(|(j, _)| j == job) {
            Some((_, n)) => *n = n.saturating_add(1),
            None => {
                if self.given_up.len() >= GIVEN_UP_KEPT {
                    self.given_up.remove(0);
                }
                self.given_up.push((job.to_string(), 1));
            }
        }
    }

    /// An attempt of `job` was answered: its next one, if any, starts from the estimate again.
    pub(super) fn answered(&mut self, job: &str) {
        self.given_up.retain(|(j, _)| j != job);
    }

    /// An attempt sent at `sent` ended without an answer, and the log now holds it at
    /// `logged`, where it may have arrived at the latest.
    pub(super) fn ended_unanswered(&mut self, sent: Millis, logged: Millis, now: Millis) {
        let keep = self.state.limiter.history_ms();
        self.unanswered
            .retain(|&(_, at)| at.saturating_add(keep) > now);
        if self.unanswered.len() >= GIVEN_UP_KEPT {
            self.unanswered.remove(0);
        }
        self.unanswered.push((sent, logged));
    }

    /// Our attempts sent by `arrived_by` (in the log's frame) that the log holds after it:
    /// overdue ones in flight and ones that ended unanswered, moved to their latest arrival.
    /// A server's count taken at `arrived_by` may hold them.
    pub(super) fn unplaced(&self, arrived_by: Millis) -> u64 {
        let in_flight = self
            .in_flight
            .iter()
            .filter(|a| a.sent.saturating_add(a.shifted) <= arrived_by && a.logged > arrived_by)
            .count();
        let ended = self
            .unanswered
            .iter()
            .filter(|&&(sent, at)| sent <= arrived_by && at > arrived_by)
            .count();
        (in_flight + ended) as u64
    }

    pub(super) fn has_ready(&self) -> bool {
        self.ready.has_ready()
    }

    /// How long an attempt may be in flight before it is overdue (see
    /// [`Budget::count_overdue_as_arriving`]); `None` before any trip was measured.
    fn overdue_after(&self) -> Option<DurationMs> {
        self.round_trips.overdue_after()
    }

    /// Attempts that hold a concurrency slot. An overdue one (out twice as long as the
    /// slowest recent trip: a lost answer, a hung connection) gives its slot back, so that
    /// one silent request does not hold a quarter of four slots until its timeout: with
    /// 4 in flight at 100 a second, 1% of answers lost cost 13% of the rate that way. It keeps
    /// counting in the windows, as arriving at every moment until it ends; and at most
    /// `concurrency` overdue ones give their slot back, so a server that answers nothing never
    /// has more than twice the configured number of requests open.
    pub(super) fn slots_taken(&self, now: Millis) -> usize {
        let overdue = self.overdue(now);
        let freed = overdue.min(self.config.concurrency as usize);
        self.in_flight.len().saturating_sub(freed)
    }

    /// Attempts overdue at `now`.
    pub(super) fn overdue(&self, now: Millis) -> usize {
        let Some(after) = self.overdue_after() else {
            return 0;
        };
        self.in_flight
            .iter()
            .filter(|a| !a.unsent && now.saturating_sub(a.sent) > after)
            .count()
    }

    /// What the status says of the overdue attempts, if any: how long the oldest is out, and
    /// that the others go on.
    pub(super) fn overdue_note(&self, now: Millis) -> Option<String> {
        let after = self.overdue_after()?;
        let oldest = self
            .in_flight
            .iter()
            .filter(|a| !a.unsent && now.saturating_sub(a.sent) > after)
            .min_by_key(|a| a.sent)?;
        let given_up_in = oldest
            .sent
            .saturating_add(oldest.timeout_ms)
            .saturating_sub(now);
        Some(format!(
            "{} request(s) unanswered, the oldest for {} (answers take under {}): counted \
             as reaching the server until answered, other requests go on; sent again with the \
             same idempotency key in {} without an answer",
            self.overdue(now),
            human_duration(now.saturating_sub(oldest.sent)),
            human_duration(after / 2),
            human_duration(given_up_in)
        ))
    }

    /// When the next attempt in flight becomes overdue and gives its slot back (see
    /// [`Budget::slots_taken`]), if one will.
    pub(super) fn slot_frees_at(&self, now: Millis) -> Option<Millis> {
        let after = self.overdue_after()?;
        if self.overdue(now) >= self.config.concurrency as usize {
            return None;
        }
        self.in_flight
            .iter()
            .filter(|a| !a.unsent)
            .map(|a| a.sent.saturating_add(after).saturating_add(1))
            .filter(|&t| t > now)
            .min()
    }

    /// When the next request of this budget may start (see [`BudgetState::next_start_at`]),
    /// counting the slots the overdue attempts gave back; when every slot is taken, the
    /// instant one is given back, if one will be.
    pub(super) fn next_start_at(&self, now: Millis) -> Option<Millis> {
        let concurrency = self.concurrency_cap.allowed(self.config.concurrency);
        let taken = self.slots_taken(now);
        self.state
            .next_start_at(now, taken, concurrency)
            .or_else(|| {
                let t = self.slot_frees_at(now)?;
                self.state
                    .next_start_at(t, self.slots_taken(t), concurrency)
            })
    }

    /// A request in flight for longer than any usual trip may still be on its way, or have
    /// arrived at any moment since it left (a lost answer, a stalled connection): it is counted
    /// as if it arrived now, for as long as it stays unanswered. While it is one of the recent
    /// starts that costs nothing; once it is as old as a window, it is what keeps the window's
    /// count true. Returns whether anything moved.
    pub(super) fn count_overdue_as_arriving(&mut self, now: Millis) -> bool {
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
    pub(super) fn follow_round_trips(&mut self) -> bool {
        if let Some(spread) = self.round_trips.arrival_spread() {
            self.state.limiter.set_arrival_spread(spread);
        }
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
