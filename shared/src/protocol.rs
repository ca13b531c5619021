//! The wire protocol between pages and the worker.
//!
//! Pages send JSON text, not structured-clone objects, so that decoding happens in one place,
//! in Rust, with typed errors: a page that sends garbage gets told what is wrong and nothing
//! else is affected. Every request carries a `requestId` that its reply echoes, so a client can
//! send a request again after the worker restarted without confusing the answers.

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::config::EngineConfig;
use crate::job::{Job, JobError, JobId, JobOutcome, JobSpec, JobState, Lane};
use crate::status::Status;
use crate::time::Millis;

/// Largest message a page may send (10,000 jobs of about 1 KB each fit easily).
pub const MAX_MESSAGE_BYTES: usize = 32 << 20;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    Retry {
        id: String,
    },
    /// Forget a failed job without retrying it.
    Dismiss {
        id: String,
    },
    Configure {
        config: EngineConfig,
    },
    Snapshot,
    /// Lists jobs, optionally of one group, to show a table after a reload.
    Jobs {
        group_id: Option<String>,
    },
    /// Sent periodically by pages with pending work: keeps the worker alive.
    KeepAlive,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    pub request_id: String,
    #[serde(flatten)]
    pub request: Request,
}

/// The answer to one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    Configured,
    Snapshot {
        status: Status,
    },
    Jobs {
        jobs: Vec<JobUpdate>,
    },
    Alive,
}

/// Everything the worker sends to pages.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// Job state changes since the last broadcast, batched.
    Jobs {
        updates: Vec<JobUpdate>,
    },
    Status {
        status: Status,
    },
}

/// What a page needs to know about a job (never the body it sent).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
        }
    }
}

/// Why a request was refused. Each says what to change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    TooLarge {
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
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::Malformed { message } => write!(f, "malformed message: {message}"),
            ProtocolError::UnknownType { found } => write!(
                f,
                "unknown message type '{found}'; expected one of enqueue, enqueueMany, cancel, retry, dismiss, configure, snapshot, jobs, keepAlive"
            ),
            ProtocolError::TooLarge { bytes, max_bytes } => write!(
                f,
                "message of {bytes} bytes is larger than the {max_bytes} bytes allowed; send fewer jobs at once or smaller bodies"
            ),
            ProtocolError::InvalidUrl { url, message } => write!(f, "invalid URL '{url}': {message}"),
            ProtocolError::InvalidRequest { message } => write!(f, "invalid request: {message}"),
            ProtocolError::UnknownBudget { budget, known } => write!(
                f,
                "unknown budget '{budget}'; configured budgets: {}",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            ),
            ProtocolError::NoBudgetForUrl { url } => write!(
                f,
                "no budget covers '{url}': name a budget or add a matching prefix to one"
            ),
            ProtocolError::InvalidConfig { message } => write!(f, "{message}"),
            ProtocolError::NotFound { id } => write!(f, "no job or group '{id}'"),
            ProtocolError::IllegalTransition { message } => write!(f, "{message}"),
            ProtocolError::Storage { message } => write!(
                f,
                "storage failed, nothing was changed; try again: {message}"
            ),
        }
    }
}

impl std::error::Error for ProtocolError {}

/// Decodes a page's message, telling apart "not a request at all" from "a request of a type
/// this worker does not know" (probably a newer page talking to an older worker).
///
/// Decoded by hand in two passes over the text (the head, then the one payload its type names)
/// rather than through the derived, internally tagged `Request`: serde buffers every field of
/// an internally tagged enum in a generic tree first, which costs the worker's wasm tens of
/// kilobytes, and every payload type here is also read from IndexedDB through the same
/// `from_str` path, so no second decoder is compiled for it.
pub fn decode_request(text: &str) -> Result<Envelope, (Option<String>, ProtocolError)> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Head {
        #[serde(rename = "type")]
        kind: Option<serde_json::Value>,
        request_id: Option<serde_json::Value>,
    }
    #[derive(Deserialize)]
    struct EnqueuePayload {
        job: JobSpec,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct EnqueueManyPayload {
        jobs: Vec<JobSpec>,
        #[serde(default)]
        group_id: Option<String>,
    }
    #[derive(Deserialize)]
    struct TargetPayload {
        target: String,
    }
    #[derive(Deserialize)]
    struct IdPayload {
        id: String,
    }
    #[derive(Deserialize)]
    struct ConfigurePayload {
        config: EngineConfig,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct JobsPayload {
        #[serde(default)]
        group_id: Option<String>,
    }

    let malformed =
        |id: Option<String>, message: String| (id, ProtocolError::Malformed { message });
    if text.len() > MAX_MESSAGE_BYTES {
        return Err((
            None,
            ProtocolError::TooLarge {
                bytes: text.len(),
                max_bytes: MAX_MESSAGE_BYTES,
            },
        ));
    }
    let head: Head = serde_json::from_str(text).map_err(|e| malformed(None, e.to_string()))?;
    let request_id = head
        .request_id
        .as_ref()
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    let Some(kind) = head.kind.as_ref().and_then(|v| v.as_str()) else {
        return Err(malformed(
            request_id,
            "a message needs a string field 'type'".into(),
        ));
    };
    let known = [
        "enqueue",
        "enqueueMany",
        "cancel",
        "retry",
        "dismiss",
        "configure",
        "snapshot",
        "jobs",
        "keepAlive",
    ];
    if !known.contains(&kind) {
        return Err((
            request_id,
            ProtocolError::UnknownType {
                found: kind.chars().take(64).collect(),
            },
        ));
    }
    let Some(request_id) = request_id else {
        return Err(malformed(
            None,
            "a message needs a string field 'requestId'".into(),
        ));
    };
    fn payload<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
    let request = match kind {
        "enqueue" => payload::<EnqueuePayload>(text).map(|p| Request::Enqueue { job: p.job }),
        "enqueueMany" => payload::<EnqueueManyPayload>(text).map(|p| Request::EnqueueMany {
            jobs: p.jobs,
            group_id: p.group_id,
        }),
        "cancel" => payload::<TargetPayload>(text).map(|p| Request::Cancel { target: p.target }),
        "retry" => payload::<IdPayload>(text).map(|p| Request::Retry { id: p.id }),
        "dismiss" => payload::<IdPayload>(text).map(|p| Request::Dismiss { id: p.id }),
        "configure" => {
            payload::<ConfigurePayload>(text).map(|p| Request::Configure { config: p.config })
        }
        "jobs" => payload::<JobsPayload>(text).map(|p| Request::Jobs {
            group_id: p.group_id,
        }),
        "snapshot" => Ok(Request::Snapshot),
        _ => Ok(Request::KeepAlive),
    };
    match request {
        Ok(request) => Ok(Envelope {
            request_id,
            request,
        }),
        Err(message) => Err(malformed(Some(request_id), message)),
    }
}

pub fn encode(message: &WorkerMessage) -> String {
    // Serializing these plain data types cannot fail (no maps with non-string keys).
    serde_json::to_string(message).unwrap_or_else(|e| {
        format!(
            r#"{{"type":"error","requestId":null,"error":{{"code":"malformed","message":"{e}"}}}}"#
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
