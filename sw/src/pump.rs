//! The pump: the one task that carries out what the pump's protocol asks for.
//!
//! When a request starts and when a save begins is decided by [`sluice_shared::pump::Pump`],
//! the same code the simulator runs; this module is its I/O: `fetch` for every start it hands
//! out, an IndexedDB transaction for every save it begins, and the one `setTimeout` for the
//! instant it names.
//!
//! ```text
//! loop {
//!     worker.turn(now): the protocol's turn, its sends and whether a save begins
//!     spawn a fetch per send                // each reports back (worker.on_answer), wakes the pump
//!                                           // (with the script's credentials function: asked first)
//!     ask that function again for budgets waiting for credentials (at most once a second)
//!     if a save begins: save in the background   // its end reports back and wakes the pump
//!     flush broadcasts that are due
//!     resolve settle promises if idle (or past their cap)
//!     arm THE timer for min(worker.outlook(now).next, next broadcast, earliest settle cap)
//!     wait for a wake-up: timer, fetch completion, save, or any event
//! }
//! ```
//!
//! - **One pump, one timer.** The pump is spawned once per worker instance; events never run
//!   it themselves, they only [`crate::pump_state::PumpState::wake`] it. Exactly one `setTimeout` is armed at a time
//!   and re-armed only when the deadline changes. There is no polling interval.
//! - **Completions are saved by the pump.** A finished fetch only informs the engine and wakes
//!   the pump, whose next save takes the outcome (with any new starts) in one transaction
//!   and only then broadcasts it.
//! - **Keeping the worker alive.** Every event handler returns [`settled`], a promise that
//!   resolves once the queue is idle — nothing in flight, nothing due within
//!   [`IDLE_GRACE_MS`], broadcasts delivered — or after [`SETTLE_CAP_MS`] at the latest, well
//!   inside Chromium's limit for one event. Pages with pending work send `keepAlive` messages;
//!   each one is a new event with a new settle promise, so the worker stays up while there is
//!   work, and a worker stopped anyway restarts seamlessly on the next event (the pump of the
//!   new instance picks up from storage).
//! - **Handing over to a new version.** A new version calls `skipWaiting()`, but Chromium
//!   activates it only once this one has no event in flight, and the settle promises above
//!   would hold events open for as long as there is work. So as soon as a newer version is
//!   installed and waiting (the pump is woken by its install's `statechange`), the pump stops
//!   starting requests, waits for those in flight, saves their outcomes and tells the pages,
//!   then stops the instance and resolves every settle promise. The browser activates the new
//!   version, which rebuilds from storage (nothing is sent twice: nothing was in flight) and
//!   claims the pages; they send it whatever the old one left unanswered. While it drains, the
//!   old one still takes requests (saving them is all they need); once stopped it refuses them
//!   as `unavailable` and starts no new instance (see [`crate::instance::worker`]), and the pages
//!   send them again to the new one, so two instances never send side by side.

use std::rc::{Rc, Weak};

use js_sys::Promise;
use sluice_shared::{Transmit, TransportError};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsValue;

use crate::credentials;
use crate::runtime::{now_ms, spawn, superseded, warn};
use crate::transport;
use crate::worker::{Outlook, Worker};

/// Work due further away than this does not keep an event open: the browser keeps an idle
/// worker for about 30 s, so the timer still fires for it, and if the worker was stopped the
/// next keep-alive restarts it.
pub const IDLE_GRACE_MS: u64 = 5_000;
/// A settle promise resolves after this long even while busy (Chromium ends events that take
/// about 5 min); the next event's promise takes over.
pub const SETTLE_CAP_MS: u64 = 90_000;

/// A promise that resolves when the queue is idle, or after [`SETTLE_CAP_MS`] at the latest,
/// or at once when there is no running queue. For `event.waitUntil`.
pub fn settled(w: Option<&Rc<Worker>>) -> Promise {
    let Some(w) = w.filter(|w| !w.is_stopped() && w.pump.running.get()) else {
        return Promise::resolve(&JsValue::UNDEFINED);
    };
    let cap = now_ms() + SETTLE_CAP_MS;
    let promise = Promise::new(&mut |resolve, _reject| {
        w.pump.waiters.borrow_mut().push((cap, resolve));
    });
    // The pump decides whether the queue is idle; make sure it looks soon.
    w.pump.wake();
    promise
}

/// Starts the pump of a worker instance (once).
pub fn start(w: &Rc<Worker>) {
    if w.pump.running.replace(true) {
        return;
    }
    let weak: Weak<Worker> = Rc::downgrade(w);
    w.pump.timer.borrow_mut().callback = Some(Closure::new(move || {
        if let Some(w) = weak.upgrade() {
            w.pump.on_timer();
        }
    }));
    spawn(run(w.clone()));
}

