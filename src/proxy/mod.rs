//! `sluice proxy`: one upstream budget for many browsers.
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
//! - [`bench`]: `sluice bench --proxy`.
//! - [`redis_server`]: a `redis-server` of one's own, for tests and the benchmark.
//! - [`store`]: the one door to either, with the policy for a store that fails.
//! - [`handler`]: one request: CORS, route, caller, wait or refuse, forward with the
//!   credential, learn from the answer, state the caller's share.

pub mod bench;
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
