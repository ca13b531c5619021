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
//! the journal entry. A chunk holds each job as it is *then* in memory, never older than any
//! per-job record written before it. On load, a journal entry that is still there fills in
//! the jobs missing from `jobs` (a per-job record is never older than the journal's copy, so
//! it wins). If a chunk fails, the caller must stop using its in-memory state, so that the
//! next start merges the journal.

//! Records cross into JS as one `JSON.parse` of a JSON array per store and batch, not one
//! structured conversion per field.

use rustc_hash::FxHashMap;

use sluice_shared::budget::BudgetState;
use sluice_shared::json::{self, FromJson, ToJson};
use sluice_shared::{Job, JobId};

use crate::config::SavedConfig;

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
        MetaOp::DeleteConfig | MetaOp::DeleteJournal(_) => return None,
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

/// Everything saved, as read at startup.
#[derive(Debug, Default)]
pub struct Loaded {
    pub jobs: Vec<Job>,
    pub budgets: Vec<BudgetState>,
    pub config: Option<SavedConfig>,
    pub schema: Option<SchemaRecord>,
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
mod web {
    use js_sys::{Array, Object, Reflect, JSON};
    use sluice_shared::{Changes, JobId};
    use wasm_bindgen::{JsCast, JsValue};
    use web_sys::{IdbDatabase, IdbObjectStore, IdbTransaction, IdbTransactionMode};

    use super::*;
    use crate::error::SwError;
    use crate::idb::{self, StoreSpec};

    /// The schema (see the module docs).
    static SCHEMA: [StoreSpec; 4] = [
        StoreSpec {
            name: JOBS,
            key_path: "id",
            indexes: &[(STATE_SEQ, "[\"state\",\"seq\"]")],
        },
        StoreSpec {
            name: BUDGETS,
            key_path: "name",
            indexes: &[],
        },
        StoreSpec {
            name: META,
            key_path: "k",
            indexes: &[],
        },
        StoreSpec {
            name: JOURNAL,
            key_path: "id",
            indexes: &[],
        },
    ];

    fn parse_array(text: &str) -> Result<Array, SwError> {
        JSON::parse(text)
            .map_err(SwError::from)?
            .dyn_into::<Array>()
            .map_err(|_| SwError::Js("JSON.parse did not give an array".into()))
    }

    fn to_text(value: &JsValue) -> Option<String> {
        JSON::stringify(value).ok().and_then(|s| s.as_string())
    }

    fn field(value: &JsValue, name: &str) -> Option<String> {
        Reflect::get(value, &JsValue::from_str(name))
            .ok()
            .and_then(|v| v.as_string())
    }

    /// The job states a start reads first, and whether that read is cut at the batch size
    /// (sending jobs are few: at most the budgets' concurrency).
    const ACTIVE_STATES: [(&str, bool); 3] =
        [("sending", false), ("queued", true), ("retry-wait", true)];

    fn decode_value(value: &JsValue) -> Result<Job, String> {
        to_text(value)
            .ok_or_else(|| "not JSON".to_string())
            .and_then(|t| decode_job(&t))
    }

    /// One job record, decoded into `loaded.jobs` (or counted as unreadable).
    fn decode_into(loaded: &mut Loaded, value: &JsValue) {
        match decode_value(value) {
            Ok(job) => loaded.jobs.push(job),
            Err(e) => loaded.note_unreadable("job", e),
        }
    }

    /// The id of a job record as [`QueueStore::load_after`] returns it.
    pub fn job_id_of(value: &JsValue) -> Option<String> {
        field(value, "id")
    }

    impl Loaded {
        /// A job record as [`QueueStore::load_after`] returns it, decoded into `jobs` (or counted
        /// as unreadable).
        pub fn add_job_value(&mut self, value: &JsValue) {
            decode_into(self, value);
        }
    }

    /// Budget states and the meta records.
    fn decode_meta(loaded: &mut Loaded, budgets: &Array, config: JsValue, schema: JsValue) {
        for v in budgets.iter() {
            match to_text(&v)
                .ok_or_else(|| "not JSON".to_string())
                .and_then(|t| decode_budget(&t))
            {
                Ok(b) => loaded.budgets.push(b),
                Err(e) => loaded.note_unreadable("budget", e),
            }
        }
        if !config.is_undefined() && !config.is_null() {
            match to_text(&config)
                .ok_or_else(|| "not JSON".to_string())
                .and_then(|t| decode_config(&t))
            {
                Ok(c) => loaded.config = Some(c),
                Err(e) => loaded.note_unreadable("saved configuration", e),
            }
        }
        if !schema.is_undefined() && !schema.is_null() {
            loaded.schema = to_text(&schema).and_then(|t| decode_schema(&t).ok());
        }
    }

