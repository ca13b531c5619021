//! The job model: one HTTP action a page handed to Sluice, and the legal moves of its state.
//!
//! A job is the unit that is persisted, scheduled, sent and reported. Its state changes only
//! through [`Job::transition`], which refuses illegal moves with a typed error: a cancelled job
//! must never be retried by accident and a done job must never be sent again, whatever order
//! messages arrive in after a restart.

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::headers::Headers;
use crate::json::{self, FromJson, Json, ToJson};
use crate::request_options::RequestOptions;
use crate::resources::Costs;
use crate::time::Millis;

pub type JobId = String;

/// Which queue a job waits in. Declared from most to least urgent; the order is the priority.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    Default,
    ToJson,
    FromJson,
)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    /// A person is waiting for this (one edit, a chat message).
    Interactive,
    /// Many jobs started together (a bulk edit).
    #[default]
    Bulk,
    /// Nobody is waiting (a periodic refresh).
    Background,
}

impl Lane {
    pub const ALL: [Lane; 3] = [Lane::Interactive, Lane::Bulk, Lane::Background];

    /// 0 for interactive, 1 for bulk, 2 for background.
    pub fn rank(self) -> i64 {
        match self {
            Lane::Interactive => 0,
            Lane::Bulk => 1,
            Lane::Background => 2,
        }
    }

    pub fn index(self) -> usize {
        self.rank() as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Lane::Interactive => "interactive",
            Lane::Bulk => "bulk",
            Lane::Background => "background",
        }
    }
}

/// What the action does to the remote record; it decides coalescing and idempotency.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default, ToJson, FromJson,
)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Makes a record: not idempotent by itself, so every attempt carries one idempotency key.
    Create,
    /// Changes fields of a record: later patches to the same key may merge into an unsent one.
    Patch,
    /// Removes a record.
    Delete,
    /// Anything else: never merged.
    #[default]
    Custom,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "kebab-case")]
pub enum JobState {
    Queued,
    Sending,
    RetryWait,
    Done,
    Failed,
    Cancelled,
    /// The server answered 409 Conflict or 412 Precondition Failed: the request was sound but
    /// the record changed underneath it. Never retried by itself: the page decides (retry as
    /// is, retry with a new body, or dismiss), with the server's answer in the job's outcome.
    Conflict,
}

impl JobState {
    pub const ALL: [JobState; 7] = [
        JobState::Queued,
        JobState::Sending,
        JobState::RetryWait,
        JobState::Done,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Conflict,
    ];

    /// Done and cancelled are final; failed and conflict are final unless the user asks for a
    /// retry.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Done | JobState::Failed | JobState::Cancelled | JobState::Conflict
        )
    }

    /// Waiting to be sent (now or later).
    pub fn is_waiting(self) -> bool {
        matches!(self, JobState::Queued | JobState::RetryWait)
    }

    pub fn name(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Sending => "sending",
            JobState::RetryWait => "retry-wait",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Conflict => "conflict",
        }
    }

    /// The legal moves. Anything not listed is a bug somewhere upstream and is refused.
    pub fn can_move_to(self, to: JobState) -> bool {
        use JobState::*;
        matches!(
            (self, to),
            (Queued, Sending)
                | (Queued, Cancelled)
                | (Queued, Failed) // the retry budget ran out before it could be tried again
                | (Sending, Done)
                | (Sending, Failed)
                | (Sending, RetryWait)
                | (Sending, Queued) // a 429, or an unknown outcome after a restart
                | (RetryWait, Queued)
                | (RetryWait, Sending)
                | (RetryWait, Cancelled)
                | (RetryWait, Failed)
                | (Sending, Conflict)
                | (Failed, Queued) // the user asked for a retry
                | (Conflict, Queued) // the user resolved it by sending it again
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An attempted state change that the state machine does not allow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IllegalTransition {
    pub job: JobId,
    pub from: JobState,
    pub to: JobState,
}

impl fmt::Display for IllegalTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "job {} cannot go from {} to {}",
            self.job, self.from, self.to
        )
    }
}

impl std::error::Error for IllegalTransition {}

/// Why a job did not succeed, kept for the user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToJson, FromJson)]
pub struct JobError {
    /// The HTTP status, if a response arrived.
    pub status: Option<u16>,
    /// The server's message or a description of what went wrong.
    pub message: String,
}

