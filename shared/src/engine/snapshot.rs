//! The status: the counters kept as jobs start and finish (queue waits, attempts per
//! finished job) and the snapshot every tab shows.
//!
//! Why the counters are kept here rather than derived: the waits of started jobs and the
//! attempts of forgotten ones are gone from the job table by the time a snapshot is taken.

use std::collections::VecDeque;

use super::in_flight::Budget;
use super::tally::QueueCounts;
use crate::id_map::IdMap;
use crate::job::Lane;
use crate::resources::ResourceStatus;
use crate::status::{
    capacity_warning, concurrency_note, percentile, BudgetStatus, GroupStatus, LaneStatus, Status,
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

    /// A status snapshot for every tab: counts per state, group, budget and lane (`tally`,
    /// the whole queue's: see `Engine::queue_counts`), with what they imply (each budget's
    /// ETA, capacity warnings).
    pub(super) fn snapshot(
        &self,
        tally: &QueueCounts,
        budgets: &IdMap<Budget>,
        offline: bool,
        now: Millis,
    ) -> Status {
        let mut budget_statuses = Vec::new();
        let mut eta_all: Option<DurationMs> = None;
        for (name, b) in budgets.iter() {
            let pending = tally
                .budgets
                .binary_search_by(|c| c.id.cmp(name))
                .map_or(0, |i| tally.budgets[i].pending());
            let blocked = b.state.blocked_until(now);
            let eta_ms = if b.state.trouble.is_some() || b.state.credentials_needed.is_some() {
                None
            } else if pending == 0 {
                Some(0)
            } else {
                let mut rate = b.state.limiter.sustained_rate_per_ms();
                if let Some(latency) = b.latency_ms.filter(|l| *l > 0.0) {
                    let allowed = b.concurrency_cap.allowed(b.config.concurrency);
                    rate = rate.min(allowed as f64 / latency);
                }
                let wait = blocked.map_or(0, |t| t - now);
                // Requests, not jobs: a batch carries many (see `batching`).
                let requests = pending as f64 / b.jobs_per_start.unwrap_or(1.0).max(1.0);
                (rate > 0.0).then(|| wait + (requests / rate).ceil() as u64)
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
            let resources = b.state.resources.statuses(now);
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
                credentials_needed: b.state.credentials_needed.clone(),
                overdue: b.overdue_note(now),
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
                tightest: tightest_of(achieved_share, &resources),
                resources,
                achieved_share,
            });
        }
        let mut warnings: Vec<String> = Vec::new();
        let mut notes: Vec<String> = Vec::new();
        for (name, b) in budgets.iter() {
            // While a server's concurrency refusals hold the cap down, that, not the
            // configuration, is what limits the pace: say so instead of suggesting more.
            if let Some(note) = b.concurrency_cap.note(name, b.config.concurrency) {
                notes.push(note);
                continue;
            }
            let busy = b.in_flight.len() as u64 >= u64::from(b.config.concurrency);
            if let (true, Some(latency)) = (busy, b.latency_ms) {
                let limit = b.state.limiter.sustained_rate_per_ms();
                notes.extend(concurrency_note(name, b.config.concurrency, latency, limit));
            }
        }
        for b in &tally.budgets {
            if b.pending() > 0 && !budgets.contains_key(&b.id) {
                warnings.push(format!(
                    "{} jobs wait for budget '{}', which is not configured",
                    b.pending(),
                    b.id
                ));
            }
        }
        let mut groups: Vec<GroupStatus> = Vec::with_capacity(tally.groups.len());
        for g in &tally.groups {
            let mut status = g.group_status();
            if status.pending > 0 {
                if let Some(b) = budgets.get(&g.budget) {
                    status.warning = capacity_warning(status.pending, b.state.limiter.windows());
                }
                status.eta_ms = budget_statuses
                    .iter()
                    .find(|b| b.name == g.budget)
                    .and_then(|b| b.eta_ms);
            } else {
                status.eta_ms = Some(0);
            }
            if let Some(note) = &status.warning {
                notes.push(note.clone());
            }
            groups.push(status);
        }
        let mut lanes = Vec::with_capacity(Lane::ALL.len());
        for lane in Lane::ALL {
            let samples: Vec<DurationMs> = self.waits[lane.index()].iter().copied().collect();
            lanes.push(LaneStatus {
                lane,
                waiting: tally.waiting_per_lane[lane.index()],
                wait_p50_ms: percentile(&samples, 50.0),
                wait_p95_ms: percentile(&samples, 95.0),
            });
        }
        Status {
            now,
            counts: tally.counts.clone(),
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
            notes,
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

/// Which of a budget's resources is closest to its limit: `requests` (their share of the
/// tightest window) or a resource (its spent share); `None` without resources.
fn tightest_of(requests_share: f64, resources: &[ResourceStatus]) -> Option<String> {
    let (name, share) = resources
        .iter()
        .map(|r| (r.name.as_str(), r.used as f64 / r.limit.max(1) as f64))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    Some(
        if requests_share >= share {
            "requests"
        } else {
            name
        }
        .to_string(),
    )
}
