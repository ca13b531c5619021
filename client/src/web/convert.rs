//! Values between JS and Rust: jobs and configurations from the page, answers, outcomes and
//! errors (`SluiceError`) to it, ids and URLs.

use std::cell::RefCell;

use js_sys::{Array, Function, Object, Promise, Reflect, JSON};
use sluice_shared::job::{read_headers, JobOutcome, JobSpec, RetryWith};
use sluice_shared::json::{self, FromJson, Json, RawJson, ToJson};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::future_to_promise;

use crate::core::{ClientError, Done, JobEnd};
use crate::job::{self, Body, JobReader};

pub(super) fn now() -> f64 {
    js_sys::Date::now()
}

pub(super) fn js_message(e: &JsValue) -> String {
    if let Some(err) = e.dyn_ref::<js_sys::Error>() {
        return String::from(err.message());
    }
    e.as_string()
        .or_else(|| JSON::stringify(e).ok().map(String::from))
        .unwrap_or_else(|| "unknown error".into())
}

thread_local! {
    /// `crypto` and its `getRandomValues`, looked up once.
    static GET_RANDOM_VALUES: Option<(JsValue, Function)> = {
        let crypto = Reflect::get(&js_sys::global(), &"crypto".into()).ok();
        crypto.and_then(|c| {
            let f = Reflect::get(&c, &"getRandomValues".into()).ok()?;
            f.dyn_into::<Function>().ok().map(|f| (c, f))
        })
    };
    /// Random bytes for ids and how many of them are used, drawn 64 ids' worth at a time.
    static ID_BYTES: RefCell<([u8; 16 * 64], usize)> = const { RefCell::new(([0; 16 * 64], 16 * 64)) };
}

/// 16 fresh bytes from `crypto.getRandomValues`, or none where the page has no `crypto`.
fn random_bytes() -> Option<[u8; 16]> {
    ID_BYTES.with(|pool| {
        let (bytes, used) = &mut *pool.borrow_mut();
        if *used == bytes.len() {
            let fresh = js_sys::Uint8Array::new_with_length(bytes.len() as u32);
            let drawn = GET_RANDOM_VALUES
                .with(|g| g.as_ref().is_some_and(|(c, f)| f.call1(c, &fresh).is_ok()));
            if !drawn {
                return None;
            }
            fresh.copy_to(bytes);
            *used = 0;
        }
        let mut id = [0; 16];
        id.copy_from_slice(&bytes[*used..*used + 16]);
        *used += 16;
        Some(id)
    })
}

/// A random id: a UUID v4 (as `crypto.randomUUID()` writes one) from `crypto.getRandomValues`,
/// else Math.random. An `enqueueMany` of 10,000 creates asks for 20,000 ids; one
/// `randomUUID()` call each, its string made in JS and copied in, was a third of the page's
/// time reading the jobs, hence bytes for 64 ids a call.
pub(super) fn random_id() -> String {
    if let Some(bytes) = random_bytes() {
        return sluice_shared::random::uuid_v4_from(bytes);
    }
    let mut s = String::new();
    for _ in 0..4 {
        let n = (js_sys::Math::random() * 4_294_967_296.0) as u32;
        s.push_str(&format!("{n:08x}"));
    }
    s
}

/// Resolves job URLs against the page's URL. The jobs of one `enqueueMany` usually share a
/// few URLs: the last one resolved is remembered.
pub(super) struct UrlResolver {
    base: String,
    last: RefCell<Option<(String, String)>>,
}

impl UrlResolver {
    pub(super) fn for_page() -> Result<Self, ClientError> {
        let base = web_sys::window()
            .and_then(|w| w.location().href().ok())
            .ok_or_else(|| {
                ClientError::InvalidJob("bad url: no page location to resolve against".into())
            })?;
        Ok(Self {
            base,
            last: RefCell::new(None),
        })
    }

