//! `sluice-proxy` (also `sluice proxy`): one upstream budget for many browsers.
//!
//! A browser limiter protects one user; when an app's users share one API key, their workers
//! together exceed its limit however politely each paces itself. The proxy holds the key, and
//! every instance asks one shared budget (Redis, or this process's memory for one instance)
//! before it forwards a request:
//!
//! - [`config`]: flags and file, checked once.
//! - [`rule`]: the admission rule (fresh store, pause, concurrency leases, windows, fair
//!   shares) and its in-memory form; `lua/acquire.lua` and `lua/observe.lua` are its Redis form.
//! - [`memory_store`], [`redis_store`]: where a budget's state lives.
//! - [`redis_server`]: a `redis-server` of one's own, for tests and the benchmark.
//! - [`store`]: the one door to either, with the policy for a store that fails.
//! - [`handler`]: one request: CORS, route, caller, wait or refuse, forward with the
//!   credential, learn from the answer, state the caller's share.
//! - [`run`]: the command line's whole run (the `sluice-proxy` binary and `sluice proxy`).
//!
//! Its benchmark (`sluice bench --proxy`) and its tests with real parts (Redis, the strict demo
//! API as the upstream, Chromium) live in the `sluice` package, which has the demo API.

pub mod config;
pub mod handler;
pub mod memory_store;
pub mod redis_server;
pub mod redis_store;
pub mod rule;
pub mod store;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;

pub use config::{ProxyArgs, ProxyConfig, ProxyConfigError};

/// Serves the proxy on `listener` until the future is dropped.
pub async fn serve(listener: tokio::net::TcpListener, config: ProxyConfig) -> std::io::Result<()> {
    let app = router(config).map_err(std::io::Error::other)?;
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
}

/// The proxy as a router (every path goes to [`handler::handle`]).
pub fn router(config: ProxyConfig) -> Result<Router, redis_store::StoreError> {
    let state = Arc::new(handler::Proxy::new(config)?);
    Ok(Router::new().fallback(handler::handle).with_state(state))
}

/// Binds `addr` and serves the proxy in the background of the current runtime.
pub async fn spawn(addr: SocketAddr, config: ProxyConfig) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = router(config).map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await;
    });
    Ok(local)
}

/// Why [`run`] ended early.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ProxyConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the proxy stopped: {0}")]
    Serve(std::io::Error),
}

/// The command line's whole run: reads the configuration (flags, file, and the credential
/// from the environment), listens, says what it does, and serves until Ctrl-C.
pub async fn run(args: ProxyArgs) -> Result<(), RunError> {
    let config = ProxyConfig::resolve(&args, &|name| std::env::var(name).ok())?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| RunError::Bind {
            addr: args.listen,
            source,
        })?;
    let local = listener.local_addr().map_err(RunError::Serve)?;
    let budget = match &config.redis {
        Some(url) => format!("shared through Redis at {url}"),
        None => "in this process's memory (one instance)".into(),
    };
    let credential = match &config.credential {
        Some(c) => format!("adds its {} header", c.header),
        None => format!("adds no credential (set {})", config::CREDENTIAL_ENV),
    };
    println!(
        "sluice proxy: http://{local}/ -> {}; budget {budget}; {credential}",
        config.upstream
    );
    tokio::select! {
        r = serve(listener, config) => r.map_err(RunError::Serve),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}
