//! The browser side: registering the worker, posting and receiving messages, timers, and the
//! `Sluice` class exported to JavaScript.
//!
//! Messages are JSON text both ways (see `sluice_shared::protocol`). Values cross between JS
//! and Rust through `JSON.stringify`/`JSON.parse` and the worker's JSON codec
//! (`sluice_shared::json`) rather than a conversion library: the worker speaks JSON anyway, and
//! the page bundle stays small.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use js_sys::{Array, Function, Object, Promise, Reflect, JSON};
use sluice_shared::config::EngineConfig;
use sluice_shared::job::{JobOutcome, JobSpec, JobState};
use sluice_shared::json::{self, FromJson, ToJson};
use sluice_shared::protocol::{JobUpdate, ProtocolError, ReplyBody, Request, WorkerMessage};
use sluice_shared::status::Status;
use sluice_shared::JobId;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::{future_to_promise, JsFuture};
use web_sys::{
    AddEventListenerOptions, Event, MessageChannel, MessageEvent, MessagePort, RegistrationOptions,
    ServiceWorkerContainer, ServiceWorkerRegistration,
};

use crate::core::{
    unexpected_reply, Answer, ClientError, Core, Done, JobEnd, PortState, Received, Timing, Via,
};
use crate::input::{self, RegisterOptions};
use crate::job::{self, Body};

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
export type Lane = "interactive" | "bulk" | "background";
export type JobKind = "create" | "patch" | "delete" | "custom";
export type JobState = "queued" | "sending" | "retry-wait" | "done" | "failed" | "cancelled";

/** A job as a page writes it. Only `url` is required. */
export interface JobInput {
  /** The job's id. Default: a fresh UUID, fixed before the first send, so that a request sent
   * again after a lost reply names the same job and is not saved twice. */
  id?: string;
  /** Absolute, or relative to the page. */
  url: string;
  /** Default: POST when there is a body, GET otherwise. */
  method?: string;
  /** Budget name; default: the budget whose `matchPrefixes` cover the URL. */
  budget?: string;
  /** Default "bulk". */
  lane?: Lane;
  /** Jobs with the same key run one at a time, in order. */
  key?: string | null;
  /** Default "custom". A "create" gets an Idempotency-Key. */
  kind?: JobKind;
  headers?: Record<string, string> | [string, string][];
  /** A string is sent as is; anything else as JSON (Content-Type: application/json). */
  body?: unknown;
  groupId?: string | null;
  /** As in `fetch`; default "same-origin". */
  credentials?: "omit" | "same-origin" | "include";
  /** As in `fetch`; default "cors". "no-cors" is refused: its answer cannot be read. */
  mode?: "cors" | "same-origin";
  /** As in `fetch`; default "follow". */
  redirect?: "follow" | "error" | "manual";
  referrerPolicy?: ReferrerPolicy;
  /** A subresource-integrity string the response must match. */
  integrity?: string;
}

