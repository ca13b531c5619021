//! One running worker instance: the engine, its store, and the rules that tie them together.
//!
//! # Storage is the truth, memory is a cache
//! - Every engine mutation is followed, in the same synchronous stretch, by
//!   [`Worker::commit`]: take the engine's changes and write them in one transaction. Replies,
//!   broadcasts and fetches happen only after that transaction committed ("write before you
//!   promise").
//! - If a write fails, the in-memory engine may hold changes nobody will ever save, so the
//!   instance stops ([`Worker::stop`]): its pump ends, late fetch results are ignored, and the
//!   next event rebuilds a fresh instance from storage with [`Engine::restore`]. A job whose
//!   `sending` state was never saved is simply still queued there; one that was saved as
//!   sending is sent again with the same idempotency key.
//! - Startup ([`crate::instance::worker`]) is shared: concurrent first events wait on one
//!   initialisation.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use js_sys::{Function, Object, Promise, Reflect};
use rustc_hash::FxHashMap;
use sluice_shared::protocol::{JobUpdate, ProtocolError, ReplyBody, Request, WorkerMessage};
use sluice_shared::random::Rng;
use sluice_shared::status::Status;
use sluice_shared::{
    Changes, Engine, EngineConfig, Enqueued, Job, JobId, JobSpec, Lane, Millis, Transmit,
};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::Url;

use crate::broadcast::{post_to_all, Batcher, JobNews};
use crate::config::{self, resolve_engine_prefixes, SavedConfig, Setup};
use crate::error::{describe, SwError};
use crate::pump_state::Pump;
use crate::runtime::{now_ms, scope, spawn, warn};
use crate::store::{job_id_of, Journaled, Loaded, MetaOp, SchemaRecord, Store, JOURNAL_CHUNK};

fn seeded_rng() -> Rng {
    let mut seed = [0u8; 32];
    let filled = scope()
        .crypto()
        .and_then(|c| c.get_random_values_with_u8_array(&mut seed).map(|_| ()))
        .is_ok();
    if !filled {
        warn("crypto.getRandomValues is unavailable; seeding from the clock");
        let t = (js_sys::Date::now() * 1000.0) as u64 ^ (js_sys::Math::random() * 1e18) as u64;
        return Rng::seeded(t);
    }
    Rng::from_seed(seed)
}

pub struct Worker {
    me: Weak<Worker>,
    pub setup: Rc<Setup>,
    store: Store,
    engine: RefCell<Engine>,
    batcher: RefCell<Batcher>,
    /// The tab (client id) that enqueued each job, while it runs: its outcome goes to that
    /// tab alone (see `broadcast::JobNews`). Memory only: after a restart every tab gets the
    /// state, and the page client asks for the outcome it waits on.
    requesters: RefCell<FxHashMap<JobId, String>>,
    /// Whether the task that posts broadcasts runs (one at a time; it drains `batcher`).
    broadcasting: Cell<bool>,
    pub pump: Pump,
    lifecycle: Cell<Lifecycle>,
    /// Whether a Background Sync is registered and its `sync` event not yet fired (one at a
    /// time).
    sync_requested: Cell<bool>,
    /// Shown in every status: records skipped at load, a configuration that was refused.
    notes: RefCell<Vec<String>>,
    /// Which job each folded job id lives on (see [`Folds`]).
    folds: RefCell<Folds>,
    /// Requests waiting for the whole saved queue ([`Worker::whole_queue`]).
    whole_queue_waiters: RefCell<Vec<Function>>,
    /// Journal entries whose jobs are still to be written one per record, oldest first. A
    /// `Vec`, not a `VecDeque`: entries are few, and a `VecDeque` of its own element type
    /// costs the wasm more code than the `Vec` does.
    journals: RefCell<Vec<Journaled>>,
    /// Whether the task that writes `journals` one per record runs (one at a time).
    writing_journals: Cell<bool>,
    /// Storage is full: set when it refused a save of the queue's own changes, cleared when a
    /// save lands again (see [`Worker::go_on_unrecorded`]); the next try is not before this.
    full_until: Cell<Option<Millis>>,
    /// Some of `journals` are entries whose jobs a refused save held back: they may not be
    /// deleted before a save lands (see [`Worker::keep_journals`]).
    journals_wait_for_room: Cell<bool>,
}

/// While storage is full, how often a save of the queue's changes is tried against it: a
/// refused transaction costs as much as one that lands, and the space comes back when
/// something else frees it, which the worker cannot hear of.
const FULL_STORAGE_RETRY_MS: u64 = 1_000;

/// Where an instance is in its life. A start reads the head of the saved queue
/// ([`Worker::start`]) and the rest after the pump's first save ([`Worker::load_rest`]); until
/// the rest is in, only the pump uses the engine and requests wait. A failed save, a refused
/// storage or a hand-over ends the instance for good: the next event starts a fresh one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lifecycle {
    /// The engine holds the head of the saved queue; the rest is not being read yet.
    HeadOnly,
    /// The rest of the saved queue is being read.
    ReadingRest,
    /// The engine holds the whole saved queue.
    Whole,
    /// Given up ([`Worker::stop`]); nothing more is sent, saved or posted from here.
    Stopped,
}

