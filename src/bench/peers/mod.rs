//! `sluice bench --peers`: Sluice beside other rate limiters on one workload, in one sitting.
//!
//! The workload is the bench's cross-origin bulk run: 2,000 creates (POSTs with a JSON body, so
//! CORS preflighted) to the strict API on another origin, 100 per sliding second counted at
//! arrival, 30 ms latency, 4 in flight, arrival jitter 0..10 ms and answer jitter ±10 ms.
//!
//! - **Sluice**: its worker, told the limit, exactly as in the bench's bulk run.
//! - **Bottleneck** and **p-queue** at the versions `bench/peers/package-lock.json` pins,
//!   driven from a page ([`PEERS_PAGE`]) with the settings their users pick for this limit, a
//!   429 retried after its `Retry-After` as their users do (see the page).
//!
//! Each run gets a fresh server and browser; the clients take turns run by run (Sluice,
//! Bottleneck, p-queue, Sluice, ...) so that a compile starting halfway through the sitting
//! slows each of them alike instead of one alone. What would make the figures meaningless is
//! an error (a create lost or applied twice); the rest is judged against the targets of a told
//! limit and against the best peer, and printed with Sluice's ratio to each peer.

use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;

use super::{
    cross_origin_api, finish_time_s, run_bulk, BenchError, BenchOptions, CONCURRENCY, LIMIT,
    WINDOW_MS,
};
use super::{ANSWER_JITTER_MS, ARRIVAL_JITTER_MS};
use crate::browser::{Error, Rig};

mod files;
mod page;
mod results;
mod table;

pub use files::PeerFiles;
pub(crate) use page::{mean_cpu, run_on_page};
use results::judge;
pub use results::{ClientResult, PeerRatio, PeerRun, PeersReport, Spread};
pub use table::table;

/// The page that drives the peers: served at [`PEERS_PATH`].
pub const PEERS_PAGE: &str = include_str!("../peers.html");
const PEERS_PATH: &str = "/peers.html";
/// Where the page finds `node_modules` (see the page's script tags and import map).
const MODULES_URL_DIR: &str = "peers";

/// The latency of the measured run.
const LATENCY_MS: u64 = 30;

/// What the peer comparison runs; `None` takes the default for `--quick` or not.
#[derive(Clone, Debug, Default)]
pub struct PeerOptions {
    /// Runs of each client (default 3 with `--quick`, 5 otherwise).
    pub runs: Option<usize>,
    /// Creates per run (default 2,000, the bench's bulk run).
    pub jobs: Option<usize>,
    /// The directory holding `package.json` and `node_modules` (default `bench/peers` here,
    /// else in the source tree this binary was built from).
    pub dir: Option<PathBuf>,
}

/// The packages the page loads, at the versions the lockfile pins: the table names them.
const PINNED: [(&str, &str); 4] = [
    ("bottleneck", "2.19.5"),
    ("p-queue", "9.3.5"),
    ("eventemitter3", "5.0.4"),
    ("p-timeout", "7.0.2"),
];

/// The clients measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Client {
    Sluice,
    Bottleneck,
    PQueue,
}

impl Client {
    pub const ALL: [Client; 3] = [Client::Sluice, Client::Bottleneck, Client::PQueue];

    /// The name the page knows it by; Sluice runs in its own driver page.
    pub(crate) fn page_name(self) -> Option<&'static str> {
        match self {
            Client::Sluice => None,
            Client::Bottleneck => Some("bottleneck"),
            Client::PQueue => Some("pqueue"),
        }
    }

    pub fn label(self) -> String {
        match self {
            Client::Sluice => "sluice".into(),
            Client::Bottleneck => format!("bottleneck {}", PINNED[0].1),
            Client::PQueue => format!("p-queue {}", PINNED[1].1),
        }
    }

    /// How the client is set up for `rate`, in its own terms.
    pub fn settings(self, rate: &PeerRate) -> String {
        let PeerRate {
            limit,
            window_ms,
            concurrency,
        } = *rate;
        match self {
            Client::Sluice => {
                format!("budget {limit} per {window_ms} ms, concurrency {concurrency} (the worker)")
            }
            Client::Bottleneck => format!(
                "minTime {} ms, maxConcurrent {concurrency}; a 429 retried after Retry-After (one \
                 window without it) by its 'failed' event",
                window_ms as f64 / f64::from(limit)
            ),
            Client::PQueue => format!(
                "intervalCap {limit}, interval {window_ms}, concurrency {concurrency}, strict; a \
                 429 added again after Retry-After (one window without it)"
            ),
        }
    }
}

