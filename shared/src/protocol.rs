//! The wire protocol between pages and the worker.
//!
//! Pages send JSON text, not structured-clone objects, so that decoding happens in one place,
//! in Rust, with typed errors: a page that sends garbage gets told what is wrong and nothing
//! else is affected. Every request carries a `requestId` that its reply echoes, so a client can
//! send a request again after the worker restarted without confusing the answers.

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::engine::EngineError;
use crate::job::{Job, JobError, JobId, JobOutcome, JobSpec, JobState, Lane};
use crate::json::{FromJson, RawJson, ToJson};
use crate::request_options::InvalidOption;
use crate::time::Millis;

/// Largest message a page may send (10,000 jobs of about 1 KB each fit easily).
pub const MAX_MESSAGE_BYTES: usize = 32 << 20;

/// [`ProtocolError::TooLarge::what`] for a whole message.
pub const TOO_LARGE_MESSAGE: &str = "message";
/// [`ProtocolError::TooLarge::what`] for one job's body (the limit is `maxBodyBytes`).
pub const TOO_LARGE_BODY: &str = "body";

/// `bytes` for people: "2097152 bytes (2.0 MiB)". Integer arithmetic only: float formatting
/// would cost the worker's wasm several KB.
fn size(bytes: usize) -> String {
    const MIB: usize = 1 << 20;
    const KIB: usize = 1 << 10;
    let (unit, name) = if bytes >= MIB {
        (MIB, "MiB")
    } else {
        (KIB, "KiB")
    };
    let tenths = bytes.saturating_mul(10) / unit;
    if bytes < KIB {
        format!("{bytes} bytes")
    } else {
        format!("{bytes} bytes ({}.{} {name})", tenths / 10, tenths % 10)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Request {
    Enqueue {
        job: JobSpec,
    },
    EnqueueMany {
        jobs: Vec<JobSpec>,
        group_id: Option<String>,
    },
    /// A job id or a group id.
    Cancel {
        target: String,
    },
    /// Sends a failed or conflicting job again; `body` and `headers`, when given, replace the
    /// job's (see [`crate::job::RetryWith`]).
    Retry {
        id: String,
        #[serde(default)]
        body: Option<String>,
        #[serde(default)]
        headers: Option<Vec<(String, String)>>,
    },
    /// Forget a failed job without retrying it.
    Dismiss {
        id: String,
    },
    /// Headers to send with every job of a budget from now on, in place of the jobs' own of
    /// those names (see `Engine::set_credentials`).
    SetCredentials {
        budget: String,
        headers: Vec<(String, String)>,
    },
    /// A page's [`EngineConfig`](crate::config::EngineConfig), as it wrote it: read by the worker (see [`RawJson`] why the
    /// page client does not).
    Configure {
        config: RawJson,
    },
    Snapshot,
    /// Lists jobs, optionally of one group or of the given ids, to show a table after a
    /// reload or to learn the outcomes of jobs another tab enqueued. The answer carries each
    /// job's outcome: any tab may ask for it.
    Jobs {
        group_id: Option<String>,
        #[serde(default)]
        ids: Option<Vec<JobId>>,
    },
    /// Sent periodically by pages with pending work: keeps the worker alive.
    KeepAlive,
}

/// Every request's `type` on the wire, the one list of them (from the derive: each variant's
/// name): [`decode_request`] reads these and no other, and an unknown type's error lists them.
pub const REQUEST_TYPES: &[&str] = <Request as crate::json::TaggedRead>::VARIANTS;

impl Request {
    /// Its `type` on the wire (one of [`REQUEST_TYPES`]).
    pub fn kind(&self) -> &'static str {
        crate::json::TaggedWrite::variant_name(self)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    pub request_id: String,
    #[serde(flatten)]
    pub request: Request,
}

/// The answer to one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum ReplyBody {
    Enqueued {
        id: JobId,
        /// The job was folded into an earlier waiting one, whose id this is.
        coalesced: bool,
        /// Set when the job ended at once (a create and a delete that cancelled out).
        state: JobState,
    },
    EnqueuedMany {
        ids: Vec<JobId>,
        warning: Option<String>,
    },
    Cancelled {
        ids: Vec<JobId>,
    },
    Retried {
        id: JobId,
    },
    Dismissed {
        id: JobId,
    },
    CredentialsSet {
        budget: String,
    },
    Configured,
    /// A [`Status`](crate::status::Status), as the worker wrote it (see [`RawJson`]).
    Snapshot {
        status: RawJson,
    },
    Jobs {
        jobs: Vec<JobUpdate>,
    },
    Alive,
}

impl ReplyBody {
    /// Its `type` on the wire.
    pub fn kind(&self) -> &'static str {
        crate::json::TaggedWrite::variant_name(self)
    }
}

