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
//! Each save also keeps these counts ([`QueueCounts::into_saved`]), so that a start that has
//! read only the head of a large queue can answer the status at once: the saved counts less
//! the head's are those of the jobs not read yet (`Engine::expect_unread`).
//!
//! The worker's wasm came out smaller with it (142,967 bytes gzipped, from 143,316): the
//! snapshot no longer carries the counting loop, and budgets and groups share one entry type.

use crate::job::{Job, JobState, Lane};
use crate::json::{FromJson, ToJson};
use crate::status::{GroupStatus, StateCounts};

/// Also what a save leaves for the next start, in the form [`QueueCounts::into_saved`] gives (see
/// `Engine::expect_unread`): the status of a large queue is answered from it before the whole
/// queue is read.
#[derive(Clone, Debug, Default, PartialEq, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct QueueCounts {
    pub(super) counts: StateCounts,
    /// Jobs waiting to start (queued or waiting for a retry), per lane.
    pub(super) waiting_per_lane: [u64; 3],
    /// Jobs sending, per lane: what [`QueueCounts::into_saved`] counts as waiting, as a
    /// restart does.
    pub(super) sending_per_lane: [u64; 3],
    /// Each budget with a job, in name order.
    pub(super) budgets: Vec<Counts>,
    /// Each group with a job, in id order.
    pub(super) groups: Vec<Counts>,
}

/// The jobs of one budget or group. Budgets and groups share the type, and so one piece of code
/// keeps both.
#[derive(Clone, Debug, PartialEq, ToJson, FromJson)]
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

impl QueueCounts {
    /// The counts of `jobs`, from scratch (the debug check at every snapshot; the head of a
    /// saved queue as it was read, see `Engine::expect_unread`).
    pub fn of<'a>(jobs: impl Iterator<Item = &'a Job>) -> QueueCounts {
        let mut tally = QueueCounts::default();
        for job in jobs {
            tally.add(job);
        }
        tally
    }

    /// The same counts, whichever job each group's budget was taken from.
    #[cfg(debug_assertions)]
    pub(super) fn agrees_with(&self, other: &QueueCounts) -> bool {
        let ids_and_jobs = |all: &[Counts]| -> Vec<(String, [u64; 7])> {
            all.iter().map(|c| (c.id.clone(), c.jobs)).collect()
        };
        self.counts == other.counts
            && self.waiting_per_lane == other.waiting_per_lane
            && self.sending_per_lane == other.sending_per_lane
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
        if counted.state == JobState::Sending {
            step(&mut self.sending_per_lane[counted.lane.index()], up);
        }
        let slot = Counts::slot(counted.state);
        let sending = counted.state == JobState::Sending;
        bump(&mut self.budgets, &job.budget, "", slot, sending, up);
        if let Some(group) = &job.group_id {
            bump(&mut self.groups, group, &job.budget, slot, sending, up);
        }
    }
}

/// Saved counts, and what of them a start has not read yet.
impl QueueCounts {
    /// These counts as a restart reads the jobs back: every unfinished job waiting in its lane.
    /// A restart queues a job that was sending, and a job's record may say queued, waiting for
    /// a retry or sending while the job sends (a start is not worth a write of its own), so
    /// the three are one count here (`queued`), which a start's head and the counts saved by
    /// the last save can be compared in.
    pub fn into_saved(mut self) -> QueueCounts {
        let c = &mut self.counts;
        c.queued = c.pending();
        c.sending = 0;
        c.retry_wait = 0;
        for (waiting, sending) in self
            .waiting_per_lane
            .iter_mut()
            .zip(&mut self.sending_per_lane)
        {
            *waiting += std::mem::take(sending);
        }
        for counts in self.budgets.iter_mut().chain(&mut self.groups) {
            counts.jobs[Counts::SENDING] = 0;
        }
        self
    }

    /// These counts less `part`'s, both [`QueueCounts::into_saved`]; `None` when `part` counts
    /// a job these do not (then these are not the counts of a queue `part` was read from).
    pub fn without(&self, part: &QueueCounts) -> Option<QueueCounts> {
        self.combined(part, u64::checked_sub)
    }

    /// These counts and `other`'s together (for the status of a queue part of which is not
    /// read yet).
    pub(super) fn with(&self, other: &QueueCounts) -> QueueCounts {
        // An addition gives every count: `combined` cannot give `None` here.
        self.combined(other, |a, b| Some(a.saturating_add(b)))
            .unwrap_or_else(|| self.clone())
    }

    /// Each count of these and the same of `other` through `op` (an entry these lack as zeros;
    /// entries left with no job dropped), or `None` where `op` gives none.
    fn combined(
        &self,
        other: &QueueCounts,
        op: fn(u64, u64) -> Option<u64>,
    ) -> Option<QueueCounts> {
        let mut out = self.clone();
        for (mine, theirs) in out.states_mut().into_iter().zip(other.states()) {
            *mine = op(*mine, theirs)?;
        }
        let lanes = out
            .waiting_per_lane
            .iter_mut()
            .chain(&mut out.sending_per_lane);
        let their_lanes = other.waiting_per_lane.iter().chain(&other.sending_per_lane);
        for (mine, theirs) in lanes.zip(their_lanes) {
            *mine = op(*mine, *theirs)?;
        }
        for (into, from) in [
            (&mut out.budgets, &other.budgets),
            (&mut out.groups, &other.groups),
        ] {
            for counts in from {
                let i = match into.binary_search_by(|c| c.id.cmp(&counts.id)) {
                    Ok(i) => i,
                    Err(i) => {
                        into.insert(
                            i,
                            Counts {
                                jobs: [0; 7],
                                ..counts.clone()
                            },
                        );
                        i
                    }
                };
                for (mine, theirs) in into[i].jobs.iter_mut().zip(counts.jobs) {
                    *mine = op(*mine, theirs)?;
                }
            }
            into.retain(|c| c.jobs[Counts::TOTAL] > 0);
        }
        Some(out)
    }

    fn states(&self) -> [u64; 7] {
        let c = &self.counts;
        [
            c.queued,
            c.sending,
            c.retry_wait,
            c.done,
            c.failed,
            c.cancelled,
            c.conflict,
        ]
    }

    fn states_mut(&mut self) -> [&mut u64; 7] {
        let c = &mut self.counts;
        [
            &mut c.queued,
            &mut c.sending,
            &mut c.retry_wait,
            &mut c.done,
            &mut c.failed,
            &mut c.cancelled,
            &mut c.conflict,
        ]
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