/// The limit the page's peers are told, and how many requests they keep in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerRate {
    pub limit: u32,
    pub window_ms: u64,
    pub concurrency: u32,
}

impl PeerRate {
    /// The bench's own: the strict API's limit.
    pub const BENCH: PeerRate = PeerRate {
        limit: LIMIT,
        window_ms: WINDOW_MS,
        concurrency: CONCURRENCY,
    };
}

/// Creates per run and runs per client.
pub fn sizes(options: &BenchOptions) -> (usize, usize) {
    let p = &options.peer_options;
    let runs = p.runs.unwrap_or(if options.quick { 3 } else { 5 });
    (p.jobs.unwrap_or(2_000), runs)
}

/// Finds the peers and measures them beside Sluice.
pub async fn run(
    options: &BenchOptions,
    progress: &dyn Fn(&str),
) -> Result<PeersReport, BenchError> {
    let files = PeerFiles::find(&options.peer_options)?;
    run_with(options, &files, progress).await
}

/// [`run`] with the peers already found.
pub async fn run_with(
    options: &BenchOptions,
    files: &PeerFiles,
    progress: &dyn Fn(&str),
) -> Result<PeersReport, BenchError> {
    let started = Instant::now();
    let (jobs, runs) = sizes(options);
    let mut per_client: Vec<Vec<PeerRun>> = Client::ALL.iter().map(|_| Vec::new()).collect();
    for round in 1..=runs {
        for (client, results) in Client::ALL.iter().zip(per_client.iter_mut()) {
            progress(&format!(
                "peers: run {round}/{runs}, {}: {jobs} creates, {LIMIT}/s, {LATENCY_MS} ms, \
                 cross-origin, jitter both ways",
                client.label()
            ));
            results.push(run_once(options, files, *client, jobs).await?);
        }
    }
    let cpu = mean_cpu(per_client.iter().flatten().map(|r| r.cpu));
    let clients: Vec<ClientResult> = Client::ALL
        .iter()
        .zip(per_client)
        .map(|(client, runs)| ClientResult {
            client: *client,
            label: client.label(),
            settings: client.settings(&PeerRate::BENCH),
            share_of_limit: Spread::of(&runs.iter().map(|r| r.share_of_limit).collect::<Vec<_>>()),
            cpu: mean_cpu(runs.iter().map(|r| r.cpu)),
            runs,
        })
        .collect();
    let simulated_ceiling =
        crate::bench::simulated_ceiling(jobs, LATENCY_MS).map_err(BenchError::Io)?;
    let (ratios, targets) = judge(&clients, simulated_ceiling);
    Ok(PeersReport {
        jobs,
        runs_per_client: runs,
        limit: LIMIT,
        window_ms: WINDOW_MS,
        concurrency: CONCURRENCY,
        latency_ms: LATENCY_MS,
        arrival_jitter_ms: ARRIVAL_JITTER_MS,
        answer_jitter_ms: ANSWER_JITTER_MS,
        simulated_ceiling,
        clients,
        ratios,
        targets,
        cpu,
        seconds: started.elapsed().as_secs_f64(),
    })
}