    pub(super) fn resolve(&self, url: &str) -> Result<String, String> {
        if let Some((from, to)) = self.last.borrow().as_ref() {
            if from == url {
                return Ok(to.clone());
            }
        }
        let resolved = web_sys::Url::new_with_base(url, &self.base)
            .map(|u| u.href())
            .map_err(|e| js_message(&e))?;
        *self.last.borrow_mut() = Some((url.to_string(), resolved.clone()));
        Ok(resolved)
    }
}

/// Rust data to a plain JS value, as the worker would write it.
pub(super) fn to_js<T: ToJson + ?Sized>(value: &T) -> JsValue {
    JSON::parse(&json::to_string(value)).unwrap_or(JsValue::NULL)
}

/// `JSON.stringify` of a page's value, or why it cannot be.
pub(super) fn json_text(v: &JsValue) -> Result<String, String> {
    let text = JSON::stringify(v).map_err(|e| js_message(&e))?;
    // Not a string but `undefined` for a value JSON cannot hold (a function).
    text.as_string()
        .ok_or_else(|| "not data that JSON can hold".to_string())
}

pub(super) fn set(obj: &Object, key: &str, value: &JsValue) {
    let _ = Reflect::set(obj, &JsValue::from_str(key), value);
}

#[wasm_bindgen]
extern "C" {
    /// The class of every error this client rejects with: `client/js/sluice-error.js`, which
    /// the build appends to this module's glue (no `module` here: the glue names it as it
    /// stands in its own module). Only the package's glue has it; the Rust API never makes one.
    #[wasm_bindgen(extends = js_sys::Error, extends = Object)]
    type SluiceError;

    #[wasm_bindgen(constructor)]
    fn new(message: &str, code: &str) -> SluiceError;
}

pub(super) fn error_to_js(e: ClientError) -> JsValue {
    let err = SluiceError::new(&e.to_string(), e.code());
    if let ClientError::Worker(p) = &e {
        set(&err, "detail", &to_js(p));
    }
    err.into()
}

pub(super) fn job_end_to_js(e: JobEnd) -> JsValue {
    let err = SluiceError::new(&e.reason, e.code());
    set(&err, "jobId", &JsValue::from_str(&e.id));
    set(
        &err,
        "state",
        &e.state
            .map_or(JsValue::NULL, |s| JsValue::from_str(s.name())),
    );
    set(
        &err,
        "status",
        &e.status.map_or(JsValue::NULL, JsValue::from),
    );
    if let Some(outcome) = &e.outcome {
        set(&err, "outcome", &outcome_to_js(outcome));
    }
    err.into()
}

pub(super) fn outcome_to_js(o: &JobOutcome) -> JsValue {
    let obj = Object::new();
    set(&obj, "status", &JsValue::from(o.status));
    let headers = Object::new();
    for (name, value) in job::headers_object(&o.headers) {
        set(&headers, &name, &JsValue::from_str(&value));
    }
    set(&obj, "headers", &headers);
    set(&obj, "body", &JsValue::from_str(&o.body));
    obj.into()
}

thread_local! {
    static NOOP: Closure<dyn FnMut(JsValue)> = Closure::new(|_: JsValue| {});
}

/// A JS promise for a job's end, marked as handled so that a page that never looks at
/// `done` does not get "uncaught (in promise)" noise for failed jobs.
pub(super) fn done_to_js(done: Done) -> Promise {
    let p =
        future_to_promise(
            async move { done.await.map(|o| outcome_to_js(&o)).map_err(job_end_to_js) },
        );
    NOOP.with(|f| {
        let _ = p.catch(f);
    });
    p
}

thread_local! {
    /// `Object.prototype`, looked up once: a job's body is checked against it.
    static OBJECT_PROTOTYPE: JsValue = Object::get_prototype_of(&Object::new()).into();
}

fn is_plain_data(v: &JsValue) -> bool {
    if v.as_f64().is_some() || v.as_bool().is_some() || Array::is_array(v) {
        return true;
    }
    let Some(obj) = v.dyn_ref::<Object>() else {
        return false;
    };
    let proto = Object::get_prototype_of(obj);
    proto.is_null() || OBJECT_PROTOTYPE.with(|object| Object::is(&proto, object))
}