/// Everything the worker sends to pages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum WorkerMessage {
    Reply {
        request_id: String,
        body: ReplyBody,
    },
    Error {
        request_id: Option<String>,
        error: ProtocolError,
    },
    /// Job state changes since the last broadcast, batched, and the jobs the worker has
    /// forgotten since (done or cancelled ones past their retention time, dismissed ones):
    /// views drop them.
    Jobs {
        updates: Vec<JobUpdate>,
        #[serde(default)]
        removed: Vec<JobId>,
        /// Jobs a page dismissed (`dismiss`) since the last broadcast: a wait on one ends with
        /// the code `discarded` rather than as a job the worker forgot. Told as the dismissal
        /// happens, so never after the job's `removed`.
        #[serde(default)]
        discarded: Vec<JobId>,
    },
    /// A [`Status`](crate::status::Status), as the worker wrote it (see [`RawJson`]).
    Status {
        status: RawJson,
    },
}

/// What a page needs to know about a job (never the body it sent).
///
/// The broadcast to every tab carries a job's state only ([`JobUpdate::state_only`]): its
/// outcome (status, headers, body) and the server's words in its last error go to the tab
/// that enqueued it, and to any tab that asks (`jobs` with the job's id). What a server
/// answered one tab's request is not every open tab's business.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct JobUpdate {
    pub id: JobId,
    pub state: JobState,
    pub lane: Lane,
    pub key: Option<String>,
    pub group_id: Option<String>,
    pub budget: String,
    pub attempts: u32,
    pub not_before: Millis,
    pub coalesced: u32,
    pub last_error: Option<JobError>,
    pub outcome: Option<JobOutcome>,
    /// True when [`JobUpdate::state_only`] left the outcome or the server's words out.
    #[serde(default)]
    pub withheld: bool,
    /// The jobs it still waits for (see [`JobSpec::after`]); empty once it may be sent.
    #[serde(default)]
    pub waiting_for: Vec<JobId>,
}

impl JobUpdate {
    /// This update for the tabs that did not enqueue the job, if it carries anything they
    /// should not see: without the outcome, and with the last error's status but not the
    /// message taken from the server's answer.
    pub fn state_only(&self) -> Option<JobUpdate> {
        let server_words = self.last_error.as_ref().is_some_and(|e| e.status.is_some());
        if self.outcome.is_none() && !server_words {
            return None;
        }
        let mut out = self.clone();
        out.outcome = None;
        if let Some(e) = out.last_error.as_mut().filter(|e| e.status.is_some()) {
            e.message = String::from(
                "the server refused it (its answer goes to the tab that enqueued the job)",
            );
        }
        out.withheld = true;
        Some(out)
    }
}

impl From<&Job> for JobUpdate {
    fn from(job: &Job) -> Self {
        Self {
            id: job.id.clone(),
            state: job.state,
            lane: job.lane,
            key: job.key.clone(),
            group_id: job.group_id.clone(),
            budget: job.budget.clone(),
            attempts: job.attempts,
            not_before: job.not_before,
            coalesced: job.coalesced,
            last_error: job.last_error.clone(),
            outcome: job.outcome.clone(),
            withheld: false,
            waiting_for: job.after.clone(),
        }
    }
}

/// Why a request was refused. Each says what to change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(
    tag = "code",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
