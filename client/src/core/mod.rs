//! The client's bookkeeping, sans-IO: which requests await an answer, which jobs a caller
//! waits on, when to send a request again and when to send a keep-alive.
//!
//! The browser glue (`web/`) feeds it the worker's messages and a clock and posts the texts it
//! returns; everything here runs and is tested natively.
//!
//! # Resending
//! A request the worker never answered (it was stopped while handling it, or it was replaced
//! by a new version) is posted again. Replies carry the request id, so a late answer to the
//! first copy and the answer to the second are the same answer: the first one to arrive
//! settles the request, the other is ignored.
//!
//! Resending is safe for reads (`snapshot`, `jobs`, `keepAlive`) and for requests that name
//! their target (`cancel`, `retry`, `dismiss`, `configure`). An `enqueue` names its job too:
//! every job gets its id (and a `create` its `Idempotency-Key`) before the first send (see
//! `job::prepare`), and the worker answers an enqueue of a job it already saved with that job
//! instead of saving it again. Enqueues are still resent later than the rest
//! ([`Timing::slow_resend_after_ms`]): a large `enqueueMany` takes the worker a while.
//!
//! # Messages
//! Requests and the worker's messages are the protocol's own types
//! (`sluice_shared::protocol`), written and read with the worker's JSON codec
//! (`sluice_shared::json`), not serde_json: serde's code made up most of the page's wasm.

mod receive;
mod requests;
mod waits;

use std::collections::VecDeque;
use std::fmt;

use sluice_shared::job::{JobError, JobOutcome, JobState};
use sluice_shared::json::{self, FromJson, Json};
use sluice_shared::protocol::{JobUpdate, ProtocolError, ReplyBody};
use sluice_shared::JobId;

use crate::oneshot::{Receiver, Sender};
use sluice_shared::id_map::IdMap;

/// How long to wait for answers and how often to remind the worker that work is pending.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// Resend an unanswered idempotent request after this long.
    pub resend_after_ms: f64,
    /// Resend an unanswered `enqueue`/`enqueueMany` after this long.
    pub slow_resend_after_ms: f64,
    /// Give up on a request after this many sends.
    pub max_sends: u32,
    /// Send `keepAlive` this often while work is pending.
    pub keep_alive_ms: f64,
    /// Ask for the job list when no job news arrived for this long while callers wait on jobs
    /// (a missed broadcast must not leave a `done` promise pending forever).
    pub reconcile_after_ms: f64,
    /// Send over the worker's port only within this long of the last `postMessage` (see
    /// [`Via`]): Chromium stops a worker 30 s after its last event, and a port message is
    /// no event.
    pub port_fresh_ms: f64,
    /// ... and only within this long of the worker's last message: a worker that went quiet
    /// may have been stopped (crashed, killed, updated) behind the page's back, which leaves
    /// the port dead without a word (Chromium fires no `close` event for it).
    pub port_heard_ms: f64,
    /// A request sent over the port and unanswered this long is sent again as an event, and
    /// the port is given up. Answers take milliseconds; a copy sent to a worker that was only
    /// busy is answered as the same request.
    pub port_answer_ms: f64,
}

impl Timing {
    /// How often [`Core::tick`] should run: often enough for the shortest of the periods.
    pub fn tick_ms(&self) -> f64 {
        (self.resend_after_ms / 3.0)
            .min(self.keep_alive_ms / 2.0)
            .clamp(50.0, 1_000.0)
    }
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            resend_after_ms: 3_000.0,
            slow_resend_after_ms: 10_000.0,
            max_sends: 5,
            keep_alive_ms: 10_000.0,
            reconcile_after_ms: 15_000.0,
            port_fresh_ms: 20_000.0,
            port_heard_ms: 2_000.0,
            port_answer_ms: 100.0,
        }
    }
}

/// Why a request or a wait did not succeed.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientError {
    /// The worker refused the request.
    Worker(ProtocolError),
    /// The worker refused the request with an error this client does not know (a newer
    /// worker): its `code` and the error object as JSON.
    WorkerOther { code: String, error: String },
    /// The worker never answered, however often the request was sent.
    NoAnswer { request: &'static str, sends: u32 },
    /// The job given to `enqueue` cannot be sent as it is.
    InvalidJob(String),
    /// Service workers are not available here (an old browser, or not a secure context).
    Unsupported(String),
    /// The worker could not be registered or did not take control of the page.
    Registration(String),
    /// The worker sent something this client cannot read (a newer worker?).
    Decode(String),
    /// `close()` was called.
    Closed,
}

