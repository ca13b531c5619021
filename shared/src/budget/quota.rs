//! What a server says of its quota in an answer's headers (`apply_quota`): a limit to adopt,
//! and a count that says how much of it other callers spend (`observe_others`).

use super::*;

impl BudgetState {
    /// Takes in a quota the server reported in the response to the request that made `trip`;
    /// `later_in_flight` of our requests started after it (answered or not) and are not in the
    /// server's count yet. The more careful of the server's and our own view wins.
    ///
    /// A stated limit is adopted from the first response that states it when it is stricter
    /// than what the budget enforces for that window; `configured` stays the ceiling, so a
    /// server that says it allows more never raises a configured window. A limit stated
    /// without its window's length (`X-RateLimit-Limit` alone) is taken for the shortest one.
    pub fn apply_quota(
        &mut self,
        quota: &Quota,
        trip: Trip,
        later_in_flight: u64,
        configured: &[Window],
        now: Millis,
    ) {
        let request_started = trip.started;
        // A limit stated without its length (`X-RateLimit-Limit` alone) is read against the
        // shortest window; then only a stricter limit is news: an equal or looser one read
        // against a guessed window would be no evidence of anything.
        let stated_window = quota
            .window_ms
            .or_else(|| self.shortest_window().map(|w| w.length_ms));
        let reported = match (quota.limit, stated_window) {
            (Some(limit), Some(length_ms)) => {
                let news = quota.window_ms.is_some()
                    || self
                        .shortest_window()
                        .is_some_and(|w| limit < u64::from(w.limit));
                news.then_some((limit, length_ms))
            }
            _ => None,
        };
        // Every policy the server declared is enforced by it, not only the one reported on;
        // the reported one goes last so that it is the one kept for its length.
        let declared = quota
            .windows
            .iter()
            .map(|w| (u64::from(w.limit), w.length_ms));
        for (limit, window_ms) in declared.chain(reported) {
            let ceiling = configured
                .iter()
                .filter(|w| w.length_ms.abs_diff(window_ms) * 10 <= window_ms)
                .map(|w| u64::from(w.limit))
                .min()
                .unwrap_or(u64::MAX);
            let limit = limit.min(ceiling);
            if limit == 0 || window_ms == 0 {
                continue;
            }
            let window = Window {
                limit: limit.min(u32::MAX as u64) as u32,
                length_ms: window_ms,
            };
            if !self.limiter.windows().contains(&window) {
                let pacing = self.limiter.is_paced();
                self.limiter.retune(window);
                self.limiter.set_pacing(pacing);
                // Remember it the way the limiter does: one window per length (within 10%).
                self.learned
                    .retain(|w| w.length_ms.abs_diff(window_ms) * 10 > window_ms);
                self.learned.push(window);
            }
        }
        if let (Some(reset_after), Algorithm::FixedWindow) =
            (quota.reset_after_ms, self.limiter.algorithm())
        {
            // A fixed window only mirrors the server if its boundaries fall where the server's do.
            self.limiter.align_to(now.saturating_add(reset_after));
        }
        let (Some(remaining), Some(reset_after)) = (quota.remaining, quota.reset_after_ms) else {
            return;
        };
        if self
            .server
            .as_ref()
            .is_some_and(|s| s.observed_start > request_started && s.reset_at > now)
        {
            return;
        }
        // Judge the server's view against our expectation before this reading moves it.
        let stricter = self.server_is_stricter(quota, remaining, trip);
        if let Some(w) = self.shortest_window() {
            let describes_shortest = quota
                .window_ms
                .is_none_or(|len| w.length_ms.abs_diff(len) * 10 <= len)
                && quota.limit.is_none_or(|l| l == u64::from(w.limit));
            if describes_shortest {
                self.observe_others(quota.limit.unwrap_or(u64::from(w.limit)), remaining, trip);
            }
        }
        if !stricter {
            // Our own limiter already explains what the server sees, and it knows to the
            // millisecond when a slot frees up, where a reset in whole seconds would make us wait
            // up to a second for nothing. Drop any older, stricter view: this one is fresher.
            self.server = None;
            return;
        }
        self.server = Some(ServerView {
            remaining: remaining.saturating_sub(later_in_flight),
            // A reset "in 0 s" still means the current second: wait at least until it passes.
            reset_at: now.saturating_add(reset_after.max(1)),
            observed_start: request_started,
        });
    }

    /// Whether the server counts more of the quota as spent than our own starts explain (other
    /// callers share it, or we were told a limit that is too high). Only then is its view
    /// worth obeying on top of the limiter.
    ///
    /// The server counts arrivals, which trail our starts by a varying network delay, so its
    /// count may hold more of ours than our window does (see [`Self::ours_the_server_may_count`]);
    /// that much difference is no evidence of anything.
    pub(super) fn server_is_stricter(&self, quota: &Quota, remaining: u64, trip: Trip) -> bool {
        let windows = self.limiter.windows();
        let window = quota
            .window_ms
            .and_then(|len| {
                windows
                    .iter()
                    .find(|w| w.length_ms.abs_diff(len) * 10 <= len)
            })
            .or_else(|| {
                quota
                    .limit
                    .and_then(|limit| windows.iter().find(|w| u64::from(w.limit) == limit))
            })
            .or_else(|| windows.iter().min_by_key(|w| w.length_ms));
        let Some(window) = window else { return true };
        let limit = quota.limit.unwrap_or(u64::from(window.limit));
        // Past what the log holds, count what it has: that only makes the server look
        // stricter, and obeying it is the careful side.
        let ours = self
            .ours_the_server_may_count(window.length_ms, trip)
            .unwrap_or_else(|| {
                u64::from(self.limiter.starts_within(trip.started, window.length_ms))
            });
        let expected_remaining = limit
            .saturating_sub(ours)
            .saturating_sub(u64::from(self.limiter.headroom()));
        let edge_slack = (limit / 50).max(1);
        remaining.saturating_add(edge_slack) < expected_remaining
    }

    /// A response reported `remaining` for the shortest window: whatever of the limit is spent
    /// beyond our own starts was spent by others. Rising estimates are taken at once (they
    /// cost 429s), falling ones only through the slow decay of [`Self::forget_others_slowly`].
    pub(super) fn observe_others(&mut self, limit: u64, remaining: u64, trip: Trip) {
        let Some(w) = self.shortest_window() else {
            return;
        };
        // A reading we cannot compare in full is no evidence of others.
        let Some(ours) = self.ours_the_server_may_count(w.length_ms, trip) else {
            return;
        };
        // A difference of a request or two is noise, not others: a few of ours may sit on the
        // other side of the server's window edge (the same allowance `server_is_stricter` makes).
        let edge_slack = (limit / 50).max(1);
        let others = limit
            .saturating_sub(remaining)
            .saturating_sub(ours)
            .saturating_sub(edge_slack) as f64;
        // Others' traffic is bursty: leaving room for its average still collides with its peaks,
        // and each collision costs a pause. So hold the peak, and let it decay as we probe.
        // Headers that show others' use are the better source from here on.
        if others > 0.0 {
            self.others_from_429 = false;
        }
        self.others = self.others.max(others);
        self.apply_headroom();
    }
}
