//! The running worker instance: started on first use (concurrent callers share one start),
//! restarted from storage after it stopped, never next to a successor's.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Function, Promise};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::config::Setup;
use crate::error::{describe, SwError};
use crate::runtime::{promise, scope, superseded, warn};
use crate::worker::Worker;

thread_local! {
    static SETUP: RefCell<Option<Rc<Setup>>> = const { RefCell::new(None) };
    static CURRENT: RefCell<Option<Rc<Worker>>> = const { RefCell::new(None) };
    static STARTING: RefCell<Option<Promise>> = const { RefCell::new(None) };
}

/// Records the script's configuration (called once by `start`).
pub fn set_setup(setup: Setup) {
    for w in &setup.warnings {
        warn(w);
    }
    SETUP.with(|s| *s.borrow_mut() = Some(Rc::new(setup)));
}

pub fn setup() -> Rc<Setup> {
    SETUP.with(|s| {
        s.borrow_mut()
            .get_or_insert_with(|| Rc::new(Setup::demo(&scope().origin())))
            .clone()
    })
}

/// The running instance, started (or restarted after a failure) on first use. Concurrent
/// callers share one start.
pub async fn worker() -> Result<Rc<Worker>, SwError> {
    if let Some(w) = current() {
        return Ok(w);
    }
    // A superseded worker must not start a queue of its own next to its successor's (see
    // `pump`, "Handing over to a new version").
    if superseded() {
        return Err(SwError::Superseded);
    }
    let promise = STARTING.with(|s| {
        s.borrow_mut()
            .get_or_insert_with(|| {
                promise(async {
                    let result = Worker::start(setup()).await;
                    STARTING.with(|s| *s.borrow_mut() = None);
                    match result {
                        Ok(w) => {
                            CURRENT.with(|c| *c.borrow_mut() = Some(w.clone()));
                            crate::pump::start(&w);
                            Ok(JsValue::UNDEFINED)
                        }
                        Err(e) => {
                            warn(&format!("could not start the queue: {e}"));
                            Err(JsValue::from_str(&e.to_string()))
                        }
                    }
                })
            })
            .clone()
    });
    JsFuture::from(promise)
        .await
        .map_err(|e| SwError::Storage(describe(&e)))?;
    current().ok_or(SwError::Stopped)
}

/// The running instance if there is one, without starting it. A stopped one is let go here
/// (it cannot let go of itself: this module holds it).
pub fn current() -> Option<Rc<Worker>> {
    CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        if c.as_ref().is_some_and(|w| w.is_stopped()) {
            *c = None;
        }
        c.clone()
    })
}

/// Wakes the pump whenever a newer version's install progresses, so that this instance notices
/// at once that it is superseded and hands over (see `pump`). Called once, at startup.
pub fn watch_for_successor() {
    let wake: Function = Closure::<dyn Fn()>::new(|| {
        if let Some(w) = current() {
            w.pump.wake();
        }
    })
    .into_js_value()
    .unchecked_into();
    let registration = scope().registration();
    let on_update_found = Closure::<dyn Fn()>::new({
        let registration = registration.clone();
        let wake = wake.clone();
        move || {
            if let Some(next) = registration.installing() {
                let _ = next.add_event_listener_with_callback("statechange", &wake);
            }
            let _ = wake.call0(&JsValue::UNDEFINED);
        }
    })
    .into_js_value();
    registration.set_onupdatefound(Some(on_update_found.unchecked_ref()));
}