/// A page's `retry` options (`{body, headers}`, both optional) to what the retry changes. A
/// body is a string, or plain data sent as JSON; headers an object or `[name, value]` pairs.
pub(super) fn retry_with_from_js(options: &JsValue) -> Result<RetryWith, ClientError> {
    if options.is_undefined() || options.is_null() {
        return Ok(RetryWith::default());
    }
    let invalid = |m: String| ClientError::InvalidJob(format!("retry options: {m}"));
    if !options.is_object() {
        return Err(invalid("an object like {body, headers}".into()));
    }
    let raw_body = Reflect::get(options, &"body".into()).unwrap_or(JsValue::UNDEFINED);
    let body = match body_kind(&raw_body).map_err(invalid)? {
        BodyKind::None => None,
        BodyKind::Text => raw_body.as_string(),
        BodyKind::Json => Some(json_text(&raw_body).map_err(|e| invalid(format!("body: {e}")))?),
    };
    let text = json_text(options).map_err(invalid)?;
    let value = json::parse(&text).map_err(|e| invalid(e.0))?;
    let members = json::members(&value, "struct RetryOptions").map_err(|e| invalid(e.0))?;
    json::deny_unknown(members, &["body", "headers"]).map_err(|e| invalid(e.0))?;
    let headers = match members.iter().find(|(name, _)| name.as_ref() == "headers") {
        Some((_, json::Json::Null)) | None => None,
        Some((_, v)) => Some(read_headers(v).map_err(|e| invalid(e.0))?),
    };
    Ok(RetryWith { body, headers })
}

/// `setCredentials`' headers: an object of names and values, as a job's `headers`.
pub(super) fn credentials_from_js(headers: &JsValue) -> Result<Vec<(String, String)>, ClientError> {
    let invalid = |m: String| ClientError::InvalidJob(format!("credentials: {m}"));
    if !headers.is_object() {
        return Err(invalid(
            "an object of header names and values, like {Authorization: 'Bearer ...'}".into(),
        ));
    }
    let text = json_text(headers).map_err(invalid)?;
    let value = json::parse(&text).map_err(|e| invalid(e.0))?;
    read_headers(&value).map_err(|e| invalid(e.0))
}

/// Reads a page's jobs into wire jobs: what every read needs, made once per `enqueue` or
/// `enqueueMany`.
pub(super) struct PageJobs {
    urls: UrlResolver,
    reader: JobReader,
    /// `"body"` as a JS string, made once: made per job, it was 5 of the 70 ms that reading
    /// 10,000 jobs took the page (profiled).
    body_key: JsValue,
}

impl PageJobs {
    pub(super) fn new() -> Result<Self, ClientError> {
        Ok(Self {
            urls: UrlResolver::for_page()?,
            reader: JobReader::default(),
            body_key: JsValue::from_str("body"),
        })
    }

    /// One job: its `JSON.stringify` text parsed and read ([`PageJobs::parsed`]).
    pub(super) fn one(&self, job: &JsValue) -> Result<JobSpec, ClientError> {
        if !job.is_object() {
            return Err(ClientError::InvalidJob(
                "a job is an object like {url, method, body}".into(),
            ));
        }
        let text = json_text(job).map_err(|e| {
            // Say so when it is the body that JSON cannot hold (a BigInt, a cycle).
            let body = Reflect::get(job, &self.body_key).unwrap_or(JsValue::UNDEFINED);
            match body_kind(&body) {
                Err(refused) => ClientError::InvalidJob(refused),
                Ok(BodyKind::Json) if json_text(&body).is_err() => {
                    ClientError::InvalidJob(format!("body: {e}"))
                }
                Ok(_) => ClientError::InvalidJob(e),
            }
        })?;
        let value = json::parse(&text).map_err(|e| ClientError::InvalidJob(e.0))?;
        self.parsed(job, &value)
    }

