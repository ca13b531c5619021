//! The figures a run ends with, and how they are reckoned from what the worker and the server
//! kept.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::server::StrictServer;
use crate::config::Window;
use crate::job::{Job, JobId, JobState, Lane};
use crate::sim_tokens::TokenReport;
use crate::time::{DurationMs, Millis};

/// What the server and the engine did, for assertions and the `simulate` report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub jobs: u64,
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Jobs not in a terminal state when the run ended.
    pub unfinished: u64,
    /// Jobs that were enqueued but are nowhere any more (must be 0). A finished job the
    /// engine forgot after its retention time is not lost (see `forgotten`).
    pub lost: u64,
    /// Finished jobs the engine forgot after its retention time (`EngineConfig::retention_ms`);
    /// they are counted in `done`, `failed` and `cancelled` by their last saved state.
    #[serde(default)]
    pub forgotten: u64,
    pub requests: u64,
    pub rate_limited: u64,
    pub rate_limited_per_1000: f64,
    /// The most of our arrivals the server counted in any window of its length (the first
    /// window's; see `per_window` for all of them). A server counting fixed windows: in any
    /// one of them.
    pub max_arrivals_in_window: u32,
    /// The most of our starts in any window of the limit's length (fixed: in any one).
    pub max_starts_in_window: u32,
    /// The same two figures for every window the server enforces, in `ServerModel::windows`
    /// order.
    #[serde(default)]
    pub per_window: Vec<WindowPeak>,
    /// Requests of other callers the server counted against the quota.
    #[serde(default)]
    pub other_arrivals: u64,
    /// Extra records: creates the server applied more than once (must be 0).
    pub duplicate_creates: u64,
    /// Repeated creates the server's idempotency store recognised and did not apply again.
    pub deduplicated_retries: u64,
    pub finished_at_ms: Millis,
    /// Time the jobs would take at exactly the limit (all windows together, see
    /// [`ideal_time_windows`]).
    pub ideal_ms: DurationMs,
    /// From our first start to the last job's finish.
    #[serde(default)]
    pub busy_ms: DurationMs,
    /// Achieved rate over the limit while work was waiting. With several windows, where no one
    /// rate is "the limit": the ideal time over the time taken.
    pub share_of_limit: f64,
    pub rebuilds: u64,
    /// Start times of every request we sent, for property checks.
    #[serde(skip)]
    pub starts: Vec<Millis>,
    /// Ordering keys in the order their jobs were first applied by the server.
    #[serde(skip)]
    pub applied_per_key: BTreeMap<String, Vec<u64>>,
    /// What the server counted of tokens, when it counts them (`ServerModel::tokens_per_minute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokenReport>,
    /// Every job at the end.
    #[serde(skip)]
    pub final_jobs: Vec<Job>,
    /// (enqueued, first start, lane) for each job that started.
    #[serde(skip)]
    pub waits: Vec<(Millis, Millis, Lane)>,
}

/// The most of our arrivals (and starts) in any placement of one of the server's windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowPeak {
    pub limit: u32,
    pub length_ms: DurationMs,
    /// Arrivals the server counted: never above `limit`, since it refuses the rest.
    pub max_arrivals: u32,
    /// Arrivals including the ones it refused with a 429: what a lenient server would have
    /// counted, so this is the figure that shows whether we stayed under the window.
    pub max_attempts: u32,
    pub max_starts: u32,
}