    /// Aborts the transaction when issuing its requests failed half-way: nothing of it may be
    /// written then.
    fn or_abort<T>(tx: &IdbTransaction, r: Result<T, SwError>) -> Result<T, SwError> {
        if r.is_err() {
            let _ = tx.abort();
        }
        r
    }

    /// Puts every record of `array`, [`PUT_CHUNK`] at a time with two chunks in flight: the
    /// first two at once (a transaction left without requests commits), each next one when an
    /// earlier one completed (the transaction is still active then).
    async fn put_chunked(store: &IdbObjectStore, array: Array) -> Result<(), SwError> {
        let n = array.length();
        let mut in_flight = Vec::with_capacity(2);
        let mut start = 0;
        while start < n {
            if in_flight.len() == 2 {
                in_flight.remove(0).await?;
            }
            let end = start.saturating_add(PUT_CHUNK).min(n);
            if let Some(last) = idb::put_all(store, (start..end).map(|i| array.get(i)))? {
                in_flight.push(idb::watch(&last, "put a value"));
            }
            start = end;
        }
        for done in in_flight {
            done.await?;
        }
        Ok(())
    }

    /// The open database.
    pub struct QueueStore {
        db: IdbDatabase,
    }

    impl QueueStore {
        /// Opens (creating or upgrading) the database.
        pub async fn open() -> Result<Self, SwError> {
            let db = idb::open(DB_NAME, DB_VERSION, &SCHEMA).await?;
            Ok(Self { db })
        }

        /// What a start needs to send at once: the budget states, the meta records, every job
        /// that was sending and the first `first` waiting jobs of each waiting state in enqueue
        /// order, in one read-only transaction. Reading 10,000 jobs takes IndexedDB 200-600 ms
        /// here, so the rest is read afterwards ([`QueueStore::load_after`]) while the pump already
        /// sends. (Counting records is no shortcut: a count costs about as much as a read.)
        ///
        /// The waiting jobs read form a prefix of the queue in enqueue order (`seq`): every
        /// waiting job enqueued before the last one kept is kept too. A key's jobs run in
        /// enqueue order, so no job kept can have an unread job of its key ahead of it. Every
        /// job record this worker ever wrote has `seq`, so the `state_seq` index holds them
        /// all. When a journal entry waits to be merged, everything is read at once instead
        /// ([`QueueStore::load`], `complete`).
        pub async fn load_start(&self, first: u32) -> Result<Loaded, SwError> {
            let first = first.max(1);
            let tx = idb::transaction(
                &self.db,
                &[JOBS, BUDGETS, META, JOURNAL],
                IdbTransactionMode::Readonly,
            )?;
            let jobs = idb::store(&tx, JOBS)?;
            let budgets = idb::store(&tx, BUDGETS)?;
            let meta = idb::store(&tx, META)?;
            let journal = idb::store(&tx, JOURNAL)?;
            // Every request is issued now and read once the transaction ended. One record more
            // than kept tells whether a state's read was cut short.
            let journals = idb::count(&journal)?;
            let budget_values = idb::get_all(&budgets)?;
            let config = idb::get(&meta, "config")?;
            let schema = idb::get(&meta, "schema")?;
            let mut reads = Vec::with_capacity(ACTIVE_STATES.len());
            for (state, cut) in ACTIVE_STATES {
                let range = idb::first_key_range(state)?;
                let limit = cut.then_some(first.saturating_add(1));
                reads.push(idb::index_get_all(&jobs, STATE_SEQ, &range, limit)?);
            }
            idb::committed(&tx).await?;
            if idb::number(&journals)? > 0 {
                return self.load().await;
            }
            let mut states = Vec::with_capacity(reads.len());
            for read in &reads {
                states.push(idb::array(read)?);
            }

            // The prefix ends at the last record kept of a state whose read was cut short.
            let seq_of = |v: &JsValue| {
                Reflect::get(v, &"seq".into())
                    .ok()
                    .and_then(|s| s.as_f64())
                    .unwrap_or(f64::INFINITY)
            };
            let mut boundary = f64::INFINITY;
            for records in &states {
                if records.length() > first {
                    boundary = boundary.min(seq_of(&records.get(first - 1)));
                }
            }
            let mut loaded = Loaded::default();
            decode_meta(
                &mut loaded,
                &idb::array(&budget_values)?,
                idb::result(&config, "read the configuration")?,
                idb::result(&schema, "read the schema record")?,
            );
            for records in &states {
                for v in records.iter() {
                    let sending = field(&v, "state").as_deref() == Some("sending");
                    if sending || seq_of(&v) <= boundary {
                        decode_into(&mut loaded, &v);
                    }
                }
            }
            Ok(loaded)
        }

