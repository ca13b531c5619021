//! IndexedDB persistence: the only place that reads or writes the database.
//!
//! # Schema (database `sluice`, version [`DB_VERSION`])
//! - `jobs`, key path `id`: one record per [`Job`], the job itself as a plain object (its
//!   serde JSON form, camelCase). One index, `state_seq` on `[state, seq]` (a state's jobs in
//!   enqueue order, for reading the head of a large queue first: see [`QueueStore::load_start`]).
//!   Versions before 4 also kept `state`, `budget_state` and `key`, which no read used and
//!   every put paid for; the upgrade to 4 drops them and keeps every record.
//! - `budgets`, key path `name`: one [`BudgetState`] per budget (limiter history, pause,
//!   server view, retry tokens, counters).
//! - `meta`, key path `k`: `{k: "config", configJson, scriptFingerprint}` (a configuration
//!   saved by a page, as JSON text, see [`crate::config`]) and
//!   `{k: "schema", version, recordFormat}`. The schema record is also the mark that the saved
//!   budgets hold every start: it is deleted when storage is full and starts go out unrecorded
//!   ([`QueueStore::delete_unrecorded`]), and written again by the first save that lands after.
//!   `{k: "counts", counts}`: the status counts of the saved jobs ([`QueueCounts`]), written by
//!   each save that changes them, in the same transaction as the jobs, and deleted with the
//!   schema record; a start that reads only the head of a large queue answers the status from
//!   them (see `Worker::start`).
//! - `journal`, key path `id`: `{id, jobs}`, a large batch of new jobs as one JSON text,
//!   present only until its jobs are written one per record (see "Large batches").
//!
//! # Upgrades keep every job
//! The schema is declared, not scripted: on a version change the builder keeps every listed
//! store *with its records*, creates missing stores (version 2 added `journal`), and
//! (re)builds indexes from the records already there. Key paths never change. Record contents
//! evolve through their serde form (written and read here with `sluice_shared::json`, which
//! follows it): fields added to `Job` or `BudgetState` carry `#[serde(default)]` (which both
//! derives read), so older records still decode; [`RECORD_FORMAT`] in the `schema` record tells a future version
//! which shape it is reading. A record that cannot be decoded is skipped for the session and
//! left in place, never deleted.
//!
//! # Transactions
//! [`QueueStore::save`] writes one engine [`Changes`] (puts, deletes, budgets, optional meta) in ONE
//! read-write transaction and returns only once it committed. Every request is issued in the
//! same synchronous stretch that creates the transaction, and nothing else is awaited while it
//! is open, so IndexedDB's auto-commit can never close it early. Because transactions on the
//! same stores run in creation order, callers that take changes from the engine and call
//! `save` without awaiting in between get their writes applied in the engine's order.
//!
//! # Large batches
//! IndexedDB costs about 0.14 ms per record here whatever its shape or indexes (10,000 puts
//! take 1.4 s, more on a busy machine), which alone would break the 1 s budget for a 10,000-job
//! enqueue. So when a save carries at least [`JOURNAL_MIN_JOBS`] *new* jobs (never saved
//! before), they are written as ONE `journal` record inside that transaction, which is all the
//! caller waits for ([`Journaled`]). The caller then writes them one per record in chunks of
//! [`JOURNAL_CHUNK`], each its own short transaction ([`QueueStore::put_jobs`]), so that its other
//! saves (a fetch's outcome, a new start) do not wait for all of them; the last chunk deletes
//! the journal entry. While requests are out, the pump's saves write them instead, eight jobs a
//! save with the save's own outcomes counted first, from the back of the entry (its front goes
//! out first); a job a landed save already wrote, with its outcome, is not written again
//! (`worker/journal.rs`). A chunk holds each job as it is *then* in memory, never older than any
//! per-job record written before it. On load, a journal entry that is still there fills in
//! the jobs missing from `jobs` (a per-job record is never older than the journal's copy, so
//! it wins). If a chunk fails, the caller must stop using its in-memory state, so that the
//! next start merges the journal.

//! Records cross into JS as one `JSON.parse` of a JSON array per store and batch, not one
//! structured conversion per field.

