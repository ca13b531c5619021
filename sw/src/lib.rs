//! Sluice's service worker: the I/O shell around [`sluice_shared::Engine`].
//!
//! The engine decides what to send, and the pump's protocol ([`sluice_shared::pump`]) when;
//! this crate only carries it out: IndexedDB ([`store`]), `fetch` ([`transport`]), the timer
//! and the run loop ([`pump`], its state in [`pump_state`]), messages to tabs ([`broadcast`]),
//! fetch interception ([`intercept`]) and configuration ([`config`]). [`worker`] ties one
//! running instance together, [`instance`] starts it, [`runtime`] holds the ties to the global
//! scope. Browser-only code is compiled for `wasm32` only, so `cargo test -p sluice-sw` runs
//! the pure parts natively.
//!
//! # Used by the worker entry `sw/js/sluice-worker.js` (global `wasm_bindgen`, a classic worker)
//! - `start(config)`: once, after the wasm loaded, with `self.SLUICE_CONFIG`.
//! - `on_install(event)`, `on_activate(event)`, `on_message(event)`, `on_sync(event)`: each
//!   returns a promise for `event.waitUntil`; the message and sync ones resolve once the queue
//!   is idle (at the latest after 90 s), which keeps the worker alive while it works. A message
//!   may bring the page's `MessagePort`, over which its later requests come (`adopt_port`).
//! - `should_intercept(request)`: synchronous; whether a fetch is to be queued.
//! - `on_fetch(event)`: a promise of the `Response` (`202 Accepted` with the job id) for
//!   `event.respondWith`; then `settled()` for `event.waitUntil`.

pub mod broadcast;
pub mod config;
pub mod config_check;
pub mod error;
#[cfg(target_arch = "wasm32")]
mod idb;
pub mod intercept;
pub mod prefix;
pub mod store;
pub mod transport;

#[cfg(target_arch = "wasm32")]
mod credentials;
#[cfg(target_arch = "wasm32")]
mod instance;
#[cfg(target_arch = "wasm32")]
mod pump;
#[cfg(target_arch = "wasm32")]
mod pump_state;
#[cfg(target_arch = "wasm32")]
mod runtime;
#[cfg(target_arch = "wasm32")]
mod worker;

use wasm_bindgen::prelude::*;

/// The Background Sync tag the worker registers while offline.
pub const SYNC_TAG: &str = "sluice";

/// Lets the page and build checks tell which build of the worker is running.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

#[cfg(target_arch = "wasm32")]
pub use exports::*;

#[cfg(target_arch = "wasm32")]
mod exports {
    use js_sys::{Function, JsString, Object, Promise, Reflect, JSON};
    use sluice_shared::protocol::{
        decode_request, message_too_large, ProtocolError, WorkerMessage,
    };
    use wasm_bindgen::prelude::*;
    use wasm_bindgen::JsCast;
    use wasm_bindgen_futures::JsFuture;
    use web_sys::{
        ExtendableEvent, ExtendableMessageEvent, FetchEvent, Headers, MessageEvent, MessagePort,
        ResponseInit,
    };

    use crate::config::Setup;
    use crate::instance::{self, setup};
    use crate::intercept::{
        accepted_body, error_response, options_from_request, spec_from_request,
    };
    use crate::pump::settled as settle_promise;
    use crate::runtime::{self, promise, scope, warn};
    use crate::worker::reply_to;

    /// Takes the worker script's configuration (`self.SLUICE_CONFIG`, may be undefined).
    /// Returns why it cannot be used, if it cannot: the worker entry then does not start this
    /// instance (an install fails, and every page hears the reason); nothing is thrown, so the
    /// instance is not taken for broken (see the entry's `fenced`).
    #[wasm_bindgen]
    pub fn start(config: JsValue) -> Option<String> {
        // Once per instance, as `start` runs: no `set_once` (ARCHITECTURE.md, "Size").
        std::panic::set_hook(Box::new(console_error_panic_hook::hook));
        if let Err(problem) = crate::credentials::take_function(&config) {
            return Some(problem);
        }
        let json = if config.is_undefined() || config.is_null() {
            None
        } else {
            match JSON::stringify(&config) {
                Ok(s) => s.as_string(),
                Err(e) => {
                    return Some(format!(
                        "self.SLUICE_CONFIG cannot be read as JSON: {}",
                        crate::error::describe(&e)
                    ))
                }
            }
        };
        match Setup::new(json.as_deref(), &scope().origin()) {
            Ok(setup) => instance::set_setup(setup),
            Err(problem) => return Some(problem),
        }
        instance::watch_for_successor();
        None
    }

    #[wasm_bindgen]
    pub fn on_install(_event: ExtendableEvent) -> Promise {
        // A new version takes over at once; its queue starts from storage on activation.
        scope()
            .skip_waiting()
            .unwrap_or_else(|e| Promise::reject(&e))
    }

    #[wasm_bindgen]
    pub fn on_activate(_event: ExtendableEvent) -> Promise {
        promise(async {
            JsFuture::from(scope().clients().claim()).await?;
            // Resume the queue now, but do not hold activation (events wait for it) until idle.
            match instance::worker().await {
                Ok(w) => w.pump.wake(),
                Err(e) => warn(&format!("queue not started on activation: {e}")),
            }
            Ok(JsValue::UNDEFINED)
        })
    }

