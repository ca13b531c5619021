//! `sluice simulate`: its arguments (the simulated server, the engine's settings, the grid)
//! and one run or the matrix, printed as JSON or a table.

use std::path::PathBuf;

use clap::Args;
use sluice::simulate::WindowList;

use super::{write_json, MainError};

#[derive(Args, Clone)]
pub(crate) struct SimulateArgs {
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
    /// --algorithm, --interactive-share, --target-utilization, --save-ms and --fixed-server
    /// apply to it.
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
    /// The server counts fixed windows (a counter reset on multiples of each length, as
    /// express-rate-limit and rate-limiter-flexible do) instead of sliding ones: what
    /// --algorithm fixed-window is for.
    #[arg(long)]
    fixed_server: bool,
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

pub(crate) fn simulate(args: SimulateArgs) -> Result<(), MainError> {
    use sluice::simulate::{matrix_table, run, run_matrix, SimulateOptions};
    use sluice_shared::config::Algorithm;
    use sluice_shared::sim::{HeaderStyle, RetryAfterForm as SimForm, WindowCounting};
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
        one_way_ms: SimulateOptions::one_way_for(
            args.latency_ms,
            args.jitter_ms,
            args.arrival_jitter_ms,
        ),
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
        server_counting: if args.fixed_server {
            WindowCounting::Fixed
        } else {
            WindowCounting::Sliding
        },
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