/// What a page asks to have sent. Everything else about a job is decided by Sluice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default, ToJson, FromJson)]
#[serde(default, rename_all = "camelCase")]
pub struct JobSpec {
    /// The job's id, fixed by the page before its first send so that an `enqueue` sent again
    /// (its reply was lost) names the same job and is not saved twice; `None`: Sluice picks
    /// one.
    pub id: Option<JobId>,
    /// The budget name; empty means "the budget whose match rules cover the URL".
    #[serde(skip_serializing_if = "String::is_empty")]
    pub budget: String,
    pub lane: Lane,
    /// Jobs with the same key run one at a time in the order they were enqueued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub kind: JobKind,
    /// Defaults to GET when empty.
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// How the browser makes the request (credentials, mode, redirects, referrer policy,
    /// integrity); `None`: its defaults. See [`RequestOptions`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options: Option<RequestOptions>,
    /// What it spends of its budget's resources besides one request (`{"tokens": 1200}`), an
    /// estimate the answer may correct; see `resources`.
    #[serde(skip_serializing_if = "Costs::is_empty")]
    pub cost: Costs,
    /// Sent with `If-Match: <the ETag of the last answer to a job of its key>` (when one is
    /// known and the job names no `If-Match` of its own), so that edits queued one after
    /// another each apply to the version the one before produced, and a change someone else
    /// made meanwhile is a conflict instead of being overwritten. Needs a `key`.
    #[serde(skip_serializing_if = "is_false")]
    pub if_match_from_key: bool,
    /// Ids of earlier jobs (as `enqueue` returned them) that must be done before this one is
    /// sent; their answers may be referred to in its URL, headers and body (see
    /// [`crate::result_ref`]), and every job referred to there is waited for, named here or not.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<JobId>,
}

/// What a retry changes of a failed or conflicting job's request: a conflict resolved with a
/// new body (the page merged its change into the record the server answered with), or headers
/// set over the job's (an `If-Match` with the server's latest `ETag`, a fresh token).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetryWith {
    /// Replaces the body; `None`: as it was.
    pub body: Option<String>,
    /// Each one replaces the job's header of that name (any case) or is added; the job's other
    /// headers stay. `None`: as they were.
    pub headers: Option<Vec<(String, String)>>,
}

impl RetryWith {
    /// `headers` with these set over them, by name in any case.
    pub fn headers_over(&self, headers: &[(String, String)]) -> Vec<(String, String)> {
        match &self.headers {
            Some(set) => headers_set_over(headers, set),
            None => headers.to_vec(),
        }
    }
}

/// Headers as a page writes them, `{"Name": "value"}` or `[["Name", "value"], ...]`: a
/// job's, `setCredentials`', and what the worker script's credentials function returns.
pub fn read_headers(v: &Json) -> Result<Vec<(String, String)>, json::Error> {
    match v {
        Json::Obj(members) => {
            let mut out = Vec::with_capacity(members.len());
            for (name, value) in members {
                out.push((name.to_string(), String::from_json(value)?));
            }
            Ok(out)
        }
        Json::Arr(_) => Vec::from_json(v),
        other => Err(other
            .invalid_type("headers as an object of strings or an array of [name, value] pairs")),
    }
}

/// `base` with each header of `set` in place of any of that name (names compared as HTTP
/// compares them, ignoring ASCII case): a retry's replacements, a budget's credentials.
pub fn headers_set_over(
    base: &[(String, String)],
    set: &[(String, String)],
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = base
        .iter()
        .filter(|(name, _)| !set.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)))
        .cloned()
        .collect();
    out.extend(set.iter().cloned());
    out
}

/// What the server said about a finished attempt, kept with a done job for its callers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct JobOutcome {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// Whether a flag is unset: such a flag is left out of a job's JSON (see [`Job`]).
fn is_false(flag: &bool) -> bool {
    !*flag
}

