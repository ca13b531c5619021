//! A page's actions on jobs: cancel, retry, dismiss.

use super::*;

impl Engine {
    /// Cancels a waiting job, or every waiting job of a group. Jobs already sending cannot be
    /// called back; they are left out of the returned list.
    pub fn cancel(&mut self, target: &str, now: Millis) -> Result<Vec<JobId>, EngineError> {
        let ids: Vec<JobId> = if self.table.contains(target) {
            vec![target.to_string()]
        } else {
            let mut jobs: Vec<&Job> = Vec::new();
            for job in self.table.iter() {
                if job.group_id.as_deref() == Some(target) {
                    jobs.push(job);
                }
            }
            if jobs.is_empty() {
                return Err(EngineError::NotFound { id: target.into() });
            }
            crate::job::sort_by_seq(&mut jobs);
            let mut ids = Vec::with_capacity(jobs.len());
            for job in jobs {
                ids.push(job.id.clone());
            }
            ids
        };
        if ids.len() == 1 && ids[0] == target {
            let state = self.table.get(target).map(|j| j.state);
            if let Some(state) = state.filter(|s| !s.is_waiting()) {
                return Err(EngineError::IllegalTransition {
                    message: format!("job {target} is {state} and can no longer be cancelled"),
                });
            }
        }
        let mut cancelled = Vec::new();
        for id in ids.into_iter().rev() {
            if self.table.get(&id).is_some_and(|j| j.state.is_waiting()) {
                self.finish(&id, JobState::Cancelled, None, now);
                cancelled.push(id);
            }
        }
        cancelled.reverse();
        Ok(cancelled)
    }

    /// Sends a failed or conflicting job again from scratch (attempts reset), with the body
    /// and headers `with` replaces, and lifts a budget's hold. A replacement is checked as an
    /// enqueued job's request is. A conflict's request was refused, not applied, so it goes
    /// with a new idempotency key: a server that keeps answers by key would otherwise answer
    /// the same 409 again, or refuse a new body under the old key.
    pub fn retry(&mut self, id: &str, with: RetryWith, now: Millis) -> Result<(), EngineError> {
        let retry = self.config.retry.clone();
        let job = self
            .table
            .get(id)
            .ok_or_else(|| EngineError::NotFound { id: id.into() })?;
        let was_conflict = job.state == JobState::Conflict;
        if with.body.is_some() || with.headers.is_some() {
            let spec = JobSpec {
                budget: job.budget.clone(),
                method: job.method.clone(),
                url: job.url.clone(),
                headers: with.headers_over(&job.headers),
                body: with.body.clone().or_else(|| job.body.clone()),
                options: job.options.clone(),
                ..JobSpec::default()
            };
            self.validate(&spec)?;
        }
        // A job whose dependency failed goes again only once that one may answer again.
        self.check_dependencies_of(id)?;
        let new_key = was_conflict.then(|| self.new_identifier());
        let job = self
            .table
            .transition(id, JobState::Queued)
            .ok_or_else(|| EngineError::NotFound { id: id.into() })?
            .map_err(|e| EngineError::IllegalTransition {
                message: format!("{e}: only failed jobs and conflicts can be retried"),
            })?;
        let names_its_key = with
            .headers
            .as_ref()
            .is_some_and(|h| Headers(h).has("idempotency-key"));
        job.headers = with.headers_over(&job.headers);
        if let Some(body) = with.body {
            job.body = Some(body);
        }
        if let Some(key) = new_key {
            // The page's client puts a create's key among its headers: that one is renewed
            // too, unless the page gave the key of its retry itself.
            if !names_its_key {
                for (name, value) in job.headers.iter_mut() {
                    if name.eq_ignore_ascii_case("idempotency-key") {
                        value.clone_from(&key);
                    }
                }
            }
            job.idempotency_key = key;
        }
        job.outcome = None;
        job.attempts = 0;
        job.not_before = now;
        job.finished_at = None;
        job.last_error = None;
        let (key, budget) = (job.key.clone(), job.budget.clone());
        let id: JobId = id.to_string();
        if let Some(key) = key {
            self.table.join_chain(key, id.clone());
        }
        if let Some(b) = self.budgets.get_mut(&budget) {
            b.state.clear_trouble(&retry);
        }
        self.saves.budget_changed(budget);
        self.saves.job_changed(id.clone());
        self.replace_head_of(&id, now);
        self.settle_dependent(&id, now);
        Ok(())
    }

    /// Forgets a finished job (a failed one the user does not want to retry).
    pub fn dismiss(&mut self, id: &str, now: Millis) -> Result<(), EngineError> {
        let job = self
            .table
            .get(id)
            .ok_or_else(|| EngineError::NotFound { id: id.into() })?;
        if !job.state.is_terminal() {
            return Err(EngineError::IllegalTransition {
                message: format!(
                    "job {id} is {} and cannot be dismissed; cancel it first",
                    job.state
                ),
            });
        }
        // It may stay among the changed jobs (see `forget_expired`).
        self.table.forget(id);
        self.saves.job_removed(id.to_string());
        self.dependency_ended(&id.to_string(), now);
        Ok(())
    }
}
