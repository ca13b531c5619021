//! The worker script's `credentials` function: current headers for a budget, read where the
//! app keeps them (IndexedDB, a cookie-backed endpoint), so that jobs that waited through an
//! hour offline go with today's token rather than the one they were enqueued with.
//!
//! ```js
//! self.SLUICE_CONFIG = {
//!   budgets: [...],
//!   credentials: async (budget) => ({ Authorization: `Bearer ${await readToken()}` }),
//! };
//! ```
//!
//! - **Asked before each request** of every budget ([`ask`], from the pump): its headers are
//!   set over the job's own, and the request counts from when it really leaves (see
//!   `Engine::on_credentials_supplied`). It may return `undefined` (nothing to add) and may be
//!   async; it has the request's timeout to answer. If it throws or takes too long, the request
//!   is not sent and the job is retried as after a network error, its error naming the function.
//! - **Asked again while a budget waits** after a 401 ([`ask_again_while_waiting`]): at most
//!   once a second per budget, one ask at a time, and only when something wakes the worker (a
//!   page's message or keep-alive, a sync), never on a timer of its own. Only headers that
//!   differ from those refused end the wait (`Engine::offer_credentials`), so a function that
//!   still returns the expired token never has it sent again.
//! - `JSON.stringify` drops functions, so the function is read from the configuration object
//!   itself ([`take_function`]); the rest of the configuration is read as JSON.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Function, Promise, Reflect, JSON};
use sluice_shared::json;
use sluice_shared::Millis;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::AbortSignal;

use crate::runtime::{spawn, warn};
use crate::worker::Worker;

/// While a budget waits, the function is asked again at most this often.
const ASK_AGAIN_AFTER_MS: Millis = 1_000;
/// How long an ask while waiting may take.
const ASK_TIMEOUT_MS: u64 = 10_000;

thread_local! {
    /// The worker script's function, if it gave one.
    static FUNCTION: RefCell<Option<Function>> = const { RefCell::new(None) };
}

fn function() -> Option<Function> {
    FUNCTION.with(|f| f.borrow().clone())
}

/// Takes `credentials` from the worker script's configuration object. A value that is not a
/// function is a mistake said at start, where the install fails with it.
pub fn take_function(config: &JsValue) -> Result<(), String> {
    if !config.is_object() {
        return Ok(());
    }
    let value = Reflect::get(config, &JsValue::from_str("credentials")).unwrap_or_default();
    if value.is_undefined() || value.is_null() {
        return Ok(());
    }
    let Some(function) = value.dyn_ref::<Function>() else {
        return Err(format!(
            "self.SLUICE_CONFIG.credentials must be a function, (budget) => headers, not {}",
            value.js_typeof().as_string().unwrap_or_default()
        ));
    };
    FUNCTION.with(|f| *f.borrow_mut() = Some(function.clone()));
    Ok(())
}

/// Whether the worker script gave a function.
pub fn has_function() -> bool {
    // Asked before every send: a look, not a copy of the function's handle.
    FUNCTION.with(|f| f.borrow().is_some())
}

/// What the function gives for `budget`, within `timeout_ms`: an object of header names and
/// values (as `setCredentials` takes), nothing for `undefined` or `null`. The error says what
/// went wrong with the function, for the job's error and the console.
pub async fn ask(budget: &str, timeout_ms: u64) -> Result<Vec<(String, String)>, String> {
    let Some(function) = function() else {
        return Ok(Vec::new());
    };
    let given = match function.call1(&JsValue::UNDEFINED, &JsValue::from_str(budget)) {
        Ok(returned) => JsFuture::from(within(Promise::resolve(&returned), timeout_ms)).await,
        Err(thrown) => Err(thrown),
    };
    headers_given(given).map_err(|why| {
        format!("the worker script's credentials function failed for budget '{budget}': {why}")
    })
}

/// The headers in what the function gave (or why there are none).
fn headers_given(given: Result<JsValue, JsValue>) -> Result<Vec<(String, String)>, String> {
    let value = given.map_err(|e| crate::error::describe(&e))?;
    if value.is_undefined() || value.is_null() {
        return Ok(Vec::new());
    }
    if !value.is_object() {
        return Err("it must return an object of header names and values".into());
    }
    let text = JSON::stringify(&value)
        .ok()
        .and_then(|t| t.as_string())
        .unwrap_or_default();
    json::parse(&text)
        .and_then(|v| sluice_shared::job::read_headers(&v))
        .map_err(|e| e.0)
}

/// `promise`, or a rejection once `timeout_ms` passed (the browser's own timer, as `fetch`'s
/// timeout is: not the pump's).
fn within(promise: Promise, timeout_ms: u64) -> Promise {
    let signal = AbortSignal::timeout_with_u32(timeout_ms.clamp(1, u32::MAX as u64) as u32);
    let late = Promise::new(&mut |_resolve, reject| {
        let on_abort = Closure::<dyn FnMut()>::new(move || {
            let _ = reject.call1(
                &JsValue::UNDEFINED,
                &JsValue::from_str(&format!("it did not answer within {timeout_ms} ms")),
            );
        })
        .into_js_value();
        signal.set_onabort(Some(on_abort.unchecked_ref()));
    });
    Promise::race(&js_sys::Array::of2(&promise, &late))
}

/// Asks the function again for each budget that waits for credentials (see the module docs);
/// what it gives is offered to the engine, and the pump woken if that ended a wait.
pub fn ask_again_while_waiting(w: &Rc<Worker>, now: Millis) {
    if !has_function() {
        return;
    }
    for budget in w.budgets_waiting_for_credentials() {
        let due = {
            let mut asks = w.credential_asks.borrow_mut();
            let at = match asks.iter().position(|(b, _, _)| *b == budget) {
                Some(at) => at,
                None => {
                    asks.push((budget.clone(), 0, false));
                    asks.len() - 1
                }
            };
            let (_, last, out) = &mut asks[at];
            let due = !*out && now >= last.saturating_add(ASK_AGAIN_AFTER_MS);
            if due {
                (*last, *out) = (now, true);
            }
            due
        };
        if !due {
            continue;
        }
        let w = w.clone();
        spawn(async move {
            let given = ask(&budget, ASK_TIMEOUT_MS).await;
            for (b, _, out) in w.credential_asks.borrow_mut().iter_mut() {
                if *b == budget {
                    *out = false;
                }
            }
            match given {
                Ok(headers) => {
                    if w.offer_credentials(&budget, headers) {
                        w.pump.wake();
                    }
                }
                Err(problem) => warn(&problem),
            }
        });
    }
}
