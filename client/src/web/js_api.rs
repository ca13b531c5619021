//! The JS API: thin wrappers that convert values and turn futures into promises.

use std::rc::Rc;

use js_sys::{Array, Function, Object, Promise, Reflect};
use sluice_shared::protocol::{ProtocolError, Request};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use crate::core::{Answer, ClientError};
use crate::input::{self, RegisterOptions};

use super::convert::{
    credentials_from_js, done_to_js, error_to_js, from_js_json, json_text, retry_with_from_js, set,
    to_js, PageJobs,
};
use super::{
    cancelled, configured, credentials_set, dismissed, enqueued, enqueued_many, job_list, jobs_of,
    retried, snapshot, Inner, Listener, Sluice,
};

/// The promise of the JS API for a request: its answer made a JS value by `to_js`, or the
/// error. One function for all requests rather than an `async` block in each method: every
/// `future_to_promise` of its own costs the page's wasm a kilobyte or more.
pub(super) fn answer_promise(
    inner: &Rc<Inner>,
    request: Request,
    to_js: fn(Answer) -> Result<JsValue, ClientError>,
) -> Promise {
    let inner = inner.clone();
    future_to_promise(async move {
        let answer = inner.request(request).await.map_err(error_to_js)?;
        to_js(answer).map_err(error_to_js)
    })
}

/// The JS API: thin wrappers that convert values and turn futures into promises.
#[wasm_bindgen]
impl Sluice {
    /// Registers the worker and resolves with a client once it controls the page.
    #[wasm_bindgen(js_name = register, unchecked_return_type = "Promise<Sluice>")]
    pub fn register_js(
        #[wasm_bindgen(js_name = scriptUrl)] script_url: String,
        #[wasm_bindgen(unchecked_optional_param_type = "RegisterOptions")] options: JsValue,
    ) -> Promise {
        future_to_promise(async move {
            let options: RegisterOptions = from_js_json(&options, "options")
                .map_err(|m| error_to_js(ClientError::Registration(m)))?;
            Sluice::register(&script_url, options)
                .await
                .map(JsValue::from)
                .map_err(error_to_js)
        })
    }

    /// Resolves once the worker saved the job, with `done` for its outcome.
    #[wasm_bindgen(js_name = enqueue, unchecked_return_type = "Promise<Enqueued>")]
    pub fn enqueue_js(
        &self,
        #[wasm_bindgen(unchecked_param_type = "JobInput")] job: JsValue,
    ) -> Promise {
        let job = match PageJobs::new().and_then(|page_jobs| page_jobs.one(&job)) {
            Ok(job) => job,
            Err(e) => return Promise::reject(&error_to_js(e)),
        };
        answer_promise(&self.inner, Request::Enqueue { job }, |answer| {
            let e = enqueued(answer)?;
            let obj = Object::new();
            set(&obj, "id", &JsValue::from_str(&e.id));
            set(&obj, "coalesced", &JsValue::from(e.coalesced));
            set(&obj, "state", &JsValue::from_str(e.state.name()));
            set(&obj, "done", &done_to_js(e.done));
            Ok(obj.into())
        })
    }

    #[wasm_bindgen(js_name = enqueueMany, unchecked_return_type = "Promise<EnqueuedMany>")]
    pub fn enqueue_many_js(
        &self,
        #[wasm_bindgen(unchecked_param_type = "JobInput[]")] jobs: JsValue,
        #[wasm_bindgen(js_name = groupId)] group_id: Option<String>,
    ) -> Promise {
        let jobs = match PageJobs::new().and_then(|page_jobs| page_jobs.many(&jobs)) {
            Ok(jobs) => jobs,
            Err(e) => return Promise::reject(&error_to_js(e)),
        };
        answer_promise(
            &self.inner,
            Request::EnqueueMany { jobs, group_id },
            |answer| {
                let r = enqueued_many(answer)?;
                let obj = Object::new();
                set(&obj, "ids", &to_js(&r.ids));
                set(&obj, "warning", &to_js(&r.warning));
                Ok(obj.into())
            },
        )
    }

    /// Cancels a job or a whole group; resolves with the ids cancelled.
    #[wasm_bindgen(js_name = cancel, unchecked_return_type = "Promise<string[]>")]
    pub fn cancel_js(&self, target: String) -> Promise {
        answer_promise(&self.inner, Request::Cancel { target }, |answer| {
            Ok(to_js(&cancelled(answer)?))
        })
    }

    /// Sends a failed job or a conflict again, as it was or with `options` (`{body, headers}`:
    /// a new body, headers set over the job's).
    #[wasm_bindgen(js_name = retry, unchecked_return_type = "Promise<Retried>")]
    pub fn retry_js(
        &self,
        id: String,
        #[wasm_bindgen(unchecked_optional_param_type = "RetryOptions")] options: JsValue,
    ) -> Promise {
        let with = match retry_with_from_js(&options) {
            Ok(with) => with,
            Err(e) => return Promise::reject(&error_to_js(e)),
        };
        let request = Request::Retry {
            id,
            body: with.body,
            headers: with.headers,
        };
        answer_promise(&self.inner, request, |answer| {
            let (id, done) = retried(answer)?;
            let obj = Object::new();
            set(&obj, "id", &JsValue::from_str(&id));
            set(&obj, "done", &done_to_js(done));
            Ok(obj.into())
        })
    }

