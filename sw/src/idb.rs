//! IndexedDB straight through web-sys, for [`crate::store`].
//!
//! Each request and transaction is awaited as a promise whose resolve and reject functions are
//! its event handlers, so no Rust closure exists per request. (The `rexie` and `idb` crates did
//! the same work with a closure and a channel per event, and with their error types, cost the
//! worker's wasm about 25 KB.)
//!
//! Continuations run as microtasks of the success event, while the transaction is still
//! active, so a caller may issue more requests after awaiting one (see `put_chunked`).

use js_sys::{Array, Function, Promise, Reflect, JSON};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{
    IdbDatabase, IdbIndexParameters, IdbKeyRange, IdbObjectStore, IdbObjectStoreParameters,
    IdbRequest, IdbTransaction, IdbTransactionMode, WorkerGlobalScope,
};

use crate::error::{describe, SwError};

/// A failed operation's error; the browser's `QuotaExceededError` is told apart, since the
/// page can act on it (see [`SwError::StorageFull`]).
fn failed(what: &str, error: &JsValue) -> SwError {
    let message = format!("failed to {what}: {}", describe(error));
    let name = Reflect::get(error, &"name".into())
        .ok()
        .and_then(|n| n.as_string());
    if name.as_deref() == Some("QuotaExceededError") {
        SwError::StorageFull(message)
    } else {
        SwError::Storage(message)
    }
}

/// A store as the schema declares it: key path and indexes (name, key path as JSON text: a
/// string or an array of strings). Indexes are neither unique nor multi-entry.
pub struct StoreSpec {
    pub name: &'static str,
    pub key_path: &'static str,
    pub indexes: &'static [(&'static str, &'static str)],
}

thread_local! {
    /// The event handlers of every request and transaction: each settles the promise whose
    /// resolve or reject function was stashed on the event's `currentTarget`. Being script
    /// functions, they end with a microtask checkpoint in every browser, so continuations run
    /// while the transaction is still active.
    static SETTLE: (Function, Function) = (handler(RESOLVE), handler(REJECT));
}

const RESOLVE: &str = "sluiceResolve";
const REJECT: &str = "sluiceReject";

fn handler(key: &'static str) -> Function {
    Closure::<dyn Fn(JsValue)>::new(move |event: JsValue| {
        let settle = Reflect::get(&event, &"currentTarget".into())
            .and_then(|target| Reflect::get(&target, &key.into()))
            .ok()
            .and_then(|f| f.dyn_into::<Function>().ok());
        if let Some(settle) = settle {
            let _ = settle.call1(&JsValue::UNDEFINED, &event);
        }
    })
    .into_js_value()
    .unchecked_into()
}

/// A promise settled by the next event `listen` routes to the shared handlers.
fn settled(target: &JsValue, listen: impl FnOnce(&Function, &Function)) -> JsFuture {
    let promise = Promise::new(&mut |resolve, reject| {
        let _ = Reflect::set(target, &RESOLVE.into(), &resolve);
        let _ = Reflect::set(target, &REJECT.into(), &reject);
    });
    SETTLE.with(|(resolve, reject)| listen(resolve, reject));
    JsFuture::from(promise)
}

/// Waits for a request: its result, or its error.
pub async fn request(req: &IdbRequest, what: &str) -> Result<JsValue, SwError> {
    let done = settled(req, |resolve, reject| {
        req.set_onsuccess(Some(resolve));
        req.set_onerror(Some(reject));
    });
    match done.await {
        Ok(_) => result(req, what),
        Err(_) => {
            let error = req.error().ok().flatten().map_or(JsValue::NULL, Into::into);
            Err(failed(what, &error))
        }
    }
}

