//! IndexedDB persistence: the only place that reads or writes the database.
//!
//! # Schema (database `sluice`, version [`DB_VERSION`])
//! - `jobs`, key path `id`: one record per [`Job`], the job itself as a plain object (its
//!   serde JSON form, camelCase). Indexes: `state`; `budget_state` on `[budget, state]`; `key`
//!   (jobs without a key have `key: null` and are simply absent from that index).
//! - `budgets`, key path `name`: one [`BudgetState`] per budget (limiter history, pause,
//!   server view, retry tokens, counters).
//! - `meta`, key path `k`: `{k: "config", configJson, scriptFingerprint}` (a configuration
//!   saved by a page, as JSON text, see [`crate::config`]) and
//!   `{k: "schema", version, recordFormat}`.
//! - `journal`, key path `id`: `{id, jobs}`, a large batch of new jobs as one JSON text,
//!   present only until its jobs are written one per record (see "Large batches").
//!
//! # Upgrades keep every job
//! The schema is declared, not scripted: on a version change the builder keeps every listed
//! store *with its records*, creates missing stores (version 2 added `journal`), and
//! (re)builds indexes from the records already there. Key paths never change. Record contents
//! evolve through their serde form (written and read here with `sluice_shared::json`, which
//! follows it): fields added to `Job` or `BudgetState` carry `#[serde(default)]` (and
//! `= default` in their `json_struct!`), so older records still decode; [`RECORD_FORMAT`] in the `schema` record tells a future version
//! which shape it is reading. A record that cannot be decoded is skipped for the session and
//! left in place, never deleted.
//!
//! # Transactions
//! [`Store::save`] writes one engine [`Changes`] (puts, deletes, budgets, optional meta) in ONE
//! read-write transaction and returns only once it committed. Every request is issued in the
//! same synchronous stretch that creates the transaction, and nothing else is awaited while it
//! is open, so IndexedDB's auto-commit can never close it early. Because transactions on the
//! same stores run in creation order, callers that take changes from the engine and call
//! `save` without awaiting in between get their writes applied in the engine's order.
//!
//! # Large batches
//! IndexedDB costs about 0.14 ms per record here whatever its shape or indexes (10,000 puts
//! take 1.4 s), which alone would break the 1 s budget for a 10,000-job enqueue. So when a
//! save carries at least [`JOURNAL_MIN_JOBS`] *new* jobs (never saved before), they are written
//! as ONE `journal` record inside that transaction, which is all the caller waits for. A second
//! transaction, created in the same synchronous stretch and therefore ordered before any later
//! write, then puts them one per record and deletes the journal entry ([`Explode`]). On load,
//! a journal entry that is still there fills in the jobs missing from `jobs` (a per-job record
//! is always newer than the journal's copy of a new job, so it wins). If that second
//! transaction fails, the caller must stop using its in-memory state, so that the next start
//! merges the journal.
//!
//! Records cross into JS as one `JSON.parse` of a JSON array per store and batch, not one
//! structured conversion per field.

use std::collections::HashSet;

use sluice_shared::budget::BudgetState;
use sluice_shared::json::{self, ToJson};
use sluice_shared::{Job, JobId};

use crate::config::SavedConfig;

pub const DB_NAME: &str = "sluice";
/// Bump when stores or indexes change (see "Upgrades keep every job"). 2: `journal` added.
pub const DB_VERSION: u32 = 2;
/// Bump when the shape of stored records changes incompatibly.
pub const RECORD_FORMAT: u32 = 1;

pub const JOBS: &str = "jobs";
pub const BUDGETS: &str = "budgets";
pub const META: &str = "meta";
pub const JOURNAL: &str = "journal";

/// A save with at least this many new jobs journals them (see "Large batches").
pub const JOURNAL_MIN_JOBS: usize = 200;
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
struct ConfigRecord {
    k: String,
    config_json: String,
    script_fingerprint: String,
}

#[derive(Debug, PartialEq)]
pub struct SchemaRecord {
    pub k: String,
    pub version: u32,
    pub record_format: u32,
}

sluice_shared::json_struct!(ConfigRecord {
    k: "k",
    config_json: "configJson",
    script_fingerprint: "scriptFingerprint",
});

