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

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{
    cpu_use, cross_origin_api, finish_time_s, run_bulk, BenchError, BenchOptions, TargetCheck,
    CONCURRENCY, LIMIT, WINDOW_MS,
};
use super::{ANSWER_JITTER_MS, ARRIVAL_JITTER_MS};
use crate::api::ApiConfig;
use crate::browser::load::CpuUse;
use crate::browser::{Error, Rig, RigOptions};

/// The page that drives the peers: served at [`PEERS_PATH`].
pub const PEERS_PAGE: &str = include_str!("peers.html");
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

/// The least median share of the limit the targets ask of Sluice here, and the least of any run.
pub const TARGET_MEDIAN_SHARE: f64 = 0.975;
pub const TARGET_LOWEST_SHARE: f64 = 0.96;

/// Sluice's ratio to each peer, best peer first, and the verdicts on the targets: 0 429s in
/// every run, the median and lowest share, and ahead of the best peer's median share.
fn judge(clients: &[ClientResult]) -> (Vec<PeerRatio>, Vec<TargetCheck>) {
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
            target: format!(">= {TARGET_MEDIAN_SHARE}"),
            measured: format!("{:.3}", share.median),
            met: share.median >= TARGET_MEDIAN_SHARE,
        },
        TargetCheck {
            what: "sluice: share of the limit, lowest run".into(),
            target: format!(">= {TARGET_LOWEST_SHARE}"),
            measured: format!("{:.3}", share.min),
            met: share.min >= TARGET_LOWEST_SHARE,
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

/// The installed peers, and the directory the peer runs serve their page from.
pub struct PeerFiles {
    node_modules: PathBuf,
    /// `peers.html` and a link to `node_modules`; removed when dropped.
    www: tempfile::TempDir,
}

#[derive(Deserialize)]
struct PackageJson {
    version: String,
}

impl PeerFiles {
    /// Finds `node_modules` with every pinned package at its version and lays out the page's
    /// directory; a missing or different install is [`BenchError::PeersNotInstalled`].
    pub fn find(options: &PeerOptions) -> Result<PeerFiles, BenchError> {
        let dir = match &options.dir {
            Some(dir) => dir.clone(),
            None => default_dir(),
        };
        let node_modules = dir.join("node_modules");
        for (name, version) in PINNED {
            let manifest = node_modules.join(name).join("package.json");
            let found = std::fs::read(&manifest)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<PackageJson>(&bytes).ok());
            match found {
                Some(p) if p.version == version => {}
                Some(p) => {
                    return Err(BenchError::PeersNotInstalled {
                        missing: format!(
                            "{} is {}, the lockfile pins {version}",
                            manifest.display(),
                            p.version
                        ),
                    })
                }
                None => {
                    return Err(BenchError::PeersNotInstalled {
                        missing: format!("no readable {}", manifest.display()),
                    })
                }
            }
        }
        let node_modules = node_modules
            .canonicalize()
            .map_err(|e| BenchError::Io(format!("{}: {e}", node_modules.display())))?;
        let www = tempfile::Builder::new()
            .prefix("sluice-bench-peers-")
            .tempdir()
            .map_err(|e| BenchError::Io(format!("a directory for the peers' page: {e}")))?;
        let page = www.path().join(PEERS_PATH.trim_start_matches('/'));
        std::fs::write(&page, PEERS_PAGE)
            .map_err(|e| BenchError::Io(format!("{}: {e}", page.display())))?;
        // A link, not a copy: the server reads under its directory and follows it.
        let link = www.path().join(MODULES_URL_DIR);
        std::os::unix::fs::symlink(&node_modules, &link).map_err(|e| {
            BenchError::Io(format!(
                "linking {} to {}: {e}",
                link.display(),
                node_modules.display()
            ))
        })?;
        Ok(PeerFiles { node_modules, www })
    }

    pub fn node_modules(&self) -> &Path {
        &self.node_modules
    }

    /// A fresh server and browser serving the peers' page, with `api` as its API.
    pub(crate) fn rig_options(&self, options: &BenchOptions, api: ApiConfig) -> RigOptions {
        RigOptions {
            api,
            www: crate::server::WwwSource::Dir(self.www.path().to_path_buf()),
            chromium: options.chromium.clone(),
            cross_origin: true,
            ..RigOptions::default()
        }
    }
}