/// A job as stored and scheduled. Its members that are empty (`None`, `[]`, `false`) are
/// left out of its record: they were a quarter of a bulk job's (669 -> 492 bytes for a
/// create with a small JSON body), all of it written in an `enqueueMany`'s journal entry,
/// again in the job's own record, and read back at each start (issue 40).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct Job {
    pub id: JobId,
    pub budget: String,
    pub lane: Lane,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub kind: JobKind,
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// `None` when every member is the browser's default (most jobs: nothing stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<RequestOptions>,
    /// What it spends of its budget's resources (see [`JobSpec::cost`]).
    #[serde(default, skip_serializing_if = "Costs::is_empty")]
    pub cost: Costs,
    /// Fixed at enqueue and sent with every attempt of a create.
    pub idempotency_key: String,
    /// See [`JobSpec::if_match_from_key`].
    #[serde(default, skip_serializing_if = "is_false")]
    pub if_match_from_key: bool,
    pub state: JobState,
    /// Attempts that reached a verdict; 429s are not counted (they are the budget's fault).
    pub attempts: u32,
    /// Not to be started before this instant (backoff).
    pub not_before: Millis,
    pub enqueued_at: Millis,
    /// How many later patches were merged into this one.
    pub coalesced: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<JobError>,
    /// The final response of a done job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<JobOutcome>,
    /// When it reached a terminal state (for retention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Millis>,
    /// When its latest attempt started; set once it was first sent, so "was it ever tried" is
    /// answerable even after a 429 (which does not count as an attempt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Millis>,
    /// Enqueue order, to break ties between jobs enqueued in the same millisecond.
    #[serde(default)]
    pub seq: u64,
    /// Ids of the later jobs folded into this one (coalesced patches, identical requests), so
    /// that an `enqueue` of one of them sent again is answered with this job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub folded: Vec<JobId>,
    /// The batch it went in (see `engine::batching`), kept while that batch's answer is not
    /// known: saved before the batch leaves, so that a restart sends the same members again
    /// under the same key rather than regroup them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
    /// The jobs it still waits for (see [`JobSpec::after`]): each leaves the list once it is
    /// done and its answer is filled into this job's request. Not sent while any is left.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<JobId>,
    /// Its request holds values filled in from another job's answer: each start is saved
    /// first, so that a restart never sends it with a value it has not saved.
    #[serde(default, skip_serializing_if = "is_false")]
    pub filled: bool,
}

impl Job {
    /// Applies a state change if the state machine allows it.
    pub fn transition(&mut self, to: JobState) -> Result<(), IllegalTransition> {
        if self.state.can_move_to(to) {
            self.state = to;
            Ok(())
        } else {
            Err(IllegalTransition {
                job: self.id.clone(),
                from: self.state,
                to,
            })
        }
    }

    /// GET, HEAD, PUT, DELETE and OPTIONS mean the same thing however often they are sent.
    pub fn is_idempotent_method(&self) -> bool {
        matches!(
            self.method.as_str(),
            "GET" | "HEAD" | "PUT" | "DELETE" | "OPTIONS"
        )
    }

    /// The headers to send on every attempt: the job's own plus, for a create, its key.
    pub fn request_headers(&self) -> Vec<(String, String)> {
        let mut headers = self.headers.clone();
        if self.kind == JobKind::Create && !Headers(&headers).has("idempotency-key") {
            headers.push(("Idempotency-Key".into(), self.idempotency_key.clone()));
        }
        headers
    }
}

/// Positions of `keys` in ascending key order, equal keys in their given order.
///
/// Every sort in the worker goes through here: each distinct sort call site compiles to
/// kilobytes of wasm of its own, this one sorts only `(u64, usize)` pairs.
pub fn sorted_order(keys: impl Iterator<Item = u64>) -> Vec<usize> {
    // Plain loops, and the rest not generic: `collect`s are generic functions per call site.
    let mut pairs: Vec<(u64, usize)> = Vec::new();
    for (i, k) in keys.enumerate() {
        pairs.push((k, i));
    }
    order_of_pairs(pairs)
}

#[inline(never)]
fn order_of_pairs(mut pairs: Vec<(u64, usize)>) -> Vec<usize> {
    pairs.sort_unstable();
    let mut order = Vec::with_capacity(pairs.len());
    for (_, i) in pairs {
        order.push(i);
    }
    order
}

