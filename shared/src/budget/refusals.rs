//! What a refusal (a 429) teaches a budget (`observe_rate_limited`): our own timing, a spacing
//! the server wants, or others spending the quota; and how that belief about others fades
//! (`forget_others_slowly`) and becomes headroom (`apply_headroom`).

use super::*;

impl BudgetState {
    /// A 429: others must have spent what we did not. Grow the estimate at least to that, and
    /// on a repeated refusal cut our own share by a tenth (multiplicative decrease of our rate),
    /// so a handful of 429s finds the real share; it decays back as we probe.
    ///
    /// Only the first 429 of an episode counts: the requests that were in flight with it say
    /// nothing new, and escalating on each would shut the budget down for nothing.
    ///
    /// A 429 that asks for a wait longer than the window is about a longer quota (or an outage),
    /// not about others sharing this window: the pause covers it and it teaches nothing here.
    ///
    /// A 429 while our own starts filled the whole limit, with no others known, is most likely
    /// our own bad luck: one arrival that trailed by more than the margin into the next window. It
    /// cuts nothing (on a limit of 10 the least cut is a tenth of the rate, for the rest of the
    /// run); the caller widens the arrival margin instead, and only a second such 429 within
    /// [`OWN_TIMING_WINDOWS`] windows counts as others'. Returns whether it was put down to
    /// our timing.
    pub fn observe_rate_limited(
        &mut self,
        request_started: Millis,
        retry_after: Option<DurationMs>,
        now: Millis,
    ) -> bool {
        if self.paused_until.is_some_and(|p| p > now) {
            return false;
        }
        let shortest = self.shortest_window().map(|w| w.length_ms);
        // Retry-After comes in whole seconds: "1" is the least a server can say.
        if retry_after
            .zip(shortest)
            .is_some_and(|(wait, len)| wait > len.max(1_000))
        {
            return false;
        }
        let Some((w, ours)) = self.shortest_window_use(request_started) else {
            return false;
        };
        let own_share = u64::from(w.limit.saturating_sub(self.limiter.headroom()).max(1));
        let recently = self.own_timing_429_at.is_some_and(|t| {
            let within = w
                .length_ms
                .saturating_mul(OWN_TIMING_WINDOWS)
                .max(OWN_TIMING_AT_LEAST_MS);
            now.saturating_sub(t) < within
        });
        // With room already left to others, a 429 at our share says their share grew.
        let full = ours + 1 >= own_share && self.limiter.headroom() == 0;
        // A refusal while our own starts used at most a quarter of our share says little
        // about a quota others spend: far likelier, the server counts a burst or a spacing we
        // did not keep (a leaky bucket without burst, nginx's `limit_req`, refusing a second
        // request that arrived 30 ms after the first on 20 a second). Reading it as others
        // spending the rest (`limit - ours`) left 1 of 20 a second. It is put down to our
        // timing, as a full window's is, and starts are spaced strictly from now on. A quarter,
        // not a half: told 200 a second where the server allows 100, the first refusal comes
        // at half our share, and that one is the limit, not the spacing.
        let early = ours.saturating_mul(4) <= own_share;
        // The first early refusal of starts not yet spaced strictly is about that spacing,
        // even soon after another refusal: told 20 per 1,000 ms in front of nginx without
        // burst, a refusal of our full window (put down to our timing) and, after its pause,
        // the second of two starts 50 ms apart were read as others spending half the limit:
        // 0.42-0.53 of the rate.
        let newly_strict = early && !self.limiter.no_burst();
        if early {
            self.limiter.set_no_burst(true);
        }
        if (full || early) && (!recently || newly_strict) {
            self.own_timing_429_at = Some(now);
            return true;
        }
        if self.refused_probe(request_started) {
            self.others_faded_at = Some(now);
            self.apply_headroom();
            return false;
        }
        self.held_headroom = None;
        self.probing_since = None;
        let ours_now = f64::from(w.limit) - self.others;
        let implied = if early || full {
            // An early refusal again, with starts already spaced strictly: the count says
            // nothing (we had few starts in the window), the spacing was too tight. Half our
            // rate is left to the server's unknown, as TCP halves its window on a loss. Read
            // as others spending the rest of the count (`limit - ours`), nginx told twice its
            // rate kept 2 of 40 a second and reached 0.34 of its rate.
            self.others + ours_now / 2.0
        } else {
            // `ours` holds the refused request itself: the server had room for one fewer, and
            // we keep one more below that. No lower than that either: what the window showed
            // the server accepts, less one, is evidence; a cut beneath it is only loss.
            u64::from(w.limit).saturating_sub(ours) as f64 + 2.0
        };
        // A repeated refusal: our share shrinks by a tenth (at least one start), not by a
        // quarter of the others' estimate, which on a wrong configured limit (the "others"
        // being the half of it that never existed) would cut our rate by a quarter each time.
        let cut = (ours_now * 0.1).max(1.0);
        // Refused again while a belief learned from 429s stands (a probe that started before
        // the belief last faded; a probe of its own is `refused_probe`'s), or soon after a
        // refusal put down to our timing: each such 429 doubles how long the next start takes
        // to come back (at most [`MOST_FAILED_PROBES`] times). Counted from the first belief
        // on, not the second: nginx without burst told twice its rate reached 0.70 of it
        // (0.80 counted so).
        self.others = implied.max(self.others + cut).min(implied.max(self.others));
        if recently && full {
            // Our whole share refused again soon after a refusal put down to our timing: the
            // limit we were told is not the server's, and a wrong limit does not come back as
            // others leaving would. Probes back off as after a refused probe (nginx with a
            // burst of 5 told twice its rate: 4 refusals in 10 s, not 5). An early refusal
            // says our spacing was too tight, not the limit: that comes back at the usual pace.
            self.back_off_probes();
        } else if self.others_from_429 || recently {
            self.failed_probes = (self.failed_probes + 1).min(MOST_FAILED_PROBES);
        }
        self.others_from_429 = true;
        self.others_faded_at = Some(now);
        self.apply_headroom();
        false
    }