/// `bench/peers` under the current directory if there is one, else in the source tree.
fn default_dir() -> PathBuf {
    let here = PathBuf::from("bench/peers");
    if here.join("package.json").is_file() {
        here
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/peers")
    }
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
    let (ratios, targets) = judge(&clients);
    Ok(PeersReport {
        jobs,
        runs_per_client: runs,
        limit: LIMIT,
        window_ms: WINDOW_MS,
        concurrency: CONCURRENCY,
        latency_ms: LATENCY_MS,
        arrival_jitter_ms: ARRIVAL_JITTER_MS,
        answer_jitter_ms: ANSWER_JITTER_MS,
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

/// Opens the peers' page in `rig` (from [`PeerFiles::rig_options`]), waits for its libraries
/// and runs the peer the page calls `name` for `jobs` creates to `api_origin`, told `rate`.
pub(crate) async fn run_on_page(
    rig: &Rig,
    files: &PeerFiles,
    name: &str,
    api_origin: &str,
    jobs: usize,
    rate: &PeerRate,
) -> Result<PageRun, BenchError> {
    let tab = rig.browser.open(&rig.url(PEERS_PATH)).await?;
    let ready = tab
        .eval(
            "const deadline = performance.now() + 10000;\
             while (!window.peersReady) {\
               if (performance.now() > deadline) return false;\
               await new Promise((r) => setTimeout(r, 20));\
             }\
             return true;",
        )
        .await?;
    if ready != serde_json::Value::Bool(true) {
        let log = rig.browser.log();
        let tail = log[log.len().saturating_sub(8)..].join("\n");
        return Err(Error::Page(format!(
            "the peers' page did not load its libraries from {} in 10 s; last log lines:\n{tail}",
            files.node_modules.display()
        ))
        .into());
    }
    let rate_js = serde_json::to_string(rate)
        .map_err(|e| BenchError::Io(format!("the rate for {name}: {e}")))?;
    let cpu = rig.browser.cpu_sample();
    let mut page: PageRun = tab
        .eval_as(&format!(
            "return await window.peers.run('{name}', '{api_origin}', {jobs}, {rate_js});"
        ))
        .await?;
    page.cpu = cpu_use(cpu, rig);
    Ok(page)
}

/// The mean CPU use of the runs that measured it (each from its browser's start to its end,
/// the browser counted as ours).
pub(crate) fn mean_cpu(runs: impl Iterator<Item = Option<CpuUse>>) -> Option<CpuUse> {
    let known: Vec<CpuUse> = runs.flatten().collect();
    if known.is_empty() {
        return None;
    }
    let n = known.len() as f64;
    Some(CpuUse {
        ours: known.iter().map(|c| c.ours).sum::<f64>() / n,
        others: known.iter().map(|c| c.others).sum::<f64>() / n,
    })
}

/// What the page reports of a run.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PageRun {
    /// From handing over the first job to the last one's answer.
    pub page_ms: f64,
    /// The machine's CPU use during the run (measured here, not on the page).
    #[serde(skip)]
    pub cpu: Option<CpuUse>,
}

fn list<T: ToString>(values: impl Iterator<Item = T>) -> String {
    values.map(|v| v.to_string()).collect::<Vec<_>>().join(" ")
}

/// The comparison as a table for a terminal.
pub fn table(p: &PeersReport) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "peers: {} creates per run, {} runs each, limit {}/{} ms at arrival, {} in flight, \
         {} ms latency, cross-origin, jitter 0..{} ms arriving and ±{} ms answering; {:.0} s",
        p.jobs,
        p.runs_per_client,
        p.limit,
        p.window_ms,
        p.concurrency,
        p.latency_ms,
        p.arrival_jitter_ms,
        p.answer_jitter_ms,
        p.seconds
    ));
    if let Some(c) = &p.cpu {
        s.push_str(&format!(
            "; machine CPU during the runs: ours {:.0}%, others {:.0}%",
            c.ours * 100.0,
            c.others * 100.0
        ));
    }
    s.push('\n');
    s.push_str(&format!(
        "{:<18} {:>6} {:>13}  {:<20} {:<16} {:<26} {:<30} {}\n",
        "client",
        "share",
        "spread",
        "429s per run",
        "preflights",
        "requests sent",
        "finish (s)",
        "others' CPU"
    ));
    for c in &p.clients {
        s.push_str(&format!(
            "{:<18} {:>6.3} {:>13}  {:<20} {:<16} {:<26} {:<30} {}\n",
            c.label,
            c.share_of_limit.median,
            format!("{:.3}-{:.3}", c.share_of_limit.min, c.share_of_limit.max),
            list(c.runs.iter().map(|r| r.rate_limited)),
            list(c.runs.iter().map(|r| r.preflights)),
            list(c.runs.iter().map(|r| r.requests)),
            list(c.runs.iter().map(|r| format!("{:.2}", r.finish_s))),
            c.cpu
                .map_or("n/a".into(), |u| format!("{:.0}%", u.others * 100.0)),
        ));
    }
    s.push_str(
        "share: creates per second over the limit, first arrival to the last answer (median of \
         the runs; spread: lowest-highest); lists are per run\n",
    );
    for c in &p.clients {
        s.push_str(&format!("  {}: {}\n", c.label, c.settings));
    }
    for r in &p.ratios {
        s.push_str(&format!(
            "sluice's median share over {}'s: {:.3}{}\n",
            r.peer,
            r.ratio,
            if r.kept_the_limit {
                ""
            } else {
                " (a peer that drew 429s: part of its share the API refused first)"
            }
        ));
    }
    for t in &p.targets {
        s.push_str(&t.line(52));
    }
    s
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
        let (ratios, targets) = judge(&clients);
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
        let (_, targets) = judge(&clients);
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