/// Starts listening for a request's end at once (so that it cannot end unheard while other
/// requests are issued), and resolves when it succeeded.
pub fn watch(
    req: &IdbRequest,
    what: &'static str,
) -> impl std::future::Future<Output = Result<(), SwError>> {
    let done = settled(req, |resolve, reject| {
        req.set_onsuccess(Some(resolve));
        req.set_onerror(Some(reject));
    });
    let req = req.clone();
    async move {
        match done.await {
            Ok(_) => Ok(()),
            Err(_) => {
                let error = req.error().ok().flatten().map_or(JsValue::NULL, Into::into);
                Err(failed(what, &error))
            }
        }
    }
}

/// The result of a request that has completed (say, its transaction did).
pub fn result(req: &IdbRequest, what: &str) -> Result<JsValue, SwError> {
    req.result().map_err(|e| failed(what, &e))
}

/// The array a completed `getAll` gave.
pub fn array(req: &IdbRequest) -> Result<Array, SwError> {
    Ok(result(req, "get values")?.unchecked_into())
}

/// The number a completed `count` gave.
pub fn number(req: &IdbRequest) -> Result<u32, SwError> {
    Ok(result(req, "count values")?.as_f64().unwrap_or(0.0) as u32)
}

/// Waits until a transaction ended: `Ok` once it committed (every request of it has
/// completed by then, so their results can be read), an error if it was aborted or failed.
/// Listens from the call on, so call it before anything that might let the transaction end.
pub fn committed(tx: &IdbTransaction) -> impl std::future::Future<Output = Result<(), SwError>> {
    let done = settled(tx, |resolve, reject| {
        tx.set_oncomplete(Some(resolve));
        tx.set_onabort(Some(reject));
        tx.set_onerror(Some(reject));
    });
    let tx = tx.clone();
    async move { transaction_outcome(&tx, done.await) }
}

fn transaction_outcome(
    tx: &IdbTransaction,
    ended: Result<JsValue, JsValue>,
) -> Result<(), SwError> {
    match ended {
        Ok(_) => Ok(()),
        Err(event) => {
            let kind = Reflect::get(&event, &"type".into())
                .ok()
                .and_then(|t| t.as_string());
            if kind.as_deref() == Some("abort") {
                // A commit refused for want of space aborts the transaction with that reason.
                return Err(match tx.error() {
                    Some(reason) => failed("commit a transaction", &reason),
                    None => SwError::Storage("the transaction was aborted".into()),
                });
            }
            // An error event comes from the request that failed; its error says why.
            let error = Reflect::get(&event, &"target".into())
                .and_then(|target| Reflect::get(&target, &"error".into()))
                .ok()
                .filter(|e| !e.is_null() && !e.is_undefined())
                .or_else(|| tx.error().map(Into::into))
                .unwrap_or(JsValue::NULL);
            Err(failed("complete a transaction", &error))
        }
    }
}

/// Opens (creating or upgrading) a database with exactly the stores and indexes of `schema`.
/// An upgrade keeps the records of every listed store, creates missing stores, (re)builds
/// indexes that are missing or differ, and drops stores and indexes that are not listed.
pub async fn open(
    name: &str,
    version: u32,
    schema: &'static [StoreSpec],
) -> Result<IdbDatabase, SwError> {
    let scope: WorkerGlobalScope = js_sys::global().unchecked_into();
    let factory = scope
        .indexed_db()
        .map_err(|e| failed("open IndexedDB", &e))?
        .ok_or_else(|| SwError::Storage("IndexedDB is not available".into()))?;
    let req = factory
        .open_with_u32(name, version)
        .map_err(|e| failed("open the database", &e))?;
    let upgrading = req.clone();
    let on_upgrade = Closure::once(move |_event: JsValue| {
        let (Ok(db), Some(tx)) = (upgrading.result(), upgrading.transaction()) else {
            return;
        };
        if let Err(e) = upgrade(&db.unchecked_into(), &tx, schema) {
            crate::runtime::warn(&format!("upgrading the database failed: {}", describe(&e)));
            let _ = tx.abort();
        }
    });
    req.set_onupgradeneeded(Some(on_upgrade.as_ref().unchecked_ref()));
    let result = request(&req, "open the database").await;
    req.set_onupgradeneeded(None);
    drop(on_upgrade);
    let db: IdbDatabase = result?.unchecked_into();
    // A newer version of the worker wants to upgrade: let it (this instance stops on its next
    // write). The handler is `close` itself, called with the database as `this`.
    if let Ok(close) = Reflect::get(&db, &"close".into()) {
        db.set_onversionchange(close.dyn_ref::<Function>());
    }
    Ok(db)
}

