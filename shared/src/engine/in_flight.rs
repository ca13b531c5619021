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
use crate::config::{BudgetConfig, ConfigError, EngineConfig};
use crate::job::JobId;
use crate::preflight::Preflights;
use crate::round_trips::RoundTrips;
use crate::time::{DurationMs, Millis};

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
    /// Of those, the ones no [`Engine::take_changes`](super::Engine::take_changes) has taken yet.
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
}

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
        })
    }

    pub(super) fn has_ready(&self) -> bool {
        self.ready.has_ready()
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