        /// Up to `limit` job records after the job id `after` (from the first when `None`),
        /// in id order, as stored; [`Loaded::add_job_value`] reads one.
        pub async fn load_after(&self, after: Option<&str>, limit: u32) -> Result<Array, SwError> {
            let tx = idb::transaction(&self.db, &[JOBS], IdbTransactionMode::Readonly)?;
            let jobs = idb::store(&tx, JOBS)?;
            let read = idb::get_all_after(&jobs, after, limit)?;
            idb::committed(&tx).await?;
            idb::array(&read)
        }

        /// Reads every job, budget state, journal entry and the meta records, in one read-only
        /// transaction; journaled jobs fill in those missing from `jobs`.
        pub async fn load(&self) -> Result<Loaded, SwError> {
            let tx = idb::transaction(
                &self.db,
                &[JOBS, BUDGETS, META, JOURNAL],
                IdbTransactionMode::Readonly,
            )?;
            let jobs = idb::store(&tx, JOBS)?;
            let budgets = idb::store(&tx, BUDGETS)?;
            let meta = idb::store(&tx, META)?;
            let journal = idb::store(&tx, JOURNAL)?;
            let job_values = idb::get_all(&jobs)?;
            let budget_values = idb::get_all(&budgets)?;
            let journal_values = idb::get_all(&journal)?;
            let config = idb::get(&meta, "config")?;
            let schema = idb::get(&meta, "schema")?;
            idb::committed(&tx).await?;
            drop((jobs, budgets, meta, journal, tx));
            let job_values = idb::array(&job_values)?;
            let journal_values = idb::array(&journal_values)?;

            let mut loaded = Loaded {
                complete: true,
                ..Loaded::default()
            };
            loaded.jobs.reserve(job_values.length() as usize);
            for v in job_values.iter() {
                decode_into(&mut loaded, &v);
            }
            let mut journals = Vec::new();
            for v in journal_values.iter() {
                let id = field(&v, "id");
                match field(&v, "jobs")
                    .ok_or_else(|| "no jobs text".to_string())
                    .and_then(|t| decode_journal(&t))
                {
                    Ok(jobs) => {
                        journals.push(jobs);
                        loaded.journals.extend(id);
                    }
                    Err(e) => loaded.note_unreadable("journal entry", e),
                }
            }
            if !journals.is_empty() {
                loaded.from_journals = merge_journals(&mut loaded.jobs, journals);
            }
            decode_meta(
                &mut loaded,
                &idb::array(&budget_values)?,
                idb::result(&config, "read the configuration")?,
                idb::result(&schema, "read the schema record")?,
            );
            Ok(loaded)
        }

        /// Resolves once every transaction created before this call has ended: a read-only
        /// transaction on `jobs` starts only after the read-write ones created before it that
        /// touch the same store. (Whether they committed is for their own callers to learn.)
        pub async fn saved(&self) -> Result<(), SwError> {
            let tx = idb::transaction(&self.db, &[JOBS], IdbTransactionMode::Readonly)?;
            let jobs = idb::store(&tx, JOBS)?;
            idb::get(&jobs, "")?;
            idb::committed(&tx).await
        }

