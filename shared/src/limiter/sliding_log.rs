//! Sliding log (the default): never more than `limit` starts in any placement of a window.
//!
//! It keeps the start times themselves. A start at `t` is allowed when the `limit`-th most
//! recent start is at least one window before `t`; then no placement of the (half-open) window
//! anywhere on the time line ever holds more than `limit` starts. It is the only one of the four
//! algorithms with that guarantee, which is what a server that counts a sliding window, or one
//! whose algorithm we do not know, needs: being exact is what lets us run close to the limit
//! without ever being refused. It costs up to `limit` timestamps per window (5,000 for an hourly
//! quota of 5,000), and the check stays O(1) because it only looks at one entry, counted from the
//! back of the log.
//!
//! The timestamps are the limiter's log of real starts, shared by every window; a window's own
//! state is only the floor a pause lays down (see [`LogState`]).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::ceil_millis;
use crate::json::{FromJson, ToJson};
use crate::time::{DurationMs, Millis};

/// A window's own part of the sliding log. The log itself is the limiter's list of real starts;
/// what a window keeps of its own is a *floor*: the synthetic starts `start_empty` adds (and
/// those a retune carries over), merged in whenever the log is read by taking, position by
/// position counted from the most recent start, the later of the real and the synthetic one.
///
/// Taking the later start at every position makes the merged log at least as strict as the
/// real one (every start it allows, the real log allows too, so the exact guarantee holds for
/// the real starts) and at least as strict as the synthetic one (so no burst). Once merged, the
/// entries age like real ones: each new start pushes every earlier one a position back, which
/// `shift` counts instead of rewriting the floor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub(super) struct LogState {
    /// The instants at which the floor's starts leave the window (start + length), oldest
    /// first; the last one sits at position `shift + 1` from the most recent start.
    pub(super) floor: VecDeque<Millis>,
    /// Starts recorded since the floor was laid down.
    shift: u32,
}

impl LogState {
    /// When the floor's start at `position` (1 = the most recent start) leaves the window.
    fn floor_at(&self, position: usize) -> Option<Millis> {
        let from_back = position.checked_sub(self.shift as usize)?.checked_sub(1)?;
        let index = self.floor.len().checked_sub(from_back + 1)?;
        Some(self.floor[index])
    }

    /// When the start at `position` leaves the window: the later of the real and floor ones.
    fn leaves_at(
        &self,
        position: usize,
        length: DurationMs,
        starts: &VecDeque<Millis>,
    ) -> Option<Millis> {
        let real = starts
            .len()
            .checked_sub(position)
            .map(|i| starts[i].saturating_add(length));
        real.max(self.floor_at(position))
    }

    pub(super) fn earliest(
        &self,
        limit: u32,
        length: DurationMs,
        starts: &VecDeque<Millis>,
    ) -> Millis {
        // One more start is allowed once the `limit`-th most recent has left the window: then
        // the window ending at the new start holds `limit - 1` earlier ones, and so does every
        // other placement containing it, since they reach no further back.
        self.leaves_at(limit as usize, length, starts).unwrap_or(0)
    }

    pub(super) fn record(&mut self, limit: u32, at: Millis) {
        self.shift = self.shift.saturating_add(1);
        // Only the entry at position `limit` is ever read, and positions only grow: entries
        // already past it are dead, as are those whose window has ended.
        let live = (limit as usize).saturating_sub(self.shift as usize);
        while self.floor.len() > live || self.floor.front().is_some_and(|&e| e <= at) {
            self.floor.pop_front();
        }
        if self.floor.is_empty() {
            self.shift = 0;
        }
    }

    pub(super) fn start_empty(&mut self, limit: u32, length: DurationMs, at: Millis) {
        // "Used to the full just before `at`": `limit` synthetic starts spread evenly over the
        // window ending at `at`, the most recent at `at` itself. The next start is allowed when
        // the oldest leaves, about `length / limit` after `at`, then one per `length / limit`.
        // Merged position by position with the floor already laid down; the real starts are
        // merged when the floor is read, in `leaves_at`.
        let n = limit as usize;
        let mut floor = VecDeque::with_capacity(n);
        for position in (1..=n).rev() {
            let synthetic = (n - position + 1) as u128 * u128::from(length);
            let synthetic = at.saturating_add(ceil_millis(synthetic, limit));
            floor.push_back(
                self.floor_at(position)
                    .map_or(synthetic, |e| e.max(synthetic)),
            );
        }
        *self = LogState { floor, shift: 0 };
    }