impl ClientError {
    /// A short stable code for programs: the worker's own code (`unknown-budget`, ...) or one
    /// of `no-answer`, `invalid-job`, `unsupported`, `registration`, `decode`, `closed`.
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::Worker(e) => e.code(),
            ClientError::WorkerOther { .. } => "worker",
            ClientError::NoAnswer { .. } => "no-answer",
            ClientError::InvalidJob(_) => "invalid-job",
            ClientError::Unsupported(_) => "unsupported",
            ClientError::Registration(_) => "registration",
            ClientError::Decode(_) => "decode",
            ClientError::Closed => "closed",
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Worker(e) => write!(f, "{e}"),
            ClientError::WorkerOther { code, error } => {
                write!(f, "the worker refused the request ({code}): {error}")
            }
            ClientError::NoAnswer { request, sends } => write!(
                f,
                "the service worker did not answer '{request}' (sent {sends} times); is /sw.js failing to start?"
            ),
            ClientError::InvalidJob(m) => write!(f, "invalid job: {m}"),
            ClientError::Unsupported(m) => f.write_str(m),
            ClientError::Registration(m) => f.write_str(m),
            ClientError::Decode(m) => write!(f, "unreadable message from the worker: {m}"),
            ClientError::Closed => f.write_str("this Sluice client was closed"),
        }
    }
}

impl std::error::Error for ClientError {}

/// Why a job's `done` did not resolve with an outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEnd {
    pub id: JobId,
    /// `failed` or `cancelled`; `None` when the job vanished or the client was closed.
    pub state: Option<JobState>,
    /// The HTTP status of the last attempt, if one got a response.
    pub status: Option<u16>,
    /// What to show a person: the server's message, "cancelled", ...
    pub reason: String,
    /// A conflict's: the server's answer (often the record as it is now), for the page to
    /// resolve it with (`retry` with a new body, or `dismiss`). Only in the tab that enqueued
    /// the job, as every outcome.
    pub outcome: Option<JobOutcome>,
    /// A page dismissed the job (`dismiss`): its record is deleted.
    pub discarded: bool,
}

impl JobEnd {
    /// The short stable code a program reads (`error.code` in JS): `cancelled`, `conflict`,
    /// `failed`, `discarded` (a page dismissed it), `closed` (this client was closed) or
    /// `gone` (the worker no longer knows it: it expired, or its dismissal was not heard here,
    /// say in a page opened since).
    pub fn code(&self) -> &'static str {
        match self.state {
            Some(JobState::Cancelled) => "cancelled",
            Some(JobState::Conflict) => "conflict",
            Some(_) => "failed",
            None if self.discarded => "discarded",
            None if self.reason == ClientError::Closed.to_string() => "closed",
            None => "gone",
        }
    }

    /// The end of a job a page dismissed.
    pub(super) fn discarded(id: &str) -> Self {
        JobEnd {
            id: id.to_string(),
            state: None,
            status: None,
            reason: "discarded: a page dismissed the job and its record is deleted".into(),
            outcome: None,
            discarded: true,
        }
    }
}

impl fmt::Display for JobEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for JobEnd {}

pub type DoneResult = Result<JobOutcome, JobEnd>;

/// Resolves when a job is done (`Ok` with the server's final response) or has failed or been
/// cancelled (`Err`). Failing is final for this future even though the user may later retry
/// the job: a retry hands out a new one.
pub struct Done {
    id: JobId,
    rx: Receiver<DoneResult>,
}

impl Done {
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl std::future::Future for Done {
    type Output = DoneResult;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<DoneResult> {
        let id = self.id.clone();
        std::pin::Pin::new(&mut self.rx).poll(cx).map(|r| {
            r.unwrap_or_else(|| {
                Err(JobEnd {
                    id,
                    state: None,
                    status: None,
                    reason: ClientError::Closed.to_string(),
                    outcome: None,
                    discarded: false,
                })
            })
        })
    }
}

/// A reply, with a `Done` for the job it names when it is an `enqueued` or `retried`.
pub struct Answer {
    pub body: ReplyBody,
    pub done: Option<Done>,
}

/// The error for a reply of another type than its request expects (`expected`).
pub fn unexpected_reply(expected: &str, got: &ReplyBody) -> ClientError {
    ClientError::Decode(format!(
        "expected a '{expected}' reply, got '{}'",
        got.kind()
    ))
}

pub type ReplyResult = Result<Answer, ClientError>;

/// Resolves with the worker's answer to one request.
pub struct Pending(Receiver<ReplyResult>);

impl std::future::Future for Pending {
    type Output = ReplyResult;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<ReplyResult> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(ClientError::Closed)))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Purpose {
    /// The caller's request; an `enqueued` reply creates a `Done`.
    Enqueue,
    Retry,
    Caller,
    /// The client's own job list request, to catch up on missed job news.
    Reconcile,
    KeepAlive,
    /// The client's own status request, when the last status is old.
    Refresh,
    /// The client's own request for the outcomes of jobs whose broadcast carried their state
    /// only (another tab enqueued them, or the worker restarted since): `jobs` with these ids.
    Outcomes(Vec<JobId>),
}

