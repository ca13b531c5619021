//! Jobs that wait for earlier jobs (`JobSpec::after`) and carry their answers: checked at
//! enqueue, filled in from a dependency's answer the moment it is done, and ended with it when
//! it fails, is cancelled or is dismissed.
//!
//! A job with a dependency left is not placed (see `Engine::place`): the scheduler never sees
//! it, so it holds up nothing but the later jobs of its own key. The answer is filled into the
//! job's request at once, while the engine still holds it (the dependency's record may be
//! forgotten later), and marks the job `filled`: its starts are saved first (see
//! `Engine::count_start`), so the filled request is in storage before it leaves, and a restart
//! never sends a reference or an older value. A dependency and its filled dependents change in
//! one save; a restore fills what it finds done anyway (`settle_all`).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::*;
use crate::result_ref::{self, refs_in};
use crate::substring;

/// The waiting jobs of each job that has any, by the dependency's id. Shaped like the key
/// chains (a `VecDeque` per string): one hash map type less in the wasm.
#[derive(Default)]
pub(super) struct Dependents(FxHashMap<String, VecDeque<JobId>>);

impl Dependents {
    fn watch(&mut self, dep: &JobId, dependent: &JobId) {
        let list = self.0.entry(dep.clone()).or_default();
        if !list.contains(dependent) {
            list.push_back(dependent.clone());
        }
    }

    fn take(&mut self, dep: &JobId) -> VecDeque<JobId> {
        self.0.remove(dep).unwrap_or_default()
    }
}

impl Engine {
    /// The jobs `spec` waits for: those its `after` names and those its URL, headers and body
    /// refer to, each once. Each must be a job the queue holds that has not failed or been
    /// cancelled, or one of `earlier` (the jobs before it in the same `enqueue_many`).
    pub(super) fn check_dependencies(
        &self,
        spec: &JobSpec,
        earlier: &[JobId],
    ) -> Result<Vec<JobId>, EngineError> {
        let invalid = |message: String| EngineError::InvalidDependency { message };
        let mut waits_for = spec.after.clone();
        // A reference in the URL's origin never gets here: `validate_url` refuses it (its
        // `job:` reads as a port, or it is user info), so the budget is known at enqueue.
        let mut refs = refs_in(&spec.url).map_err(invalid)?;
        let mut texts: Vec<&str> = spec.headers.iter().map(|(_, v)| v.as_str()).collect();
        texts.extend(spec.body.as_deref());
        for text in texts {
            refs.extend(refs_in(text).map_err(invalid)?);
        }
        for (_, r) in refs {
            if !waits_for.iter().any(|id| id == r.job) {
                waits_for.push(r.job.to_string());
            }
        }
        for dep in &waits_for {
            if spec.id.as_ref() == Some(dep) {
                return Err(invalid(format!(
                    "job {dep} cannot wait for itself: name earlier jobs in 'after'"
                )));
            }
            if !earlier.contains(dep) {
                self.check_waits_for(dep)?;
            }
        }
        Ok(waits_for)
    }

    /// Refuses a dependency on `dep` unless its answer may still come.
    fn check_waits_for(&self, dep: &JobId) -> Result<(), EngineError> {
        let why = match self.table.get(dep).map(|d| d.state) {
            None => "is not in the queue (never enqueued, or done and forgotten): use the id \
                     enqueue returned, or its answer itself"
                .to_string(),
            Some(s @ (JobState::Failed | JobState::Cancelled)) => {
                format!("is {s}: its answer will not come; retry it first, or leave it out")
            }
            Some(_) => return Ok(()),
        };
        Err(EngineError::InvalidDependency {
            message: format!("job {dep}, named as a job to wait for, {why}"),
        })
    }

    /// Whether job `id`'s dependencies all may still answer (for a retry of it).
    pub(super) fn check_dependencies_of(&self, id: &str) -> Result<(), EngineError> {
        let after = self
            .table
            .get(id)
            .map(|j| j.after.clone())
            .unwrap_or_default();
        after.iter().try_for_each(|dep| self.check_waits_for(dep))
    }

