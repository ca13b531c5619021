//! `sluice bench`: its arguments, and its modes (the main bench, `--peers-only`, `--proxy`,
//! `--limiters`, `--ceiling`) each saved as JSON and printed as a table.

use std::path::PathBuf;

use clap::Args;

use super::{write_json, MainError};

#[derive(Args, Clone)]
#[command(group(clap::ArgGroup::new("peer_mode").args(["peers", "peers_only"])))]
#[command(group(clap::ArgGroup::new("profiled_mode").args(["ceiling", "cold_start"])))]
pub(crate) struct BenchArgs {
    /// A smaller run (fewer jobs) that takes well under a minute.
    #[arg(long)]
    quick: bool,
    /// Where to write the JSON report.
    #[arg(long, default_value = DEFAULT_BENCH_OUT)]
    out: PathBuf,
    /// The Chromium to run (default: SLUICE_CHROMIUM, else chromium on PATH).
    #[arg(long)]
    chromium: Option<PathBuf>,
    /// Measure `sluice proxy` instead: three instances on one Redis (a redis-server of its
    /// own) and one in memory, 20 callers; JSON to target/bench-proxy.json unless --out.
    #[arg(long)]
    proxy: bool,
    /// Also measure Bottleneck and p-queue beside Sluice on the cross-origin bulk run (install
    /// them first: `npm ci --prefix bench/peers`).
    #[arg(long)]
    peers: bool,
    /// Only the comparison of --peers, without the other measurements (its JSON has `peers`).
    #[arg(long)]
    peers_only: bool,
    /// Runs of each client with --peers (default 3 with --quick, 5 otherwise).
    #[arg(long, requires = "peer_mode", value_parser = clap::value_parser!(u16).range(1..))]
    peer_runs: Option<u16>,
    /// Creates per run with --peers (default 2000).
    #[arg(long, requires = "peer_mode", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    peer_jobs: Option<u32>,
    /// Where the peers are installed (the directory with their package.json and
    /// node_modules; default bench/peers).
    #[arg(long, requires = "peer_mode")]
    peers_dir: Option<PathBuf>,
    /// Measure Sluice, Bottleneck and p-queue in front of real rate limiters instead: nginx
    /// limit_req without and with burst, express-rate-limit, rate-limiter-flexible, 20/s each
    /// (needs nginx-light, `npm ci --prefix tests/limiters` and `npm ci --prefix bench/peers`);
    /// JSON to target/bench-limiters.json unless --out.
    #[arg(long, conflicts_with_all = ["proxy", "peers", "peers_only", "quick"])]
    pub(crate) limiters: bool,
    /// Measure the worker's own ceiling instead: the API's limit lifted, Sluice against plain
    /// fetch loops in the worker and the page at 16 and 32 in flight, alternating (10,000
    /// POSTs a run, 3 rounds; 2,000 and 1 with --quick); JSON to target/bench-ceiling.json
    /// unless --out. Needs a quiet machine: it measures CPU.
    #[arg(long, conflicts_with_all = ["proxy", "peers", "peers_only", "limiters"])]
    ceiling: bool,
    /// Measure only `enqueueMany` of 10,000 jobs and the cold starts holding them, woken by a
    /// message and by a page load (3 runs; 2,000 jobs and 1 run with --quick); JSON to
    /// target/bench-cold-start.json unless --out.
    #[arg(long, conflicts_with_all = ["proxy", "peers", "peers_only", "limiters", "ceiling"])]
    cold_start: bool,
    /// With --ceiling or --cold-start: save CPU profiles of the worker's thread and the pages'
    /// in this folder for every run (`<client>-<in flight>-<round>-<thread>.cpuprofile`; with
    /// --cold-start of each `enqueueMany`, `enqueue-many-<round>-<thread>.cpuprofile`), for
    /// DevTools or speedscope, and print the functions with the most self time. Function names of the
    /// wasm need a build with SLUICE_WASM_NAMES=1. Profiling slows the runs: their figures
    /// are not the bench's.
    #[arg(long, requires = "profiled_mode")]
    profile: Option<PathBuf>,
    /// Runs of each client per limiter with --limiters (default 2).
    #[arg(long, requires = "limiters", value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) runs: Option<u16>,
    /// Creates per run with --limiters (default 200).
    #[arg(long, requires = "limiters", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) jobs: Option<u32>,
    /// Only this limiter with --limiters (nginx, nginx-burst-5, erl-draft-8 or rlf); repeat
    /// for several.
    #[arg(long = "limiter", requires = "limiters")]
    pub(crate) only_limiters: Vec<String>,
}