/// Which way a request goes to the worker.
///
/// `postMessage` to the worker is an event: it starts a stopped worker and keeps it alive
/// while it works, but Chromium routes it through the browser process (3 ms at the median, 7 ms
/// at p95, measured). A `MessagePort` the page handed the worker carries a message straight to
/// it (about 1 ms) but is no event: it reaches only a running worker and does not extend its
/// life, and Chromium says nothing when the worker behind it stops. So a request goes over the
/// port only when the port is known to work, the worker had an event from this page lately
/// ([`Timing::port_fresh_ms`]; the first event after a quiet spell brings a new port) and it
/// spoke lately ([`Timing::port_heard_ms`]). Everything that must wake or hold the worker
/// (keep-alives, resends) is an event, and a request the port leaves unanswered goes again as
/// an event soon ([`Timing::port_answer_ms`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Event,
    Port,
}

/// The page's port to the worker, as far as this bookkeeping knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    /// None yet, or the last one was lost: the next event brings a new one.
    None,
    /// Sent with an event; the worker answers that event over the port once it took it.
    Offered,
    /// The worker answered over it.
    Open,
}

struct Outstanding {
    name: &'static str,
    text: String,
    slow: bool,
    last_sent: f64,
    sends: u32,
    /// How it was last sent.
    via: Via,
    purpose: Purpose,
    tx: Option<Sender<ReplyResult>>,
}

struct Waiter {
    txs: Vec<Sender<DoneResult>>,
    /// The request counter when it was registered: a job list requested later must know it.
    since: u64,
    /// When it was registered (see [`STATUS_MAY_LAG_MS`]).
    registered_at: f64,
}

/// The last status, when it showed fewer pending jobs than this client has long waited on, not
/// judged yet (see [`Core::note_status`]).
struct Shortfall {
    seen_at: f64,
    /// Waits more than the pending jobs the status counted.
    waits_over: u64,
    /// [`Core::waits_ended`] when the status arrived.
    waits_ended_before: u64,
}

/// What [`Core::receive`] made of one message.
#[derive(Debug, PartialEq)]
pub enum Received {
    /// A `jobs` or `status` broadcast, or an error of the worker's own that answers no
    /// request (kept: [`Core::take_worker_fault`]), for subscribers.
    Broadcast,
    /// A reply or error that settled a request of this client.
    Settled,
    /// Not for this client (another client's request, a late duplicate) or unreadable.
    Ignored(String),
}

/// Terminal updates remembered for jobs nobody waits on yet.
const FINISHED_CACHE: usize = 512;

/// Dismissed jobs remembered, so that a `done` asked after the dismissal says `discarded` too
/// (the worker has forgotten the job by then).
const DISCARDED_MEMORY: usize = 64;

/// A status may have been taken before the worker saved a job whose `enqueue` answer has
/// arrived since: answers take the page's port, status broadcasts the slower event path. A
/// wait registered this recently is not held against a status. (Counting every wait made a
/// page that enqueues one job after another ask for the whole job list about three times a
/// second, and answering that list cost the worker and the page more than the enqueues.)
const STATUS_MAY_LAG_MS: f64 = 1_000.0;

pub struct Core {
    timing: Timing,
    prefix: String,
    /// Requests made so far; also orders waiters against job list requests.
    counter: u64,
    outstanding: IdMap<Outstanding>,
    waiters: IdMap<Waiter>,
    finished: VecDeque<JobUpdate>,
    /// Jobs a page dismissed lately, oldest first (see [`DISCARDED_MEMORY`]).
    discarded: Vec<JobId>,
    /// Pending jobs (queued, waiting to retry or sending) in the worker's last status.
    worker_pending: u64,
    last_status: f64,
    last_keep_alive: f64,
    last_news: f64,
    /// The outstanding job list request and the counter value it was made at.
    reconcile: Option<(String, u64)>,
    /// A status showed fewer pending jobs than this client waits on (see [`Core::note_status`]).
    shortfall: Option<Shortfall>,
    /// Waits ended so far, by any means: what explains a [`Shortfall`].
    waits_ended: u64,
    port: PortState,
    last_event: f64,
    /// When the worker's last message arrived.
    last_heard: f64,
    /// Requests to post as soon as the message being handled is (see [`Core::take_posts`]).
    posts_now: Vec<String>,
    /// The last error the worker told every page (it cannot start, or it stopped after an
    /// error), until taken ([`Core::take_worker_fault`]).
    worker_fault: Option<ClientError>,
    closed: bool,
}

