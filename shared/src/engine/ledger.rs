//! The save ledger: what changed since the last save, and which saves taken but not yet
//! confirmed carry starts that went out unsaved.
//!
//! The engine saves by difference: every change marks an id here, and
//! [`Persistence::take_changes`](super::Persistence::take_changes) takes the marks in one go, so a burst
//! of changes to one job is one write. The starts a save carries are kept per save because a
//! start counts as saved only once the save that took it is confirmed, and only then may
//! another start go out unsaved (see [`Transmit::save_first`](super::Transmit::save_first)).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::budget::BudgetState;
use crate::job::{Job, JobId};

/// What changed since the last call to
/// [`Persistence::take_changes`](super::Persistence::take_changes): save it, then broadcast it.
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
    /// Names this save for [`Persistence::on_saved`](super::Persistence::on_saved).
    #[serde(default)]
    pub save: SaveId,
}

/// One [`Persistence::take_changes`](super::Persistence::take_changes), in the order they were taken.
pub type SaveId = u64;

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.started.is_empty()
            && self.removed.is_empty()
            && self.budgets.is_empty()
    }
}

/// The marks of what changed since the last save, and the saves still unconfirmed that carry
/// unsaved starts.
#[derive(Default)]
pub(super) struct SaveLedger {
    changed_jobs: IdSet,
    /// Jobs that started since the last take (see [`Changes::started`]).
    started_jobs: IdSet,
    removed_jobs: IdSet,
    changed_budgets: IdSet,
    /// The id of the next save taken.
    next_save: SaveId,
    /// Saves taken but not yet confirmed that carry unsaved starts, oldest first, with how
    /// many each carries per budget.
    saves_with_starts: VecDeque<(SaveId, Vec<(String, u32)>)>,
    /// The marks of saves that storage refused, held apart until the caller tries to save
    /// them again (see [`Persistence::retake`](super::Persistence::retake)): taken with every save,
    /// they would make each save while storage is full as large as everything since.
    held_jobs: IdSet,
    held_removed: IdSet,
    held_budgets: IdSet,
}

impl SaveLedger {
    /// The job is to be saved (then broadcast).
    pub(super) fn job_changed(&mut self, id: JobId) {
        self.changed_jobs.insert(id);
    }

    /// The job started: to broadcast, and to save only if it also changed otherwise.
    pub(super) fn job_started(&mut self, id: JobId) {
        self.started_jobs.insert(id);
    }

    pub(super) fn job_removed(&mut self, id: JobId) {
        self.removed_jobs.insert(id);
    }

    pub(super) fn budget_changed(&mut self, name: String) {
        self.changed_budgets.insert(name);
    }

    /// Holds the marks of a save that storage refused, apart from the next saves.
    pub(super) fn hold(&mut self, changes: &Changes) {
        for job in &changes.jobs {
            self.held_jobs.insert(job.id.clone());
        }
        for id in &changes.removed {
            self.held_removed.insert(id.clone());
        }
        for b in &changes.budgets {
            self.held_budgets.insert(b.name.clone());
        }
    }

    /// Marks everything held again, for the next save to take.
    pub(super) fn release_held(&mut self) {
        self.changed_jobs.0.append(&mut self.held_jobs.0);
        self.removed_jobs.0.append(&mut self.held_removed.0);
        self.changed_budgets.0.append(&mut self.held_budgets.0);
    }

    /// Whether anything is marked.
    pub(super) fn has_changes(&self) -> bool {
        !(self.changed_jobs.is_empty()
            && self.started_jobs.is_empty()
            && self.removed_jobs.is_empty()
            && self.changed_budgets.is_empty())
    }

    /// The changed jobs, in id order.
    pub(super) fn take_changed_jobs(&mut self) -> Vec<JobId> {
        self.changed_jobs.take()
    }

    /// The started jobs, in id order (some may also be among the changed ones).
    pub(super) fn take_started_jobs(&mut self) -> Vec<JobId> {
        self.started_jobs.take()
    }

    pub(super) fn take_removed(&mut self) -> Vec<JobId> {
        self.removed_jobs.take()
    }

    /// Names the save being taken.
    pub(super) fn begin_save(&mut self) -> SaveId {
        let save = self.next_save;
        self.next_save += 1;
        save
    }

    /// The save `save` carries these unsaved starts, per budget.
    pub(super) fn carries(&mut self, save: SaveId, starts: Vec<(String, u32)>) {
        if !starts.is_empty() {
            self.saves_with_starts.push_back((save, starts));
        }
    }

    pub(super) fn take_changed_budgets(&mut self) -> Vec<String> {
        self.changed_budgets.take()
    }

    /// The unsaved starts of the oldest save that `save`'s confirmation covers (saves land in
    /// the order they were taken), if one is left: call until `None`.
    pub(super) fn pop_confirmed(&mut self, save: SaveId) -> Option<Vec<(String, u32)>> {
        let (id, _) = self.saves_with_starts.front()?;
        if *id > save {
            return None;
        }
        self.saves_with_starts
            .pop_front()
            .map(|(_, carried)| carried)
    }
}

/// A set of ids, taken in id order. Added as they come (an id may be added many times) and
/// sorted once, when taken: ids are random, and keeping them in order as they come would move
/// memory on every add (a 10,000-job `enqueueMany` adds 10,000).
#[derive(Default)]
pub(super) struct IdSet(Vec<String>);

impl IdSet {
    pub(super) fn insert(&mut self, id: String) {
        self.0.push(id);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Empties the set, in id order, each id once.
    pub(super) fn take(&mut self) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::random::Rng;

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