    /// Headers to send with every job of `budget` from now on (`{Authorization: 'Bearer
    /// ...'}`), each in place of the job's own of that name; ends the budget's wait after the
    /// server refused the old ones.
    #[wasm_bindgen(js_name = setCredentials, unchecked_return_type = "Promise<void>")]
    pub fn set_credentials_js(
        &self,
        budget: String,
        #[wasm_bindgen(unchecked_param_type = "Record<string, string>")] headers: JsValue,
    ) -> Promise {
        let headers = match credentials_from_js(&headers) {
            Ok(headers) => headers,
            Err(e) => return Promise::reject(&error_to_js(e)),
        };
        let request = Request::SetCredentials { budget, headers };
        answer_promise(&self.inner, request, |answer| {
            credentials_set(answer).map(|_| JsValue::UNDEFINED)
        })
    }

    #[wasm_bindgen(js_name = dismiss, unchecked_return_type = "Promise<void>")]
    pub fn dismiss_js(&self, id: String) -> Promise {
        answer_promise(&self.inner, Request::Dismiss { id }, |answer| {
            dismissed(answer).map(|_| JsValue::UNDEFINED)
        })
    }

    #[wasm_bindgen(js_name = configure, unchecked_return_type = "Promise<void>")]
    pub fn configure_js(
        &self,
        #[wasm_bindgen(unchecked_param_type = "EngineConfig")] config: JsValue,
    ) -> Promise {
        // Absent, it is `null` to the reader, which refuses it, as the worker did when the
        // configuration went to it unread.
        let text = if config.is_undefined() {
            Ok("null".to_string())
        } else {
            json_text(&config).map_err(|e| format!("config: {e}"))
        };
        let config = text
            .map_err(|message| ClientError::Worker(ProtocolError::InvalidConfig { message }))
            .and_then(|text| input::read_config(&text));
        match config {
            Ok(config) => answer_promise(&self.inner, Request::Configure { config }, |answer| {
                configured(answer).map(|()| JsValue::UNDEFINED)
            }),
            Err(e) => Promise::reject(&error_to_js(e)),
        }
    }

    #[wasm_bindgen(js_name = snapshot, unchecked_return_type = "Promise<Status>")]
    pub fn snapshot_js(&self) -> Promise {
        answer_promise(&self.inner, Request::Snapshot, |answer| {
            Ok(to_js(&snapshot(answer)?))
        })
    }

    /// One group's progress as the status carries it (`total`, `done`, `failed`,
    /// `conflicts`, `waiting`, `pending`, `etaMs`), or `null` when the worker holds no job of
    /// that group.
    #[wasm_bindgen(js_name = group, unchecked_return_type = "Promise<GroupStatus | null>")]
    pub fn group_js(&self, id: String) -> Promise {
        let inner = self.inner.clone();
        future_to_promise(async move {
            let answer = inner
                .request(Request::Snapshot)
                .await
                .map_err(error_to_js)?;
            let status = to_js(&snapshot(answer).map_err(error_to_js)?);
            let groups = Reflect::get(&status, &"groups".into()).unwrap_or(JsValue::UNDEFINED);
            let named = |g: &JsValue| {
                Reflect::get(g, &"id".into())
                    .ok()
                    .and_then(|v| v.as_string())
                    .is_some_and(|g| g == id)
            };
            Ok(Array::from(&groups)
                .iter()
                .find(named)
                .unwrap_or(JsValue::NULL))
        })
    }

    /// Lists the worker's jobs, optionally of one group.
    #[wasm_bindgen(js_name = jobs, unchecked_return_type = "Promise<JobUpdate[]>")]
    pub fn jobs_js(&self, #[wasm_bindgen(js_name = groupId)] group_id: Option<String>) -> Promise {
        answer_promise(&self.inner, jobs_of(group_id.as_deref()), |answer| {
            Ok(to_js(&job_list(answer)?))
        })
    }

    /// The outcome of any job by id, like `enqueue(...).done`.
    #[wasm_bindgen(js_name = done, unchecked_return_type = "Promise<JobOutcome>")]
    pub fn done_js(&self, id: String) -> Promise {
        done_to_js(self.done(&id))
    }

    /// Calls `listener` with every jobs/status broadcast; returns the unsubscribe function.
    #[wasm_bindgen(js_name = subscribe, unchecked_return_type = "() => void")]
    pub fn subscribe_js(
        &self,
        #[wasm_bindgen(unchecked_param_type = "(message: WorkerBroadcast) => void")]
        listener: Function,
    ) -> JsValue {
        let id = self.inner.add_listener(Listener::Js(listener));
        self.inner.replay_status(id);
        let weak = Rc::downgrade(&self.inner);
        Closure::<dyn FnMut()>::new(move || {
            if let Some(inner) = weak.upgrade() {
                inner.remove_listener(id);
            }
        })
        .into_js_value()
    }

    /// A reference to a part of job `jobId`'s answer, for a later job's URL, headers or body,
    /// which then waits for that job and is sent with the value filled in: `part` is
    /// `"body.<path>"` (`"body.data.0.id"`), `"header.<name>"` or `"status"`. Gives
    /// `"{{job:<jobId>.<part>}}"`.
    #[wasm_bindgen(js_name = ref)]
    pub fn result_ref_js(
        &self,
        #[wasm_bindgen(js_name = jobId)] job_id: &str,
        part: &str,
    ) -> String {
        let mut text = String::from("{{job:");
        for piece in [job_id, ".", part, "}}"] {
            text.push_str(piece);
        }
        text
    }

    /// Requests and job waits not yet answered by this client.
    #[wasm_bindgen(getter, js_name = outstanding)]
    pub fn outstanding_js(&self) -> u32 {
        let core = self.inner.core.borrow();
        (core.outstanding() + core.waiting_jobs()) as u32
    }

    /// Stops listening; outstanding promises reject with code "closed".
    #[wasm_bindgen(js_name = close)]
    pub fn close_js(&self) {
        self.close();
    }
}
