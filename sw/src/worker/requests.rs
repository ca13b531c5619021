//! A page's requests: enqueue (one job or many, with ids checked and URLs resolved), cancel,
//! retry, dismiss, configure, snapshot, job lists, keep-alive.

use js_sys::{Function, Object, Reflect};
use rustc_hash::FxHashMap;
use sluice_shared::config::EngineConfig;
use sluice_shared::job::RetryWith;
use sluice_shared::json::RawJson;
use sluice_shared::protocol::{JobUpdate, ProtocolError, ReplyBody, Request, WorkerMessage};
use sluice_shared::{Enqueued, Job, JobId, JobSpec};
use wasm_bindgen::{JsCast, JsValue};
use web_sys::Url;

use crate::config::{self, resolve_engine_prefixes, SavedConfig};
use crate::error::{describe, SwError};
use crate::runtime::{now_ms, warn};
use crate::store::MetaOp;

use super::Worker;

/// Longest job id a page may choose.
const MAX_JOB_ID_BYTES: usize = 128;

/// A page-chosen job id must be short printable text (it is a storage key and shows in logs).
fn check_job_id(id: &str) -> Result<(), ProtocolError> {
    let problem = if id.is_empty() {
        "is empty"
    } else if id.len() > MAX_JOB_ID_BYTES {
        "is longer than 128 bytes"
    } else if id.chars().any(char::is_control) {
        "contains control characters"
    } else {
        return Ok(());
    };
    Err(ProtocolError::InvalidRequest {
        message: format!(
            "the job id '{}' {problem}; leave it out and the client picks one",
            id.chars().take(40).collect::<String>()
        ),
    })
}

impl Worker {
    /// Resolves a job URL against the worker's origin.
    pub(super) fn resolve_url(&self, url: &str) -> Result<String, ProtocolError> {
        let invalid = |message: String| ProtocolError::InvalidUrl {
            url: url.chars().take(200).collect(),
            message,
        };
        if url.trim().is_empty() {
            return Err(invalid("the URL is empty".into()));
        }
        // Absolute URLs too go through the browser's parser: the engine matches the allowed
        // scopes against the normalised form (lower-case host, dot segments resolved).
        Url::new_with_base(url, &format!("{}/", self.setup.origin))
            .map(|u| u.href())
            .map_err(|e| invalid(describe(&e)))
    }

    /// The job a page-chosen id already names: the job itself, or the one it was folded into.
    pub(super) fn known_job(&self, id: &str) -> Option<Enqueued> {
        let engine = self.engine.borrow();
        let (job, coalesced) = match engine.job(id) {
            Some(job) => (job, false),
            None => (engine.job(self.folds.borrow().carrier(id)?)?, true),
        };
        Some(Enqueued {
            id: job.id.clone(),
            coalesced,
            state: job.state,
        })
    }

    /// Waits until whatever is being saved is saved: a known job may still be in the
    /// transaction of the request that first brought it, and its reply waits for that.
    pub(super) async fn known_jobs_saved(&self) -> Result<(), ProtocolError> {
        self.store.saved().await?;
        if self.is_stopped() {
            return Err(SwError::Stopped.into());
        }
        Ok(())
    }

    /// Remembers which tab enqueued these jobs (see `requesters`).
    pub fn note_requester(&self, from: Option<String>, ids: &[JobId]) {
        let Some(from) = from else {
            return;
        };
        let mut requesters = self.requesters.borrow_mut();
        for id in ids {
            requesters.insert(id.clone(), from.clone());
        }
    }

    pub async fn enqueue(&self, mut spec: JobSpec) -> Result<Enqueued, ProtocolError> {
        self.whole_queue().await?;
        self.refuse_while_full().await?;
        if let Some(id) = spec.id.as_deref() {
            check_job_id(id)?;
            // Sent again after a lost reply: already saved, answer with what it became.
            if let Some(known) = self.known_job(id) {
                self.known_jobs_saved().await?;
                return Ok(known);
            }
        }
        spec.url = self.resolve_url(&spec.url)?;
        let asked = spec.id.clone();
        let now = now_ms();
        let result = self.engine.borrow_mut().enqueue(spec, now)?;
        self.folds.borrow_mut().note(asked, &result);
        let starts = self.poll_with_request(now);
        self.commit_with_starts(starts, &[]).await?;
        Ok(result)
    }

