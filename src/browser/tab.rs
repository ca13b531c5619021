//! One browser tab, driven over our CDP connection.

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::cdp::{wait_event, Cdp, CALL_TIMEOUT};
use super::Error;

/// How long a page may take to load.
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a script may run; callers bound their own waits more tightly.
const EVAL_TIMEOUT: Duration = Duration::from_secs(900);

/// A key a person presses, for [`Tab::press`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Tab,
    /// Shift+Tab: focus moves backwards.
    ShiftTab,
    Enter,
    Space,
    Escape,
}

impl Key {
    /// (`key`, `code`, Windows virtual key code, the text it types, CDP modifiers).
    fn cdp_fields(self) -> (&'static str, &'static str, u32, Option<&'static str>, u32) {
        const SHIFT: u32 = 8;
        match self {
            Key::Tab => ("Tab", "Tab", 9, None, 0),
            Key::ShiftTab => ("Tab", "Tab", 9, None, SHIFT),
            // The text is what makes Chromium fire `keypress` and activate a focused button.
            Key::Enter => ("Enter", "Enter", 13, Some("\r"), 0),
            Key::Space => (" ", "Space", 32, Some(" "), 0),
            Key::Escape => ("Escape", "Escape", 27, None, 0),
        }
    }
}

/// What happened when a tab was asked to leave its page (see [`Tab::leave`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leaving {
    /// The page let it go without asking; the tab now shows the new page.
    Left,
    /// The page asked for confirmation (`beforeunload`), with this message; it was declined,
    /// so the tab still shows the old page.
    Asked(String),
}

pub struct Tab {
    cdp: Cdp,
    target_id: String,
    session: String,
}

impl Tab {
    /// Opens a new tab at `url` and waits for its load event.
    pub(crate) async fn open(cdp: &Cdp, url: &str) -> Result<Tab, Error> {
        // Blank first: the page must be attached with its events on before the real load
        // starts, or its load event (and early console lines) could be missed.
        let r = cdp
            .call("Target.createTarget", json!({"url": "about:blank"}), None)
            .await
            .map_err(Error::Cdp)?;
        let target_id = r["targetId"]
            .as_str()
            .ok_or_else(|| Error::Cdp(format!("Target.createTarget answered {r}")))?
            .to_string();
        let session = cdp
            .page_session(&target_id, CALL_TIMEOUT)
            .await
            .map_err(Error::Cdp)?;
        let tab = Tab {
            cdp: cdp.clone(),
            target_id,
            session,
        };
        tab.goto(url).await?;
        Ok(tab)
    }

    /// Navigates and waits for the load event.
    pub async fn goto(&self, url: &str) -> Result<(), Error> {
        let mut events = self.cdp.subscribe();
        let r = self
            .call("Page.navigate", json!({ "url": url }))
            .await
            .map_err(Error::Cdp)?;
        if let Some(e) = r.get("errorText").and_then(Value::as_str) {
            return Err(Error::Page(format!("loading {url}: {e}")));
        }
        wait_event(
            &mut events,
            &self.session,
            "Page.loadEventFired",
            LOAD_TIMEOUT,
        )
        .await
        .map_err(|e| Error::Page(format!("loading {url}: {e}")))?;
        Ok(())
    }

    /// Reloads and waits for the load event (not for the page's own start-up).
    pub async fn reload(&self) -> Result<(), Error> {
        let mut events = self.cdp.subscribe();
        self.call("Page.reload", json!({}))
            .await
            .map_err(Error::Cdp)?;
        wait_event(
            &mut events,
            &self.session,
            "Page.loadEventFired",
            LOAD_TIMEOUT,
        )
        .await
        .map_err(|e| Error::Page(format!("reload: {e}")))?;
        Ok(())
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, String> {
        self.cdp.call(method, params, Some(&self.session)).await
    }

    /// Runs `body` as the body of an async function in the page and returns its result
    /// (JSON-serialisable); an exception becomes [`Error::Script`] with its text.
    pub async fn eval(&self, body: &str) -> Result<Value, Error> {
        let expression = format!(
            "(async () => {{ {body}\n}})().then(v => JSON.stringify(v === undefined ? null : v))"
        );
        let r = self
            .cdp
            .call_with_timeout(
                "Runtime.evaluate",
                json!({
                    "expression": expression,
                    "awaitPromise": true,
                    "returnByValue": true,
                }),
                Some(&self.session),
                EVAL_TIMEOUT,
            )
            .await
            .map_err(Error::Cdp)?;
        if let Some(e) = thrown(&r) {
            return Err(e);
        }
        let text = r["result"]["value"]
            .as_str()
            .ok_or_else(|| Error::Script(format!("no JSON result: {}", r["result"])))?;
        serde_json::from_str(text)
            .map_err(|e| Error::Script(format!("result is not JSON: {e}: {text}")))
    }

    /// [`Tab::eval`] into a type.
    pub async fn eval_as<T: DeserializeOwned>(&self, body: &str) -> Result<T, Error> {
        let v = self.eval(body).await?;
        serde_json::from_value(v.clone())
            .map_err(|e| Error::Script(format!("unexpected result {v}: {e}")))
    }

    /// Waits until the driver page registered the client (`window.sluice`).
    pub async fn wait_ready(&self) -> Result<(), Error> {
        self.eval(super::WAIT_READY_SCRIPT).await.map(drop)
    }

    /// Runs `source` as a classic script in the page's global scope (top-level declarations
    /// become globals), for injecting a library. Returns nothing; an exception is an error.
    pub async fn run_script(&self, source: &str) -> Result<(), Error> {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": source, "returnByValue": true }),
            )
            .await
            .map_err(Error::Cdp)?;
        if let Some(e) = thrown(&r) {
            return Err(e);
        }
        Ok(())
    }

