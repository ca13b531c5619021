//! The pump's protocol, sans-IO: when a start goes out, when a save begins, and the one instant
//! to wake up at.
//!
//! The engine decides *which* request may start and whether it must be saved first
//! ([`Transmit::save_first`]); this driver decides *when* the worker hands it to the network
//! and *when* it saves. The service worker runs it with IndexedDB, `fetch` and one
//! `setTimeout`; the simulator runs the same code with a fake clock, a strict server and a
//! modelled save latency, so a figure of `sluice simulate` is a figure of what the browser runs.
//!
//! Shaped like the engine (and `quinn-proto`): inputs carry `now`, outputs are pulled.
//!
//! ```text
//! inputs (the shell runs a turn after each)
//!   turn(engine, now)                  a wake-up: the timer fired, or any input below
//!                                      (runs the engine's handle_timeout, then polls)
//!   on_response / on_transport_error   an answer to a request handed out
//!   on_not_sent                        a request handed out that the engine let go before
//!                                      the shell sent it (it waited for credentials)
//!   on_saved(sent)                     the pump's save ended
//!   request_save_begins / _ended       a page request's own save, carrying starts
//!   save_taken(now)                    any other save took every change so far
//!   stop_starting()                    hand the queue over to a successor
//! outputs (pulled after each turn, in this order)
//!   poll_sends()                       the requests to hand to the network now
//!   poll_save()                        whether the pump's save begins now
//!   poll_timeout(engine, now)          the one timer's deadline
//! ```
//!
//! The rules, each kept here once:
//! - **Save first when the engine says so.** A start with `save_first` waits for a save begun
//!   after it was polled; it is handed out only once that save landed ([`Pump::on_saved`]).
//!   The others are handed out at once, even while a save is in flight: a slot freed by a
//!   response is refilled in the same turn, not a commit later.
//! - **One save of the pump's in flight.** What changes meanwhile goes into the next one, so a
//!   busy queue writes a few larger transactions rather than one per event.
//! - **At most one save per [`SAVE_EVERY_MS`] unless a start waits for it.**
//! - **A page request's save carries the starts it makes possible** ([`Pump::request_save_begins`]):
//!   an interactive job then needs one save before its fetch instead of two. Until that save
//!   ends the pump starts nothing of its own: it would leave before them, or send a job of the
//!   request before the request's save landed (storage full refuses it, the page is told
//!   nothing was kept and enqueues it again, and the job would be sent twice).
//! - **One timer.** [`Pump::poll_timeout`] names the one next instant the pump has anything to
//!   do, never one in the past that would make it spin.

use crate::engine::{Engine, Response, Transmit, TransportError};
use crate::time::{DurationMs, Millis};

/// While busy, the pump saves at most this often unless a start waits for the save. Every
/// IndexedDB transaction costs the browser a few milliseconds of CPU whatever it holds, and on
/// a small machine that CPU is what delays the fetches: saving on every response made the
/// storage the heaviest part of a bulk job. Short enough that the starts out unsaved stay
/// below a budget's concurrency at 100 requests per second with 4 in flight (see
/// `Transmit::save_first`), and that a finished job is told to the pages promptly.
pub const SAVE_EVERY_MS: DurationMs = 16;

/// Smallest wait when the engine names a deadline in the past yet the turn started nothing, so
/// such a disagreement (or a start held for a request's save) can never spin.
pub const MIN_STALL_DELAY_MS: DurationMs = 10;

/// The pump's state between turns. One per worker instance: a new instance starts a new one.
#[derive(Debug, Default)]
pub struct Pump {
    /// Requests handed out whose answer has not been reported.
    in_flight: usize,
    /// Starts to hand out, oldest first.
    ready: Vec<Transmit>,
    /// Starts to save first that no save has taken yet.
    awaiting_save: Vec<Transmit>,
    /// The pump's save in flight, with the starts that wait for it.
    saving: Option<Vec<Transmit>>,
    /// A save was decided that [`Pump::poll_save`] has not handed out yet.
    save_to_begin: bool,
    /// When the pump's next save is due while nobody waits for it.
    save_due: Option<Millis>,
    /// When the last save began, the pump's or anyone else's.
    last_save: Millis,
    /// Page requests' saves that have not ended.
    request_saves: u32,
    /// Whether the last turn polled a start (see [`MIN_STALL_DELAY_MS`]).
    started: bool,
    /// Starting is over for this instance (see [`Pump::stop_starting`]).
    stopped_starting: bool,
}

impl Pump {
    // ----- inputs --------------------------------------------------------------------------

    /// Something happened (a timer fired, an answer or a save arrived, work was enqueued):
    /// take every start the engine allows now and decide whether the pump's save begins.
    pub fn turn(&mut self, engine: &mut Engine, now: Millis) {
        // Starts released by a save since the last turn leave now: they count from now (see
        // [`Engine::on_sent`]), before anything is polled, or the save's time would let the
        // next start follow them closer than the pacing allows.
        for t in &self.ready {
            engine.on_sent(&t.job_id, now);
        }
        engine.handle_timeout(now);
        self.started = false;
        if self.may_start() && self.request_saves == 0 {
            while let Some(t) = engine.poll_transmit(now) {
                self.started = true;
                if t.save_first {
                    self.awaiting_save.push(t);
                } else {
                    self.ready.push(t);
                }
            }
        }
        self.save_due = None;
        if self.saving.is_some() {
            return;
        }
        let someone_waits = !self.awaiting_save.is_empty();
        if !someone_waits && !engine.has_changes() {
            return;
        }
        let due = self.last_save + SAVE_EVERY_MS;
        if someone_waits || due <= now {
            self.last_save = now;
            self.saving = Some(std::mem::take(&mut self.awaiting_save));
            self.save_to_begin = true;
        } else {
            self.save_due = Some(due);
        }
    }

