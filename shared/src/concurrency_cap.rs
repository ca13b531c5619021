//! The in-flight cap a server lowers by refusing concurrency, not rate.
//!
//! Some APIs limit requests open at once besides (or instead of) requests per second: Stripe's
//! concurrency limiter answers 429 with `Stripe-Rate-Limited-Reason: global-concurrency`;
//! others say so in the body (a budget's `bodyRules` with `means: 'concurrency'`). Pausing the
//! budget would be wrong: the rate was fine, only the number open at once was not. So a
//! concurrency refusal lowers the budget's cap to one below what was open when it came, and
//! the cap grows back as answers succeed, one slot per cap's worth of successes (additive
//! increase, as TCP's congestion window after a loss), no sooner than [`HOLD_MS`] after the
//! last refusal. The cap is not saved: a restarted worker starts at the configured
//! concurrency and learns again from at most one refusal.

use crate::time::{DurationMs, Millis};

/// How long a lowered cap holds before answers may raise it again.
pub const HOLD_MS: DurationMs = 10_000;

/// How long a job refused for concurrency waits before it is sent again when the cap is
/// already 1 (the server refused even a lone request: others hold its slots).
pub const LONE_REFUSAL_WAIT_MS: DurationMs = 1_000;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConcurrencyCap {
    lowered: Option<Lowered>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Lowered {
    cap: u32,
    refused_at: Millis,
    /// Successes since the cap last moved.
    successes: u32,
    refusals: u32,
}

impl ConcurrencyCap {
    /// The most requests this budget may have in flight now.
    pub fn allowed(&self, configured: u32) -> u32 {
        match &self.lowered {
            Some(l) => l.cap.min(configured),
            None => configured,
        }
    }

    /// A request was refused for concurrency while `open` requests of the budget were in
    /// flight (the refused one included). Returns how long the refused job should wait before
    /// it is sent again: nothing, unless even one open request was refused.
    pub fn on_refused(&mut self, open: usize, configured: u32, now: Millis) -> DurationMs {
        let open = u32::try_from(open).unwrap_or(u32::MAX).max(1);
        let cap = open.saturating_sub(1).max(1).min(self.allowed(configured));
        let refusals = self.lowered.as_ref().map_or(0, |l| l.refusals) + 1;
        self.lowered = Some(Lowered {
            cap,
            refused_at: now,
            successes: 0,
            refusals,
        });
        if open <= 1 {
            LONE_REFUSAL_WAIT_MS
        } else {
            0
        }
    }

    /// An answer of the budget succeeded: after [`HOLD_MS`] without a refusal, every `cap`
    /// successes raise the cap by one, until it is the configured one again.
    pub fn on_success(&mut self, configured: u32, now: Millis) {
        let Some(l) = &mut self.lowered else {
            return;
        };
        if now.saturating_sub(l.refused_at) < HOLD_MS {
            return;
        }
        l.successes += 1;
        if l.successes >= l.cap {
            l.cap += 1;
            l.successes = 0;
        }
        if l.cap >= configured {
            self.lowered = None;
        }
    }

    /// What the status says while the cap is lowered.
    pub fn note(&self, budget: &str, configured: u32) -> Option<String> {
        let l = self.lowered.as_ref()?;
        Some(format!(
            "budget '{budget}': the server refused requests for concurrency ({} time(s)), so at \
             most {} of {configured} are in flight for now; it grows back as answers succeed",
            l.refusals, l.cap
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_lowers_the_cap_below_what_was_open_and_successes_raise_it_back() {
        let mut cap = ConcurrencyCap::default();
        assert_eq!(cap.allowed(6), 6);
        assert_eq!(cap.on_refused(6, 6, 1_000), 0);
        assert_eq!(cap.allowed(6), 5);
        // Held for HOLD_MS: successes then do not count.
        for t in 0..20 {
            cap.on_success(6, 1_000 + t);
        }
        assert_eq!(cap.allowed(6), 5);
        let later = 1_000 + HOLD_MS;
        for _ in 0..5 {
            cap.on_success(6, later);
        }
        assert_eq!(cap.allowed(6), 6);
        assert_eq!(cap.note("stripe", 6), None);
    }

    #[test]
    fn refusals_in_a_row_keep_lowering_and_a_lone_refused_request_waits() {
        let mut cap = ConcurrencyCap::default();
        cap.on_refused(4, 4, 0);
        cap.on_refused(3, 4, 10);
        assert_eq!(cap.allowed(4), 2);
        cap.on_refused(2, 4, 20);
        assert_eq!(cap.allowed(4), 1);
        assert_eq!(cap.on_refused(1, 4, 30), LONE_REFUSAL_WAIT_MS);
        assert_eq!(cap.allowed(4), 1);
        let note = cap.note("stripe", 4).unwrap_or_default();
        assert!(
            note.contains("4 time(s)") && note.contains("at most 1 of 4"),
            "{note}"
        );
    }

    #[test]
    fn a_refusal_while_fewer_are_open_than_the_cap_sets_it_below_those() {
        let mut cap = ConcurrencyCap::default();
        cap.on_refused(3, 8, 0);
        assert_eq!(cap.allowed(8), 2);
        // A later configuration with a lower concurrency is never exceeded.
        assert_eq!(cap.allowed(1), 1);
    }
}
