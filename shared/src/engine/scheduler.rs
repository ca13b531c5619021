//! The scheduler: which waiting job goes next, and when the next one could.
//!
//! Ordering rules, in the order they apply:
//! 1. Per key, one at a time, in enqueue order: only the oldest unfinished job of a key is
//!    eligible. A waiting interactive job lends its lane to the head of its key's chain, so a
//!    person's edit is not stuck behind a bulk job for the same record longer than that one job.
//! 2. Lanes: interactive, then bulk, then background; a job rises one lane for every
//!    `aging.step` it waits, so nothing starves (see [`crate::config::AgingConfig::bound`]).
//!    While a risen job outranks a fresh one of a higher lane, it takes one start in
//!    [`AGED_TURN_EVERY`], so an aged backlog never shuts people's actions out.
//! 3. Within a lane, oldest first (a 429'd job keeps its place, so it goes first again).
//!    Budgets are independent: a pause on one never holds up another.
//!
//! The scheduler holds only where each eligible job waits: ready (in its budget's
//! [`ReadyLanes`], by effective lane) or delayed (until its backoff ends). Which jobs are
//! eligible, and at what lane, the engine asks the job table (see [`super::jobs`]); whether a
//! budget may start one now, its limiter.

// Fx rather than std's SipHash: the keys are the worker's own, so flooding resistance buys
// nothing, and SipHash's code is larger in the wasm.
use rustc_hash::FxHashMap;

use super::queue::SortedQueue;
use crate::config::AgingConfig;
use crate::job::{Job, JobId, Lane};
use crate::time::Millis;

/// While a job that has aged past its lane's bound outranks a fresh job of a higher lane, it
/// takes one start in this many, and the fresh jobs the rest.
///
/// Why not simply serve the aged job first: aging counts from enqueue, so a bulk backlog ages
/// as a whole, and after one step all 2,000 jobs of a bulk edit would rank with (and, being
/// older, ahead of) every interactive action for the rest of the run. A share keeps both
/// promises: an aged job still starts within a known bound (its aging bound plus this many
/// starts per aged job ahead of it), and a person's action still overtakes the backlog, waiting
/// at most one start more only when people alone keep the budget busy. The count of starts in
/// a row given to fresh jobs resets whenever nothing fresher competes, so sporadic actions
/// during a long aged backlog always go first.
pub const AGED_TURN_EVERY: u32 = 4;

/// A ready job's place in line: its lane after aging, then enqueue time and sequence.
pub(super) type Rank = (i64, Millis, u64);

/// Whose turn a start was, for [`AGED_TURN_EVERY`].
#[derive(Clone, Copy)]
pub(super) enum Turn {
    /// The head of the top lane also ranked first.
    Uncontested,
    /// An aged job outranked it, but the fresh job went.
    Fresh,
    /// The aged job went.
    Aged,
}

/// Ready jobs are ordered by (enqueued at, enqueue sequence): oldest first.
type ReadyKey = (Millis, u64, JobId);

enum Placement {
    Ready {
        budget: String,
        lane: usize,
        key: ReadyKey,
    },
    Delayed((Millis, u64, JobId)),
}

/// One budget's ready jobs, a queue per lane, and whose turn it is between aged and fresh
/// jobs.
#[derive(Default)]
pub(super) struct ReadyLanes {
    lanes: [SortedQueue<ReadyKey>; 3],
    /// Starts in a row that went to a fresh job of a higher lane while an aged job of a lower
    /// lane outranked it (see [`AGED_TURN_EVERY`]).
    aged_passed_over: u32,
}

impl ReadyLanes {
    pub(super) fn has_ready(&self) -> bool {
        self.lanes.iter().any(|r| !r.is_empty())
    }

    /// Empties the lanes (whose turn it is stays).
    pub(super) fn clear(&mut self) {
        self.lanes = Default::default();
    }

    /// The job this budget would start next, with its rank against other budgets' picks and
    /// whose turn it would be: the head of its top lane, or the head that ranks first once
    /// aged when it is the aged jobs' turn.
    pub(super) fn pick(&self, aging: &AgingConfig, now: Millis) -> Option<(Rank, &JobId, Turn)> {
        let heads = Lane::ALL.into_iter().filter_map(|lane| {
            let (since, seq, id) = self.lanes[lane.index()].first()?;
            Some((
                (aged_rank(aging, lane, *since, now), *since, *seq),
                lane,
                id,
            ))
        });
        let top = heads.clone().next()?;
        let aged = heads.min_by_key(|(rank, _, _)| *rank)?;
        let (pick, turn) = if aged.1 == top.1 {
            (aged, Turn::Uncontested)
        } else if self.aged_passed_over + 1 < AGED_TURN_EVERY {
            (top, Turn::Fresh)
        } else {
            (aged, Turn::Aged)
        };
        let (rank, _, id) = pick;
        Some((rank, id, turn))
    }

