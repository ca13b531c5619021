//! A second, plain CDP connection to the browser, beside chromiumoxide's.
//!
//! chromiumoxide auto-attaches to new targets with "wait for debugger on start" and then
//! detaches from service workers, which leaves a worker paused before its first line: its
//! `register()`/`ready` never resolve, and the same happens after every restart of the worker.
//! This connection watches targets, attaches to every `service_worker` (flattened sessions)
//! and lets it run. The same session is where the worker's own network is emulated (offline on
//! the page alone does not stop the worker's fetches) and where its console is read. It also
//! attaches to pages for their console and for the `ServiceWorker` domain (stop workers,
//! registrations, sync events).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::Message;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, oneshot};

/// How long one CDP command may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

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
    /// Page targets by target id, with our session once attached.
    pub pages: HashMap<String, Option<String>>,
    /// Labels of our sessions ("worker", "page"), for the log.
    pub labels: HashMap<String, String>,
    /// The first page session: where `ServiceWorker.*` commands go.
    pub control: Option<String>,
    /// Whether workers are to be kept offline (applied to each new worker before it runs).
    pub offline: bool,
    /// Service worker registrations: id → scope URL (deleted ones removed).
    pub registrations: HashMap<String, String>,
    /// Service worker versions: id → the latest `ServiceWorkerVersion` object.
    pub versions: HashMap<String, Value>,
    /// How many times a service worker version started (first start and every restart).
    pub worker_starts: u64,
    /// How many times a running service worker version stopped.
    pub worker_stops: u64,
    /// Console output and exceptions of pages and workers, and harness notes.
    pub log: Vec<String>,
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
        });
        cdp.call("Target.setDiscoverTargets", json!({"discover": true}), None)
            .await?;
        Ok(cdp)
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn note(&self, line: impl Into<String>) {
        let t = self.inner.started.elapsed().as_secs_f64();
        self.state().log.push(format!("{t:8.3}s {}", line.into()));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Value>> {
        self.inner.events.subscribe()
    }

    /// Sends a command (to a session if given) and waits for its result.
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        session: Option<&str>,
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
        match tokio::time::timeout(CALL_TIMEOUT, rx).await {
            Ok(Ok(r)) => r.map_err(|e| format!("{method}: {e}")),
            Ok(Err(_)) => Err(format!("{method}: connection closed")),
            Err(_) => {
                self.inner
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                Err(format!("{method}: no answer in {CALL_TIMEOUT:?}"))
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
                        self.state().workers.insert(target.clone(), None);
                        self.note(format!("worker target created: {}", info["url"]));
                        tokio::spawn(self.clone().attach_worker(target));
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
            "Target.detachedFromTarget" => {
                if let Some(s) = params["sessionId"].as_str() {
                    let mut st = self.state();
                    st.labels.remove(s);
                    if st.control.as_deref() == Some(s) {
                        st.control = None;
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
            "ServiceWorker.workerVersionUpdated" => {
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
                    // A restarted worker keeps its target and our session, and no Target
                    // event says it started: it is paused again, waiting for a debugger.
                    tokio::spawn(self.clone().release_workers());
                }
            }
            "ServiceWorker.workerErrorReported" => {
                self.note(format!(
                    "[worker] error reported: {}",
                    params["errorMessage"]
                ));
            }
            _ => {}
        }
        if method.starts_with("Target.")
            && std::env::var_os("SLUICE_E2E_TRACE").is_some_and(|v| !v.is_empty())
        {
            self.note(format!("{method} {params}"));
        }
        let _ = self.inner.events.send(Arc::new(msg));
    }

    fn label(&self, session: Option<&str>) -> String {
        session
            .and_then(|s| self.state().labels.get(s).cloned())
            .unwrap_or_else(|| "?".into())
    }

    /// Attaches to a new worker and lets it run, offline first if the harness says so.
    async fn attach_worker(self, target: String) {
        let r = self
            .call(
                "Target.attachToTarget",
                json!({"targetId": target, "flatten": true}),
                None,
            )
            .await;
        let session = match r {
            Ok(v) => v["sessionId"].as_str().unwrap_or("").to_string(),
            Err(e) => {
                self.note(format!("attaching to a worker failed: {e}"));
                return;
            }
        };
        let offline = {
            let mut st = self.state();
            st.labels.insert(session.clone(), "worker".into());
            if let Some(slot) = st.workers.get_mut(&target) {
                *slot = Some(session.clone());
            }
            st.offline
        };
        let s = Some(session.as_str());
        if offline {
            if let Err(e) = self.emulate_offline(&session, true).await {
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
        // chromiumoxide's own attach races with ours; if it paused the worker after our
        // first "run", this one lets it go again (harmless when it is running).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = self
            .call("Runtime.runIfWaitingForDebugger", json!({}), s)
            .await;
    }

    /// Lets every worker we are attached to run, offline first if asked; repeated a few times
    /// because the pause may come after the first "run".
    async fn release_workers(self) {
        for delay in [0u64, 100, 400, 1000] {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let (sessions, offline, starting) = {
                let st = self.state();
                let starting = st
                    .versions
                    .values()
                    .any(|v| v["runningStatus"].as_str() == Some("starting"));
                let sessions: Vec<String> = st.workers.values().flatten().cloned().collect();
                (sessions, st.offline, starting)
            };
            if delay > 0 && !starting {
                return;
            }
            for s in &sessions {
                if offline {
                    let _ = self.emulate_offline(s, true).await;
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
        let control = {
            let mut st = self.state();
            st.labels.insert(session.clone(), "page".into());
            if let Some(slot) = st.pages.get_mut(&target) {
                *slot = Some(session.clone());
            }
            if st.control.is_none() {
                st.control = Some(session.clone());
                true
            } else {
                false
            }
        };
        let _ = self.call("Runtime.enable", json!({}), Some(&session)).await;
        if control {
            let _ = self
                .call("ServiceWorker.enable", json!({}), Some(&session))
                .await;
        }
    }

    pub async fn emulate_offline(&self, session: &str, offline: bool) -> Result<(), String> {
        self.call("Network.enable", json!({}), Some(session))
            .await?;
        self.call(
            "Network.emulateNetworkConditions",
            json!({
                "offline": offline,
                "latency": 0,
                "downloadThroughput": -1,
                "uploadThroughput": -1,
            }),
            Some(session),
        )
        .await?;
        Ok(())
    }

    /// The session for `ServiceWorker.*` commands, waiting for the first page to be attached.
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
