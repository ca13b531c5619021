//! The client's bookkeeping, sans-IO: which requests await an answer, which jobs a caller
//! waits on, when to send a request again and when to send a keep-alive.
//!
//! The browser glue (`web.rs`) feeds it the worker's messages and a clock and posts the texts it
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

use std::collections::VecDeque;
use std::fmt;

use sluice_shared::job::{JobError, JobOutcome, JobState};
use sluice_shared::json::{self, FromJson, Json};
use sluice_shared::protocol::{
    Envelope, JobUpdate, ProtocolError, ReplyBody, Request, WorkerMessage,
};
use sluice_shared::status::Status;
use sluice_shared::JobId;

use crate::oneshot::{self, Receiver, Sender};
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

    /// Asks the worker for the full state of `ids` (their outcomes); the reply resolves
    /// whoever waits on them.
    fn ask_outcomes(&mut self, ids: Vec<JobId>, now: f64) {
        if ids.is_empty() || self.closed {
            return;
        }
        let request = Request::Jobs {
            group_id: None,
            ids: Some(ids.clone()),
        };
        let text = self.start(request, Purpose::Outcomes(ids), None, now, Via::Event);
        self.posts_now.push(text);
    }

    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// Starts a request: returns the text to post now, which way, and the answer to await.
    pub fn request(&mut self, request: Request, now: f64) -> (String, Via, Pending) {
        let purpose = match request {
            Request::Enqueue { .. } => Purpose::Enqueue,
            Request::Retry { .. } => Purpose::Retry,
            _ => Purpose::Caller,
        };
        let (tx, rx) = oneshot::channel();
        if self.closed {
            tx.send(Err(ClientError::Closed));
            return (String::new(), Via::Event, Pending(rx));
        }
        // A large `enqueueMany` or job list may take the worker longer than `port_answer_ms`,
        // and gains nothing from a faster hop.
        let via = if self.port == PortState::Open
            && now - self.last_event < self.timing.port_fresh_ms
            && now - self.last_heard < self.timing.port_heard_ms
            && !matches!(request, Request::EnqueueMany { .. } | Request::Jobs { .. })
        {
            Via::Port
        } else {
            Via::Event
        };
        let text = self.start(request, purpose, Some(tx), now, via);
        (text, via, Pending(rx))
    }

    /// The glue is about to post an event to the worker: returns whether to hand it a new
    /// port with it.
    pub fn posting_event(&mut self, now: f64) -> bool {
        if now - self.last_event >= self.timing.port_fresh_ms {
            // After a quiet spell the worker may have stopped, and its end of the port with it
            // (silently): this event may start a new one, which needs a new port.
            self.port = PortState::None;
        }
        self.last_event = now;
        if self.port == PortState::None && !self.closed {
            self.port = PortState::Offered;
            return true;
        }
        false
    }

    /// A message arrived over the port: the worker took it.
    pub fn port_answered(&mut self) {
        if self.port == PortState::Offered {
            self.port = PortState::Open;
        }
    }

    pub fn port_state(&self) -> PortState {
        self.port
    }

    /// A new worker took over: the port to the old one is of no use (everything unanswered
    /// goes to the new one with [`Core::resend_all`]).
    pub fn forget_port(&mut self) {
        self.port = PortState::None;
    }

    fn start(
        &mut self,
        request: Request,
        purpose: Purpose,
        tx: Option<Sender<ReplyResult>>,
        now: f64,
        via: Via,
    ) -> String {
        self.counter += 1;
        let name = request.kind();
        let slow = matches!(
            request,
            Request::Enqueue { .. } | Request::EnqueueMany { .. }
        );
        let envelope = Envelope {
            request_id: format!("{}-{}", self.prefix, self.counter),
            request,
        };
        let text = json::to_string(&envelope);
        let request_id = envelope.request_id;
        if purpose == Purpose::Reconcile {
            self.reconcile = Some((request_id.clone(), self.counter));
        }
        self.outstanding.insert(
            request_id,
            Outstanding {
                name,
                text: text.clone(),
                slow,
                last_sent: now,
                sends: 1,
                via,
                purpose,
                tx,
            },
        );
        text
    }

    /// A request of the client's own (keep-alive, status refresh, job list): no caller waits
    /// on it, and it goes as an event, which keeps or starts the worker.
    fn start_own(&mut self, request: Request, purpose: Purpose, now: f64) -> String {
        self.start(request, purpose, None, now, Via::Event)
    }

    /// Handles one message from the worker.
    pub fn receive(&mut self, text: &str, now: f64) -> Received {
        let message = match json::parse(text) {
            Ok(m) => m,
            Err(e) => return Received::Ignored(format!("not JSON: {e}")),
        };
        self.last_heard = now;
        let request_id = message.get("requestId").and_then(Json::as_str);
        // Replies and errors are read in parts: one this client cannot read (from a newer
        // worker?) must still settle its request rather than leave it to be sent again.
        match (message.get("type").and_then(Json::as_str), request_id) {
            (Some("reply"), Some(id)) => {
                let body = ReplyBody::from_json(message.get("body").unwrap_or(&Json::Null))
                    .map_err(|e| ClientError::Decode(format!("reply: {e}")));
                self.settle(id, body, now)
            }
            (Some("error"), Some(id)) => {
                let error = worker_error(message.get("error").unwrap_or(&Json::Null));
                self.settle(id, Err(error), now)
            }
            // The worker's own trouble (it cannot start, or it stopped after an error), told
            // to every page: kept for a `register()` that waits, and for subscribers. Any other
            // error for no request answered a message that carried no id: not this client's.
            (Some("error"), None) => {
                match worker_error(message.get("error").unwrap_or(&Json::Null)) {
                    fault @ ClientError::Worker(
                        ProtocolError::CannotStart { .. } | ProtocolError::Crashed { .. },
                    ) => {
                        self.worker_fault = Some(fault);
                        Received::Broadcast
                    }
                    _ => Received::Ignored(format!(
                        "an error for no request: {}",
                        json::to_string(&message)
                    )),
                }
            }
            (Some("jobs" | "status"), _) => {
                match WorkerMessage::from_json(&message) {
                    Ok(WorkerMessage::Jobs { updates, removed }) => {
                        self.last_news = now;
                        self.apply_updates(&updates, now);
                        // A forgotten job's end was announced before (or was missed): nobody
                        // may wait on it forever.
                        for id in &removed {
                            self.gone(id);
                        }
                    }
                    Ok(WorkerMessage::Status { status }) => self.note_status(&status, now),
                    // Unreadable here (from a newer worker?): subscribers still get it as it
                    // came.
                    _ => {}
                }
                Received::Broadcast
            }
            (kind, _) => Received::Ignored(format!(
                "not a message for pages: type '{}'",
                kind.unwrap_or("")
            )),
        }
    }

    /// Every job waited on is pending in the worker, so fewer pending jobs than waits may mean
    /// an end this client never heard of (its broadcast was lost with a stopped worker). Or
    /// ends on their way: the worker counts a job's end at once and tells it once it is saved,
    /// a few tens of milliseconds later, so a busy queue's status nearly always shows a few
    /// ends the page has not heard yet. A shortfall is therefore judged
    /// [`STATUS_MAY_LAG_MS`] later, and only the waits that did not end meanwhile are missed
    /// ends: then the job list is asked for. (Asking at once made a page that waits on a bulk
    /// job's ids fetch the whole job list with every status, once a second while it sent.)
    /// Each status replaces the last one's shortfall: the latest is the one to judge, and the
    /// one a quiet queue sends last. So while statuses keep coming a missed end is asked about
    /// once the queue is quiet.
    fn note_status(&mut self, status: &Status, now: f64) {
        self.worker_pending = status.counts.pending();
        self.last_status = now;
        self.shortfall = None;
        if self.waiters.len() as u64 <= self.worker_pending {
            return;
        }
        let settled_waits = self
            .waiters
            .values()
            .filter(|w| w.registered_at <= now - STATUS_MAY_LAG_MS)
            .count() as u64;
        if settled_waits > self.worker_pending {
            self.shortfall = Some(Shortfall {
                seen_at: now,
                waits_over: settled_waits - self.worker_pending,
                waits_ended_before: self.waits_ended,
            });
        }
    }

    /// Whether a shortfall is judged now and not explained by the waits ended since.
    fn shortfall_unexplained(&mut self, now: f64) -> bool {
        let Some(s) = self.shortfall.as_ref() else {
            return false;
        };
        if now - s.seen_at < STATUS_MAY_LAG_MS {
            return false;
        }
        let ended_since = self.waits_ended - s.waits_ended_before;
        let unexplained = ended_since < s.waits_over;
        self.shortfall = None;
        unexplained
    }

    fn settle(
        &mut self,
        request_id: &str,
        result: Result<ReplyBody, ClientError>,
        now: f64,
    ) -> Received {
        if let Err(ClientError::Worker(ProtocolError::Unavailable { message })) = &result {
            // Nothing was done (the worker is restarting or handing over to a new version):
            // the request stays outstanding and is sent again, at once to a new controller
            // (`resend_all`) or after the usual wait.
            if let Some(out) = self.outstanding.get_mut(request_id) {
                if out.sends < self.timing.max_sends {
                    out.last_sent = now;
                    return Received::Ignored(format!(
                        "worker unavailable, sending again: {message}"
                    ));
                }
            }
        }
        let Some(out) = self.outstanding.remove(request_id) else {
            return Received::Ignored(format!("no request '{request_id}' is waiting"));
        };
        let body = match result {
            Ok(body) => body,
            Err(error) => {
                if out.purpose == Purpose::Reconcile {
                    self.reconcile = None;
                }
                if let Some(tx) = out.tx {
                    tx.send(Err(error));
                }
                return Received::Settled;
            }
        };
        // Any reply that carries news is used, whoever asked for it.
        match &body {
            ReplyBody::Jobs { jobs } => {
                self.last_news = now;
                self.apply_updates(jobs, now);
                match &out.purpose {
                    Purpose::Reconcile => self.finish_reconcile(jobs),
                    Purpose::Outcomes(asked) => self.finish_outcomes(asked, jobs),
                    _ => {}
                }
            }
            ReplyBody::Snapshot { status } => self.note_status(status, now),
            _ => {}
        }
        let done = match (&body, &out.purpose) {
            (ReplyBody::Enqueued { id, state, .. }, Purpose::Enqueue) => {
                Some(self.done_after_enqueue(id, *state, now))
            }
            (ReplyBody::Retried { id }, Purpose::Retry) => {
                // Whatever was remembered about the job is from before the retry.
                self.finished.retain(|u| u.id != *id);
                Some(self.wait_done(id, now))
            }
            _ => None,
        };
        if let Some(tx) = out.tx {
            tx.send(Ok(Answer { body, done }));
        }
        Received::Settled
    }

    fn done_after_enqueue(&mut self, id: &str, state: JobState, now: f64) -> Done {
        if state.is_terminal() {
            // Ended at once (say a create and a delete that cancelled out).
            let (tx, rx) = oneshot::channel();
            let known = self.finished.iter().find(|u| u.id == id);
            if known.is_some_and(|u| u.withheld) {
                return self.wait_done(id, now);
            }
            let result = match known {
                Some(u) => outcome_of(u),
                None => end_of(id, state, None, None),
            };
            tx.send(result);
            return Done {
                id: id.to_string(),
                rx,
            };
        }
        self.wait_done(id, now)
    }

    /// A future for a job's end, known or not yet known.
    pub fn wait_done(&mut self, id: &str, now: f64) -> Done {
        let (tx, rx) = oneshot::channel();
        let done = Done {
            id: id.to_string(),
            rx,
        };
        if self.closed {
            drop(tx);
            return done;
        }
        let mut ask = false;
        match self.finished.iter().find(|u| u.id == id) {
            Some(u) if u.withheld => ask = true,
            Some(u) => {
                tx.send(outcome_of(u));
                return done;
            }
            None => {}
        }
        if self.waiters.is_empty() {
            // Start the "no news for a while" clock from now, not from the last news.
            self.last_news = self.last_news.max(now);
        }
        let since = self.counter;
        self.waiters
            .get_or_insert_with(id, || Waiter {
                txs: Vec::new(),
                since,
                registered_at: now,
            })
            .txs
            .push(tx);
        if ask {
            self.ask_outcomes(vec![id.to_string()], now);
        }
        done
    }

    fn apply_updates(&mut self, updates: &[JobUpdate], now: f64) {
        let mut ask = Vec::new();
        for u in updates {
            if !u.state.is_terminal() {
                continue;
            }
            if u.withheld && self.waiters.contains_key(&u.id) {
                // Someone here waits on it: its outcome is theirs to have, asked for below.
                ask.push(u.id.clone());
                continue;
            }
            if let Some(w) = self.waiters.remove(&u.id) {
                self.waits_ended += 1;
                for tx in w.txs {
                    tx.send(outcome_of(u));
                }
            } else {
                if u.withheld && self.finished.iter().any(|f| f.id == u.id && !f.withheld) {
                    continue; // the full one is known already
                }
                self.finished.retain(|f| f.id != u.id);
                if self.finished.len() == FINISHED_CACHE {
                    self.finished.pop_front();
                }
                self.finished.push_back(u.clone());
            }
        }
        self.ask_outcomes(ask, now);
    }

    /// After an outcomes request: a job asked for and not in the answer is gone.
    fn finish_outcomes(&mut self, asked: &[JobId], jobs: &[JobUpdate]) {
        for id in asked {
            if !jobs.iter().any(|j| j.id == *id) {
                self.gone(id);
            }
        }
    }

    /// After the full job list: a job that was known before the list was asked for and is not
    /// in it is gone (dismissed, expired), and nobody should wait on it forever.
    fn finish_reconcile(&mut self, jobs: &[JobUpdate]) {
        let Some((_, asked_at)) = self.reconcile.take() else {
            return;
        };
        // The waits to judge, in id order (the map's), each with whether the list names its
        // job: looked up by job rather than sorting the list, whose sort would be a few
        // kilobytes of the page's wasm.
        let mut judged: Vec<(JobId, bool)> = self
            .waiters
            .iter()
            .filter(|(_, w)| w.since < asked_at)
            .map(|(id, _)| (id.clone(), false))
            .collect();
        for job in jobs {
            if let Ok(i) = judged.binary_search_by(|(id, _)| id.as_str().cmp(&job.id)) {
                judged[i].1 = true;
            }
        }
        for (id, listed) in judged {
            if !listed {
                self.gone(&id);
            }
        }
    }

    /// Ends the waits on a job the worker no longer knows.
    fn gone(&mut self, id: &str) {
        if let Some(w) = self.waiters.remove(id) {
            self.waits_ended += 1;
            for tx in w.txs {
                tx.send(Err(JobEnd {
                    id: id.to_string(),
                    state: None,
                    status: None,
                    reason: format!("the worker no longer knows job {id} (dismissed or expired)"),
                }));
            }
        }
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

    /// Called about once a second: the texts to post now (resends, keep-alives, a job list
    /// request); requests that ran out of sends are failed.
    pub fn tick(&mut self, now: f64) -> Vec<String> {
        let mut posts = Vec::new();
        if self.closed {
            return posts;
        }
        let mut expired = Vec::new();
        for (id, out) in self.outstanding.iter_mut() {
            let wait = if out.via == Via::Port {
                self.timing.port_answer_ms
            } else if out.slow {
                self.timing.slow_resend_after_ms
            } else {
                self.timing.resend_after_ms
            };
            if now - out.last_sent < wait {
                continue;
            }
            if out.via == Via::Port {
                self.port = PortState::None;
            }
            if out.sends >= self.timing.max_sends {
                expired.push(id.clone());
            } else {
                out.sends += 1;
                out.last_sent = now;
                out.via = Via::Event;
                posts.push(out.text.clone());
            }
        }
        for id in expired {
            if let Some(out) = self.outstanding.remove(&id) {
                if out.purpose == Purpose::Reconcile {
                    self.reconcile = None;
                }
                if let Some(tx) = out.tx {
                    tx.send(Err(ClientError::NoAnswer {
                        request: out.name,
                        sends: out.sends,
                    }));
                }
            }
        }
        if self.has_work() && now - self.last_keep_alive >= self.timing.keep_alive_ms {
            self.last_keep_alive = now;
            let already = self
                .outstanding
                .values()
                .any(|o| o.purpose == Purpose::KeepAlive);
            if !already {
                posts.push(self.start_own(Request::KeepAlive, Purpose::KeepAlive, now));
            }
            // Only the worker's word keeps us sending: if its last status is old (a broadcast
            // was missed), ask again, or a finished queue would be kept awake forever.
            let asking = self
                .outstanding
                .values()
                .any(|o| o.purpose == Purpose::Refresh);
            if self.worker_pending > 0
                && !asking
                && now - self.last_status >= 3.0 * self.timing.keep_alive_ms
            {
                self.last_status = now;
                posts.push(self.start_own(Request::Snapshot, Purpose::Refresh, now));
            }
        }
        let missed_an_end = self.shortfall_unexplained(now);
        if !self.waiters.is_empty()
            && self.reconcile.is_none()
            && (missed_an_end || now - self.last_news >= self.timing.reconcile_after_ms)
        {
            self.last_news = now;
            let every_job = Request::Jobs {
                group_id: None,
                ids: None,
            };
            posts.push(self.start_own(every_job, Purpose::Reconcile, now));
        }
        posts
    }

    /// Everything unanswered, to post at once to a new worker (after `controllerchange`).
    pub fn resend_all(&mut self, now: f64) -> Vec<String> {
        self.outstanding
            .values_mut()
            .map(|o| {
                o.sends += 1;
                o.last_sent = now;
                o.via = Via::Event;
                o.text.clone()
            })
            .collect()
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
fn worker_error(error: &Json) -> ClientError {
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
fn outcome_of(u: &JobUpdate) -> DoneResult {
    end_of(&u.id, u.state, u.last_error.as_ref(), u.outcome.as_ref())
}

/// The end of a job in a terminal `state`, as its `Done` reports it.
fn end_of(
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
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_shared::job::Lane;
    use sluice_shared::protocol::{decode_request, encode};
    use sluice_shared::status::StateCounts;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    fn poll<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
    }

    fn ready<F: Future + Unpin>(f: &mut F) -> F::Output {
        match poll(f) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("not ready"),
        }
    }

    /// A request as the worker reads it.
    fn sent(text: &str) -> Envelope {
        decode_request(text).unwrap()
    }

    fn id_of(text: &str) -> String {
        sent(text).request_id
    }

    fn type_of(text: &str) -> &'static str {
        sent(text).request.kind()
    }

    fn reply(request_id: &str, body: ReplyBody) -> String {
        encode(&WorkerMessage::Reply {
            request_id: request_id.into(),
            body,
        })
    }

    fn error(request_id: &str, error: ProtocolError) -> String {
        encode(&WorkerMessage::Error {
            request_id: Some(request_id.into()),
            error,
        })
    }

    /// A status broadcast with `queued` jobs pending.
    fn status(queued: u64) -> String {
        encode(&WorkerMessage::Status {
            status: status_of(queued),
        })
    }

    fn status_of(queued: u64) -> Status {
        Status {
            counts: StateCounts {
                queued,
                ..StateCounts::default()
            },
            ..Status::default()
        }
    }

    fn update(id: &str, state: JobState) -> JobUpdate {
        JobUpdate {
            id: id.into(),
            state,
            lane: Lane::Bulk,
            key: None,
            group_id: None,
            budget: "api".into(),
            attempts: 1,
            not_before: 0,
            coalesced: 0,
            last_error: None,
            outcome: None,
            withheld: false,
        }
    }

    fn jobs_broadcast(updates: Vec<JobUpdate>) -> String {
        encode(&WorkerMessage::Jobs {
            updates,
            removed: vec![],
        })
    }

    fn enqueue(core: &mut Core, now: f64) -> (String, Pending) {
        let (text, _, pending) = enqueue_via(core, now);
        (text, pending)
    }

    fn enqueue_via(core: &mut Core, now: f64) -> (String, Via, Pending) {
        core.request(
            Request::Enqueue {
                job: Default::default(),
            },
            now,
        )
    }

    #[test]
    fn a_reply_settles_its_request_once() {
        let mut core = Core::new("c", Timing::default());
        let (text, _, mut p) = core.request(Request::Snapshot, 0.0);
        assert_eq!(type_of(&text), "snapshot");
        assert!(poll(&mut p).is_pending());
        let r = reply(&id_of(&text), ReplyBody::Alive);
        assert_eq!(core.receive(&r, 1.0), Received::Settled);
        assert_eq!(ready(&mut p).ok().unwrap().body, ReplyBody::Alive);
        // The answer to a resent copy arrives too: ignored.
        assert!(matches!(core.receive(&r, 2.0), Received::Ignored(_)));
    }

    #[test]
    fn request_ids_are_unique_and_prefixed() {
        let mut core = Core::new("tab7", Timing::default());
        let (a, _, _) = core.request(Request::Snapshot, 0.0);
        let (b, _, _) = core.request(Request::Snapshot, 0.0);
        assert!(id_of(&a).starts_with("tab7-"));
        assert_ne!(id_of(&a), id_of(&b));
    }

    #[test]
    fn an_error_reply_rejects_with_the_workers_error() {
        let mut core = Core::new("c", Timing::default());
        let (text, _, mut p) = core.request(Request::Dismiss { id: "x".into() }, 0.0);
        let err = error(&id_of(&text), ProtocolError::NotFound { id: "x".into() });
        core.receive(&err, 1.0);
        let e = ready(&mut p).err().unwrap();
        assert_eq!(e.code(), "not-found");
        assert_eq!(e.to_string(), "no job or group 'x'");
    }

    #[test]
    fn an_unavailable_worker_gets_the_request_again_instead_of_failing_it() {
        let t = Timing::default();
        let mut core = Core::new("c", t.clone());
        let (text, _, mut p) = core.request(Request::Cancel { target: "g".into() }, 0.0);
        let unavailable = error(
            &id_of(&text),
            ProtocolError::Unavailable {
                message: "a newer version of the worker is taking over the queue".into(),
            },
        );
        assert!(matches!(
            core.receive(&unavailable, 10.0),
            Received::Ignored(_)
        ));
        assert!(poll(&mut p).is_pending());
        // A new controller gets it at once; otherwise the usual wait applies.
        assert_eq!(core.resend_all(20.0), vec![text.clone()]);
        assert!(core.tick(20.0 + t.resend_after_ms - 1.0).is_empty());
        assert_eq!(core.tick(20.0 + t.resend_after_ms), vec![text.clone()]);
        let r = reply(&id_of(&text), ReplyBody::Cancelled { ids: vec![] });
        assert_eq!(core.receive(&r, 30.0), Received::Settled);
        assert_eq!(
            ready(&mut p).ok().unwrap().body,
            ReplyBody::Cancelled { ids: vec![] }
        );
    }

    /// A core whose port the worker took (and spoke over), after an event at `now`.
    fn with_open_port(t: &Timing, now: f64) -> Core {
        let mut core = Core::new("c", t.clone());
        assert!(core.posting_event(now));
        core.port_answered();
        heard(&mut core, now);
        assert_eq!(core.port_state(), PortState::Open);
        core
    }

    fn heard(core: &mut Core, now: f64) {
        core.receive(&jobs_broadcast(vec![]), now);
    }

    #[test]
    fn requests_take_the_port_once_the_worker_answered_over_it_and_while_it_is_awake() {
        let t = Timing::default();
        let mut core = Core::new("c", t.clone());
        let (_, via, _) = core.request(Request::Snapshot, 0.0);
        assert_eq!(via, Via::Event);
        // The first event offers a port, later ones do not while it is pending or open.
        assert!(core.posting_event(0.0));
        assert!(!core.posting_event(1.0));
        assert_eq!(core.port_state(), PortState::Offered);
        let (_, via, _) = core.request(Request::Snapshot, 2.0);
        assert_eq!(via, Via::Event, "not before the worker answered over it");
        core.port_answered();
        let (_, via, _) = core.request(Request::Snapshot, 2.5);
        assert_eq!(via, Via::Event, "not before the worker said something");
        heard(&mut core, 2.5);
        let (_, via, _) = core.request(Request::Snapshot, 3.0);
        assert_eq!(via, Via::Port);
        // Long after the last event the worker may have stopped: a port message would not
        // start it, an event does, and it brings a new port for the worker it may start.
        let late = 1.0 + t.port_fresh_ms;
        heard(&mut core, late);
        let (_, via, _) = core.request(Request::Snapshot, late);
        assert_eq!(via, Via::Event);
        assert!(core.posting_event(late));
        let (_, via, _) = core.request(Request::Snapshot, late + 1.0);
        assert_eq!(via, Via::Event);
        core.port_answered();
        let (_, via, _) = core.request(Request::Snapshot, late + 2.0);
        assert_eq!(via, Via::Port);
        // Events while it is open keep it.
        assert!(!core.posting_event(late + 3.0));
    }

    #[test]
    fn a_port_request_left_unanswered_goes_again_as_an_event_and_gives_up_the_port() {
        // No `close` event tells a page that the worker behind its port stopped: the silence
        // does, soon (an enqueue sent as an event waits far longer for its resend).
        let t = Timing::default();
        assert!(t.port_answer_ms < t.resend_after_ms);
        let mut core = with_open_port(&t, 0.0);
        let (text, via, _p) = enqueue_via(&mut core, 1.0);
        assert_eq!(via, Via::Port);
        assert!(core.tick(t.port_answer_ms).is_empty());
        assert_eq!(core.port_state(), PortState::Open);
        let resent_at = 1.0 + t.port_answer_ms;
        assert_eq!(core.tick(resent_at), vec![text.clone()]);
        assert_eq!(core.port_state(), PortState::None);
        let (_, via, _) = core.request(Request::Snapshot, resent_at + 1.0);
        assert_eq!(via, Via::Event);
        // The copy sent as an event waits as long as any enqueue sent that way.
        assert!(!core
            .tick(resent_at + t.slow_resend_after_ms - 1.0)
            .contains(&text));
        assert!(core
            .tick(resent_at + t.slow_resend_after_ms)
            .contains(&text));
    }

    #[test]
    fn a_quiet_worker_gets_events_not_port_messages() {
        // It may have been stopped since; an event starts it again, a port message would not.
        let t = Timing::default();
        let mut core = with_open_port(&t, 0.0);
        let (_, via, _) = core.request(Request::Snapshot, t.port_heard_ms - 1.0);
        assert_eq!(via, Via::Port);
        let (_, via, _) = core.request(Request::Snapshot, t.port_heard_ms);
        assert_eq!(via, Via::Event);
    }

    #[test]
    fn large_batches_and_job_lists_never_take_the_port() {
        let t = Timing::default();
        let mut core = with_open_port(&t, 0.0);
        let large = [
            Request::EnqueueMany {
                jobs: vec![],
                group_id: None,
            },
            Request::Jobs {
                group_id: None,
                ids: None,
            },
        ];
        for request in large {
            let kind = request.kind();
            let (_, via, _) = core.request(request, 1.0);
            assert_eq!(via, Via::Event, "{kind}");
        }
    }

    #[test]
    fn a_closed_client_offers_no_port() {
        let mut core = Core::new("c", Timing::default());
        core.close();
        assert!(!core.posting_event(0.0));
    }

    #[test]
    fn unanswered_requests_are_resent_then_given_up() {
        let t = Timing::default();
        let mut core = Core::new("c", t.clone());
        let (snap, _, mut p) = core.request(Request::Snapshot, 0.0);
        let (enq, _e) = enqueue(&mut core, 0.0);
        assert!(core.tick(t.resend_after_ms - 1.0).is_empty());
        // The snapshot is resent after the short wait, the enqueue only after the long one.
        assert_eq!(core.tick(t.resend_after_ms), vec![snap.clone()]);
        assert_eq!(
            core.tick(t.slow_resend_after_ms),
            vec![snap.clone(), enq.clone()]
        );
        let mut now = t.slow_resend_after_ms;
        for _ in 0..t.max_sends {
            now += t.slow_resend_after_ms;
            core.tick(now);
        }
        assert_eq!(
            ready(&mut p).err(),
            Some(ClientError::NoAnswer {
                request: "snapshot",
                sends: t.max_sends
            })
        );
    }

    #[test]
    fn an_enqueue_reply_gives_a_done_that_a_broadcast_resolves() {
        let mut core = Core::new("c", Timing::default());
        let (text, mut p) = enqueue(&mut core, 0.0);
        core.receive(
            &reply(
                &id_of(&text),
                ReplyBody::Enqueued {
                    id: "j1".into(),
                    coalesced: false,
                    state: JobState::Queued,
                },
            ),
            1.0,
        );
        let mut done = ready(&mut p).ok().unwrap().done.unwrap();
        assert!(poll(&mut done).is_pending());
        assert!(core.has_work());
        // Non-terminal news changes nothing.
        core.receive(&jobs_broadcast(vec![update("j1", JobState::Sending)]), 2.0);
        assert!(poll(&mut done).is_pending());
        let mut u = update("j1", JobState::Done);
        u.outcome = Some(JobOutcome {
            status: 201,
            headers: vec![("location".into(), "/api/contacts/1".into())],
            body: "{}".into(),
        });
        let b = jobs_broadcast(vec![u]);
        assert_eq!(core.receive(&b, 3.0), Received::Broadcast);
        assert_eq!(ready(&mut done).unwrap().status, 201);
        assert!(!core.has_work());
    }

    #[test]
    fn failures_and_cancels_reject_with_a_reason() {
        let mut core = Core::new("c", Timing::default());
        let mut failed = core.wait_done("f", 0.0);
        let mut cancelled = core.wait_done("c", 0.0);
        let mut f = update("f", JobState::Failed);
        f.last_error = Some(JobError {
            status: Some(400),
            message: "HTTP 400: name is required".into(),
        });
        core.receive(
            &jobs_broadcast(vec![f, update("c", JobState::Cancelled)]),
            1.0,
        );
        let e = ready(&mut failed).unwrap_err();
        assert_eq!(e.reason, "HTTP 400: name is required");
        assert_eq!(e.status, Some(400));
        assert_eq!(e.state, Some(JobState::Failed));
        assert_eq!(ready(&mut cancelled).unwrap_err().reason, "cancelled");
    }

    #[test]
    fn a_job_that_ended_before_anyone_waited_is_remembered() {
        let mut core = Core::new("c", Timing::default());
        core.receive(&jobs_broadcast(vec![update("early", JobState::Done)]), 0.0);
        let mut d = core.wait_done("early", 1.0);
        assert!(ready(&mut d).is_ok());
    }

    #[test]
    fn a_retry_forgets_the_old_failure() {
        let mut core = Core::new("c", Timing::default());
        core.receive(&jobs_broadcast(vec![update("j", JobState::Failed)]), 0.0);
        let (text, _, mut p) = core.request(Request::Retry { id: "j".into() }, 1.0);
        core.receive(
            &reply(&id_of(&text), ReplyBody::Retried { id: "j".into() }),
            2.0,
        );
        let mut done = ready(&mut p).ok().unwrap().done.unwrap();
        assert!(
            poll(&mut done).is_pending(),
            "must not resolve from the old failure"
        );
        core.receive(&jobs_broadcast(vec![update("j", JobState::Done)]), 3.0);
        assert!(ready(&mut done).is_ok());
    }

    #[test]
    fn a_job_that_ended_at_once_resolves_at_once() {
        let mut core = Core::new("c", Timing::default());
        let (text, mut p) = enqueue(&mut core, 0.0);
        core.receive(
            &reply(
                &id_of(&text),
                ReplyBody::Enqueued {
                    id: "j".into(),
                    coalesced: true,
                    state: JobState::Cancelled,
                },
            ),
            1.0,
        );
        let mut done = ready(&mut p).ok().unwrap().done.unwrap();
        assert_eq!(ready(&mut done).unwrap_err().reason, "cancelled");
        assert!(!core.has_work());
    }

    #[test]
    fn ticks_are_frequent_enough_for_every_period() {
        assert_eq!(Timing::default().tick_ms(), 1_000.0);
        let t = Timing {
            keep_alive_ms: 300.0,
            ..Timing::default()
        };
        assert_eq!(t.tick_ms(), 150.0);
        let t = Timing {
            resend_after_ms: 30.0,
            ..Timing::default()
        };
        assert_eq!(t.tick_ms(), 50.0);
    }

    #[test]
    fn keep_alives_flow_only_while_work_is_pending() {
        let t = Timing::default();
        let mut core = Core::new("c", t.clone());
        assert!(!core.needs_ticks());
        assert!(core.tick(0.0).is_empty());
        let _d = core.wait_done("j", 0.0);
        assert!(core.needs_ticks());
        let posts = core.tick(1.0);
        assert_eq!(
            posts.iter().map(|p| type_of(p)).collect::<Vec<_>>(),
            ["keepAlive"]
        );
        // Not again before the interval, and never two at once.
        assert!(core.tick(2.0).is_empty());
        let keep_alive_id = id_of(&posts[0]);
        core.receive(&reply(&keep_alive_id, ReplyBody::Alive), 3.0);
        let posts = core.tick(1.0 + t.keep_alive_ms);
        assert!(posts.iter().any(|p| type_of(p) == "keepAlive"));
    }

    #[test]
    fn a_status_with_pending_jobs_keeps_the_worker_alive() {
        let mut core = Core::new("c", Timing::default());
        let status = r#"{"type":"status","status":{"now":0,"counts":{"queued":3,"sending":0,"retryWait":0,"done":0,"failed":0,"cancelled":0},"budgets":[],"groups":[],"lanes":[],"etaMs":null,"attemptsPerJob":1.0,"offline":false,"warnings":[]}}"#;
        assert_eq!(core.receive(status, 0.0), Received::Broadcast);
        assert!(core.has_work());
        assert_eq!(type_of(&core.tick(0.0)[0]), "keepAlive");
    }

    #[test]
    fn an_old_status_is_refreshed() {
        let t = Timing::default();
        let mut core = Core::new("c", t.clone());
        let status = r#"{"type":"status","status":{"now":0,"counts":{"queued":3,"sending":0,"retryWait":0,"done":0,"failed":0,"cancelled":0},"budgets":[],"groups":[],"lanes":[],"etaMs":null,"attemptsPerJob":1.0,"offline":false,"warnings":[]}}"#;
        core.receive(status, 0.0);
        let mut now = 0.0;
        let mut asked = None;
        while now <= 3.0 * t.keep_alive_ms {
            for p in core.tick(now) {
                if type_of(&p) == "snapshot" {
                    asked = Some(p);
                }
            }
            now += 1_000.0;
        }
        let asked = asked.expect("a snapshot after 3 keep-alive intervals");
        let idle = ReplyBody::Snapshot {
            status: status_of(0),
        };
        assert_eq!(
            core.receive(&reply(&id_of(&asked), idle), now),
            Received::Settled
        );
        assert!(!core.has_work());
    }

    #[test]
    fn a_job_whose_broadcast_withheld_its_outcome_is_asked_for_before_done_resolves() {
        let mut core = Core::new("c", Timing::default());
        let mut waiting = core.wait_done("theirs", 0.0);
        let withheld = JobUpdate {
            withheld: true,
            ..update("theirs", JobState::Done)
        };
        assert_eq!(
            core.receive(&jobs_broadcast(vec![withheld.clone()]), 1.0),
            Received::Broadcast
        );
        assert!(
            poll(&mut waiting).is_pending(),
            "not resolved without its outcome"
        );
        let posts = core.take_posts();
        assert_eq!(posts.len(), 1, "asked at once, not at the next tick");
        assert_eq!(
            sent(&posts[0]).request,
            Request::Jobs {
                group_id: None,
                ids: Some(vec!["theirs".into()])
            }
        );
        let full = JobUpdate {
            outcome: Some(JobOutcome {
                status: 201,
                headers: vec![],
                body: "{}".into(),
            }),
            ..update("theirs", JobState::Done)
        };
        core.receive(
            &reply(&id_of(&posts[0]), ReplyBody::Jobs { jobs: vec![full] }),
            2.0,
        );
        assert_eq!(ready(&mut waiting).map(|o| o.status), Ok(201));

        // Heard before anyone waited: a later `done` asks too.
        core.receive(
            &jobs_broadcast(vec![JobUpdate {
                id: "later".into(),
                ..withheld
            }]),
            3.0,
        );
        assert!(core.take_posts().is_empty(), "nobody waits yet");
        let mut later = core.wait_done("later", 4.0);
        let posts = core.take_posts();
        assert_eq!(posts.len(), 1);
        // The job is gone by then: whoever waits is told so, not left waiting.
        core.receive(
            &reply(&id_of(&posts[0]), ReplyBody::Jobs { jobs: vec![] }),
            5.0,
        );
        assert!(ready(&mut later).is_err());
    }

    #[test]
    fn silence_while_waiting_asks_for_the_job_list() {
        let t = Timing::default();
        let mut core = Core::new("c", t.clone());
        let mut known = core.wait_done("known", 0.0);
        let mut gone = core.wait_done("gone", 0.0);
        let posts = core.tick(t.reconcile_after_ms);
        let list = posts
            .iter()
            .find(|p| type_of(p) == "jobs")
            .expect("a job list request");
        // Registered after the list was asked for: must not be judged by it.
        let mut late = core.wait_done("late", t.reconcile_after_ms + 1.0);
        core.receive(
            &reply(
                &id_of(list),
                ReplyBody::Jobs {
                    jobs: vec![update("known", JobState::Done)],
                },
            ),
            t.reconcile_after_ms + 2.0,
        );
        assert!(ready(&mut known).is_ok());
        assert!(ready(&mut gone)
            .unwrap_err()
            .reason
            .contains("no longer knows"));
        assert!(poll(&mut late).is_pending());
    }

    #[test]
    fn a_status_with_fewer_pending_jobs_than_waits_asks_for_the_list_once_the_ends_had_time() {
        let mut core = Core::new("c", Timing::default());
        let _a = core.wait_done("a", 0.0);
        let _b = core.wait_done("b", 0.0);
        let later = STATUS_MAY_LAG_MS;
        core.receive(&status(2), later + 1.0);
        assert!(!core.tick(later + 2.0).iter().any(|p| type_of(p) == "jobs"));
        core.receive(&status(1), later + 3.0);
        // An end counted by the status may still be on its way.
        assert!(!core.tick(later + 4.0).iter().any(|p| type_of(p) == "jobs"));
        // None came: it was missed.
        let judged = later + 3.0 + STATUS_MAY_LAG_MS;
        assert!(core.tick(judged).iter().any(|p| type_of(p) == "jobs"));
    }

    /// A page waiting on a bulk job's ids while the worker sends: every status counts a few
    /// ends not yet saved, so not yet told, and each of them arrives soon after. None of that
    /// is a missed end; asking for the whole job list at every status (once a second) cost
    /// the worker a list of every job each time.
    #[test]
    fn ends_on_their_way_when_a_status_was_taken_are_no_missed_ends() {
        let mut core = Core::new("c", Timing::default());
        let ids: Vec<String> = (0..40).map(|i| format!("j{i}")).collect();
        let mut waits: Vec<_> = ids.iter().map(|id| core.wait_done(id, 0.0)).collect();
        let mut now = STATUS_MAY_LAG_MS;
        let mut lists = 0;
        // Each second, 10 jobs end; the status is taken once 2 of the 10 are counted as ended
        // and not yet told, whose news follows 50 ms later.
        for second in 0..4 {
            let ending = &ids[second * 10..second * 10 + 10];
            core.receive(
                &jobs_broadcast(
                    ending[..8]
                        .iter()
                        .map(|id| update(id, JobState::Done))
                        .collect(),
                ),
                now,
            );
            let pending = 40 - (second as u64 * 10 + 10);
            core.receive(&status(pending), now + 1.0);
            core.receive(
                &jobs_broadcast(
                    ending[8..]
                        .iter()
                        .map(|id| update(id, JobState::Done))
                        .collect(),
                ),
                now + 50.0,
            );
            for t in [now + 2.0, now + 500.0, now + STATUS_MAY_LAG_MS - 1.0] {
                lists += core.tick(t).iter().filter(|p| type_of(p) == "jobs").count();
            }
            now += STATUS_MAY_LAG_MS;
        }
        // The last status is judged once the queue is quiet: its 2 ends arrived.
        lists += core
            .tick(now + STATUS_MAY_LAG_MS)
            .iter()
            .filter(|p| type_of(p) == "jobs")
            .count();
        assert_eq!(lists, 0, "job lists asked for while every end arrived");
        assert!(waits.iter_mut().all(|w| ready(w).is_ok()));
    }

    /// A worker stopped between a job's end and its announcement: the page never hears of
    /// `a`. The ends of `b` and `c` that follow would explain the first status's shortfall;
    /// the status the quiet queue sends last still shows it, and the list is asked for.
    #[test]
    fn a_missed_end_is_asked_about_once_the_queue_is_quiet() {
        let mut core = Core::new("c", Timing::default());
        let mut a = core.wait_done("a", 0.0);
        let _b = core.wait_done("b", 0.0);
        let _c = core.wait_done("c", 0.0);
        let t = STATUS_MAY_LAG_MS;
        core.receive(&status(2), t);
        core.receive(
            &jobs_broadcast(vec![update("b", JobState::Done)]),
            t + 100.0,
        );
        core.receive(&status(1), t + 300.0);
        core.receive(
            &jobs_broadcast(vec![update("c", JobState::Done)]),
            t + 350.0,
        );
        core.receive(&status(0), t + 400.0);
        let mut lists = Vec::new();
        for at in [t + 1_000.0, t + 1_200.0, t + 1_400.0] {
            lists.extend(core.tick(at).into_iter().filter(|p| type_of(p) == "jobs"));
        }
        assert_eq!(lists.len(), 1, "the job list is asked for once");
        core.receive(
            &reply(
                &id_of(&lists[0]),
                ReplyBody::Jobs {
                    jobs: vec![update("a", JobState::Done)],
                },
            ),
            t + 1_450.0,
        );
        assert!(ready(&mut a).is_ok());
    }

    #[test]
    fn a_new_worker_gets_everything_unanswered() {
        let mut core = Core::new("c", Timing::default());
        let (a, _, _pa) = core.request(Request::Snapshot, 0.0);
        let (b, _pb) = enqueue(&mut core, 0.0);
        let mut again = core.resend_all(5.0);
        again.sort();
        let mut want = vec![a, b];
        want.sort();
        assert_eq!(again, want);
    }

    #[test]
    fn close_fails_everything() {
        let mut core = Core::new("c", Timing::default());
        let (_, _, mut p) = core.request(Request::Snapshot, 0.0);
        let mut d = core.wait_done("j", 0.0);
        core.close();
        assert_eq!(ready(&mut p).err(), Some(ClientError::Closed));
        assert!(ready(&mut d).is_err());
        let (_, _, mut later) = core.request(Request::Snapshot, 1.0);
        assert_eq!(ready(&mut later).err(), Some(ClientError::Closed));
        assert!(!core.needs_ticks());
    }

    #[test]
    fn typed_requests_and_replies_round_trip() {
        let mut core = Core::new("c", Timing::default());
        let (text, _, mut p) = core.request(Request::Cancel { target: "g".into() }, 0.0);
        assert_eq!(sent(&text).request, Request::Cancel { target: "g".into() });
        core.receive(
            &reply(
                &id_of(&text),
                ReplyBody::Cancelled {
                    ids: vec!["a".into()],
                },
            ),
            1.0,
        );
        let answer = ready(&mut p).ok().unwrap();
        assert_eq!(
            answer.body,
            ReplyBody::Cancelled {
                ids: vec!["a".into()]
            }
        );
        assert_eq!(
            unexpected_reply("snapshot", &answer.body).to_string(),
            "unreadable message from the worker: expected a 'snapshot' reply, got 'cancelled'"
        );
    }

    #[test]
    fn an_unreadable_reply_settles_its_request_with_a_decode_error() {
        let mut core = Core::new("c", Timing::default());
        let (text, _, mut p) = core.request(Request::Snapshot, 0.0);
        let r = format!(
            r#"{{"type":"reply","requestId":"{}","body":{{"type":"snapshot","status":5}}}}"#,
            id_of(&text)
        );
        assert_eq!(core.receive(&r, 1.0), Received::Settled);
        let e = ready(&mut p).err().unwrap();
        assert_eq!(e.code(), "decode");
        assert_eq!(
            e.to_string(),
            "unreadable message from the worker: reply: invalid type: integer `5`, expected \
             struct Status"
        );
    }

    #[test]
    fn an_unreadable_broadcast_still_goes_to_subscribers() {
        let mut core = Core::new("c", Timing::default());
        let mut done = core.wait_done("j", 0.0);
        let odd = r#"{"type":"jobs","updates":[{"id":"j","state":"done"}]}"#;
        assert_eq!(core.receive(odd, 1.0), Received::Broadcast);
        assert!(poll(&mut done).is_pending());
        assert_eq!(core.receive(&status(1), 2.0), Received::Broadcast);
        assert!(core.has_work());
    }

    #[test]
    fn an_unknown_worker_error_keeps_its_code() {
        let mut core = Core::new("c", Timing::default());
        let (text, _, mut p) = core.request(Request::Snapshot, 0.0);
        let e = format!(
            r#"{{"type":"error","requestId":"{}","error":{{"code":"quota-exceeded","why":"x"}}}}"#,
            id_of(&text)
        );
        core.receive(&e, 1.0);
        let e = ready(&mut p).err().unwrap();
        assert_eq!(e.code(), "worker");
        assert!(e.to_string().contains("quota-exceeded"), "{e}");
    }

    #[test]
    fn garbage_and_foreign_errors_are_ignored() {
        let mut core = Core::new("c", Timing::default());
        assert!(matches!(core.receive("{nope", 0.0), Received::Ignored(_)));
        let e = r#"{"type":"error","requestId":null,"error":{"code":"malformed","message":"x"}}"#;
        assert!(matches!(core.receive(e, 0.0), Received::Ignored(_)));
        assert!(core.take_worker_fault().is_none());
    }

    #[test]
    fn a_worker_that_cannot_start_is_heard_by_every_page() {
        let mut core = Core::new("c", Timing::default());
        let e = r#"{"type":"error","requestId":null,"error":{"code":"cannot-start","message":"/sluice/x.wasm was not found (HTTP 404)"}}"#;
        assert_eq!(core.receive(e, 0.0), Received::Broadcast);
        let fault = core.take_worker_fault().expect("kept for register()");
        assert_eq!(fault.code(), "cannot-start");
        assert!(
            fault.to_string().contains("was not found (HTTP 404)"),
            "{fault}"
        );
        assert!(core.take_worker_fault().is_none(), "taken once");
    }

    #[test]
    fn a_removed_job_ends_its_waits_as_gone() {
        let mut core = Core::new("c", Timing::default());
        let mut done = core.wait_done("j", 0.0);
        let removed = encode(&WorkerMessage::Jobs {
            updates: vec![],
            removed: vec!["j".into()],
        });
        assert_eq!(core.receive(&removed, 1.0), Received::Broadcast);
        let end = ready(&mut done).err().unwrap();
        assert_eq!(end.state, None);
        assert!(end.reason.contains("no longer knows"), "{end}");
        assert_eq!(core.waiting_jobs(), 0);
    }
}