    /// Up to `per_lane` ready jobs of each lane after its head, top lane first: the jobs that
    /// may start in place of a head that waits for room in a resource (see
    /// `Engine::backfill`).
    pub(super) fn behind_heads(&self, per_lane: usize) -> impl Iterator<Item = &JobId> {
        self.lanes
            .iter()
            .flat_map(move |lane| lane.iter().skip(1).take(per_lane))
            .map(|(_, _, id)| id)
    }

    /// Up to `per_lane` ready jobs of each lane from its head, top lane first, each with since
    /// when it is ready: what a batch gathers its members from (see `Engine::batch_members`).
    pub(super) fn in_lane_order(&self, per_lane: usize) -> impl Iterator<Item = (&JobId, Millis)> {
        self.lanes
            .iter()
            .flat_map(move |lane| lane.iter().take(per_lane))
            .map(|(since, _, id)| (id, *since))
    }

    /// This budget's pick went, on `turn`.
    pub(super) fn took(&mut self, turn: Turn) {
        self.aged_passed_over = match turn {
            Turn::Fresh => self.aged_passed_over + 1,
            Turn::Uncontested | Turn::Aged => 0,
        };
    }
}

/// A lane's rank after aging: one lane up for every aging step waited since `since`.
fn aged_rank(aging: &AgingConfig, lane: Lane, since: Millis, now: Millis) -> i64 {
    match aging.step(lane) {
        None => lane.rank(),
        Some(step) => lane.rank() - (now.saturating_sub(since) / step) as i64,
    }
}

/// Where each eligible job waits, and the jobs delayed until their backoff ends.
#[derive(Default)]
pub(super) struct Scheduler {
    placed: FxHashMap<JobId, Placement>,
    delayed: SortedQueue<(Millis, u64, JobId)>,
}

impl Scheduler {
    /// Takes a job out of wherever it waits; `lanes_of` finds a budget's ready lanes.
    pub(super) fn unplace<'a>(
        &mut self,
        id: &JobId,
        lanes_of: impl FnOnce(&str) -> Option<&'a mut ReadyLanes>,
    ) {
        match self.placed.remove(id) {
            Some(Placement::Ready { budget, lane, key }) => {
                if let Some(ready) = lanes_of(&budget) {
                    ready.lanes[lane].remove(&key);
                }
            }
            Some(Placement::Delayed(key)) => {
                self.delayed.remove(&key);
            }
            None => {}
        }
    }

    /// The job waits until `job.not_before`.
    pub(super) fn delay(&mut self, job: &Job) {
        let key = (job.not_before, job.seq, job.id.clone());
        self.delayed.insert(key.clone());
        self.placed.insert(job.id.clone(), Placement::Delayed(key));
    }

    /// The job may go now, at `lane`, in its budget's `ready` lanes.
    pub(super) fn make_ready(&mut self, job: &Job, lane: Lane, ready: &mut ReadyLanes) {
        let lane = lane.index();
        let key = (job.enqueued_at, job.seq, job.id.clone());
        ready.lanes[lane].insert(key.clone());
        let budget = job.budget.clone();
        self.placed
            .insert(job.id.clone(), Placement::Ready { budget, lane, key });
    }

    /// Forgets every placement (the ready lanes are emptied by their owners).
    pub(super) fn clear(&mut self) {
        self.placed.clear();
        self.delayed.clear();
    }

    /// The next delayed job whose backoff has ended by `now`, taken out of the scheduler to be
    /// placed again; call until `None`.
    pub(super) fn pop_due(&mut self, now: Millis) -> Option<JobId> {
        if self.delayed.first().is_none_or(|first| first.0 > now) {
            return None;
        }
        let first = self.delayed.pop_first()?;
        self.placed.remove(&first.2);
        Some(first.2)
    }

    /// Whether any job waits to be started.
    pub(super) fn has_waiting(&self) -> bool {
        !self.placed.is_empty()
    }

    /// When the first backoff ends.
    pub(super) fn next_due(&self) -> Option<Millis> {
        self.delayed.first().map(|d| d.0)
    }
}
