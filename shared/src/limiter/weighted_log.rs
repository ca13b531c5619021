//! Weighted log: a budget of some unit other than requests (tokens, points, items), where each
//! start spends an amount of its own.
//!
//! The guarantee is the sliding log's, for amounts: in no placement of a window do the amounts
//! started add up to more than the limit. It keeps one entry per start, `(instant, amount)`,
//! not one per unit: 90,000 tokens a minute spent by 60 requests are 60 entries. A start of
//! `amount` at `t` is allowed once the amounts started in the window ending at `t` leave room
//! for it; finding when is a walk from the oldest entry in the window, O(entries in the window).
//!
//! Why not the request limiter's algorithms with a weight: the sliding log there keeps one
//! instant per unit (a minute of tokens would be 90,000 of them) and reads one position; the
//! bucket meters would take an amount, but not the server's own account of what is left
//! (`x-ratelimit-remaining-tokens`), which this log takes as an entry that leaves the window
//! when the server says its count resets (see [`WeightedLog::record`]).
//!
//! An amount larger than a window's limit can never fit. Refusing it for ever would stall the
//! queue behind it, so it is allowed alone, once the window is empty, and the server decides.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::config::Window;
use crate::json::{FromJson, ToJson};
use crate::time::{DurationMs, Millis};

/// Amounts started, oldest first; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct WeightedLog {
    /// `(instant, amount)`, in order of instant.
    entries: VecDeque<(Millis, u64)>,
}

impl WeightedLog {
    /// The earliest instant, `now` or later, at which `amount` more may start under every
    /// window, each stretched by `margin` ms (the network's jitter, as the request windows are).
    pub fn earliest(
        &self,
        windows: &[Window],
        amount: u64,
        margin: DurationMs,
        now: Millis,
    ) -> Millis {
        windows
            .iter()
            .map(|w| self.earliest_in(w, amount, margin, now))
            .max()
            .unwrap_or(now)
    }

    fn earliest_in(&self, window: &Window, amount: u64, margin: DurationMs, now: Millis) -> Millis {
        let length = window.length_ms.saturating_add(margin);
        let limit = u64::from(window.limit);
        // The entries still in the window ending at `now`, and what they add up to.
        let first_live = self
            .entries
            .iter()
            .position(|&(at, _)| at.saturating_add(length) > now)
            .unwrap_or(self.entries.len());
        let live = self.entries.range(first_live..);
        let used: u64 = live.clone().map(|&(_, a)| a).sum();
        if amount > limit {
            // Alone, once everything in the window has left it.
            return self
                .entries
                .back()
                .map_or(now, |&(at, _)| at.saturating_add(length).max(now));
        }
        let mut excess = (used + amount).saturating_sub(limit);
        if excess == 0 {
            return now;
        }
        for &(at, a) in live {
            excess = excess.saturating_sub(a);
            if excess == 0 {
                return at.saturating_add(length);
            }
        }
        // Unreachable: the live entries add up to `used`, which exceeds `excess`.
        now
    }

    /// Counts `amount` started at `at`. An instant before the newest entry's (the wall clock
    /// stepped back) is counted at the newest one's, so the log stays in order and never
    /// forgets a start early.
    pub fn record(&mut self, at: Millis, amount: u64) {
        if amount == 0 {
            return;
        }
        let at = self.entries.back().map_or(at, |&(last, _)| at.max(last));
        self.entries.push_back((at, amount));
    }

    /// Counts `amount` spent at `at`, which may be earlier than entries already kept: what the
    /// server reports spent, placed where it leaves the window when the server's count resets.
    pub fn insert(&mut self, at: Millis, amount: u64) {
        if amount == 0 {
            return;
        }
        let index = self.entries.partition_point(|&(t, _)| t <= at);
        self.entries.insert(index, (at, amount));
    }

    /// The start of `estimated` made at `at` or before (a request saved before it went out is
    /// logged when it was polled, a little before it was sent) really spent `actual` (the
    /// answer said so): the latest such entry takes the real amount. Nothing happens when no
    /// such entry is kept any more.
    pub fn correct(&mut self, at: Millis, estimated: u64, actual: u64) {
        if let Some(entry) = self
            .entries
            .iter_mut()
            .rev()
            .find(|(t, a)| *t <= at && *a == estimated)
        {
            entry.1 = actual;
        }
    }

    /// The amounts started in the `length` ms up to `now`.
    pub fn used_within(&self, now: Millis, length: DurationMs) -> u64 {
        self.entries
            .iter()
            .rev()
            .take_while(|&&(at, _)| at.saturating_add(length) > now)
            .map(|&(_, a)| a)
            .sum()
    }

    /// The largest amount still kept, for counting starts whose record was lost (see
    /// `BudgetState::count_unsaved_starts`).
    pub fn largest(&self) -> Option<u64> {
        self.entries.iter().map(|&(_, a)| a).max()
    }

