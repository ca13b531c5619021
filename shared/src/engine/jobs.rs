//! The job table: every job the engine knows, and the indexes over it that decide what a new
//! action joins: the per-key chains (one unfinished job of a key at a time, in enqueue order),
//! the index of identical waiting requests (to fold a repeated one into the first), and the
//! finished jobs in the order they are to be forgotten.
//!
//! Why the indexes live with the table: each is only right if every change to a job's state
//! updates it, and keeping them in one place with the jobs is what makes that checkable. The
//! table decides nothing about when a job goes; the scheduler does (see [`super::scheduler`]).

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

// Fx rather than std's SipHash: the keys are the worker's own, so flooding resistance buys
// nothing, and SipHash's code is larger in the wasm.
use rustc_hash::{FxHashMap, FxHasher};

use super::queue::SortedQueue;
use super::tally::{Counted, QueueCounts};
use crate::job::{IllegalTransition, Job, JobId, JobKind, JobState, Lane};
use crate::time::{DurationMs, Millis};

#[derive(Default)]
pub(super) struct JobTable {
    jobs: FxHashMap<JobId, Job>,
    /// Unfinished jobs per ordering key, in enqueue order.
    chains: FxHashMap<String, VecDeque<JobId>>,
    /// Waiting idempotent jobs by a hash of what they send, to fold identical ones.
    /// Keyed by the hash's digits and with a `VecDeque`, the shape of [`JobTable::chains`]:
    /// one hash map type less in the wasm.
    identical: FxHashMap<String, VecDeque<JobId>>,
    /// Done and cancelled jobs by finish time, to forget them after the retention time.
    /// (finish time, 0, id): shaped like the ready keys so that both share one queue type in
    /// the wasm.
    expiring: SortedQueue<(Millis, u64, JobId)>,
    next_seq: u64,
    /// The status counts of `jobs`, kept with every change (see [`QueueCounts`]).
    tally: QueueCounts,
}

impl JobTable {
    pub(super) fn get(&self, id: &str) -> Option<&Job> {
        self.jobs.get(id)
    }

    /// A job to change in anything but its state and lane, which the counts follow: its state
    /// changes through [`JobTable::transition`].
    pub(super) fn get_mut(&mut self, id: &str) -> Option<&mut Job> {
        self.jobs.get_mut(id)
    }

    /// Moves a job to `to` if that is a legal step (see [`Job::transition`]), and counts it
    /// there; the job, for the rest of the change. `None`: no such job.
    pub(super) fn transition(
        &mut self,
        id: &str,
        to: JobState,
    ) -> Option<Result<&mut Job, IllegalTransition>> {
        let job = self.jobs.get_mut(id)?;
        let before = Counted::of(job);
        Some(job.transition(to).map(|()| {
            self.tally.changed(job, before);
            job
        }))
    }

    /// The status counts of every job in the table.
    pub(super) fn tally(&self) -> &QueueCounts {
        &self.tally
    }

    pub(super) fn contains(&self, id: &str) -> bool {
        self.jobs.contains_key(id)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values()
    }

    /// Forgets a finished job. Finished jobs are in no chain and match no waiting one, so
    /// only the table itself changes.
    pub(super) fn forget(&mut self, id: &str) {
        if let Some(job) = self.jobs.remove(id) {
            self.tally.remove(&job);
        }
    }

    /// The enqueue sequence number for a new job.
    pub(super) fn next_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// A restored job took `seq`: later jobs are numbered after it.
    pub(super) fn restored_seq(&mut self, seq: u64) {
        self.next_seq = self.next_seq.max(seq + 1);
    }

    /// Makes room for `additional` more jobs at once: admitted one by one, a batch of 10,000
    /// grew the map a dozen times, rehashing every job each time (issue 40: `enqueue_many` of
    /// 10,000 creates, natively, 20.6 -> 12.2 ms; 15% of the worker's engine part, profiled).
    pub(super) fn reserve(&mut self, additional: usize) {
        self.jobs.reserve(additional);
    }

