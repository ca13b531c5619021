//! The figures of the peer runs (a run, a client's runs, the report) and how Sluice's are
//! judged: against the targets and against the best peer.

use serde::Serialize;

use super::Client;
use crate::bench::{TargetCheck, LOWEST_OF_CEILING, MEDIAN_OF_CEILING};
use crate::browser::load::CpuUse;

/// One run of one client, as the server saw it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerRun {
    /// Requests that arrived, 429s included (not preflights).
    pub requests: usize,
    pub rate_limited: usize,
    /// CORS preflights the API answered.
    pub preflights: u64,
    /// First arrival to the last one's response, in seconds.
    pub finish_s: f64,
    /// Creates per second over the limit.
    pub share_of_limit: f64,
    /// Most admitted arrivals in any window.
    pub max_in_window: usize,
    /// On the page, from handing over the first job to the last one's answer, in seconds.
    pub page_s: f64,
    pub cpu: Option<CpuUse>,
}

/// The middle of some figures and how far they spread.
#[derive(Clone, Copy, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let (Some(&min), Some(&max)) = (v.first(), v.last()) else {
            return Spread {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        };
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Spread { median, min, max }
    }
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientResult {
    pub client: Client,
    pub label: String,
    pub settings: String,
    pub runs: Vec<PeerRun>,
    pub share_of_limit: Spread,
    /// The machine's CPU use during this client's runs, on average: how much the figures
    /// were disturbed.
    pub cpu: Option<CpuUse>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeersReport {
    pub jobs: usize,
    pub runs_per_client: usize,
    pub limit: u32,
    pub window_ms: u64,
    pub concurrency: u32,
    pub latency_ms: u64,
    pub arrival_jitter_ms: u64,
    pub answer_jitter_ms: u64,
    /// What the engine alone reaches on this path, on the simulator's clock: the share targets
    /// are relative to it ([`simulated_ceiling`](crate::bench::simulated_ceiling)).
    pub simulated_ceiling: f64,
    pub clients: Vec<ClientResult>,
    /// Sluice's median share over each peer's, best first.
    pub ratios: Vec<PeerRatio>,
    /// Sluice judged against the targets of a told limit, and against the best peer.
    pub targets: Vec<TargetCheck>,
    /// The machine's CPU use during the runs, on average.
    pub cpu: Option<CpuUse>,
    pub seconds: f64,
}

/// Sluice's median share of the limit over one peer's.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerRatio {
    pub peer: String,
    pub ratio: f64,
    /// Whether the peer drew no 429 in any run: a share bought with 429s is a share the API
    /// refused part of.
    pub kept_the_limit: bool,
}

/// Sluice's ratio to each peer, best peer first, and the verdicts on the targets: 0 429s in
/// every run, the median and lowest share against what the engine itself reaches on this
/// path (`ceiling`, [`simulated_ceiling`](crate::bench::simulated_ceiling)), and ahead of the
/// best peer's median share.
pub(super) fn judge(clients: &[ClientResult], ceiling: f64) -> (Vec<PeerRatio>, Vec<TargetCheck>) {
    let Some(sluice) = clients.iter().find(|c| c.client == Client::Sluice) else {
        return (Vec::new(), Vec::new());
    };
    let share = sluice.share_of_limit;
    let mut ratios: Vec<PeerRatio> = clients
        .iter()
        .filter(|c| c.client != Client::Sluice)
        .map(|c| PeerRatio {
            peer: c.label.clone(),
            ratio: share.median / c.share_of_limit.median,
            kept_the_limit: c.runs.iter().all(|r| r.rate_limited == 0),
        })
        .collect();
    ratios.sort_by(|a, b| a.ratio.total_cmp(&b.ratio));
    let rate_limited: Vec<String> = sluice
        .runs
        .iter()
        .map(|r| r.rate_limited.to_string())
        .collect();
    let mut targets = vec![
        TargetCheck {
            what: "sluice: 429s in every run".into(),
            target: "0".into(),
            measured: rate_limited.join(" "),
            met: sluice.runs.iter().all(|r| r.rate_limited == 0),
        },
        TargetCheck {
            what: "sluice: share of the limit, median".into(),
            target: format!(
                ">= {:.3} ({MEDIAN_OF_CEILING} of the engine's {ceiling:.4} here)",
                MEDIAN_OF_CEILING * ceiling
            ),
            measured: format!("{:.3}", share.median),
            met: share.median >= MEDIAN_OF_CEILING * ceiling,
        },
        TargetCheck {
            what: "sluice: share of the limit, lowest run".into(),
            target: format!(
                ">= {:.3} ({LOWEST_OF_CEILING} of the engine's)",
                LOWEST_OF_CEILING * ceiling
            ),
            measured: format!("{:.3}", share.min),
            met: share.min >= LOWEST_OF_CEILING * ceiling,
        },
    ];
    if let Some(best) = ratios.first() {
        targets.push(TargetCheck {
            what: format!("sluice over the best peer's median share ({})", best.peer),
            target: "> 1".into(),
            measured: format!("{:.3}", best.ratio),
            met: best.ratio > 1.0,
        });
    }
    (ratios, targets)
}