    /// Brings waiting job `id` up to date with what it waits for: the answers of those done
    /// filled in, ended if one failed or was cancelled; it waits on for the others.
    pub(super) fn settle_dependent(&mut self, id: &JobId, now: Millis) {
        let Some(after) = self
            .table
            .get(id)
            .filter(|j| j.state.is_waiting())
            .map(|j| j.after.clone())
        else {
            return;
        };
        for dep in after {
            match self.table.get(&dep).map(|d| d.state) {
                Some(JobState::Done) => self.fill_in(id, &dep, now),
                Some(s @ (JobState::Failed | JobState::Cancelled)) => {
                    self.end_with_dependency(id, &dep, Some(s), now)
                }
                // Waiting, sending or a conflict; or not restored yet (a restore in two
                // steps): it may still answer.
                _ => self.dependents.watch(&dep, id),
            }
        }
    }

    /// Settles every waiting job that waits for others, after a restore.
    pub(super) fn settle_all(&mut self, now: Millis) {
        let mut waiting: Vec<JobId> = Vec::new();
        for job in self.table.iter() {
            if !job.after.is_empty() && job.state.is_waiting() {
                waiting.push(job.id.clone());
            }
        }
        for id in waiting {
            self.settle_dependent(&id, now);
        }
    }

    /// Job `dep` ended (it is done, failed, cancelled, in conflict, or was dismissed: gone
    /// from the table): its waiting dependents get its answer, or end with it. A conflict
    /// keeps them waiting until it is resolved (retried, or dismissed).
    pub(super) fn dependency_ended(&mut self, dep: &JobId, now: Millis) {
        let state = self.table.get(dep).map(|d| d.state);
        if state == Some(JobState::Conflict) {
            return;
        }
        for id in self.dependents.take(dep) {
            let waits = self
                .table
                .get(&id)
                .is_some_and(|j| j.state.is_waiting() && j.after.contains(dep));
            match state {
                _ if !waits => {}
                Some(JobState::Done) => self.fill_in(&id, dep, now),
                other => self.end_with_dependency(&id, dep, other, now),
            }
        }
    }

    /// Fills `dep`'s answer into waiting job `id`, which no longer waits for it; or fails it
    /// when the answer lacks a value it refers to.
    fn fill_in(&mut self, id: &JobId, dep: &JobId, now: Millis) {
        let answer = self
            .table
            .get(dep)
            .and_then(|d| d.outcome.clone())
            .unwrap_or_default();
        let Some(job) = self.table.get_mut(id) else {
            return;
        };
        match result_ref::fill_from(job, dep, &answer) {
            Ok(filled) => {
                job.after.retain(|d| d != dep);
                job.filled |= filled;
                self.saves.job_changed(id.clone());
                self.place(id, now);
            }
            Err(message) => {
                let error = JobError {
                    status: None,
                    message,
                };
                self.finish(id, JobState::Failed, Some(error), now);
            }
        }
    }

    /// Ends waiting job `id` because `dep` ended in `state` (`None`: dismissed) without an
    /// answer for it: cancelled with a cancelled dependency, failed otherwise. Its own
    /// dependents follow (see `finish`).
    fn end_with_dependency(
        &mut self,
        id: &JobId,
        dep: &JobId,
        state: Option<JobState>,
        now: Millis,
    ) {
        let (to, what) = match state {
            Some(JobState::Cancelled) => (JobState::Cancelled, "was cancelled"),
            Some(JobState::Failed) => (JobState::Failed, "failed"),
            _ => (JobState::Failed, "was dismissed"),
        };
        let error = JobError {
            status: None,
            message: format!("job {dep}, which this job waits for, {what}"),
        };
        self.finish(id, to, Some(error), now);
    }
}

/// `spec`, which waits for job `asked` of the same `enqueue_many`, waiting instead for
/// `carrier`, the job `asked` was folded into.
pub(super) fn rename_dependency(spec: &mut JobSpec, asked: &str, carrier: &str) {
    let (from, to) = (format!("{{{{job:{asked}."), format!("{{{{job:{carrier}."));
    for id in spec.after.iter_mut().filter(|id| *id == asked) {
        *id = carrier.to_string();
    }
    spec.url = substring::replace(&spec.url, &from, &to);
    for (_, value) in spec.headers.iter_mut() {
        *value = substring::replace(value, &from, &to);
    }
    if let Some(body) = spec.body.as_mut() {
        *body = substring::replace(body, &from, &to);
    }
}