    /// Puts a job into the table and its indexes (not into the scheduler's queues).
    pub(super) fn admit(&mut self, job: Job) {
        let id = job.id.clone();
        if !job.state.is_terminal() {
            if let Some(key) = &job.key {
                self.chains
                    .entry(key.clone())
                    .or_default()
                    .push_back(id.clone());
            }
        }
        if job.state.is_waiting() && job.is_idempotent_method() {
            self.identical
                .entry(fingerprint(&job))
                .or_default()
                .push_back(id.clone());
        }
        if matches!(job.state, JobState::Done | JobState::Cancelled) {
            self.expiring
                .insert((job.finished_at.unwrap_or(job.enqueued_at), 0, id.clone()));
        }
        self.tally.add(&job);
        if let Some(replaced) = self.jobs.insert(id, job) {
            self.tally.remove(&replaced);
        }
    }

    /// Whether the job may go as far as its key is concerned: it has no key, or it is the
    /// oldest unfinished job of its key.
    pub(super) fn heads_its_chain(&self, job: &Job) -> bool {
        // Looked up by `&String`, as every other lookup in `chains`: one lookup function for
        // the map in the wasm.
        job.key
            .as_ref()
            .is_none_or(|key| self.chains.get(key).and_then(|c| c.front()) == Some(&job.id))
    }

    /// The head of the chain of `id`'s key, if it has one.
    pub(super) fn head_of(&self, id: &str) -> Option<JobId> {
        self.jobs
            .get(id)
            .and_then(|j| j.key.as_ref())
            .and_then(|k| self.chains.get(k))
            .and_then(|c| c.front().cloned())
    }

    /// A job of `key` runs again (a retry): it goes to the end of the key's chain, but ahead
    /// of any job there that waits for it (behind them it would wait for them, and they for
    /// it).
    pub(super) fn join_chain(&mut self, key: String, id: JobId) {
        let jobs = &self.jobs;
        let chain = self.chains.entry(key).or_default();
        let waiting = chain
            .iter()
            .position(|d| jobs.get(d).is_some_and(|j| j.after.contains(&id)));
        chain.push_back(id);
        if let Some(pos) = waiting {
            for i in (pos + 1..chain.len()).rev() {
                chain.swap(i, i - 1);
            }
        }
    }

    /// Takes a finished job out of its key's chain. Returns the chain's new head, which may go
    /// now (`None`: the key has no unfinished job left).
    pub(super) fn leave_chain(&mut self, id: &JobId, key: Option<String>) -> Option<JobId> {
        let key = key?;
        let chain = self.chains.get_mut(&key)?;
        if let Some(pos) = chain.iter().position(|x| x == id) {
            // Swapped to the front and popped: the same order for the rest as `remove`, whose
            // ring-buffer shifting is about a kilobyte of wasm per element type.
            for i in (1..=pos).rev() {
                chain.swap(i, i - 1);
            }
            chain.pop_front();
        }
        match chain.front().cloned() {
            Some(head) => Some(head),
            None => {
                self.chains.remove(&key);
                None
            }
        }
    }

    /// The most urgent lane among the waiting jobs of a key: the head runs at that priority.
    pub(super) fn effective_lane(&self, job: &Job) -> Lane {
        let Some(chain) = job.key.as_ref().and_then(|k| self.chains.get(k)) else {
            return job.lane;
        };
        chain
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .filter(|j| j.state.is_waiting())
            .map(|j| j.lane)
            .min()
            .unwrap_or(job.lane)
    }

    /// A finished job (done or cancelled) is forgotten once the retention time after `at` is
    /// over.
    pub(super) fn expire_from(&mut self, at: Millis, id: JobId) {
        self.expiring.insert((at, 0, id));
    }

    /// Forgets the next job whose retention time is over by `now`, and returns its id; call
    /// until `None`.
    pub(super) fn pop_expired(&mut self, now: Millis, retention: DurationMs) -> Option<JobId> {
        while self
            .expiring
            .first()
            .is_some_and(|first| first.0.saturating_add(retention) <= now)
        {
            let first = self.expiring.pop_first()?;
            if self
                .jobs
                .get(&first.2)
                .is_some_and(|j| matches!(j.state, JobState::Done | JobState::Cancelled))
            {
                self.forget(&first.2);
                return Some(first.2);
            }
        }
        None
    }

