//! `sluice bench`: the real worker and page client in headless Chromium against the strict
//! API, measured the way issue 4 asks, with a table for people and JSON for tools.
//!
//! Each measurement gets a fresh server and browser ([`Rig`]), so one cannot disturb the next
//! (a profile's IndexedDB, a worker still busy). Times on the page and arrivals at the server
//! are compared on one clock: the machine's, with the page's offset measured by round trips
//! ([`Rig::page_clock_offset_ms`]).
//!
//! - **bulk**: 2,000 creates at once, server limit 100 per sliding second, 4 in flight, at 30 ms
//!   and 300 ms latency: time from the first arrival to the last response, share of the limit,
//!   429s, most arrivals in any window.
//! - **enqueue acknowledgement**: single `enqueue` calls, one after another, until each resolved
//!   (the job is saved in IndexedDB by then). Each is an interactive create that goes out at
//!   once, so the worker sends at the limit meanwhile; the same again with nothing sent (a
//!   budget of one request a minute) shows what that sending costs the acknowledgements.
//! - **interactive start**: during a bulk job, from `enqueue` on the page to the request's
//!   arrival at the server.
//! - **enqueueMany of 10,000**: until the call resolved (all saved).
//! - **cold start**: a stopped worker holding those jobs, from the event that wakes it to its
//!   first request's arrival.
//! - **peers** (`--peers`, [`peers`]): the cross-origin bulk run again, several times, for
//!   Sluice and for other rate limiters driven from a page, side by side.
//!
//! Every figure comes with how busy the rest of the machine was meanwhile: on a shared
//! two-core machine, a compiler running beside the browser shows up as a slow worker.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::api::{ApiConfig, Arrival};
use crate::browser::load::{CpuSample, CpuUse};
use crate::browser::profile::{self_times, ProfiledThread};
use crate::browser::{self, Error, Rig, RigOptions, Tab};

mod bulk;
pub mod ceiling;
pub mod cold_start;
mod latency;
pub mod limiters;
pub mod peers;
pub mod proxy;
mod report;
#[cfg(test)]
mod tests;

use bulk::{finish_time_s, run_bulk};
use cold_start::run_cold_start;
use latency::{run_acks, run_interactive};
use report::check_targets;
pub use report::table;

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct BenchOptions {
    /// A smaller, faster run for smoke tests: the same measurements on fewer jobs (and fewer
    /// runs of each peer).
    pub quick: bool,
    /// Chromium to run; found on `PATH` (or `SLUICE_CHROMIUM`) if `None`.
    pub chromium: Option<PathBuf>,
    /// Also measure other rate limiters beside Sluice ([`peers`]).
    pub peers: bool,
    /// What the peer comparison runs: sizes and where the peers are installed.
    pub peer_options: peers::PeerOptions,
    /// `--ceiling` and `--cold-start`: save CPU profiles of the worker's and the pages' threads
    /// (each ceiling run; each `enqueueMany` of the cold-start runs) in this folder and print
    /// where their time went.
    pub profile_dir: Option<PathBuf>,
}

/// Why the bench could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Browser(#[from] Error),
    #[error(
        "the peers to measure beside Sluice are not installed ({missing}): run \
         `npm ci --prefix bench/peers`"
    )]
    PeersNotInstalled { missing: String },
    /// `--limiters`: a limiter is not installed, or did not start.
    #[error("a real limiter: {0}")]
    Limiter(#[from] crate::real_limiters::LimiterError),
    #[error("{0}")]
    Io(String),
}

/// How big each measurement is.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sizes {
    pub bulk_jobs: usize,
    /// The 300 ms bulk run is bound by 4 in flight (13 per second at best), not by the limit.
    pub slow_bulk_jobs: usize,
    pub single_enqueues: usize,
    pub interactive_samples: usize,
    pub many_jobs: usize,
}

impl Sizes {
    pub fn for_options(o: &BenchOptions) -> Sizes {
        if o.quick {
            Sizes {
                bulk_jobs: 300,
                slow_bulk_jobs: 40,
                single_enqueues: 50,
                interactive_samples: 10,
                many_jobs: 2_000,
            }
        } else {
            Sizes {
                bulk_jobs: 2_000,
                slow_bulk_jobs: 2_000,
                single_enqueues: 200,
                interactive_samples: 40,
                many_jobs: 10_000,
            }
        }
    }
}

/// `aging.bulkMs` by default: bulk jobs that waited this long rank with interactive ones.
const DEFAULT_BULK_AGING_MS: f64 = 10_000.0;

