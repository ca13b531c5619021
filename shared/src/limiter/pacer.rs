//! Pacer: spaces starts evenly, on a grid kept in exact fractions of a millisecond.
//!
//! It has two users. The limiter's pacing ([`Limiter::set_pacing`](super::Limiter::set_pacing))
//! spaces starts by the shortest window's length over its limit for as long as it is on, so that
//! a saturated budget does not repeat its limit in one burst every window. A fixed window paces
//! itself for one window after a pause, since it would otherwise hand out its whole count at the
//! first boundary.
//!
//! The grid is kept like a GCRA's theoretical arrival time, in exact fractions of a millisecond
//! (10.21 ms for 100 per 1,021 ms, where whole milliseconds would drift off the window). A start
//! that comes late, by up to [`PACING_CATCH_UP`] intervals, leaves the grid where it was, so the
//! next starts make the delay up. That is what keeps a real runtime at the rate: timers fire
//! late, a slot frees a few milliseconds after it could have, and spacing each start from the
//! last *actual* one would lose every such delay for good (a worker a millisecond late on a
//! 10 ms interval runs at 90%). Catching up never breaks the limit: every window is still
//! enforced on its own, and the grid only spreads what they allow.

use serde::{Deserialize, Serialize};

use super::{scaled, unscaled};
use crate::json::{FromJson, ToJson};
use crate::time::{DurationMs, Millis};

/// "No end" for a pacer, as an instant that survives saving: the state is stored as JavaScript
/// numbers, which hold integers exactly only up to 2^53 - 1 (`u64::MAX` comes back as a float
/// that no longer decodes). That is some 285,000 years from the epoch in milliseconds.
pub(super) const NEVER: Millis = (1 << 53) - 1;

/// How many pacing intervals late a start may be and still be made up by the starts after it
/// (see [`Limiter::set_pacing`](super::Limiter::set_pacing)): enough for a late timer or a slot
/// that freed a little late. The starts that make it up are still half an interval apart at
/// least.
pub const PACING_CATCH_UP: u32 = 3;

/// Spaces starts `step / per` ms apart until `until`, kept exactly like the GCRA's TAT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub(super) struct Pacer {
    /// The next start may come at `next + frac / per`.
    pub(super) next: Millis,
    pub(super) frac: u64,
    pub(super) step: DurationMs,
    pub(super) per: u32,
    pub(super) until: Millis,
}

impl Pacer {
    pub(super) fn new(at: Millis, length: DurationMs, limit: u32) -> Self {
        let mut pacer = Pacer {
            next: 0,
            frac: 0,
            step: length,
            per: limit,
            until: at.saturating_add(length),
        };
        pacer.set_scaled(u128::from(at) * u128::from(limit) + u128::from(length));
        pacer
    }

    pub(super) fn scaled(&self) -> u128 {
        scaled(self.next, self.frac, self.per)
    }

    pub(super) fn set_scaled(&mut self, scaled: u128) {
        (self.next, self.frac) = unscaled(scaled, self.per);
    }

    pub(super) fn next_ceil(&self) -> Millis {
        self.next.saturating_add(u64::from(self.frac > 0))
    }

    pub(super) fn earliest(&self) -> Millis {
        // From `until` on, pacing is over whatever `next` says.
        self.next_ceil().min(self.until)
    }

    /// The grid after a start at `at`. A start up to [`PACING_CATCH_UP`] intervals late keeps
    /// the grid: the next slot is one interval after the missed one, so the lateness is made
    /// up by the next starts. Later than that, the budget was idle or held back by something
    /// else (all slots busy, another window), which is not owed: the grid starts afresh from
    /// `at`, so an idle budget never opens with a burst.
    pub(super) fn after_on_grid(mut self, at: Millis) -> Self {
        let at = u128::from(at) * u128::from(self.per);
        let step = u128::from(self.step);
        let late_by = at.saturating_sub(self.scaled());
        let base = if late_by <= step * u128::from(PACING_CATCH_UP) {
            self.scaled()
        } else {
            at
        };
        self.set_scaled(base + step);
        self
    }

    /// Moves the next slot up to `at` if it lies before: the time before `at` is not owed.
    pub(super) fn skip_to(&mut self, at: Millis) {
        let at = u128::from(at) * u128::from(self.per);
        if self.scaled() < at {
            self.set_scaled(at);
        }
    }