    /// A refusal of a start made while a belief learned from 429s had faded one start lower
    /// (a probe): the share before it held, so the belief goes back to it, not below it as a
    /// first refusal's halving would (nginx with a burst of 5 told twice its rate fell from 3
    /// starts a window to 2, 0.70-0.79 of its rate). The next probe comes four times later:
    /// each costs a 429, and the promise in steady state is at most one in a thousand
    /// requests, so probes back off until one step is [`PROBE_EVERY_STARTS`] of our starts.
    fn refused_probe(&mut self, request_started: Millis) -> bool {
        let probe_start = self.probing_since.filter(|_| self.others_from_429);
        let held = self.held_headroom.filter(|&h| h > self.limiter.headroom());
        let (Some(since), Some(held)) = (probe_start, held) else {
            return false;
        };
        if request_started < since {
            return false;
        }
        self.others = f64::from(held);
        self.probing_since = None;
        self.back_off_probes();
        true
    }

    /// Makes the next probe come [`REFUSED_PROBE_DOUBLINGS`] doublings later, until one step
    /// takes [`PROBE_EVERY_STARTS`] of our starts.
    fn back_off_probes(&mut self) {
        let Some(w) = self.shortest_window() else {
            return;
        };
        let ours = (f64::from(w.limit) - self.others).max(1.0);
        let starts_per_step = |probes: u32| {
            OTHERS_FROM_429_STEP_WINDOWS_PER_START * ours * ours * f64::from(1u32 << probes)
        };
        for _ in 0..REFUSED_PROBE_DOUBLINGS {
            if self.failed_probes < MOST_FAILED_PROBES
                && starts_per_step(self.failed_probes) < PROBE_EVERY_STARTS
            {
                self.failed_probes += 1;
            }
        }
    }

    /// Each start is a probe: an estimate read from headers halves over about twenty windows'
    /// worth of our starts, so we find our way back up when the others stop, without inviting
    /// a 429 every window. One learned from 429s alone halves over a thousand, and besides
    /// gives back one start per [`OTHERS_FROM_429_STEP_WINDOWS_PER_START`] windows of sending
    /// time for each start of our share, twice as long after each refused probe
    /// ([`Self::failed_probes`]): told 40 a second where nginx allows 20 with a burst of 5, in
    /// windows of 150 ms, a fixed step probed (and drew a 429) every 2-3 s.
    pub(super) fn forget_others_slowly(&mut self, now: Millis) {
        if self.others <= 0.0 {
            return;
        }
        let Some(w) = self.shortest_window() else {
            return;
        };
        let ours = w.limit.saturating_sub(self.limiter.headroom()).max(1);
        let windows = if self.others_from_429 {
            OTHERS_FROM_429_HALF_LIFE_WINDOWS
        } else {
            OTHERS_HALF_LIFE_WINDOWS
        };
        let headroom_before = self.limiter.headroom();
        self.others *= half_life_factor(windows * f64::from(ours));
        if self.others_from_429 {
            // Time while sending: a gap between starts counts one window at most, so an idle
            // budget does not forget what it has not probed.
            if let Some(at) = self.others_faded_at {
                let since = now.saturating_sub(at).min(w.length_ms);
                let windows = (OTHERS_FROM_429_STEP_WINDOWS_PER_START * f64::from(ours)).max(1.0)
                    * f64::from(1u32 << self.failed_probes);
                self.others -= since as f64 / (windows * w.length_ms as f64);
            }
            self.others_faded_at = Some(now);
        }
        if self.others < 0.5 {
            self.others = 0.0;
            self.failed_probes = 0;
            self.held_headroom = None;
            self.probing_since = None;
        }
        self.apply_headroom();
        if self.others_from_429 && self.limiter.headroom() < headroom_before {
            self.held_headroom = Some(headroom_before);
            self.probing_since = Some(now);
        }
    }

    pub(super) fn apply_headroom(&mut self) {
        let limit = self.shortest_window().map_or(1, |w| w.limit);
        // Others' traffic arrives at random: leave room for its spread too (about one standard
        // deviation of a count, as for arrivals at random), since every collision costs a pause.
        // A share learned from 429s alone is the level at which the server refused: it is held
        // as it is.
        let spread = if self.others > 0.0 && !self.others_from_429 {
            self.others.sqrt()
        } else {
            0.0
        };
        let headroom = ((self.others + spread).ceil() as u32).min(limit.saturating_sub(1));
        self.limiter.set_headroom(headroom);
    }
}