/// The server's limit and the budget's in every measurement.
pub const LIMIT: u32 = 100;
pub const WINDOW_MS: u64 = 1_000;
pub const CONCURRENCY: u32 = 4;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BulkResult {
    pub jobs: usize,
    pub latency_ms: u64,
    /// The API on another origin (CORS, preflights), with arrival jitter 0..10 ms and answer
    /// jitter ±10 ms: where users are. Otherwise on the page's origin with no jitter.
    pub cross_origin: bool,
    /// CORS preflights the API answered during the run.
    pub preflights: u64,
    /// Requests that arrived at the API, 429s included (not preflights).
    pub requests: usize,
    /// First arrival to last response, in seconds.
    pub finish_s: f64,
    /// `(jobs - 1) / limit + latency`: every start exactly one token apart.
    pub ideal_s: f64,
    /// The ideal, or the bound that `concurrency` in flight sets if that is slower: measured
    /// on the cross-origin run ([`BulkResult::plain_rate_per_s`]), `jobs × latency /
    /// concurrency` on the others.
    pub bound_s: f64,
    /// Requests per second achieved over the limit.
    pub share_of_limit: f64,
    /// `bound_s / finish_s`.
    pub share_of_bound: f64,
    /// Cross-origin run only: what `concurrency` requests in flight reach on this machine and
    /// path with no limiter at all, per second. Measured right after Sluice's run, in the same
    /// worker (so over the same connections and the same browser code), against the same API
    /// with its limit lifted: a plain loop of `fetch`es, each reading its answer before the
    /// next. When this is below the limit, no client held to that concurrency can reach the
    /// limit here, and Sluice's figure to read is its share of this.
    pub plain_rate_per_s: Option<f64>,
    pub rate_limited: usize,
    pub max_in_window: usize,
    pub duplicate_creates: usize,
    /// From `enqueueMany` on the page to every job's `done`, in seconds.
    pub page_s: f64,
    pub cpu: Option<CpuUse>,
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Percentiles {
    pub samples: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles.
    pub fn of(values: &[f64]) -> Percentiles {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let pick = |p: f64| {
            if v.is_empty() {
                return f64::NAN;
            }
            let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
            v[rank.clamp(1, v.len()) - 1]
        };
        Percentiles {
            samples: v.len(),
            p50_ms: pick(50.0),
            p95_ms: pick(95.0),
            max_ms: v.last().copied().unwrap_or(f64::NAN),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AckResult {
    pub ack: Percentiles,
    pub cpu: Option<CpuUse>,
    /// The same with the budget holding everything back: no sending alongside.
    pub ack_held_back: Percentiles,
    pub held_back_cpu: Option<CpuUse>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InteractiveResult {
    pub bulk_jobs: usize,
    /// One start per this many ms at the limit.
    pub token_interval_ms: f64,
    /// From `enqueue` on the page to arrival at the server.
    pub start: Percentiles,
    /// The same for the samples enqueued before the bulk jobs had waited one aging step (10 s
    /// by default): after that the aged backlog outranks new interactive jobs.
    pub start_before_aging: Percentiles,
    /// The page clock's offset from the machine's, and how well it is known (half the
    /// tightest round trip).
    pub clock_offset_ms: f64,
    pub cpu: Option<CpuUse>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ColdStartResult {
    pub enqueue_many_jobs: usize,
    /// `enqueueMany` until it resolved (saved), in ms.
    pub enqueue_many_ms: f64,
    /// From that acknowledgement to the batch's first arrival at the server.
    pub first_send_after_ack_ms: f64,
    /// Jobs still waiting in the stopped worker.
    pub jobs_held: u64,
    /// From the page's message that woke the stopped worker to its first request's arrival.
    pub first_send_ms: f64,
    /// The same message's answer (a status snapshot) on the page.
    pub first_answer_ms: f64,
    /// The answer to the same message from a stopped worker with an empty queue: what the
    /// start costs before any job is loaded.
    pub empty_first_answer_ms: f64,
    /// The worker stopped again and the page loaded anew.
    pub page_load: PageLoadWake,
    /// Times the browser started the worker again by itself right after it was stopped
    /// mid-work (stopped again before measuring).
    pub restarts_after_stop: u32,
    pub cpu: Option<CpuUse>,
}

/// A stopped worker woken by a page load, timed from the navigation's start.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PageLoadWake {
    /// Jobs waiting when the page's status came.
    pub jobs_held: u64,
    /// To the first request's arrival.
    pub first_send_ms: f64,
    /// To the page's first status (its client registered, then asked).
    pub first_answer_ms: f64,
}

/// One target and whether this run met it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetCheck {
    pub what: String,
    pub target: String,
    pub measured: String,
    pub met: bool,
}

impl TargetCheck {
    /// The verdict as a line of a report: `ok` or `MISS`, what, the figure, the target, with
    /// `what` padded to `width`.
    pub fn line(&self, width: usize) -> String {
        format!(
            "  {:<4} {:<width$} {:<14} target {}\n",
            if self.met { "ok" } else { "MISS" },
            self.what,
            self.measured,
            self.target
        )
    }
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub quick: bool,
    pub sizes: Sizes,
    pub limit: u32,
    pub window_ms: u64,
    pub concurrency: u32,
    pub cores: usize,
    pub bulk: Vec<BulkResult>,
    pub enqueue: AckResult,
    pub interactive: InteractiveResult,
    pub cold_start: ColdStartResult,
    pub targets: Vec<TargetCheck>,
    /// With `--peers`: Sluice and other rate limiters on the same workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peers: Option<peers::PeersReport>,
    pub seconds: f64,
}

/// Runs every measurement; `progress` hears what is going on.
pub async fn run(options: &BenchOptions, progress: &dyn Fn(&str)) -> Result<Report, BenchError> {
    let started = Instant::now();
    // Before minutes of measuring, not after: the peers must be installed.
    let peer_files = if options.peers {
        Some(peers::PeerFiles::find(&options.peer_options)?)
    } else {
        None
    };
    let sizes = Sizes::for_options(options);
    let mut bulk = Vec::new();
    for (jobs, latency_ms, cross_origin) in [
        (sizes.bulk_jobs, 30, true),
        (sizes.bulk_jobs, 30, false),
        (sizes.slow_bulk_jobs, 300, false),
    ] {
        let place = if cross_origin {
            "cross-origin, jitter both ways"
        } else {
            "same origin"
        };
        progress(&format!(
            "bulk: {jobs} jobs, {LIMIT}/s, {latency_ms} ms latency, {place}"
        ));
        bulk.push(run_bulk(options, jobs, latency_ms, cross_origin).await?);
    }
    progress(&format!(
        "enqueue: {} single enqueues",
        sizes.single_enqueues
    ));
    let enqueue = run_acks(options, sizes.single_enqueues).await?;
    progress(&format!(
        "interactive: {} starts during a bulk job",
        sizes.interactive_samples
    ));
    let interactive = run_interactive(options, sizes.interactive_samples).await?;
    progress(&format!(
        "enqueueMany of {} and a cold start holding them",
        sizes.many_jobs
    ));
    let cold_start = run_cold_start(options, sizes.many_jobs, 1, progress).await?;
    let targets = check_targets(&bulk, &enqueue, &interactive, &cold_start);
    let peers = match &peer_files {
        Some(files) => Some(peers::run_with(options, files, progress).await?),
        None => None,
    };
    Ok(Report {
        quick: options.quick,
        sizes,
        limit: LIMIT,
        window_ms: WINDOW_MS,
        concurrency: CONCURRENCY,
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        bulk,
        enqueue,
        interactive,
        cold_start,
        targets,
        peers,
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn api(latency_ms: u64) -> ApiConfig {
    ApiConfig {
        limit: LIMIT,
        window_ms: WINDOW_MS,
        latency_ms,
        seed: Some(1),
        ..ApiConfig::default()
    }
}

/// Arrival jitter of the cross-origin runs: each request held 0..this before it is counted.
const ARRIVAL_JITTER_MS: u64 = 10;
/// Answer jitter of the cross-origin runs: each answer's delay varies by ± this.
const ANSWER_JITTER_MS: u64 = 10;

/// The engine's own share of the limit on the cross-origin bulk path (the peers' path too),
/// on the simulator's fake clock: `jobs` creates, [`LIMIT`] per second, [`CONCURRENCY`] in
/// flight, `sluice simulate --latency-ms 35 --arrival-jitter-ms 10 --jitter-ms 20` (the API's
/// 30 ms hold with its 0-10 ms of arrival jitter, 5 on average, and its answers' ±10 ms: a
/// spread of 20), the median over seeds 1-5. A browser run cannot beat the engine on its own
/// path, so the share targets of that path are relative to this (docs/benchmarks.md: 0.9746
/// for 2,000 jobs, where the old fixed target of 0.975 sat above it).
pub fn simulated_ceiling(jobs: usize, latency_ms: u64) -> Result<f64, String> {
    use crate::simulate::SimulateOptions;
    let latency_ms = latency_ms + ARRIVAL_JITTER_MS / 2;
    let jitter_ms = 2 * ANSWER_JITTER_MS;
    let mut shares = Vec::new();
    for seed in 1..=5 {
        let options = SimulateOptions {
            jobs,
            limit: LIMIT,
            window_ms: WINDOW_MS,
            concurrency: CONCURRENCY,
            one_way_ms: SimulateOptions::one_way_for(
                latency_ms,
                jitter_ms,
                Some(ARRIVAL_JITTER_MS),
            ),
            jitter_ms,
            arrival_jitter_ms: Some(ARRIVAL_JITTER_MS),
            seed,
            ..SimulateOptions::default()
        };
        shares.push(crate::simulate::run(&options)?.report.share_of_limit);
    }
    Ok(peers::Spread::of(&shares).median)
}

/// What a browser run on the cross-origin path is asked of its share: this much of
/// [`simulated_ceiling`] for the median of runs, and [`LOWEST_OF_CEILING`] for the lowest.
/// Sluice's worker reached 0.994 of it in a good sitting (0.969 against 0.9746): the browser's
/// own timing (its network process, the worker's thread, timers on whole milliseconds) costs
/// the rest, and a sitting's spread is about ±0.002.
pub const MEDIAN_OF_CEILING: f64 = 0.99;
pub const LOWEST_OF_CEILING: f64 = 0.985;

async fn rig(options: &BenchOptions, latency_ms: u64) -> Result<Rig, Error> {
    rig_at(options, api(latency_ms), false).await
}

/// The API of the cross-origin bulk run: latency and jitter both ways, where users are.
fn cross_origin_api(latency_ms: u64) -> ApiConfig {
    ApiConfig {
        jitter_ms: ANSWER_JITTER_MS,
        arrival_jitter_ms: ARRIVAL_JITTER_MS,
        ..api(latency_ms)
    }
}

async fn rig_at(options: &BenchOptions, api: ApiConfig, cross_origin: bool) -> Result<Rig, Error> {
    Rig::start(RigOptions {
        api,
        chromium: options.chromium.clone(),
        cross_origin,
        ..RigOptions::default()
    })
    .await
}

/// Configures the one budget every measurement uses: the server's limit, told truthfully.
async fn configure(tab: &Tab) -> Result<(), Error> {
    configure_for(tab, "location.origin").await
}

/// [`configure`], for the API at `origin_js` (a page expression).
async fn configure_for(tab: &Tab, origin_js: &str) -> Result<(), Error> {
    tab.eval(&format!(
        "await e2e.configure({{ budgets: [{{ name: 'api', windows: [{{ limit: {LIMIT}, \
         lengthMs: {WINDOW_MS} }}], concurrency: {CONCURRENCY}, matchPrefixes: \
         [{origin_js} + '/api/'] }}] }});"
    ))
    .await
    .map(drop)
}

/// Page script: the jobs of a bulk group for the API at `origin`, built before any timing
/// starts.
fn bulk_jobs_js(n: usize, group: &str, origin: &str) -> String {
    format!(
        "window.bulkJobs = Array.from({{ length: {n} }}, (_, i) => ({{ url: '{origin}/api/contacts', \
         kind: 'create', body: {{ name: '{group} ' + i, email: 'c' + i + '@example.com' }} }}));"
    )
}

/// Saves each profiled thread's profile as `<stem>-<thread><n>.cpuprofile` in `dir` and
/// prints its functions with the most self time.
async fn save_profiles(
    browser: &crate::browser::Browser,
    threads: &[ProfiledThread],
    dir: &std::path::Path,
    stem: &str,
    progress: &dyn Fn(&str),
) -> Result<(), Error> {
    for (i, thread) in threads.iter().enumerate() {
        let profile = browser.stop_profile(thread).await?;
        // Numbered: a browser may have more than one page (the driver's blank one).
        let file = dir.join(format!("{stem}-{}{i}.cpuprofile", thread.label));
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&file, profile.to_string()))
            .map_err(|e| Error::Server(format!("saving {}: {e}", file.display())))?;
        progress(&format!(
            "  the {} thread, self time ({}):",
            thread.label,
            file.display()
        ));
        for t in self_times(&profile, 25) {
            progress(&format!("  {:9.1} ms  {}", t.ms, t.function));
        }
    }
    Ok(())
}

fn cpu_use(before: Option<CpuSample>, rig: &Rig) -> Option<CpuUse> {
    let after = rig.browser.cpu_sample()?;
    before?.until(&after)
}
