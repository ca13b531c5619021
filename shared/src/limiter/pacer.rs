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
//! that comes late leaves the grid where it was, up to [`PACING_CATCH_UP`] intervals behind it,
//! so the next starts make the delay up. That is what keeps a real runtime at the rate: timers
//! fire late, a slot frees a few milliseconds after it could have, and spacing each start from
//! the last *actual* one would lose every such delay for good (a worker a millisecond late on a
//! 10 ms interval runs at 90%). Catching up never breaks the limit: every window is still
//! enforced on its own, and the grid only spreads what they allow.
//!
//! The credit is capped, not dropped: a budget held near the limit by its slots (4 in flight
//! on a 40 ms path reach about 100 a second) is late for the grid at nearly every start, by a
//! little more each time. When a start later than the cap threw the whole credit away, as it
//! once did, the next start had to wait a full interval from it, even with a slot free: in
//! the browser bench (100/s, 4 in flight, 30 ms ± 10 with 0-10 ms arrival jitter) pacing cost
//! about 3% of the rate that way. Only a budget that started nothing for twice the cap was
//! idle rather than late, and starts afresh.

use serde::{Deserialize, Serialize};

use super::{scaled, unscaled};
use crate::json::{FromJson, ToJson};
use crate::time::{DurationMs, Millis};

/// "No end" for a pacer, as an instant that survives saving: the state is stored as JavaScript
/// numbers, which hold integers exactly only up to 2^53 - 1 (`u64::MAX` comes back as a float
/// that no longer decodes). That is some 285,000 years from the epoch in milliseconds.
pub(super) const NEVER: Millis = (1 << 53) - 1;

/// How many pacing intervals of lateness the starts after a late one may make up (see
/// [`Limiter::set_pacing`](super::Limiter::set_pacing)): enough for a late timer or a slot
/// that freed a little late. The starts that make it up are still a quarter of an interval
/// apart at least ([`Limiter::next_start_at`](super::Limiter::next_start_at)).
pub const PACING_CATCH_UP: u32 = 3;

