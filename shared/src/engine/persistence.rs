//! Saving: what changed since the last save and the protocol around it, behind one view,
//! [`Persistence`] (`engine.persistence()`): `take_changes`, `on_saved`, and what a storage
//! that is full asks for (`retake`, `release_held`, [`StorageMode`],
//! `count_unrecorded_sends`), and `hand_over` to a successor. The worker's pump and the
//! simulator call them in the order `pump` writes down.

use super::*;

impl Engine {
    /// Whether any request is out waiting for its answer.
    pub fn is_sending(&self) -> bool {
        self.budgets.values().any(|b| !b.in_flight.is_empty())
    }

    /// Whether [`Persistence::take_changes`] has anything to take (besides what it decides itself).
    pub fn has_changes(&self) -> bool {
        self.saves.has_changes()
    }

    /// The save protocol's view of the engine (see the module docs).
    pub fn persistence(&mut self) -> Persistence<'_> {
        Persistence { engine: self }
    }
}

/// The engine as the worker's storage sees it: what to save, what landed, what storage
/// refused. Only a view: the state it changes is the engine's (its `SaveLedger`, each budget's
/// mark and unsaved starts, the storage mode).
pub struct Persistence<'a> {
    engine: &'a mut Engine,
}

impl Persistence<'_> {
    /// Everything that changed since the last call, to save (then broadcast).
    pub fn take_changes(&mut self) -> Changes {
        // Both in id order: a job that also changed otherwise is saved, not just told.
        // Plain loops here: each filtered `collect` is several generic functions in the wasm.
        let changed = self.engine.saves.take_changed_jobs();
        let mut started = Vec::new();
        for id in self.engine.saves.take_started_jobs() {
            if changed.binary_search(&id).is_err() {
                if let Some(job) = self.engine.table.get(&id) {
                    started.push(job.clone());
                }
            }
        }
        let mut jobs = Vec::with_capacity(changed.len());
        for id in &changed {
            if let Some(job) = self.engine.table.get(id) {
                jobs.push(job.clone());
            }
        }
        let removed = self.engine.saves.take_removed();
        let save = self.engine.saves.begin_save();
        let mut carried = Vec::new();
        for (name, b) in self.engine.budgets.iter_mut() {
            // A budget with nothing in flight and nothing ready has no start that could go out
            // unsaved: its next start is saved first again, and a restore owes nothing. (Starts
            // carried by earlier saves are saved once this one is: saves land in order.)
            if b.state.sends_before_saving && b.in_flight.is_empty() && !b.has_ready() {
                b.state.sends_before_saving = false;
                b.mark = Mark::NotSaved;
                self.engine.saves.budget_changed(name.clone());
            }
            if b.state.sends_before_saving && b.mark == Mark::NotSaved {
                b.mark = Mark::Saving(save);
                self.engine.saves.budget_changed(name.clone());
            }
            if b.untaken_starts > 0 {
                carried.push((name.clone(), std::mem::take(&mut b.untaken_starts)));
            }
        }
        self.engine.saves.carries(save, carried);
        let mut budgets = Vec::new();
        for name in self.engine.saves.take_changed_budgets() {
            if let Some(b) = self.engine.budgets.get(&name) {
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
        for b in self.engine.budgets.values_mut() {
            if matches!(b.mark, Mark::Saving(s) if s <= save) {
                b.mark = Mark::Saved;
            }
        }
        while let Some(carried) = self.engine.saves.pop_confirmed(save) {
            for (name, n) in carried {
                if let Some(b) = self.engine.budgets.get_mut(&name) {
                    b.unsaved_starts = b.unsaved_starts.saturating_sub(n);
                }
            }
        }
    }

    /// Storage refused the save `changes` (it is full): nothing of it landed. What it held is
    /// held apart from the next saves until [`Persistence::release_held`], which marks it again
    /// for the save after, taken as it is by then.
    pub fn retake(&mut self, changes: &Changes) {
        self.engine.saves.hold(changes);
    }

    /// Marks again everything [`Persistence::retake`] held: call before the save that tries
    /// storage again.
    pub fn release_held(&mut self) {
        self.engine.saves.release_held();
    }

    /// How starts relate to storage from now on (see [`StorageMode`]): the worker says
    /// `Unrecorded` or `Held` once storage refuses every save, and `Recorded` once a save
    /// lands again.
    pub fn set_storage_mode(&mut self, mode: StorageMode) {
        self.engine.storage = mode;
    }

    /// A restore from storage that misses the record of some starts (they went out while
    /// storage was full, [`StorageMode::Unrecorded`]): each budget counts its largest window's
    /// limit at `now`, the careful side, as none of those starts can have been later than
    /// `now`. Sending resumes once the windows have moved past them.
    pub fn count_unrecorded_sends(&mut self, now: Millis) {
        for (name, b) in self.engine.budgets.iter_mut() {
            let mut most = 0;
            for w in b.state.limiter.windows() {
                most = most.max(w.limit);
            }
            b.state.count_unsaved_starts(most, now);
            b.state
                .resources
                .count_unrecorded(&b.config.resources, most, now);
            self.engine.saves.budget_changed(name.clone());
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
        for (name, b) in self.engine.budgets.iter_mut() {
            if b.state.sends_before_saving && b.in_flight.is_empty() && b.untaken_starts == 0 {
                b.state.sends_before_saving = false;
                b.mark = Mark::NotSaved;
                self.engine.saves.budget_changed(name.clone());
                changed = true;
            }
        }
        changed
    }
}

/// How starts relate to storage: one state, where two flags once allowed a fourth
/// combination (held while recorded) that meant nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageMode {
    /// Storage takes saves: a start waits for the save that records it whenever the budget
    /// asks for one (see `Transmit::save_first`).
    Recorded,
    /// Storage refuses every save (it is full): starts go out without a save first. A start
    /// that waited for a save would wait for space, and the queue would stop for want of
    /// storage it does not need to send. The price is the record of the starts: the worker
    /// marks storage as missing them (a delete still goes through on a full storage), and the
    /// next start from storage counts every window as full
    /// ([`Persistence::count_unrecorded_sends`]).
    Unrecorded,
    /// Storage is full and nothing starts at all. The worker holds the queue so while a
    /// journal entry in storage still holds jobs (a large batch saved in one record, then
    /// written one job per record): a restart fills in from the entry every job whose own
    /// record is missing, and while storage is full the record of a job that ends is deleted,
    /// so a job that ended then would come back from the entry and be sent again. Requests
    /// already out may still end meanwhile: a restart while storage is still full sends those
    /// again, with the same keys, as after a crash.
    Held,
}
