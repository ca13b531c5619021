//! The pump's state, shared by its loop ([`crate::pump`]) and the request handlers
//! ([`crate::worker`]): the protocol's driver, the wake-up signal, the one timer and the settle
//! promises. It knows neither: the loop runs the worker, and the worker only wakes the pump
//! and hands it the starts of its own saves.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use js_sys::Function;
use sluice_shared::pump::Pump as Driver;
use sluice_shared::{Engine, Millis, Transmit};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

use crate::runtime::{scope, warn};

/// A wake-up flag with one waiter: a wake before the wait is not lost.
#[derive(Default)]
pub(crate) struct Signal {
    state: RefCell<(bool, Option<Waker>)>,
}

impl Signal {
    pub(crate) fn notify(&self) {
        let waker = {
            let mut s = self.state.borrow_mut();
            s.0 = true;
            s.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    pub(crate) fn wait(&self) -> Wait<'_> {
        Wait(self)
    }
}

pub(crate) struct Wait<'a>(&'a Signal);

impl Future for Wait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.0.state.borrow_mut();
        if std::mem::take(&mut s.0) {
            Poll::Ready(())
        } else {
            s.1 = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

/// The worker's single `setTimeout`.
#[derive(Default)]
pub(crate) struct Timer {
    handle: Option<i32>,
    deadline: Option<Millis>,
    pub(crate) callback: Option<Closure<dyn FnMut()>>,
}

/// One worker instance's pump, as its loop and the request handlers share it.
#[derive(Default)]
pub struct PumpState {
    pub(crate) signal: Signal,
    pub(crate) running: Cell<bool>,
    /// What to send and save when: the pump's protocol, run here and in the simulator.
    pub(crate) driver: RefCell<Driver>,
    pub(crate) timer: RefCell<Timer>,
    /// Settle promises' resolve functions, with the instant each must resolve at the latest.
    pub(crate) waiters: RefCell<Vec<(Millis, Function)>>,
    pub(crate) was_idle: Cell<bool>,
}

impl PumpState {
    /// A save took every change so far with it at `now` (see [`Driver::save_taken`]).
    pub fn saved_at(&self, now: Millis) {
        self.driver.borrow_mut().save_taken(now);
    }

    /// Something happened: run one more iteration soon.
    pub fn wake(&self) {
        self.signal.notify();
    }

    /// The starts a page request's own transaction is to carry, taken now (see
    /// [`Driver::request_save_begins`]); hand them back with [`Pump::request_save_ended`].
    pub fn request_save_begins(&self, engine: &mut Engine, now: Millis) -> Vec<Transmit> {
        if !self.running.get() {
            return Vec::new();
        }
        self.driver.borrow_mut().request_save_begins(engine, now)
    }

    /// A page request's transaction with `starts` ended (`saved`: it committed); the pump
    /// fetches them on its next turn.
    pub fn request_save_ended(&self, starts: Vec<Transmit>, saved: bool) {
        self.driver.borrow_mut().request_save_ended(starts, saved);
        self.wake();
    }

    pub(crate) fn arm(&self, deadline: Option<Millis>, now: Millis) {
        let mut t = self.timer.borrow_mut();
        if t.deadline == deadline && (t.handle.is_some() || deadline.is_none()) {
            return;
        }
        if let Some(h) = t.handle.take() {
            scope().clear_timeout_with_handle(h);
        }
        t.deadline = None;
        let Some(deadline) = deadline else { return };
        let delay = deadline.saturating_sub(now).min(i32::MAX as u64) as i32;
        let Some(cb) = t.callback.as_ref() else {
            return;
        };
        match scope().set_timeout_with_callback_and_timeout_and_arguments_0(
            cb.as_ref().unchecked_ref(),
            delay,
        ) {
            Ok(h) => {
                t.handle = Some(h);
                t.deadline = Some(deadline);
            }
            Err(e) => warn(&format!(
                "setTimeout failed: {}",
                crate::error::describe(&e)
            )),
        }
    }

    pub(crate) fn on_timer(&self) {
        {
            let mut t = self.timer.borrow_mut();
            t.handle = None;
            t.deadline = None;
        }
        self.signal.notify();
    }

    /// Resolves the settle promises that are due: all of them when `all`.
    pub(crate) fn settle(&self, now: Millis, all: bool) {
        let mut due: Vec<Function> = Vec::new();
        {
            let mut waiters = self.waiters.borrow_mut();
            let mut keep = Vec::new();
            for (cap, resolve) in waiters.drain(..) {
                if all || cap <= now {
                    due.push(resolve);
                } else {
                    keep.push((cap, resolve));
                }
            }
            *waiters = keep;
        }
        for resolve in due {
            let _ = resolve.call0(&JsValue::UNDEFINED);
        }
    }

    pub(crate) fn earliest_cap(&self) -> Option<Millis> {
        self.waiters.borrow().iter().map(|(cap, _)| *cap).min()
    }

    pub(crate) fn shut_down(&self) {
        let mut t = self.timer.borrow_mut();
        if let Some(h) = t.handle.take() {
            scope().clear_timeout_with_handle(h);
        }
        t.deadline = None;
        t.callback = None;
        drop(t);
        self.settle(0, true);
    }
}