pub enum ProtocolError {
    /// Not JSON, or not the shape of any request.
    Malformed {
        message: String,
    },
    UnknownType {
        found: String,
    },
    /// A message, or one job's body, is larger than allowed.
    TooLarge {
        /// What is too large: [`TOO_LARGE_MESSAGE`] or [`TOO_LARGE_BODY`].
        #[serde(default)]
        what: String,
        bytes: usize,
        max_bytes: usize,
    },
    InvalidUrl {
        url: String,
        message: String,
    },
    InvalidRequest {
        message: String,
    },
    UnknownBudget {
        budget: String,
        known: Vec<String>,
    },
    NoBudgetForUrl {
        url: String,
    },
    /// The URL lies outside what the worker script allows jobs to be sent to.
    UrlNotAllowed {
        url: String,
        allowed: String,
    },
    InvalidConfig {
        message: String,
    },
    NotFound {
        id: String,
    },
    IllegalTransition {
        message: String,
    },
    /// Storage failed; the request had no effect and can be sent again.
    Storage {
        message: String,
    },
    /// The browser's storage for the site is full (`QuotaExceededError`): the request had no
    /// effect, everything queued before is kept and goes on being sent (see
    /// "When storage is full" in docs/storage-and-durability.md).
    StorageFull {
        message: String,
    },
    /// The worker cannot serve right now (restarting its queue, or handing over to a newer
    /// version); the request had no effect and can be sent again.
    Unavailable {
        message: String,
    },
    /// The worker could not start: its wasm was not found or is not this build's, its
    /// configuration (`self.SLUICE_CONFIG`) was refused, or its code stopped while starting.
    /// Sent by the worker entry to every page of the origin (no request id), so that a page's
    /// `register()` rejects with the reason rather than wait.
    CannotStart {
        message: String,
    },
    /// A running worker's code stopped after an error; its instance is fenced and the next
    /// event starts a fresh one from storage. Sent to every page (no request id).
    Crashed {
        message: String,
    },
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::Malformed { message } => write!(f, "malformed message: {message}"),
            ProtocolError::UnknownType { found } => {
                write!(f, "unknown message type '{found}'; expected one of ")?;
                for (i, kind) in REQUEST_TYPES.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{kind}")?;
                }
                Ok(())
            }
            ProtocolError::TooLarge {
                what,
                bytes,
                max_bytes,
            } if what == TOO_LARGE_BODY => write!(
                f,
                "the job's body is too large: {} where at most {} are allowed \
                 (maxBodyBytes in the configuration); send a smaller body, or raise maxBodyBytes",
                size(*bytes),
                size(*max_bytes)
            ),
            ProtocolError::TooLarge {
                bytes, max_bytes, ..
            } => write!(
                f,
                "the message is too large: {} where at most {} are allowed; send fewer jobs \
                 per enqueueMany, or smaller bodies",
                size(*bytes),
                size(*max_bytes)
            ),
            ProtocolError::InvalidUrl { url, message } => {
                write!(f, "invalid URL '{url}': {message}")
            }
            ProtocolError::InvalidRequest { message } => write!(f, "invalid request: {message}"),
            ProtocolError::UnknownBudget { budget, known } => {
                write!(f, "unknown budget '{budget}'; configured budgets: ")?;
                if known.is_empty() {
                    return f.write_str("none");
                }
                // Written name by name: `join` would be the only copy of it in the wasm.
                for (i, name) in known.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(name)?;
                }
                Ok(())
            }
            ProtocolError::NoBudgetForUrl { url } => write!(
                f,
                "no budget covers '{url}': name a budget or add a matching prefix to one"
            ),
            ProtocolError::UrlNotAllowed { url, allowed } => write!(
                f,
                "'{url}' is outside what the worker script allows jobs to go to ({allowed}); \
                 add its origin to the script's configuration (allow, or a budget's \
                 matchPrefixes)"
            ),
            ProtocolError::InvalidConfig { message } => write!(f, "{message}"),
            ProtocolError::NotFound { id } => write!(f, "no job or group '{id}'"),
            ProtocolError::IllegalTransition { message } => write!(f, "{message}"),
            ProtocolError::Storage { message } => write!(
                f,
                "storage failed, nothing was changed; try again: {message}"
            ),
            ProtocolError::Unavailable { message } => write!(
                f,
                "{message}; nothing was changed, send it again in a moment"
            ),
            ProtocolError::CannotStart { message } => {
                write!(f, "the Sluice worker cannot start: {message}")
            }
            ProtocolError::Crashed { message } => write!(
                f,
                "the Sluice worker stopped after an error and restarts from storage with the \
                 next event: {message}"
            ),
            ProtocolError::StorageFull { message } => write!(
                f,
                "the browser's storage for this site is full, so nothing of this request was \
                 saved ({message}); what was queued before is kept and goes on being sent. \
                 Enqueue again once there is room: after queued jobs have finished, after \
                 dismissing failed jobs, or after freeing space"
            ),
        }
    }
}

