//! Carrying out one [`Transmit`]: a `fetch` with a timeout, read into a [`Response`] or a
//! [`TransportError`]. No decisions: the engine classifies what comes back.
//!
//! - The timeout is `AbortSignal.timeout(transmit.timeoutMs)`: it covers the whole exchange,
//!   body included, and needs no timer of ours.
//! - Every response header the browser exposes is kept (cross-origin: only those listed in
//!   `Access-Control-Expose-Headers`); the body is kept up to [`MAX_BODY_BYTES`].
//! - A `TypeError` from `fetch` is the browser's "no response": [`TransportError::Offline`]
//!   when `navigator.onLine` is false, otherwise [`TransportError::Network`]. An abort is a
//!   [`TransportError::Timeout`] (the server may have applied the request).

use sluice_shared::TransportError;

/// Largest response body kept with a job (longer ones are cut at a character boundary).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Cuts a body to at most [`MAX_BODY_BYTES`] bytes without splitting a character.
pub fn cap_body(mut text: String) -> String {
    if text.len() > MAX_BODY_BYTES {
        let mut end = MAX_BODY_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// What a rejected `fetch` (or body read) means, from the error's `name` and `message`.
pub fn classify_failure(name: &str, message: &str, online: bool) -> TransportError {
    match name {
        "TimeoutError" | "AbortError" => TransportError::Timeout,
        "TypeError" if !online => TransportError::Offline,
        "TypeError" => TransportError::Network(message.to_string()),
        "" => TransportError::Network(message.to_string()),
        _ => TransportError::Network(format!("{name}: {message}")),
    }
}

#[cfg(target_arch = "wasm32")]
pub use web::{is_online, start, Sent};

#[cfg(target_arch = "wasm32")]
mod web {
    use js_sys::{Array, Reflect};
    use sluice_shared::{Response, Transmit, TransportError};
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_futures::JsFuture;
    use web_sys::{AbortSignal, Headers, Request, RequestCache, RequestInit, WorkerGlobalScope};

    use super::{cap_body, classify_failure};

    fn scope() -> WorkerGlobalScope {
        js_sys::global().unchecked_into()
    }

    /// `navigator.onLine`; true when unknown (only a definite "offline" parks the queue).
    pub fn is_online() -> bool {
        scope().navigator().on_line()
    }

    fn failure(error: &JsValue) -> TransportError {
        let field = |name: &str| {
            Reflect::get(error, &JsValue::from_str(name))
                .ok()
                .and_then(|v| v.as_string())
                .unwrap_or_default()
        };
        let (name, message) = if error.is_object() {
            (field("name"), field("message"))
        } else {
            (String::new(), error.as_string().unwrap_or_default())
        };
        classify_failure(&name, &message, is_online())
    }

    fn build(t: &Transmit) -> Result<Request, JsValue> {
        let headers = Headers::new()?;
        for (name, value) in &t.headers {
            headers.append(name, value)?;
        }
        let init = RequestInit::new();
        init.set_method(&t.method);
        init.set_headers(&headers);
        if let Some(body) = &t.body {
            init.set_body(&JsValue::from_str(body));
        }
        // The engine counts every start against the budget, so the HTTP cache must not answer
        // one; but any mode but the default also skips the CORS preflight cache, a preflight
        // before every request. `preflight::bypasses_http_cache` says which need it.
        if sluice_shared::preflight::bypasses_http_cache(&t.method) {
            init.set_cache(RequestCache::NoStore);
        }
        let ms = t.timeout_ms.clamp(1, u32::MAX as u64) as u32;
        init.set_signal(Some(&AbortSignal::timeout_with_u32(ms)));
        Request::new_with_str_and_init(&t.url, &init)
    }

    /// A request handed to the browser: [`start`] calls `fetch` at once, [`Sent::response`]
    /// waits for the answer.
    pub struct Sent(Result<js_sys::Promise, TransportError>);

    /// Calls `fetch` now, synchronously. The engine counted the start at this instant: the
    /// request must leave before the worker does anything else (a save, a broadcast), or its
    /// arrival drifts from its count by however long that takes.
    pub fn start(t: &Transmit) -> Sent {
        // A request the browser refuses to build will never work: say so plainly.
        Sent(
            build(t)
                .map(|request| scope().fetch_with_request(&request))
                .map_err(|e| {
                    TransportError::Network(format!(
                        "the browser refused the request: {}",
                        crate::error::describe(&e)
                    ))
                }),
        )
    }

    impl Sent {
        /// The response, read in full. Never panics; every failure is a [`TransportError`].
        pub async fn response(self) -> Result<Response, TransportError> {
            read(self.0?).await
        }
    }

    async fn read(fetched: js_sys::Promise) -> Result<Response, TransportError> {
        let response = JsFuture::from(fetched).await.map_err(|e| failure(&e))?;
        let response: web_sys::Response = response
            .dyn_into()
            .map_err(|_| TransportError::Network("fetch did not give a Response".into()))?;
        let status = response.status();
        let mut headers = Vec::new();
        if let Ok(Some(iter)) = js_sys::try_iter(&response.headers()) {
            for entry in iter.flatten() {
                let pair: Array = entry.unchecked_into();
                if let (Some(n), Some(v)) = (pair.get(0).as_string(), pair.get(1).as_string()) {
                    headers.push((n, v));
                }
            }
        }
        let text = response.text().map_err(|e| failure(&e))?;
        let body = JsFuture::from(text).await.map_err(|e| failure(&e))?;
        Ok(Response {
            status,
            headers,
            body: cap_body(body.as_string().unwrap_or_default()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_capped_on_a_character_boundary() {
        assert_eq!(cap_body("ok".into()), "ok");
        let long = "é".repeat(MAX_BODY_BYTES); // 2 bytes each
        let capped = cap_body(long);
        assert!(capped.len() <= MAX_BODY_BYTES);
        assert!(capped.len() >= MAX_BODY_BYTES - 1);
        assert!(capped.chars().all(|c| c == 'é'));
    }

    #[test]
    fn failures_are_classified() {
        assert_eq!(
            classify_failure("TimeoutError", "signal timed out", true),
            TransportError::Timeout
        );
        assert_eq!(
            classify_failure("AbortError", "", true),
            TransportError::Timeout
        );
        assert_eq!(
            classify_failure("TypeError", "Failed to fetch", false),
            TransportError::Offline
        );
        assert_eq!(
            classify_failure("TypeError", "Failed to fetch", true),
            TransportError::Network("Failed to fetch".into())
        );
        assert_eq!(
            classify_failure("SyntaxError", "bad url", true),
            TransportError::Network("SyntaxError: bad url".into())
        );
    }
}
