//! Fixed window: a counter per window, reset at boundaries on the server's grid.
//!
//! The boundaries are aligned to the server's reset instant when it reports one
//! ([`Limiter::align_to`](super::Limiter::align_to)). A burst just before a boundary and another
//! just after it put `2 * limit` starts in one sliding window; that is fine for a server that
//! counts the same fixed windows, and the reason it is not the default.
//!
//! Its margin cannot stretch the length: the boundaries must stay on the server's grid (the
//! limiter's module docs, under "Margins", say why). Paced, it is kept in time instead: the
//! pacing grid spreads the limit over the length plus the margin, and the limit holds in any
//! span that long (`Limiter::fixed_spread_earliest`), while each fixed window keeps its whole
//! count. It once came out of the count, which on 20 a second with a margin of 10 ms allowed
//! 19 a window: 0.95 of the limit, where the time costs 1%.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::pacer::Pacer;
use crate::json::{FromJson, ToJson};
use crate::time::{DurationMs, Millis};

/// A fixed window's state: a counter for the window `[end - length, end)`, boundaries at `phase`
/// modulo the length. A `pacer` spaces starts evenly for one window after `start_empty`, because
/// a fixed window would otherwise hand out its whole count at the first boundary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub(super) struct FixedState {
    /// Boundaries fall on instants equal to `phase` modulo the length (0: on multiples of
    /// the length since the epoch, where servers that do not say otherwise usually put them).
    phase: u64,
    /// End of the window the count is for (0: none yet).
    end: Millis,
    count: u32,
    pacer: Option<Pacer>,
}

impl FixedState {
    pub(super) fn earliest(&self, limit: u32) -> Millis {
        let full = if self.count >= limit { self.end } else { 0 };
        full.max(self.pacer.map_or(0, |p| p.earliest()))
    }

    pub(super) fn record(&mut self, length: DurationMs, at: Millis) {
        if at >= self.end {
            self.end = window_end(at, length, self.phase);
            self.count = 0;
        }
        self.count = self.count.saturating_add(1);
        self.pacer = self.pacer.and_then(|p| p.after(at));
    }

    pub(super) fn start_empty(&mut self, limit: u32, length: DurationMs, at: Millis) {
        let mut pacer = Pacer::new(at, length, limit);
        if let Some(old) = self.pacer.filter(|p| p.until > at) {
            if old.next_ceil() > pacer.next_ceil() {
                (pacer.next, pacer.frac) = (old.next_ceil(), 0);
            }
            pacer.until = pacer.until.max(old.until);
        }
        self.pacer = Some(pacer);
    }

    /// Moves the boundaries so that one falls on `reset_at`, and recounts the current window.
    pub(super) fn align_to(
        &mut self,
        reset_at: Millis,
        length: DurationMs,
        starts: &VecDeque<Millis>,
    ) {
        self.phase = reset_at % length;
        self.refit(length, starts);
    }

    /// The same boundaries and pacing on a window of another `length`, its count taken afresh
    /// from the recorded starts.
    pub(super) fn retuned(&self, length: DurationMs, starts: &VecDeque<Millis>) -> Self {
        let mut fixed = FixedState {
            phase: self.phase % length,
            pacer: self.pacer,
            ..FixedState::default()
        };
        fixed.refit(length, starts);
        fixed
    }

    /// Recounts the current window from the recorded starts, after its boundaries moved.
    pub(super) fn refit(&mut self, length: DurationMs, starts: &VecDeque<Millis>) {
        (self.end, self.count) = match starts.back() {
            Some(&last) => {
                let end = window_end(last, length, self.phase);
                let begin = end.saturating_sub(length);
                let inside = starts.len() - starts.partition_point(|&s| s < begin);
                (end, u32::try_from(inside).unwrap_or(u32::MAX))
            }
            None => (0, 0),
        };
    }
}

/// The first boundary after `t`.
fn window_end(t: Millis, length: DurationMs, phase: u64) -> Millis {
    let r = t % length;
    let into = if r >= phase {
        r - phase
    } else {
        r + (length - phase)
    };
    t.saturating_add(length - into)
}

#[cfg(test)]
mod tests {
    use crate::config::Algorithm;
    use crate::limiter::shrink;
    use crate::limiter::testing::*;
    use proptest::prelude::*;

    #[test]
    fn fixed_window_resets_at_boundaries_and_can_double_up_across_one() {
        let mut lim = limiter(Algorithm::FixedWindow, &[w(3, 1000)], 1.0);
        let base = 1_700_000_000_000; // a multiple of 1000: a boundary
        for _ in 0..3 {
            lim.record_start(base + 900);
        }
        assert_eq!(lim.next_start_at(base + 900), base + 1000);
        let starts = greedy(&mut lim, base + 900, 3);
        assert_eq!(starts, [base + 1000; 3]);
        // Six starts within 100 ms: what fixed windows allow, and why they are not the default.
        assert_eq!(lim.starts_within(base + 1000, 1000), 6);
        assert_eq!(lim.next_start_at(base + 1000), base + 2000);
    }