impl std::error::Error for ProtocolError {}

/// The engine's refusals on the wire: the one place their words are chosen (the engine's
/// `Display` comes here too).
impl From<EngineError> for ProtocolError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::InvalidUrl { url, message } => ProtocolError::InvalidUrl { url, message },
            EngineError::InvalidRequest { message }
            | EngineError::InvalidDependency { message } => {
                ProtocolError::InvalidRequest { message }
            }
            EngineError::BodyTooLarge { bytes, max_bytes } => ProtocolError::TooLarge {
                what: TOO_LARGE_BODY.into(),
                bytes,
                max_bytes,
            },
            EngineError::UnknownBudget { budget, known } => {
                ProtocolError::UnknownBudget { budget, known }
            }
            EngineError::NoBudgetForUrl { url } => ProtocolError::NoBudgetForUrl { url },
            EngineError::UrlNotAllowed { url, allowed } => {
                ProtocolError::UrlNotAllowed { url, allowed }
            }
            EngineError::InGroup {
                position,
                total,
                error,
            } => ProtocolError::InvalidRequest {
                message: format!(
                    "job {position} of {total}: {}; nothing was enqueued",
                    ProtocolError::from(*error)
                ),
            },
            EngineError::NotFound { id } => ProtocolError::NotFound { id },
            EngineError::IllegalTransition { message } => {
                ProtocolError::IllegalTransition { message }
            }
        }
    }
}

impl From<InvalidOption> for ProtocolError {
    fn from(e: InvalidOption) -> Self {
        ProtocolError::InvalidRequest { message: e.message }
    }
}

impl ProtocolError {
    /// The `code` it carries on the wire: a stable name for programs.
    pub fn code(&self) -> &'static str {
        crate::json::TaggedWrite::variant_name(self)
    }
}

/// The error for a message of at least `bytes` bytes, if that is over [`MAX_MESSAGE_BYTES`].
/// The worker asks this with a message's length in UTF-16 units (each at least one byte of
/// UTF-8) before it copies the text into its memory, and again with the exact length after.
pub fn message_too_large(bytes: usize) -> Option<ProtocolError> {
    (bytes > MAX_MESSAGE_BYTES).then(|| ProtocolError::TooLarge {
        what: TOO_LARGE_MESSAGE.into(),
        bytes,
        max_bytes: MAX_MESSAGE_BYTES,
    })
}
/// Decodes a page's message, telling apart "not a request at all" from "a request of a type
/// this worker does not know" (probably a newer page talking to an older worker).
///
/// Read with the worker's own codec ([`crate::json`]) rather than through the derived,
/// internally tagged `Request`: one parse, then the head, then the one payload its type names.
/// The rules are serde's: a payload's fields are read from the same object as `type` and
/// `requestId`, and unknown fields are ignored.
pub fn decode_request(text: &str) -> Result<Envelope, (Option<String>, ProtocolError)> {
    use crate::json::{self, Json};

    let malformed =
        |id: Option<String>, message: String| (id, ProtocolError::Malformed { message });
    if let Some(error) = message_too_large(text.len()) {
        return Err((None, error));
    }
    let value = json::parse(text).map_err(|e| malformed(None, e.0))?;
    let members = json::members(&value, "struct Head").map_err(|e| malformed(None, e.0))?;
    let head = |key: &str| json::unique(members, key).map_err(|e| malformed(None, e.0));
    let kind = head("type")?;
    let request_id = head("requestId")?.and_then(Json::as_str).map(str::to_owned);
    let Some(kind) = kind.and_then(Json::as_str) else {
        return Err(malformed(
            request_id,
            "a message needs a string field 'type'".into(),
        ));
    };
    let unknown = |request_id: Option<String>| {
        (
            request_id,
            ProtocolError::UnknownType {
                found: kind.chars().take(64).collect(),
            },
        )
    };
    if !REQUEST_TYPES.contains(&kind) {
        return Err(unknown(request_id));
    }
    let Some(request_id) = request_id else {
        return Err(malformed(
            None,
            "a message needs a string field 'requestId'".into(),
        ));
    };
    let mut r = json::Fields::from_members(members);
    let Some(request) = <Request as json::TaggedRead>::read_variant(kind, &mut r) else {
        return Err(unknown(Some(request_id)));
    };
    match r.finish() {
        Ok(()) => Ok(Envelope {
            request_id,
            request,
        }),
        Err(json::Error(message)) => Err(malformed(Some(request_id), message)),
    }
}