        /// Saves one batch of engine changes (and meta writes) in ONE transaction and returns
        /// once it committed; nothing is written when it fails. `fresh`: ids of jobs in
        /// `changes` never saved before; when there are many, they are journaled, and the
        /// caller is to write them one per record ([`Journaled`], [`QueueStore::put_jobs`]).
        pub async fn save(
            &self,
            changes: &Changes,
            meta: &[MetaOp],
            fresh: &[JobId],
        ) -> Result<Option<Journaled>, SwError> {
            if changes.is_empty() && meta.is_empty() {
                return Ok(None);
            }
            // Encode before opening any transaction: nothing may be awaited while one is open,
            // and a failure here must not leave half a batch behind.
            let (journaled, direct) = split_fresh(&changes.jobs, fresh);
            let journal = if journaled.is_empty() {
                None
            } else {
                let text = encode_all(&journaled);
                let id = format!("journal-{}", journaled[0].id);
                let record = Object::new();
                Reflect::set(&record, &"id".into(), &JsValue::from_str(&id))?;
                Reflect::set(&record, &"jobs".into(), &JsValue::from_str(&text))?;
                let mut ids = Vec::with_capacity(journaled.len());
                for job in &journaled {
                    ids.push(job.id.clone());
                }
                Some((Journaled { id, jobs: ids }, record))
            };
            let direct = if direct.is_empty() {
                None
            } else {
                Some(parse_array(&encode_all(&direct))?)
            };
            let budgets_array = if changes.budgets.is_empty() {
                None
            } else {
                Some(parse_array(&encode_all(&changes.budgets))?)
            };
            let mut meta_puts = Vec::new();
            let mut delete_config = false;
            let mut delete_journals = Vec::new();
            for op in meta {
                match (op, encode_meta(op)) {
                    (_, Some(text)) => meta_puts.push(JSON::parse(&text)?),
                    (MetaOp::DeleteJournal(id), None) => delete_journals.push(id.clone()),
                    (_, None) => delete_config = true,
                }
            }

            let tx = idb::transaction(
                &self.db,
                &[JOBS, BUDGETS, META, JOURNAL],
                IdbTransactionMode::Readwrite,
            )?;
            // Every request is issued now, in this synchronous stretch; only a large batch of
            // jobs is issued in chunks as earlier ones complete (see `put_chunked`).
            let issued = (|| {
                let jobs = idb::store(&tx, JOBS)?;
                let large = match direct {
                    Some(array) if array.length() > PUT_CHUNK => Some(array),
                    Some(array) => {
                        idb::put_all(&jobs, array.iter())?;
                        None
                    }
                    None => None,
                };
                for id in &changes.removed {
                    idb::delete(&jobs, id)?;
                }
                if let Some(array) = budgets_array {
                    idb::put_all(&idb::store(&tx, BUDGETS)?, array.iter())?;
                }
                let meta_store = idb::store(&tx, META)?;
                for record in &meta_puts {
                    idb::put(&meta_store, record)?;
                }
                if delete_config {
                    idb::delete(&meta_store, "config")?;
                }
                let journal_store = idb::store(&tx, JOURNAL)?;
                if let Some((_, record)) = &journal {
                    idb::put(&journal_store, record)?;
                }
                for id in &delete_journals {
                    idb::delete(&journal_store, id)?;
                }
                Ok((jobs, large))
            })();
            let (jobs, large) = or_abort(&tx, issued)?;
            let done = idb::committed(&tx);
            match large {
                Some(array) => or_abort(&tx, put_chunked(&jobs, array).await)?,
                // Everything is issued: commit now rather than a round trip later (the reply
                // to a request waits for this commit).
                None => idb::commit_soon(&tx),
            }
            done.await?;
            Ok(journal.map(|(journaled, _)| journaled))
        }

        /// While storage is full (see [`crate::worker::Worker`]'s saves): deletes the schema
        /// record, the mark that storage holds every start (a restore that misses it counts
        /// the windows as full), and the records of jobs that ended, which a restart must not
        /// send again. Only deletes: Chromium refuses every write that adds bytes past the
        /// quota, a delete still commits.
        pub async fn delete_unrecorded(&self, ended: &[JobId]) -> Result<(), SwError> {
            let tx = idb::transaction(&self.db, &[JOBS, META], IdbTransactionMode::Readwrite)?;
            let issued = (|| {
                idb::delete(&idb::store(&tx, META)?, "schema")?;
                let jobs = idb::store(&tx, JOBS)?;
                for id in ended {
                    idb::delete(&jobs, id)?;
                }
                Ok(())
            })();
            or_abort(&tx, issued)?;
            let done = idb::committed(&tx);
            idb::commit_soon(&tx);
            done.await
        }