fn upgrade(db: &IdbDatabase, tx: &IdbTransaction, schema: &[StoreSpec]) -> Result<(), JsValue> {
    let existing = db.object_store_names();
    for spec in schema {
        let store = if existing.contains(spec.name) {
            tx.object_store(spec.name)?
        } else {
            let params = IdbObjectStoreParameters::new();
            params.set_key_path(&spec.key_path.into());
            db.create_object_store_with_optional_parameters(spec.name, &params)?
        };
        ensure_indexes(&store, spec.indexes)?;
    }
    let listed = |name: &str| schema.iter().any(|s| s.name == name);
    for name in string_list(&db.object_store_names()) {
        if !listed(&name) {
            db.delete_object_store(&name)?;
        }
    }
    Ok(())
}

fn ensure_indexes(store: &IdbObjectStore, indexes: &[(&str, &str)]) -> Result<(), JsValue> {
    for &(name, key_path) in indexes {
        if let Ok(index) = store.index(name) {
            let same_path =
                JSON::stringify(&index.key_path()?)?.as_string().as_deref() == Some(key_path);
            if same_path && !index.unique() && !index.multi_entry() {
                continue;
            }
            store.delete_index(name)?;
        }
        let params = IdbIndexParameters::new();
        params.set_unique(false);
        params.set_multi_entry(false);
        let path = JSON::parse(key_path)?;
        match path.as_string() {
            Some(single) => {
                store.create_index_with_str_and_optional_parameters(name, &single, &params)?
            }
            None => store
                .create_index_with_str_sequence_and_optional_parameters(name, &path, &params)?,
        };
    }
    for name in string_list(&store.index_names()) {
        if !indexes.iter().any(|&(n, _)| n == name) {
            store.delete_index(&name)?;
        }
    }
    Ok(())
}

fn string_list(list: &web_sys::DomStringList) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..list.length() {
        names.extend(list.item(i));
    }
    names
}

pub fn transaction(
    db: &IdbDatabase,
    stores: &[&str],
    mode: IdbTransactionMode,
) -> Result<IdbTransaction, SwError> {
    let names = Array::new();
    for name in stores {
        names.push(&JsValue::from_str(name));
    }
    if mode == IdbTransactionMode::Readwrite {
        // "relaxed": committed once the data is handed to the operating system, without
        // waiting for the disk to confirm it. That survives the worker, the tab and the browser
        // being killed (what Sluice promises), only not the machine losing power, and it keeps
        // a commit to a few milliseconds instead of a disk flush: the worker commits for every
        // round of requests and every enqueue. Browsers without the option ignore it.
        let options = js_sys::Object::new();
        let _ = Reflect::set(
            &options,
            &JsValue::from_str("durability"),
            &JsValue::from_str("relaxed"),
        );
        let open = Reflect::get(db, &JsValue::from_str("transaction"))
            .ok()
            .and_then(|f| f.dyn_into::<Function>().ok());
        if let Some(open) = open {
            return open
                .call3(db, &names, &JsValue::from_str("readwrite"), &options)
                .and_then(|tx| tx.dyn_into::<IdbTransaction>())
                .map_err(|e| failed("start a transaction", &e));
        }
    }
    db.transaction_with_str_sequence_and_mode(&names, mode)
        .map_err(|e| failed("start a transaction", &e))
}