    /// When the entries in the `length` ms up to `now` have all left the window.
    pub fn empty_at(&self, now: Millis, length: DurationMs) -> Millis {
        self.entries
            .back()
            .map_or(now, |&(at, _)| at.saturating_add(length).max(now))
    }

    /// Drops what no window of `longest` ms (margin included) can still see at `now`.
    pub fn forget_before(&mut self, now: Millis, longest: DurationMs) {
        while self
            .entries
            .front()
            .is_some_and(|&(at, _)| at.saturating_add(longest) <= now)
        {
            self.entries.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn per(limit: u32, length_ms: DurationMs) -> Window {
        Window { limit, length_ms }
    }

    #[test]
    fn amounts_fit_until_the_limit_then_wait_for_the_oldest_to_leave() {
        let w = [per(1_000, 60_000)];
        let mut log = WeightedLog::default();
        assert_eq!(log.earliest(&w, 400, 0, 0), 0);
        log.record(0, 400);
        log.record(10_000, 500);
        assert_eq!(log.earliest(&w, 100, 0, 20_000), 20_000);
        // 200 more need the first 400 gone: at 60 s.
        assert_eq!(log.earliest(&w, 200, 0, 20_000), 60_000);
        // 600 more need both gone: at 70 s. With a margin of 5 ms, 5 ms later.
        assert_eq!(log.earliest(&w, 600, 0, 20_000), 70_000);
        assert_eq!(log.earliest(&w, 600, 5, 20_000), 70_005);
        assert_eq!(log.used_within(20_000, 60_000), 900);
        assert_eq!(log.used_within(65_000, 60_000), 500);
    }

    #[test]
    fn an_amount_above_the_limit_goes_alone_into_an_empty_window() {
        let w = [per(100, 1_000)];
        let mut log = WeightedLog::default();
        assert_eq!(log.earliest(&w, 500, 0, 0), 0);
        log.record(0, 500);
        assert_eq!(log.earliest(&w, 1, 0, 10), 1_000);
        assert_eq!(log.earliest(&w, 500, 0, 10), 1_000);
    }

    #[test]
    fn every_window_is_kept() {
        let w = [per(100, 1_000), per(150, 10_000)];
        let mut log = WeightedLog::default();
        log.record(0, 100);
        assert_eq!(log.earliest(&w, 50, 0, 1_000), 1_000);
        log.record(1_000, 50);
        // The second window is full until the first entry leaves it.
        assert_eq!(log.earliest(&w, 1, 0, 2_000), 10_000);
    }

    #[test]
    fn a_correction_replaces_the_estimate() {
        let w = [per(1_000, 60_000)];
        let mut log = WeightedLog::default();
        log.record(0, 500);
        log.correct(0, 500, 120);
        assert_eq!(log.used_within(1, 60_000), 120);
        assert_eq!(log.earliest(&w, 880, 0, 1), 1);
        // Unknown entries are left alone.
        log.correct(5, 500, 1);
        log.correct(0, 120, 1);
        assert_eq!(log.used_within(6, 60_000), 1);
        log.correct(0, 1, 120);
        assert_eq!(log.used_within(6, 60_000), 120);
    }

    #[test]
    fn a_clock_stepping_back_keeps_the_log_in_order() {
        let mut log = WeightedLog::default();
        log.record(1_000, 1);
        log.record(500, 1);
        assert_eq!(log.used_within(1_999, 1_000), 2);
        log.forget_before(2_000, 1_000);
        assert_eq!(log.used_within(2_000, 1_000), 0);
    }

    proptest! {
        /// Whatever the amounts and their timing, starting each at the earliest instant the log
        /// allows never puts more than the limit into any placement of the window (an amount
        /// above the limit aside, which goes alone).
        #[test]
        fn no_window_ever_holds_more_than_the_limit(
            amounts in prop::collection::vec(1u64..60, 1..60),
            gaps in prop::collection::vec(0u64..300, 60),
            limit in 60u32..200,
            length in 100u64..2_000,
        ) {
            let w = [per(limit, length)];
            let mut log = WeightedLog::default();
            let mut now = 0;
            let mut starts: Vec<(Millis, u64)> = Vec::new();
            for (amount, gap) in amounts.iter().zip(&gaps) {
                now += gap;
                let at = log.earliest(&w, *amount, 0, now);
                prop_assert!(at >= now);
                log.record(at, *amount);
                starts.push((at, *amount));
                now = at;
            }
            for &(t, _) in &starts {
                let in_window: u64 = starts
                    .iter()
                    .filter(|&&(s, _)| s >= t && s < t + length)
                    .map(|&(_, a)| a)
                    .sum();
                prop_assert!(in_window <= u64::from(limit), "{in_window} in the window from {t}");
            }
        }
    }
}
