//! `sluice`: demo server, simulator and benchmark.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use sluice::api::{self, ApiConfig, ApiHandle, HeaderMode, RetryAfterForm};
use sluice::package::Package;
use sluice::server::{self, WwwSource};
use sluice::simulate::WindowList;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Options of `serve`, accepted without the subcommand so `cargo run` starts the demo.
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the demo page, the worker and the rate-limited demo API (the default).
    Serve(ServeArgs),
    /// Run the engine against a simulated strict server on a fake clock; prints a JSON report.
    Simulate(SimulateArgs),
    /// Measure the real worker in headless Chromium against the strict API; prints a table
    /// and writes JSON.
    Bench(BenchArgs),
    /// Write the package an app installs (`npm install DIR`): the worker entry and its wasm,
    /// the page client with its TypeScript declarations, and package.json.
    Build(BuildArgs),
    /// Forward an API's routes with the proxy's own credential, within the API's budget shared
    /// by every instance (through Redis with --redis, else in memory).
    Proxy(sluice::proxy::ProxyArgs),
}

#[derive(Args, Clone)]
struct BuildArgs {
    /// The folder to write (created if needed; the worker wasm of an older build there is
    /// removed, other files are left alone).
    #[arg(long, default_value = "target/sluice-package")]
    out: PathBuf,
}

fn build(args: BuildArgs) -> Result<(), MainError> {
    let package = Package::embedded().map_err(|e| MainError::Package(e.to_string()))?;
    let written = package
        .write(&args.out)
        .map_err(|e| MainError::Package(e.to_string()))?;
    for path in &written {
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        println!("{:>9.1} KiB  {}", len as f64 / 1024.0, path.display());
    }
    println!(
        "sluice build: package {} {} in {}; an app installs it with `npm install {}`",
        sluice::package::NAME,
        env!("CARGO_PKG_VERSION"),
        args.out.display(),
        args.out.display()
    );
    Ok(())
}

#[derive(Args, Clone)]
#[command(group(clap::ArgGroup::new("peer_mode").args(["peers", "peers_only"])))]
struct BenchArgs {
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
    limiters: bool,
    /// Runs of each client per limiter with --limiters (default 2).
    #[arg(long, requires = "limiters", value_parser = clap::value_parser!(u16).range(1..))]
    runs: Option<u16>,
    /// Creates per run with --limiters (default 200).
    #[arg(long, requires = "limiters", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    jobs: Option<u32>,
    /// Only this limiter with --limiters (nginx, nginx-burst-5, erl-draft-8 or rlf); repeat
    /// for several.
    #[arg(long = "limiter", requires = "limiters")]
    only_limiters: Vec<String>,
}