    fn request_id_of(data: &JsValue) -> Option<String> {
        if !data.is_object() {
            return None;
        }
        Reflect::get(data, &JsValue::from_str("requestId"))
            .ok()
            .and_then(|v| v.as_string())
    }

    fn reply_error(source: Option<&Object>, request_id: Option<String>, error: ProtocolError) {
        reply_to(source, &WorkerMessage::Error { request_id, error });
    }

    /// The instance stopped when storage refused a save for want of space (its engine held
    /// what the refused save had; storage holds everything before it). Rebuilt from storage
    /// now, not at the next event, the queue goes on sending what it had while the page hears
    /// `storage-full`.
    fn restart_after_full_storage() {
        runtime::spawn(async {
            if let Err(e) = instance::worker().await {
                warn(&format!(
                    "the queue did not restart after a full storage: {e}"
                ));
            }
        });
    }

    /// The client id a page's message came with: the event's source, or the one noted on the
    /// page's port when it was adopted.
    fn sender_of(source: Option<&Object>) -> Option<String> {
        let source = source?;
        let field = if source.is_instance_of::<MessagePort>() {
            "sluiceClient"
        } else {
            "id"
        };
        Reflect::get(source, &JsValue::from_str(field))
            .ok()?
            .as_string()
    }

    /// Decodes one request from a page, handles it and posts the answer to `reply_via` (the
    /// page's `Client`, or the page's own `MessagePort`).
    async fn serve(data: JsValue, reply_via: Option<Object>) {
        let reply_via = reply_via.as_ref();
        // Before the text is copied into the wasm's memory: a string of more UTF-16 units than
        // the limit has bytes is over it whatever its characters.
        if let Some(error) = data
            .dyn_ref::<JsString>()
            .and_then(|s| message_too_large(s.length() as usize))
        {
            reply_error(reply_via, None, error);
            return;
        }
        let Some(text) = data.as_string() else {
            reply_error(
                reply_via,
                request_id_of(&data),
                ProtocolError::Malformed {
                    message: "messages must be JSON text: send JSON.stringify(request)".into(),
                },
            );
            return;
        };
        let envelope = match decode_request(&text) {
            Ok(e) => e,
            Err((request_id, error)) => {
                reply_error(reply_via, request_id, error);
                return;
            }
        };
        drop(text);
        let request_id = envelope.request_id;
        let w = match instance::worker().await {
            Ok(w) => w,
            Err(e) => {
                reply_error(reply_via, Some(request_id), e.into());
                return;
            }
        };
        let handled = w.handle(envelope.request, sender_of(reply_via)).await;
        drop(w);
        if matches!(handled, Err(ProtocolError::StorageFull { .. })) {
            restart_after_full_storage();
        }
        let message = match handled {
            Ok(body) => WorkerMessage::Reply { request_id, body },
            Err(error) => WorkerMessage::Error {
                request_id: Some(request_id),
                error,
            },
        };
        reply_to(reply_via, &message);
    }

    /// A request that arrives with a `MessagePort` hands this worker the page's own channel:
    /// from then on the page sends most requests over it and gets their answers back the same
    /// way. Chromium routes a page's `postMessage` to its worker through the browser process
    /// and dispatches it as an event; a port carries a message straight from one thread to
    /// the other. Measured while sending at 100 per second: 3 ms at the median and 7 ms at p95
    /// as an event, 1 ms and 3-5 ms over a port. Port messages are not events: they neither
    /// start a stopped worker nor extend its life, so the page keeps using `postMessage` for
    /// everything that must wake or hold the worker (see `Via` in the client's `core/`).
    fn adopt_port(event: &ExtendableMessageEvent) -> Option<Object> {
        let port = event.ports().get(0).dyn_into::<MessagePort>().ok()?;
        // Requests over the port come without a source: note whose it is.
        if let Some(id) = sender_of(event.source().as_ref()) {
            let _ = Reflect::set(
                &port,
                &JsValue::from_str("sluiceClient"),
                &JsValue::from_str(&id),
            );
        }
        thread_local! {
            static ON_PORT_MESSAGE: Function = Closure::<dyn Fn(MessageEvent)>::new(
                |event: MessageEvent| {
                    let port = event.target().map(Object::from);
                    runtime::spawn(async move {
                        serve(event.data(), port).await;
                        // As after an event (see `settled`): the pump looks at the queue once
                        // more, so that what falls due with a request (a retention time that
                        // passed, say) is acted on.
                        if let Some(w) = instance::current() {
                            w.pump.wake();
                        }
                    });
                },
            )
            .into_js_value()
            .unchecked_into();
        }
        ON_PORT_MESSAGE.with(|f| port.set_onmessage(Some(f)));
        Some(port.into())
    }

