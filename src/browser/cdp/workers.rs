//! The service workers: attaching to one, setting it up (offline if asked, console on, let
//! run), and offline emulation on their own targets, applied again when one restarts.

use std::time::Duration;

use serde_json::json;

use super::Cdp;

impl Cdp {
    /// Attaches to a new worker (when the browser does not attach it by itself).
    pub(super) async fn attach_worker(self, target: String) {
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
    pub(super) async fn set_up_worker(self, target: String, session: String) {
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
    pub(super) async fn release_workers(self) {
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
}