/// Lateness beyond which a budget was idle, not late: it starts on a fresh grid and owes no
/// catching up (an idle budget never opens with a burst). Twice the credit, so that a budget
/// whose grid sits at the cap (one that cannot keep up, start after start) is never taken for
/// an idle one while its starts come at most `PACING_CATCH_UP + 1` intervals apart.
const PACING_IDLE_AFTER: u32 = 2 * PACING_CATCH_UP;

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

    /// The grid after a start at `at`. A late start keeps the grid, up to [`PACING_CATCH_UP`]
    /// intervals behind `at`: the next slot is one interval after the missed one, so the
    /// lateness is made up by the next starts. A start later than [`PACING_IDLE_AFTER`]
    /// intervals ends an idle spell, which is not owed: the grid starts afresh from `at`.
    pub(super) fn after_on_grid(mut self, at: Millis) -> Self {
        let at = u128::from(at) * u128::from(self.per);
        let step = u128::from(self.step);
        let late_by = at.saturating_sub(self.scaled());
        let base = if late_by <= step * u128::from(PACING_IDLE_AFTER) {
            self.scaled()
                .max(at.saturating_sub(step * u128::from(PACING_CATCH_UP)))
        } else {
            at
        };
        self.set_scaled(base + step);
        self
    }

    /// Moves the next slot up to `intervals` intervals after `at`, if it lies before: starts
    /// are spaced from a start at `at` (one that really went out, or arrived, then).
    pub(super) fn not_before(&mut self, at: Millis, intervals: u64) {
        let from =
            u128::from(at) * u128::from(self.per) + u128::from(self.step) * u128::from(intervals);
        if self.scaled() < from {
            self.set_scaled(from);
        }
    }

    /// Moves the next slot up to `at` if it lies before: the time before `at` is not owed.
    pub(super) fn skip_to(&mut self, at: Millis) {
        self.not_before(at, 0);
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
    use crate::limiter::Limiter;
    use crate::time::Millis;

    use super::PACING_CATCH_UP;

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
        // 25 ms late for the next slot (10.21): the grid is made up a quarter interval (3 ms)
        // apart at a time, never two at once, and then it is back on the grid (51.05).
        let starts = greedy(&mut lim, T0 + 35, 5);
        assert_eq!(starts, vec![T0 + 35, T0 + 38, T0 + 41, T0 + 44, T0 + 52]);
    }

    /// `slots` requests in flight at most, each taking the next of `trips` (ms), started as
    /// soon as a slot is free and the limiter allows; returns the start times.
    fn slot_bound(lim: Option<&mut Limiter>, slots: usize, trips: &[u64]) -> Vec<Millis> {
        let mut free = vec![T0; slots];
        let mut lim = lim;
        trips
            .iter()
            .map(|&trip| {
                let (slot, &freed) = free
                    .iter()
                    .enumerate()
                    .min_by_key(|&(_, &t)| t)
                    .expect("slots");
                let at = match lim.as_deref_mut() {
                    Some(lim) => {
                        let at = lim.next_start_at(freed);
                        lim.record_start(at);
                        at
                    }
                    None => freed,
                };
                free[slot] = at + trip;
                at
            })
            .collect()
    }

    #[test]
    fn pacing_costs_nothing_when_the_slots_hold_a_budget_near_the_limit() {
        // 4 in flight, round trips of 31-51 ms (41 on average: 97.6 a second, just under the
        // paced 97.9): late for the grid at nearly every start. Measured on these trips: the
        // windows alone, unpaced, keep 0.991 of the slots' own rate; dropping the credit
        // whenever it passed 3 intervals, with make-ups half an interval apart, kept 0.954;
        // the capped credit with quarter-interval make-ups keeps 0.986.
        let mut rng = crate::random::Rng::seeded(7);
        let trips: Vec<u64> = (0..4_000).map(|_| 31 + rng.below_or_equal(20)).collect();
        let free = slot_bound(None, 4, &trips);
        let mut lim = limiter(Algorithm::SlidingLog, &[w(100, 1_000)], 0.98);
        lim.set_pacing(true);
        let paced = slot_bound(Some(&mut lim), 4, &trips);
        let took = |s: &[Millis]| (s[s.len() - 1] - s[0]) as f64;
        let kept = took(&free) / took(&paced);
        assert!(
            kept >= 0.98,
            "paced starts kept {kept:.4} of the slots' rate"
        );
        assert!(max_in_any_window(&paced, 1_000) <= 100);
        // Still never two at once.
        assert!(paced.windows(2).all(|p| p[1] > p[0]), "{paced:?}");
    }

    proptest::proptest! {
        /// Whatever the lateness (timers, slots, idle spells), pacing never lets more than
        /// `PACING_CATCH_UP + 1` starts ahead of an even spacing, and never two within a
        /// quarter interval.
        #[test]
        fn pacing_never_bursts_beyond_its_credit(
            // Mostly eager (a backlog), now and then late or idle for a while.
            gaps in proptest::collection::vec(
                proptest::prop_oneof![3 => proptest::strategy::Just(0u64), 1 => 0u64..100],
                1..300,
            ),
        ) {
            let mut lim = limiter(Algorithm::SlidingLog, &[w(100, 1_000)], 1.0);
            lim.set_pacing(true);
            let mut want = T0;
            let mut starts = Vec::new();
            for gap in gaps {
                want = want.max(starts.last().copied().unwrap_or(T0)) + gap;
                let at = lim.next_start_at(want);
                lim.record_start(at);
                starts.push(at);
            }
            // 10 ms a start: j - i starts after one need (j - i - credit - 1) intervals.
            for i in 0..starts.len() {
                for j in i + 1..starts.len() {
                    let owed = (j - i) as u64;
                    let allowed = 10 * owed.saturating_sub(u64::from(PACING_CATCH_UP) + 1);
                    proptest::prop_assert!(
                        starts[j] - starts[i] >= allowed,
                        "{} starts in {} ms: {:?}", owed + 1, starts[j] - starts[i], &starts[i..=j]
                    );
                }
            }
            proptest::prop_assert!(starts.windows(2).all(|p| p[1] - p[0] >= 3), "{:?}", starts);
        }
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
