//! Which job each folded job id lives on.

use sluice_shared::{Engine, Enqueued, JobId};

/// The ids of jobs that were folded into another job on enqueue (`Job::folded`), each with the
/// id of the job that carries it, sorted by folded id: an `enqueue` of such an id sent again
/// is answered with the carrier. A sorted list rather than a map: folds are few, and a map of
/// its own would cost the wasm more than this does.
#[derive(Default)]
pub struct Folds(Vec<(JobId, JobId)>);

impl Folds {
    pub(super) fn of(engine: &Engine) -> Self {
        let mut folds = Folds::default();
        for job in engine.jobs() {
            for id in &job.folded {
                folds.insert(id.clone(), job.id.clone());
            }
        }
        folds
    }

    pub(super) fn insert(&mut self, folded: JobId, carrier: JobId) {
        match self.0.binary_search_by(|(f, _)| f.as_str().cmp(&folded)) {
            Ok(i) => self.0[i].1 = carrier,
            Err(i) => self.0.insert(i, (folded, carrier)),
        }
    }

    pub(super) fn carrier(&self, folded: &str) -> Option<&JobId> {
        let i = self
            .0
            .binary_search_by(|(f, _)| f.as_str().cmp(folded))
            .ok()?;
        Some(&self.0[i].1)
    }

    /// Records where a just enqueued job went, if it was folded into another one.
    pub(super) fn note(&mut self, asked: Option<JobId>, result: &Enqueued) {
        if let Some(asked) = asked.filter(|a| *a != result.id) {
            self.insert(asked, result.id.clone());
        }
    }
}