/// Sorts jobs into enqueue order (`seq`).
pub fn sort_by_seq(jobs: &mut Vec<&Job>) {
    let order = sorted_order(jobs.iter().map(|j| j.seq));
    let mut sorted = Vec::with_capacity(jobs.len());
    for i in order {
        sorted.push(jobs[i]);
    }
    *jobs = sorted;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn job(state: JobState) -> Job {
        Job {
            id: "j".into(),
            budget: "b".into(),
            lane: Lane::Bulk,
            key: None,
            kind: JobKind::Create,
            method: "POST".into(),
            url: "https://api.example/x".into(),
            headers: vec![],
            options: None,
            cost: Costs::default(),
            body: None,
            idempotency_key: "k".into(),
            if_match_from_key: false,
            state,
            attempts: 0,
            not_before: 0,
            enqueued_at: 0,
            coalesced: 0,
            group_id: None,
            last_error: None,
            outcome: None,
            finished_at: None,
            started_at: None,
            seq: 0,
            folded: Vec::new(),
            batch: None,
            after: Vec::new(),
            filled: false,
        }
    }

    #[test]
    fn cancelled_is_never_retried_and_done_never_goes_back() {
        for to in JobState::ALL {
            assert!(
                job(JobState::Cancelled).transition(to).is_err(),
                "cancelled -> {to}"
            );
            assert!(job(JobState::Done).transition(to).is_err(), "done -> {to}");
        }
    }

    #[test]
    fn illegal_transition_is_a_typed_error() {
        let err = job(JobState::Done)
            .transition(JobState::Sending)
            .unwrap_err();
        assert_eq!(err.from, JobState::Done);
        assert_eq!(err.to, JobState::Sending);
        assert_eq!(err.to_string(), "job j cannot go from done to sending");
    }

    #[test]
    fn failed_can_be_retried() {
        let mut j = job(JobState::Failed);
        assert!(j.transition(JobState::Queued).is_ok());
    }

    #[test]
    fn creates_carry_their_idempotency_key() {
        let j = job(JobState::Queued);
        assert!(j
            .request_headers()
            .contains(&("Idempotency-Key".to_string(), "k".to_string())));
        let mut p = job(JobState::Queued);
        p.kind = JobKind::Patch;
        assert!(p.request_headers().is_empty());
    }

    #[test]
    fn json_forms_match_serde() {
        use crate::json::testing::{reads_like_serde, same_as_serde};
        let mut j = job(JobState::RetryWait);
        same_as_serde(&j);
        j.key = Some("k\"1".into());
        j.headers = vec![("a".into(), "b".into())];
        j.body = Some("{\"x\":1}".into());
        j.group_id = Some("g".into());
        j.last_error = Some(JobError {
            status: Some(503),
            message: "down".into(),
        });
        j.outcome = Some(JobOutcome {
            status: 200,
            headers: vec![("x".into(), "y".into())],
            body: "ok".into(),
        });
        j.finished_at = Some(5);
        j.started_at = Some(u64::MAX);
        j.seq = 7;
        same_as_serde(&j);
        for state in JobState::ALL {
            same_as_serde(&state);
        }
        for lane in Lane::ALL {
            same_as_serde(&lane);
        }
        same_as_serde(&JobSpec::default());
        for text in [
            r#"{}"#,
            r#"{"url":"u","lane":"interactive","kind":"patch","headers":[["a","b"]]}"#,
            r#"{"lane":"urgent"}"#,
            r#"{"kind":5}"#,
            r#"{"url":null}"#,
            r#"{"key":null,"body":"b","groupId":"g","method":"post"}"#,
            r#"{"url":"a","url":"b"}"#,
            r#"{"headers":[["a"]]}"#,
        ] {
            reads_like_serde::<JobSpec>(text);
        }
        let text = serde_json::to_string(&j).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for f in ["outcome", "finishedAt", "startedAt", "seq"] {
            v.as_object_mut().unwrap().remove(f);
        }
        reads_like_serde::<Job>(&v.to_string());
        v.as_object_mut().unwrap().remove("id");
        reads_like_serde::<Job>(&v.to_string());
        reads_like_serde::<Job>(r#"{"id":"x"}"#);
    }

    #[test]
    fn states_serialize_kebab_case() {
        assert_eq!(
            serde_json::to_string(&JobState::RetryWait).unwrap(),
            "\"retry-wait\""
        );
    }
}