    /// The answer to a request handed out by [`Pump::poll_sends`] arrived.
    pub fn on_response(&mut self, engine: &mut Engine, id: &str, response: Response, now: Millis) {
        self.in_flight = self.in_flight.saturating_sub(1);
        engine.on_response(id, response, now);
    }

    /// A request handed out by [`Pump::poll_sends`] got no answer.
    pub fn on_transport_error(
        &mut self,
        engine: &mut Engine,
        id: &str,
        error: TransportError,
        now: Millis,
    ) {
        self.in_flight = self.in_flight.saturating_sub(1);
        engine.on_transport_error(id, error, now);
    }

    /// A request handed out by [`Pump::poll_sends`] was not sent after all: the engine let it
    /// go while the shell waited to send it (see
    /// [`Engine::on_credentials_supplied`](crate::engine::Engine::on_credentials_supplied)).
    pub fn on_not_sent(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// The pump's save (begun on [`Pump::poll_save`]) ended. `sent`: it landed and this instance
    /// may still send; the starts that waited for it go out. Otherwise they never do: whoever
    /// holds the queue next sends them again (same keys).
    pub fn on_saved(&mut self, sent: bool) {
        if let Some(waiting) = self.saving.take() {
            if sent {
                let mut waiting = waiting;
                self.ready.append(&mut waiting);
            }
        }
    }

    /// A page request's handler is about to save its own changes: the starts the engine allows
    /// now go into that save (counted as saved first: they leave when it lands), and the pump
    /// starts nothing of its own until it ends, whether it carries starts or not (the jobs the
    /// request adds are not saved before). Empty while starting is over. Report the end with
    /// [`Pump::request_save_ended`].
    pub fn request_save_begins(&mut self, engine: &mut Engine, now: Millis) -> Vec<Transmit> {
        let mut starts = Vec::new();
        engine.handle_timeout(now);
        if self.may_start() {
            while let Some(t) = engine.poll_transmit_saved_first(now) {
                starts.push(t);
            }
        }
        self.request_saves += 1;
        starts
    }

    /// The save of [`Pump::request_save_begins`] ended: its starts go out when `sent` (it
    /// landed and this instance may send), and the pump starts again.
    pub fn request_save_ended(&mut self, starts: Vec<Transmit>, sent: bool) {
        self.request_saves = self.request_saves.saturating_sub(1);
        if sent {
            let mut starts = starts;
            self.ready.append(&mut starts);
        }
    }

    /// A save other than the pump's took every change so far at `now` (a request handler's):
    /// the pump's own next save is not due until a save interval later. While pages enqueue
    /// one job after another, their transactions then do not queue behind a pump save that
    /// would have saved nothing of its own.
    pub fn save_taken(&mut self, now: Millis) {
        self.last_save = now;
    }

    /// This instance starts nothing more (a newer version takes the queue over). What is
    /// ready or waiting for a save is still handed out once saved.
    pub fn stop_starting(&mut self) {
        self.stopped_starting = true;
    }

    // ----- outputs -------------------------------------------------------------------------

    /// The requests to hand to the network now, oldest first. Pull right after
    /// [`Pump::turn`], at its `now`: that is when their starts count from.
    pub fn poll_sends(&mut self) -> Vec<Transmit> {
        let sends = std::mem::take(&mut self.ready);
        self.in_flight += sends.len();
        sends
    }

    /// Whether the pump's save begins now: take the engine's changes
    /// ([`Persistence::take_changes`](crate::engine::Persistence::take_changes)) and write them;
    /// report the end with [`Pump::on_saved`]. Pull after [`Pump::poll_sends`], so that the
    /// fetches are not held up by the save. (A save that finds no changes, because a request's own
    /// save took them, waits for the saves before it instead.)
    pub fn poll_save(&mut self) -> bool {
        std::mem::take(&mut self.save_to_begin)
    }

    /// The one instant at which to call [`Pump::turn`] next: a start the engine allows, or
    /// the pump's save falling due. `None`: nothing until an input arrives.
    pub fn poll_timeout(&self, engine: &Engine, now: Millis) -> Option<Millis> {
        let next = match (engine.poll_timeout(now), self.save_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }?;
        if !self.started && next <= now {
            return Some(now + MIN_STALL_DELAY_MS);
        }
        Some(next)
    }

    // ----- observation ---------------------------------------------------------------------

    /// Whether starting requests is still up to this instance.
    pub fn may_start(&self) -> bool {
        !self.stopped_starting
    }

    /// Requests handed out and not answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Nothing out, nothing saving or waiting to be saved or handed out: only the timer (if
    /// any) is left.
    pub fn is_quiet(&self, engine: &Engine) -> bool {
        self.in_flight == 0
            && self.saving.is_none()
            && self.request_saves == 0
            && self.awaiting_save.is_empty()
            && self.ready.is_empty()
            && !engine.has_changes()
    }
}