use rustc_hash::FxHashMap;

use sluice_shared::budget::BudgetState;
use sluice_shared::json::{self, FromJson, ToJson};
use sluice_shared::{Job, JobId, QueueCounts};

use crate::config::SavedConfig;

/// The database (`sluice-worker.js` opens it by this name too, to have it ready sooner:
/// `warmDatabase`).
pub const DB_NAME: &str = "sluice";
/// Bump when stores or indexes change (see "Upgrades keep every job"). 2: `journal` added.
/// 3: the `state_seq` index. 4: the unread `state`, `budget_state` and `key` indexes dropped.
pub const DB_VERSION: u32 = 4;
/// Bump when the shape of stored records changes incompatibly.
pub const RECORD_FORMAT: u32 = 1;

pub const JOBS: &str = "jobs";
pub const BUDGETS: &str = "budgets";
pub const META: &str = "meta";
pub const JOURNAL: &str = "journal";
/// The jobs index on `[state, seq]`: a state's jobs in enqueue order.
pub const STATE_SEQ: &str = "state_seq";

/// A save with at least this many new jobs journals them (see "Large batches").
pub const JOURNAL_MIN_JOBS: usize = 200;
/// Journaled jobs are then written one per record this many per transaction.
pub const JOURNAL_CHUNK: usize = 250;

/// A journal entry a save wrote: its id and the jobs it holds, still to be written one per
/// record (see "Large batches").
#[derive(Debug)]
pub struct Journaled {
    pub id: String,
    pub jobs: Vec<JobId>,
}
/// Puts issued at once. IndexedDB clones each value when `put` is called, so 10,000 at once
/// block the worker for most of a second; later chunks are issued as earlier ones complete.
pub const PUT_CHUNK: u32 = 500;

/// A write to the `meta` store, made in the same transaction as the changes it goes with.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaOp {
    PutConfig(SavedConfig),
    DeleteConfig,
    PutSchema,
    /// The status counts of the jobs as this save leaves them (see the schema above).
    PutCounts(QueueCounts),
    /// Saved counts that no longer match the jobs, while the counts of the jobs are not known
    /// (a start that read part of the queue without usable counts).
    DeleteCounts,
    /// A journal entry whose jobs this same save writes one per record.
    DeleteJournal(String),
}

/// The saved configuration's record. The configuration is kept as JSON text, read back through
/// [`crate::config::engine_config_from_json`] (one decoder for every configuration source).
///
/// The two records here are only ever written and read by `json`: their `#[serde]`
/// attributes are read by its derives alone.
#[derive(ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
struct ConfigRecord {
    k: String,
    config_json: String,
    script_fingerprint: String,
}

#[derive(Debug, PartialEq, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct SchemaRecord {
    pub k: String,
    pub version: u32,
    pub record_format: u32,
}

impl SchemaRecord {
    pub fn current() -> Self {
        Self {
            k: "schema".into(),
            version: DB_VERSION,
            record_format: RECORD_FORMAT,
        }
    }
}

/// JSON array text of the records to put, for one `JSON.parse`.
pub fn encode_all<T: ToJson>(records: &[T]) -> String {
    json::to_string(records)
}

pub fn encode_meta(op: &MetaOp) -> Option<String> {
    Some(match op {
        MetaOp::PutConfig(saved) => json::to_string(&ConfigRecord {
            k: "config".into(),
            config_json: json::to_string(&saved.config),
            script_fingerprint: saved.script_fingerprint.clone(),
        }),
        MetaOp::PutSchema => json::to_string(&SchemaRecord::current()),
        MetaOp::PutCounts(counts) => json::to_string(&CountsRecord {
            k: COUNTS_KEY.into(),
            counts: counts.clone(),
        }),
        MetaOp::DeleteConfig | MetaOp::DeleteCounts | MetaOp::DeleteJournal(_) => return None,
    })
}

pub fn decode_job(text: &str) -> Result<Job, String> {
    json::from_str(text).map_err(|e| e.0)
}

pub fn decode_budget(text: &str) -> Result<BudgetState, String> {
    json::from_str(text).map_err(|e| e.0)
}