/// How many waiting jobs a start reads before the pump may send; the rest follows in chunks
/// of [`REST_CHUNK`], each its own short transaction decoded between two turns of the event
/// loop, so the pump's saves (which wait for a read in progress) go on meanwhile. 300 jobs
/// last three seconds at 100 per second, several times what reading the rest of a 10,000-job
/// queue takes.
const FIRST_JOBS_READ: u32 = 300;
const REST_CHUNK: u32 = 250;

/// Journaled jobs each save carries along while requests are out (see
/// [`Worker::carry_journal_share`]). A `put` costs the worker thread itself about 0.14 ms per
/// job (the record is cloned where it is called): at 25 per save, saves took a third of the
/// thread in a bulk job's first second and its first hundred starts came 30-170 ms late; at 8
/// it is about a millisecond per save, and a 2,000-job `enqueueMany` is written one per record
/// within its first 4 s of sending (10,000: 20 s; a worker stopped before then rebuilds from
/// the whole store, which is slower but loses nothing).
const JOURNAL_SHARE: usize = 8;

/// The ids of jobs that were folded into another job on enqueue (`Job::folded`), each with the
/// id of the job that carries it, sorted by folded id: an `enqueue` of such an id sent again
/// is answered with the carrier. A sorted list rather than a map: folds are few, and a map of
/// its own would cost the wasm more than this does.
#[derive(Default)]
pub struct Folds(Vec<(JobId, JobId)>);

impl Folds {
    fn of(engine: &Engine) -> Self {
        let mut folds = Folds::default();
        for job in engine.jobs() {
            for id in &job.folded {
                folds.insert(id.clone(), job.id.clone());
            }
        }
        folds
    }

    fn insert(&mut self, folded: JobId, carrier: JobId) {
        match self.0.binary_search_by(|(f, _)| f.as_str().cmp(&folded)) {
            Ok(i) => self.0[i].1 = carrier,
            Err(i) => self.0.insert(i, (folded, carrier)),
        }
    }

    fn carrier(&self, folded: &str) -> Option<&JobId> {
        let i = self
            .0
            .binary_search_by(|(f, _)| f.as_str().cmp(folded))
            .ok()?;
        Some(&self.0[i].1)
    }

    /// Records where a just enqueued job went, if it was folded into another one.
    fn note(&mut self, asked: Option<JobId>, result: &Enqueued) {
        if let Some(asked) = asked.filter(|a| *a != result.id) {
            self.insert(asked, result.id.clone());
        }
    }
}

/// Longest job id a page may choose.
const MAX_JOB_ID_BYTES: usize = 128;

/// A page-chosen job id must be short printable text (it is a storage key and shows in logs).
fn check_job_id(id: &str) -> Result<(), ProtocolError> {
    let problem = if id.is_empty() {
        "is empty"
    } else if id.len() > MAX_JOB_ID_BYTES {
        "is longer than 128 bytes"
    } else if id.chars().any(char::is_control) {
        "contains control characters"
    } else {
        return Ok(());
    };
    Err(ProtocolError::InvalidRequest {
        message: format!(
            "the job id '{}' {problem}; leave it out and the client picks one",
            id.chars().take(40).collect::<String>()
        ),
    })
}