/// Asks a transaction to commit as soon as the requests issued so far are done, instead of
/// when the worker next finds it without requests: that wait is a round trip to the browser's
/// storage backend and back (a success event per request) before the commit even starts.
/// Nothing more may be issued on `tx` afterwards. Browsers without `commit()` (Safari before
/// 15) commit the usual way.
pub fn commit_soon(tx: &IdbTransaction) {
    let commit = Reflect::get(tx, &JsValue::from_str("commit"))
        .ok()
        .and_then(|f| f.dyn_into::<Function>().ok());
    if let Some(commit) = commit {
        // It throws only if the transaction is no longer active, and then it is committing or
        // aborting already; `committed` reports which.
        let _ = commit.call0(tx);
    }
}

pub fn store(tx: &IdbTransaction, name: &str) -> Result<IdbObjectStore, SwError> {
    tx.object_store(name)
        .map_err(|e| failed("open an object store", &e))
}

// Requests are issued here and read once their transaction committed ([`committed`],
// [`array`], [`result`]): one wait per transaction instead of one per request.

/// Issues a read of up to `limit` records of `index` whose index key lies in `range`, in
/// index order.
pub fn index_get_all(
    store: &IdbObjectStore,
    index: &str,
    range: &JsValue,
    limit: Option<u32>,
) -> Result<IdbRequest, SwError> {
    let index = store
        .index(index)
        .map_err(|e| failed("open an index", &e))?;
    match limit {
        Some(n) => index.get_all_with_key_and_limit(range, n),
        None => index.get_all_with_key(range),
    }
    .map_err(|e| failed("get values by index", &e))
}

/// Issues a count of the store's records.
pub fn count(store: &IdbObjectStore) -> Result<IdbRequest, SwError> {
    store.count().map_err(|e| failed("count values", &e))
}

/// Issues a read of every record.
pub fn get_all(store: &IdbObjectStore) -> Result<IdbRequest, SwError> {
    store.get_all().map_err(|e| failed("get all values", &e))
}

/// Issues a read of the record with this key (`undefined` when there is none).
pub fn get(store: &IdbObjectStore, key: &str) -> Result<IdbRequest, SwError> {
    store
        .get(&key.into())
        .map_err(|e| failed("get a value", &e))
}

/// Issues a read of up to `limit` records in key order, from just after the key `after` (from
/// the first if `None`).
pub fn get_all_after(
    store: &IdbObjectStore,
    after: Option<&str>,
    limit: u32,
) -> Result<IdbRequest, SwError> {
    let range = match after {
        None => JsValue::NULL,
        Some(key) => IdbKeyRange::lower_bound_with_open(&key.into(), true)
            .map_err(|e| failed("make a key range", &e))?
            .into(),
    };
    store
        .get_all_with_key_and_limit(&range, limit)
        .map_err(|e| failed("get values", &e))
}

/// Index keys `[first, x]` for every `x`: a range over one value of a compound index's first
/// key path.
pub fn first_key_range(first: &str) -> Result<JsValue, SwError> {
    let bound = |x: f64| Array::of2(&first.into(), &x.into());
    IdbKeyRange::bound(&bound(f64::NEG_INFINITY), &bound(f64::INFINITY))
        .map(Into::into)
        .map_err(|e| failed("make a key range", &e))
}

/// Issues a put of every value; returns the last request (they complete in order).
pub fn put_all(
    store: &IdbObjectStore,
    values: impl Iterator<Item = JsValue>,
) -> Result<Option<IdbRequest>, SwError> {
    let mut last = None;
    for value in values {
        last = Some(store.put(&value).map_err(|e| failed("put a value", &e))?);
    }
    Ok(last)
}

pub fn put(store: &IdbObjectStore, value: &JsValue) -> Result<IdbRequest, SwError> {
    store.put(value).map_err(|e| failed("put a value", &e))
}

pub fn delete(store: &IdbObjectStore, key: &str) -> Result<IdbRequest, SwError> {
    store
        .delete(&key.into())
        .map_err(|e| failed("delete a value", &e))
}
