//! What a test asks of a page in either browser: run a script, read its result, wait for the
//! client. Each browser's tab says only how a script runs ([`PageScript::try_eval`]); the
//! panicking helpers the tests use are written once here, so that both browsers fail alike.

use serde::de::DeserializeOwned;
use serde_json::Value;
use sluice::browser::WAIT_READY_SCRIPT;

/// A page that runs scripts: Chromium's [`super::Tab`] and Firefox's
/// [`super::firefox::FirefoxTab`]. Tests import it to call `eval` on either.
pub trait PageScript {
    /// Runs `body` as the body of an async function in the page and returns its result
    /// (JSON-serialisable) or the exception's text.
    async fn try_eval(&self, body: &str) -> Result<Value, String>;

    /// [`PageScript::try_eval`] that panics on an exception.
    async fn eval(&self, body: &str) -> Value {
        self.try_eval(body)
            .await
            .unwrap_or_else(|e| panic!("page script failed: {e}\n--- script ---\n{body}"))
    }

    /// [`PageScript::eval`] into a type.
    async fn eval_as<T: DeserializeOwned>(&self, body: &str) -> T {
        let v = self.eval(body).await;
        serde_json::from_value(v.clone())
            .unwrap_or_else(|e| panic!("unexpected result {v}: {e}\n--- script ---\n{body}"))
    }

    /// Waits until the test page registered the client (`window.sluice`).
    async fn wait_ready(&self) {
        self.try_eval(WAIT_READY_SCRIPT)
            .await
            .unwrap_or_else(|e| panic!("the e2e page did not get ready: {e}"));
    }
}
