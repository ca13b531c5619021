//! Requests on their way: numbering, sending, resending what went unanswered, keep-alives,
//! the page's port, and settling each request with its answer.

use sluice_shared::json::{self};
use sluice_shared::protocol::{Envelope, ProtocolError, ReplyBody, Request};
use sluice_shared::JobId;

use crate::oneshot::{self, Sender};

use super::*;

impl Core {
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

    pub(super) fn start(
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
    pub(super) fn start_own(&mut self, request: Request, purpose: Purpose, now: f64) -> String {
        self.start(request, purpose, None, now, Via::Event)
    }

    /// Asks the worker for the full state of `ids` (their outcomes); the reply resolves
    /// whoever waits on them.
    pub(super) fn ask_outcomes(&mut self, ids: Vec<JobId>, now: f64) {
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

    pub(super) fn settle(
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
}