    /// An `enqueueMany`: all jobs or none, in one transaction. Jobs whose ids are already known
    /// (the request was sent again after a lost reply) are answered as they are, not saved
    /// again.
    pub(super) async fn enqueue_many(
        &self,
        jobs: Vec<JobSpec>,
        group_id: Option<String>,
    ) -> Result<ReplyBody, ProtocolError> {
        self.refuse_while_full().await?;
        let total = jobs.len();
        // Ids with the position of their job (see `store::merge_journals` why not a set).
        let mut seen: FxHashMap<JobId, usize> =
            FxHashMap::with_capacity_and_hasher(total, Default::default());
        let mut known: Vec<Option<Enqueued>> = Vec::with_capacity(total);
        let mut fresh = Vec::with_capacity(total);
        for (i, job) in jobs.into_iter().enumerate() {
            let in_job = |e: ProtocolError| ProtocolError::InvalidRequest {
                message: format!("job {} of {total}: {e}; nothing was enqueued", i + 1),
            };
            let found = match job.id.as_deref() {
                None => None,
                Some(id) => {
                    check_job_id(id).map_err(in_job)?;
                    if seen.insert(id.to_string(), i).is_some() {
                        return Err(in_job(ProtocolError::InvalidRequest {
                            message: format!("another job of this request has the id '{id}'"),
                        }));
                    }
                    self.known_job(id)
                }
            };
            if found.is_none() {
                fresh.push(job);
            }
            known.push(found);
        }
        drop(seen);
        let mut warning = None;
        if fresh.is_empty() {
            self.known_jobs_saved().await?;
        } else {
            self.resolve_urls(&mut fresh, total)?;
            let mut asked: Vec<Option<JobId>> = Vec::with_capacity(fresh.len());
            for job in &fresh {
                asked.push(job.id.clone());
            }
            let now = now_ms();
            let (results, w) = self
                .engine
                .borrow_mut()
                .enqueue_many(fresh, group_id, now)?;
            warning = w;
            {
                let mut folds = self.folds.borrow_mut();
                for (asked, result) in asked.into_iter().zip(&results) {
                    folds.note(asked, result);
                }
            }
            let mut new_ids: Vec<JobId> = Vec::with_capacity(results.len());
            for result in &results {
                if !result.coalesced {
                    new_ids.push(result.id.clone());
                }
            }
            let starts = self.poll_with_request(now);
            self.commit_with_starts(starts, &new_ids).await?;
            let mut results = results.into_iter();
            for slot in known.iter_mut().filter(|k| k.is_none()) {
                *slot = results.next();
            }
        }
        let mut ids = Vec::with_capacity(known.len());
        for result in known.into_iter().flatten() {
            ids.push(result.id);
        }
        Ok(ReplyBody::EnqueuedMany { ids, warning })
    }

    /// Resolves the jobs' URLs; bulk jobs usually share a few, so each distinct one once.
    pub(super) fn resolve_urls(
        &self,
        jobs: &mut [JobSpec],
        total: usize,
    ) -> Result<(), ProtocolError> {
        let mut last: Option<(String, String)> = None;
        for (i, job) in jobs.iter_mut().enumerate() {
            if let Some((from, to)) = &last {
                if *from == job.url {
                    job.url = to.clone();
                    continue;
                }
            }
            let resolved =
                self.resolve_url(&job.url)
                    .map_err(|e| ProtocolError::InvalidRequest {
                        message: format!("job {} of {total}: {e}; nothing was enqueued", i + 1),
                    })?;
            last = Some((std::mem::replace(&mut job.url, resolved.clone()), resolved));
        }
        Ok(())
    }

