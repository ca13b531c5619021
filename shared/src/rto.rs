//! How long one attempt is given before it is abandoned and tried again: a retransmission
//! timeout in the manner of TCP's (RFC 6298), from the budget's measured round trips.
//!
//! # Why not the configured `timeoutMs` alone
//!
//! An answer lost on the way back (a dropped connection, a proxy that swallowed it) leaves its
//! request in flight until the attempt times out. With the configured 15 s, each lost answer
//! held its job, its slot and a place in the windows for 15 s, and the last ones held the end
//! of the run: in `sluice simulate`, 1% of answers lost cut the share of the limit to a fifth.
//! A path whose answers come in 30 ms says within a second that an answer is not coming.
//!
//! # The estimate
//!
//! RFC 6298's smoothed trip and its variation (`srtt + 4 * rttvar`, gains 1/8 and 1/4), with
//! its floor of one second (2.4: "Whenever RTO is computed, if it is less than 1 second, then
//! the RTO SHOULD be rounded up to 1 second"), and the configured timeout as its ceiling.
//! TCP's estimate forgets a slow trip within a few dozen samples; a server that is slow now and
//! then (one answer in a hundred after 2 s) would then have each of its slow answers abandoned
//! and asked again. So the estimate is at least [`SLOW_FACTOR`] times the slowest trip of
//! recent memory, which fades by half over [`SLOW_HALF_LIFE`] trips: once one 2 s answer was
//! seen, attempts are given 3 s for the next few hundred trips.
//!
//! # Karn's rule
//!
//! Only answered attempts are measured; an attempt given up says nothing of the trip. Each
//! give-up doubles the next attempt's time for the same job (TCP's backoff), so a server
//! slower than anything measured so far is waited for after at most a few tries (1, 2, 4, 8 s
//! before the 15 s ceiling), and an attempt abandoned early does not count against the job's
//! attempts: only one that ran to the configured timeout does (see `Engine::on_transport_error`).

use crate::time::DurationMs;

/// The least time an attempt is given once round trips were measured (RFC 6298, 2.4).
pub const RTO_FLOOR_MS: DurationMs = 1_000;

/// Answered trips before the estimate is trusted: until then an attempt gets the configured
/// timeout (the first trips of a connection include its handshake).
pub const RTO_TRUSTED_AFTER: u32 = 8;

/// An attempt is given at least this many times the slowest recent trip.
pub const SLOW_FACTOR: f64 = 1.5;

/// Trips over which the slowest one remembered fades by half.
pub const SLOW_HALF_LIFE: f64 = 512.0;

/// `0.5^(1/512)`, the per-trip fade of the slowest trip (a literal, not `powf`, which would
/// link libm's tables into the worker's wasm; a test checks it).
const SLOW_FADE: f64 = 0.998_647_112_890_970_2;

/// The measured trips of one budget, as the timeout needs them. In memory only, as the round
/// trips are: a restored worker gives its first attempts the configured timeout.
#[derive(Clone, Debug, Default)]
pub struct Rto {
    srtt: f64,
    rttvar: f64,
    /// The slowest trip of recent memory, fading (see [`SLOW_HALF_LIFE`]).
    slow: f64,
    trips: u32,
}

impl Rto {
    /// An answered attempt's round trip.
    pub fn record(&mut self, trip: DurationMs) {
        let r = trip as f64;
        if self.trips == 0 {
            self.srtt = r;
            self.rttvar = r / 2.0;
        } else {
            self.rttvar = 0.75 * self.rttvar + 0.25 * (self.srtt - r).abs();
            self.srtt = 0.875 * self.srtt + 0.125 * r;
        }
        self.slow = r.max(self.slow * SLOW_FADE);
        self.trips = self.trips.saturating_add(1);
    }

    /// How long an attempt may take before it is given up, after `given_up` earlier attempts
    /// of the same job were abandoned at this estimate (each doubles it), never more than
    /// `ceiling` (the configured timeout).
    pub fn timeout(&self, ceiling: DurationMs, given_up: u32) -> DurationMs {
        if self.trips < RTO_TRUSTED_AFTER {
            return ceiling;
        }
        let estimate = (self.srtt + 4.0 * self.rttvar).max(SLOW_FACTOR * self.slow);
        let base = (estimate.ceil() as DurationMs).max(RTO_FLOOR_MS);
        base.saturating_mul(1 << given_up.min(16)).min(ceiling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fade_halves_over_its_half_life() {
        let want = 0.5f64.powf(1.0 / SLOW_HALF_LIFE);
        assert!((SLOW_FADE - want).abs() < 1e-15, "{want}");
    }

    #[test]
    fn untrusted_until_a_few_trips_then_the_floor() {
        let mut r = Rto::default();
        for _ in 0..RTO_TRUSTED_AFTER - 1 {
            r.record(30);
        }
        assert_eq!(r.timeout(15_000, 0), 15_000);
        r.record(30);
        assert_eq!(r.timeout(15_000, 0), RTO_FLOOR_MS);
        // Each give-up doubles it, up to the ceiling.
        assert_eq!(r.timeout(15_000, 1), 2_000);
        assert_eq!(r.timeout(15_000, 4), 15_000);
        assert_eq!(r.timeout(500, 0), 500);
    }

    #[test]
    fn a_slow_answer_is_remembered_for_hundreds_of_trips() {
        let mut r = Rto::default();
        for _ in 0..100 {
            r.record(30);
        }
        r.record(2_030);
        for _ in 0..200 {
            r.record(30);
        }
        // TCP's estimate alone is back near 30 ms by now; the slow trip still counts.
        let t = r.timeout(15_000, 0);
        assert!(t > 2_030, "{t}");
        for _ in 0..5_000 {
            r.record(30);
        }
        assert_eq!(r.timeout(15_000, 0), RTO_FLOOR_MS);
    }
}
