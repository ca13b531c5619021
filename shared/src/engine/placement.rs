//! Where each waiting job stands (ready in its budget's lanes, or delayed), and what time passing does (`handle_timeout`).

use super::*;

impl Engine {
    pub(super) fn unplace(&mut self, id: &JobId) {
        let budgets = &mut self.budgets;
        self.scheduler
            .unplace(id, |name| budgets.get_mut(name).map(|b| &mut b.ready));
    }

    /// Puts a job where the scheduler will find it: ready (per budget and effective lane),
    /// delayed (until its backoff ends), or nowhere (not waiting, or not the head of its key).
    pub(super) fn place(&mut self, id: &JobId, now: Millis) {
        self.unplace(id);
        let Some(job) = self.table.get(id) else {
            return;
        };
        if !job.state.is_waiting() {
            return;
        }
        // Not before its chain's turn, nor before the jobs it waits for are done.
        if !self.table.heads_its_chain(job) || !job.after.is_empty() {
            return;
        }
        if job.not_before > now {
            self.scheduler.delay(job);
            return;
        }
        let lane = self.table.effective_lane(job);
        // A job whose budget is not configured waits (and is reported) until it is.
        if let Some(b) = self.budgets.get_mut(&job.budget) {
            self.scheduler.make_ready(job, lane, &mut b.ready);
        }
    }

    pub(super) fn replace_head_of(&mut self, id: &JobId, now: Millis) {
        match self.table.head_of(id) {
            Some(h) => self.place(&h, now),
            None => self.place(id, now),
        }
    }

    pub(super) fn replace_all(&mut self, now: Millis) {
        self.scheduler.clear();
        for b in self.budgets.values_mut() {
            b.ready.clear();
        }
        let mut ids: Vec<JobId> = Vec::new();
        for job in self.table.iter() {
            if job.state.is_waiting() {
                ids.push(job.id.clone());
            }
        }
        for id in ids {
            self.place(&id, now);
        }
    }

    pub(super) fn promote_due(&mut self, now: Millis) {
        while let Some(id) = self.scheduler.pop_due(now) {
            self.place(&id, now);
        }
    }

    pub(super) fn forget_expired(&mut self, now: Millis) {
        let retention = self.config.retention_ms;
        while let Some(id) = self.table.pop_expired(now, retention) {
            // It may stay among the changed jobs: `take_changes` skips ids it no longer
            // knows (and one added again since is changed indeed).
            self.saves.job_removed(id);
        }
    }

    // ----- time ----------------------------------------------------------------------------

    /// Time passed: what falls due by `now` happens here, and only here. Jobs whose backoff
    /// ended join their lanes, the offline probe's wait ends, requests out longer than their
    /// budget allows for a trip are counted as arriving now, and finished jobs past their
    /// retention are forgotten. Call it whenever [`Engine::poll_timeout`]'s instant has passed,
    /// and before polling starts after any other wake-up: it is cheap when nothing is due, so
    /// the pump calls it on every turn ([`crate::pump::Pump::turn`]).
    ///
    /// Kept apart from [`Engine::poll_transmit`] (as `quinn-proto` keeps `handle_timeout` apart
    /// from `poll_transmit`) so that polling is a pure pick among what is ready: asking what
    /// may start never changes what the queue holds.
    pub fn handle_timeout(&mut self, now: Millis) {
        self.forget_expired(now);
        if self.offline_until.is_some_and(|t| t <= now) {
            self.offline_until = None;
        }
        self.promote_due(now);
        for b in self.budgets.values_mut() {
            if !b.in_flight.is_empty() && b.count_overdue_as_arriving(now) {
                self.saves.budget_changed(b.config.name.clone());
            }
        }
    }
}