    #[test]
    fn fixed_window_keeps_a_share_of_each_window_for_late_arrivals() {
        let mut lim = limiter(Algorithm::FixedWindow, &[w(100, 1000)], 0.9);
        let starts = greedy_until(&mut lim, T0, T0 + 1000);
        assert_eq!(starts.len(), 90);
        // Boundaries stay on the server's grid: not stretched.
        assert_eq!(lim.next_start_at(T0), T0 + 1000);
        assert_eq!(lim.sustained_rate_per_ms(), 90.0 / 1000.0);
        // What other callers are left of the window is not ours either.
        lim.set_headroom(30);
        assert_eq!(lim.sustained_rate_per_ms(), 60.0 / 1000.0);
    }

    #[test]
    fn fixed_window_align_to_puts_a_boundary_on_the_reset_instant() {
        let mut lim = limiter(Algorithm::FixedWindow, &[w(3, 1000), w(100, 60_000)], 1.0);
        greedy(&mut lim, T0 + 100, 3);
        assert_eq!(lim.next_start_at(T0 + 100), T0 + 1000);
        // The server says its counter resets at T0 + 1250, so its windows end at T0 + 250 and
        // T0 + 1250: the three starts stay counted in the window ending at T0 + 250.
        lim.align_to(T0 + 1250);
        assert_eq!(lim.next_start_at(T0 + 100), T0 + 250);
        assert_eq!(
            greedy(&mut lim, T0 + 100, 4),
            [T0 + 250, T0 + 250, T0 + 250, T0 + 1250]
        );
        // A reset just after the last start: that start counts in the window ending at it.
        lim.align_to(T0 + 1260);
        assert_eq!(
            greedy(&mut lim, T0 + 1250, 3),
            [T0 + 1250, T0 + 1250, T0 + 1260]
        );
        // Other algorithms ignore it.
        let mut lim = limiter(Algorithm::SlidingLog, &[w(3, 1000)], 1.0);
        let before = lim.clone();
        lim.align_to(T0 + 1250);
        assert_eq!(lim, before);
    }

    #[test]
    fn a_paced_fixed_window_keeps_its_margin_in_time_and_its_whole_count() {
        let mut lim = limiter(Algorithm::FixedWindow, &[w(20, 1000)], 1.0);
        lim.set_pacing(true);
        let _ = lim.set_margin(20);
        let starts = greedy_until(&mut lim, T0, T0 + 10_200);
        // 20 per 1,020 ms: 200 starts in 10.2 s (0.98 of the limit), where the margin taken
        // from the count allowed 19 a window (0.95).
        assert_eq!(starts.len(), 200);
        assert!(max_in_any_window(&starts, 1020) <= 20);
        // A start late by three intervals is made up, but never past 20 in 1,020 ms.
        let mut late = starts.clone();
        let mut at = T0 + 10_200 + 3 * 51;
        for _ in 0..40 {
            at = lim.next_start_at(at);
            lim.record_start(at);
            late.push(at);
        }
        assert!(late[200..].windows(2).any(|p| p[1] - p[0] < 51), "{late:?}");
        assert!(max_in_any_window(&late, 1020) <= 20, "{late:?}");
    }

    proptest! {
        #[test]
        fn paced_fixed_windows_hold_their_limit_in_a_window_plus_the_margin(
            windows in windows_strategy(1..=5000),
            u in utilization_strategy(),
            margin in 0u64..50,
            ops in plain_ops(),
        ) {
            let mut lim = limiter(Algorithm::FixedWindow, &windows, u);
            lim.set_pacing(true);
            let _ = lim.set_margin(margin);
            let starts = play(&mut lim, 0, &ops, true).starts;
            for window in &windows {
                let most = max_in_any_window(&starts, window.length_ms + margin);
                prop_assert!(most <= shrink(window.limit, u) as usize);
            }
        }

        #[test]
        fn fixed_windows_never_exceed_the_limit_per_window(
            windows in windows_strategy(1..=5000),
            u in utilization_strategy(),
            ops in plain_ops(),
        ) {
            let mut lim = limiter(Algorithm::FixedWindow, &windows, u);
            let starts = play(&mut lim, 0, &ops, true).starts;
            for window in &windows {
                let mut per_window = std::collections::HashMap::new();
                for &s in &starts {
                    *per_window.entry(s / window.length_ms).or_insert(0u32) += 1;
                }
                let most = per_window.values().copied().max().unwrap_or(0);
                prop_assert!(most <= shrink(window.limit, u));
            }
        }
    }
}
