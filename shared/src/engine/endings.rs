//! How a job ends or is tried again: a failure retried early, after a backoff or not at all
//! (`fail_or_retry`), and a job that ends (`finish`) leaving its key's chain.

use super::*;

impl Engine {
    /// An attempt of job `id` failed: it is tried again after a backoff, or fails once it has
    /// used its attempts.
    pub(super) fn fail_or_retry(
        &mut self,
        id: &JobId,
        budget_name: &str,
        error: JobError,
        now: Millis,
    ) {
        let Some(attempts) = self.count_attempt(id, &error, now) else {
            return;
        };
        self.retry_after_backoff(id, budget_name, error, attempts, now);
    }

    /// One more attempt of job `id` failed with `error`: `Some(attempts so far)` while it may
    /// be tried again, `None` when that was its last (it failed) or it is gone.
    pub(super) fn count_attempt(
        &mut self,
        id: &JobId,
        error: &JobError,
        now: Millis,
    ) -> Option<u32> {
        let max_attempts = self.config.retry.max_attempts;
        let job = self.table.get_mut(id)?;
        job.attempts += 1;
        let attempts = job.attempts;
        if attempts >= max_attempts {
            let error = JobError {
                message: format!("{} (gave up after {attempts} attempts)", error.message),
                ..error.clone()
            };
            self.finish(id, JobState::Failed, Some(error), now);
            return None;
        }
        Some(attempts)
    }

    /// An attempt given up before the configured timeout (see `rto`): retried as any failed
    /// attempt is (a retry token, a backoff by how many were given up in a row), without
    /// counting it among the job's attempts.
    pub(super) fn retry_early(
        &mut self,
        id: &JobId,
        budget_name: &str,
        error: JobError,
        now: Millis,
    ) {
        let given_up = self.given_up_in_a_row(budget_name, id);
        // The first give-up retries at once, as TCP retransmits when its timer fires: the
        // wait was the timeout itself. Later ones back off as failures do.
        self.retry_after_backoff(id, budget_name, error, given_up - 1, now);
    }

    /// How many attempts of `attempt` (a job or a batch) in a row were given up early, at
    /// least 1.
    pub(super) fn given_up_in_a_row(&self, budget_name: &str, attempt: &JobId) -> u32 {
        self.budgets.get(budget_name).map_or(1, |b| {
            b.given_up
                .iter()
                .find(|(j, _)| j == attempt)
                .map_or(1, |&(_, n)| n)
        })
    }

    /// Retries a job after the backoff for its `backoff_step`th failure (none for 0), if the
    /// budget has a retry token; without one the service is in trouble and the job fails.
    pub(super) fn retry_after_backoff(
        &mut self,
        id: &JobId,
        budget_name: &str,
        error: JobError,
        backoff_step: u32,
        now: Millis,
    ) {
        if self.take_retry_token(budget_name, &error) {
            let delay = self.backoff_delay(backoff_step);
            self.schedule_retry(id, error, delay, now);
        } else {
            self.fail_for_trouble(id, error, now);
        }
    }

    /// Takes one of the budget's retry tokens for a retry after `error`; without one, the
    /// service is in trouble: the budget stops sending until the user retries.
    pub(super) fn take_retry_token(&mut self, budget_name: &str, error: &JobError) -> bool {
        let Some(b) = self.budgets.get_mut(budget_name) else {
            return false;
        };
        if b.state.take_retry_token() {
            return true;
        }
        b.state.trouble = Some(format!(
            "the service behind '{budget_name}' is having trouble (last error: {}); sending is stopped until you retry",
            error.message
        ));
        self.saves.budget_changed(budget_name.to_string());
        false
    }

    /// Job `id` fails with `error` because its budget ran out of retries.
    pub(super) fn fail_for_trouble(&mut self, id: &JobId, error: JobError, now: Millis) {
        let error = JobError {
            message: format!(
                "{} (retries stopped: the service is having trouble)",
                error.message
            ),
            ..error
        };
        self.finish(id, JobState::Failed, Some(error), now);
    }

    /// The backoff after a `backoff_step`th failure: none for 0 (see `retry::backoff`).
    pub(super) fn backoff_delay(&mut self, backoff_step: u32) -> DurationMs {
        if backoff_step == 0 {
            0
        } else {
            backoff(backoff_step, &self.config.retry, &mut self.rng)
        }
    }

    /// Job `id` waits `delay`, then goes again.
    pub(super) fn schedule_retry(
        &mut self,
        id: &JobId,
        error: JobError,
        delay: DurationMs,
        now: Millis,
    ) {
        let _ = self.table.transition(id, JobState::RetryWait);
        if let Some(job) = self.table.get_mut(id) {
            job.not_before = now + delay;
            job.last_error = Some(error);
        }
        self.saves.job_changed(id.clone());
        self.place(id, now);
    }

    /// Moves a job to a terminal state and lets the next job of its key go.
    pub(super) fn finish(
        &mut self,
        id: &JobId,
        state: JobState,
        error: Option<JobError>,
        now: Millis,
    ) {
        self.unplace(id);
        let Some(Ok(job)) = self.table.transition(id, state) else {
            return;
        };
        job.finished_at = Some(now);
        if error.is_some() {
            job.last_error = error;
        }
        // What it sent (an `Authorization` header, the body) is never sent again once it is
        // done or cancelled, so it does not stay in storage for the retention time; a failed
        // job keeps it for a retry unless the configuration says otherwise.
        match state {
            JobState::Done | JobState::Cancelled => {
                job.headers = Vec::new();
                job.body = None;
            }
            JobState::Failed | JobState::Conflict if self.config.drop_failed_headers => {
                job.headers = Vec::new()
            }
            _ => {}
        }
        if matches!(
            state,
            JobState::Done | JobState::Failed | JobState::Conflict
        ) {
            self.counters.finished(job.attempts);
        }
        let key = job.key.clone();
        if matches!(state, JobState::Done | JobState::Cancelled) {
            self.table.expire_from(now, id.clone());
        }
        self.saves.job_changed(id.clone());
        self.leave_chain(id, key, now);
        self.dependency_ended(id, now);
    }

    pub(super) fn leave_chain(&mut self, id: &JobId, key: Option<String>, now: Millis) {
        if let Some(head) = self.table.leave_chain(id, key) {
            self.place(&head, now);
        }
    }
}
