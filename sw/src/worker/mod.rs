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

mod drive;
mod folds;
mod journal;
mod loading;
mod news;
mod requests;
mod saving;

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use js_sys::Function;
use rustc_hash::FxHashMap;
use sluice_shared::random::Rng;
use sluice_shared::{Changes, Engine, EngineConfig, JobId, Millis, QueueCounts};
use wasm_bindgen::JsValue;

use crate::broadcast::Batcher;
use crate::config::{self, Setup};
use crate::error::SwError;
use crate::pump_state::PumpState;
use crate::runtime::{now_ms, scope, warn};
use crate::store::{Journaled, MetaOp, QueueStore, SchemaRecord};

pub use drive::Outlook;
pub use folds::Folds;
pub use requests::reply_to;

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
    store: QueueStore,
    engine: RefCell<Engine>,
    batcher: RefCell<Batcher>,
    /// The tab (client id) that enqueued each job, while it runs: its outcome goes to that
    /// tab alone (see `broadcast::JobNews`). Memory only: after a restart every tab gets the
    /// state, and the page client asks for the outcome it waits on.
    requesters: RefCell<FxHashMap<JobId, String>>,
    /// Whether the task that posts broadcasts runs (one at a time; it drains `batcher`).
    broadcasting: Cell<bool>,
    pub pump: PumpState,
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
    /// Jobs of `journals` a committed save has written one per record since (an outcome, a
    /// retry's wait): their entry need not write them again (see
    /// [`Worker::carry_journal_share`]). Ids with a meaningless value: the map type of
    /// `store::merge_journals`. Never shrunk but emptied when the last entry goes: a
    /// removal is more code of the hash table's in the wasm.
    written_since_journal: RefCell<FxHashMap<JobId, usize>>,
    /// Whether the task that writes `journals` one per record runs (one at a time).
    writing_journals: Cell<bool>,
    /// Per budget waiting for credentials: when the worker script's function was last asked
    /// for it, and whether that ask is still out (see `crate::credentials`).
    pub(crate) credential_asks: RefCell<Vec<(String, Millis, bool)>>,
    /// Storage is full: set when it refused a save of the queue's own changes, cleared when a
    /// save lands again (see [`Worker::go_on_unrecorded`]); the next try is not before this.
    full_until: Cell<Option<Millis>>,
    /// Some of `journals` are entries whose jobs a refused save held back: they may not be
    /// deleted before a save lands (see [`Worker::keep_journals`]).
    journals_wait_for_room: Cell<bool>,
    /// The status counts storage holds once the saves issued so far have landed (`None`: none,
    /// or deleted): a save writes them only when they changed (see
    /// [`Worker::counts_to_save`]). At the start, what was read (a start that reads the whole
    /// queue reads none: the first save writes them).
    saved_counts: RefCell<Option<QueueCounts>>,
}

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
/// of `loading::REST_CHUNK`, each its own short transaction decoded between two turns of the event
/// loop, so the pump's saves (which wait for a read in progress) go on meanwhile. Measured in
/// Chromium with 7,700 jobs saved: reading 300 took 39 ms of the 111 ms to the first send,
/// reading 64 took 20; the rest then takes about 0.35 s. 100 jobs last one second at 100 per
/// second, about three times that.
const FIRST_JOBS_READ: u32 = 100;

impl Worker {
    /// Opens the database, rebuilds the engine from what is saved and saves what the rebuild
    /// changed (jobs that were sending go back to queued). A large queue is rebuilt in two
    /// steps (see [`QueueStore::load_start`]): the pump may send as soon as its head is in, and
    /// [`Worker::load_rest`] adds the rest.
    pub async fn start(setup: Rc<Setup>) -> Result<Rc<Self>, SwError> {
        let store = QueueStore::open().await?;
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
        // The head's counts as it was read, for the saved counts to tell what is not read yet.
        let head_counts = (!loaded.complete && loaded.counts.is_some())
            .then(|| QueueCounts::of(loaded.jobs.iter()));
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
        // New jobs' ids and keys from the browser's cryptographic generator, 64 ids' bytes a
        // call: one call an id was a tenth of a 10,000-job enqueue, most of it crossing into
        // JS and back.
        let mut pool = [0u8; 16 * 64];
        let mut used = pool.len();
        engine.set_identifier_source(Box::new(move |bytes: &mut [u8; 16]| {
            if used == pool.len() {
                let filled = scope()
                    .crypto()
                    .and_then(|c| c.get_random_values_with_u8_array(&mut pool));
                if filled.is_err() {
                    return false;
                }
                used = 0;
            }
            bytes.copy_from_slice(&pool[used..used + 16]);
            used += 16;
            true
        }));
        if loaded.schema.is_none() && !loaded.budgets.is_empty() {
            // Saved budgets without the mark that they hold every start: the last instance
            // sent while storage was full (see `Worker::go_on_unrecorded`).
            engine.persistence().count_unrecorded_sends(now);
            warn("starts went out unrecorded while storage was full: sending waits until every window has moved past them");
        }
        if let (Some(saved), Some(head)) = (&loaded.counts, &head_counts) {
            if !engine.expect_unread(saved, head) {
                warn(
                    "the saved status counts do not match the saved jobs: the status waits \
                     until the whole queue is read",
                );
            }
        }
        let folds = Folds::of(&engine);
        // What the rebuild changed (jobs that were sending are queued again) is saved by the
        // pump's first save, with its first starts, unless there is more to save now.
        let mut journaled = None;
        let mut journals = Vec::new();
        if !meta.is_empty() || !loaded.journals.is_empty() {
            let mut changes = engine.persistence().take_changes();
            // Jobs only a journal entry held are saved one per record now, and the entries go.
            add_jobs(&mut changes, &engine, &loaded.from_journals);
            meta.extend(loaded.journals.iter().cloned().map(MetaOp::DeleteJournal));
            match store.save(&changes, &meta, &loaded.from_journals).await {
                Ok(written) => {
                    journaled = written;
                    engine.persistence().on_saved(changes.save);
                }
                // A full storage refuses the rewrite of journaled jobs into records; the queue
                // starts anyway with storage as it is (the journals still hold those jobs, and
                // the changes a rebuild makes are made again by the next one), rather than not
                // at all. Later saves are small and go through while the disk has room.
                Err(SwError::StorageFull(e)) => {
                    // Marked again for the pump's first save (which finds storage full, and
                    // goes on as `Worker::go_on_unrecorded` says).
                    let mut saves = engine.persistence();
                    saves.retake(&changes);
                    saves.release_held();
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
        batcher.hold_status(!loaded.complete && !engine.counts_unread_jobs());
        let w = Rc::new_cyclic(|me| Self {
            me: me.clone(),
            setup,
            store,
            engine: RefCell::new(engine),
            batcher: RefCell::new(batcher),
            requesters: RefCell::default(),
            broadcasting: Cell::new(false),
            pump: PumpState::default(),
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
            saved_counts: RefCell::new(loaded.counts.take()),
            journals: RefCell::new(journals),
            written_since_journal: RefCell::default(),
            writing_journals: Cell::new(false),
            credential_asks: RefCell::new(Vec::new()),
            full_until: Cell::new(None),
        });
        w.note_unreadable(&loaded);
        w.write_journaled(journaled);
        Ok(w)
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
}

/// Adds the engine's current state of `ids` to `changes` (once each).
pub(super) fn add_jobs(changes: &mut Changes, engine: &Engine, ids: &[JobId]) {
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