async fn run(w: Rc<Worker>) {
    loop {
        if w.is_stopped() {
            tell_what_was_saved(&w).await;
            break;
        }
        if superseded() {
            hand_over(&w).await;
            break;
        }
        let turn = w.turn(now_ms());
        send_all(&w, turn.sends);
        credentials::ask_again_while_waiting(&w, now_ms());
        if turn.save {
            self::save(&w);
        }
        w.read_rest_of_queue();

        let now = now_ms();
        let Outlook { next, quiet } = w.outlook(now);
        // Not idle while part of the queue is still being read (it may hold work).
        let idle = w.has_whole_queue() && quiet && next.is_none_or(|t| t > now + IDLE_GRACE_MS);
        let became_idle = idle && !w.pump.was_idle.get();
        w.pump.was_idle.set(idle);
        w.flush_broadcasts(now, became_idle);
        if idle && w.is_offline_with_work(now) {
            w.request_sync();
        }
        w.pump.settle(now, idle && w.broadcast_settled());

        let deadline = [next, w.broadcast_next_due(), w.pump.earliest_cap()]
            .into_iter()
            .flatten()
            .min();
        w.pump.arm(deadline, now);
        w.pump.signal.wait().await;
    }
    w.pump.shut_down();
}

/// Lets a newer version take over (see the module docs): starts nothing more, waits for the
/// requests in flight and saves their outcomes, tells the pages, then stops this instance,
/// which resolves every settle promise so that the browser can activate the successor.
async fn hand_over(w: &Rc<Worker>) {
    warn("a newer version of the worker is installed: handing the queue over");
    w.stop_starting();
    loop {
        if w.is_stopped() || w.commit(&[]).await.is_err() {
            return;
        }
        if w.in_flight() == 0 {
            // Every start this instance made is saved: the successor owes none that may be out
            // unsaved. The next round's commit saves that.
            if w.hand_over_starts() {
                continue;
            }
            break;
        }
        // Fetch completions wake the pump; no timer is needed (every fetch ends by its
        // timeout).
        w.pump.arm(None, now_ms());
        w.pump.signal.wait().await;
    }
    tell_what_was_saved(w).await;
    w.stop("a newer version of the worker takes over the queue");
}

/// Before an instance lets go: every job change it saved goes out now (not throttled), and
/// once more if more was saved meanwhile. The next instance loads those jobs as they are and
/// tells no one of them again, so a page waiting on one of them would otherwise hear its end
/// only from its own fallback (say after a save of new jobs that storage refused stopped this
/// instance a moment after it saved an end).
async fn tell_what_was_saved(w: &Rc<Worker>) {
    // Saves still in flight first: what they saved is told too.
    let _ = w.earlier_saves_ended().await;
    while !w.broadcast_settled() {
        if w.broadcast_next_due().is_some() {
            w.flush_broadcasts(now_ms(), true);
        }
        // Delivered broadcasts wake the pump.
        w.pump.arm(None, now_ms());
        w.pump.signal.wait().await;
    }
}

/// Saves everything the engine changed, in the background; then tells the driver, which
/// hands out the starts that waited for this save on the pump's next turn.
fn save(w: &Rc<Worker>) {
    let w = w.clone();
    // The commit takes the engine's changes when it first runs, which is before any later
    // commit can: transactions still follow the engine's order.
    spawn(async move {
        // A request's own save may have taken the changes of the waiting starts: then waiting
        // for it is enough.
        let saved = if w.has_changes() {
            w.commit(&[]).await.is_ok()
        } else {
            w.earlier_saves_ended().await.is_ok()
        };
        // After a failed save the instance stops; a successor may have loaded storage while
        // this one ran, and fetching now would send next to it. Either way the starts are
        // retried by whoever holds the queue next (same keys).
        let sent = saved && !superseded() && !w.is_stopped();
        w.on_pump_saved(sent);
        w.pump.wake();
    });
}

/// Hands every request to the browser now, then waits for their answers in the background;
/// with the worker script's credentials function, each once the function gave its headers.
fn send_all(w: &Rc<Worker>, transmits: Vec<Transmit>) {
    for t in transmits {
        if credentials::has_function() {
            spawn(send_with_supplied_credentials(w.clone(), t));
        } else {
            let sent = transport::start(&t);
            spawn(answer_one(w.clone(), t, sent));
        }
    }
}

/// Asks the worker script's credentials function for `t`'s budget, then sends `t` with what it
/// gave (see [`crate::credentials`]). A function that fails is the request's failure: not
/// sent, the job retried as after a network error (or waiting, offline), its error naming
/// the function.
async fn send_with_supplied_credentials(w: Rc<Worker>, mut t: Transmit) {
    let supplied = credentials::ask(&t.budget, t.timeout_ms).await;
    if w.is_stopped() {
        return;
    }
    let now = now_ms();
    match supplied.and_then(|headers| w.on_credentials_supplied(&t, headers, now)) {
        Ok(Some(headers)) => {
            t.headers = headers;
            let sent = transport::start(&t);
            // Spawned rather than awaited: one copy of the answer's task in the wasm.
            spawn(answer_one(w, t, sent));
        }
        Ok(None) => {}
        Err(problem) => {
            let error = if transport::is_online() {
                TransportError::Network(problem)
            } else {
                TransportError::Offline
            };
            w.on_answer(&t.job_id, Err(error), now);
            w.pump.wake();
        }
    }
}

/// One answer: its outcome goes to the engine; the pump saves and broadcasts it.
async fn answer_one(w: Rc<Worker>, t: Transmit, sent: transport::Sent) {
    let result = sent.response().await;
    if w.is_stopped() {
        // This instance gave up its state; storage still has the job, which the next instance
        // sends again (same idempotency key).
        return;
    }
    let now = now_ms();
    let offline = matches!(result, Err(TransportError::Offline));
    w.on_answer(&t.job_id, result, now);
    if offline {
        w.request_sync();
    }
    w.pump.wake();
}
