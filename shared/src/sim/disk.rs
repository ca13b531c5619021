//! The simulated worker's storage: what it persisted (its "IndexedDB"), and the saves on their
//! way there. Kept apart from the run because a kill must lose exactly the saves in flight and
//! nothing that landed, and that is easiest to see in one small type.

use std::collections::{HashMap, VecDeque};

use crate::budget::BudgetState;
use crate::engine::{Changes, Engine, Transmit};
use crate::job::{Job, JobId};
use crate::time::{DurationMs, Millis};

/// Whose save it is.
pub(super) enum Saver {
    Pump,
    /// A page request's (an enqueue's), with the starts it carries and the jobs whose enqueue
    /// it acknowledges.
    Request {
        starts: Vec<Transmit>,
        enqueued: Vec<JobId>,
    },
}

/// A save begun and not landed yet.
struct SaveInFlight {
    changes: Changes,
    by: Saver,
}

/// Like IndexedDB's transactions on the same stores, each save waits for the one before it and
/// then takes `save_ms`.
#[derive(Default)]
pub(super) struct Disk {
    jobs: HashMap<JobId, Job>,
    budgets: HashMap<String, BudgetState>,
    /// Finished jobs the engine forgot after the retention time: their last saved state, so
    /// the report can still count them.
    forgotten: HashMap<JobId, Job>,
    /// Saves begun and not landed, oldest first.
    saves: VecDeque<SaveInFlight>,
    /// When the last save queued lands, and the next may begin.
    free_at: Millis,
}

impl Disk {
    /// Queues a save behind those in flight and returns when it lands.
    pub(super) fn begin(
        &mut self,
        changes: Changes,
        by: Saver,
        now: Millis,
        save_ms: DurationMs,
    ) -> Millis {
        self.free_at = self.free_at.max(now) + save_ms;
        self.saves.push_back(SaveInFlight { changes, by });
        self.free_at
    }

    /// The oldest save in flight lands: the storage takes it, the engine learns it. Returns
    /// whose it was, for them to go on.
    pub(super) fn land_oldest(&mut self, engine: &mut Engine) -> Option<Saver> {
        let SaveInFlight { changes, by } = self.saves.pop_front()?;
        engine.persistence().on_saved(changes.save);
        for j in changes.jobs {
            self.jobs.insert(j.id.clone(), j);
        }
        for id in changes.removed {
            if let Some(j) = self.jobs.remove(&id) {
                if j.state.is_terminal() {
                    self.forgotten.insert(id, j);
                }
            }
        }
        for b in changes.budgets {
            self.budgets.insert(b.name.clone(), b);
        }
        Some(by)
    }

    /// The worker was killed: its saves in flight never land, and the next one begins at once.
    pub(super) fn lose_saves_in_flight(&mut self, now: Millis) {
        self.saves.clear();
        self.free_at = now;
    }

    /// What a new worker instance reads back.
    pub(super) fn saved(&self) -> (Vec<Job>, Vec<BudgetState>) {
        let jobs = self.jobs.values().cloned().collect();
        let budgets = self.budgets.values().cloned().collect();
        (jobs, budgets)
    }

    pub(super) fn forgotten(&self) -> &HashMap<JobId, Job> {
        &self.forgotten
    }
}