sluice_shared::json_struct!(SchemaRecord {
    k: "k",
    version: "version",
    record_format: "recordFormat",
});

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
    let mut known: HashSet<JobId> = jobs.iter().map(|j| j.id.clone()).collect();
    let mut added = Vec::new();
    for journal in journals {
        for job in journal {
            if known.insert(job.id.clone()) {
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
    // Owned ids: a set of `String`s is already in the wasm (`merge_journals`).
    let fresh: HashSet<JobId> = fresh.iter().cloned().collect();
    jobs.iter().partition(|j| fresh.contains(&j.id))
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
pub use web::{Explode, Store};

#[cfg(target_arch = "wasm32")]
mod web {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

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
            indexes: &[
                ("state", "\"state\""),
                ("budget_state", "[\"budget\",\"state\"]"),
                ("key", "\"key\""),
            ],
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

    type Op<'a> = Pin<Box<dyn Future<Output = Result<(), SwError>> + 'a>>;

    /// The second transaction of a journaled save (see "Large batches"), already started: await
    /// it to learn whether it committed.
    pub type Explode = Pin<Box<dyn Future<Output = Result<(), SwError>>>>;

    /// Polls every operation to completion, each as soon as it can make progress: the first
    /// poll issues every IndexedDB request at once. Returns the first error, after all ended
    /// (none is dropped half-way, so no request callback outlives its future).
    struct JoinAll<'a> {
        ops: Vec<Option<Op<'a>>>,
        first_error: Option<SwError>,
    }

    impl Future for JoinAll<'_> {
        type Output = Result<(), SwError>;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            let this = self.get_mut();
            let mut pending = false;
            for slot in this.ops.iter_mut() {
                if let Some(op) = slot {
                    match op.as_mut().poll(cx) {
                        Poll::Ready(result) => {
                            *slot = None;
                            if let Err(e) = result {
                                this.first_error.get_or_insert(e);
                            }
                        }
                        Poll::Pending => pending = true,
                    }
                }
            }
            if pending {
                Poll::Pending
            } else {
                Poll::Ready(match this.first_error.take() {
                    Some(e) => Err(e),
                    None => Ok(()),
                })
            }
        }
    }

    fn join_all(ops: Vec<Op<'_>>) -> JoinAll<'_> {
        JoinAll {
            ops: ops.into_iter().map(Some).collect(),
            first_error: None,
        }
    }

    /// Puts every record of `array`, [`PUT_CHUNK`] at a time with two chunks in flight: the
    /// first two at the first poll (a transaction left without requests commits), each next one
    /// when an earlier one completed (the transaction is still active then).
    async fn put_chunked(store: &IdbObjectStore, array: Array) -> Result<(), SwError> {
        let n = array.length();
        let chunk = |start: u32| {
            let end = start.saturating_add(PUT_CHUNK).min(n);
            let array = &array;
            let fut = idb::put_all(store, (start..end).map(move |i| array.get(i)));
            (end, Box::pin(fut))
        };
        let mut next = 0;
        let mut in_flight = Vec::with_capacity(2);
        let mut first_error = None;
        std::future::poll_fn(|cx| loop {
            while next < n && in_flight.len() < 2 && first_error.is_none() {
                let (end, fut) = chunk(next);
                next = end;
                in_flight.push(fut);
            }
            let before = in_flight.len();
            in_flight.retain_mut(|fut| match fut.as_mut().poll(cx) {
                Poll::Ready(result) => {
                    if let Err(e) = result {
                        first_error.get_or_insert(e);
                    }
                    false
                }
                Poll::Pending => true,
            });
            if in_flight.is_empty() && (next >= n || first_error.is_some()) {
                // Every issued request has ended (an error aborts the rest).
                return Poll::Ready(first_error.take().map_or(Ok(()), Err));
            }
            if in_flight.len() == before {
                return Poll::Pending;
            }
        })
        .await
    }

    fn committed(tx: IdbTransaction) -> Op<'static> {
        Box::pin(async move { idb::committed(&tx).await })
    }

    /// The open database.
    pub struct Store {
        db: IdbDatabase,
    }

    impl Store {
        /// Opens (creating or upgrading) the database.
        pub async fn open() -> Result<Self, SwError> {
            let db = idb::open(DB_NAME, DB_VERSION, &SCHEMA).await?;
            Ok(Self { db })
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
            let job_values = idb::get_all(&jobs).await?;
            let budget_values = idb::get_all(&budgets).await?;
            let journal_values = idb::get_all(&journal).await?;
            let config = Some(idb::get(&meta, "config").await?);
            let schema = Some(idb::get(&meta, "schema").await?);
            // A read-only transaction needs no commit: it ends by itself once idle.
            drop((jobs, budgets, meta, journal, tx));

            let mut loaded = Loaded::default();
            loaded.jobs.reserve(job_values.length() as usize);
            for v in job_values.iter() {
                match to_text(&v)
                    .ok_or_else(|| "not JSON".to_string())
                    .and_then(|t| decode_job(&t))
                {
                    Ok(job) => loaded.jobs.push(job),
                    Err(e) => loaded.note_unreadable("job", e),
                }
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
            loaded.from_journals = merge_journals(&mut loaded.jobs, journals);
            for v in budget_values.iter() {
                match to_text(&v)
                    .ok_or_else(|| "not JSON".to_string())
                    .and_then(|t| decode_budget(&t))
                {
                    Ok(b) => loaded.budgets.push(b),
                    Err(e) => loaded.note_unreadable("budget", e),
                }
            }
            if let Some(v) = config.filter(|v| !v.is_undefined() && !v.is_null()) {
                match to_text(&v)
                    .ok_or_else(|| "not JSON".to_string())
                    .and_then(|t| decode_config(&t))
                {
                    Ok(c) => loaded.config = Some(c),
                    Err(e) => loaded.note_unreadable("saved configuration", e),
                }
            }
            if let Some(v) = schema.filter(|v| !v.is_undefined() && !v.is_null()) {
                loaded.schema = to_text(&v).and_then(|t| decode_schema(&t).ok());
            }
            Ok(loaded)
        }

        /// Resolves once every transaction created before this call has ended: a read-only
        /// transaction on `jobs` starts only after the read-write ones created before it that
        /// touch the same store. (Whether they committed is for their own callers to learn.)
        pub async fn saved(&self) -> Result<(), SwError> {
            let tx = idb::transaction(&self.db, &[JOBS], IdbTransactionMode::Readonly)?;
            let jobs = idb::store(&tx, JOBS)?;
            idb::get(&jobs, "").await.map(drop)
        }

        /// Saves one batch of engine changes (and meta writes) in ONE transaction and returns
        /// once it committed; nothing is written when it fails. `fresh`: ids of jobs in
        /// `changes` never saved before; when there are many, they are journaled and the
        /// returned [`Explode`] is the transaction writing them one per record.
        pub async fn save(
            &self,
            changes: &Changes,
            meta: &[MetaOp],
            fresh: &[JobId],
        ) -> Result<Option<Explode>, SwError> {
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
                Some((id, record, parse_array(&text)?))
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

            // Both transactions are created now, in this order, before anything else can be.
            let tx = idb::transaction(
                &self.db,
                &[JOBS, BUDGETS, META, JOURNAL],
                IdbTransactionMode::Readwrite,
            )?;
            let explode = match journal.as_ref() {
                None => None,
                Some((id, _, array)) => Some(self.explode(id.clone(), array.clone())?),
            };
            let jobs = idb::store(&tx, JOBS)?;
            let budgets = idb::store(&tx, BUDGETS)?;
            let meta_store = idb::store(&tx, META)?;
            let journal_store = idb::store(&tx, JOURNAL)?;

            let mut ops: Vec<Op<'_>> = vec![committed(tx)];
            if let Some(array) = direct {
                ops.push(Box::pin(put_chunked(&jobs, array)));
            }
            for id in &changes.removed {
                let jobs = &jobs;
                ops.push(Box::pin(idb::delete(jobs, id)));
            }
            if let Some(array) = budgets_array {
                let budgets = &budgets;
                ops.push(Box::pin(async move {
                    idb::put_all(budgets, array.iter()).await
                }));
            }
            for record in meta_puts {
                let store = &meta_store;
                ops.push(Box::pin(async move { idb::put(store, &record).await }));
            }
            if delete_config {
                ops.push(Box::pin(idb::delete(&meta_store, "config")));
            }
            if let Some((_, record, _)) = journal {
                let store = &journal_store;
                ops.push(Box::pin(async move { idb::put(store, &record).await }));
            }
            for id in delete_journals {
                let store = &journal_store;
                ops.push(Box::pin(async move { idb::delete(store, &id).await }));
            }
            join_all(ops).await?;
            Ok(explode)
        }

        /// Creates the transaction that writes journaled jobs one per record and deletes the
        /// journal entry, and issues its requests at once (polled here with a no-op waker; the
        /// caller's executor drives it from then on).
        fn explode(&self, id: String, array: Array) -> Result<Explode, SwError> {
            let tx = idb::transaction(&self.db, &[JOBS, JOURNAL], IdbTransactionMode::Readwrite)?;
            let jobs = idb::store(&tx, JOBS)?;
            let journal = idb::store(&tx, JOURNAL)?;
            let mut fut: Explode = Box::pin(async move {
                let ops: Vec<Op<'_>> = vec![
                    committed(tx),
                    Box::pin(put_chunked(&jobs, array)),
                    Box::pin(idb::delete(&journal, &id)),
                ];
                join_all(ops).await
            });
            match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                // Never resolves within one poll (IndexedDB answers asynchronously); a finished
                // future must not be polled again, so hand over its result.
                Poll::Ready(result) => Ok(Box::pin(std::future::ready(result))),
                Poll::Pending => Ok(fut),
            }
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
            idempotency_key: "k".into(),
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
        assert_eq!(rec["budget"], "demo");
        assert!(rec["key"].is_null(), "no key: absent from the key index");
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