pub fn encode(message: &WorkerMessage) -> String {
    crate::json::to_string(message)
}

// ----- what pages write and read --------------------------------------------------------
//
// The worker reads requests with `decode_request` and writes the messages above; the page
// client does the reverse. The four tagged enums' readers and writers are derived (with
// `TaggedRead`/`TaggedWrite`); `Envelope`, whose request's fields stand beside `requestId`
// (serde's `flatten`), is written here from the request's own field writer.

impl crate::json::ToJson for Envelope {
    /// As serde writes it: `requestId`, then the request's `type` and fields (flattened).
    fn write_json(&self, out: &mut String) {
        use crate::json::{write_field, write_str, TaggedWrite};
        out.push_str("{\"requestId\":");
        write_str(out, &self.request_id);
        write_field(out, "type", self.request.variant_name());
        self.request.write_variant_fields(out);
        out.push('}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EngineConfig;
    use crate::status::Status;

    #[test]
    fn decodes_an_enqueue_with_defaults() {
        let env = decode_request(
            r#"{"requestId":"r1","type":"enqueue","job":{"url":"https://a.example/x","budget":"b"}}"#,
        )
        .unwrap();
        assert_eq!(env.request_id, "r1");
        match env.request {
            Request::Enqueue { job } => {
                assert_eq!(job.url, "https://a.example/x");
                assert_eq!(job.lane, Lane::Bulk);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    /// One of every request, each as the pages write it.
    fn one_of_each_request() -> Vec<Request> {
        let job = JobSpec {
            url: "https://a.example/x".into(),
            ..JobSpec::default()
        };
        let all = vec![
            Request::Enqueue { job: job.clone() },
            Request::EnqueueMany {
                jobs: vec![job],
                group_id: Some("g".into()),
            },
            Request::Cancel { target: "g".into() },
            Request::Retry {
                id: "j".into(),
                body: Some("{}".into()),
                headers: Some(vec![("If-Match".into(), "\"v2\"".into())]),
            },
            Request::Dismiss { id: "j".into() },
            Request::SetCredentials {
                budget: "api".into(),
                headers: vec![("Authorization".into(), "Bearer t2".into())],
            },
            Request::Configure {
                config: RawJson::of(&EngineConfig::default()),
            },
            Request::Snapshot,
            Request::Jobs {
                group_id: None,
                ids: Some(vec!["j".into()]),
            },
            Request::KeepAlive,
        ];
        // A request added to the enum fails to compile here until it is added above too.
        for r in &all {
            match r {
                Request::Enqueue { .. }
                | Request::EnqueueMany { .. }
                | Request::Cancel { .. }
                | Request::Retry { .. }
                | Request::Dismiss { .. }
                | Request::SetCredentials { .. }
                | Request::Configure { .. }
                | Request::Snapshot
                | Request::Jobs { .. }
                | Request::KeepAlive => {}
            }
        }
        all
    }

    #[test]
    fn every_request_type_is_read_as_itself_and_listed_once() {
        let all = one_of_each_request();
        let kinds: Vec<&str> = all.iter().map(Request::kind).collect();
        assert_eq!(
            kinds, REQUEST_TYPES,
            "REQUEST_TYPES and Request::kind disagree"
        );
        for request in all {
            let envelope = Envelope {
                request_id: "r".into(),
                request,
            };
            let text = crate::json::to_string(&envelope);
            let read = decode_request(&text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
            assert_eq!(read, envelope, "{text}");
        }
        let message = ProtocolError::UnknownType { found: "x".into() }.to_string();
        assert!(message.ends_with(&REQUEST_TYPES.join(", ")), "{message}");
    }

    #[test]
    fn tells_malformed_from_unknown() {
        assert!(matches!(
            decode_request("{not json"),
            Err((None, ProtocolError::Malformed { .. }))
        ));
        assert!(matches!(
            decode_request(r#"{"requestId":"r","type":"launchRockets"}"#),
            Err((Some(_), ProtocolError::UnknownType { .. }))
        ));
        assert!(matches!(
            decode_request(r#"{"requestId":"r","type":"enqueue","job":{"lane":"urgent"}}"#),
            Err((Some(_), ProtocolError::Malformed { .. }))
        ));
        assert!(matches!(
            decode_request(r#"{"type":"snapshot"}"#),
            Err((None, ProtocolError::Malformed { .. }))
        ));
    }

    #[test]
    fn refuses_oversized_messages() {
        let big = "x".repeat(MAX_MESSAGE_BYTES + 1);
        assert!(matches!(
            decode_request(&big),
            Err((None, ProtocolError::TooLarge { .. }))
        ));
    }

    #[test]
    fn every_message_is_written_as_serde_writes_it() {
        use crate::status::StateCounts;
        let update = JobUpdate {
            id: "j".into(),
            state: JobState::Failed,
            lane: Lane::Interactive,
            key: Some("k".into()),
            group_id: None,
            budget: "b".into(),
            attempts: 2,
            not_before: 3,
            coalesced: 0,
            last_error: Some(JobError {
                status: None,
                message: "m".into(),
            }),
            outcome: Some(JobOutcome::default()),
            withheld: false,
            waiting_for: Vec::new(),
        };
        let status = Status {
            now: 1,
            counts: StateCounts::default(),
            budgets: vec![],
            groups: vec![],
            lanes: vec![],
            eta_ms: Some(2),
            attempts_per_job: 1.25,
            offline: false,
            warnings: vec![],
            notes: vec![],
        };
        let bodies = vec![
            ReplyBody::Enqueued {
                id: "a".into(),
                coalesced: true,
                state: JobState::Queued,
            },
            ReplyBody::EnqueuedMany {
                ids: vec!["a".into(), "b".into()],
                warning: Some("w".into()),
            },
            ReplyBody::Cancelled { ids: vec![] },
            ReplyBody::Retried { id: "r".into() },
            ReplyBody::Dismissed { id: "d".into() },
            ReplyBody::Configured,
            ReplyBody::Snapshot {
                status: RawJson::of(&status),
            },
            ReplyBody::Jobs {
                jobs: vec![update.clone()],
            },
            ReplyBody::Alive,
        ];
        let errors = vec![
            ProtocolError::Malformed {
                message: "m".into(),
            },
            ProtocolError::UnknownType { found: "f".into() },
            ProtocolError::TooLarge {
                what: TOO_LARGE_BODY.into(),
                bytes: 1,
                max_bytes: 2,
            },
            ProtocolError::InvalidUrl {
                url: "u".into(),
                message: "m".into(),
            },
            ProtocolError::InvalidRequest {
                message: "m".into(),
            },
            ProtocolError::UnknownBudget {
                budget: "b".into(),
                known: vec!["x".into()],
            },
            ProtocolError::NoBudgetForUrl { url: "u".into() },
            ProtocolError::UrlNotAllowed {
                url: "u".into(),
                allowed: "a".into(),
            },
            ProtocolError::InvalidConfig {
                message: "m".into(),
            },
            ProtocolError::NotFound { id: "i".into() },
            ProtocolError::IllegalTransition {
                message: "m".into(),
            },
            ProtocolError::Storage {
                message: "m".into(),
            },
            ProtocolError::Unavailable {
                message: "m".into(),
            },
            ProtocolError::StorageFull {
                message: "m".into(),
            },
            ProtocolError::CannotStart {
                message: "m".into(),
            },
            ProtocolError::Crashed {
                message: "m".into(),
            },
        ];
        let mut messages: Vec<WorkerMessage> = bodies
            .into_iter()
            .map(|body| WorkerMessage::Reply {
                request_id: "r".into(),
                body,
            })
            .collect();
        for (i, error) in errors.into_iter().enumerate() {
            messages.push(WorkerMessage::Error {
                request_id: (i % 2 == 0).then(|| "r".into()),
                error,
            });
        }
        messages.push(WorkerMessage::Jobs {
            updates: vec![update.clone(), update],
            removed: vec!["gone".into()],
            discarded: vec!["gone".into()],
        });
        messages.push(WorkerMessage::Status {
            status: RawJson::of(&status),
        });
        for m in &messages {
            assert_eq!(encode(m), serde_json::to_string(m).unwrap());
            // What pages read back (the client), with the same rules as serde.
            assert_eq!(
                &crate::json::from_str::<WorkerMessage>(&encode(m)).unwrap(),
                m
            );
            crate::json::testing::reads_like_serde::<WorkerMessage>(&encode(m));
        }
    }

    #[test]
    fn pages_read_worker_messages_as_serde_does() {
        use crate::json::testing::reads_like_serde;
        let texts = [
            // Fields the reader does not know are ignored, `removed` and `withheld` may be
            // absent (older workers), and so may an `Option`.
            r#"{"type":"jobs","updates":[{"id":"j","state":"done","lane":"bulk","budget":"b","attempts":1,"notBefore":0,"coalesced":0,"new":1}]}"#,
            r#"{"type":"error","error":{"code":"too-large","bytes":1,"maxBytes":2}}"#,
            r#"{"type":"reply","requestId":"r","body":{"type":"enqueuedMany","ids":[]}}"#,
            // Refused: each with serde's words.
            r#"{"type":"launch"}"#,
            r#"{"updates":[]}"#,
            r#"{"type":5}"#,
            r#"{"type":"reply","type":"reply"}"#,
            r#""reply""#,
            r#"{"type":"reply","requestId":"r"}"#,
            r#"{"type":"reply","requestId":"r","body":{"type":"enqueued","id":"j"}}"#,
            r#"{"type":"reply","requestId":"r","body":{"type":"new"}}"#,
            r#"{"type":"error","requestId":"r","error":{"code":"quota"}}"#,
            r#"{"type":"error","requestId":"r","error":{"code":"not-found","id":5}}"#,
            r#"{"type":"status","status":{"now":1}}"#,
        ];
        for text in texts {
            reads_like_serde::<WorkerMessage>(text);
        }
    }

    #[test]
    fn every_request_is_written_as_serde_writes_it_and_the_worker_reads_it() {
        let job = JobSpec {
            url: "https://a.example/x".into(),
            headers: vec![("A".into(), "1".into())],
            ..JobSpec::default()
        };
        let requests = [
            Request::Enqueue { job: job.clone() },
            Request::EnqueueMany {
                jobs: vec![job.clone(), job],
                group_id: Some("g".into()),
            },
            Request::EnqueueMany {
                jobs: vec![],
                group_id: None,
            },
            Request::Cancel { target: "t".into() },
            Request::Retry {
                id: "i".into(),
                body: None,
                headers: None,
            },
            Request::Dismiss { id: "i".into() },
            Request::Configure {
                config: RawJson::of(&EngineConfig::default()),
            },
            Request::Snapshot,
            Request::Jobs {
                group_id: Some("g".into()),
                ids: Some(vec!["a".into()]),
            },
            Request::Jobs {
                group_id: None,
                ids: None,
            },
            Request::KeepAlive,
        ];
        for request in requests {
            let envelope = Envelope {
                request_id: "r\"1".into(),
                request,
            };
            let text = crate::json::to_string(&envelope);
            assert_eq!(text, serde_json::to_string(&envelope).unwrap());
            assert_eq!(decode_request(&text), Ok(envelope));
        }
    }

    #[test]
    fn decodes_every_request_type_as_serde_does() {
        let cases = [
            r#"{"requestId":"r","type":"enqueueMany","jobs":[{"url":"u"},{"url":"v","lane":"background"}],"groupId":"g"}"#,
            r#"{"requestId":"r","type":"enqueueMany","jobs":[]}"#,
            r#"{"requestId":"r","type":"cancel","target":"t"}"#,
            r#"{"requestId":"r","type":"retry","id":"i"}"#,
            r#"{"requestId":"r","type":"retry","id":"i","body":"{}","headers":[["If-Match","\"v2\""]]}"#,
            r#"{"requestId":"r","type":"dismiss","id":"i"}"#,
            r#"{"requestId":"r","type":"configure","config":{"retentionMs":5}}"#,
            r#"{"requestId":"r","type":"snapshot"}"#,
            r#"{"requestId":"r","type":"jobs","groupId":null}"#,
            r#"{"requestId":"r","type":"jobs"}"#,
            r#"{"requestId":"r","type":"keepAlive","extra":[1,2]}"#,
        ];
        for text in cases {
            let env = decode_request(text).unwrap();
            assert_eq!(
                env,
                serde_json::from_str::<Envelope>(text).unwrap(),
                "{text}"
            );
        }
        let refused = [
            (
                r#"{"requestId":"r","type":"cancel"}"#,
                "missing field `target`",
            ),
            (r#"{"requestId":"r","type":"retry","id":5}"#, "invalid type"),
            (
                r#"{"requestId":"r","type":"type","type":"x"}"#,
                "duplicate field `type`",
            ),
            (r#"[1]"#, "invalid type: sequence"),
        ];
        for (text, message) in refused {
            match decode_request(text) {
                Err((_, ProtocolError::Malformed { message: m })) => {
                    assert!(m.starts_with(message), "{text}: {m}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        // A configuration is carried as the page wrote it and read where it is used (the
        // worker's handler, with these words: see `RawJson`), not while the request decodes.
        let text = r#"{"requestId":"r","type":"configure","config":{"budgets":[{"name":1}]}}"#;
        match decode_request(text) {
            Ok(Envelope {
                request: Request::Configure { config },
                ..
            }) => {
                let e = config.read::<EngineConfig>().expect_err("a name of 1");
                assert!(e.0.starts_with("invalid type"), "{e}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn too_large_says_what_and_the_limit() {
        let body = ProtocolError::TooLarge {
            what: TOO_LARGE_BODY.into(),
            bytes: (2 << 20) + 25,
            max_bytes: 1 << 20,
        };
        assert_eq!(
            body.to_string(),
            "the job's body is too large: 2097177 bytes (2.0 MiB) where at most 1048576 bytes \
             (1.0 MiB) are allowed (maxBodyBytes in the configuration); send a smaller body, or \
             raise maxBodyBytes"
        );
        let message = ProtocolError::TooLarge {
            what: TOO_LARGE_MESSAGE.into(),
            bytes: 900,
            max_bytes: 1536,
        };
        assert_eq!(
            message.to_string(),
            "the message is too large: 900 bytes where at most 1536 bytes (1.5 KiB) are \
             allowed; send fewer jobs per enqueueMany, or smaller bodies"
        );
    }

    #[test]
    fn messages_round_trip() {
        let msg = WorkerMessage::Reply {
            request_id: "r".into(),
            body: ReplyBody::Cancelled {
                ids: vec!["a".into()],
            },
        };
        let text = encode(&msg);
        assert!(text.contains(r#""type":"reply""#), "{text}");
        assert_eq!(serde_json::from_str::<WorkerMessage>(&text).unwrap(), msg);
    }
}