    pub(super) fn retuned(
        &self,
        length: DurationMs,
        limit: u32,
        new_length: DurationMs,
    ) -> LogState {
        // The floor's starts keep their instants; only when they leave the window changes.
        let live = (limit as usize).saturating_sub(self.shift as usize);
        let skip = self.floor.len().saturating_sub(live);
        let mut floor: VecDeque<Millis> = VecDeque::with_capacity(self.floor.len() - skip);
        for &e in self.floor.iter().skip(skip) {
            floor.push_back(e.saturating_add(new_length).saturating_sub(length));
        }
        let shift = if floor.is_empty() { 0 } else { self.shift };
        LogState { floor, shift }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Algorithm;
    use crate::limiter::testing::*;
    use crate::time::Millis;
    use proptest::prelude::*;

    #[test]
    fn sliding_log_allows_exactly_the_limit_in_any_window() {
        let mut lim = limiter(Algorithm::SlidingLog, &[w(3, 1000)], 1.0);
        assert_eq!(
            greedy(&mut lim, T0, 7),
            [T0, T0, T0, T0 + 1000, T0 + 1000, T0 + 1000, T0 + 2000]
        );
        // Spread starts: the window slides with each of them.
        let mut lim = limiter(Algorithm::SlidingLog, &[w(2, 1000)], 1.0);
        lim.record_start(T0);
        lim.record_start(T0 + 300);
        assert_eq!(lim.next_start_at(T0 + 500), T0 + 1000);
        lim.record_start(T0 + 1000);
        assert_eq!(lim.next_start_at(T0 + 1000), T0 + 1300);
        // Half-open: the start at T0 + 300 no longer counts at T0 + 1300.
        assert_eq!(lim.starts_within(T0 + 1300, 1000), 1);
    }

    #[test]
    fn sliding_log_enforces_every_window_together() {
        let mut lim = limiter(Algorithm::SlidingLog, &[w(2, 100), w(3, 1000)], 1.0);
        assert_eq!(greedy(&mut lim, T0, 4), [T0, T0, T0 + 100, T0 + 1000]);
        let mut lim = limiter(Algorithm::SlidingLog, &[w(10, 1000), w(50, 60_000)], 1.0);
        let starts = greedy_until(&mut lim, T0, T0 + 600_000);
        assert_eq!(max_in_any_window(&starts, 1000), 10);
        assert_eq!(max_in_any_window(&starts, 60_000), 50);
        assert_eq!(starts.len(), 500);
    }

    proptest! {
        #[test]
        fn sliding_log_never_exceeds_a_limit_in_any_placement(
            windows in windows_strategy(1..=5000),
            u in utilization_strategy(),
            ops in plain_ops(),
        ) {
            let mut lim = limiter(Algorithm::SlidingLog, &windows, u);
            let played = play(&mut lim, 0, &ops, true);
            let starts = &played.starts;
            for window in &windows {
                let most = max_in_any_window(starts, window.length_ms);
                prop_assert!(
                    most <= window.limit as usize,
                    "{} starts in {} ms, limit {}", most, window.length_ms, window.limit
                );
            }
            // And the stronger claim the margin rests on: exact on the stretched windows.
            for meter in &lim.meters {
                prop_assert!(max_in_any_window(starts, meter.length) <= meter.limit as usize);
            }
        }

        #[test]
        fn sliding_log_after_a_pause_is_exact_as_if_used_to_the_full(
            windows in windows_strategy(1..=5000),
            u in utilization_strategy(),
            ops in plain_ops(),
        ) {
            // The synthetic starts a pause stands for, followed by every real start after it,
            // never hold more than the limit in any placement of a (stretched) window.
            let mut lim = limiter(Algorithm::SlidingLog, &windows, u);
            let played = play(&mut lim, T0, &ops, true);
            for &(at, before) in &played.pauses {
                for meter in &lim.meters {
                    let (n, len) = (u64::from(meter.limit), meter.length);
                    let mut log: Vec<Millis> =
                        (1..=n).map(|k| at - len + (k * len).div_ceil(n)).collect();
                    log.extend(&played.starts[before..]);
                    log.sort_unstable();
                    prop_assert!(max_in_any_window(&log, len) <= n as usize);
                }
            }
        }

        #[test]
        fn sliding_log_reaches_the_target_utilization(
            windows in windows_strategy(100..=5000),
            u in (500u32..=10_000).prop_map(|k| f64::from(k) / 10_000.0),
        ) {
            let mut lim = limiter(Algorithm::SlidingLog, &windows, u);
            let longest = lim.meters.iter().map(|m| m.length).max().unwrap();
            let run = 20 * longest;
            let starts = greedy_until(&mut lim, 0, run);
            let target = windows
                .iter()
                .map(|w| u * f64::from(w.limit) / w.length_ms as f64)
                .fold(f64::INFINITY, f64::min);
            prop_assert!(
                starts.len() as f64 >= 0.97 * target * run as f64,
                "{} starts in {} ms, target rate {}/ms", starts.len(), run, target
            );
        }

        #[test]
        fn sliding_log_sustains_its_advertised_rate(
            windows in windows_strategy(1..=5000),
            u in (500u32..=10_000).prop_map(|k| f64::from(k) / 10_000.0),
        ) {
            let mut lim = limiter(Algorithm::SlidingLog, &windows, u);
            let rate = lim.sustained_rate_per_ms();
            let longest = lim.meters.iter().map(|m| m.length).max().unwrap();
            let run = 20 * longest;
            let starts = greedy_until(&mut lim, 0, run);
            prop_assert!(starts.len() as f64 >= rate * run as f64 * (1.0 - 1e-9));
        }
    }
}