    /// Presses and releases `key` as trusted input: it goes to the focused element, moves
    /// focus with Tab, activates buttons, and counts as a user gesture.
    pub async fn press(&self, key: Key) -> Result<(), Error> {
        // Keys go to the tab in front only.
        self.call("Page.bringToFront", json!({}))
            .await
            .map_err(Error::Cdp)?;
        let (name, code, key_code, text, modifiers) = key.cdp_fields();
        let mut down = json!({
            "type": "keyDown",
            "key": name,
            "code": code,
            "windowsVirtualKeyCode": key_code,
            "nativeVirtualKeyCode": key_code,
            "modifiers": modifiers,
        });
        if let Some(text) = text {
            down["text"] = json!(text);
            down["unmodifiedText"] = json!(text);
        }
        self.call("Input.dispatchKeyEvent", down)
            .await
            .map_err(Error::Cdp)?;
        self.call(
            "Input.dispatchKeyEvent",
            json!({
                "type": "keyUp",
                "key": name,
                "code": code,
                "windowsVirtualKeyCode": key_code,
                "nativeVirtualKeyCode": key_code,
                "modifiers": modifiers,
            }),
        )
        .await
        .map_err(Error::Cdp)?;
        Ok(())
    }

    /// Navigates to `url` as a person leaving the page would, and declines if the page asks
    /// for confirmation (`beforeunload`). Chromium asks only on a page the person has
    /// interacted with (a [`Tab::press`] counts).
    pub async fn leave(&self, url: &str) -> Result<Leaving, Error> {
        let mut events = self.cdp.subscribe();
        // The navigation's answer waits on the dialog, so it is not awaited before the events.
        let navigate = self.call("Page.navigate", json!({ "url": url }));
        tokio::pin!(navigate);
        let mut navigated = false;
        let deadline = tokio::time::Instant::now() + LOAD_TIMEOUT;
        loop {
            let event = tokio::select! {
                r = &mut navigate, if !navigated => {
                    r.map_err(Error::Cdp)?;
                    navigated = true;
                    continue;
                }
                e = tokio::time::timeout_at(deadline, events.recv()) => e,
            };
            let message = match event {
                Err(_) => {
                    return Err(Error::Timeout {
                        what: format!("leaving for {url}"),
                        limit: LOAD_TIMEOUT,
                    })
                }
                Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => continue,
                Ok(Err(e)) => return Err(Error::Cdp(e.to_string())),
                Ok(Ok(m)) => m,
            };
            if message.get("sessionId").and_then(Value::as_str) != Some(&self.session) {
                continue;
            }
            match message.get("method").and_then(Value::as_str) {
                Some("Page.javascriptDialogOpening") => {
                    let params = &message["params"];
                    let asked = params["message"].as_str().unwrap_or("").to_string();
                    if params["type"].as_str() != Some("beforeunload") {
                        return Err(Error::Page(format!("unexpected dialog: {params}")));
                    }
                    self.call("Page.handleJavaScriptDialog", json!({ "accept": false }))
                        .await
                        .map_err(Error::Cdp)?;
                    // Let the declined navigation's answer arrive before the next command.
                    if !navigated {
                        let _ = tokio::time::timeout(CALL_TIMEOUT, &mut navigate).await;
                    }
                    return Ok(Leaving::Asked(asked));
                }
                Some("Page.loadEventFired") => return Ok(Leaving::Left),
                _ => {}
            }
        }
    }

    /// Takes this tab's own network offline or back online (its service worker is not
    /// affected: see [`super::Browser::set_worker_offline`]).
    pub async fn set_offline(&self, offline: bool) -> Result<(), Error> {
        self.cdp
            .emulate_offline(&self.session, offline)
            .await
            .map_err(Error::Cdp)
    }

    /// Lays the page out as if the window's inside were `width` × `height` CSS pixels (also
    /// what [`Tab::screenshot`] captures).
    pub async fn set_viewport(&self, width: u32, height: u32) -> Result<(), Error> {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        )
        .await
        .map(drop)
        .map_err(Error::Cdp)
    }

    /// A PNG of what the tab shows.
    pub async fn screenshot(&self) -> Result<Vec<u8>, Error> {
        // A tab behind another one is not painted, and its capture never completes.
        self.call("Page.bringToFront", json!({}))
            .await
            .map_err(Error::Cdp)?;
        let r = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await
            .map_err(Error::Cdp)?;
        let data = r["data"]
            .as_str()
            .ok_or_else(|| Error::Cdp("Page.captureScreenshot gave no data".into()))?;
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| Error::Cdp(format!("screenshot is not base64: {e}")))
    }

    /// [`Tab::screenshot`] into a file.
    pub async fn save_screenshot(&self, path: &Path) -> Result<(), Error> {
        let png = self.screenshot().await?;
        std::fs::write(path, png).map_err(|e| Error::Io(format!("{}: {e}", path.display())))
    }

    pub async fn close(self) -> Result<(), Error> {
        self.cdp
            .call(
                "Target.closeTarget",
                json!({ "targetId": self.target_id }),
                None,
            )
            .await
            .map(drop)
            .map_err(Error::Cdp)
    }
}

/// The exception a `Runtime.evaluate` answer reports, if the script threw.
fn thrown(answer: &Value) -> Option<Error> {
    let d = answer.get("exceptionDetails")?;
    let text = d["exception"]["description"]
        .as_str()
        .or_else(|| d["text"].as_str())
        .unwrap_or("exception without text");
    Some(Error::Script(text.to_string()))
}
