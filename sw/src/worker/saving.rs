//! Saving: every engine change is written in one IndexedDB transaction before anyone hears of
//! it, and what happens while storage is full (starts go on unrecorded, new work is refused,
//! the queue waits for room while a journal is pending).

use sluice_shared::protocol::JobUpdate;
use sluice_shared::{Changes, JobId, Lane, Millis, StorageMode, Transmit};

use crate::error::SwError;
use crate::runtime::{now_ms, warn};
use crate::store::MetaOp;

use super::Worker;

/// While storage is full, how often a save of the queue's changes is tried against it: a
/// refused transaction costs as much as one that lands, and the space comes back when
/// something else frees it, which the worker cannot hear of.
const FULL_STORAGE_RETRY_MS: u64 = 1_000;

impl Worker {
    /// Saves everything the engine changed since the last commit, in one transaction, then
    /// queues it for broadcasting. Call right after mutating the engine, with no await in
    /// between, so transactions are created in the engine's order.
    ///
    /// A save of the queue's own changes (the pump's, a cancel's: no new jobs, no `meta`) that
    /// storage refuses for want of space does not stop the queue: see
    /// [`Worker::go_on_unrecorded`].
    pub async fn commit(&self, meta: &[MetaOp]) -> Result<(), SwError> {
        self.save_changes(meta, None).await
    }

    /// [`Worker::commit`] for a request that adds jobs, naming the ones just created (a large
    /// set of them is journaled). Such a save is never kept in memory only: refused, it stops
    /// the instance, and the page is told that nothing of it was saved.
    pub async fn commit_fresh(&self, meta: &[MetaOp], fresh: &[JobId]) -> Result<(), SwError> {
        self.save_changes(meta, Some(fresh)).await
    }

    pub(super) async fn save_changes(
        &self,
        meta: &[MetaOp],
        fresh: Option<&[JobId]>,
    ) -> Result<(), SwError> {
        if self.is_stopped() {
            return Err(SwError::Stopped);
        }
        let own_changes = fresh.is_none() && meta.is_empty();
        if own_changes && self.full_until.get().is_some() {
            return self.save_while_full().await;
        }
        let mut changes = self.engine.borrow_mut().persistence().take_changes();
        if changes.is_empty() && meta.is_empty() {
            return Ok(());
        }
        self.pump.saved_at(now_ms());
        let mut meta = meta.to_vec();
        meta.extend(self.counts_to_save());
        // Jobs added below are written, not news: only these go to the pages.
        let changed = changes.jobs.len();
        self.finish_journals_if_removing(&mut changes, &mut meta);
        self.carry_journal_share(&mut changes, &mut meta, changed);
        match self.store.save(&changes, &meta, fresh.unwrap_or(&[])).await {
            Ok(journaled) => {
                self.engine
                    .borrow_mut()
                    .persistence()
                    .on_saved(changes.save);
                // Whatever a refused save held back was written before this one or by it.
                self.journals_wait_for_room.set(false);
                if journaled.is_none() {
                    self.note_written(&changes.jobs);
                }
                self.write_journaled(journaled);
            }
            // Not once this instance stopped (a refused save of new jobs stopped it meanwhile):
            // storage is the next instance's then, which sends what this one did not save.
            Err(SwError::StorageFull(_)) if own_changes && !self.is_stopped() => {
                self.keep_journals(&meta);
                return self.go_on_unrecorded(changes, changed).await;
            }
            Err(e) => {
                self.stop(&format!("saving failed: {e}"));
                return Err(e);
            }
        }
        self.announce(changes, changed);
        Ok(())
    }

    /// Storage is full (it refused a save of the queue's own changes): the queue goes on
    /// sending rather than stop for want of storage it does not need to send. What the save
    /// held waits in memory for room
    /// ([`Persistence::retake`](sluice_shared::engine::Persistence::retake)). A delete still goes
    /// through on a full storage, so the records of jobs that ended are deleted (a restart must
    /// not send them again; what they became is in memory and with the pages), and so is the mark
    /// that storage holds every start (a restart then counts the windows as full,
    /// [`Persistence::count_unrecorded_sends`](sluice_shared::engine::Persistence::count_unrecorded_sends)).
    /// Only once that landed do starts go out without a save ([`StorageMode::Unrecorded`], or
    /// `Held` while a journal entry still holds jobs). New jobs are refused meanwhile
    /// ([`Worker::refuse_while_full`]).
    pub(super) async fn go_on_unrecorded(
        &self,
        changes: Changes,
        changed: usize,
    ) -> Result<(), SwError> {
        self.engine.borrow_mut().persistence().retake(&changes);
        let mut ended = changes.removed.clone();
        for job in &changes.jobs[..changed] {
            if job.state.is_terminal() {
                ended.push(job.id.clone());
            }
        }
        *self.saved_counts.borrow_mut() = None;
        if let Err(e) = self.store.delete_unrecorded(&ended).await {
            self.stop(&format!("saving failed on a full storage: {e}"));
            return Err(e);
        }
        let journal_pending = !self.journals.borrow().is_empty();
        self.engine
            .borrow_mut()
            .persistence()
            .set_storage_mode(if journal_pending {
                StorageMode::Held
            } else {
                StorageMode::Unrecorded
            });
        if self.full_until.get().is_none() {
            warn("storage is full: the queue goes on sending");
            self.full_until.set(Some(now_ms() + FULL_STORAGE_RETRY_MS));
            self.batcher.borrow_mut().mark_status();
        }
        self.announce(changes, changed);
        Ok(())
    }

