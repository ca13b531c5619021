//! Journals: a large `enqueueMany` is saved as one journal record, then written one job per
//! record a few at a time by later saves; an entry goes once all its jobs are written.

use sluice_shared::{Changes, Job};

use crate::runtime::spawn;
use crate::store::{Journaled, MetaOp, JOURNAL_CHUNK};

use super::{add_jobs, Worker};

/// Jobs each save writes one per record while requests are out, its own changes counted
/// first and journaled jobs making up the rest (see [`Worker::carry_journal_share`]). A `put`
/// costs the worker thread itself about 0.14 ms per job (the record is cloned where it is
/// called): at 25 per save, saves took a third of the
/// thread in a bulk job's first second and its first hundred starts came 30-170 ms late; at 8
/// it is about a millisecond per save, and a 2,000-job `enqueueMany` is written one per record
/// within its first 4 s of sending (10,000: 20 s; a worker stopped before then rebuilds from
/// the whole store, which is slower but loses nothing).
const JOURNAL_SHARE: usize = 8;

impl Worker {
    /// Queues a journal entry's jobs to be written one per record (see `store`, "Large
    /// batches") and starts the writer if it is not running.
    pub(super) fn write_journaled(&self, journaled: Option<Journaled>) {
        if let Some(journaled) = journaled {
            self.journals.borrow_mut().push(journaled);
        }
        if self.journals.borrow().is_empty() || self.engine.borrow().is_sending() {
            return;
        }
        if self.writing_journals.replace(true) {
            return;
        }
        let me = self.me.clone();
        spawn(async move {
            while let Some(w) = me.upgrade() {
                // While requests are out, the pump saves every few milliseconds and each of
                // its saves carries a share (see `carry_journal_share`): a chunk of our own
                // would only hold those saves, and the starts waiting for them, behind it.
                if w.engine.borrow().is_sending() || !w.write_journal_chunk().await {
                    w.writing_journals.set(false);
                    break;
                }
            }
        });
    }

    /// Adds the next few journaled jobs to a save that is going out anyway (and the entry's
    /// deletion once it is empty), so that a large `enqueueMany` is written one per record
    /// without a transaction of its own while the pump is busy. A save writes
    /// [`JOURNAL_SHARE`] jobs in all, the `changed` ones of its own first: a save carrying
    /// that many outcomes carries no share. The share comes from the back of the entry,
    /// skipping jobs a save has written since (see [`Worker::note_written`]): its front goes
    /// out first, and each of those is written with its outcome anyway.
    ///
    /// Before, a share of 8 from the front came with every save: at 600 requests a second
    /// nearly every job of a bulk send was written twice (2.1 puts a job in `sluice bench
    /// --ceiling`), once just before it went out and once with its outcome, and a `put` is
    /// a fair share of what a request costs the browser (issue 40).
    pub(super) fn carry_journal_share(
        &self,
        changes: &mut Changes,
        meta: &mut Vec<MetaOp>,
        changed: usize,
    ) {
        let share = JOURNAL_SHARE.saturating_sub(changed);
        let ids = {
            let mut journals = self.journals.borrow_mut();
            let mut written = self.written_since_journal.borrow_mut();
            let Some(front) = journals.first_mut() else {
                return;
            };
            // Jobs already written leave the entry whatever the share, so that an entry whose
            // jobs were all written with their outcomes goes even while every save is full.
            let mut ids = Vec::with_capacity(share);
            while let Some(id) = front.jobs.last() {
                if written.contains_key(id) {
                    front.jobs.pop();
                } else if ids.len() < share {
                    ids.extend(front.jobs.pop());
                } else {
                    break;
                }
            }
            if front.jobs.is_empty() {
                meta.push(MetaOp::DeleteJournal(front.id.clone()));
                journals.remove(0);
                if journals.is_empty() {
                    written.clear();
                }
            }
            ids
        };
        add_jobs(changes, &self.engine.borrow(), &ids);
    }