    /// Carries out one page request; every effect is saved before this returns.
    /// `from`: the tab (client id) that sent it, to whom the outcomes of the jobs it enqueues
    /// go.
    pub async fn handle(
        &self,
        request: Request,
        from: Option<String>,
    ) -> Result<ReplyBody, ProtocolError> {
        // The status is answered from the saved counts while the rest of a large queue is
        // read (see `Worker::start`); everything else needs the jobs themselves.
        let needs_jobs = match request {
            Request::KeepAlive => false,
            Request::Snapshot => !self.engine.borrow().counts_unread_jobs(),
            _ => true,
        };
        if needs_jobs {
            self.whole_queue().await?;
        }
        let (body, meta) = match request {
            Request::Enqueue { job } => {
                let e = self.enqueue(job).await?;
                self.note_requester(from, std::slice::from_ref(&e.id));
                return Ok(ReplyBody::Enqueued {
                    id: e.id,
                    coalesced: e.coalesced,
                    state: e.state,
                });
            }
            Request::EnqueueMany { jobs, group_id } => {
                let reply = self.enqueue_many(jobs, group_id).await?;
                if let ReplyBody::EnqueuedMany { ids, .. } = &reply {
                    self.note_requester(from, ids);
                }
                return Ok(reply);
            }
            // The three below and `configure` share one save (one await in this state machine).
            Request::Cancel { target } => (
                ReplyBody::Cancelled {
                    ids: self.engine.borrow_mut().cancel(&target, now_ms())?,
                },
                None,
            ),
            Request::Retry { id, body, headers } => {
                let with = RetryWith { body, headers };
                self.engine.borrow_mut().retry(&id, with, now_ms())?;
                (ReplyBody::Retried { id }, None)
            }
            Request::Dismiss { id } => {
                self.engine.borrow_mut().dismiss(&id, now_ms())?;
                self.batcher.borrow_mut().push_discarded(id.clone());
                (ReplyBody::Dismissed { id }, None)
            }
            Request::SetCredentials { budget, headers } => {
                self.engine.borrow_mut().set_credentials(&budget, headers)?;
                (ReplyBody::CredentialsSet { budget }, None)
            }
            Request::Configure { config } => {
                // Read here, not by the page client (see `RawJson`): with the reader's words.
                let mut config: EngineConfig = config
                    .read()
                    .map_err(|e| ProtocolError::Malformed { message: e.0 })?;
                self.refuse_while_full().await?;
                resolve_engine_prefixes(&mut config, &self.setup.origin);
                config::pin_allow(&mut config, &self.setup.script);
                self.engine
                    .borrow_mut()
                    .configure(config.clone(), now_ms())
                    .map_err(|e| ProtocolError::InvalidConfig {
                        message: e.to_string(),
                    })?;
                let saved = SavedConfig {
                    config,
                    script_fingerprint: self.setup.fingerprint.clone(),
                };
                (ReplyBody::Configured, Some(MetaOp::PutConfig(saved)))
            }
            Request::Snapshot => {
                return Ok(ReplyBody::Snapshot {
                    status: RawJson::of(&self.snapshot(now_ms())),
                })
            }
            Request::Jobs { group_id, ids } => {
                let engine = self.engine.borrow();
                let mut jobs: Vec<&Job> = Vec::new();
                match ids {
                    Some(ids) => jobs.extend(ids.iter().filter_map(|id| engine.job(id))),
                    None => {
                        for job in engine.jobs() {
                            if group_id
                                .as_deref()
                                .is_none_or(|g| job.group_id.as_deref() == Some(g))
                            {
                                jobs.push(job);
                            }
                        }
                    }
                }
                sluice_shared::job::sort_by_seq(&mut jobs);
                let mut updates = Vec::with_capacity(jobs.len());
                for job in jobs {
                    updates.push(JobUpdate::from(job));
                }
                return Ok(ReplyBody::Jobs { jobs: updates });
            }
            Request::KeepAlive => {
                // A queue held while storage is full (see `StorageMode::Held`) saves
                // nothing of its own that would find room again: the pages' keep-alives try.
                let _ = self.refuse_while_full().await;
                return Ok(ReplyBody::Alive);
            }
        };
        self.commit(meta.as_slice()).await?;
        Ok(body)
    }
}

/// Posts one message (JSON text) to the page that sent a request.
pub fn reply_to(source: Option<&Object>, message: &WorkerMessage) {
    let Some(source) = source else {
        warn("a request came without a source to reply to");
        return;
    };
    let text = JsValue::from_str(&sluice_shared::protocol::encode(message));
    let posted = Reflect::get(source, &JsValue::from_str("postMessage"))
        .ok()
        .and_then(|f| f.dyn_into::<Function>().ok())
        .map(|f| f.call1(source, &text));
    if !matches!(posted, Some(Ok(_))) {
        warn("could not post a reply (the page may have closed)");
    }
}