async fn run_once(
    options: &BenchOptions,
    files: &PeerFiles,
    client: Client,
    jobs: usize,
) -> Result<PeerRun, BenchError> {
    let Some(name) = client.page_name() else {
        let b = run_bulk(options, jobs, LATENCY_MS, true).await?;
        return Ok(PeerRun {
            requests: b.requests,
            rate_limited: b.rate_limited,
            preflights: b.preflights,
            finish_s: b.finish_s,
            share_of_limit: b.share_of_limit,
            max_in_window: b.max_in_window,
            page_s: b.page_s,
            cpu: b.cpu,
        });
    };
    let rig = Rig::start(files.rig_options(options, cross_origin_api(LATENCY_MS))).await?;
    let api_origin = rig.api_origin.clone();
    let page = run_on_page(&rig, files, name, &api_origin, jobs, &PeerRate::BENCH).await?;
    // Every create was answered on the page, so every request has arrived: the server's
    // counts are final.
    let stats = rig.api.stats();
    if stats.applied != jobs || stats.contacts != jobs {
        return Err(Error::Server(format!(
            "{}: {} creates applied and {} contacts stored for {jobs} jobs",
            client.label(),
            stats.applied,
            stats.contacts
        ))
        .into());
    }
    let finish_s = finish_time_s(&rig.api.arrivals(), LATENCY_MS)?;
    Ok(PeerRun {
        requests: stats.total,
        rate_limited: stats.rate_limited,
        preflights: rig.api.preflights(),
        finish_s,
        share_of_limit: jobs as f64 / finish_s / f64::from(LIMIT),
        max_in_window: stats.max_in_window,
        page_s: page.page_ms / 1000.0,
        cpu: page.cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(client: Client, shares: &[f64], rate_limited: usize) -> ClientResult {
        let runs = shares
            .iter()
            .map(|&share_of_limit| PeerRun {
                requests: 2_000 + rate_limited,
                rate_limited,
                preflights: 1,
                finish_s: 20.0 / share_of_limit,
                share_of_limit,
                max_in_window: 100,
                page_s: 20.0 / share_of_limit,
                cpu: None,
            })
            .collect();
        ClientResult {
            client,
            label: client.label(),
            settings: client.settings(&PeerRate::BENCH),
            runs,
            share_of_limit: Spread::of(shares),
            cpu: None,
        }
    }

    #[test]
    fn sluice_is_judged_against_the_targets_and_the_best_peer() {
        let clients = [
            client(Client::Sluice, &[0.95, 0.958, 0.952], 0),
            client(Client::Bottleneck, &[0.876, 0.874, 0.893], 0),
            client(Client::PQueue, &[0.961, 0.938, 0.967], 29),
        ];
        // The engine's ceiling on the bench's path for 2,000 jobs (docs/benchmarks.md).
        let (ratios, targets) = judge(&clients, 0.9746);
        // Best peer first: p-queue, whose share came with 429s.
        assert_eq!(ratios[0].peer, Client::PQueue.label());
        assert!(!ratios[0].kept_the_limit);
        assert!((ratios[0].ratio - 0.952 / 0.961).abs() < 1e-9);
        assert!(ratios[1].kept_the_limit && ratios[1].ratio > 1.0);
        let met: Vec<(&str, bool)> = targets.iter().map(|t| (t.what.as_str(), t.met)).collect();
        assert_eq!(
            met,
            [
                ("sluice: 429s in every run", true),
                ("sluice: share of the limit, median", false),
                ("sluice: share of the limit, lowest run", false),
                (
                    "sluice over the best peer's median share (p-queue 9.3.5)",
                    false
                ),
            ]
        );
        // One 429 in one run is a miss, however close the share.
        let clients = [
            client(Client::Sluice, &[0.98, 0.99, 0.985], 1),
            client(Client::Bottleneck, &[0.876], 0),
        ];
        let (_, targets) = judge(&clients, 0.9746);
        let met: Vec<bool> = targets.iter().map(|t| t.met).collect();
        assert_eq!(met, [false, true, true, true]);
    }

    #[test]
    fn spread_takes_the_middle_and_the_ends() {
        let s = Spread::of(&[0.9, 0.8, 1.0]);
        assert_eq!((s.median, s.min, s.max), (0.9, 0.8, 1.0));
        assert_eq!(Spread::of(&[1.0, 3.0]).median, 2.0);
        assert!(Spread::of(&[]).median.is_nan());
    }

    #[test]
    fn runs_follow_quick_unless_told() {
        let quick = BenchOptions {
            quick: true,
            ..BenchOptions::default()
        };
        assert_eq!(sizes(&quick), (2_000, 3));
        assert_eq!(sizes(&BenchOptions::default()), (2_000, 5));
        let told = BenchOptions {
            peer_options: PeerOptions {
                runs: Some(1),
                jobs: Some(300),
                dir: None,
            },
            ..quick
        };
        assert_eq!(sizes(&told), (300, 1));
    }

    #[test]
    fn a_missing_install_says_how_to_install() {
        let empty = tempfile::tempdir().expect("temp dir");
        let err = PeerFiles::find(&PeerOptions {
            dir: Some(empty.path().to_path_buf()),
            ..PeerOptions::default()
        })
        .err()
        .expect("nothing is installed there");
        let text = err.to_string();
        assert!(
            matches!(err, BenchError::PeersNotInstalled { .. })
                && text.contains("npm ci --prefix bench/peers"),
            "{text}"
        );
    }
}