impl Core {
    /// `prefix` makes this client's request ids unique among the clients of one worker.
    pub fn new(prefix: impl Into<String>, timing: Timing) -> Self {
        Self {
            timing,
            prefix: prefix.into(),
            counter: 0,
            outstanding: IdMap::new(),
            waiters: IdMap::new(),
            finished: VecDeque::new(),
            discarded: Vec::new(),
            worker_pending: 0,
            last_status: 0.0,
            last_keep_alive: f64::NEG_INFINITY,
            last_news: 0.0,
            reconcile: None,
            shortfall: None,
            waits_ended: 0,
            port: PortState::None,
            last_event: f64::NEG_INFINITY,
            last_heard: f64::NEG_INFINITY,
            posts_now: Vec::new(),
            worker_fault: None,
            closed: false,
        }
    }

    /// The worker's last error that answered no request (see [`Received::Broadcast`]), once.
    pub fn take_worker_fault(&mut self) -> Option<ClientError> {
        self.worker_fault.take()
    }

    /// Requests that handling a message made necessary (asking for outcomes a broadcast left
    /// out), to post at once rather than at the next tick.
    pub fn take_posts(&mut self) -> Vec<String> {
        std::mem::take(&mut self.posts_now)
    }

    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// Whether the worker should be kept awake: someone waits on a job, or the worker said it
    /// has pending jobs.
    pub fn has_work(&self) -> bool {
        !self.waiters.is_empty() || self.worker_pending > 0
    }

    /// Whether [`Core::tick`] has anything to do (the glue stops its timer otherwise).
    pub fn needs_ticks(&self) -> bool {
        !self.closed && (!self.outstanding.is_empty() || self.has_work())
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    pub fn waiting_jobs(&self) -> usize {
        self.waiters.len()
    }

    /// Fails every outstanding request and wait; later requests fail at once.
    pub fn close(&mut self) {
        self.closed = true;
        self.port = PortState::None;
        for (_, out) in self.outstanding.take() {
            if let Some(tx) = out.tx {
                tx.send(Err(ClientError::Closed));
            }
        }
        // Dropping the senders resolves each `Done` with a "closed" end.
        self.waiters.clear();
        self.reconcile = None;
    }
}

/// The worker's error object as a typed error, or as it is when this client does not know it.
pub(super) fn worker_error(error: &Json) -> ClientError {
    match ProtocolError::from_json(error) {
        Ok(e) => ClientError::Worker(e),
        Err(_) => ClientError::WorkerOther {
            code: error
                .get("code")
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_string(),
            error: json::to_string(error),
        },
    }
}

/// The end of a job as its `Done` reports it. Only call with a terminal update.
pub(super) fn outcome_of(u: &JobUpdate) -> DoneResult {
    end_of(&u.id, u.state, u.last_error.as_ref(), u.outcome.as_ref())
}

/// The end of a job in a terminal `state`, as its `Done` reports it.
pub(super) fn end_of(
    id: &str,
    state: JobState,
    last_error: Option<&JobError>,
    outcome: Option<&JobOutcome>,
) -> DoneResult {
    match state {
        JobState::Done => Ok(outcome.cloned().unwrap_or_default()),
        state => {
            let status = last_error.and_then(|e| e.status);
            let reason = match (state, last_error) {
                (JobState::Cancelled, _) => "cancelled".to_string(),
                (_, Some(e)) if !e.message.is_empty() => e.message.clone(),
                (_, Some(e)) => match e.status {
                    Some(s) => format!("failed with HTTP {s}"),
                    None => "failed".to_string(),
                },
                (_, None) => state.name().to_string(),
            };
            Err(JobEnd {
                id: id.to_string(),
                state: Some(state),
                status,
                reason,
                outcome: outcome.filter(|_| state == JobState::Conflict).cloned(),
                discarded: false,
            })
        }
    }
}

#[cfg(test)]
mod tests;
