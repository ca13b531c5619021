//! What the demo API records of every arrival (`Arrival`, its `Outcome`) and the figures read
//! from them (`Stats`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What happened to one arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Carried out (including reads and echoes).
    Applied,
    /// An Idempotency-Key repeat: answered from the store, not applied again.
    Replayed,
    /// 429 from the limiter.
    RateLimited,
    /// Injected 500/503.
    Fault,
    /// Answered by a scripted status.
    Scripted,
    /// Refused as a client error (bad JSON, unknown id, key reuse): 4xx, not applied.
    Refused,
}

/// One request that reached the `/api/` handler.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Arrival {
    /// 1-based, in arrival order, restarting at reset.
    pub seq: u64,
    /// Arrival time since server start (or the last reset).
    pub at_ms: f64,
    /// The same, exact: window computations use this.
    pub at_ns: u64,
    /// When the request reached the handler, before its arrival hold (ms, as `at_ms`): the
    /// client's start plus the loopback.
    #[serde(default)]
    pub received_ms: f64,
    /// When its answer is due to leave (ms, as `at_ms`): the arrival plus the answer's delay.
    #[serde(default)]
    pub answer_ms: f64,
    pub method: String,
    pub path: String,
    pub idempotency_key: Option<String>,
    /// The status sent (or to be sent, for a held-back response).
    pub status: u16,
    /// Whether the request changed or read state (false for 429, faults, replays, refusals).
    pub applied: bool,
    /// Whether the limiter counted it.
    pub admitted: bool,
    pub outcome: Outcome,
    /// Whether the response was held back (applied-then-hang).
    pub hung: bool,
    pub scripted: bool,
    /// For a batch carried out, how many items it answered, whatever their status; `None` for
    /// any other arrival, and for a batch refused whole, rate-limited, failed or replayed (none
    /// of its items was carried out).
    #[serde(default)]
    pub batch_items: Option<u32>,
    /// Of those items, how many were applied (0 outside a batch). A batch is `applied` when at
    /// least one was.
    #[serde(default)]
    pub items_applied: u32,
}

/// Totals over the recorded arrivals.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    pub total: usize,
    pub admitted: usize,
    pub applied: usize,
    /// Responses with status 429, scripted ones included.
    pub rate_limited: usize,
    pub faults: usize,
    pub hangs: usize,
    pub replays: usize,
    pub scripted: usize,
    pub preflights: u64,
    /// Requests answered 401 for want of the configured bearer token (not counted in `total`).
    pub refused_tokens: u64,
    /// Bytes of `/api/large` bodies handed to connections.
    pub large_bytes_sent: u64,
    /// Most admitted arrivals in any window of `window_ms`.
    pub max_in_window: usize,
    pub limit: u32,
    pub window_ms: u64,
    pub first_at_ms: Option<f64>,
    pub last_at_ms: Option<f64>,
    pub status_counts: BTreeMap<u16, usize>,
    /// Batches carried out (arrivals with `batch_items`).
    pub batches: usize,
    /// Items those batches answered, and of them the items applied: against `total`, the
    /// requests sent versus the changes they carried.
    pub batch_items: usize,
    pub batch_items_applied: usize,
    /// PATCHes of contacts applied, sent alone or as a batch's items (not replays, refusals or
    /// failed items): the changes saved, against `total` requests.
    pub patches_applied: usize,
    /// Contacts in the store now.
    pub contacts: usize,
    /// Applied creates beyond the first for the same Idempotency-Key (should be 0).
    pub duplicate_creates: usize,
    /// Applied creates that carried no Idempotency-Key.
    pub creates_without_key: usize,
}
