//! The pump: the one task that starts requests when the engine says so.
//!
//! ```text
//! loop {
//!     fetch the starts a request already saved with its own changes (an enqueue saves the
//!                                   starts it makes possible in its own transaction)
//!     transmits = every engine.poll_transmit(now)
//!     spawn a fetch per transmit    // after the next save instead when the engine asks
//!     unless a save is in flight: save what changed, then fetch what waited for it
//!                                   // each fetch reports back to the engine and wakes the pump
//!     flush broadcasts that are due
//!     resolve settle promises if idle (or past their cap)
//!     arm THE timer for min(engine.poll_timeout, next broadcast, earliest settle cap)
//!     wait for a wake-up: timer, fetch completion, or any event
//! }
//! ```
//!
//! - **One pump, one timer.** The pump is spawned once per worker instance; events never run
//!   it themselves, they only [`Pump::wake`] it. Exactly one `setTimeout` is armed at a time
//!   and re-armed only when the deadline changes. There is no polling interval.
//! - **Completions are saved by the pump.** A finished fetch only informs the engine and wakes
//!   the pump, whose next commit saves the outcome (with any new starts) in one transaction
//!   and only then broadcasts it.
//! - **Sending never waits for a save it does not need.** One save is in flight at a time;
//!   what changes meanwhile goes into the next, so a busy queue writes a few larger
//!   transactions rather than one per event. Starts the engine lets go out unsaved leave at
//!   once, even while a save is in flight: a slot freed by a response is refilled in the same
//!   turn, not a commit later. The engine bounds how many may be out unsaved
//!   ([`Transmit::save_first`]); the others wait for the next save.
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
//!   as `unavailable` and starts no new instance (see [`crate::worker::worker`]), and the pages
//!   send them again to the new one, so two instances never send side by side.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};

use js_sys::{Function, Promise};
use sluice_shared::{Millis, Transmit, TransportError};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

use crate::transport;
use crate::worker::{now_ms, scope, spawn, superseded, Worker};

/// Work due further away than this does not keep an event open: the browser keeps an idle
/// worker for about 30 s, so the timer still fires for it, and if the worker was stopped the
/// next keep-alive restarts it.
pub const IDLE_GRACE_MS: u64 = 5_000;
/// A settle promise resolves after this long even while busy (Chromium ends events that take
/// about 5 min); the next event's promise takes over.
pub const SETTLE_CAP_MS: u64 = 90_000;
/// Smallest re-arm delay when the engine names a deadline in the past yet starts nothing, so
/// such a disagreement can never spin.
const MIN_STALL_DELAY_MS: u64 = 10;
/// While busy, the pump saves at most this often unless a start waits for the save. Every
/// IndexedDB transaction costs the browser a few milliseconds of CPU whatever it holds, and on
/// a small machine that CPU is what delays the fetches: saving on every response made the
/// storage the heaviest part of a bulk job. Short enough that the starts out unsaved stay
/// below a budget's concurrency at 100 requests per second with 4 in flight (see
/// `Transmit::save_first`), and that a finished job is told to the pages promptly.
const SAVE_EVERY_MS: u64 = 16;

/// A wake-up flag with one waiter: a wake before the wait is not lost.
#[derive(Default)]
struct Signal {
    state: RefCell<(bool, Option<Waker>)>,
}

impl Signal {
    fn notify(&self) {
        let waker = {
            let mut s = self.state.borrow_mut();
            s.0 = true;
            s.1.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn wait(&self) -> Wait<'_> {
        Wait(self)
    }
}

struct Wait<'a>(&'a Signal);

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
struct Timer {
    handle: Option<i32>,
    deadline: Option<Millis>,
    callback: Option<Closure<dyn FnMut()>>,
}

#[derive(Default)]
pub struct Pump {
    signal: Signal,
    running: Cell<bool>,
    in_flight: Cell<usize>,
    /// Starts a request handler saved with its own changes, for the pump to fetch.
    saved_starts: RefCell<Vec<Transmit>>,
    /// Handlers whose starts are still being saved (see [`Pump::hold_for_saved_starts`]).
    saves_with_starts: Cell<u32>,
    /// The pump's own save is in flight (see [`save`]).
    saving: Cell<bool>,
    /// When the last save started, the pump's or a request handler's (see [`Pump::saved_at`]).
    last_save: Cell<Millis>,
    /// Starts polled to be saved before they go out that no save has taken yet.
    awaiting_save: RefCell<Vec<Transmit>>,
    handing_over: Cell<bool>,
    timer: RefCell<Timer>,
    /// Settle promises' resolve functions, with the instant each must resolve at the latest.
    waiters: RefCell<Vec<(Millis, Function)>>,
    was_idle: Cell<bool>,
}