/** The server's final answer to a done job. Header names are lower-case. */
export interface JobOutcome {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export interface Enqueued {
  /** The job's id (the earlier job's id when this one was folded into it). */
  id: string;
  coalesced: boolean;
  state: JobState;
  /** Resolves when the job is done; rejects with a SluiceError when it failed or was cancelled. */
  done: Promise<JobOutcome>;
}

export interface EnqueuedMany {
  ids: string[];
  /** Set when the group needs more than a whole window's budget. */
  warning: string | null;
}

export interface Retried {
  id: string;
  done: Promise<JobOutcome>;
}

export interface RegisterOptions {
  /** Default "/". */
  scope?: string;
  /** How the worker script is loaded. Default "classic". */
  type?: "classic" | "module";
  /** Resend an unanswered request after this long (enqueues after 10/3 as long). Default 3000. */
  resendAfterMs?: number;
  /** Send keepAlive this often while work is pending. Default 10000. */
  keepAliveMs?: number;
  /** How long to wait for the worker to take control of the page. Default 10000. */
  controlTimeoutMs?: number;
}

/** Rejections carry a stable `code` besides the message. */
export interface SluiceError extends Error {
  /** The worker's code (e.g. "unknown-budget", "not-found"), "no-answer", "invalid-job",
   * "unsupported", "registration", "decode", "closed"; for a job's `done`: "failed",
   * "cancelled" or "gone". */
  code: string;
  /** The worker's error object, when the worker refused the request. */
  detail?: unknown;
  /** For a job's `done`. */
  jobId?: string;
  state?: JobState | null;
  status?: number | null;
}

export interface JobError { status: number | null; message: string; }
export interface JobUpdate {
  id: string; state: JobState; lane: Lane; key: string | null; groupId: string | null;
  budget: string; attempts: number; notBefore: number; coalesced: number;
  lastError: JobError | null;
  /** Only in the update of the tab that enqueued the job, and in answers to `jobs`. */
  outcome: { status: number; headers: [string, string][]; body: string } | null;
  /** True in a broadcast to another tab: the outcome and the server's words are left out. */
  withheld: boolean;
}
export interface RateWindow { limit: number; lengthMs: number; }
export interface BudgetStatus {
  name: string; windows: RateWindow[]; concurrency: number; inFlight: number; pending: number;
  pausedUntil: number | null; pauseReason: string | null; trouble: string | null;
  /** Requests out far longer than answers take (a lost answer, a hung connection). */
  overdue: string | null;
  serverRemaining: number | null; serverResetAt: number | null; etaMs: number | null;
  requests: number; rateLimited: number; retries: number; rateLimitedPer1000: number;
  achievedShare: number;
}
export interface GroupStatus {
  id: string; total: number; done: number; failed: number; cancelled: number; pending: number;
  warning: string | null;
}
export interface LaneStatus { lane: Lane; waiting: number; waitP50Ms: number | null; waitP95Ms: number | null; }
export interface Status {
  now: number;
  counts: { queued: number; sending: number; retryWait: number; done: number; failed: number; cancelled: number };
  budgets: BudgetStatus[]; groups: GroupStatus[]; lanes: LaneStatus[];
  etaMs: number | null; attemptsPerJob: number; offline: boolean; warnings: string[];
}
export interface BudgetConfig {
  name: string; windows: RateWindow[]; concurrency?: number;
  algorithm?: "sliding-log" | "token-bucket" | "gcra" | "fixed-window";
  matchPrefixes?: string[]; targetUtilization?: number; pacing?: boolean;
  /** The API counts CORS preflights (OPTIONS) against the limit: count them as starts. */
  countPreflights?: boolean;
  /** The API's Access-Control-Max-Age in ms (default 5000, the browser's without it). */
  preflightMaxAgeMs?: number;
}
export interface EngineConfig {
  budgets?: BudgetConfig[];
  retry?: { maxAttempts?: number; baseDelayMs?: number; maxDelayMs?: number; retryRatio?: number;
            retryReserve?: number; defaultPauseMs?: number; timeoutMs?: number };
  aging?: { bulkMs?: number; backgroundMs?: number };
  retentionMs?: number;
  maxBodyBytes?: number;
  /** Where jobs may go; read from the worker script only (a page's is ignored). */
  allow?: string[];
  /** Clear a job's request headers when it fails for good (its record stays). Default false. */
  dropFailedHeaders?: boolean;
}
/** What subscribers receive: every job-state and status broadcast of the worker. */
export type WorkerBroadcast =
  | { type: "jobs"; updates: JobUpdate[]; /** Jobs the worker forgot (expired, dismissed). */ removed: string[] }
  | { type: "status"; status: Status };
"#;

/// A job the worker accepted.
pub struct Enqueued {
    pub id: JobId,
    pub coalesced: bool,
    pub state: JobState,
    pub done: Done,
}

pub struct EnqueuedMany {
    pub ids: Vec<JobId>,
    pub warning: Option<String>,
}

/// Ends a Rust subscription when dropped.
pub struct Subscription {
    inner: Weak<Inner>,
    id: u32,
}

impl Subscription {
    /// Keeps the subscription for the life of the client.
    pub fn forget(self) {
        std::mem::forget(self)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.upgrade() {
            inner.remove_listener(self.id);
        }
    }
}

#[derive(Clone)]
enum Listener {
    Js(Function),
    /// Gets the message text; `Sluice::subscribe` wraps the typed callback, so that the typed
    /// decoding is only in bundles that use it.
    Rust(Rc<dyn Fn(&str)>),
}

struct Handlers {
    message: Closure<dyn FnMut(MessageEvent)>,
    controller_change: Closure<dyn FnMut(Event)>,
    tick: Closure<dyn FnMut()>,
    port_message: Closure<dyn FnMut(MessageEvent)>,
}

struct Inner {
    core: RefCell<Core>,
    container: ServiceWorkerContainer,
    registration: ServiceWorkerRegistration,
    listeners: RefCell<Vec<(u32, Listener)>>,
    next_listener: Cell<u32>,
    timer: Cell<Option<i32>>,
    /// Kept until the client is dropped, even after `close()`: a closure must not be freed
    /// while it may still be running (`close()` can be called from a subscriber).
    handlers: RefCell<Option<Handlers>>,
    /// This page's end of its channel to the worker (see [`Via`]).
    port: RefCell<Option<MessagePort>>,
    closed: Cell<bool>,
}

/// The page's handle on the Sluice worker.
#[wasm_bindgen]
#[derive(Clone)]
pub struct Sluice {
    inner: Rc<Inner>,
}

fn now() -> f64 {
    js_sys::Date::now()
}

fn js_message(e: &JsValue) -> String {
    if let Some(err) = e.dyn_ref::<js_sys::Error>() {
        return String::from(err.message());
    }
    e.as_string()
        .or_else(|| JSON::stringify(e).ok().map(String::from))
        .unwrap_or_else(|| "unknown error".into())
}

thread_local! {
    /// `crypto` and its `randomUUID`, looked up once: an `enqueueMany` of 10,000 creates asks
    /// for 20,000 ids.
    static RANDOM_UUID: Option<(JsValue, Function)> = {
        let crypto = Reflect::get(&js_sys::global(), &"crypto".into()).ok();
        crypto.and_then(|c| {
            let f = Reflect::get(&c, &"randomUUID".into()).ok()?;
            f.dyn_into::<Function>().ok().map(|f| (c, f))
        })
    };
}

/// A random id: `crypto.randomUUID()` where available (secure contexts), else Math.random.
fn random_id() -> String {
    let uuid = RANDOM_UUID.with(|r| {
        r.as_ref()
            .and_then(|(crypto, f)| f.call0(crypto).ok())
            .and_then(|v| v.as_string())
    });
    if let Some(s) = uuid {
        return s;
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
struct UrlResolver {
    base: String,
    last: RefCell<Option<(String, String)>>,
}

impl UrlResolver {
    fn for_page() -> Result<Self, ClientError> {
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

    fn resolve(&self, url: &str) -> Result<String, String> {
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
fn to_js<T: ToJson + ?Sized>(value: &T) -> JsValue {
    JSON::parse(&json::to_string(value)).unwrap_or(JsValue::NULL)
}

/// `JSON.stringify` of a page's value, or why it cannot be.
fn json_text(v: &JsValue) -> Result<String, String> {
    let text = JSON::stringify(v).map_err(|e| js_message(&e))?;
    // Not a string but `undefined` for a value JSON cannot hold (a function).
    text.as_string()
        .ok_or_else(|| "not data that JSON can hold".to_string())
}

fn set(obj: &Object, key: &str, value: &JsValue) {
    let _ = Reflect::set(obj, &JsValue::from_str(key), value);
}

fn error_to_js(e: ClientError) -> JsValue {
    let err = js_sys::Error::new(&e.to_string());
    set(&err, "code", &JsValue::from_str(e.code()));
    if let ClientError::Worker(p) = &e {
        set(&err, "detail", &to_js(p));
    }
    err.into()
}

fn job_end_to_js(e: JobEnd) -> JsValue {
    let err = js_sys::Error::new(&e.reason);
    let code = match e.state {
        Some(JobState::Cancelled) => "cancelled",
        Some(_) => "failed",
        None if e.reason == ClientError::Closed.to_string() => "closed",
        None => "gone",
    };
    set(&err, "code", &JsValue::from_str(code));
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
    err.into()
}

fn outcome_to_js(o: &JobOutcome) -> JsValue {
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
fn done_to_js(done: Done) -> Promise {
    let p =
        future_to_promise(
            async move { done.await.map(|o| outcome_to_js(&o)).map_err(job_end_to_js) },
        );
    NOOP.with(|f| {
        let _ = p.catch(f);
    });
    p
}

fn is_plain_data(v: &JsValue) -> bool {
    if v.as_f64().is_some() || v.as_bool().is_some() || Array::is_array(v) {
        return true;
    }
    let Some(obj) = v.dyn_ref::<Object>() else {
        return false;
    };
    let proto = Object::get_prototype_of(obj);
    proto.is_null() || Object::is(&proto, &Object::get_prototype_of(&Object::new()))
}

/// A page's job object to the wire job.
fn job_from_js(job: &JsValue, urls: &UrlResolver) -> Result<JobSpec, ClientError> {
    if !job.is_object() {
        return Err(ClientError::InvalidJob(
            "a job is an object like {url, method, body}".into(),
        ));
    }
    let raw_body = Reflect::get(job, &"body".into()).unwrap_or(JsValue::UNDEFINED);
    let body = if raw_body.is_undefined() || raw_body.is_null() {
        Body::None
    } else if let Some(s) = raw_body.as_string() {
        Body::Text(s)
    } else if is_plain_data(&raw_body) {
        let text =
            json_text(&raw_body).map_err(|e| ClientError::InvalidJob(format!("body: {e}")))?;
        Body::Json(text)
    } else {
        return Err(ClientError::InvalidJob(
            "a body must be a string or plain data (objects, arrays, numbers) to send as JSON; \
             convert Blobs, FormData and URLSearchParams to a string first"
                .into(),
        ));
    };
    let text = json_text(job).map_err(ClientError::InvalidJob)?;
    let spec = job::read_job(&text)?;
    job::normalize(spec, body, &|url| urls.resolve(url), &mut random_id)
}

/// The jobs of a page's `enqueueMany`, each named by its place in the error.
fn jobs_from_js(jobs: &JsValue) -> Result<Vec<JobSpec>, ClientError> {
    if !Array::is_array(jobs) {
        return Err(ClientError::InvalidJob(
            "enqueueMany takes an array of jobs".into(),
        ));
    }
    let urls = UrlResolver::for_page()?;
    let mut specs = Vec::new();
    for (i, j) in Array::from(jobs).iter().enumerate() {
        let spec = job_from_js(&j, &urls).map_err(|e| {
            let reason = match e {
                ClientError::InvalidJob(reason) => reason,
                other => other.to_string(),
            };
            ClientError::InvalidJob(format!("job {i}: {reason}"))
        })?;
        specs.push(spec);
    }
    Ok(specs)
}

/// A page's options object: its default when absent.
fn from_js_json<T: FromJson + Default>(v: &JsValue, what: &str) -> Result<T, String> {
    if v.is_undefined() || v.is_null() {
        return Ok(T::default());
    }
    let text = json_text(v).map_err(|e| format!("{what}: {e}"))?;
    json::from_str(&text).map_err(|e| format!("{what}: {e}"))
}

impl Inner {
    /// Posts to the worker as an event (`postMessage`), which starts a stopped worker; hands it
    /// a new port with it when the page has none.
    fn post(&self, text: &str) {
        if text.is_empty() || self.closed.get() {
            return;
        }
        // No controller means the page is between workers: the next tick resends.
        let target = self
            .container
            .controller()
            .or_else(|| self.registration.active());
        let Some(worker) = target else { return };
        let text = JsValue::from_str(text);
        let offer = self.core.borrow_mut().posting_event(now());
        match offer.then(|| self.new_port()).flatten() {
            Some(theirs) => {
                let _ = worker.post_message_with_transferable(&text, &Array::of1(&theirs));
            }
            None => {
                let _ = worker.post_message(&text);
            }
        }
    }

    /// Sends a request the way [`Core::request`] chose (never the port once closed).
    fn send(&self, text: &str, via: Via) {
        if via == Via::Port {
            let sent = self
                .port
                .borrow()
                .as_ref()
                .is_some_and(|port| port.post_message(&JsValue::from_str(text)).is_ok());
            if sent {
                self.check_port_answer_soon();
                return;
            }
        }
        self.post(text);
    }

    /// One tick just after a port request is due for its answer (see
    /// [`Timing::port_answer_ms`]): the regular ticks are far too slow for that.
    fn check_port_answer_soon(&self) {
        let handlers = self.handlers.borrow();
        let (Some(window), Some(h)) = (web_sys::window(), handlers.as_ref()) else {
            return;
        };
        let ms = self.core.borrow().timing().port_answer_ms + 1.0;
        let _ = window.set_timeout_with_callback_and_timeout_and_arguments_0(
            h.tick.as_ref().unchecked_ref(),
            ms as i32,
        );
    }

    /// A new channel: keeps this page's end (closing an older one) and returns the worker's.
    fn new_port(&self) -> Option<MessagePort> {
        let channel = MessageChannel::new().ok()?;
        let handlers = self.handlers.borrow();
        let h = handlers.as_ref()?;
        let mine = channel.port1();
        mine.set_onmessage(Some(h.port_message.as_ref().unchecked_ref()));
        self.replace_port(Some(mine));
        Some(channel.port2())
    }

    fn replace_port(&self, port: Option<MessagePort>) {
        if let Some(old) = self.port.replace(port) {
            old.set_onmessage(None);
            old.close();
        }
    }

    fn on_port_message(&self, event: MessageEvent) {
        self.core.borrow_mut().port_answered();
        self.on_message(event);
    }

    fn ensure_timer(&self) {
        if self.timer.get().is_some() || !self.core.borrow().needs_ticks() {
            return;
        }
        let Some(window) = web_sys::window() else {
            return;
        };
        let handlers = self.handlers.borrow();
        let Some(h) = handlers.as_ref() else { return };
        let period = self.core.borrow().timing().tick_ms();
        if let Ok(id) = window.set_interval_with_callback_and_timeout_and_arguments_0(
            h.tick.as_ref().unchecked_ref(),
            period as i32,
        ) {
            self.timer.set(Some(id));
        }
    }

    fn stop_timer(&self) {
        if let (Some(id), Some(window)) = (self.timer.take(), web_sys::window()) {
            window.clear_interval_with_handle(id);
        }
    }

    fn on_tick(&self) {
        let posts = self.core.borrow_mut().tick(now());
        if self.core.borrow().port_state() == PortState::None {
            // A request sent over the port went unanswered: it is not to be trusted.
            self.replace_port(None);
        }
        for p in &posts {
            self.post(p);
        }
        if !self.core.borrow().needs_ticks() {
            self.stop_timer();
        }
    }

    fn on_message(&self, event: MessageEvent) {
        let data = event.data();
        let text = match data.as_string() {
            Some(s) => s,
            None => match JSON::stringify(&data) {
                Ok(s) => s.into(),
                Err(_) => return,
            },
        };
        let received = self.core.borrow_mut().receive(&text, now());
        let posts = self.core.borrow_mut().take_posts();
        for p in &posts {
            self.post(p);
        }
        if received == Received::Broadcast {
            // Copied out: a listener may subscribe, unsubscribe or call the client.
            let listeners: Vec<Listener> = self
                .listeners
                .borrow()
                .iter()
                .map(|(_, l)| l.clone())
                .collect();
            let mut js_value = None;
            for l in listeners {
                match l {
                    Listener::Js(f) => {
                        let v = js_value
                            .get_or_insert_with(|| JSON::parse(&text).unwrap_or(JsValue::NULL));
                        if let Err(e) = f.call1(&JsValue::NULL, v) {
                            web_sys::console::error_2(&"sluice: a subscriber threw".into(), &e);
                        }
                    }
                    Listener::Rust(f) => f(&text),
                }
            }
        }
        self.ensure_timer();
    }

    fn on_controller_change(&self) {
        self.replace_port(None);
        self.core.borrow_mut().forget_port();
        let posts = self.core.borrow_mut().resend_all(now());
        for p in &posts {
            self.post(p);
        }
    }

    fn add_listener(&self, l: Listener) -> u32 {
        let id = self.next_listener.get() + 1;
        self.next_listener.set(id);
        self.listeners.borrow_mut().push((id, l));
        id
    }

    fn remove_listener(&self, id: u32) {
        self.listeners.borrow_mut().retain(|(i, _)| *i != id);
    }

    async fn request(&self, request: Request) -> Result<Answer, ClientError> {
        let (text, via, pending) = self.core.borrow_mut().request(request, now());
        self.send(&text, via);
        self.ensure_timer();
        pending.await
    }

    fn close(&self) {
        if self.closed.replace(true) {
            return;
        }
        self.stop_timer();
        self.core.borrow_mut().close();
        self.replace_port(None);
        self.listeners.borrow_mut().clear();
        if let Some(h) = self.handlers.borrow().as_ref() {
            let _ = self
                .container
                .remove_event_listener_with_callback("message", h.message.as_ref().unchecked_ref());
            let _ = self.container.remove_event_listener_with_callback(
                "controllerchange",
                h.controller_change.as_ref().unchecked_ref(),
            );
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

async fn wait_for_control(container: &ServiceWorkerContainer, timeout_ms: f64) {
    if container.controller().is_some() {
        return;
    }
    let c = container.clone();
    let promise = Promise::new(&mut |resolve, _reject| {
        let opts = AddEventListenerOptions::new();
        opts.set_once(true);
        let _ = c.add_event_listener_with_callback_and_add_event_listener_options(
            "controllerchange",
            &resolve,
            &opts,
        );
        if let Some(w) = web_sys::window() {
            let _ = w
                .set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, timeout_ms as i32);
        }
        // It may have happened between the check above and the listener.
        if c.controller().is_some() {
            let _ = resolve.call0(&JsValue::NULL);
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// The Rust API. Every method of the JS class is a thin wrapper around one of these.
impl Sluice {
    /// Registers the worker at `script_url` and resolves once it controls this page, also on
    /// the very first visit (the worker claims its clients when it activates).
    pub async fn register(
        script_url: &str,
        options: RegisterOptions,
    ) -> Result<Sluice, ClientError> {
        let window = web_sys::window().ok_or_else(|| {
            ClientError::Unsupported("Sluice.register needs a page (a window)".into())
        })?;
        let navigator = window.navigator();
        if !Reflect::has(&navigator, &"serviceWorker".into()).unwrap_or(false) {
            return Err(ClientError::Unsupported(
                "this browser offers no service workers here: they need a secure context \
                 (https, or http://localhost / 127.0.0.1) and are off in some private modes"
                    .into(),
            ));
        }
        let container = navigator.service_worker();
        let reg_options = RegistrationOptions::new();
        reg_options.set_scope(options.scope.as_deref().unwrap_or("/"));
        match options.worker_type.as_deref() {
            None | Some("classic") => {}
            Some("module") => reg_options.set_type("module"),
            // Quoted as JSON quotes it: `{:?}` would bring core's escaping and Unicode tables
            // into the wasm for this one message.
            Some(other) => {
                return Err(ClientError::Registration(format!(
                    "options.type must be \"classic\" or \"module\", not {}",
                    json::to_string(other)
                )))
            }
        }
        let registration: ServiceWorkerRegistration =
            JsFuture::from(container.register_with_options(script_url, &reg_options))
                .await
                .map_err(|e| {
                    ClientError::Registration(format!(
                        "registering the service worker {script_url} failed: {}",
                        js_message(&e)
                    ))
                })?
                .unchecked_into();

        let mut timing = Timing::default();
        if let Some(ms) = options.resend_after_ms.filter(|ms| *ms > 0.0) {
            timing.slow_resend_after_ms = ms * timing.slow_resend_after_ms / timing.resend_after_ms;
            timing.resend_after_ms = ms;
        }
        if let Some(ms) = options.keep_alive_ms.filter(|ms| *ms > 0.0) {
            timing.keep_alive_ms = ms;
        }
        let prefix: String = random_id().chars().filter(|c| *c != '-').take(12).collect();
        let inner = Rc::new(Inner {
            core: RefCell::new(Core::new(prefix, timing)),
            container: container.clone(),
            registration,
            listeners: RefCell::new(Vec::new()),
            next_listener: Cell::new(0),
            timer: Cell::new(None),
            handlers: RefCell::new(None),
            port: RefCell::new(None),
            closed: Cell::new(false),
        });
        let weak = Rc::downgrade(&inner);
        let message = Closure::<dyn FnMut(MessageEvent)>::new({
            let weak = weak.clone();
            move |e: MessageEvent| {
                if let Some(i) = weak.upgrade() {
                    i.on_message(e)
                }
            }
        });
        let controller_change = Closure::<dyn FnMut(Event)>::new({
            let weak = weak.clone();
            move |_: Event| {
                if let Some(i) = weak.upgrade() {
                    i.on_controller_change()
                }
            }
        });
        let port_message = Closure::<dyn FnMut(MessageEvent)>::new({
            let weak = weak.clone();
            move |e: MessageEvent| {
                if let Some(i) = weak.upgrade() {
                    i.on_port_message(e)
                }
            }
        });
        let tick = Closure::<dyn FnMut()>::new(move || {
            if let Some(i) = weak.upgrade() {
                i.on_tick()
            }
        });
        let _ =
            container.add_event_listener_with_callback("message", message.as_ref().unchecked_ref());
        let _ = container.add_event_listener_with_callback(
            "controllerchange",
            controller_change.as_ref().unchecked_ref(),
        );
        // Messages to a page are held back until it says it listens (`startMessages`, which
        // web-sys does not bind; browsers without it deliver at once).
        if let Ok(f) = Reflect::get(&container, &"startMessages".into()) {
            if let Some(f) = f.dyn_ref::<Function>() {
                let _ = f.call0(&container);
            }
        }
        *inner.handlers.borrow_mut() = Some(Handlers {
            message,
            controller_change,
            tick,
            port_message,
        });

        let ready = container
            .ready()
            .map_err(|e| ClientError::Registration(js_message(&e)))?;
        JsFuture::from(ready)
            .await
            .map_err(|e| ClientError::Registration(js_message(&e)))?;
        wait_for_control(&container, options.control_timeout_ms.unwrap_or(10_000.0)).await;
        if container.controller().is_none() {
            inner.close();
            return Err(ClientError::Registration(
                "the service worker is active but does not control this page: it must call \
                 clients.claim() when it activates, the page must be inside its scope, and a \
                 Shift-reload bypasses workers (reload normally)"
                    .into(),
            ));
        }
        Ok(Sluice { inner })
    }

    /// Hands a job to the worker; resolves once the worker saved it.
    pub async fn enqueue(&self, mut job: JobSpec) -> Result<Enqueued, ClientError> {
        job::prepare(&mut job, &mut random_id)?;
        enqueued(self.inner.request(Request::Enqueue { job }).await?)
    }

    /// Hands many jobs to the worker at once, optionally as one group (cancellable together).
    pub async fn enqueue_many(
        &self,
        mut jobs: Vec<JobSpec>,
        group_id: Option<String>,
    ) -> Result<EnqueuedMany, ClientError> {
        for j in &mut jobs {
            job::prepare(j, &mut random_id)?;
        }
        let request = Request::EnqueueMany { jobs, group_id };
        enqueued_many(self.inner.request(request).await?)
    }

    /// Cancels a waiting job, or every waiting job of a group; returns what was cancelled.
    pub async fn cancel(&self, target: &str) -> Result<Vec<JobId>, ClientError> {
        let request = Request::Cancel {
            target: target.into(),
        };
        cancelled(self.inner.request(request).await?)
    }

    /// Sends a failed job again; the returned `Done` follows the new attempt.
    pub async fn retry(&self, id: &str) -> Result<(JobId, Done), ClientError> {
        retried(self.inner.request(Request::Retry { id: id.into() }).await?)
    }

    /// Forgets a failed job without retrying it.
    pub async fn dismiss(&self, id: &str) -> Result<JobId, ClientError> {
        dismissed(
            self.inner
                .request(Request::Dismiss { id: id.into() })
                .await?,
        )
    }

    /// Replaces the worker's configuration (budgets, retries, lanes).
    pub async fn configure(&self, config: EngineConfig) -> Result<(), ClientError> {
        configured(self.inner.request(Request::Configure { config }).await?)
    }

    pub async fn snapshot(&self) -> Result<Status, ClientError> {
        snapshot(self.inner.request(Request::Snapshot).await?)
    }

    /// Lists the worker's jobs, optionally of one group.
    pub async fn jobs(&self, group_id: Option<&str>) -> Result<Vec<JobUpdate>, ClientError> {
        job_list(self.inner.request(jobs_of(group_id)).await?)
    }

    /// Waits for the end of any job by id (say one of `enqueue_many`'s).
    pub fn done(&self, id: &str) -> Done {
        let done = self.inner.core.borrow_mut().wait_done(id, now());
        self.inner.ensure_timer();
        done
    }

    /// Calls `f` with every `jobs` and `status` broadcast until the subscription is dropped.
    pub fn subscribe(&self, f: impl Fn(&WorkerMessage) + 'static) -> Subscription {
        let typed = move |text: &str| {
            if let Ok(message) = json::from_str::<WorkerMessage>(text) {
                f(&message)
            }
        };
        Subscription {
            id: self.inner.add_listener(Listener::Rust(Rc::new(typed))),
            inner: Rc::downgrade(&self.inner),
        }
    }

    /// Stops listening and fails everything outstanding. The worker goes on with the queue.
    pub fn close(&self) {
        self.inner.close();
    }
}

// What each request's answer holds, for the Rust API and the JS API alike.

fn enqueued(answer: Answer) -> Result<Enqueued, ClientError> {
    let Answer { body, done } = answer;
    let ReplyBody::Enqueued {
        id,
        coalesced,
        state,
    } = body
    else {
        return Err(unexpected_reply("enqueued", &body));
    };
    let done =
        done.ok_or_else(|| ClientError::Decode("an 'enqueued' reply without a job id".into()))?;
    Ok(Enqueued {
        id,
        coalesced,
        state,
        done,
    })
}

fn enqueued_many(answer: Answer) -> Result<EnqueuedMany, ClientError> {
    match answer.body {
        ReplyBody::EnqueuedMany { ids, warning } => Ok(EnqueuedMany { ids, warning }),
        other => Err(unexpected_reply("enqueuedMany", &other)),
    }
}

fn cancelled(answer: Answer) -> Result<Vec<JobId>, ClientError> {
    match answer.body {
        ReplyBody::Cancelled { ids } => Ok(ids),
        other => Err(unexpected_reply("cancelled", &other)),
    }
}

fn retried(answer: Answer) -> Result<(JobId, Done), ClientError> {
    let Answer { body, done } = answer;
    let ReplyBody::Retried { id } = body else {
        return Err(unexpected_reply("retried", &body));
    };
    let done =
        done.ok_or_else(|| ClientError::Decode("a 'retried' reply without a job id".into()))?;
    Ok((id, done))
}

fn dismissed(answer: Answer) -> Result<JobId, ClientError> {
    match answer.body {
        ReplyBody::Dismissed { id } => Ok(id),
        other => Err(unexpected_reply("dismissed", &other)),
    }
}

fn configured(answer: Answer) -> Result<(), ClientError> {
    match answer.body {
        ReplyBody::Configured => Ok(()),
        other => Err(unexpected_reply("configured", &other)),
    }
}

fn snapshot(answer: Answer) -> Result<Status, ClientError> {
    match answer.body {
        ReplyBody::Snapshot { status } => Ok(status),
        other => Err(unexpected_reply("snapshot", &other)),
    }
}

fn jobs_of(group_id: Option<&str>) -> Request {
    Request::Jobs {
        group_id: group_id.map(str::to_owned),
        ids: None,
    }
}

fn job_list(answer: Answer) -> Result<Vec<JobUpdate>, ClientError> {
    match answer.body {
        ReplyBody::Jobs { jobs } => Ok(jobs),
        other => Err(unexpected_reply("jobs", &other)),
    }
}

/// The promise of the JS API for a request: its answer made a JS value by `to_js`, or the
/// error. One function for all requests rather than an `async` block in each method: every
/// `future_to_promise` of its own costs the page's wasm a kilobyte or more.
fn answer_promise(
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
        let job = match UrlResolver::for_page().and_then(|urls| job_from_js(&job, &urls)) {
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
        let jobs = match jobs_from_js(&jobs) {
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

    #[wasm_bindgen(js_name = retry, unchecked_return_type = "Promise<Retried>")]
    pub fn retry_js(&self, id: String) -> Promise {
        answer_promise(&self.inner, Request::Retry { id }, |answer| {
            let (id, done) = retried(answer)?;
            let obj = Object::new();
            set(&obj, "id", &JsValue::from_str(&id));
            set(&obj, "done", &done_to_js(done));
            Ok(obj.into())
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
        let weak = Rc::downgrade(&self.inner);
        Closure::<dyn FnMut()>::new(move || {
            if let Some(inner) = weak.upgrade() {
                inner.remove_listener(id);
            }
        })
        .into_js_value()
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
