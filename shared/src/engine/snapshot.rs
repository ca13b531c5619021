//! The status: the counters kept as jobs start and finish (queue waits, attempts per
//! finished job) and the snapshot every tab shows.
//!
//! Why the counters are kept here rather than derived: the waits of started jobs and the
//! attempts of forgotten ones are gone from the job table by the time a snapshot is taken.

use std::collections::VecDeque;

use super::in_flight::Budget;
use super::jobs::JobTable;
use crate::id_map::IdMap;
use crate::job::{JobState, Lane};
use crate::status::{
    capacity_warning, percentile, BudgetStatus, GroupStatus, LaneStatus, StateCounts, Status,
};
use crate::time::{DurationMs, Millis};

/// Queue waits remembered per lane for the p50/p95 figures.
const WAIT_SAMPLES: usize = 1_000;

#[derive(Default)]
pub(super) struct StatusCounters {
    /// The last [`WAIT_SAMPLES`] queue waits per lane, oldest first.
    waits: [VecDeque<DurationMs>; 3],
    /// Jobs done or failed, and the attempts they took.
    finished_jobs: u64,
    finished_attempts: u64,
}

impl StatusCounters {
    /// A job of `lane` started for the first time, after waiting `wait` since its enqueue.
    pub(super) fn waited(&mut self, lane: Lane, wait: DurationMs) {
        let samples = &mut self.waits[lane.index()];
        if samples.len() == WAIT_SAMPLES {
            samples.pop_front();
        }
        samples.push_back(wait);
    }

    /// A job ended done or failed after `attempts` attempts.
    pub(super) fn finished(&mut self, attempts: u32) {
        self.finished_jobs += 1;
        self.finished_attempts += attempts as u64;
    }

