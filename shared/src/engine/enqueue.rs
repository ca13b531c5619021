//! Enqueueing: a page's jobs checked, made, cancelled out against a waiting create, or folded into a waiting patch.

use super::*;

impl Engine {
    /// Job ids and idempotency keys from now on come from `source` (the worker's is
    /// `crypto.getRandomValues`); a source that fails (returns false) falls back to the
    /// engine's own generator for that identifier.
    pub fn set_identifier_source(&mut self, source: IdentifierSource) {
        self.identifiers = Some(source);
    }

    pub(super) fn new_identifier(&mut self) -> String {
        let mut bytes = [0u8; 16];
        let filled = self
            .identifiers
            .as_mut()
            .is_some_and(|source| source(&mut bytes));
        if !filled {
            self.rng.fill(&mut bytes);
        }
        uuid_v4_from(bytes)
    }

    /// Accepts one action. The result names the job that will carry it: a new one, or an
    /// earlier waiting one it was folded into (`coalesced`).
    pub fn enqueue(&mut self, mut spec: JobSpec, now: Millis) -> Result<Enqueued, EngineError> {
        spec.url = crate::result_ref::decode_refs_in_url(&spec.url);
        let (budget, method) = self.validate(&spec)?;
        spec.after = self.check_dependencies(&spec, &[])?;
        Ok(self.enqueue_valid(spec, budget, method, now))
    }

    /// Accepts many actions as one group, all or none: if any is invalid nothing is enqueued.
    /// Also returns a warning when the group needs more than a whole window of its budget.
    pub fn enqueue_many(
        &mut self,
        specs: Vec<JobSpec>,
        group_id: Option<String>,
        now: Millis,
    ) -> Result<(Vec<Enqueued>, Option<String>), EngineError> {
        let total = specs.len();
        let mut checked: Vec<(JobSpec, String, String)> = Vec::with_capacity(total);
        // The ids of the jobs checked so far: a later job may wait for them.
        let mut earlier: Vec<JobId> = Vec::new();
        for (i, mut spec) in specs.into_iter().enumerate() {
            spec.url = crate::result_ref::decode_refs_in_url(&spec.url);
            let valid = self.check_request(&spec).and_then(|method| {
                // A job to the URL and named budget of the one before goes where it went: a
                // bulk group sends many jobs to one URL, and parsing it against every
                // budget's prefixes was a quarter of a 10,000-job enqueue in the worker.
                let budget = match checked.last() {
                    Some((before, budget, _)) if routed_alike(before, &spec) => budget.clone(),
                    _ => self.route(&spec)?,
                };
                spec.after = self.check_dependencies(&spec, &earlier)?;
                Ok((budget, method))
            });
            earlier.extend(spec.id.clone());
            match valid {
                Ok((budget, method)) => checked.push((spec, budget, method)),
                Err(e) => {
                    return Err(EngineError::InGroup {
                        position: i + 1,
                        total,
                        error: Box::new(e),
                    })
                }
            }
        }
        let mut per_budget: Vec<(String, u64)> = Vec::new();
        let mut results: Vec<Enqueued> = Vec::with_capacity(total);
        // Jobs of this call folded into another (asked id, carrier): a later one waits for
        // the carrier.
        let mut renamed: Vec<(JobId, JobId)> = Vec::new();
        self.table.reserve(checked.len());
        for (mut spec, budget, method) in checked {
            if group_id.is_some() {
                spec.group_id = group_id.clone();
            }
            for (asked, carrier) in &renamed {
                if spec.after.contains(asked) {
                    dependencies::rename_dependency(&mut spec, asked, carrier);
                }
            }
            let asked = spec.id.clone();
            count_in(&mut per_budget, &budget);
            let result = self.enqueue_valid(spec, budget, method, now);
            if let Some(asked) = asked.filter(|a| *a != result.id) {
                renamed.push((asked, result.id.clone()));
            }
            results.push(result);
        }
        let warning = per_budget
            .iter()
            .filter_map(|(name, n)| {
                let b = self.budgets.get(name)?;
                capacity_warning(*n, b.state.limiter.windows())
            })
            .next();
        Ok((results, warning))
    }

    pub(super) fn enqueue_valid(
        &mut self,
        spec: JobSpec,
        budget: String,
        method: String,
        now: Millis,
    ) -> Enqueued {
        let seq = self.table.next_seq();
        let job = Job {
            // A page fixes its jobs' ids (see `JobSpec::id`); the caller made sure it is new.
            id: spec.id.unwrap_or_else(|| self.new_identifier()),
            budget,
            lane: spec.lane,
            key: spec.key.filter(|k| !k.is_empty()),
            kind: spec.kind,
            method,
            url: spec.url,
            headers: spec.headers,
            body: spec.body,
            options: spec.options.filter(|o| !o.is_default()),
            cost: spec.cost,
            idempotency_key: self.new_identifier(),
            if_match_from_key: spec.if_match_from_key,
            state: JobState::Queued,
            attempts: 0,
            not_before: now,
            enqueued_at: now,
            coalesced: 0,
            group_id: spec.group_id,
            last_error: None,
            outcome: None,
            finished_at: None,
            started_at: None,
            seq,
            folded: Vec::new(),
            batch: None,
            after: spec.after,
            filled: false,
        };
        if let Some(result) = self.try_cancel_out(&job, now) {
            return result;
        }
        if let Some(id) = self.try_coalesce(&job, now) {
            return Enqueued {
                id,
                coalesced: true,
                state: JobState::Queued,
            };
        }
        let id = job.id.clone();
        let waits = !job.after.is_empty();
        self.table.admit(job);
        self.saves.job_changed(id.clone());
        if waits {
            self.settle_dependent(&id, now);
        }
        match self.table.head_of(&id) {
            // The chain head may inherit this job's lane.
            Some(head) => self.place(&head, now),
            None => self.place(&id, now),
        }
        // Queued, unless what it waits for ended it already.
        let state = self.table.get(&id).map_or(JobState::Queued, |j| j.state);
        Enqueued {
            id,
            coalesced: false,
            state,
        }
    }

    /// A delete whose record's create has not been sent: neither needs to be (nor anything
    /// queued for the record in between).
    pub(super) fn try_cancel_out(&mut self, delete: &Job, now: Millis) -> Option<Enqueued> {
        let doomed = self.table.cancelled_out_by(delete)?;
        let reason = JobError {
            status: None,
            message: "a create and a later delete of the same record cancelled out before either was sent".into(),
        };
        for id in &doomed {
            self.finish(id, JobState::Cancelled, Some(reason.clone()), now);
        }
        let mut delete = delete.clone();
        delete.state = JobState::Cancelled;
        delete.finished_at = Some(now);
        delete.last_error = Some(reason);
        let id = delete.id.clone();
        self.table.admit(delete);
        self.saves.job_changed(id.clone());
        Some(Enqueued {
            id,
            coalesced: false,
            state: JobState::Cancelled,
        })
    }

    /// Folds a patch into the newest unsent patch of its key, or an idempotent request into an
    /// identical waiting one. Returns the id of the job it was folded into.
    pub(super) fn try_coalesce(&mut self, job: &Job, now: Millis) -> Option<JobId> {
        let target = self.table.fold(job)?;
        self.saves.job_changed(target.clone());
        self.replace_head_of(&target, now);
        Some(target)
    }
}

/// Whether [`Engine::route`] gives the same budget for both jobs: it reads their URL and the
/// budget they name, nothing else.
fn routed_alike(a: &JobSpec, b: &JobSpec) -> bool {
    a.url == b.url && a.budget == b.budget
}
