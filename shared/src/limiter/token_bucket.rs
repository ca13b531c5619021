//! Token bucket: `limit` tokens, refilled continuously at `limit` per window.
//!
//! It allows a full bucket and then a window's worth of refill, so a sliding window can see up
//! to `2 * limit - 1` starts: it mirrors a server that counts with a bucket, not one that counts
//! a sliding window. Refill is counted in exact integer fractions of a token, so rounding never
//! lets through more than capacity plus refill.

use serde::{Deserialize, Serialize};

use super::{ceil_millis, mul_div_ceil, mul_div_floor};
use crate::json::{FromJson, ToJson};
use crate::time::{DurationMs, Millis};

/// Token bucket, counted in exact fractions: one token is `length` units and the bucket refills
/// `limit` units per millisecond, so nothing is ever rounded and the bucket never hands out more
/// than its capacity plus its refill. The level may go below zero if a caller records starts it
/// was not allowed: that debt is paid back before the next start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub(super) struct BucketState {
    /// Whole tokens.
    tokens: i64,
    /// Fraction of the next token, in `1/length` of a token: `0..length`.
    partial: u64,
    /// When the level was last brought up to date.
    at: Millis,
}

impl BucketState {
    pub(super) fn full(limit: u32) -> Self {
        Self {
            tokens: limit.into(),
            partial: 0,
            at: 0,
        }
    }

    fn level(&self, length: DurationMs) -> i128 {
        i128::from(self.tokens) * i128::from(length) + i128::from(self.partial)
    }

    fn set_level(&mut self, level: i128, length: DurationMs) {
        let length = i128::from(length);
        self.tokens = level
            .div_euclid(length)
            .clamp(i64::MIN.into(), i64::MAX.into()) as i64;
        self.partial = level.rem_euclid(length) as u64;
    }

    fn refill(&mut self, limit: u32, length: DurationMs, t: Millis) {
        if t <= self.at {
            return;
        }
        let capacity = i128::from(limit) * i128::from(length);
        let gained = i128::from(t - self.at) * i128::from(limit);
        let level = self.level(length).saturating_add(gained).min(capacity);
        self.set_level(level, length);
        self.at = t;
    }

    pub(super) fn earliest(&self, limit: u32, length: DurationMs) -> Millis {
        if self.tokens >= 1 {
            return 0;
        }
        let missing = (i128::from(length) - self.level(length)) as u128;
        self.at.saturating_add(ceil_millis(missing, limit))
    }

    pub(super) fn record(&mut self, limit: u32, length: DurationMs, at: Millis) {
        self.refill(limit, length, at);
        self.set_level(self.level(length) - i128::from(length), length);
    }

    pub(super) fn start_empty(&mut self, limit: u32, length: DurationMs, at: Millis) {
        self.refill(limit, length, at.max(self.at));
        if self.level(length) > 0 {
            self.set_level(0, length);
        }
    }

    pub(super) fn retuned(
        &self,
        limit: u32,
        length: DurationMs,
        new_limit: u32,
        new_length: DurationMs,
    ) -> Self {
        // Keep what has been used, `limit - level`, and give the rest of the new limit: a
        // bucket half used stays half used plus the difference, and one used beyond the new
        // limit goes into debt instead of opening a burst. Fractions are rounded down.
        let level = self.level(length);
        let scaled = if level >= 0 {
            mul_div_floor(level as u128, new_length.into(), length.into()) as i128
        } else {
            -(mul_div_ceil(level.unsigned_abs(), new_length.into(), length.into()) as i128)
        };
        let new_capacity = i128::from(new_limit) * i128::from(new_length);
        let extra = (i128::from(new_limit) - i128::from(limit)) * i128::from(new_length);
        let mut bucket = self.clone();
        bucket.set_level((scaled + extra).min(new_capacity), new_length);
        bucket
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Algorithm;
    use crate::limiter::testing::*;

    #[test]
    fn token_bucket_bursts_its_capacity_then_refills_at_the_exact_rate() {
        let mut lim = limiter(Algorithm::TokenBucket, &[w(3, 1000)], 1.0);
        // 1000 / 3 ms per token is not whole, yet three tokens come back in exactly 1000 ms.
        assert_eq!(
            greedy(&mut lim, T0, 6),
            [T0, T0, T0, T0 + 334, T0 + 667, T0 + 1000]
        );
        // Idle for a long time: the bucket holds its capacity, no more.
        let starts = greedy(&mut lim, T0 + 100_000, 4);
        assert_eq!(starts[..3], [T0 + 100_000; 3]);
        assert_eq!(starts[3], T0 + 100_334);
        // Worst case: a full bucket and a window's refill.
        let mut lim = limiter(Algorithm::TokenBucket, &[w(10, 1000)], 1.0);
        let starts = greedy_until(&mut lim, T0, T0 + 10_000);
        assert_eq!(max_in_any_window(&starts, 1000), 19);
    }
}
