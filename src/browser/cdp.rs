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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, oneshot};

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

    fn dispatch(&self, msg: Value) {
        if let Some(id) = msg.get("id").and_then(Value::as_u64) {
            let tx = self
                .inner
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            if let Some(tx) = tx {
                let r = match msg.get("error") {
                    Some(e) => Err(e.to_string()),
                    None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
                };
                let _ = tx.send(r);
            }
            return;
        }
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let session = msg.get("sessionId").and_then(Value::as_str);
        match method {
            "Target.targetCreated" => {
                let info = &params["targetInfo"];
                let target = info["targetId"].as_str().unwrap_or("").to_string();
                match info["type"].as_str() {
                    Some("service_worker") => {
                        let auto = {
                            let mut st = self.state();
                            st.workers.entry(target.clone()).or_insert(None);
                            st.auto_attach
                        };
                        self.note(format!("worker target created: {}", info["url"]));
                        if !auto {
                            tokio::spawn(self.clone().attach_worker(target));
                        }
                    }
                    Some("page") => {
                        self.state().pages.insert(target.clone(), None);
                        tokio::spawn(self.clone().attach_page(target));
                    }
                    _ => {}
                }
            }
            "Target.targetDestroyed" => {
                let target = params["targetId"].as_str().unwrap_or("");
                let mut st = self.state();
                if st.workers.remove(target).is_some() {
                    drop(st);
                    self.note("worker target destroyed");
                } else {
                    st.pages.remove(target);
                }
            }
            "Target.attachedToTarget" => {
                let info = &params["targetInfo"];
                if info["type"].as_str() == Some("service_worker") {
                    let target = info["targetId"].as_str().unwrap_or("").to_string();
                    let session = params["sessionId"].as_str().unwrap_or("").to_string();
                    tokio::spawn(self.clone().set_up_worker(target, session));
                }
            }
            "Target.detachedFromTarget" => {
                if let Some(s) = params["sessionId"].as_str() {
                    let mut st = self.state();
                    st.labels.remove(s);
                    for slot in st.pages.values_mut() {
                        if slot.as_deref() == Some(s) {
                            *slot = None;
                        }
                    }
                    if st.control.as_deref() == Some(s) {
                        // Another page takes over; ServiceWorker.enable is per session.
                        st.control = None;
                        let next = st.pages.values().flatten().next().cloned();
                        drop(st);
                        if let Some(next) = next {
                            tokio::spawn(self.clone().take_control(next));
                        }
                    }
                }
            }
            "Runtime.consoleAPICalled" => {
                let label = self.label(session);
                let kind = params["type"].as_str().unwrap_or("log");
                let args: Vec<String> = params["args"]
                    .as_array()
                    .map(|a| a.iter().map(remote_object_text).collect())
                    .unwrap_or_default();
                self.note(format!("[{label}] console.{kind}: {}", args.join(" ")));
            }
            "Runtime.exceptionThrown" => {
                let label = self.label(session);
                let d = &params["exceptionDetails"];
                let text = d["exception"]["description"]
                    .as_str()
                    .or_else(|| d["text"].as_str())
                    .unwrap_or("?");
                self.note(format!("[{label}] uncaught: {text}"));
            }
            "ServiceWorker.workerRegistrationUpdated" => {
                let mut st = self.state();
                for r in params["registrations"].as_array().into_iter().flatten() {
                    let id = r["registrationId"].as_str().unwrap_or("").to_string();
                    if r["isDeleted"].as_bool() == Some(true) {
                        st.registrations.remove(&id);
                    } else {
                        let scope = r["scopeURL"].as_str().unwrap_or("").to_string();
                        st.registrations.insert(id, scope);
                    }
                }
            }
            "ServiceWorker.workerVersionUpdated" => self.version_updated(&params),
            "ServiceWorker.workerErrorReported" => {
                self.note(format!(
                    "[worker] error reported: {}",
                    params["errorMessage"]
                ));
            }
            _ => {}
        }
        if method.starts_with("Target.")
            && std::env::var_os("SLUICE_CDP_TRACE").is_some_and(|v| !v.is_empty())
        {
            self.note(format!("{method} {params}"));
        }
        let _ = self.inner.events.send(Arc::new(msg));
    }

    fn version_updated(&self, params: &Value) {
        let mut changes = Vec::new();
        let mut started = false;
        {
            let mut st = self.state();
            for v in params["versions"].as_array().into_iter().flatten() {
                let id = v["versionId"].as_str().unwrap_or("").to_string();
                let key = |v: &Value| (v["runningStatus"].clone(), v["status"].clone());
                let before = st.versions.get(&id).map(key);
                if before.as_ref() != Some(&key(v)) {
                    changes.push(format!(
                        "worker version {id}: {} / {}",
                        v["runningStatus"].as_str().unwrap_or("?"),
                        v["status"].as_str().unwrap_or("?")
                    ));
                    let was_starting = before
                        .as_ref()
                        .is_some_and(|(r, _)| r.as_str() == Some("starting"));
                    if v["runningStatus"].as_str() == Some("starting") && !was_starting {
                        st.worker_starts += 1;
                        started = true;
                    }
                    let was_stopped = before
                        .as_ref()
                        .is_none_or(|(r, _)| r.as_str() == Some("stopped"));
                    if v["runningStatus"].as_str() == Some("stopped") && !was_stopped {
                        st.worker_stops += 1;
                    }
                }
                st.versions.insert(id, v.clone());
            }
        }
        for c in changes {
            self.note(c);
        }
        if started {
            // A restarted worker keeps its target and our session, and no Target event says
            // it started: take it offline again if asked, before its fetches begin.
            tokio::spawn(self.clone().release_workers());
        }
    }

    fn label(&self, session: Option<&str>) -> String {
        session
            .and_then(|s| self.state().labels.get(s).cloned())
            .unwrap_or_else(|| "?".into())
    }

    /// Attaches to a new worker (when the browser does not attach it by itself).
    async fn attach_worker(self, target: String) {
        let r = self
            .call(
                "Target.attachToTarget",
                json!({"targetId": target, "flatten": true}),
                None,
            )
            .await;
        match r {
            Ok(v) => {
                let session = v["sessionId"].as_str().unwrap_or("").to_string();
                self.set_up_worker(target, session).await;
            }
            Err(e) => self.note(format!("attaching to a worker failed: {e}")),
        }
    }

    /// Takes an attached worker offline if asked, turns its console on and lets it run.
    async fn set_up_worker(self, target: String, session: String) {
        let offline = {
            let mut st = self.state();
            st.labels.insert(session.clone(), "worker".into());
            st.workers.insert(target, Some(session.clone()));
            st.offline.then_some(true)
        };
        let s = Some(session.as_str());
        if let Some(offline) = offline {
            if let Err(e) = self.emulate_offline(&session, offline).await {
                self.note(format!("taking a new worker offline failed: {e}"));
            }
        }
        for (m, p) in [
            ("Runtime.enable", json!({})),
            ("Log.enable", json!({})),
            ("Runtime.runIfWaitingForDebugger", json!({})),
        ] {
            if let Err(e) = self.call(m, p, s).await {
                self.note(format!("worker {m} failed: {e}"));
            }
        }
    }

    /// Re-applies offline emulation to the workers we are attached to, and lets any that wait
    /// for a debugger run; repeated a few times because a restart is reported before the new
    /// instance is ready for commands.
    async fn release_workers(self) {
        for delay in [0u64, 100, 400] {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let (sessions, offline, offline_set) = {
                let st = self.state();
                let sessions: Vec<String> = st.workers.values().flatten().cloned().collect();
                (sessions, st.offline, st.offline_set)
            };
            for s in &sessions {
                if offline_set {
                    let _ = self.emulate_offline(s, offline).await;
                }
                let _ = self
                    .call("Runtime.runIfWaitingForDebugger", json!({}), Some(s))
                    .await;
            }
        }
    }

    async fn attach_page(self, target: String) {
        let Ok(r) = self
            .call(
                "Target.attachToTarget",
                json!({"targetId": target, "flatten": true}),
                None,
            )
            .await
        else {
            return;
        };
        let session = r["sessionId"].as_str().unwrap_or("").to_string();
        self.state().labels.insert(session.clone(), "page".into());
        for m in ["Runtime.enable", "Page.enable"] {
            if let Err(e) = self.call(m, json!({}), Some(&session)).await {
                self.note(format!("page {m} failed: {e}"));
            }
        }
        let control = {
            let mut st = self.state();
            // Ready for callers only now that its events are on.
            if let Some(slot) = st.pages.get_mut(&target) {
                *slot = Some(session.clone());
            }
            st.control.is_none()
        };
        if control {
            self.take_control(session).await;
        }
    }

    async fn take_control(self, session: String) {
        match self
            .call("ServiceWorker.enable", json!({}), Some(&session))
            .await
        {
            Ok(_) => {
                let mut st = self.state();
                if st.control.is_none() {
                    st.control = Some(session);
                }
            }
            Err(e) => self.note(format!("ServiceWorker.enable failed: {e}")),
        }
    }

    /// Opens a blank tab of our own for `ServiceWorker.*` commands: a tab the caller opens may
    /// be closed at any time, and with it the session those commands went through.
    pub async fn open_control_page(&self) -> Result<(), String> {
        let r = self
            .call("Target.createTarget", json!({"url": "about:blank"}), None)
            .await?;
        let target = r["targetId"]
            .as_str()
            .ok_or_else(|| format!("Target.createTarget answered {r}"))?;
        let session = self.page_session(target, CALL_TIMEOUT).await?;
        self.call("ServiceWorker.enable", json!({}), Some(&session))
            .await?;
        self.state().control = Some(session);
        Ok(())
    }

    pub async fn emulate_offline(&self, session: &str, offline: bool) -> Result<(), String> {
        // A stopped worker's session answers nothing; it gets the setting when it starts.
        const LIMIT: Duration = Duration::from_secs(3);
        self.call_with_timeout("Network.enable", json!({}), Some(session), LIMIT)
            .await?;
        self.call_with_timeout(
            "Network.emulateNetworkConditions",
            json!({
                "offline": offline,
                "latency": 0,
                "downloadThroughput": -1,
                "uploadThroughput": -1,
            }),
            Some(session),
            LIMIT,
        )
        .await?;
        Ok(())
    }

    /// The session for `ServiceWorker.*` commands, waiting for a page to be attached.
    pub async fn control_session(&self) -> Result<String, String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(s) = self.state().control.clone() {
                return Ok(s);
            }
            if Instant::now() > deadline {
                return Err("no page session for ServiceWorker commands".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Our session on a page target, once attached with its events enabled.
    pub async fn page_session(&self, target: &str, limit: Duration) -> Result<String, String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(Some(s)) = self.state().pages.get(target) {
                return Ok(s.clone());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "page target {target} was not attached in {limit:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
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

/// A console argument as text.
fn remote_object_text(o: &Value) -> String {
    if let Some(v) = o.get("value") {
        return match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
    }
    o.get("description")
        .or_else(|| o.get("unserializableValue"))
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string()
}
