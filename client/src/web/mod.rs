//! The browser side: registering the worker, posting and receiving messages, timers, and the
//! `Sluice` class exported to JavaScript.
//!
//! Messages are JSON text both ways (see `sluice_shared::protocol`). Values cross between JS
//! and Rust through `JSON.stringify`/`JSON.parse` and the worker's JSON codec
//! (`sluice_shared::json`) rather than a conversion library: the worker speaks JSON anyway, and
//! the page bundle stays small.

mod channel;
mod convert;
mod js_api;
mod typings;

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use js_sys::{Function, Reflect};
use sluice_shared::config::EngineConfig;
use sluice_shared::job::{JobSpec, JobState, RetryWith};
use sluice_shared::json::{self, RawJson};
use sluice_shared::protocol::{JobUpdate, ProtocolError, ReplyBody, Request, WorkerMessage};
use sluice_shared::status::{GroupStatus, Status};
use sluice_shared::JobId;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{
    Event, MessageEvent, MessagePort, RegistrationOptions, ServiceWorkerContainer,
    ServiceWorkerRegistration,
};

use crate::core::{unexpected_reply, Answer, ClientError, Core, Done, Timing};
use crate::input::RegisterOptions;
use crate::job;

use channel::wait_for_control;
use convert::{js_message, now, random_id};

/// A job the worker accepted.
pub struct EnqueuedJob {
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
    /// The worker's own error (it cannot start, or stopped after an error) while `register`
    /// waits for it to start, with the function that ends that wait early.
    fault: RefCell<Option<ClientError>>,
    start_waiter: RefCell<Option<Function>>,
    /// The last status this page heard (a broadcast's text), handed to each new subscriber at
    /// once: a page that subscribes after the worker last spoke still shows where things stand.
    last_status: RefCell<Option<String>>,
    /// The worker's last error told to every page (its text), for the same reason.
    last_fault: RefCell<Option<String>>,
}

/// The page's handle on the Sluice worker.
#[wasm_bindgen]
#[derive(Clone)]
pub struct Sluice {
    inner: Rc<Inner>,
}

/// The Rust API. Every method of the JS class is a thin wrapper around one of these.
impl Sluice {
    /// Registers the worker at `script_url` and resolves once it controls this page, also on
    /// the very first visit (the worker claims its clients when it activates).
    pub async fn register(
        script_url: &str,
        options: RegisterOptions,
    ) -> Result<Sluice, ClientError> {
        // A panic in the page client (a bug: every input is checked) then says in the page's
        // console what failed and where, instead of wasm's bare "unreachable".
        console_error_panic_hook::set_once();
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
            fault: RefCell::new(None),
            start_waiter: RefCell::new(None),
            last_status: RefCell::new(None),
            last_fault: RefCell::new(None),
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

        let timeout_ms = options.control_timeout_ms.unwrap_or(10_000.0);
        let started_at = now();
        let started = inner.wait_for_start(&container, timeout_ms).await;
        let failed = |e: ClientError| {
            inner.close();
            Err(e)
        };
        // A worker that cannot start fails `register` only when no working one is there: an
        // older version that goes on serving this page makes the newer one's failure news for
        // subscribers (and the console), not a page that cannot use Sluice.
        let working = |inner: &Inner| inner.registration.active().is_some();
        if let Some(fault) = inner.fault.take().filter(|_| !working(&inner)) {
            return failed(fault);
        }
        if let Err(e) = started {
            return failed(e);
        }
        let left_ms = (timeout_ms - (now() - started_at)).max(0.0);
        wait_for_control(&container, left_ms).await;
        if let Some(fault) = inner.fault.take().filter(|_| !working(&inner)) {
            return failed(fault);
        }
        if container.controller().is_none() {
            return failed(ClientError::Registration(
                "the service worker is active but does not control this page: it must call \
                 clients.claim() when it activates, the page must be inside its scope, and a \
                 Shift-reload bypasses workers (reload normally)"
                    .into(),
            ));
        }
        inner.wake_worker();
        Ok(Sluice { inner })
    }