impl Report {
    /// The figures as one line of JSON (without the per-request detail), for messages.
    pub fn summary(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// What became of every job enqueued: counted by its state in the engine, or by its last
    /// saved state when the engine forgot it, and as lost when it is in neither. `now`: when
    /// the run ended, the finish if no job finished.
    pub(super) fn count_jobs(
        &mut self,
        jobs: &[Job],
        forgotten: &HashMap<JobId, Job>,
        enqueued: &[JobId],
        now: Millis,
    ) {
        let present: HashSet<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        let forgotten: Vec<&Job> = forgotten
            .values()
            .filter(|j| !present.contains(j.id.as_str()))
            .collect();
        let forgotten_ids: HashSet<&str> = forgotten.iter().map(|j| j.id.as_str()).collect();
        self.lost = enqueued
            .iter()
            .filter(|id| !present.contains(id.as_str()) && !forgotten_ids.contains(id.as_str()))
            .count() as u64;
        self.forgotten = forgotten.len() as u64;
        self.jobs = enqueued.len() as u64;
        for j in jobs.iter().chain(forgotten.iter().copied()) {
            match j.state {
                JobState::Done => self.done += 1,
                JobState::Failed => self.failed += 1,
                JobState::Cancelled => self.cancelled += 1,
                _ => self.unfinished += 1,
            }
        }
        self.finished_at_ms = jobs
            .iter()
            .chain(forgotten.iter().copied())
            .filter_map(|j| j.finished_at)
            .max()
            .unwrap_or(now);
    }

    /// What the server counted, and how close to the limit the run went while busy: from our
    /// first start (`busy_from`) to the last job's finish (after `count_jobs`).
    pub(super) fn measure(&mut self, server: &StrictServer, busy_from: Option<Millis>) {
        self.duplicate_creates = server.duplicate_creates();
        self.deduplicated_retries = server.deduplicated_retries();
        self.rate_limited_per_1000 = if self.requests == 0 {
            0.0
        } else {
            self.rate_limited as f64 * 1000.0 / self.requests as f64
        };
        let windows = server.windows();
        self.per_window = server.peaks(&self.starts);
        self.max_arrivals_in_window = self.per_window[0].max_arrivals;
        self.max_starts_in_window = self.per_window[0].max_starts;
        let accepted = self.requests.saturating_sub(self.rate_limited);
        self.ideal_ms = ideal_time_windows(accepted, windows);
        let busy = busy_from.map_or(0, |b| self.finished_at_ms.saturating_sub(b));
        self.busy_ms = busy;
        self.share_of_limit = if busy == 0 {
            0.0
        } else if windows.len() == 1 {
            let rate = accepted as f64 / busy as f64;
            rate / (windows[0].limit as f64 / windows[0].length_ms as f64)
        } else {
            self.ideal_ms as f64 / busy as f64
        };
        self.tokens = server.token_report(busy);
    }
}

/// The most timestamps in any half-open window `[t, t + length)`.
pub fn max_in_window(times: &[Millis], length: DurationMs) -> u32 {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..sorted.len() {
        while sorted[hi] >= sorted[lo] + length {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best as u32
}

/// Time from the first to the last of `n` starts at exactly the limit's rate.
pub fn ideal_time(n: u64, w: Window) -> DurationMs {
    n.saturating_sub(1) * w.length_ms / u64::from(w.limit.max(1))
}

/// Time from the first to the last of `n` starts as early as all `windows` together allow,
/// paced evenly over the shortest one as the limiter paces: each start comes one pacing
/// interval after the one before, and no sooner than a window's length after the start
/// `limit` places before it. With 10 per second and 3,000 per hour, 4,000 starts take 300 s
/// for the first 3,000, wait for the hour to pass the first start, and take 100 s more.
pub fn ideal_time_windows(n: u64, windows: &[Window]) -> DurationMs {
    match windows {
        [] => 0,
        [w] => ideal_time(n, *w),
        _ => {
            let Some(shortest) = windows.iter().min_by_key(|w| w.length_ms) else {
                return 0;
            };
            let interval = shortest.length_ms as f64 / f64::from(shortest.limit.max(1));
            let mut starts: Vec<f64> = Vec::with_capacity(n as usize);
            for i in 0..n as usize {
                let mut at = starts.last().map_or(0.0, |&t| t + interval);
                for w in windows {
                    let limit = w.limit.max(1) as usize;
                    if i >= limit {
                        at = at.max(starts[i - limit] + w.length_ms as f64);
                    }
                }
                starts.push(at);
            }
            starts.last().map_or(0, |&t| t.floor() as DurationMs)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ideal_with_several_windows_waits_for_the_longest() {
        let w = |limit, length_ms| Window { limit, length_ms };
        // One window: the old formula.
        assert_eq!(ideal_time_windows(2_000, &[w(100, 1_000)]), 19_990);
        // 10/s alone binds until the hourly quota runs out at 3,000.
        let both = [w(10, 1_000), w(3_000, 3_600_000)];
        assert_eq!(ideal_time_windows(3_000, &both), 299_900);
        assert_eq!(ideal_time_windows(4_000, &both), 3_699_900);
        assert_eq!(ideal_time_windows(0, &both), 0);
    }
}
