//! What comes from the browser: an answer goes to its waiting call; an event updates the
//! state (targets, sessions, worker versions, the log), sets up what attached, and is passed on
//! to subscribers.

use std::sync::Arc;

use serde_json::Value;

use super::Cdp;

impl Cdp {
    pub(super) fn dispatch(&self, msg: Value) {
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