    #[wasm_bindgen]
    pub fn on_message(event: ExtendableMessageEvent) -> Promise {
        promise(async move {
            // A page that spoke may be one the broadcasts do not know yet.
            crate::broadcast::forget_recipients();
            // The request that brings a port is answered over it: that tells the page the
            // port works.
            let reply_via = adopt_port(&event).or_else(|| event.source());
            serve(event.data(), reply_via).await;
            JsFuture::from(settle_promise(instance::current().as_ref())).await?;
            Ok(JsValue::UNDEFINED)
        })
    }

    fn request_headers(headers: &Headers) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Ok(Some(iter)) = js_sys::try_iter(headers) {
            for entry in iter.flatten() {
                let pair: js_sys::Array = entry.unchecked_into();
                if let (Some(n), Some(v)) = (pair.get(0).as_string(), pair.get(1).as_string()) {
                    out.push((n, v));
                }
            }
        }
        out
    }

    /// Whether a fetch goes to the queue (synchronous: `respondWith` must be called at once).
    #[wasm_bindgen]
    pub fn should_intercept(request: web_sys::Request) -> bool {
        let navigation = request.mode() == web_sys::RequestMode::Navigate;
        let headers = request.headers();
        setup()
            .routes
            .matches(&request.method(), &request.url(), navigation, |name| {
                headers.has(name).unwrap_or(false)
            })
    }

    fn json_response(status: u16, body: &str) -> Result<web_sys::Response, JsValue> {
        let headers = Headers::new()?;
        headers.set("content-type", "application/json")?;
        headers.set("cache-control", "no-store")?;
        let init = ResponseInit::new();
        init.set_status(status);
        init.set_headers(&headers);
        web_sys::Response::new_with_opt_str_and_init(Some(body), &init)
    }

    /// Queues an intercepted request; resolves to `202 Accepted` with `{jobId, coalesced,
    /// state}`, or to a JSON error (400, 413, or 503 when storage failed: nothing was queued).
    #[wasm_bindgen]
    pub fn on_fetch(event: FetchEvent) -> Promise {
        promise(async move {
            let request = event.request();
            let method = request.method();
            let url = request.url();
            let headers = request_headers(&request.headers());
            let body = if matches!(method.as_str(), "GET" | "HEAD") {
                Ok(None)
            } else {
                // As for messages: the size is checked before the text is copied in.
                let text = JsFuture::from(request.text()?).await?;
                match text.dyn_ref::<JsString>().map(|s| s.length() as usize) {
                    Some(units) => match message_too_large(units) {
                        Some(error) => Err(error),
                        None => Ok(text.as_string()),
                    },
                    None => Ok(None),
                }
            };
            let outcome = async {
                let body = body?;
                let w = instance::worker().await.map_err(ProtocolError::from)?;
                let member = |name: &str| {
                    Reflect::get(&request, &JsValue::from_str(name))
                        .ok()
                        .and_then(|v| v.as_string())
                };
                let spec =
                    spec_from_request(&method, &url, &headers, body, options_from_request(member))?;
                let enqueued = w.enqueue(spec).await?;
                let tab = event.client_id().filter(|t| !t.is_empty());
                w.note_requester(tab, std::slice::from_ref(&enqueued.id));
                Ok(enqueued)
            }
            .await;
            if matches!(outcome, Err(ProtocolError::StorageFull { .. })) {
                restart_after_full_storage();
            }
            let response = match outcome {
                Ok(e) => json_response(202, &accepted_body(&e.id, e.coalesced, e.state))?,
                Err(error) => {
                    let (status, body) = error_response(&error);
                    json_response(status, &body)?
                }
            };
            Ok(response.into())
        })
    }

    /// Resolves once the queue is idle (at the latest after 90 s): for `event.waitUntil`.
    #[wasm_bindgen]
    pub fn settled() -> Promise {
        settle_promise(instance::current().as_ref())
    }

    #[wasm_bindgen]
    pub fn on_sync(event: ExtendableEvent) -> Promise {
        promise(async move {
            let tag = Reflect::get(&event, &JsValue::from_str("tag"))
                .ok()
                .and_then(|t| t.as_string());
            if tag.as_deref() != Some(crate::SYNC_TAG) {
                return Ok(JsValue::UNDEFINED);
            }
            run_until_settled(true).await
        })
    }

    /// A page of the site is being loaded: the queue starts now, while the page loads, rather
    /// than at the page's first request, which comes only once its script and the page
    /// client's wasm ran (issue 40: about 50 ms of a page-load wake). Resolves once the queue
    /// is idle (at the latest after 90 s), for `event.waitUntil`.
    #[wasm_bindgen]
    pub fn on_navigate() -> Promise {
        promise(run_until_settled(false))
    }

    /// Starts the queue if it is not running (after a Background Sync (`sync`), as back
    /// online), and waits until it is idle.
    async fn run_until_settled(sync: bool) -> Result<JsValue, JsValue> {
        let w = instance::worker().await?;
        if sync {
            w.on_sync();
        }
        JsFuture::from(settle_promise(Some(&w))).await?;
        Ok(JsValue::UNDEFINED)
    }
}

/// The default allocator (dlmalloc) is several times Talc's size in the wasm; the worker is
/// single-threaded, which is what `WasmDynamicTalc` assumes.
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();
