//! GCRA, the generic cell rate algorithm: a leaky-bucket meter, as in the `governor` crate.
//!
//! Starts are spaced by the emission interval `T = window / limit`, with a burst tolerance of
//! `(limit - 1) * T`. Same worst case as the token bucket (`2 * limit - 1` starts in a sliding
//! window), in a single timestamp of state: the theoretical arrival time, kept exactly in
//! `1/limit` ms.

use serde::{Deserialize, Serialize};

use super::{ceil_millis, mul_div_ceil, scaled, unscaled};
use crate::json::{FromJson, ToJson};
use crate::time::{DurationMs, Millis};

/// GCRA: the theoretical arrival time (TAT) is when the meter would be empty again. A start at
/// `t` conforms if `t >= TAT - tau`, and moves TAT to `max(TAT, t) + T`. The TAT is kept exactly,
/// in whole milliseconds plus `tat_frac / limit`, since `T = length / limit` is rarely whole.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub(super) struct GcraState {
    tat: Millis,
    tat_frac: u64,
}

impl GcraState {
    /// The TAT in `1/limit` ms.
    fn scaled(&self, limit: u32) -> u128 {
        scaled(self.tat, self.tat_frac, limit)
    }

    fn set_scaled(&mut self, scaled: u128, limit: u32) {
        (self.tat, self.tat_frac) = unscaled(scaled, limit);
    }

    pub(super) fn earliest(&self, limit: u32, length: DurationMs) -> Millis {
        // tau = (limit - 1) * T, in 1/limit ms: (limit - 1) * length.
        let tau = u128::from(limit - 1) * u128::from(length);
        ceil_millis(self.scaled(limit).saturating_sub(tau), limit)
    }

    pub(super) fn record(&mut self, limit: u32, length: DurationMs, at: Millis) {
        let now = u128::from(at) * u128::from(limit);
        self.set_scaled(self.scaled(limit).max(now) + u128::from(length), limit);
    }

    pub(super) fn start_empty(&mut self, limit: u32, length: DurationMs, at: Millis) {
        // Used to the full just before `at`: TAT = at + tau + T = at + length, so the next
        // start conforms one emission interval after `at`, like the other algorithms.
        let full = (u128::from(at) + u128::from(length)) * u128::from(limit);
        self.set_scaled(self.scaled(limit).max(full), limit);
    }

    pub(super) fn retuned(
        &self,
        limit: u32,
        length: DurationMs,
        new_limit: u32,
        new_length: DurationMs,
        last: Millis,
    ) -> Self {
        // Keep the number of emission intervals the TAT is ahead of the last start (how much of
        // the burst tolerance is used), in the new interval. Rounded up.
        let mut gcra = GcraState::default();
        let ahead = self
            .scaled(limit)
            .checked_sub(u128::from(last) * u128::from(limit));
        match ahead {
            Some(ahead) if ahead > 0 => {
                let ahead = mul_div_ceil(ahead, new_length.into(), length.into());
                gcra.set_scaled(u128::from(last) * u128::from(new_limit) + ahead, new_limit);
            }
            _ => {
                let tat = self.tat + u64::from(self.tat_frac > 0);
                gcra.set_scaled(u128::from(tat) * u128::from(new_limit), new_limit);
            }
        }
        gcra
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Algorithm;
    use crate::limiter::testing::*;

    #[test]
    fn gcra_allows_the_burst_then_one_start_per_emission_interval() {
        let mut lim = limiter(Algorithm::Gcra, &[w(4, 1000)], 1.0);
        assert_eq!(
            greedy(&mut lim, T0, 7),
            [T0, T0, T0, T0, T0 + 250, T0 + 500, T0 + 750]
        );
        // Fractional emission intervals stay exact: 3 per 1000 ms.
        let mut lim = limiter(Algorithm::Gcra, &[w(3, 1000)], 1.0);
        assert_eq!(
            greedy(&mut lim, T0, 6)[3..],
            [T0 + 334, T0 + 667, T0 + 1000]
        );
        // Idle refills the tolerance, never beyond one burst.
        let starts = greedy(&mut lim, T0 + 100_000, 4);
        assert_eq!(starts[..3], [T0 + 100_000; 3]);
        assert_eq!(starts[3], T0 + 100_334);
    }
}