async fn bench(args: BenchArgs) -> Result<(), MainError> {
    use sluice::bench::peers::{self, PeerOptions};
    use sluice::bench::{run, table, BenchOptions};
    if args.proxy {
        return bench_proxy(args).await;
    }
    if args.limiters {
        return bench_limiters(args).await;
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

const DEFAULT_BENCH_OUT: &str = "target/bench.json";

#[derive(Args, Clone)]
struct SimulateArgs {
    /// Creates enqueued at once as one bulk job.
    #[arg(long, default_value_t = 2_000)]
    jobs: usize,
    /// The server's real limit per window.
    #[arg(long, default_value_t = 100)]
    limit: u32,
    #[arg(long, default_value_t = 1_000)]
    window_ms: u64,
    /// The limit the engine is told (defaults to the real one).
    #[arg(long)]
    configured_limit: Option<u32>,
    /// Several windows the server enforces together, as limit/length with ms, s, m or h:
    /// `10/1s,3000/1h`. Instead of --limit/--window-ms; also what the engine is told unless
    /// --configured-windows says otherwise.
    #[arg(long, value_name = "LIMIT/LENGTH,...", conflicts_with_all = ["limit", "window_ms", "configured_limit"])]
    windows: Option<WindowList>,
    /// The windows the engine is told, in the form of --windows (defaults to the real ones).
    #[arg(
        long,
        value_name = "LIMIT/LENGTH,...",
        conflicts_with = "configured_limit"
    )]
    configured_windows: Option<WindowList>,
    /// How the engine's limiter counts.
    #[arg(long, value_enum, default_value_t = SimAlgorithm::SlidingLog)]
    algorithm: SimAlgorithm,
    /// Share (0..1) of the jobs that are interactive-lane creates arriving one by one, spread
    /// over the run; the report gives each lane's p50/p95 wait for its first start.
    #[arg(long, default_value_t = 0.0)]
    interactive_share: f64,
    /// Run the fixed grid of conditions (5 seeds each) and print one table with each cell's
    /// target and verdict; writes JSON to --out (default target/simulate-matrix.json). Only
    /// --algorithm, --interactive-share, --target-utilization and --save-ms apply to it.
    #[arg(long)]
    matrix: bool,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 4)]
    concurrency: u32,
    /// Mean round trip; each way varies uniformly over --jitter-ms around half of it (one-way
    /// delays spread over the jitter, round trips over twice that).
    #[arg(long, default_value_t = 30)]
    latency_ms: u64,
    #[arg(long, default_value_t = 5)]
    jitter_ms: u64,
    /// The way there spreads over this instead, and the way back over --jitter-ms: `sluice
    /// bench`'s path (0-10 ms there, ±10 ms back, 35 ms on average) is `--latency-ms 35
    /// --arrival-jitter-ms 10 --jitter-ms 20`.
    #[arg(long)]
    arrival_jitter_ms: Option<u64>,
    #[arg(long, value_enum, default_value_t = SimRetryAfter::Delta)]
    retry_after: SimRetryAfter,
    #[arg(long, value_enum, default_value_t = SimHeaders::Xrate)]
    headers: SimHeaders,
    /// Share (0..1) of requests answered 503.
    #[arg(long, default_value_t = 0.0)]
    fault_rate: f64,
    /// Share (0..1) of requests applied whose response is lost (the client times out).
    #[arg(long, default_value_t = 0.0)]
    lost_rate: f64,
    /// Share (0..1) of requests applied and answered --slow-ms late: a server slow now and
    /// then, or (beyond the 15 s attempt timeout) hung requests.
    #[arg(long, default_value_t = 0.0)]
    slow_rate: f64,
    /// How much later a --slow-rate answer comes.
    #[arg(long, default_value_t = 2_000)]
    slow_ms: u64,
    /// The server also refuses an arrival less than one interval (window / limit) after the
    /// last it accepted, as nginx's `limit_req` without `burst=` does.
    #[arg(long)]
    no_burst: bool,
    /// The first request's way there takes this much longer (its CORS preflight goes first).
    #[arg(long, default_value_t = 0)]
    first_extra_ms: u64,
    /// Requests per second other callers spend from the same quota.
    #[arg(long, default_value_t = 0.0)]
    other_callers: f64,
    /// The server also counts tokens, this many a minute: the jobs become completions of
    /// random size that say their bound as their cost, and the report adds `tokens` (the
    /// share of the token limit reached, the most tokens in any minute).
    #[arg(long)]
    tokens_per_minute: Option<u32>,
    /// The completions' mean bound in tokens (each is a quarter to twice it; each really spends
    /// half to all of its bound).
    #[arg(long, default_value_t = 1_000)]
    mean_tokens: u64,
    /// Times the worker is killed and the engine rebuilt from its saved state, spread over the run.
    #[arg(long, default_value_t = 0)]
    rebuilds: usize,
    /// How long one save to storage takes (IndexedDB in a busy browser: a few ms).
    #[arg(long, default_value_t = 3)]
    save_ms: u64,
    /// Share of the limit to aim for, on top of the margin measured from round trips (1: none).
    #[arg(long, default_value_t = 1.0)]
    target_utilization: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the report to this file.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum SimRetryAfter {
    Delta,
    Date,
    None,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum SimAlgorithm {
    SlidingLog,
    TokenBucket,
    Gcra,
    FixedWindow,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum SimHeaders {
    None,
    Xrate,
    Ietf,
    /// `x-ratelimit-remaining-requests`, Go-duration resets (OpenAI's family).
    ResourceSuffix,
    /// `anthropic-ratelimit-requests-*`, RFC 3339 resets (a vendor prefix).
    VendorPrefix,
    /// `X-HubSpot-RateLimit-Max` / `-Interval-Milliseconds` beside `-Daily` (HubSpot's).
    IntervalDaily,
}

fn write_json(path: &std::path::Path, json: &str) -> Result<(), MainError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| MainError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(path, json).map_err(|source| MainError::Write {
        path: path.to_path_buf(),
        source,
    })
}

fn simulate(args: SimulateArgs) -> Result<(), MainError> {
    use sluice::simulate::{matrix_table, run, run_matrix, SimulateOptions};
    use sluice_shared::config::Algorithm;
    use sluice_shared::sim::{HeaderStyle, RetryAfterForm as SimForm};
    let options = SimulateOptions {
        jobs: args.jobs,
        limit: args.limit,
        window_ms: args.window_ms,
        windows: args.windows.map(|w| w.0),
        configured_windows: args.configured_windows.map(|w| w.0),
        algorithm: match args.algorithm {
            SimAlgorithm::SlidingLog => Algorithm::SlidingLog,
            SimAlgorithm::TokenBucket => Algorithm::TokenBucket,
            SimAlgorithm::Gcra => Algorithm::Gcra,
            SimAlgorithm::FixedWindow => Algorithm::FixedWindow,
        },
        interactive_share: args.interactive_share,
        concurrency: args.concurrency,
        // Each way's jitter adds half its spread to the mean.
        one_way_ms: args.latency_ms.saturating_sub(
            args.arrival_jitter_ms
                .unwrap_or(args.jitter_ms)
                .saturating_add(args.jitter_ms)
                / 2,
        ) / 2,
        jitter_ms: args.jitter_ms,
        arrival_jitter_ms: args.arrival_jitter_ms,
        retry_after: match args.retry_after {
            SimRetryAfter::Delta => SimForm::Delta,
            SimRetryAfter::Date => SimForm::HttpDate,
            SimRetryAfter::None => SimForm::None,
        },
        headers: match args.headers {
            SimHeaders::None => HeaderStyle::None,
            SimHeaders::Xrate => HeaderStyle::XRateLimit,
            SimHeaders::Ietf => HeaderStyle::Ietf,
            SimHeaders::ResourceSuffix => HeaderStyle::ResourceSuffix,
            SimHeaders::VendorPrefix => HeaderStyle::VendorPrefix,
            SimHeaders::IntervalDaily => HeaderStyle::IntervalDaily,
        },
        fault_rate: args.fault_rate,
        lost_response_rate: args.lost_rate,
        slow_rate: args.slow_rate,
        slow_ms: args.slow_ms,
        no_burst: args.no_burst,
        first_extra_ms: args.first_extra_ms,
        other_callers_per_s: args.other_callers,
        tokens_per_minute: args.tokens_per_minute,
        mean_tokens: args.mean_tokens,
        configured_limit: args.configured_limit,
        target_utilization: args.target_utilization,
        rebuilds: args.rebuilds,
        save_ms: args.save_ms,
        seed: args.seed,
    };
    if args.matrix {
        // A measurement: missed targets are in the table and the JSON, not the exit code.
        let report = run_matrix(&options).map_err(MainError::Simulate)?;
        let json = serde_json::to_string_pretty(&report)
            .map_err(|e| MainError::Simulate(e.to_string()))?;
        let path = args
            .out
            .unwrap_or_else(|| PathBuf::from("target/simulate-matrix.json"));
        write_json(&path, &json)?;
        eprintln!(
            "sluice simulate: {} runs in {:.1} s; JSON: {}",
            report.cells.iter().map(|c| c.runs.len()).sum::<usize>(),
            report.elapsed_ms as f64 / 1000.0,
            path.display()
        );
        // The verdict line comes last.
        print!("{}", matrix_table(&report));
        return Ok(());
    }
    let report = run(&options).map_err(MainError::Simulate)?;
    let json =
        serde_json::to_string_pretty(&report).map_err(|e| MainError::Simulate(e.to_string()))?;
    if let Some(path) = &args.out {
        write_json(path, &json)?;
    }
    println!("{json}");
    Ok(())
}

#[derive(Args, Clone)]
struct ServeArgs {
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Also serve the demo API alone on this port, for trying the worker against a
    /// cross-origin API. It shares state with the same-origin API.
    #[arg(long)]
    api_port: Option<u16>,
    /// Serve www/ files from this directory instead of the copy embedded at build time.
    #[arg(long)]
    www: Option<PathBuf>,
    #[command(flatten)]
    api: ApiArgs,
}

#[derive(Args, Clone)]
struct ApiArgs {
    /// Requests admitted per window.
    #[arg(long, default_value_t = 10)]
    limit: u32,
    /// Sliding window length.
    #[arg(long, default_value_t = 1000)]
    window_ms: u64,
    #[arg(long, default_value_t = 300)]
    latency_ms: u64,
    /// Latency varies uniformly within latency ± jitter.
    #[arg(long, default_value_t = 0)]
    jitter_ms: u64,
    /// Hold each API request a random 0..=N ms before it arrives (is counted against the limit
    /// and applied), as a network delays the way there: requests sent in order may arrive
    /// reordered. 0 is off.
    #[arg(long, default_value_t = 0)]
    arrival_jitter_ms: u64,
    /// Share (0..1) of admitted requests answered 500/503 without being applied.
    #[arg(long, default_value_t = 0.0)]
    fault_rate: f64,
    /// Share (0..1) of admitted requests applied but answered only after --hang-ms.
    #[arg(long, default_value_t = 0.0)]
    hang_rate: f64,
    #[arg(long, default_value_t = 120_000)]
    hang_ms: u64,
    #[arg(long, value_enum, default_value_t = RetryAfterForm::Delta)]
    retry_after_form: RetryAfterForm,
    #[arg(long, value_enum, default_value_t = HeaderMode::Xrate)]
    headers: HeaderMode,
    /// Count rejected arrivals against the limit too (a punitive server).
    #[arg(long)]
    count_rejected: bool,
    /// Seed for arrival and answer jitter and fault rolls (random if absent).
    #[arg(long)]
    seed: Option<u64>,
}

impl From<&ApiArgs> for ApiConfig {
    fn from(a: &ApiArgs) -> Self {
        ApiConfig {
            limit: a.limit,
            window_ms: a.window_ms,
            latency_ms: a.latency_ms,
            jitter_ms: a.jitter_ms,
            arrival_jitter_ms: a.arrival_jitter_ms,
            fault_rate: a.fault_rate,
            hang_rate: a.hang_rate,
            hang_ms: a.hang_ms,
            retry_after_form: a.retry_after_form,
            headers: a.headers,
            count_rejected: a.count_rejected,
            seed: a.seed,
            // Set through the control API only (`bearer` in `POST /__sluice/config`).
            bearer: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum MainError {
    #[error("invalid API settings: {0}")]
    Config(#[from] api::ApiConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("server failed: {0}")]
    Serve(std::io::Error),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("simulation: {0}")]
    Simulate(String),
    #[error("build: {0}")]
    Package(String),
    #[error("bench: {0}")]
    Bench(sluice::bench::BenchError),
    #[error("{0}")]
    Proxy(#[from] sluice::proxy::ProxyConfigError),
    #[error(transparent)]
    ProxyRun(sluice::proxy::RunError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Serve(args)) => run(serve(args)),
        Some(Command::Simulate(args)) => simulate(args),
        Some(Command::Bench(args)) => run(bench(args)),
        Some(Command::Build(args)) => build(args),
        Some(Command::Proxy(args)) => run(proxy(args)),
        None => run(serve(cli.serve)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(fut: impl std::future::Future<Output = Result<(), MainError>>) -> Result<(), MainError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(MainError::Runtime)?
        .block_on(fut)
}

async fn serve(args: ServeArgs) -> Result<(), MainError> {
    let config = ApiConfig::from(&args.api);
    config.validate()?;
    let api = ApiHandle::new(config);
    let www = match args.www {
        Some(dir) => WwwSource::Dir(dir),
        None => WwwSource::Embedded,
    };

    let addr = SocketAddr::new(args.host, args.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| MainError::Bind { addr, source })?;
    let local = listener.local_addr().map_err(MainError::Serve)?;
    println!("sluice demo: http://{local}/");

    let mut other_origins = Vec::new();
    if let Some(port) = args.api_port {
        let api_addr = SocketAddr::new(args.host, port);
        let bound = server::serve_in_background(api_addr, api::router(api.clone()))
            .await
            .map_err(|source| MainError::Bind {
                addr: api_addr,
                source,
            })?;
        println!("sluice API (cross-origin): http://{bound}/api/");
        // The demo's worker script allows it, or the worker would refuse jobs for it.
        other_origins.push(format!("http://{bound}"));
    }

    let app = server::router_allowing(api, www, other_origins);
    // No graceful shutdown: held-back ("hanging") responses would delay Ctrl-C by minutes.
    tokio::select! {
        r = axum::serve(listener, app) => r.map_err(MainError::Serve),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

async fn proxy(args: sluice::proxy::ProxyArgs) -> Result<(), MainError> {
    sluice::proxy::run(args).await.map_err(MainError::ProxyRun)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_is_the_default_and_takes_the_same_flags() {
        let bare =
            Cli::try_parse_from(["sluice", "--port", "8099", "--limit", "3"]).expect("parse");
        assert!(bare.command.is_none());
        assert_eq!((bare.serve.port, bare.serve.api.limit), (8099, 3));
        let sub =
            Cli::try_parse_from(["sluice", "serve", "--retry-after-form", "date"]).expect("parse");
        let Some(Command::Serve(args)) = sub.command else {
            panic!("serve expected");
        };
        assert_eq!(args.api.retry_after_form, RetryAfterForm::Date);
        assert!(Cli::try_parse_from(["sluice", "--port", "1", "serve"]).is_err());
    }

    #[test]
    fn arrival_jitter_flag_reaches_the_api_config() {
        for argv in [
            &["sluice", "--arrival-jitter-ms", "25"][..],
            &["sluice", "serve", "--arrival-jitter-ms", "25"][..],
        ] {
            let cli = Cli::try_parse_from(argv).expect("parse");
            let args = match cli.command {
                Some(Command::Serve(args)) => args,
                _ => cli.serve,
            };
            let config = ApiConfig::from(&args.api);
            assert_eq!((config.arrival_jitter_ms, config.jitter_ms), (25, 0));
        }
        let bare = Cli::try_parse_from(["sluice"]).expect("parse");
        assert_eq!(ApiConfig::from(&bare.serve.api).arrival_jitter_ms, 0);
        let help = Cli::command()
            .find_subcommand_mut("serve")
            .expect("serve")
            .render_long_help()
            .to_string();
        assert!(help.contains("--arrival-jitter-ms"), "{help}");
    }

    fn bench_args(argv: &[&str]) -> Result<BenchArgs, clap::Error> {
        let cli = Cli::try_parse_from(argv)?;
        match cli.command {
            Some(Command::Bench(args)) => Ok(args),
            _ => panic!("bench expected from {argv:?}"),
        }
    }

    #[test]
    fn bench_limiters_takes_runs_jobs_and_limiters_only_with_it() {
        let args = bench_args(&["sluice", "bench", "--limiters"]).expect("parse");
        assert!(args.limiters);
        assert_eq!((args.runs, args.jobs), (None, None));
        assert!(args.only_limiters.is_empty());
        let args = bench_args(&[
            "sluice",
            "bench",
            "--limiters",
            "--runs",
            "1",
            "--jobs",
            "40",
            "--limiter",
            "nginx",
            "--limiter",
            "rlf",
        ])
        .expect("parse");
        assert_eq!((args.runs, args.jobs), (Some(1), Some(40)));
        assert_eq!(args.only_limiters, ["nginx", "rlf"]);
        // Sizes and choices belong to --limiters; it is a mode of its own.
        for argv in [
            &["sluice", "bench", "--runs", "1"][..],
            &["sluice", "bench", "--jobs", "40"][..],
            &["sluice", "bench", "--limiter", "nginx"][..],
            &["sluice", "bench", "--limiters", "--runs", "0"][..],
            &["sluice", "bench", "--limiters", "--peers"][..],
            &["sluice", "bench", "--limiters", "--proxy"][..],
        ] {
            assert!(bench_args(argv).is_err(), "{argv:?} parsed");
        }
    }
}
