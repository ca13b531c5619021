//! The status snapshot every tab shows: what is waiting, why, and for how long.
//!
//! Everything here is derived from the engine's state on request; nothing is counted twice.
//! Times are absolute (`paused_until`) rather than "seconds left", so that a page computes its
//! countdown from its own clock and the value never goes stale in transit.

use serde::{Deserialize, Serialize};

use crate::resources::ResourceStatus;

use crate::config::Window;
use crate::job::Lane;
use crate::json::{FromJson, ToJson};
use crate::time::{human_duration, DurationMs, Millis};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct StateCounts {
    pub queued: u64,
    pub sending: u64,
    pub retry_wait: u64,
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Jobs the server answered with a conflict, waiting for the page to resolve them.
    #[serde(default)]
    pub conflict: u64,
}

impl StateCounts {
    pub fn waiting(&self) -> u64 {
        self.queued + self.retry_wait
    }

    pub fn pending(&self) -> u64 {
        self.queued + self.retry_wait + self.sending
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct BudgetStatus {
    pub name: String,
    pub windows: Vec<Window>,
    pub concurrency: u32,
    pub in_flight: u64,
    /// Jobs waiting or sending on this budget.
    pub pending: u64,
    /// End of a server-requested pause, for a countdown.
    pub paused_until: Option<Millis>,
    pub pause_reason: Option<String>,
    /// Sending is held until the user retries (retries ran out).
    pub trouble: Option<String>,
    /// Sending is held until a page gives new credentials (`setCredentials`): the server
    /// refused the ones the jobs went with. What a page reacts to by signing in again.
    #[serde(default)]
    pub credentials_needed: Option<String>,
    /// Requests out far longer than answers take (a lost answer, a hung connection): what
    /// the queue does about them, so that a count of requests in flight that stops moving
    /// is explained.
    #[serde(default)]
    pub overdue: Option<String>,
    pub server_remaining: Option<u64>,
    pub server_reset_at: Option<Millis>,
    /// Time until every pending job of this budget could be done at the achievable rate.
    pub eta_ms: Option<DurationMs>,
    pub requests: u64,
    pub rate_limited: u64,
    pub retries: u64,
    /// 429s per 1,000 requests.
    pub rate_limited_per_1000: f64,
    /// Starts in the last tightest window as a share of its limit.
    pub achieved_share: f64,
    /// The budget's other resources (tokens, points): for each, its window closest to full,
    /// what is spent in it and when it is empty again.
    #[serde(default)]
    pub resources: Vec<ResourceStatus>,
    /// What is closest to its limit, `requests` or a resource's name; `None` for a budget of
    /// requests alone.
    #[serde(default)]
    pub tightest: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct GroupStatus {
    pub id: String,
    pub total: u64,
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Jobs the server answered with a conflict, waiting for the page to resolve them.
    #[serde(default)]
    pub conflicts: u64,
    /// Not finished: waiting or sending.
    pub pending: u64,
    /// Waiting to be sent (queued, or waiting to retry).
    #[serde(default)]
    pub waiting: u64,
    /// By when its budget will have sent what it has pending, this group's jobs included, at
    /// the rate it achieves (0 when the group has nothing pending; `None` while the budget is
    /// held for trouble or waits for credentials). The group's own jobs may be done sooner
    /// when other work shares the budget.
    #[serde(default)]
    pub eta_ms: Option<DurationMs>,
    /// Set when the group needs more than a whole window's budget.
    pub warning: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct LaneStatus {
    pub lane: Lane,
    pub waiting: u64,
    /// Time from enqueue to first start, over recent jobs.
    pub wait_p50_ms: Option<DurationMs>,
    pub wait_p95_ms: Option<DurationMs>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub now: Millis,
    pub counts: StateCounts,
    pub budgets: Vec<BudgetStatus>,
    pub groups: Vec<GroupStatus>,
    pub lanes: Vec<LaneStatus>,
    /// Until every pending job could be done (the slowest budget).
    pub eta_ms: Option<DurationMs>,
    /// Attempts per finished job (1.0 when nothing needed a retry).
    pub attempts_per_job: f64,
    /// Set while the network is known to be down.
    pub offline: bool,
    /// Things a person should act on: a budget that is not configured, a configuration the
    /// worker could not use, storage that is full.
    pub warnings: Vec<String>,
    /// Information, nothing to fix: how long a bulk job needs at the limit ("2,000 jobs need
    /// more than the per-second limit of 20: at least 1 min 40 s"), or that a budget's
    /// concurrency rather than its limit sets the pace (with the concurrency that would not).
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Percentile of a sample (nearest rank); `None` when empty.
pub fn percentile(samples: &[DurationMs], p: f64) -> Option<DurationMs> {
    if samples.is_empty() {
        return None;
    }
    let order = crate::job::sorted_order(samples.iter().copied());
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    order
        .get(rank.clamp(1, samples.len()) - 1)
        .map(|&i| samples[i])
}

fn window_name(w: &Window) -> String {
    match w.length_ms {
        1_000 => "per-second limit".into(),
        60_000 => "per-minute limit".into(),
        3_600_000 => "hourly limit".into(),
        86_400_000 => "daily limit".into(),
        ms => format!("limit per {}", human_duration(ms)),
    }
}

/// "6,000 jobs need more than the hourly limit of 5,000: at least 1 h 12 min" when `jobs`
/// exceeds a window's whole budget; the longest such wait is reported.
pub fn capacity_warning(jobs: u64, windows: &[Window]) -> Option<String> {
    windows
        .iter()
        .filter(|w| jobs > w.limit as u64)
        .map(|w| {
            let least = (jobs as u128 * w.length_ms as u128 / w.limit.max(1) as u128) as u64;
            (least, w)
        })
        .max_by_key(|(least, _)| *least)
        .map(|(least, w)| {
            format!(
                "{} jobs need more than the {} of {}: at least {}",
                thousands(jobs),
                window_name(w),
                thousands(w.limit as u64),
                human_duration(least)
            )
        })
}

/// "budget 'crm': 4 in flight at 300 ms a request send at most 13.3/s, below its limit of
/// 20/s; concurrency 6 would reach it" when the round trip, not the limit, sets the pace: at
/// most `concurrency` requests are out at once, each for `latency_ms`, so the rate cannot pass
/// `concurrency / latency`. Only when that is under 90% of the limit's sustained rate (a little
/// under is the pacing's own slack, not worth a note).
pub fn concurrency_note(
    budget: &str,
    concurrency: u32,
    latency_ms: f64,
    limit_per_ms: f64,
) -> Option<String> {
    if latency_ms <= 0.0 || limit_per_ms <= 0.0 || concurrency == 0 {
        return None;
    }
    let reachable_per_ms = concurrency as f64 / latency_ms;
    if reachable_per_ms >= 0.9 * limit_per_ms {
        return None;
    }
    let needed = (limit_per_ms * latency_ms).ceil().max(1.0) as u64;
    Some(format!(
        "budget '{budget}': {concurrency} in flight at {} ms a request send at most {}/s, below \
         its limit of {}/s; concurrency {needed} would reach it",
        latency_ms.round() as u64,
        per_second(reachable_per_ms),
        per_second(limit_per_ms),
    ))
}

/// A rate per ms as requests per second, to one decimal when below 100. Integer arithmetic:
/// `{:.1}` on an `f64` brings core's float formatting into the worker's wasm.
fn per_second(per_ms: f64) -> String {
    let per_s = per_ms * 1000.0;
    if per_s >= 100.0 {
        return thousands(per_s.round() as u64);
    }
    let tenths = (per_s * 10.0).round() as u64;
    match tenths % 10 {
        0 => format!("{}", tenths / 10),
        d => format!("{}.{d}", tenths / 10),
    }
}

/// 6000 -> "6,000".
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_concurrency_that_cannot_reach_the_limit_is_noted_with_the_one_that_can() {
        assert_eq!(
            concurrency_note("crm", 4, 300.0, 20.0 / 1000.0).as_deref(),
            Some(
                "budget 'crm': 4 in flight at 300 ms a request send at most 13.3/s, below its \
                 limit of 20/s; concurrency 6 would reach it"
            )
        );
        assert_eq!(concurrency_note("crm", 6, 300.0, 20.0 / 1000.0), None);
        assert_eq!(concurrency_note("crm", 4, 30.0, 20.0 / 1000.0), None);
        assert_eq!(concurrency_note("crm", 4, 0.0, 20.0 / 1000.0), None);
    }

    #[test]
    fn warns_when_a_group_exceeds_a_window() {
        let windows = [
            Window {
                limit: 10,
                length_ms: 1_000,
            },
            Window {
                limit: 5_000,
                length_ms: 3_600_000,
            },
        ];
        assert_eq!(
            capacity_warning(6_000, &windows).as_deref(),
            Some("6,000 jobs need more than the hourly limit of 5,000: at least 1 h 12 min")
        );
        assert_eq!(capacity_warning(5, &windows), None);
    }

    #[test]
    fn json_form_matches_serde() {
        let status = Status {
            now: 1,
            counts: StateCounts {
                queued: 1,
                sending: 2,
                retry_wait: 3,
                done: 4,
                failed: 5,
                cancelled: 6,
                conflict: 7,
            },
            budgets: vec![BudgetStatus {
                name: "b".into(),
                windows: vec![Window {
                    limit: 1,
                    length_ms: 2,
                }],
                concurrency: 3,
                in_flight: 4,
                pending: 5,
                paused_until: Some(6),
                pause_reason: Some("r".into()),
                trouble: None,
                credentials_needed: None,
                overdue: Some("o".into()),
                server_remaining: Some(0),
                server_reset_at: None,
                eta_ms: Some(9),
                requests: 10,
                rate_limited: 11,
                retries: 12,
                rate_limited_per_1000: 1.5,
                achieved_share: 0.333,
                resources: vec![ResourceStatus {
                    name: "tokens".into(),
                    limit: 90_000,
                    window_ms: 60_000,
                    used: 1_200,
                    remaining: 88_800,
                    frees_at: 61_000,
                }],
                tightest: Some("requests".into()),
            }],
            groups: vec![GroupStatus {
                id: "g".into(),
                total: 1,
                done: 0,
                failed: 0,
                cancelled: 0,
                conflicts: 0,
                pending: 1,
                waiting: 1,
                eta_ms: Some(1_000),
                warning: Some("w".into()),
            }],
            lanes: vec![LaneStatus {
                lane: Lane::Background,
                waiting: 1,
                wait_p50_ms: None,
                wait_p95_ms: Some(3),
            }],
            eta_ms: None,
            attempts_per_job: 1.0,
            offline: true,
            warnings: vec!["x".into()],
            notes: vec!["y".into()],
        };
        crate::json::testing::same_as_serde(&status);
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let s: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&s, 50.0), Some(50));
        assert_eq!(percentile(&s, 95.0), Some(95));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