    /// The jobs of an `enqueueMany`, each named by its place in the error. One
    /// `JSON.stringify` and one parse for all of them: 10,000 jobs written one at a time (and
    /// each body once more on its own), each a call into JS and its text copied in, were 40%
    /// of the page's time reading them (39 of 99 ms, profiled). When
    /// the whole does not parse into as many jobs, they are read one by one, for the error
    /// that names the job.
    pub(super) fn many(&self, jobs: &JsValue) -> Result<Vec<JobSpec>, ClientError> {
        if !Array::is_array(jobs) {
            return Err(ClientError::InvalidJob(
                "enqueueMany takes an array of jobs".into(),
            ));
        }
        let jobs = Array::from(jobs);
        let text = json_text(&jobs).ok();
        let value = text.as_deref().and_then(|t| json::parse(t).ok());
        let parsed = match &value {
            Some(Json::Arr(items)) if items.len() == jobs.length() as usize => Some(items),
            _ => None,
        };
        let mut specs = Vec::with_capacity(jobs.length() as usize);
        for (i, job) in jobs.iter().enumerate() {
            let spec = match parsed.and_then(|items| items.get(i)) {
                Some(value) if job.is_object() => self.parsed(&job, value),
                _ => self.one(&job),
            };
            specs.push(spec.map_err(|e| {
                let reason = match e {
                    ClientError::InvalidJob(reason) => reason,
                    other => other.to_string(),
                };
                ClientError::InvalidJob(format!("job {i}: {reason}"))
            })?);
        }
        Ok(specs)
    }

    /// A page's job object and its `JSON.stringify` text parsed, to the wire job. Whether
    /// the body is sent as it is (a string), as JSON (plain data) or refused (a Blob, a Date,
    /// which JSON could write but not as the page meant) is told by the JS value; the text
    /// is the parsed body written back as it came (a float as the shortest text that reads
    /// back the same number: `1e21` where `JSON.stringify` wrote `1e+21`).
    fn parsed(&self, job: &JsValue, value: &Json) -> Result<JobSpec, ClientError> {
        let raw_body = Reflect::get(job, &self.body_key).unwrap_or(JsValue::UNDEFINED);
        let parsed_body = job::body_member(value);
        let body = match (
            body_kind(&raw_body).map_err(ClientError::InvalidJob)?,
            parsed_body,
        ) {
            (BodyKind::None, _) => Body::None,
            (BodyKind::Text, Some(Json::Str(s))) => Body::Text(s.to_string()),
            (BodyKind::Text, _) => Body::Text(raw_body.as_string().unwrap_or_default()),
            (BodyKind::Json, Some(v)) => {
                Body::Json(RawJson::from_json(v).map_or_else(|_| "null".into(), RawJson::into_text))
            }
            // A value `JSON.stringify` leaves out, as it would leave out the body.
            (BodyKind::Json, None) => Body::Json("null".into()),
        };
        let spec = self.reader.read(value)?;
        job::normalize(spec, body, &|url| self.urls.resolve(url), &mut random_id)
    }
}

/// What a page's `body` (of a job, or of a retry) is sent as; see [`PageJobs::parsed`].
enum BodyKind {
    None,
    Text,
    Json,
}

/// The body's kind, or why it cannot be sent.
fn body_kind(body: &JsValue) -> Result<BodyKind, String> {
    if body.is_undefined() || body.is_null() {
        Ok(BodyKind::None)
    } else if body.is_string() {
        Ok(BodyKind::Text)
    } else if is_plain_data(body) {
        Ok(BodyKind::Json)
    } else {
        Err(
            "a body must be a string or plain data (objects, arrays, numbers) to send as JSON; \
             convert Blobs, FormData and URLSearchParams to a string first"
                .into(),
        )
    }
}

/// A page's options object: its default when absent.
pub(super) fn from_js_json<T: FromJson + Default>(v: &JsValue, what: &str) -> Result<T, String> {
    if v.is_undefined() || v.is_null() {
        return Ok(T::default());
    }
    let text = json_text(v).map_err(|e| format!("{what}: {e}"))?;
    json::from_str(&text).map_err(|e| format!("{what}: {e}"))
}
