//! Starting a server in the background: shared by the demo server ([`crate::server`]), the demo
//! API alone ([`crate::api::spawn`]), the proxy and the test harness, so that none of them has to
//! import another for it (the API and the server are layered: the server serves the API, never
//! the other way round).

use std::net::SocketAddr;

use axum::Router;

/// Binds `addr` now (so the port is known and a bind error is returned) and serves `router`
/// on a spawned task.
pub async fn serve_in_background(addr: SocketAddr, router: Router) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            eprintln!("sluice: server on {local} stopped: {e}");
        }
    });
    Ok(local)
}
