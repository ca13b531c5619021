//! A plain Chrome DevTools Protocol connection to the browser (one websocket, flattened
//! sessions).
//!
//! It watches targets and attaches to every page and every service worker as they appear:
//! - service workers, to read their console and to emulate the network on the worker's own
//!   target (offline on the page alone does not stop the worker's fetches). Workers are
//!   auto-attached with "wait for debugger on start", at their first start and at every
//!   restart, so that offline emulation is in place before their first line runs; they are
//!   then told to run;
//! - pages, for their console, `Runtime.evaluate`, `Page.*` and the `ServiceWorker` domain
//!   (stop workers, registrations, sync events), which goes through one page session.
//!
//! A client that auto-attaches with "wait for debugger on start" must never detach from the
//! workers: a detached worker is left paused before its first line at every restart, and
//! `register()` never resolves. This connection stays attached for the browser's life.
//!
//! Here: the connection, its calls and what it has learnt ([`State`]); `dispatch.rs` takes
//! what comes from the browser, `workers.rs` and `pages.rs` set up the targets of each kind.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, oneshot};

mod dispatch;
mod pages;
mod workers;

/// How long an ordinary CDP command may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Clone)]
pub struct Cdp {
    inner: Arc<Inner>,
}

struct Inner {
    out: mpsc::UnboundedSender<String>,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>,
    events: broadcast::Sender<Arc<Value>>,
    state: Mutex<State>,
    started: Instant,
}

/// What the connection has learnt about the browser.
#[derive(Default)]
pub struct State {
    /// Service worker targets by target id, with our session once attached.
    pub workers: HashMap<String, Option<String>>,
    /// Page targets by target id, with our session once attached and set up.
    pub pages: HashMap<String, Option<String>>,
    /// Labels of our sessions ("worker", "page"), for the log.
    pub labels: HashMap<String, String>,
    /// The page session where `ServiceWorker.*` commands go.
    pub control: Option<String>,
    /// Whether workers are to be kept offline (applied to each new worker before it runs).
    pub offline: bool,
    /// Whether `offline` was ever set: then every (re)started worker gets it applied, since a
    /// stopped worker's session may not have taken the last change.
    pub offline_set: bool,
    /// Service worker registrations: id → scope URL (deleted ones removed).
    pub registrations: HashMap<String, String>,
    /// Service worker versions: id → the latest `ServiceWorkerVersion` object.
    pub versions: HashMap<String, Value>,
    /// How many times a service worker version started (first start and every restart).
    pub worker_starts: u64,
    /// How many times a running service worker version stopped.
    pub worker_stops: u64,
    /// Console output and exceptions of pages and workers, and notes of the driver.
    pub log: Vec<String>,
    /// Whether the browser attaches workers to us by itself (else we attach when they appear).
    pub auto_attach: bool,
}

impl Cdp {
    pub async fn connect(ws_url: &str) -> Result<Cdp, String> {
        let (ws, _) = async_tungstenite::tokio::connect_async(ws_url)
            .await
            .map_err(|e| format!("CDP connect to {ws_url}: {e}"))?;
        let (mut sink, mut stream) = ws.split();
        let (out, mut out_rx) = mpsc::unbounded_channel::<String>();
        let (events, _) = broadcast::channel(4096);
        let cdp = Cdp {
            inner: Arc::new(Inner {
                out,
                next_id: AtomicU64::new(1),
                pending: Mutex::new(HashMap::new()),
                events,
                state: Mutex::new(State::default()),
                started: Instant::now(),
            }),
        };
        tokio::spawn(async move {
            while let Some(text) = out_rx.recv().await {
                if sink.send(Message::text(text)).await.is_err() {
                    break;
                }
            }
        });
        let weak = Arc::downgrade(&cdp.inner);
        tokio::spawn(async move {
            while let Some(Ok(msg)) = stream.next().await {
                let Message::Text(text) = msg else { continue };
                let Ok(value) = serde_json::from_str::<Value>(text.as_str()) else {
                    continue;
                };
                let Some(inner) = weak.upgrade() else { break };
                Cdp { inner }.dispatch(value);
            }
            // The browser is gone: nothing will answer the calls still waiting.
            if let Some(inner) = weak.upgrade() {
                inner
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clear();
            }
        });
        cdp.call("Target.setDiscoverTargets", json!({"discover": true}), None)
            .await?;
        // Service workers attach themselves and wait for us before their first line, at their
        // first start and at every restart: the moment to take them offline if asked.
        let auto = cdp
            .call(
                "Target.setAutoAttach",
                json!({
                    "autoAttach": true,
                    "waitForDebuggerOnStart": true,
                    "flatten": true,
                    "filter": [{"type": "service_worker", "exclude": false}, {"exclude": true}],
                }),
                None,
            )
            .await;
        if let Err(e) = auto {
            cdp.note(format!(
                "auto-attach unavailable ({e}); attaching to workers as they appear"
            ));
        } else {
            cdp.state().auto_attach = true;
        }
        Ok(cdp)
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Seconds since the connection was made, the time base of the log.
    pub fn elapsed(&self) -> Duration {
        self.inner.started.elapsed()
    }

    pub fn note(&self, line: impl Into<String>) {
        let t = self.inner.started.elapsed().as_secs_f64();
        self.state().log.push(format!("{t:8.3}s {}", line.into()));
    }

    /// Every message from the browser from now on (answers excluded).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Value>> {
        self.inner.events.subscribe()
    }

    /// Sends a command (to a session if given) and waits up to [`CALL_TIMEOUT`] for its result.
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        session: Option<&str>,
    ) -> Result<Value, String> {
        self.call_with_timeout(method, params, session, CALL_TIMEOUT)
            .await
    }

    /// [`Cdp::call`] with its own time limit (a `Runtime.evaluate` may await a long promise).
    pub async fn call_with_timeout(
        &self,
        method: &str,
        params: Value,
        session: Option<&str>,
        timeout: Duration,
    ) -> Result<Value, String> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let (tx, rx) = oneshot::channel();
        self.inner
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        self.inner
            .out
            .send(msg.to_string())
            .map_err(|_| "CDP connection closed".to_string())?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(r)) => r.map_err(|e| format!("{method}: {e}")),
            Ok(Err(_)) => Err(format!("{method}: connection closed")),
            Err(_) => {
                self.inner
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                Err(format!("{method}: no answer in {timeout:?}"))
            }
        }
    }
}

/// Waits on `events` for `method` in `session`; its params.
pub async fn wait_event(
    events: &mut broadcast::Receiver<Arc<Value>>,
    session: &str,
    method: &str,
    limit: Duration,
) -> Result<Value, String> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let msg = match tokio::time::timeout_at(deadline, events.recv()).await {
            Err(_) => return Err(format!("no {method} within {limit:?}")),
            Ok(Err(broadcast::error::RecvError::Lagged(_))) => continue,
            Ok(Err(broadcast::error::RecvError::Closed)) => {
                return Err("CDP connection closed".into())
            }
            Ok(Ok(m)) => m,
        };
        if msg.get("sessionId").and_then(Value::as_str) == Some(session)
            && msg.get("method").and_then(Value::as_str) == Some(method)
        {
            return Ok(msg.get("params").cloned().unwrap_or(Value::Null));
        }
    }
}
