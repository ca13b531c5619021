//! Limiter: decides the earliest instant at which one more request may start.
//! (Interface fixed; implementation in progress.)

use serde::{Deserialize, Serialize};

use crate::config::{Algorithm, ConfigError, Window};
use crate::time::{DurationMs, Millis};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limiter {
    algorithm: Algorithm,
    windows: Vec<Window>,
    target_utilization: f64,
    starts: Vec<Millis>,
}

impl Limiter {
    /// A limiter enforcing every window at once. Errors on an empty or zero window.
    pub fn new(
        algorithm: Algorithm,
        windows: &[Window],
        target_utilization: f64,
    ) -> Result<Self, ConfigError> {
        let _ = (algorithm, windows, target_utilization);
        todo!()
    }

    /// The earliest instant `>= now` at which every window allows one more start.
    pub fn next_start_at(&self, now: Millis) -> Millis {
        let _ = now;
        todo!()
    }

    /// Counts a start at `at` (never earlier than the last recorded start).
    pub fn record_start(&mut self, at: Millis) {
        let _ = at;
        todo!()
    }

    /// After a pause: from `at` on, starts come only at the steady rate (limit / window), with
    /// no burst, as if the limiter had been used to the full just before `at`.
    pub fn start_empty(&mut self, at: Millis) {
        let _ = at;
        todo!()
    }

    /// The server reported a quota: replace the window of about that length (within 10%), or
    /// add it. Keeps the recorded starts, so a retune never allows a burst above the new limit.
    pub fn retune(&mut self, window: Window) {
        let _ = window;
        todo!()
    }

    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Sustained starts per millisecond this limiter allows (the tightest window, after the
    /// utilization margin): what an ETA divides by.
    pub fn sustained_rate_per_ms(&self) -> f64 {
        todo!()
    }

    /// Starts recorded in `(now - length, now]`, for the achieved-rate figure.
    pub fn starts_within(&self, now: Millis, length: DurationMs) -> u32 {
        let _ = (now, length);
        todo!()
    }
}
