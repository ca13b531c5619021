//! `sluice serve` (also `sluice` alone): the demo page, the worker and the demo API, with the
//! API's settings as flags.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::Args;
use sluice::api::{self, ApiConfig, ApiHandle, HeaderMode, RetryAfterForm};
use sluice::server::{self, WwwSource};

use super::MainError;

#[derive(Args, Clone)]
pub(crate) struct ServeArgs {
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    #[arg(long, default_value_t = 8080)]
    pub(crate) port: u16,
    /// Also serve the demo API alone on this port, for trying the worker against a
    /// cross-origin API. It shares state with the same-origin API.
    #[arg(long)]
    api_port: Option<u16>,
    /// Serve www/ files from this directory instead of the copy embedded at build time.
    #[arg(long)]
    www: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) api: ApiArgs,
}

#[derive(Args, Clone)]
pub(crate) struct ApiArgs {
    /// Requests admitted per window.
    #[arg(long, default_value_t = 10)]
    pub(crate) limit: u32,
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
    pub(crate) retry_after_form: RetryAfterForm,
    #[arg(long, value_enum, default_value_t = HeaderMode::Xrate)]
    headers: HeaderMode,
    /// Count rejected arrivals against the limit too (a punitive server).
    #[arg(long)]
    count_rejected: bool,
    /// Seed for arrival and answer jitter and fault rolls (random if absent).
    #[arg(long)]
    seed: Option<u64>,
    /// Share (0..1) of batch items answered 503 inside the batch's answer, not applied.
    #[arg(long, default_value_t = 0.0)]
    batch_item_fail_rate: f64,
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
            batch_item_fail_rate: a.batch_item_fail_rate,
            // Staged through the control API only, like a script: a count spent by traffic.
            batch_sub_rate_limited: 0,
        }
    }
}

pub(crate) async fn serve(args: ServeArgs) -> Result<(), MainError> {
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