    /// The pacer after a start at `at`, or none once its window is over.
    pub(super) fn after(mut self, at: Millis) -> Option<Self> {
        if at >= self.until {
            return None;
        }
        let now = u128::from(at) * u128::from(self.per);
        self.set_scaled(self.scaled().max(now) + u128::from(self.step));
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Algorithm;
    use crate::limiter::testing::*;

    #[test]
    fn pacing_spreads_starts_on_an_exact_grid_with_no_opening_burst() {
        let mut lim = limiter(Algorithm::SlidingLog, &[w(100, 1_000)], 0.98);
        lim.set_pacing(true);
        let starts = greedy(&mut lim, T0, 300);
        // One per 10.21 ms (1,021 ms stretched over 100): never two at once, and 300 starts
        // take 299 intervals, not 299 whole-millisecond gaps of 10 or 11.
        assert!(starts.windows(2).all(|p| p[1] - p[0] >= 10), "{starts:?}");
        let took = starts[299] - starts[0];
        assert!((3_052..=3_054).contains(&took), "took {took} ms");
        assert!(max_in_any_window(&starts, 1_000) <= 100);
    }

    #[test]
    fn pacing_makes_up_for_starts_that_came_late() {
        // A runtime that always starts 4 ms after it was allowed (a timer firing late): spaced
        // from the last actual start it would run at 10.21 / 14.21 of the rate. On the grid the
        // next start is due sooner, so the rate holds.
        let mut lim = limiter(Algorithm::SlidingLog, &[w(100, 1_000)], 0.98);
        lim.set_pacing(true);
        let mut at = T0;
        let mut starts = Vec::new();
        for _ in 0..1_000 {
            at = lim.next_start_at(at) + 4;
            lim.record_start(at);
            starts.push(at);
        }
        let took = (starts[999] - starts[0]) as f64;
        let per_second = 999.0 / took * 1_000.0;
        assert!(per_second >= 97.0, "{per_second:.1} per second");
        assert!(max_in_any_window(&starts, 1_000) <= 100);
    }

    #[test]
    fn pacing_makes_up_without_a_burst() {
        let mut lim = limiter(Algorithm::SlidingLog, &[w(100, 1_000)], 0.98);
        lim.set_pacing(true);
        lim.record_start(T0);
        // 25 ms late for the next slot (10.21): the grid is made up half an interval (6 ms)
        // apart at a time, never two at once.
        let starts = greedy(&mut lim, T0 + 35, 5);
        assert_eq!(starts, vec![T0 + 35, T0 + 41, T0 + 47, T0 + 53, T0 + 59]);
    }

    #[test]
    fn pacing_does_not_owe_the_time_a_budget_was_idle() {
        let mut lim = limiter(Algorithm::SlidingLog, &[w(100, 1_000)], 0.98);
        lim.set_pacing(true);
        greedy(&mut lim, T0, 10);
        // Idle for a second, then busy: no burst to make up for the quiet time.
        let starts = greedy(&mut lim, T0 + 2_000, 5);
        assert_eq!(starts[0], T0 + 2_000);
        assert!(starts.windows(2).all(|p| p[1] - p[0] >= 10), "{starts:?}");
    }

    #[test]
    fn pacing_survives_a_save_and_restore() {
        let mut lim = limiter(Algorithm::SlidingLog, &[w(100, 1_000)], 0.98);
        lim.set_pacing(true);
        greedy(&mut lim, T0, 7);
        // Saved as JavaScript numbers: every integer must be exact as a double.
        let saved = crate::json::to_string(&lim);
        let numbers = saved
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse::<u128>().ok());
        for n in numbers {
            assert!(
                n < 1 << 53,
                "{n} does not survive as a JavaScript number: {saved}"
            );
        }
        let restored = roundtrip(&lim);
        assert_eq!(restored, lim);
        assert_eq!(restored.next_start_at(T0), lim.next_start_at(T0));
    }

    #[test]
    fn pacing_continues_from_when_a_start_really_went_out() {
        let mut lim = limiter(Algorithm::SlidingLog, &[w(100, 1_000)], 0.98);
        lim.set_pacing(true);
        lim.record_start(T0);
        // It waited 30 ms for a save: the next start is an interval after that, not at once.
        lim.restamp(T0, T0 + 30);
        assert_eq!(lim.next_start_at(T0 + 30), T0 + 41);
    }
}
