//! The worker's messages: replies and errors for this client's requests, broadcasts of jobs
//! and status, and what a status says about ends this client may have missed.

use sluice_shared::json::RawJson;
use sluice_shared::json::{self, FromJson, Json};
use sluice_shared::protocol::{JobUpdate, ProtocolError, ReplyBody, WorkerMessage};
use sluice_shared::status::StateCounts;
use sluice_shared::JobId;

use super::*;

impl Core {
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
                    Ok(WorkerMessage::Jobs {
                        updates,
                        removed,
                        discarded,
                    }) => {
                        self.last_news = now;
                        // First: a dismissed job is also among the removed ones, now or later.
                        for id in &discarded {
                            self.discard(id);
                        }
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
    pub(super) fn note_status(&mut self, status: &RawJson, now: f64) {
        // Its counts alone, read by name: the rest goes to pages as it came (see `RawJson`).
        let counts = json::parse(status.text())
            .ok()
            .and_then(|v| StateCounts::from_json(v.get("counts")?).ok());
        let Some(counts) = counts else {
            return;
        };
        self.worker_pending = counts.pending();
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
    pub(super) fn shortfall_unexplained(&mut self, now: f64) -> bool {
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

    pub(super) fn apply_updates(&mut self, updates: &[JobUpdate], now: f64) {
        let mut ask = Vec::new();
        for u in updates {
            self.undiscard(&u.id);
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
    pub(super) fn finish_outcomes(&mut self, asked: &[JobId], jobs: &[JobUpdate]) {
        for id in asked {
            if !jobs.iter().any(|j| j.id == *id) {
                self.gone(id);
            }
        }
    }

    /// After the full job list: a job that was known before the list was asked for and is not
    /// in it is gone (dismissed, expired), and nobody should wait on it forever.
    pub(super) fn finish_reconcile(&mut self, jobs: &[JobUpdate]) {
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
    pub(super) fn gone(&mut self, id: &str) {
        if let Some(w) = self.waiters.remove(id) {
            self.waits_ended += 1;
            for tx in w.txs {
                tx.send(Err(JobEnd {
                    id: id.to_string(),
                    state: None,
                    status: None,
                    reason: format!(
                        "the worker no longer knows job {id} (expired, or dismissed unheard)"
                    ),
                    outcome: None,
                    discarded: false,
                }));
            }
        }
    }

    /// A job of this id again (a page-chosen id used anew): not the one dismissed.
    pub(super) fn undiscard(&mut self, id: &str) {
        if let Some(i) = self.discarded.iter().position(|d| d == id) {
            self.discarded.remove(i);
        }
    }

    /// Ends the waits on a job a page dismissed, and remembers it for `done`s asked later.
    pub(super) fn discard(&mut self, id: &str) {
        self.undiscard(id);
        if self.discarded.len() == DISCARDED_MEMORY {
            self.discarded.remove(0);
        }
        self.discarded.push(id.to_string());
        self.finished.retain(|f| f.id != id);
        if let Some(w) = self.waiters.remove(id) {
            self.waits_ended += 1;
            for tx in w.txs {
                tx.send(Err(JobEnd::discarded(id)));
            }
        }
    }
}