        /// Writes journaled jobs one per record (as they are now in memory) and, for the last
        /// chunk of a journal entry, deletes the entry, in one transaction (see "Large
        /// batches").
        pub async fn put_jobs(
            &self,
            jobs: &[&Job],
            delete_journal: Option<&str>,
        ) -> Result<(), SwError> {
            let array = if jobs.is_empty() {
                None
            } else {
                Some(parse_array(&encode_all(jobs))?)
            };
            let tx = idb::transaction(&self.db, &[JOBS, JOURNAL], IdbTransactionMode::Readwrite)?;
            let issued = (|| {
                if let Some(id) = delete_journal {
                    idb::delete(&idb::store(&tx, JOURNAL)?, id)?;
                }
                idb::store(&tx, JOBS)
            })();
            let job_store = or_abort(&tx, issued)?;
            let done = idb::committed(&tx);
            if let Some(array) = array {
                or_abort(&tx, put_chunked(&job_store, array).await)?;
            }
            done.await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_shared::{JobKind, JobState, Lane};

    fn job() -> Job {
        Job {
            id: "j1".into(),
            budget: "demo".into(),
            lane: Lane::Interactive,
            key: None,
            kind: JobKind::Create,
            method: "POST".into(),
            url: "http://h/api/contacts".into(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: Some("{}".into()),
            options: None,
            cost: Default::default(),
            idempotency_key: "k".into(),
            if_match_from_key: false,
            state: JobState::RetryWait,
            attempts: 1,
            not_before: 1_700_000_000_123,
            enqueued_at: 1_700_000_000_000,
            coalesced: 0,
            group_id: Some("g".into()),
            last_error: None,
            outcome: None,
            finished_at: None,
            started_at: Some(1_700_000_000_050),
            seq: 42,
            folded: Vec::new(),
        }
    }

    #[test]
    fn job_records_carry_the_indexed_fields_at_top_level() {
        let text = encode_all(&[job()]);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let rec = &v[0];
        assert_eq!(rec["id"], "j1");
        assert_eq!(rec["state"], "retry-wait");
        assert_eq!(rec["seq"], 42);
        assert_eq!(rec["budget"], "demo");
        assert!(rec["key"].is_null(), "no key: null, not absent");
        assert_eq!(decode_job(&rec.to_string()).unwrap(), job());
    }

    #[test]
    fn older_records_without_new_fields_still_decode() {
        let mut v: serde_json::Value = serde_json::to_value(job()).unwrap();
        let obj = v.as_object_mut().unwrap();
        for f in ["outcome", "finishedAt", "startedAt", "seq"] {
            obj.remove(f);
        }
        let j = decode_job(&v.to_string()).unwrap();
        assert_eq!(j.seq, 0);
        assert_eq!(j.started_at, None);
    }

    #[test]
    fn unreadable_records_are_counted_not_fatal() {
        let mut l = Loaded::default();
        if let Err(e) = decode_job(r#"{"id":"x"}"#) {
            l.note_unreadable("job", e);
        }
        assert_eq!(l.unreadable, 1);
        assert!(l.first_problem.unwrap().starts_with("job: missing field"));
    }

    #[test]
    fn journals_fill_in_missing_jobs_only() {
        let mut stored = job();
        stored.state = JobState::Done;
        let mut jobs = vec![stored.clone()];
        let mut other = job();
        other.id = "j2".into();
        let added = merge_journals(&mut jobs, vec![vec![job(), other.clone()], vec![other]]);
        assert_eq!(added, vec!["j2".to_string()]);
        assert_eq!(jobs.len(), 2);
        assert_eq!(
            jobs[0], stored,
            "a per-job record wins over the journal's copy"
        );
    }

    #[test]
    fn only_large_fresh_batches_are_journaled() {
        let many: Vec<Job> = (0..JOURNAL_MIN_JOBS + 1)
            .map(|i| {
                let mut j = job();
                j.id = format!("j{i}");
                j
            })
            .collect();
        let fresh: Vec<JobId> = many[1..].iter().map(|j| j.id.clone()).collect();
        let (journaled, direct) = split_fresh(&many, &fresh);
        assert_eq!(journaled.len(), JOURNAL_MIN_JOBS);
        assert_eq!(direct.len(), 1, "a job saved before is put one per record");
        assert_eq!(direct[0].id, "j0");
        let (journaled, direct) = split_fresh(&many, &fresh[..10]);
        assert!(journaled.is_empty());
        assert_eq!(direct.len(), many.len());
        let text = encode_all(&journaled_ids(&many));
        assert_eq!(decode_journal(&text).unwrap().len(), many.len());
    }

    fn journaled_ids(jobs: &[Job]) -> Vec<&Job> {
        jobs.iter().collect()
    }

    #[test]
    fn meta_records_round_trip() {
        let saved = SavedConfig {
            config: crate::config::ScriptConfig::default().engine,
            script_fingerprint: "abc".into(),
        };
        let text = encode_meta(&MetaOp::PutConfig(saved.clone())).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["k"], "config");
        assert_eq!(v["scriptFingerprint"], "abc");
        assert_eq!(decode_config(&text).unwrap(), saved);
        let text = encode_meta(&MetaOp::PutSchema).unwrap();
        assert_eq!(decode_schema(&text).unwrap(), SchemaRecord::current());
        assert!(encode_meta(&MetaOp::DeleteConfig).is_none());
    }
}
