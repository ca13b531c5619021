//! Where starts really were: a limiter counts a start when it is recorded, and learns
//! afterwards when it really went out (`restamp`), where it may have reached the server
//! (`answered`, `reached_server_by`, `sent_by` for a request overdue), that it waited for a
//! CORS preflight (`await_preflight`), or that starts went out unrecorded while storage was
//! full (`count_unrecorded_starts`). Each only ever makes the windows stricter.

use super::*;

impl Limiter {
    /// The start just recorded carries a CORS preflight the browser has not cached (see
    /// `preflight`): for a `no_burst` limiter, the next start waits for its answer.
    pub fn await_preflight(&mut self) {
        self.awaiting_preflight = true;
        self.preflighted = Some(PreflightedStart {
            sent: self.last_sent,
            followed_by: 0,
        });
    }

    /// The start that went out at `sent` was answered and reached the server by `arrived_by`
    /// at the latest (in the frame of `round_trips::RoundTrips::arrived_by`). When it is the
    /// last start, a `no_burst` limiter spaces the next one from there; from there alone
    /// unless `typical_trip` (its round trip was within the spread measured, see
    /// `round_trips::RoundTrips::within_spread`).
    ///
    /// When it is the start that carried a preflight, the pacing grid continues from where it
    /// arrived: the starts sent behind it while its preflight was under way arrived closer to
    /// it than the grid spaced them (a server whose window opens at the first arrival, such as
    /// express-rate-limit's, counted one too many in its first window when the preflight took
    /// longer than one interval). That costs one preflight's round trip, once per preflight,
    /// for the algorithms whose state is not the log of starts.
    pub fn answered(&mut self, sent: Millis, arrived_by: Millis, typical_trip: bool) {
        if sent == self.last_sent {
            self.last_arrived_by = Some(arrived_by.max(sent));
            self.last_trip_typical = typical_trip;
        }
        let Some(preflighted) = self.preflighted.filter(|p| p.sent == sent) else {
            return;
        };
        self.preflighted = None;
        // A sliding log counts the start where it arrived already (`reached_server_by`); the
        // other algorithms' state is not the log, and their grid is what keeps the spacing.
        if self.algorithm == Algorithm::SlidingLog {
            return;
        }
        if let Some(pace) = &mut self.pace {
            // One interval after its arrival for itself and for each start sent behind it.
            let slots = u64::from(preflighted.followed_by) + 1;
            pace.not_before(arrived_by.max(sent), slots);
        }
    }

    /// A start recorded at `recorded` really went out at `sent`, later (it waited for a save,
    /// say). The log takes the real instant, so the windows measure what the server sees; moving
    /// a start later only makes every window stricter. The other algorithms keep the count
    /// where it was recorded: their margin is in the count itself. Pacing continues from `sent`.
    pub fn restamp(&mut self, recorded: Millis, sent: Millis) {
        if sent <= recorded {
            return;
        }
        self.move_start(recorded, sent);
        self.last_sent = self.last_sent.max(sent);
        if let Some(p) = self.preflighted.as_mut().filter(|p| p.sent == recorded) {
            p.sent = sent;
        }
        // The grid too: the next start comes an interval after this one really went out, not
        // at once to make up for a wait that was ours, not the runtime's.
        if let Some(pace) = &mut self.pace {
            pace.not_before(sent, 1);
        }
    }

    /// A start recorded at `recorded` may have reached the server as late as `latest`. The
    /// windows' stretch (the margin, and the target utilization's) absorbs arrivals that trail
    /// their start by up to that much; a start that may have trailed by more moves later in
    /// the log, to `latest` less the stretch, so that every window counts it where the server
    /// may have. Returns where it now sits, if it moved. The pacing grid is left alone:
    /// nothing is sent later for it.
    pub fn reached_server_by(&mut self, recorded: Millis, latest: Millis) -> Option<Millis> {
        let margin = self
            .meters
            .iter()
            .zip(&self.windows)
            .map(|(m, w)| self.spread_length(m).saturating_sub(w.length_ms))
            .min()
            .unwrap_or(0);
        let to = latest.saturating_sub(margin);
        (to > recorded && self.move_start(recorded, to)).then_some(to)
    }

    /// A start recorded at or after `since` may have gone out as late as `by`: its request
    /// waited for a save, and the instant it really went out was in memory only when the worker
    /// stopped. The earliest start logged at or after `since` moves to `by`. That may be
    /// another start than the one meant, but never a later one, and moving an earlier start
    /// instead is as strict for every window still to come: such a window holds `by`, and it
    /// holds the start left in place whenever it would have held the one moved. One no longer
    /// in the log (aged out, or the log was cut) is counted anew at `by`.
    pub fn sent_by(&mut self, since: Millis, by: Millis) {
        match self.starts.iter().find(|&&s| s >= since && s <= by) {
            Some(&from) => {
                self.move_start(from, by);
            }
            None => self.count_unrecorded_starts(1, by),
        }
    }

    /// Moves one logged start from `from` to the later `to`, keeping the log in order.
    fn move_start(&mut self, from: Millis, to: Millis) -> bool {
        let Some(mut i) = self.starts.iter().rposition(|&s| s == from) else {
            return false;
        };
        // Rewritten in place and swapped into order (after any equal starts), rather than a
        // `remove` and an `insert`: their ring-buffer shifting is about a kilobyte of wasm. A
        // start moves past the few sent meanwhile.
        self.starts[i] = to;
        while i + 1 < self.starts.len() && self.starts[i + 1] <= to {
            self.starts.swap(i, i + 1);
            i += 1;
        }
        while i > 0 && self.starts[i - 1] > to {
            self.starts.swap(i, i - 1);
            i -= 1;
        }
        true
    }

    /// Counts `n` starts at `at` that happened at or before `at` but were never recorded, in
    /// every window. The pacing grid is left alone: these are not starts to space the next
    /// ones from, only a debt to the windows.
    pub fn count_unrecorded_starts(&mut self, n: u32, at: Millis) {
        let (pace, last_sent) = (self.pace, self.last_sent);
        for _ in 0..n {
            self.record_start(at);
        }
        (self.pace, self.last_sent) = (pace, last_sent);
    }
}
