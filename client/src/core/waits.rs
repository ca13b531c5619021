//! Waiting on a job's end (`done`): from any tab, by id, also for jobs whose end came before
//! anyone waited.

use sluice_shared::job::JobState;

use crate::oneshot::{self};

use super::*;

impl Core {
    pub(super) fn done_after_enqueue(&mut self, id: &str, state: JobState, now: f64) -> Done {
        self.undiscard(id);
        if state.is_terminal() {
            // Ended at once (say a create and a delete that cancelled out).
            let (tx, rx) = oneshot::channel();
            let known = self.finished.iter().find(|u| u.id == id);
            if known.is_some_and(|u| u.withheld) {
                return self.wait_done(id, now);
            }
            let result = match known {
                Some(u) => outcome_of(u),
                None => end_of(id, state, None, None),
            };
            tx.send(result);
            return Done {
                id: id.to_string(),
                rx,
            };
        }
        self.wait_done(id, now)
    }

    /// A future for a job's end, known or not yet known.
    pub fn wait_done(&mut self, id: &str, now: f64) -> Done {
        let (tx, rx) = oneshot::channel();
        let done = Done {
            id: id.to_string(),
            rx,
        };
        if self.closed {
            drop(tx);
            return done;
        }
        if self.discarded.iter().any(|d| d == id) {
            tx.send(Err(JobEnd::discarded(id)));
            return done;
        }
        let mut ask = false;
        match self.finished.iter().find(|u| u.id == id) {
            Some(u) if u.withheld => ask = true,
            Some(u) => {
                tx.send(outcome_of(u));
                return done;
            }
            None => {}
        }
        if self.waiters.is_empty() {
            // Start the "no news for a while" clock from now, not from the last news.
            self.last_news = self.last_news.max(now);
        }
        let since = self.counter;
        self.waiters
            .get_or_insert_with(id, || Waiter {
                txs: Vec::new(),
                since,
                registered_at: now,
            })
            .txs
            .push(tx);
        if ask {
            self.ask_outcomes(vec![id.to_string()], now);
        }
        done
    }
}
