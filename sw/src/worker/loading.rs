//! Reading the saved queue into the engine after the start: the head is in at once (see
//! [`Worker::start`]), the rest follows in chunks while the pump already sends, and requests
//! that need the whole queue wait for it.

use std::rc::Rc;

use js_sys::Promise;
use sluice_shared::protocol::ProtocolError;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;

use crate::error::SwError;
use crate::runtime::{now_ms, spawn, warn};
use crate::store::{job_id_of, Loaded};

use super::{Folds, Lifecycle, Worker};

/// How many jobs each later read of the saved queue takes (see
/// [`FIRST_JOBS_READ`](super::FIRST_JOBS_READ)). Each read is a transaction of its own and
/// waits for the saves issued before it: in Chromium, 7,700 jobs read 250 at a time took
/// 650 ms, 1,000 at a time 400 ms, 2,500 at a time 310 ms. A thousand keeps each read near
/// 20 ms, the longest a save (and so a start) waits behind one.
const REST_CHUNK: u32 = 1000;

impl Worker {
    /// Counts records that could not be decoded into the notes every status shows.
    pub(super) fn note_unreadable(&self, loaded: &Loaded) {
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
    pub(super) async fn load_rest(self: Rc<Self>) {
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
    pub(super) fn release_whole_queue_waiters(&self) {
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
    pub(super) async fn whole_queue(&self) -> Result<(), ProtocolError> {
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
}