    /// A save landed that wrote `jobs` one per record: the entries holding them need not
    /// write them again. Not a save that journaled new jobs itself: those are in `jobs` too
    /// but not one per record, and a job of an older entry that it wrote is written once
    /// more at worst.
    pub(super) fn note_written(&self, jobs: &[Job]) {
        if self.journals.borrow().is_empty() {
            return;
        }
        let mut written = self.written_since_journal.borrow_mut();
        for job in jobs {
            written.insert(job.id.clone(), 0);
        }
    }

    /// Writes the next chunk of the oldest journal entry; `false` once there is nothing left
    /// (or this instance stopped). A chunk that fails stops the instance: memory may now differ
    /// from what a restart would load, and a restart merges the journal.
    pub(super) async fn write_journal_chunk(&self) -> bool {
        if self.is_stopped() || self.journals_wait_for_room.get() || self.full_until.get().is_some()
        {
            return false;
        }
        let (ids, last_of) = {
            let mut journals = self.journals.borrow_mut();
            let Some(front) = journals.first_mut() else {
                return false;
            };
            let n = front.jobs.len().min(JOURNAL_CHUNK);
            let mut written = self.written_since_journal.borrow_mut();
            let mut ids = Vec::with_capacity(n);
            for id in front.jobs.drain(..n) {
                if !written.contains_key(&id) {
                    ids.push(id);
                }
            }
            let last_of = front.jobs.is_empty().then(|| front.id.clone());
            if last_of.is_some() {
                journals.remove(0);
                if journals.is_empty() {
                    written.clear();
                }
            }
            (ids, last_of)
        };
        // Plain loops in this module: each mapped or filtered `collect` is several generic
        // functions in the wasm.
        let mut jobs: Vec<Job> = Vec::with_capacity(ids.len());
        {
            let engine = self.engine.borrow();
            for id in &ids {
                if let Some(job) = engine.job(id) {
                    jobs.push(job.clone());
                }
            }
        }
        let refs: Vec<&Job> = jobs.iter().collect();
        if let Err(e) = self.store.put_jobs(&refs, last_of.as_deref()).await {
            self.stop(&format!("writing a journaled batch failed: {e}"));
            return false;
        }
        true
    }

    /// A save that removes a job while a journal entry is still there must also finish the
    /// entry: a restart would otherwise bring the job back from it, as it was enqueued, and
    /// send it again. Not only a job the entry still lists: one it already wrote (or skipped,
    /// written with its outcome) is in the entry's record all the same. Adds every job still
    /// to write to `changes`, and the entries' deletion to `meta`. (Rare: only a job that
    /// ends and is forgotten, dismissed or expired while its `enqueueMany` is still being
    /// written one per record gets here.)
    pub(super) fn finish_journals_if_removing(
        &self,
        changes: &mut Changes,
        meta: &mut Vec<MetaOp>,
    ) {
        if changes.removed.is_empty() || self.journals.borrow().is_empty() {
            return;
        }
        let engine = self.engine.borrow();
        for journal in self.journals.borrow_mut().drain(..) {
            add_jobs(changes, &engine, &journal.jobs);
            meta.push(MetaOp::DeleteJournal(journal.id));
        }
        self.written_since_journal.borrow_mut().clear();
    }

    /// A save that was to delete journal entries was refused (storage is full): they go back
    /// on the list, with no job left to write, and a later save deletes them, after the one
    /// that writes what the refused one held. Not the chunk writer while storage is full: its
    /// delete would go through, before those jobs are written.
    pub(super) fn keep_journals(&self, meta: &[MetaOp]) {
        for op in meta {
            if let MetaOp::DeleteJournal(id) = op {
                self.journals_wait_for_room.set(true);
                self.journals.borrow_mut().insert(
                    0,
                    Journaled {
                        id: id.clone(),
                        jobs: Vec::new(),
                    },
                );
            }
        }
    }
}
