//! The worker's ties to its global scope: the clock, the scope itself, warnings, tasks, and
//! whether a newer version has taken over. A leaf: it imports no other module of the crate.

use std::future::Future;
use std::pin::Pin;

use js_sys::{Promise, Reflect};
use sluice_shared::Millis;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::ServiceWorkerGlobalScope;

pub fn now_ms() -> Millis {
    js_sys::Date::now() as Millis
}

pub fn scope() -> ServiceWorkerGlobalScope {
    js_sys::global().unchecked_into()
}

pub fn warn(text: &str) {
    web_sys::console::warn_1(&JsValue::from_str(&format!("sluice: {text}")));
}

type Task = Pin<Box<dyn Future<Output = ()>>>;

/// Runs a task on the worker's event loop. Every task and promise of the worker goes through
/// here, boxed: each `spawn_local` or `future_to_promise` of a distinct future type is a copy
/// of the executor's task code in the wasm.
pub fn spawn(task: impl Future<Output = ()> + 'static) {
    spawn_task(Box::pin(task));
}

fn spawn_task(task: Task) {
    wasm_bindgen_futures::spawn_local(task);
}

/// A promise of what `f` resolves to (`future_to_promise`, over [`spawn`]).
pub fn promise(f: impl Future<Output = Result<JsValue, JsValue>> + 'static) -> Promise {
    promise_of(Box::pin(f))
}

fn promise_of(f: Pin<Box<dyn Future<Output = Result<JsValue, JsValue>>>>) -> Promise {
    let mut f = Some(f);
    Promise::new(&mut |resolve, reject| {
        let Some(f) = f.take() else { return };
        spawn(async move {
            let (settle, value) = match f.await {
                Ok(v) => (resolve, v),
                Err(e) => (reject, e),
            };
            let _ = settle.call1(&JsValue::UNDEFINED, &value);
        });
    })
}

/// Whether a newer version of the worker has replaced this one or is installed and waiting to
/// (it called `skipWaiting`, so it activates as soon as this one has no event in flight).
pub fn superseded() -> bool {
    let redundant = Reflect::get(&js_sys::global(), &JsValue::from_str("serviceWorker"))
        .ok()
        .filter(|sw| sw.is_object())
        .and_then(|sw| Reflect::get(&sw, &JsValue::from_str("state")).ok())
        .and_then(|s| s.as_string())
        .is_some_and(|s| s == "redundant");
    redundant || scope().registration().waiting().is_some()
}