impl Worker {
    /// Opens the database, rebuilds the engine from what is saved and saves what the rebuild
    /// changed (jobs that were sending go back to queued). A large queue is rebuilt in two
    /// steps (see [`Store::load_start`]): the pump may send as soon as its head is in, and
    /// [`Worker::load_rest`] adds the rest.
    pub async fn start(setup: Rc<Setup>) -> Result<Rc<Self>, SwError> {
        let store = Store::open().await?;
        let mut loaded = store.load_start(FIRST_JOBS_READ).await?;
        let mut notes = Vec::new();
        let (chosen, _source, stale) = config::choose(&setup.script, loaded.config.clone());
        let mut meta = Vec::new();
        if stale {
            meta.push(MetaOp::DeleteConfig);
        }
        if loaded.schema.as_ref() != Some(&SchemaRecord::current()) {
            meta.push(MetaOp::PutSchema);
        }
        let now = now_ms();
        let mut engine = None;
        let mut jobs = Some(std::mem::take(&mut loaded.jobs));
        for candidate in [chosen, setup.script.clone(), EngineConfig::default()] {
            // Tried without the jobs first, so that a refused configuration leaves them for
            // the next candidate (a copy of 10,000 jobs per try would cost more).
            let trial = Engine::restore(
                candidate.clone(),
                Rng::seeded(0),
                Vec::new(),
                loaded.budgets.clone(),
                now,
            );
            let restored = trial.and_then(|_| {
                Engine::restore(
                    candidate,
                    seeded_rng(),
                    jobs.take().unwrap_or_default(),
                    loaded.budgets.clone(),
                    now,
                )
            });
            match restored {
                Ok(e) => {
                    engine = Some(e);
                    break;
                }
                Err(e) => {
                    let note = format!("a configuration was refused at startup: {e}");
                    warn(&note);
                    notes.push(note);
                }
            }
        }
        let mut engine = engine.ok_or_else(|| SwError::Config("no usable configuration".into()))?;
        engine.set_identifier_source(Box::new(|bytes: &mut [u8; 16]| {
            scope()
                .crypto()
                .and_then(|c| c.get_random_values_with_u8_array(bytes).map(|_| ()))
                .is_ok()
        }));
        if loaded.schema.is_none() && !loaded.budgets.is_empty() {
            // Saved budgets without the mark that they hold every start: the last instance
            // sent while storage was full (see `Worker::go_on_unrecorded`).
            engine.count_unrecorded_sends(now);
            warn("starts went out unrecorded while storage was full: sending waits until every window has moved past them");
        }
        let folds = Folds::of(&engine);
        // What the rebuild changed (jobs that were sending are queued again) is saved by the
        // pump's first save, with its first starts, unless there is more to save now.
        let mut journaled = None;
        let mut journals = Vec::new();
        if !meta.is_empty() || !loaded.journals.is_empty() {
            let mut changes = engine.take_changes();
            // Jobs only a journal entry held are saved one per record now, and the entries go.
            add_jobs(&mut changes, &engine, &loaded.from_journals);
            meta.extend(loaded.journals.iter().cloned().map(MetaOp::DeleteJournal));
            match store.save(&changes, &meta, &loaded.from_journals).await {
                Ok(written) => {
                    journaled = written;
                    engine.on_saved(changes.save);
                }
                // A full storage refuses the rewrite of journaled jobs into records; the queue
                // starts anyway with storage as it is (the journals still hold those jobs, and
                // the changes a rebuild makes are made again by the next one), rather than not
                // at all. Later saves are small and go through while the disk has room.
                Err(SwError::StorageFull(e)) => {
                    // Marked again for the pump's first save (which finds storage full, and
                    // goes on as `Worker::go_on_unrecorded` says).
                    engine.retake(&changes);
                    engine.release_held();
                    // Each entry goes once there is room and its jobs are written (see
                    // `Worker::keep_journals`).
                    for id in &loaded.journals {
                        journals.push(Journaled {
                            id: id.clone(),
                            jobs: Vec::new(),
                        });
                    }
                    if !loaded.from_journals.is_empty() {
                        let note = format!(
                            "storage is full: {} journaled jobs stay in their journals ({e})",
                            loaded.from_journals.len()
                        );
                        warn(&note);
                        notes.push(note);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        let mut batcher = Batcher::default();
        batcher.hold_status(!loaded.complete);
        let w = Rc::new_cyclic(|me| Self {
            me: me.clone(),
            setup,
            store,
            engine: RefCell::new(engine),
            batcher: RefCell::new(batcher),
            requesters: RefCell::default(),
            broadcasting: Cell::new(false),
            pump: Pump::default(),
            lifecycle: Cell::new(if loaded.complete {
                Lifecycle::Whole
            } else {
                Lifecycle::HeadOnly
            }),
            sync_requested: Cell::new(false),
            notes: RefCell::new(notes),
            folds: RefCell::new(folds),
            whole_queue_waiters: RefCell::new(Vec::new()),
            journals_wait_for_room: Cell::new(!journals.is_empty()),
            journals: RefCell::new(journals),
            writing_journals: Cell::new(false),
            full_until: Cell::new(None),
        });
        w.note_unreadable(&loaded);
        w.write_journaled(journaled);
        Ok(w)
    }

    /// Counts records that could not be decoded into the notes every status shows.
    fn note_unreadable(&self, loaded: &Loaded) {
        if loaded.unreadable == 0 {
            return;
        }
        let note = format!(
            "{} saved records could not be read and were left untouched (first: {})",
            loaded.unreadable,
            loaded.first_problem.as_deref().unwrap_or("?")
        );
        warn(&note);
        self.notes.borrow_mut().push(note);
    }

    /// Starts the second step of a start (see [`Worker::start`]), once. The pump calls this
    /// after its first save: a read-only transaction holds up every later write to its stores,
    /// so reading the rest before that would hold up the first send.
    pub fn read_rest_of_queue(self: &Rc<Self>) {
        if self.lifecycle.get() != Lifecycle::HeadOnly {
            return;
        }
        self.lifecycle.set(Lifecycle::ReadingRest);
        spawn(self.clone().load_rest());
    }

    /// The second step of a start (see [`Worker::start`]): reads every saved job in chunks,
    /// decodes the ones the engine does not hold yet, and hands them to it at once (a key's
    /// jobs must be added in enqueue order). Then requests may use the engine.
    async fn load_rest(self: Rc<Self>) {
        let mut rest = Loaded::default();
        let mut after: Option<String> = None;
        loop {
            let records = match self.store.load_after(after.as_deref(), REST_CHUNK).await {
                Ok(r) => r,
                Err(e) => {
                    self.stop(&format!("reading the queue failed: {e}"));
                    return;
                }
            };
            if self.is_stopped() {
                return;
            }
            for value in records.iter() {
                let id = job_id_of(&value);
                if id
                    .as_deref()
                    .is_some_and(|id| self.engine.borrow().job(id).is_some())
                {
                    continue;
                }
                rest.add_job_value(&value);
            }
            if records.length() < REST_CHUNK {
                break;
            }
            after = job_id_of(&records.get(records.length() - 1));
            if after.is_none() {
                break;
            }
        }
        {
            let mut engine = self.engine.borrow_mut();
            engine.restore_more(std::mem::take(&mut rest.jobs), now_ms());
            *self.folds.borrow_mut() = Folds::of(&engine);
        }
        self.note_unreadable(&rest);
        self.batcher.borrow_mut().hold_status(false);
        self.batcher.borrow_mut().mark_status();
        if self.lifecycle.get() == Lifecycle::ReadingRest {
            self.lifecycle.set(Lifecycle::Whole);
        }
        self.release_whole_queue_waiters();
        self.pump.wake();
    }

    /// Lets every request waiting for the whole queue go on (each then checks whether this
    /// instance stopped meanwhile).
    fn release_whole_queue_waiters(&self) {
        let waiters = std::mem::take(&mut *self.whole_queue_waiters.borrow_mut());
        for resolve in waiters {
            let _ = resolve.call0(&JsValue::UNDEFINED);
        }
    }

    /// Whether the engine holds the whole saved queue (see [`Worker::start`]).
    pub fn has_whole_queue(&self) -> bool {
        self.lifecycle.get() == Lifecycle::Whole
    }

    /// Waits until the engine holds the whole saved queue: every request but a keep-alive
    /// needs it (a count, a list, coalescing, an id lookup).
    async fn whole_queue(&self) -> Result<(), ProtocolError> {
        if matches!(
            self.lifecycle.get(),
            Lifecycle::HeadOnly | Lifecycle::ReadingRest
        ) {
            let ready = Promise::new(&mut |resolve, _reject| {
                self.whole_queue_waiters.borrow_mut().push(resolve);
            });
            let _ = JsFuture::from(ready).await;
        }
        if self.is_stopped() {
            return Err(SwError::Stopped.into());
        }
        Ok(())
    }

    /// Queues a journal entry's jobs to be written one per record (see `store`, "Large
    /// batches") and starts the writer if it is not running.
    fn write_journaled(&self, journaled: Option<Journaled>) {
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
    /// without a transaction of its own while the pump is busy.
    fn carry_journal_share(&self, changes: &mut Changes, meta: &mut Vec<MetaOp>) {
        let ids = {
            let mut journals = self.journals.borrow_mut();
            let Some(front) = journals.first_mut() else {
                return;
            };
            let n = front.jobs.len().min(JOURNAL_SHARE);
            let ids: Vec<JobId> = front.jobs.drain(..n).collect();
            if front.jobs.is_empty() {
                meta.push(MetaOp::DeleteJournal(front.id.clone()));
                journals.remove(0);
            }
            ids
        };
        add_jobs(changes, &self.engine.borrow(), &ids);
    }

    /// Writes the next chunk of the oldest journal entry; `false` once there is nothing left
    /// (or this instance stopped). A chunk that fails stops the instance: memory may now differ
    /// from what a restart would load, and a restart merges the journal.
    async fn write_journal_chunk(&self) -> bool {
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
            let ids: Vec<JobId> = front.jobs.drain(..n).collect();
            let last_of = front.jobs.is_empty().then(|| front.id.clone());
            if last_of.is_some() {
                journals.remove(0);
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

    /// A save that removes a job still waiting in a journal entry must also finish that entry:
    /// a restart would otherwise bring the job back from it. Adds every job still waiting in
    /// any entry to `changes`, and the entries' deletion to `meta`. (Rare: only a job dismissed
    /// or expired within seconds of its `enqueueMany` gets here.)
    fn finish_journals_if_removing(&self, changes: &mut Changes, meta: &mut Vec<MetaOp>) {
        if changes.removed.is_empty() {
            return;
        }
        let mut journals = self.journals.borrow_mut();
        let touched = journals
            .iter()
            .any(|j| j.jobs.iter().any(|id| changes.removed.contains(id)));
        if !touched {
            return;
        }
        let engine = self.engine.borrow();
        for journal in journals.drain(..) {
            add_jobs(changes, &engine, &journal.jobs);
            meta.push(MetaOp::DeleteJournal(journal.id));
        }
    }

    /// A save that was to delete journal entries was refused (storage is full): they go back
    /// on the list, with no job left to write, and a later save deletes them, after the one
    /// that writes what the refused one held. Not the chunk writer while storage is full: its
    /// delete would go through, before those jobs are written.
    fn keep_journals(&self, meta: &[MetaOp]) {
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

    pub fn is_stopped(&self) -> bool {
        self.lifecycle.get() == Lifecycle::Stopped
    }

    /// Gives up this instance (see the module docs); the next event starts a fresh one.
    pub fn stop(&self, reason: &str) {
        if self.lifecycle.replace(Lifecycle::Stopped) == Lifecycle::Stopped {
            return;
        }
        warn(&format!(
            "queue stopped, it restarts from storage on the next event: {reason}"
        ));
        // Requests waiting for the queue learn that this instance gave up.
        self.release_whole_queue_waiters();
        self.pump.wake();
    }

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

    async fn save_changes(&self, meta: &[MetaOp], fresh: Option<&[JobId]>) -> Result<(), SwError> {
        if self.is_stopped() {
            return Err(SwError::Stopped);
        }
        let own_changes = fresh.is_none() && meta.is_empty();
        if own_changes && self.full_until.get().is_some() {
            return self.save_while_full().await;
        }
        let mut changes = self.engine.borrow_mut().take_changes();
        if changes.is_empty() && meta.is_empty() {
            return Ok(());
        }
        self.pump.saved_at(now_ms());
        let mut meta = meta.to_vec();
        // Jobs added below are written, not news: only these go to the pages.
        let changed = changes.jobs.len();
        self.finish_journals_if_removing(&mut changes, &mut meta);
        self.carry_journal_share(&mut changes, &mut meta);
        match self.store.save(&changes, &meta, fresh.unwrap_or(&[])).await {
            Ok(journaled) => {
                self.engine.borrow_mut().on_saved(changes.save);
                // Whatever a refused save held back was written before this one or by it.
                self.journals_wait_for_room.set(false);
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
    /// held waits in memory for room ([`Engine::retake`]). A delete still goes through on a
    /// full storage, so the records of jobs that ended are deleted (a restart must not send
    /// them again; what they became is in memory and with the pages), and so is the mark that
    /// storage holds every start (a restart then counts the windows as full,
    /// [`Engine::count_unrecorded_sends`]). Only once that landed do starts go out without a
    /// save ([`Engine::send_unrecorded`]). New jobs are refused meanwhile
    /// ([`Worker::refuse_while_full`]).
    async fn go_on_unrecorded(&self, changes: Changes, changed: usize) -> Result<(), SwError> {
        self.engine.borrow_mut().retake(&changes);
        let mut ended = changes.removed.clone();
        for job in &changes.jobs[..changed] {
            if job.state.is_terminal() {
                ended.push(job.id.clone());
            }
        }
        if let Err(e) = self.store.delete_unrecorded(&ended).await {
            self.stop(&format!("saving failed on a full storage: {e}"));
            return Err(e);
        }
        let journal_pending = !self.journals.borrow().is_empty();
        self.engine.borrow_mut().hold_while_full(journal_pending);
        if self.full_until.get().is_none() {
            warn("storage is full: the queue goes on sending");
            self.engine.borrow_mut().send_unrecorded(true);
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
    async fn save_while_full(&self) -> Result<(), SwError> {
        // Both taken at once, so that what is held stays apart from what is news.
        let (news, all) = {
            let mut engine = self.engine.borrow_mut();
            let news = engine.take_changes();
            let due = self.full_until.get().is_some_and(|t| now_ms() >= t);
            let all = due.then(|| {
                engine.retake(&news);
                engine.release_held();
                engine.take_changes()
            });
            (news, all)
        };
        self.pump.saved_at(now_ms());
        if let Some(all) = all {
            match self.store.save(&all, &[MetaOp::PutSchema], &[]).await {
                Ok(_) => {
                    let mut engine = self.engine.borrow_mut();
                    engine.on_saved(all.save);
                    engine.send_unrecorded(false);
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
                    self.engine.borrow_mut().retake(&all);
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

    /// While storage is full, a request that would add to it is refused before it changes
    /// anything. An idle queue has no save of its own to find out that storage has room
    /// again, so the request tries it first (at most once a [`FULL_STORAGE_RETRY_MS`]) and
    /// goes ahead when that lands.
    async fn refuse_while_full(&self) -> Result<(), SwError> {
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
    fn announce(&self, mut changes: Changes, changed: usize) {
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
    fn poll_with_request(&self, now: Millis) -> Vec<Transmit> {
        self.pump
            .request_save_begins(&mut self.engine.borrow_mut(), now)
    }

    /// Saves a request's changes with the starts [`Worker::poll_with_request`] took, then
    /// hands those to the pump (nothing goes out when the save failed).
    async fn commit_with_starts(
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

    pub fn engine_mut(&self) -> std::cell::RefMut<'_, Engine> {
        self.engine.borrow_mut()
    }

    pub fn is_offline_with_work(&self, now: Millis) -> bool {
        let engine = self.engine.borrow();
        engine.is_offline(now) && engine.jobs().any(|j| j.state.is_waiting())
    }

    pub fn snapshot(&self, now: Millis) -> Status {
        let mut status = self.engine.borrow().snapshot(now);
        status.warnings.extend(self.setup.warnings.iter().cloned());
        status.warnings.extend(self.notes.borrow().iter().cloned());
        if self.full_until.get().is_some() {
            status.warnings.push(
                "storage is full: new jobs are refused until there is room; queued jobs go on \
                 being sent (unless a large batch is not saved yet: then they wait for room), and \
                 what they become is saved once there is room"
                    .into(),
            );
        }
        status
    }

    // ----- broadcasting ---------------------------------------------------------------------

    pub fn broadcast_next_due(&self) -> Option<Millis> {
        if self.broadcasting.get() {
            None
        } else {
            self.batcher.borrow().next_due()
        }
    }

    pub fn broadcast_settled(&self) -> bool {
        !self.broadcasting.get() && !self.batcher.borrow().has_pending()
    }

    /// Sends what is due. `idle`: the queue just went idle; send everything and a status.
    pub fn flush_broadcasts(self: &Rc<Self>, now: Millis, idle: bool) {
        if self.broadcasting.get() {
            return;
        }
        if idle {
            self.batcher.borrow_mut().mark_status();
        }
        let flush = self.batcher.borrow_mut().take_due(now, idle);
        if flush.is_empty() {
            return;
        }
        let mut news = None;
        if !flush.jobs.is_empty() || !flush.removed.is_empty() {
            let mut requesters = self.requesters.borrow_mut();
            for id in &flush.removed {
                requesters.remove(id);
            }
            news = Some(JobNews::new(&flush.jobs, flush.removed, |id| {
                requesters.get(id).map(String::as_str)
            }));
            // Told its end, the tab that enqueued a job needs no more of its own news.
            for u in flush.jobs.iter().filter(|u| u.state.is_terminal()) {
                requesters.remove(&u.id);
            }
        }
        let mut messages = Vec::with_capacity(1);
        // A stopped instance's engine may hold what was never saved (the new jobs of a refused
        // save): its job news, all saved, still goes out, its status not.
        if flush.status && !self.is_stopped() {
            messages.push(sluice_shared::protocol::encode(&WorkerMessage::Status {
                status: self.snapshot(now),
            }));
        }
        self.broadcasting.set(true);
        let w = self.clone();
        spawn(async move {
            if let Err(e) = post_to_all(news.as_ref(), &messages, now).await {
                warn(&format!("broadcast failed: {e}"));
            }
            w.broadcasting.set(false);
            w.pump.wake();
        });
    }

    // ----- Background Sync -----------------------------------------------------------------

    /// Asks the browser to wake the worker when the network is back (Chromium only).
    pub fn request_sync(&self) {
        if self.sync_requested.replace(true) {
            return;
        }
        spawn(async {
            match register_sync().await {
                Ok(true) => {}
                Ok(false) => {} // no Background Sync here: pages' keep-alives wake the queue
                Err(e) => warn(&format!("Background Sync registration failed: {e}")),
            }
        });
    }

    /// The `sync` event fired: the browser believes the network is back.
    pub fn on_sync(&self) {
        self.sync_requested.set(false);
        self.engine.borrow_mut().set_online();
        self.pump.wake();
    }

    // ----- requests ------------------------------------------------------------------------

    /// Resolves a job URL against the worker's origin.
    fn resolve_url(&self, url: &str) -> Result<String, ProtocolError> {
        let invalid = |message: String| ProtocolError::InvalidUrl {
            url: url.chars().take(200).collect(),
            message,
        };
        if url.trim().is_empty() {
            return Err(invalid("the URL is empty".into()));
        }
        // Absolute URLs too go through the browser's parser: the engine matches the allowed
        // scopes against the normalised form (lower-case host, dot segments resolved).
        Url::new_with_base(url, &format!("{}/", self.setup.origin))
            .map(|u| u.href())
            .map_err(|e| invalid(describe(&e)))
    }

    /// The job a page-chosen id already names: the job itself, or the one it was folded into.
    fn known_job(&self, id: &str) -> Option<Enqueued> {
        let engine = self.engine.borrow();
        let (job, coalesced) = match engine.job(id) {
            Some(job) => (job, false),
            None => (engine.job(self.folds.borrow().carrier(id)?)?, true),
        };
        Some(Enqueued {
            id: job.id.clone(),
            coalesced,
            state: job.state,
        })
    }

    /// Waits until whatever is being saved is saved: a known job may still be in the
    /// transaction of the request that first brought it, and its reply waits for that.
    async fn known_jobs_saved(&self) -> Result<(), ProtocolError> {
        self.store.saved().await?;
        if self.is_stopped() {
            return Err(SwError::Stopped.into());
        }
        Ok(())
    }

    /// Remembers which tab enqueued these jobs (see `requesters`).
    pub fn note_requester(&self, from: Option<String>, ids: &[JobId]) {
        let Some(from) = from else {
            return;
        };
        let mut requesters = self.requesters.borrow_mut();
        for id in ids {
            requesters.insert(id.clone(), from.clone());
        }
    }

    pub async fn enqueue(&self, mut spec: JobSpec) -> Result<Enqueued, ProtocolError> {
        self.whole_queue().await?;
        self.refuse_while_full().await?;
        if let Some(id) = spec.id.as_deref() {
            check_job_id(id)?;
            // Sent again after a lost reply: already saved, answer with what it became.
            if let Some(known) = self.known_job(id) {
                self.known_jobs_saved().await?;
                return Ok(known);
            }
        }
        spec.url = self.resolve_url(&spec.url)?;
        let asked = spec.id.clone();
        let now = now_ms();
        let result = self.engine.borrow_mut().enqueue(spec, now)?;
        self.folds.borrow_mut().note(asked, &result);
        let starts = self.poll_with_request(now);
        self.commit_with_starts(starts, &[]).await?;
        Ok(result)
    }

    /// An `enqueueMany`: all jobs or none, in one transaction. Jobs whose ids are already known
    /// (the request was sent again after a lost reply) are answered as they are, not saved
    /// again.
    async fn enqueue_many(
        &self,
        jobs: Vec<JobSpec>,
        group_id: Option<String>,
    ) -> Result<ReplyBody, ProtocolError> {
        self.refuse_while_full().await?;
        let total = jobs.len();
        // Ids with the position of their job (see `store::merge_journals` why not a set).
        let mut seen: FxHashMap<JobId, usize> =
            FxHashMap::with_capacity_and_hasher(total, Default::default());
        let mut known: Vec<Option<Enqueued>> = Vec::with_capacity(total);
        let mut fresh = Vec::with_capacity(total);
        for (i, job) in jobs.into_iter().enumerate() {
            let in_job = |e: ProtocolError| ProtocolError::InvalidRequest {
                message: format!("job {} of {total}: {e}; nothing was enqueued", i + 1),
            };
            let found = match job.id.as_deref() {
                None => None,
                Some(id) => {
                    check_job_id(id).map_err(in_job)?;
                    if seen.insert(id.to_string(), i).is_some() {
                        return Err(in_job(ProtocolError::InvalidRequest {
                            message: format!("another job of this request has the id '{id}'"),
                        }));
                    }
                    self.known_job(id)
                }
            };
            if found.is_none() {
                fresh.push(job);
            }
            known.push(found);
        }
        drop(seen);
        let mut warning = None;
        if fresh.is_empty() {
            self.known_jobs_saved().await?;
        } else {
            self.resolve_urls(&mut fresh, total)?;
            let mut asked: Vec<Option<JobId>> = Vec::with_capacity(fresh.len());
            for job in &fresh {
                asked.push(job.id.clone());
            }
            let now = now_ms();
            let (results, w) = self
                .engine
                .borrow_mut()
                .enqueue_many(fresh, group_id, now)?;
            warning = w;
            {
                let mut folds = self.folds.borrow_mut();
                for (asked, result) in asked.into_iter().zip(&results) {
                    folds.note(asked, result);
                }
            }
            let mut new_ids: Vec<JobId> = Vec::with_capacity(results.len());
            for result in &results {
                if !result.coalesced {
                    new_ids.push(result.id.clone());
                }
            }
            let starts = self.poll_with_request(now);
            self.commit_with_starts(starts, &new_ids).await?;
            let mut results = results.into_iter();
            for slot in known.iter_mut().filter(|k| k.is_none()) {
                *slot = results.next();
            }
        }
        let mut ids = Vec::with_capacity(known.len());
        for result in known.into_iter().flatten() {
            ids.push(result.id);
        }
        Ok(ReplyBody::EnqueuedMany { ids, warning })
    }

    /// Resolves the jobs' URLs; bulk jobs usually share a few, so each distinct one once.
    fn resolve_urls(&self, jobs: &mut [JobSpec], total: usize) -> Result<(), ProtocolError> {
        let mut last: Option<(String, String)> = None;
        for (i, job) in jobs.iter_mut().enumerate() {
            if let Some((from, to)) = &last {
                if *from == job.url {
                    job.url = to.clone();
                    continue;
                }
            }
            let resolved =
                self.resolve_url(&job.url)
                    .map_err(|e| ProtocolError::InvalidRequest {
                        message: format!("job {} of {total}: {e}; nothing was enqueued", i + 1),
                    })?;
            last = Some((std::mem::replace(&mut job.url, resolved.clone()), resolved));
        }
        Ok(())
    }

    /// Carries out one page request; every effect is saved before this returns.
    /// `from`: the tab (client id) that sent it, to whom the outcomes of the jobs it enqueues
    /// go.
    pub async fn handle(
        &self,
        request: Request,
        from: Option<String>,
    ) -> Result<ReplyBody, ProtocolError> {
        if !matches!(request, Request::KeepAlive) {
            self.whole_queue().await?;
        }
        let (body, meta) = match request {
            Request::Enqueue { job } => {
                let e = self.enqueue(job).await?;
                self.note_requester(from, std::slice::from_ref(&e.id));
                return Ok(ReplyBody::Enqueued {
                    id: e.id,
                    coalesced: e.coalesced,
                    state: e.state,
                });
            }
            Request::EnqueueMany { jobs, group_id } => {
                let reply = self.enqueue_many(jobs, group_id).await?;
                if let ReplyBody::EnqueuedMany { ids, .. } = &reply {
                    self.note_requester(from, ids);
                }
                return Ok(reply);
            }
            // The three below and `configure` share one save (one await in this state machine).
            Request::Cancel { target } => (
                ReplyBody::Cancelled {
                    ids: self.engine.borrow_mut().cancel(&target, now_ms())?,
                },
                None,
            ),
            Request::Retry { id } => {
                self.engine.borrow_mut().retry(&id, now_ms())?;
                (ReplyBody::Retried { id }, None)
            }
            Request::Dismiss { id } => {
                self.engine.borrow_mut().dismiss(&id)?;
                (ReplyBody::Dismissed { id }, None)
            }
            Request::Configure { mut config } => {
                self.refuse_while_full().await?;
                resolve_engine_prefixes(&mut config, &self.setup.origin);
                config::pin_allow(&mut config, &self.setup.script);
                self.engine
                    .borrow_mut()
                    .configure(config.clone(), now_ms())
                    .map_err(|e| ProtocolError::InvalidConfig {
                        message: e.to_string(),
                    })?;
                let saved = SavedConfig {
                    config,
                    script_fingerprint: self.setup.fingerprint.clone(),
                };
                (ReplyBody::Configured, Some(MetaOp::PutConfig(saved)))
            }
            Request::Snapshot => {
                return Ok(ReplyBody::Snapshot {
                    status: self.snapshot(now_ms()),
                })
            }
            Request::Jobs { group_id, ids } => {
                let engine = self.engine.borrow();
                let mut jobs: Vec<&Job> = Vec::new();
                match ids {
                    Some(ids) => jobs.extend(ids.iter().filter_map(|id| engine.job(id))),
                    None => {
                        for job in engine.jobs() {
                            if group_id
                                .as_deref()
                                .is_none_or(|g| job.group_id.as_deref() == Some(g))
                            {
                                jobs.push(job);
                            }
                        }
                    }
                }
                sluice_shared::job::sort_by_seq(&mut jobs);
                let mut updates = Vec::with_capacity(jobs.len());
                for job in jobs {
                    updates.push(JobUpdate::from(job));
                }
                return Ok(ReplyBody::Jobs { jobs: updates });
            }
            Request::KeepAlive => {
                // A queue held while storage is full (see `Engine::hold_while_full`) saves
                // nothing of its own that would find room again: the pages' keep-alives try.
                let _ = self.refuse_while_full().await;
                return Ok(ReplyBody::Alive);
            }
        };
        self.commit(meta.as_slice()).await?;
        Ok(body)
    }
}

/// Adds the engine's current state of `ids` to `changes` (once each).
fn add_jobs(changes: &mut Changes, engine: &Engine, ids: &[JobId]) {
    if ids.is_empty() {
        return;
    }
    // Ids with their positions (see `store::merge_journals` why not a set).
    let mut present: FxHashMap<JobId, usize> = FxHashMap::default();
    for (i, job) in changes.jobs.iter().enumerate() {
        present.insert(job.id.clone(), i);
    }
    for id in ids {
        if !present.contains_key(id) {
            if let Some(job) = engine.job(id) {
                changes.jobs.push(job.clone());
            }
        }
    }
}

impl From<SwError> for JsValue {
    fn from(e: SwError) -> Self {
        JsValue::from_str(&e.to_string())
    }
}

/// `registration.sync.register('sluice')` where Background Sync exists. `Ok(false)`: it does
/// not (Firefox, Safari).
async fn register_sync() -> Result<bool, SwError> {
    let registration = scope().registration();
    let sync = Reflect::get(&registration, &JsValue::from_str("sync"))?;
    if sync.is_undefined() || sync.is_null() {
        return Ok(false);
    }
    let register: Function = Reflect::get(&sync, &JsValue::from_str("register"))?
        .dyn_into()
        .map_err(|_| SwError::Js("registration.sync.register is not a function".into()))?;
    let promise: Promise = register
        .call1(&sync, &JsValue::from_str(crate::SYNC_TAG))?
        .dyn_into()
        .map_err(|_| SwError::Js("sync.register did not return a promise".into()))?;
    JsFuture::from(promise).await?;
    Ok(true)
}

/// Posts one message (JSON text) to the page that sent a request.
pub fn reply_to(source: Option<&Object>, message: &WorkerMessage) {
    let Some(source) = source else {
        warn("a request came without a source to reply to");
        return;
    };
    let text = JsValue::from_str(&sluice_shared::protocol::encode(message));
    let posted = Reflect::get(source, &JsValue::from_str("postMessage"))
        .ok()
        .and_then(|f| f.dyn_into::<Function>().ok())
        .map(|f| f.call1(source, &text));
    if !matches!(posted, Some(Ok(_))) {
        warn("could not post a reply (the page may have closed)");
    }
}
