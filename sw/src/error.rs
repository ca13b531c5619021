//! The worker's own errors, and how each is told to a page.
//!
//! Everything that can fail in the shell (IndexedDB, a JS call, a bad configuration written in
//! the worker script) becomes one of these; none of them is a panic. Towards pages they become
//! [`ProtocolError`]s, which say what to change or that a retry is safe.

use std::fmt;

use sluice_shared::protocol::ProtocolError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SwError {
    /// IndexedDB refused or failed an operation; nothing of that operation was saved.
    Storage(String),
    /// IndexedDB refused a transaction for want of space (`QuotaExceededError`); nothing of
    /// it was saved.
    StorageFull(String),
    /// A browser API threw or rejected.
    Js(String),
    /// The configuration cannot be used.
    Config(String),
    /// This worker instance gave up its in-memory state after a storage failure; the next
    /// event rebuilds it from storage.
    Stopped,
    /// A newer version of the worker is installed and takes over as soon as this one lets go:
    /// this one no longer serves requests (pages send them again to the new one).
    Superseded,
}

impl fmt::Display for SwError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SwError::Storage(m) | SwError::StorageFull(m) => write!(f, "IndexedDB: {m}"),
            SwError::Js(m) => write!(f, "browser API: {m}"),
            SwError::Config(m) => write!(f, "configuration: {m}"),
            SwError::Stopped => f.write_str("the worker is restarting its queue"),
            SwError::Superseded => {
                f.write_str("a newer version of the worker is taking over the queue")
            }
        }
    }
}

impl std::error::Error for SwError {}

impl From<SwError> for ProtocolError {
    fn from(e: SwError) -> Self {
        match e {
            SwError::Config(message) => ProtocolError::InvalidConfig { message },
            SwError::Stopped | SwError::Superseded => ProtocolError::Unavailable {
                message: e.to_string(),
            },
            SwError::StorageFull(message) => ProtocolError::StorageFull { message },
            // Every other failure left storage as it was: the page may send the request again.
            other => ProtocolError::Storage {
                message: other.to_string(),
            },
        }
    }
}

#[cfg(target_arch = "wasm32")]
mod js {
    use super::SwError;
    use wasm_bindgen::{JsCast, JsValue};

    /// Best readable text of a thrown JS value: `Name: message` for errors, the string itself
    /// for strings, `String(value)` otherwise.
    pub fn describe(value: &JsValue) -> String {
        if let Some(s) = value.as_string() {
            return s;
        }
        if let Some(err) = value.dyn_ref::<js_sys::Error>() {
            let name: String = err.name().into();
            let message: String = err.message().into();
            return format!("{name}: {message}");
        }
        let name = js_sys::Reflect::get(value, &JsValue::from_str("name"))
            .ok()
            .and_then(|v| v.as_string());
        let message = js_sys::Reflect::get(value, &JsValue::from_str("message"))
            .ok()
            .and_then(|v| v.as_string());
        match (name, message) {
            (Some(n), Some(m)) => format!("{n}: {m}"),
            (None, Some(m)) => m,
            _ => js_sys::JsString::from(value.clone()).into(),
        }
    }

    impl From<JsValue> for SwError {
        fn from(value: JsValue) -> Self {
            SwError::Js(describe(&value))
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub use js::describe;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_failures_tell_the_page_to_retry() {
        let p: ProtocolError = SwError::Storage("QuotaExceededError".into()).into();
        assert!(matches!(p, ProtocolError::Storage { .. }));
        assert!(p.to_string().contains("try again"), "{p}");
        let p: ProtocolError = SwError::Config("no budgets".into()).into();
        assert!(matches!(p, ProtocolError::InvalidConfig { .. }));
        let p: ProtocolError = SwError::Superseded.into();
        assert!(matches!(p, ProtocolError::Unavailable { .. }));
        assert!(p.to_string().contains("send it again"), "{p}");
    }
}