    /// A status snapshot for every tab: counts per state, group, budget and lane, rescanned
    /// from `jobs`, with what they imply (each budget's ETA, capacity warnings).
    pub(super) fn snapshot(
        &self,
        jobs: &JobTable,
        budgets: &IdMap<Budget>,
        offline: bool,
        now: Millis,
    ) -> Status {
        let mut counts = StateCounts::default();
        let mut pending_per_budget: Vec<(&str, u64)> = Vec::new();
        // Groups in id order, kept sorted as they are found and found by binary search: a map
        // keyed by id would be a B-tree in the wasm, and collecting a group id per job to sort
        // afterwards is too much for a snapshot of a million jobs (there are few groups).
        let mut group_ids: Vec<String> = Vec::new();
        let mut last: Option<&str> = None;
        for g in jobs.iter().filter_map(|j| j.group_id.as_deref()) {
            if last != Some(g) {
                if let Err(at) = group_ids.binary_search_by(|known| known.as_str().cmp(g)) {
                    group_ids.insert(at, g.to_string());
                }
                last = Some(g);
            }
        }
        // Plain loops in this function: each mapped `collect` is several generic functions in
        // the wasm.
        let mut groups: Vec<GroupStatus> = Vec::with_capacity(group_ids.len());
        for id in group_ids {
            groups.push(GroupStatus {
                id,
                total: 0,
                done: 0,
                failed: 0,
                cancelled: 0,
                pending: 0,
                warning: None,
            });
        }
        let mut waiting_per_lane = [0u64; 3];
        let mut orphans: Vec<(&str, u64)> = Vec::new();
        for job in jobs.iter() {
            match job.state {
                JobState::Queued => counts.queued += 1,
                JobState::Sending => counts.sending += 1,
                JobState::RetryWait => counts.retry_wait += 1,
                JobState::Done => counts.done += 1,
                JobState::Failed => counts.failed += 1,
                JobState::Cancelled => counts.cancelled += 1,
            }
            let pending = matches!(
                job.state,
                JobState::Queued | JobState::Sending | JobState::RetryWait
            );
            if pending {
                count_in(&mut pending_per_budget, &job.budget.as_str());
                if !budgets.contains_key(&job.budget) {
                    count_in(&mut orphans, &job.budget.as_str());
                }
            }
            if job.state.is_waiting() {
                waiting_per_lane[job.lane.index()] += 1;
            }
            let group = job
                .group_id
                .as_deref()
                .and_then(|g| groups.binary_search_by(|s| s.id.as_str().cmp(g)).ok());
            if let Some(i) = group {
                let entry = &mut groups[i];
                entry.total += 1;
                match job.state {
                    JobState::Done => entry.done += 1,
                    JobState::Failed => entry.failed += 1,
                    JobState::Cancelled => entry.cancelled += 1,
                    _ => entry.pending += 1,
                }
            }
        }
        let mut budget_statuses = Vec::new();
        let mut eta_all: Option<DurationMs> = None;
        for (name, b) in budgets.iter() {
            let pending = pending_per_budget
                .binary_search_by(|(n, _)| (*n).cmp(name.as_str()))
                .map_or(0, |i| pending_per_budget[i].1);
            let blocked = b.state.blocked_until(now);
            let eta_ms = if b.state.trouble.is_some() {
                None
            } else if pending == 0 {
                Some(0)
            } else {
                let mut rate = b.state.limiter.sustained_rate_per_ms();
                if let Some(latency) = b.latency_ms.filter(|l| *l > 0.0) {
                    rate = rate.min(b.config.concurrency as f64 / latency);
                }
                let wait = blocked.map_or(0, |t| t - now);
                (rate > 0.0).then(|| wait + (pending as f64 / rate).ceil() as u64)
            };
            if let Some(e) = eta_ms {
                eta_all = Some(eta_all.map_or(e, |a| a.max(e)));
            }
            let tightest = b.state.limiter.windows().iter().min_by(|x, y| {
                let rx = x.limit as f64 / x.length_ms as f64;
                let ry = y.limit as f64 / y.length_ms as f64;
                rx.total_cmp(&ry)
            });
            let achieved_share = tightest.map_or(0.0, |w| {
                b.state.limiter.starts_within(now, w.length_ms) as f64 / w.limit as f64
            });
            let c = &b.state.counters;
            let server = b.state.server.as_ref().filter(|s| s.reset_at > now);
            budget_statuses.push(BudgetStatus {
                name: name.clone(),
                windows: b.state.limiter.windows().to_vec(),
                concurrency: b.config.concurrency,
                in_flight: b.in_flight.len() as u64,
                pending,
                paused_until: b.state.paused_until.filter(|&t| t > now).or_else(|| {
                    b.state
                        .server
                        .as_ref()
                        .filter(|s| s.remaining == 0 && s.reset_at > now)
                        .map(|s| s.reset_at)
                }),
                pause_reason: if b.state.paused_until.is_some_and(|t| t > now) {
                    b.state.pause_reason.clone()
                } else if server.is_some_and(|s| s.remaining == 0) {
                    Some("the server reports no requests left until its limit resets".into())
                } else {
                    None
                },
                trouble: b.state.trouble.clone(),
                server_remaining: server.map(|s| s.remaining),
                server_reset_at: server.map(|s| s.reset_at),
                eta_ms,
                requests: c.requests,
                rate_limited: c.rate_limited,
                retries: c.retries,
                rate_limited_per_1000: if c.requests == 0 {
                    0.0
                } else {
                    c.rate_limited as f64 * 1000.0 / c.requests as f64
                },
                achieved_share,
            });
        }
        let mut warnings: Vec<String> = Vec::new();
        for (budget, n) in &orphans {
            warnings.push(format!(
                "{n} jobs wait for budget '{budget}', which is not configured"
            ));
        }
        for g in &mut groups {
            if g.pending > 0 {
                let budget = jobs
                    .iter()
                    .find(|j| j.group_id.as_deref() == Some(g.id.as_str()))
                    .and_then(|j| budgets.get(&j.budget));
                if let Some(b) = budget {
                    g.warning = capacity_warning(g.pending, b.state.limiter.windows());
                }
            }
        }
        for g in &groups {
            if let Some(w) = &g.warning {
                warnings.push(w.clone());
            }
        }
        let mut lanes = Vec::with_capacity(Lane::ALL.len());
        for lane in Lane::ALL {
            let samples: Vec<DurationMs> = self.waits[lane.index()].iter().copied().collect();
            lanes.push(LaneStatus {
                lane,
                waiting: waiting_per_lane[lane.index()],
                wait_p50_ms: percentile(&samples, 50.0),
                wait_p95_ms: percentile(&samples, 95.0),
            });
        }
        Status {
            now,
            counts,
            budgets: budget_statuses,
            groups,
            lanes,
            eta_ms: eta_all,
            attempts_per_job: if self.finished_jobs == 0 {
                0.0
            } else {
                self.finished_attempts as f64 / self.finished_jobs as f64
            },
            offline,
            warnings,
        }
    }
}

/// Adds one to `key`'s count, keeping `counts` in key order.
pub(super) fn count_in<K: Ord + Clone>(counts: &mut Vec<(K, u64)>, key: &K) {
    match counts.binary_search_by(|(k, _)| k.cmp(key)) {
        Ok(i) => counts[i].1 += 1,
        Err(i) => counts.insert(i, (key.clone(), 1)),
    }
}
