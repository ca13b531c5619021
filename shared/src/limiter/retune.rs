//! What a server says of its limits changes the windows: `retune` replaces or adds a window
//! (keeping the recorded starts, so no burst opens), `replay_starts_of` carries the starts
//! into a limiter built anew, and `align_to` moves fixed windows to the server's reset.

use super::*;

impl Limiter {
    /// The server reported a quota: replace the window of about that length (within 10%), or
    /// add it. Keeps the recorded starts, so a retune never allows a burst above the new limit.
    ///
    /// A window with a zero limit or length is ignored: it is not a rate, and a server that
    /// allows nothing for a while is handled by pausing the budget.
    pub fn retune(&mut self, window: Window) {
        if window.limit == 0 || window.length_ms == 0 {
            return;
        }
        let closest = self
            .windows
            .iter()
            .enumerate()
            .map(|(i, w)| (i, w.length_ms.abs_diff(window.length_ms)))
            .filter(|&(_, diff)| u128::from(diff) * 10 <= u128::from(window.length_ms))
            .min_by_key(|&(_, diff)| diff)
            .map(|(i, _)| i);
        let fresh = Meter::fresh(self.algorithm, window, self.target_utilization, self.margin);
        match closest {
            Some(i) => {
                self.meters[i] = self.meters[i].retuned(fresh, &self.starts);
                self.windows[i] = window;
            }
            None => {
                // A window we have not enforced so far still has to count the starts already
                // made, or it would open with a full burst on top of them.
                let mut meter = fresh;
                meter.catch_up(&self.starts);
                self.meters.push(meter);
                self.windows.push(window);
            }
        }
    }

    /// Replays another limiter's recorded starts into this one, so a limiter rebuilt for a new
    /// configuration (other windows, another algorithm) still counts the requests already made
    /// and cannot open with a burst on top of them.
    pub fn replay_starts_of(&mut self, other: &Limiter) {
        for &at in &other.starts {
            self.record_start(at);
        }
    }

    /// Fixed windows only: moves the window boundaries so that one falls on `reset_at`, the
    /// instant the server reported its counter resets. Every window is aligned to it: servers
    /// put all their fixed windows on one grid (whole seconds and hours, or from a client's
    /// first request), so a reset of one is a boundary of the others too. The count in the
    /// current window is taken afresh from the recorded starts. Other algorithms ignore this.
    pub fn align_to(&mut self, reset_at: Millis) {
        for meter in &mut self.meters {
            if let State::Fixed(fixed) = &mut meter.state {
                fixed.align_to(reset_at, meter.length, &self.starts);
            }
        }
    }
}