pub fn decode_config(text: &str) -> Result<SavedConfig, String> {
    let record: ConfigRecord = json::from_str(text).map_err(|e| e.0)?;
    Ok(SavedConfig {
        config: crate::config::engine_config_from_json(&record.config_json)?,
        script_fingerprint: record.script_fingerprint,
    })
}

pub fn decode_journal(text: &str) -> Result<Vec<Job>, String> {
    json::from_str(text).map_err(|e| e.0)
}

/// Adds the jobs of journal entries that are missing from the per-job records (a per-job
/// record of a journaled job is never older than the journal's copy). Returns the ids added.
pub fn merge_journals(jobs: &mut Vec<Job>, journals: Vec<Vec<Job>>) -> Vec<JobId> {
    // Ids with their positions, not a set of ids: the worker's sets all take the shape of the
    // batcher's index, as each distinct key and value type is a copy of the hash table's code
    // in the wasm.
    let mut known: FxHashMap<JobId, usize> = FxHashMap::default();
    for (i, job) in jobs.iter().enumerate() {
        known.insert(job.id.clone(), i);
    }
    let mut added = Vec::new();
    for journal in journals {
        for job in journal {
            if !known.contains_key(&job.id) {
                known.insert(job.id.clone(), jobs.len());
                added.push(job.id.clone());
                jobs.push(job);
            }
        }
    }
    added
}

/// Splits a save's jobs into those to journal and those to put one per record.
pub fn split_fresh<'a>(jobs: &'a [Job], fresh: &[JobId]) -> (Vec<&'a Job>, Vec<&'a Job>) {
    if fresh.len() < JOURNAL_MIN_JOBS {
        return (Vec::new(), jobs.iter().collect());
    }
    // Owned ids with their positions: the map type of `merge_journals`.
    let mut fresh_at: FxHashMap<JobId, usize> = FxHashMap::default();
    for (i, id) in fresh.iter().enumerate() {
        fresh_at.insert(id.clone(), i);
    }
    let (mut journaled, mut direct) = (Vec::new(), Vec::new());
    for job in jobs {
        if fresh_at.contains_key(&job.id) {
            journaled.push(job);
        } else {
            direct.push(job);
        }
    }
    (journaled, direct)
}

pub fn decode_schema(text: &str) -> Result<SchemaRecord, String> {
    json::from_str(text).map_err(|e| e.0)
}

/// The `meta` key of the saved status counts.
pub const COUNTS_KEY: &str = "counts";

#[derive(ToJson, FromJson)]
struct CountsRecord {
    k: String,
    counts: QueueCounts,
}

pub fn decode_counts(text: &str) -> Result<QueueCounts, String> {
    json::from_str::<CountsRecord>(text)
        .map(|r| r.counts)
        .map_err(|e| e.0)
}

/// Everything saved, as read at startup.
#[derive(Debug, Default)]
pub struct Loaded {
    pub jobs: Vec<Job>,
    pub budgets: Vec<BudgetState>,
    pub config: Option<SavedConfig>,
    pub schema: Option<SchemaRecord>,
    /// The status counts the last save kept, read with the head of a large queue (not by a
    /// whole read, which counts the jobs themselves).
    pub counts: Option<QueueCounts>,
    /// Journal entries read (to delete once their jobs are saved one per record), and the ids
    /// of the jobs that only they held.
    pub journals: Vec<String>,
    pub from_journals: Vec<JobId>,
    /// Records that could not be decoded (left in storage untouched), with the first reason.
    pub unreadable: usize,
    pub first_problem: Option<String>,
    /// Whether `jobs` holds every saved job; if not, it holds every job that was sending and
    /// the waiting ones up to some point in enqueue order (see [`QueueStore::load_start`]).
    pub complete: bool,
}

impl Loaded {
    pub fn note_unreadable(&mut self, what: &str, e: String) {
        self.unreadable += 1;
        if self.first_problem.is_none() {
            self.first_problem = Some(format!("{what}: {e}"));
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub use web::{job_id_of, QueueStore};

#[cfg(target_arch = "wasm32")]
mod web;

#[cfg(test)]
mod tests;
