//! The worker's ties to its global scope: the clock, the scope itself, warnings, tasks, and
//! whether a newer version has taken over. A leaf: it imports no other module of the crate.

use std::future::Future;
use std::pin::Pin;

use js_sys::{Promise, Reflect};
use sluice_shared::Millis;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{ServiceWorkerGlobalScope, ServiceWorkerRegistration};

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

/// This worker's own `ServiceWorker` object and registration, with the names read from them:
/// the same objects for the worker's whole life. Looked up by name on every pump turn, they
/// were 2-3% of the worker's thread at 700 requests a second (`sluice bench --ceiling
/// --profile`), most of it making the same strings again.
struct Own {
    worker: JsValue,
    registration: ServiceWorkerRegistration,
    state: JsValue,
    redundant: JsValue,
}

thread_local! {
    static OWN: Own = Own {
        // `ServiceWorkerGlobalScope.serviceWorker`, which web-sys does not bind.
        worker: Reflect::get(&js_sys::global(), &JsValue::from_str("serviceWorker"))
            .unwrap_or(JsValue::UNDEFINED),
        registration: scope().registration(),
        state: JsValue::from_str("state"),
        redundant: JsValue::from_str("redundant"),
    };
}

/// Whether a newer version of the worker has replaced this one or is installed and waiting to
/// (it called `skipWaiting`, so it activates as soon as this one has no event in flight).
pub fn superseded() -> bool {
    OWN.with(|own| {
        let redundant = own.worker.is_object()
            && Reflect::get(&own.worker, &own.state).is_ok_and(|state| state == own.redundant);
        redundant || own.registration.waiting().is_some()
    })
}
