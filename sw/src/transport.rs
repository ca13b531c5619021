//! Carrying out one [`Transmit`]: a `fetch` with a timeout, read into a [`Response`] or a
//! [`TransportError`]. No decisions: the engine classifies what comes back.
//!
//! - The timeout is `AbortSignal.timeout(transmit.timeoutMs)`: it covers the whole exchange,
//!   body included, and needs no timer of ours.
//! - Every response header the browser exposes is kept (cross-origin: only those listed in
//!   `Access-Control-Expose-Headers`); the body is read as a stream and reading stops at
//!   [`MAX_BODY_BYTES`] (the rest is cancelled, never buffered): a server that answers with
//!   megabytes costs the worker no more memory than one that answers with 64 KB. A same-origin
//!   answer that says it is no longer than that and not compressed is read whole instead
//!   (`text()`, fewer calls; see `read_whole`).
//! - A `TypeError` from `fetch` is the browser's "no response": [`TransportError::Offline`]
//!   when `navigator.onLine` is false, otherwise [`TransportError::Network`]. An abort is a
//!   [`TransportError::Timeout`] (the server may have applied the request).

use sluice_shared::TransportError;

/// Largest response body kept with a job (longer ones are cut at a character boundary).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// How many bytes of a chunk of `len` to keep when `kept` are in already: reading stops
/// once [`MAX_BODY_BYTES`] are.
pub fn bytes_to_keep(kept: usize, len: usize) -> usize {
    len.min(MAX_BODY_BYTES.saturating_sub(kept))
}

/// `text` cut to at most [`MAX_BODY_BYTES`] at a character boundary: a body read whole within
/// that length may still decode longer (a bad byte becomes the three of U+FFFD).
pub fn cut_at_cap(mut text: String) -> String {
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
    use web_sys::{
        AbortSignal, Headers, ReadableStreamDefaultReader, RequestCache, RequestInit, ResponseType,
        TextDecodeOptions, TextDecoder, WorkerGlobalScope,
    };

    use super::{bytes_to_keep, classify_failure, cut_at_cap, MAX_BODY_BYTES};

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

    /// The `fetch` options of `t`. Handed to `fetch` with the URL rather than built into a
    /// `Request` first: `fetch` builds one anyway, and the worker's own `new Request` was
    /// 4% of its thread at 600 requests a second (`sluice bench --ceiling --profile`).
    fn build(t: &Transmit) -> Result<RequestInit, JsValue> {
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
        // As the page made it (`RequestOptions`, checked at enqueue): set by name, as the
        // browser reads them, since each is a string of the Fetch standard.
        if let Some(options) = &t.options {
            let members = [
                ("credentials", &options.credentials),
                ("mode", &options.mode),
                ("redirect", &options.redirect),
                ("referrerPolicy", &options.referrer_policy),
                ("integrity", &options.integrity),
            ];
            for (name, value) in members {
                if let Some(value) = value {
                    Reflect::set(&init, &JsValue::from_str(name), &JsValue::from_str(value))?;
                }
            }
        }
        let ms = t.timeout_ms.clamp(1, u32::MAX as u64) as u32;
        init.set_signal(Some(&AbortSignal::timeout_with_u32(ms)));
        Ok(init)
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
                .map(|init| scope().fetch_with_str_and_init(&t.url, &init))
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
        let body = if read_whole(&response, &headers) {
            let text = response.text().map_err(|e| failure(&e))?;
            let text = JsFuture::from(text).await.map_err(|e| failure(&e))?;
            cut_at_cap(text.as_string().unwrap_or_default())
        } else {
            read_body(&response).await?
        };
        Ok(Response {
            status,
            headers,
            body,
        })
    }

    /// Whether the body may be read whole with `text()`: one call instead of a stream's
    /// reader, reads and decoder (together 5% of the worker's thread at 600 requests a second
    /// in `sluice bench --ceiling --profile`). Only where its length is known to be within
    /// [`MAX_BODY_BYTES`]: a `Content-Length` that small and no `Content-Encoding`, which
    /// would make it the length before decompression (a small compressed body may decode to
    /// megabytes). Only a same-origin answer shows every header; on another origin
    /// `Content-Encoding` is hidden unless the server exposes it, so such answers are
    /// streamed.
    fn read_whole(response: &web_sys::Response, headers: &[(String, String)]) -> bool {
        response.type_() == ResponseType::Basic
            && !headers.iter().any(|(n, _)| n == "content-encoding")
            && headers.iter().any(|(n, v)| {
                n == "content-length" && v.parse::<usize>().is_ok_and(|l| l <= MAX_BODY_BYTES)
            })
    }

    /// The body's first [`MAX_BODY_BYTES`], read chunk by chunk; the stream is cancelled once
    /// they are in, so the rest never reaches the worker. The browser decodes them as
    /// `Response.text()` would (bad bytes become U+FFFD); decoding as a stream drops a
    /// character the cap cut in two instead of replacing it.
    async fn read_body(response: &web_sys::Response) -> Result<String, TransportError> {
        let mut text = String::new();
        let Some(stream) = response.body() else {
            return Ok(text);
        };
        let refused = |e: JsValue| failure(&e);
        let decoder = TextDecoder::new().map_err(refused)?;
        let in_stream = TextDecodeOptions::new();
        in_stream.set_stream(true);
        let reader: ReadableStreamDefaultReader = stream.get_reader().unchecked_into();
        let mut kept = 0;
        loop {
            let chunk = JsFuture::from(reader.read()).await.map_err(refused)?;
            let field = |name: &str| Reflect::get(&chunk, &JsValue::from_str(name));
            if field("done").map_or(true, |d| d.is_truthy()) {
                // The end: a character left incomplete is the server's, shown as U+FFFD.
                text.push_str(&decoder.decode().map_err(refused)?);
                break;
            }
            let bytes: js_sys::Uint8Array = field("value").map_err(refused)?.unchecked_into();
            let len = bytes.length() as usize;
            let keep = bytes_to_keep(kept, len);
            let bytes = if keep < len {
                bytes.subarray(0, keep as u32)
            } else {
                bytes
            };
            kept += keep;
            text.push_str(
                &decoder
                    .decode_with_buffer_source_and_options(&bytes, &in_stream)
                    .map_err(refused)?,
            );
            if kept >= MAX_BODY_BYTES {
                // Nothing more is read; a cancel that fails changes nothing kept.
                let _ = reader.cancel();
                break;
            }
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_keeps_up_to_the_cap() {
        assert_eq!(bytes_to_keep(0, 10), 10);
        assert_eq!(bytes_to_keep(MAX_BODY_BYTES - 4, 10), 4);
        assert_eq!(bytes_to_keep(MAX_BODY_BYTES, 10), 0);
        assert_eq!(bytes_to_keep(MAX_BODY_BYTES + 1, 10), 0);
    }

    #[test]
    fn a_body_read_whole_is_cut_at_the_cap_on_a_character_boundary() {
        assert_eq!(cut_at_cap("short".into()), "short");
        let exact = "a".repeat(MAX_BODY_BYTES);
        assert_eq!(cut_at_cap(exact.clone()), exact);
        // U+FFFD is three bytes: the one that straddles the cap goes whole.
        let over = format!("{}\u{FFFD}", "a".repeat(MAX_BODY_BYTES - 1));
        assert_eq!(cut_at_cap(over), "a".repeat(MAX_BODY_BYTES - 1));
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