pub(crate) async fn bench(args: BenchArgs) -> Result<(), MainError> {
    use sluice::bench::peers::{self, PeerOptions};
    use sluice::bench::{run, table, BenchOptions};
    if args.proxy {
        return bench_proxy(args).await;
    }
    if args.limiters {
        return bench_limiters(args).await;
    }
    if args.ceiling {
        return bench_ceiling(args).await;
    }
    if args.cold_start {
        return bench_cold_start(args).await;
    }
    let options = BenchOptions {
        quick: args.quick,
        chromium: args.chromium,
        peers: args.peers || args.peers_only,
        peer_options: PeerOptions {
            runs: args.peer_runs.map(usize::from),
            jobs: args.peer_jobs.map(|n| n as usize),
            dir: args.peers_dir,
        },
        profile_dir: None,
    };
    let progress = |line: &str| eprintln!("sluice bench: {line}");
    let (json, text) = if args.peers_only {
        let report = peers::run(&options, &progress)
            .await
            .map_err(MainError::Bench)?;
        // The shape of the whole report's JSON, with only its `peers`.
        #[derive(serde::Serialize)]
        struct PeersOnly<'a> {
            quick: bool,
            peers: &'a peers::PeersReport,
        }
        let json = PeersOnly {
            quick: options.quick,
            peers: &report,
        };
        (serde_json::to_string_pretty(&json), peers::table(&report))
    } else {
        let report = run(&options, &progress).await.map_err(MainError::Bench)?;
        (serde_json::to_string_pretty(&report), table(&report))
    };
    save_report(json, &text, &args.out)
}

/// Where a bench mode's JSON goes: `--out` if given, else the mode's own default file.
fn bench_out(out: PathBuf, own_default: &str) -> PathBuf {
    if out == std::path::Path::new(DEFAULT_BENCH_OUT) {
        PathBuf::from(own_default)
    } else {
        out
    }
}

/// Writes a bench's JSON to `out` and prints its table for people.
fn save_report(
    json: serde_json::Result<String>,
    text: &str,
    out: &std::path::Path,
) -> Result<(), MainError> {
    let json = json.map_err(|e| MainError::Simulate(e.to_string()))?;
    write_json(out, &json)?;
    print!("{text}");
    println!("\nJSON: {}", out.display());
    Ok(())
}

async fn bench_proxy(args: BenchArgs) -> Result<(), MainError> {
    use sluice::bench::proxy::{run, table};
    let report = run(args.quick, &|line| {
        eprintln!("sluice bench --proxy: {line}")
    })
    .await
    .map_err(|e| MainError::Simulate(e.to_string()))?;
    save_report(
        serde_json::to_string_pretty(&report),
        &table(&report),
        &bench_out(args.out, "target/bench-proxy.json"),
    )
}

async fn bench_limiters(args: BenchArgs) -> Result<(), MainError> {
    use sluice::bench::limiters::{run, table, LimiterOptions};
    let options = sluice::bench::BenchOptions {
        chromium: args.chromium,
        ..Default::default()
    };
    let limiter_options = LimiterOptions {
        runs: args.runs.map(usize::from),
        jobs: args.jobs.map(|n| n as usize),
        only: args.only_limiters,
    };
    let report = run(&options, &limiter_options, &|line| {
        eprintln!("sluice bench --limiters: {line}")
    })
    .await
    .map_err(MainError::Bench)?;
    save_report(
        serde_json::to_string_pretty(&report),
        &table(&report),
        &bench_out(args.out, "target/bench-limiters.json"),
    )
}

async fn bench_ceiling(args: BenchArgs) -> Result<(), MainError> {
    use sluice::bench::ceiling::{run, table};
    let options = sluice::bench::BenchOptions {
        quick: args.quick,
        chromium: args.chromium,
        profile_dir: args.profile,
        ..Default::default()
    };
    let report = run(&options, &|line| {
        eprintln!("sluice bench --ceiling: {line}")
    })
    .await
    .map_err(MainError::Bench)?;
    save_report(
        serde_json::to_string_pretty(&report),
        &table(&report),
        &bench_out(args.out, "target/bench-ceiling.json"),
    )
}

async fn bench_cold_start(args: BenchArgs) -> Result<(), MainError> {
    use sluice::bench::cold_start::{run, table};
    let options = sluice::bench::BenchOptions {
        quick: args.quick,
        chromium: args.chromium,
        profile_dir: args.profile,
        ..Default::default()
    };
    let report = run(&options, &|line| {
        eprintln!("sluice bench --cold-start: {line}")
    })
    .await
    .map_err(|e| MainError::Bench(e.into()))?;
    save_report(
        serde_json::to_string_pretty(&report),
        &table(&report),
        &bench_out(args.out, "target/bench-cold-start.json"),
    )
}

const DEFAULT_BENCH_OUT: &str = "target/bench.json";
