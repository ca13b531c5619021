//! The IndexedDB side of the store: opening the database with its schema, reading the saved
//! queue, and the transactions that save it ([`QueueStore`]). Only in the wasm build.

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
        let counts = idb::get(&meta, COUNTS_KEY)?;
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
        // Counts that do not read (a later version's) are only not used: the status then
        // waits for the whole queue, as before they were kept.
        loaded.counts = to_text(&idb::result(&counts, "read the saved counts")?)
            .and_then(|t| decode_counts(&t).ok());
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
        let mut meta_deletes = Vec::new();
        let mut delete_journals = Vec::new();
        for op in meta {
            match op {
                MetaOp::DeleteConfig => meta_deletes.push("config"),
                MetaOp::DeleteCounts => meta_deletes.push(COUNTS_KEY),
                MetaOp::DeleteJournal(id) => delete_journals.push(id.clone()),
                MetaOp::PutConfig(_) | MetaOp::PutSchema | MetaOp::PutCounts(_) => {
                    if let Some(text) = encode_meta(op) {
                        meta_puts.push(JSON::parse(&text)?);
                    }
                }
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
            for key in &meta_deletes {
                idb::delete(&meta_store, key)?;
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
            let meta = idb::store(&tx, META)?;
            idb::delete(&meta, "schema")?;
            // The records of the jobs that ended go below, and the saves that would keep the
            // counts with the jobs do not land while storage is full.
            idb::delete(&meta, COUNTS_KEY)?;
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
