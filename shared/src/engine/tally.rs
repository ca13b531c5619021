//! The job table's running counts for the status: jobs per state, unfinished jobs per budget,
//! waiting jobs per lane, and each group's progress.
//!
//! Why kept rather than counted: every tab's status is taken several times a second while a
//! queue is busy, and counting walked every job each time, finished ones included (a queue of a
//! million jobs, four times a second). The job table updates these with every job it admits,
//! forgets, moves to another state ([`super::jobs::JobTable::transition`]) or folds a later job
//! into, so a snapshot reads them in time proportional to the budgets and groups, not the jobs.
//! Debug builds check them against a count of the jobs at every snapshot, and
//! `shared/tests/status_counts.rs` does so over arbitrary sequences of inputs.
//!
//! The worker's wasm came out smaller with it (142,967 bytes gzipped, from 143,316): the
//! snapshot no longer carries the counting loop, and budgets and groups share one entry type.

use crate::job::{Job, JobState, Lane};
use crate::status::{GroupStatus, StateCounts};

#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) counts: StateCounts,
    /// Jobs waiting to start (queued or waiting for a retry), per lane.
    pub(super) waiting_per_lane: [u64; 3],
    /// Each budget with a job, in name order.
    pub(super) budgets: Vec<Counts>,
    /// Each group with a job, in id order.
    pub(super) groups: Vec<Counts>,
}

/// The jobs of one budget or group. Budgets and groups share the type, and so one piece of code
/// keeps both.
#[derive(Debug, PartialEq)]
pub(super) struct Counts {
    pub(super) id: String,
    /// Jobs in all, done, failed, cancelled, not finished, in conflict, and sending (also
    /// among the not finished) (see [`Counts::TOTAL`] and on).
    pub(super) jobs: [u64; 7],
    /// A group's: the budget of the first job counted in it, which its capacity warning is
    /// about. A budget's: empty.
    pub(super) budget: String,
}

impl Counts {
    pub(super) const TOTAL: usize = 0;
    pub(super) const DONE: usize = 1;
    pub(super) const FAILED: usize = 2;
    pub(super) const CANCELLED: usize = 3;
    pub(super) const PENDING: usize = 4;
    pub(super) const CONFLICTS: usize = 5;
    pub(super) const SENDING: usize = 6;

    /// Where a job in `state` is counted besides [`Counts::TOTAL`].
    fn slot(state: JobState) -> usize {
        match state {
            JobState::Done => Counts::DONE,
            JobState::Failed => Counts::FAILED,
            JobState::Cancelled => Counts::CANCELLED,
            JobState::Conflict => Counts::CONFLICTS,
            JobState::Queued | JobState::Sending | JobState::RetryWait => Counts::PENDING,
        }
    }

    pub(super) fn pending(&self) -> u64 {
        self.jobs[Counts::PENDING]
    }

    /// A group's counts as the status shows them (its warning is the snapshot's to set).
    pub(super) fn group_status(&self) -> GroupStatus {
        let [total, done, failed, cancelled, pending, conflicts, sending] = self.jobs;
        GroupStatus {
            id: self.id.clone(),
            total,
            done,
            failed,
            cancelled,
            conflicts,
            pending,
            waiting: pending.saturating_sub(sending),
            eta_ms: None,
            warning: None,
        }
    }
}

/// What of a job the tally counts by. A job's budget and group never change once it is in the
/// table; its state and lane may.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Counted {
    pub(super) state: JobState,
    pub(super) lane: Lane,
}

impl Counted {
    pub(super) fn of(job: &Job) -> Counted {
        Counted {
            state: job.state,
            lane: job.lane,
        }
    }
}

impl Tally {
    /// The counts of `jobs`, from scratch (for the debug check at every snapshot).
    #[cfg(debug_assertions)]
    pub(super) fn of<'a>(jobs: impl Iterator<Item = &'a Job>) -> Tally {
        let mut tally = Tally::default();
        for job in jobs {
            tally.add(job);
        }
        tally
    }

    /// The same counts, whichever job each group's budget was taken from.
    #[cfg(debug_assertions)]
    pub(super) fn agrees_with(&self, other: &Tally) -> bool {
        let ids_and_jobs = |all: &[Counts]| -> Vec<(String, [u64; 7])> {
            all.iter().map(|c| (c.id.clone(), c.jobs)).collect()
        };
        self.counts == other.counts
            && self.waiting_per_lane == other.waiting_per_lane
            && self.budgets == other.budgets
            && ids_and_jobs(&self.groups) == ids_and_jobs(&other.groups)
    }

    pub(super) fn add(&mut self, job: &Job) {
        self.count(job, Counted::of(job), true);
    }

    pub(super) fn remove(&mut self, job: &Job) {
        self.count(job, Counted::of(job), false);
    }

    /// `job` was counted as `before` and is now as it is.
    pub(super) fn changed(&mut self, job: &Job, before: Counted) {
        if before != Counted::of(job) {
            self.count(job, before, false);
            self.count(job, Counted::of(job), true);
        }
    }

    /// Counts `job` as `counted` in (`up`) or out.
    fn count(&mut self, job: &Job, counted: Counted, up: bool) {
        let c = &mut self.counts;
        step(
            match counted.state {
                JobState::Queued => &mut c.queued,
                JobState::Sending => &mut c.sending,
                JobState::RetryWait => &mut c.retry_wait,
                JobState::Done => &mut c.done,
                JobState::Failed => &mut c.failed,
                JobState::Cancelled => &mut c.cancelled,
                JobState::Conflict => &mut c.conflict,
            },
            up,
        );
        if counted.state.is_waiting() {
            step(&mut self.waiting_per_lane[counted.lane.index()], up);
        }
        let slot = Counts::slot(counted.state);
        let sending = counted.state == JobState::Sending;
        bump(&mut self.budgets, &job.budget, "", slot, sending, up);
        if let Some(group) = &job.group_id {
            bump(&mut self.groups, group, &job.budget, slot, sending, up);
        }
    }
}

fn step(n: &mut u64, up: bool) {
    *n = if up { *n + 1 } else { n.saturating_sub(1) };
}

/// Counts a job in or out of `id`'s entry in `all` (kept in id order), at `slot` and in the
/// total (and among the sending ones when it is); an entry is made for the first job and
/// dropped with the last.
fn bump(all: &mut Vec<Counts>, id: &str, budget: &str, slot: usize, sending: bool, up: bool) {
    let i = match all.binary_search_by(|c| c.id.as_str().cmp(id)) {
        Ok(i) => i,
        Err(_) if !up => return,
        Err(i) => {
            all.insert(
                i,
                Counts {
                    id: id.to_string(),
                    jobs: [0; 7],
                    budget: budget.to_string(),
                },
            );
            i
        }
    };
    let jobs = &mut all[i].jobs;
    step(&mut jobs[Counts::TOTAL], up);
    step(&mut jobs[slot], up);
    if sending {
        step(&mut jobs[Counts::SENDING], up);
    }
    if jobs[Counts::TOTAL] == 0 {
        all.remove(i);
    }
}