    /// A save of the queue's own changes while storage is full. Once a
    /// [`FULL_STORAGE_RETRY_MS`], everything held is tried against storage again with what
    /// changed since, and with the mark that storage holds every start: when that lands,
    /// storage has room again. Otherwise what changed since the last save goes on as
    /// [`Worker::go_on_unrecorded`] says.
    pub(super) async fn save_while_full(&self) -> Result<(), SwError> {
        // Both taken at once, so that what is held stays apart from what is news.
        let (news, all) = {
            let mut engine = self.engine.borrow_mut();
            let news = engine.persistence().take_changes();
            let due = self.full_until.get().is_some_and(|t| now_ms() >= t);
            let all = due.then(|| {
                let mut saves = engine.persistence();
                saves.retake(&news);
                saves.release_held();
                saves.take_changes()
            });
            (news, all)
        };
        self.pump.saved_at(now_ms());
        if let Some(all) = all {
            let mut meta = vec![MetaOp::PutSchema];
            meta.extend(self.counts_to_save());
            match self.store.save(&all, &meta, &[]).await {
                Ok(_) => {
                    let mut engine = self.engine.borrow_mut();
                    let mut saves = engine.persistence();
                    saves.on_saved(all.save);
                    saves.set_storage_mode(StorageMode::Recorded);
                    drop(engine);
                    self.full_until.set(None);
                    self.journals_wait_for_room.set(false);
                    // A held queue starts again.
                    self.pump.wake();
                    warn("storage has room again");
                    // What was held was told when it happened (`go_on_unrecorded`); only what
                    // changed since is news.
                    let changed = news.jobs.len();
                    self.announce(news, changed);
                    return Ok(());
                }
                Err(SwError::StorageFull(_)) => {
                    self.engine.borrow_mut().persistence().retake(&all);
                    self.full_until.set(Some(now_ms() + FULL_STORAGE_RETRY_MS));
                }
                Err(e) => {
                    self.stop(&format!("saving failed: {e}"));
                    return Err(e);
                }
            }
        }
        if news.is_empty() {
            return Ok(());
        }
        let changed = news.jobs.len();
        self.go_on_unrecorded(news, changed).await
    }

    /// The status counts for the save about to be issued to write beside its jobs, when they
    /// differ from what the saves issued before it leave in storage. Compared with what was
    /// issued, not with what landed: a save that fails stops the instance, or (storage full)
    /// deletes the counts ([`Worker::go_on_unrecorded`]). While part of the queue is read and
    /// its counts are not known (none were saved, or they did not match the head), saved ones
    /// are deleted rather than left to a later start.
    fn counts_to_save(&self) -> Option<MetaOp> {
        let engine = self.engine.borrow();
        let counts =
            (self.has_whole_queue() || engine.counts_unread_jobs()).then(|| engine.tally_to_save());
        let mut saved = self.saved_counts.borrow_mut();
        if *saved == counts {
            return None;
        }
        *saved = counts.clone();
        Some(counts.map_or(MetaOp::DeleteCounts, MetaOp::PutCounts))
    }

    /// While storage is full, a request that would add to it is refused before it changes
    /// anything. An idle queue has no save of its own to find out that storage has room
    /// again, so the request tries it first (at most once a [`FULL_STORAGE_RETRY_MS`]) and
    /// goes ahead when that lands.
    pub(super) async fn refuse_while_full(&self) -> Result<(), SwError> {
        if self.full_until.get().is_some_and(|t| now_ms() >= t) {
            self.save_while_full().await?;
        }
        if self.full_until.get().is_some() {
            return Err(SwError::StorageFull(
                "it refused the queue's last save; jobs already queued go on being sent".into(),
            ));
        }
        Ok(())
    }

    /// Queues what a save took for broadcasting.
    pub(super) fn announce(&self, mut changes: Changes, changed: usize) {
        let mut batcher = self.batcher.borrow_mut();
        batcher.push_removed(&changes.removed);
        changes.jobs.truncate(changed);
        if !changes.jobs.is_empty() || !changes.started.is_empty() {
            let mut urgent = false;
            let mut updates = Vec::with_capacity(changes.jobs.len() + changes.started.len());
            for job in changes.jobs.iter().chain(&changes.started) {
                urgent |= job.lane == Lane::Interactive;
                updates.push(JobUpdate::from(job));
            }
            batcher.push(updates, urgent);
            // Urgent updates go out as soon as the pump runs; let it run.
            self.pump.wake();
        } else {
            batcher.mark_status();
        }
    }

    /// What may start now, taken while handling a request so that its starts are saved in
    /// the request's own transaction (see [`sluice_shared::pump::Pump::request_save_begins`]).
    /// Hand them back with [`Worker::commit_with_starts`].
    pub(super) fn poll_with_request(&self, now: Millis) -> Vec<Transmit> {
        self.pump
            .request_save_begins(&mut self.engine.borrow_mut(), now)
    }

    /// Saves a request's changes with the starts [`Worker::poll_with_request`] took, then
    /// hands those to the pump (nothing goes out when the save failed).
    pub(super) async fn commit_with_starts(
        &self,
        starts: Vec<Transmit>,
        fresh: &[JobId],
    ) -> Result<(), SwError> {
        let saved = self.commit_fresh(&[], fresh).await;
        self.pump.request_save_ended(starts, saved.is_ok());
        saved
    }

    /// Whether the engine holds changes no save has taken yet.
    pub fn has_changes(&self) -> bool {
        self.engine.borrow().has_changes()
    }

    /// Resolves once every save started before this call has ended (a failed one stops the
    /// instance).
    pub async fn earlier_saves_ended(&self) -> Result<(), SwError> {
        self.store.saved().await?;
        if self.is_stopped() {
            return Err(SwError::Stopped);
        }
        Ok(())
    }
}
