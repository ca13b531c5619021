//! What the pump ([`crate::pump`]) asks of the instance, one call per step of its loop: the
//! pump never holds the engine or the pump's protocol itself, so a send can be followed from
//! the pump to `fetch` and back through these calls alone.

use sluice_shared::protocol::ProtocolError;
use sluice_shared::{JobId, Millis, Response, Transmit, TransportError};

use super::Worker;

/// One turn's work: the requests to hand to the browser now, and whether a save begins.
pub struct Turn {
    pub sends: Vec<Transmit>,
    pub save: bool,
}

/// When the pump must look again, and whether nothing is under way or waiting.
pub struct Outlook {
    /// The engine's next instant (a start, a backoff's end, a deadline), if any.
    pub next: Option<Millis>,
    pub quiet: bool,
}

impl Worker {
    /// Runs the pump's protocol for one turn at `now` (what fell due happens, starts are
    /// handed out, a save begins) and returns what to carry out.
    pub fn turn(&self, now: Millis) -> Turn {
        let mut engine = self.engine.borrow_mut();
        let mut driver = self.pump.driver.borrow_mut();
        driver.turn(&mut engine, now);
        Turn {
            sends: driver.poll_sends(),
            save: driver.poll_save(),
        }
    }

    /// The pump's next instant and whether the queue is quiet, after a turn.
    pub fn outlook(&self, now: Millis) -> Outlook {
        let engine = self.engine.borrow();
        let driver = self.pump.driver.borrow();
        Outlook {
            next: driver.poll_timeout(&engine, now),
            quiet: driver.is_quiet(&engine),
        }
    }

    /// A request's answer (or why it has none) for the engine; the pump's next save takes the
    /// outcome.
    pub fn on_answer(&self, job_id: &JobId, result: Result<Response, TransportError>, now: Millis) {
        let mut engine = self.engine.borrow_mut();
        let mut driver = self.pump.driver.borrow_mut();
        match result {
            Ok(response) => driver.on_response(&mut engine, job_id, response, now),
            Err(error) => driver.on_transport_error(&mut engine, job_id, error, now),
        }
    }

    /// The worker script's credentials function gave `supplied` for `t`, about to leave at
    /// `now`: the headers to send it with, or `None` when the engine let it go meanwhile. An
    /// error (headers `fetch` would refuse) is the request's, reported as its answer.
    pub fn on_credentials_supplied(
        &self,
        t: &Transmit,
        supplied: Vec<(String, String)>,
        now: Millis,
    ) -> Result<Option<Vec<(String, String)>>, String> {
        let send = self
            .engine
            .borrow_mut()
            .on_credentials_supplied(&t.job_id, supplied.clone(), now)
            .map_err(|e| supplied_badly(e.into()))?;
        if !send {
            self.pump.driver.borrow_mut().on_not_sent();
            return Ok(None);
        }
        Ok(Some(sluice_shared::job::headers_set_over(
            &t.headers, &supplied,
        )))
    }

    /// While a budget waits for credentials, the worker script's function gave `supplied`;
    /// whether that ended the wait.
    pub fn offer_credentials(&self, budget: &str, supplied: Vec<(String, String)>) -> bool {
        match self.engine.borrow_mut().offer_credentials(budget, supplied) {
            Ok(ended) => ended,
            Err(e) => {
                crate::runtime::warn(&supplied_badly(e.into()));
                false
            }
        }
    }

    /// The budgets that wait for credentials after a refusal.
    pub fn budgets_waiting_for_credentials(&self) -> Vec<String> {
        self.engine.borrow().budgets_waiting_for_credentials()
    }

    /// The pump's save ended (`sent`: its starts may go out).
    pub fn on_pump_saved(&self, sent: bool) {
        self.pump.driver.borrow_mut().on_saved(sent);
    }

    /// A successor is installed: start nothing more.
    pub fn stop_starting(&self) {
        self.pump.driver.borrow_mut().stop_starting();
    }

    /// Requests handed out and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.pump.driver.borrow().in_flight()
    }

    /// Marks every start as saved for the successor (see `Persistence::hand_over`); whether that
    /// changed anything still to save.
    pub fn hand_over_starts(&self) -> bool {
        self.engine.borrow_mut().persistence().hand_over()
    }
}

/// Why headers the worker script's credentials function gave cannot be sent (converted to the
/// wire's error at this edge, as every engine error the worker reports is).
fn supplied_badly(error: ProtocolError) -> String {
    format!("the worker script's credentials function gave {error}")
}
