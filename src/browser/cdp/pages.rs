//! The pages: attaching to one, the control page that `ServiceWorker.*` commands go through,
//! and waiting for a page's session.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{Cdp, CALL_TIMEOUT};

impl Cdp {
    pub(super) async fn attach_page(self, target: String) {
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

    pub(super) async fn take_control(self, session: String) {
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