    /// Hands a job to the worker; resolves once the worker saved it.
    pub async fn enqueue(&self, mut job: JobSpec) -> Result<EnqueuedJob, ClientError> {
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

    /// Sends a failed job or a conflict again as it was; the returned `Done` follows the new
    /// attempt.
    pub async fn retry(&self, id: &str) -> Result<(JobId, Done), ClientError> {
        self.retry_with(id, RetryWith::default()).await
    }

    /// Sends a failed job or a conflict again with a new body or headers set over its own (a
    /// conflict resolved: the merged record, an `If-Match` with the server's `ETag`).
    pub async fn retry_with(
        &self,
        id: &str,
        with: RetryWith,
    ) -> Result<(JobId, Done), ClientError> {
        let request = Request::Retry {
            id: id.into(),
            body: with.body,
            headers: with.headers,
        };
        retried(self.inner.request(request).await?)
    }

    /// Forgets a failed job without retrying it.
    pub async fn dismiss(&self, id: &str) -> Result<JobId, ClientError> {
        dismissed(
            self.inner
                .request(Request::Dismiss { id: id.into() })
                .await?,
        )
    }

    /// Headers to send with every job of `budget` from now on, each in place of the job's own
    /// of that name (a fresh `Authorization`), and the end of the budget's wait for them when
    /// the server refused the old ones (`credentialsNeeded` in its status). Kept in the
    /// worker's memory only.
    pub async fn set_credentials(
        &self,
        budget: &str,
        headers: Vec<(String, String)>,
    ) -> Result<(), ClientError> {
        let request = Request::SetCredentials {
            budget: budget.into(),
            headers,
        };
        credentials_set(self.inner.request(request).await?)
    }

    /// Replaces the worker's configuration (budgets, retries, lanes).
    pub async fn configure(&self, config: EngineConfig) -> Result<(), ClientError> {
        let config = RawJson::of(&config);
        configured(self.inner.request(Request::Configure { config }).await?)
    }

    pub async fn snapshot(&self) -> Result<Status, ClientError> {
        let status = snapshot(self.inner.request(Request::Snapshot).await?)?;
        status.read().map_err(|e| {
            ClientError::Worker(ProtocolError::Malformed {
                message: format!("the worker's status: {e}"),
            })
        })
    }

    /// One group's progress (see [`GroupStatus`]), or `None` when the worker holds no job of
    /// that group.
    pub async fn group(&self, id: &str) -> Result<Option<GroupStatus>, ClientError> {
        Ok(self
            .snapshot()
            .await?
            .groups
            .into_iter()
            .find(|g| g.id == id))
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
        let id = self.inner.add_listener(Listener::Rust(Rc::new(typed)));
        self.inner.replay_status(id);
        Subscription {
            id,
            inner: Rc::downgrade(&self.inner),
        }
    }

    /// Stops listening and fails everything outstanding. The worker goes on with the queue.
    pub fn close(&self) {
        self.inner.close();
    }
}

// What each request's answer holds, for the Rust API and the JS API alike.

pub(super) fn enqueued(answer: Answer) -> Result<EnqueuedJob, ClientError> {
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
    Ok(EnqueuedJob {
        id,
        coalesced,
        state,
        done,
    })
}

pub(super) fn enqueued_many(answer: Answer) -> Result<EnqueuedMany, ClientError> {
    match answer.body {
        ReplyBody::EnqueuedMany { ids, warning } => Ok(EnqueuedMany { ids, warning }),
        other => Err(unexpected_reply("enqueuedMany", &other)),
    }
}

pub(super) fn cancelled(answer: Answer) -> Result<Vec<JobId>, ClientError> {
    match answer.body {
        ReplyBody::Cancelled { ids } => Ok(ids),
        other => Err(unexpected_reply("cancelled", &other)),
    }
}

pub(super) fn retried(answer: Answer) -> Result<(JobId, Done), ClientError> {
    let Answer { body, done } = answer;
    let ReplyBody::Retried { id } = body else {
        return Err(unexpected_reply("retried", &body));
    };
    let done =
        done.ok_or_else(|| ClientError::Decode("a 'retried' reply without a job id".into()))?;
    Ok((id, done))
}

pub(super) fn dismissed(answer: Answer) -> Result<JobId, ClientError> {
    match answer.body {
        ReplyBody::Dismissed { id } => Ok(id),
        other => Err(unexpected_reply("dismissed", &other)),
    }
}

pub(super) fn credentials_set(answer: Answer) -> Result<(), ClientError> {
    match answer.body {
        ReplyBody::CredentialsSet { .. } => Ok(()),
        other => Err(unexpected_reply("credentialsSet", &other)),
    }
}

pub(super) fn configured(answer: Answer) -> Result<(), ClientError> {
    match answer.body {
        ReplyBody::Configured => Ok(()),
        other => Err(unexpected_reply("configured", &other)),
    }
}

/// The status as the worker wrote it (see `RawJson`): handed to pages as it came.
pub(super) fn snapshot(answer: Answer) -> Result<RawJson, ClientError> {
    match answer.body {
        ReplyBody::Snapshot { status } => Ok(status),
        other => Err(unexpected_reply("snapshot", &other)),
    }
}

pub(super) fn jobs_of(group_id: Option<&str>) -> Request {
    Request::Jobs {
        group_id: group_id.map(str::to_owned),
        ids: None,
    }
}

pub(super) fn job_list(answer: Answer) -> Result<Vec<JobUpdate>, ClientError> {
    match answer.body {
        ReplyBody::Jobs { jobs } => Ok(jobs),
        other => Err(unexpected_reply("jobs", &other)),
    }
}