impl Pump {
    /// A save took every change so far with it at `now` (a request handler's, which carries
    /// the pump's changes too): the pump's own next save is not due until a save interval
    /// later. While pages enqueue one job after another, their transactions then do not queue
    /// behind a pump save that would have saved nothing of its own.
    pub fn saved_at(&self, now: Millis) {
        self.last_save.set(now);
    }

    /// Something happened: run one more iteration soon.
    pub fn wake(&self) {
        self.signal.notify();
    }

    /// Whether starting requests is still up to this instance (not while it hands over to a
    /// newer version).
    pub fn may_start(&self) -> bool {
        self.running.get() && !self.handing_over.get()
    }

    /// A request's handler took starts to save in its own transaction (see
    /// `Worker::poll_with_request`). Until they are handed over, the pump starts nothing: a
    /// start of its own would leave before them (out of order, bunched with them when they
    /// follow), and before the save that tells a restart that starts may go out unsaved.
    pub fn hold_for_saved_starts(&self) {
        self.saves_with_starts.set(self.saves_with_starts.get() + 1);
    }

    /// Requests whose starts were saved by someone else's commit (see
    /// `Worker::poll_with_request`): the pump fetches them on its next turn. `held`: the
    /// handler called [`Pump::hold_for_saved_starts`] for them. Called whether the save
    /// succeeded or not (`starts` empty when not).
    pub fn fetch_saved_starts(&self, starts: Vec<Transmit>, held: bool) {
        if held {
            self.saves_with_starts
                .set(self.saves_with_starts.get().saturating_sub(1));
        }
        self.saved_starts.borrow_mut().extend(starts);
        self.wake();
    }

    fn arm(&self, deadline: Option<Millis>, now: Millis, stalled: bool) {
        let mut t = self.timer.borrow_mut();
        if t.deadline == deadline && (t.handle.is_some() || deadline.is_none()) {
            return;
        }
        if let Some(h) = t.handle.take() {
            scope().clear_timeout_with_handle(h);
        }
        t.deadline = None;
        let Some(deadline) = deadline else { return };
        let mut delay = deadline.saturating_sub(now);
        if stalled {
            delay = delay.max(MIN_STALL_DELAY_MS);
        }
        let delay = delay.min(i32::MAX as u64) as i32;
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
            Err(e) => crate::worker::warn(&format!(
                "setTimeout failed: {}",
                crate::error::describe(&e)
            )),
        }
    }

    fn on_timer(&self) {
        {
            let mut t = self.timer.borrow_mut();
            t.handle = None;
            t.deadline = None;
        }
        self.signal.notify();
    }

    /// Resolves the settle promises that are due: all of them when `all`.
    fn settle(&self, now: Millis, all: bool) {
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

    fn earliest_cap(&self) -> Option<Millis> {
        self.waiters.borrow().iter().map(|(cap, _)| *cap).min()
    }

    fn shut_down(&self) {
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
            break;
        }
        if superseded() {
            hand_over(&w).await;
            break;
        }
        // Starts a request's own transaction saved go out at once, whatever this turn's save
        // may have to wait for.
        let saved: Vec<Transmit> = std::mem::take(&mut *w.pump.saved_starts.borrow_mut());
        if !saved.is_empty() {
            sent_after_saving(&w, &saved);
            send_all(&w, saved);
        }
        let now = now_ms();
        let transmits = if w.pump.saves_with_starts.get() == 0 {
            w.poll_transmits(now)
        } else {
            Vec::new()
        };
        let started = !transmits.is_empty();
        // The engine says whether a start must be saved before it goes out or may go out at
        // once and be saved by the next save (a restore then counts it): see
        // `Transmit::save_first`.
        // A loop rather than `partition` and `extend`: generic functions of their own in the
        // wasm.
        let mut at_once = Vec::new();
        {
            let mut awaiting = w.pump.awaiting_save.borrow_mut();
            for t in transmits {
                if t.save_first {
                    awaiting.push(t);
                } else {
                    at_once.push(t);
                }
            }
        }
        send_all(&w, at_once);
        let someone_waits = !w.pump.awaiting_save.borrow().is_empty();
        let save_due = (!w.pump.saving.get() && (someone_waits || w.has_changes()))
            .then(|| w.pump.last_save.get() + SAVE_EVERY_MS);
        let save_due = match save_due {
            Some(due) if someone_waits || due <= now => {
                w.pump.last_save.set(now);
                save(&w);
                None
            }
            later => later,
        };
        w.read_rest_of_queue();

        let now = now_ms();
        let next_job = w.poll_timeout(now);
        // Not idle while part of the queue is still being read (it may hold work) or while
        // anything is still to be saved.
        let idle = w.has_whole_queue()
            && w.pump.in_flight.get() == 0
            && !w.pump.saving.get()
            && !w.has_changes()
            && w.pump.awaiting_save.borrow().is_empty()
            && next_job.is_none_or(|t| t > now + IDLE_GRACE_MS);
        let became_idle = idle && !w.pump.was_idle.get();
        w.pump.was_idle.set(idle);
        w.flush_broadcasts(now, became_idle);
        if idle && w.is_offline_with_work(now) {
            w.request_sync();
        }
        w.pump.settle(now, idle && w.broadcast_settled());

        let deadline = [
            next_job,
            save_due,
            w.broadcast_next_due(),
            w.pump.earliest_cap(),
        ]
        .into_iter()
        .flatten()
        .min();
        let stalled = !started && deadline.is_some_and(|d| d <= now);
        w.pump.arm(deadline, now, stalled);
        w.pump.signal.wait().await;
    }
    w.pump.shut_down();
}

