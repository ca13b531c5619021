//! What the pages hear and what wakes the worker: status snapshots, batched broadcasts, and
//! Background Sync while offline.

use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use sluice_shared::json::RawJson;
use sluice_shared::protocol::WorkerMessage;
use sluice_shared::status::Status;
use sluice_shared::Millis;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::broadcast::{post_to_all, JobNews};
use crate::error::SwError;
use crate::runtime::{scope, spawn, warn};

use super::Worker;

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

impl Worker {
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
        if !flush.jobs.is_empty() || !flush.removed.is_empty() || !flush.discarded.is_empty() {
            let mut requesters = self.requesters.borrow_mut();
            for id in &flush.removed {
                requesters.remove(id);
            }
            news = Some(JobNews::new(
                &flush.jobs,
                flush.removed,
                flush.discarded,
                |id| requesters.get(id).map(String::as_str),
            ));
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
                status: RawJson::of(&self.snapshot(now)),
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
}