    /// For a delete whose record's create has not been sent: that create and every job queued
    /// for the record since, which need not be sent either. `None` when the delete cannot
    /// cancel out (no such create, or one of them has started).
    pub(super) fn cancelled_out_by(&self, delete: &Job) -> Option<Vec<JobId>> {
        if delete.kind != JobKind::Delete {
            return None;
        }
        let chain = self.chains.get(delete.key.as_ref()?)?;
        let create_pos = chain.iter().rposition(|id| {
            self.jobs
                .get(id)
                .is_some_and(|j| j.kind == JobKind::Create && j.budget == delete.budget)
        })?;
        let doomed: Vec<JobId> = chain.iter().skip(create_pos).cloned().collect();
        let untouched = doomed.iter().all(|id| {
            self.jobs
                .get(id)
                .is_some_and(|j| j.state == JobState::Queued && j.started_at.is_none())
        });
        untouched.then_some(doomed)
    }

    /// Folds a patch into the newest unsent patch of its key, or an idempotent request into an
    /// identical waiting one. Returns the id of the job it was folded into.
    pub(super) fn fold(&mut self, job: &Job) -> Option<JobId> {
        // A job that waits for another's answer sends what that answer makes of it: nothing
        // is known to be the same request until then.
        if !job.after.is_empty() {
            return None;
        }
        let newest_of_key = job
            .key
            .as_ref()
            .and_then(|k| self.chains.get(k))
            .and_then(|c| c.back().cloned());
        if job.kind == JobKind::Patch {
            if let Some(target) = newest_of_key.clone() {
                let mergeable = self.jobs.get(&target).is_some_and(|t| {
                    t.kind == JobKind::Patch
                        && t.state == JobState::Queued
                        && t.started_at.is_none()
                        && t.attempts == 0
                        && t.after.is_empty()
                        && t.budget == job.budget
                        && t.method == job.method
                        && t.url == job.url
                        && t.options == job.options
                });
                if mergeable {
                    self.merge_patch(&target, job);
                    return Some(target);
                }
            }
        }
        if job.is_idempotent_method() && job.kind != JobKind::Create {
            let fp = fingerprint(job);
            let candidates = self.identical.get(&fp)?;
            let target = candidates.iter().find(|id| {
                self.jobs.get(*id).is_some_and(|t| {
                    t.state.is_waiting()
                        && t.after.is_empty()
                        && t.budget == job.budget
                        && t.method == job.method
                        && t.url == job.url
                        && t.body == job.body
                        && t.headers == job.headers
                        && t.options == job.options
                        && t.key == job.key
                        // Never reorder a key: only the newest job of the key can absorb it.
                        && (t.key.is_none() || newest_of_key.as_ref() == Some(&t.id))
                })
            })?;
            let target = target.clone();
            if let Some(t) = self.jobs.get_mut(&target) {
                let before = Counted::of(t);
                t.lane = t.lane.min(job.lane);
                t.coalesced += 1;
                t.folded.push(job.id.clone());
                self.tally.changed(t, before);
            }
            return Some(target);
        }
        None
    }

    fn merge_patch(&mut self, target: &JobId, later: &Job) {
        if let Some(t) = self.jobs.get_mut(target) {
            let before = Counted::of(t);
            t.body = merge_bodies(t.body.take(), later.body.clone());
            for (name, value) in &later.headers {
                match t
                    .headers
                    .iter_mut()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                {
                    Some(existing) => existing.1 = value.clone(),
                    None => t.headers.push((name.clone(), value.clone())),
                }
            }
            t.lane = t.lane.min(later.lane);
            t.coalesced += 1 + later.coalesced;
            t.folded.push(later.id.clone());
            self.tally.changed(t, before);
        }
    }
}

/// What identifies "the same request" for folding identical idempotent jobs: a hash, in
/// decimal digits (see [`JobTable::identical`]).
fn fingerprint(job: &Job) -> String {
    let mut h = FxHasher::default();
    (
        &job.budget,
        &job.method,
        &job.url,
        &job.body,
        &job.headers,
        &job.key,
    )
        .hash(&mut h);
    h.finish().to_string()
}

/// Later patch fields win. Both JSON objects: merged field by field; otherwise the later body
/// replaces the earlier one (it is the newer statement of what the record should be).
fn merge_bodies(earlier: Option<String>, later: Option<String>) -> Option<String> {
    let (Some(a), Some(b)) = (&earlier, &later) else {
        return later.or(earlier);
    };
    use crate::json::{parse, to_string, Json};
    match (parse(a), parse(b)) {
        (Ok(Json::Obj(mut base)), Ok(Json::Obj(update))) => {
            // Written as a `serde_json::Value` map writes it (sorted, last duplicate wins).
            base.extend(update);
            Some(to_string(&Json::Obj(base)))
        }
        _ => later,
    }
}