/// Lets a newer version take over (see the module docs): starts nothing more, waits for the
/// requests in flight and saves their outcomes, tells the pages, then stops this instance,
/// which resolves every settle promise so that the browser can activate the successor.
async fn hand_over(w: &Rc<Worker>) {
    crate::worker::warn("a newer version of the worker is installed: handing the queue over");
    w.pump.handing_over.set(true);
    loop {
        if w.is_stopped() || w.commit(&[]).await.is_err() {
            return;
        }
        if w.pump.in_flight.get() == 0 {
            // Every start this instance made is saved: the successor owes none that may be out
            // unsaved. The next round's commit saves that.
            if w.engine_mut().hand_over() {
                continue;
            }
            // Everything saved goes out now (not throttled), and once more if a request handled
            // meanwhile changed more.
            if w.broadcast_next_due().is_some() {
                w.flush_broadcasts(now_ms(), true);
            }
            if w.broadcast_settled() {
                break;
            }
        }
        // Fetch completions and delivered broadcasts wake the pump; no timer is needed (every
        // fetch ends by its timeout).
        w.pump.arm(None, now_ms(), false);
        w.pump.signal.wait().await;
    }
    w.stop("a newer version of the worker takes over the queue");
}

/// Saves everything the engine changed, in the background; then sends the starts that waited
/// for this save and wakes the pump for the next one.
fn save(w: &Rc<Worker>) {
    w.pump.saving.set(true);
    let waiting = std::mem::take(&mut *w.pump.awaiting_save.borrow_mut());
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
        w.pump.saving.set(false);
        // After a failed save the instance stops; a successor may have loaded storage while
        // this one ran, and fetching now would send next to it. Either way the starts are
        // retried by whoever holds the queue next (same keys).
        if saved && !superseded() && !w.is_stopped() {
            sent_after_saving(&w, &waiting);
            send_all(&w, waiting);
        }
        w.pump.wake();
    });
}

/// Starts that were saved before they go out count from now, when they do (see
/// `Engine::on_sent`): the save took time the server must not see as a shorter gap.
fn sent_after_saving(w: &Rc<Worker>, transmits: &[Transmit]) {
    let now = now_ms();
    let mut engine = w.engine_mut();
    for t in transmits {
        engine.on_sent(&t.job_id, now);
    }
}

/// Hands every request to the browser now, then waits for their answers in the background.
fn send_all(w: &Rc<Worker>, transmits: Vec<Transmit>) {
    for t in transmits {
        w.pump.in_flight.set(w.pump.in_flight.get() + 1);
        let sent = transport::start(&t);
        spawn(answer_one(w.clone(), t, sent));
    }
}

/// One answer: its outcome goes to the engine; the pump saves and broadcasts it.
async fn answer_one(w: Rc<Worker>, t: Transmit, sent: transport::Sent) {
    let result = sent.response().await;
    w.pump
        .in_flight
        .set(w.pump.in_flight.get().saturating_sub(1));
    if w.is_stopped() {
        // This instance gave up its state; storage still has the job, which the next instance
        // sends again (same idempotency key).
        return;
    }
    let now = now_ms();
    let offline = matches!(result, Err(TransportError::Offline));
    {
        let mut engine = w.engine_mut();
        match result {
            Ok(response) => engine.on_response(&t.job_id, response, now),
            Err(error) => engine.on_transport_error(&t.job_id, error, now),
        }
    }
    if offline {
        w.request_sync();
    }
    w.pump.wake();
}
