//! `sluice`: demo server, simulator and benchmark.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cli::bench::{bench, BenchArgs};
use cli::build::{build, BuildArgs};
use cli::serve::{serve, ServeArgs};
use cli::simulate::{simulate, SimulateArgs};
use cli::MainError;

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

async fn proxy(args: sluice::proxy::ProxyArgs) -> Result<(), MainError> {
    sluice::proxy::run(args).await.map_err(MainError::ProxyRun)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use sluice::api::{ApiConfig, RetryAfterForm};

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
