//! The budget in Redis, shared by every proxy instance: one atomic Lua script per decision
//! (`lua/acquire.lua`), on Redis's own clock, one per upstream signal (`lua/observe.lua`) and
//! one when a request is over (`lua/finish.lua`).
//!
//! Every call is bounded by a timeout: a Redis that is down or slow must turn into a prompt
//! "unavailable" (which the proxy answers by failing closed), never into requests piling up.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};
use tokio::sync::Mutex;

use super::rule::DEFAULT_PAUSE_MS;
use super::rule::{
    log_member, Decision, Observation, RuleParams, Share, WaitReason, LEARNED_TTL_MS,
};

/// How long after a failed connection attempt asks fail at once (the first connection only:
/// once connected, the connection manager reconnects by itself).
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// Why the shared budget could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("Redis at {url} is unreachable or did not answer within {timeout_ms} ms: {detail}")]
    Unavailable {
        url: String,
        timeout_ms: u64,
        detail: String,
    },
    #[error("Redis answered the budget script with something it never returns: {0:?}")]
    Malformed(String),
    #[error("invalid Redis URL '{url}': {detail} (expected redis://HOST:PORT)")]
    BadUrl { url: String, detail: String },
}

/// The keys of one budget. The braces are a hash tag: a Redis Cluster keeps all of one
/// budget's keys on one node, which a script that touches them together needs.
struct BudgetKeys {
    log: String,
    gcra: String,
    leases: String,
    callers: String,
    pause: String,
    learned: String,
    marker: String,
}

impl BudgetKeys {
    fn new(prefix: &str, budget: &str) -> Self {
        let key = |what: &str| format!("{prefix}{{{budget}}}:{what}");
        Self {
            log: key("log"),
            gcra: key("gcra"),
            leases: key("leases"),
            callers: key("callers"),
            pause: key("pause"),
            learned: key("learned"),
            marker: key("counting-since"),
        }
    }
}

pub struct RedisStore {
    url: String,
    client: redis::Client,
    timeout: Duration,
    /// Connected on first use and kept (it reconnects by itself); `None` until Redis answered
    /// once, so a proxy started while Redis is down comes up and fails closed meanwhile.
    connection: Mutex<Option<ConnectionManager>>,
    /// When connecting last failed: for a moment after, asks fail at once instead of each
    /// waiting its turn at the lock for another connection timeout.
    failed_at: std::sync::Mutex<Option<std::time::Instant>>,
    acquire: Script,
    observe: Script,
    finish: Script,
    keys: Vec<BudgetKeys>,
}

impl RedisStore {
    /// A store for the named budgets (by index). Connects lazily.
    pub fn new(
        url: &str,
        key_prefix: &str,
        budget_names: &[String],
        timeout: Duration,
    ) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(|e| StoreError::BadUrl {
            url: url.to_owned(),
            detail: e.to_string(),
        })?;
        Ok(Self {
            url: url.to_owned(),
            client,
            timeout,
            connection: Mutex::new(None),
            failed_at: std::sync::Mutex::new(None),
            acquire: Script::new(include_str!("lua/acquire.lua")),
            observe: Script::new(include_str!("lua/observe.lua")),
            finish: Script::new(include_str!("lua/finish.lua")),
            keys: budget_names
                .iter()
                .map(|name| BudgetKeys::new(key_prefix, name))
                .collect(),
        })
    }

    fn unavailable(&self, detail: impl ToString) -> StoreError {
        StoreError::Unavailable {
            url: self.url.clone(),
            timeout_ms: self.timeout.as_millis() as u64,
            detail: detail.to_string(),
        }
    }

    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let recently_failed =
            |at: &Option<std::time::Instant>| at.is_some_and(|t| t.elapsed() < RECONNECT_PAUSE);
        if self.failed_at.lock().is_ok_and(|at| recently_failed(&at)) {
            return Err(self.unavailable("it could not be reached a moment ago"));
        }
        let mut slot = self.connection.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        if self.failed_at.lock().is_ok_and(|at| recently_failed(&at)) {
            return Err(self.unavailable("it could not be reached a moment ago"));
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(self.timeout)
            .set_response_timeout(self.timeout)
            // Reconnecting is retried on the next call, not here: a request waits at most one
            // timeout for the store.
            .set_number_of_retries(0);
        let connected = tokio::time::timeout(
            self.timeout,
            ConnectionManager::new_with_config(self.client.clone(), config),
        )
        .await
        .map_err(|_| self.unavailable("connecting timed out"))
        .and_then(|r| r.map_err(|e| self.unavailable(e)));
        let manager = match connected {
            Ok(m) => m,
            Err(e) => {
                if let Ok(mut at) = self.failed_at.lock() {
                    *at = Some(std::time::Instant::now());
                }
                return Err(e);
            }
        };
        *slot = Some(manager.clone());
        Ok(manager)
    }

    async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.unavailable(e)),
            Err(_) => Err(self.unavailable("no answer in time")),
        }
    }

    fn keys_of(&self, index: usize) -> Result<&BudgetKeys, StoreError> {
        self.keys
            .get(index)
            .ok_or_else(|| StoreError::Malformed(format!("no budget number {index}")))
    }

    pub async fn acquire(
        &self,
        index: usize,
        p: &RuleParams,
        caller: &str,
        lease_id: &str,
    ) -> Result<Decision, StoreError> {
        let k = self.keys_of(index)?;
        let mut conn = self.connection().await?;
        let mut call = self.acquire.prepare_invoke();
        for key in [
            &k.log, &k.gcra, &k.leases, &k.callers, &k.pause, &k.learned, &k.marker,
        ] {
            call.key(key);
        }
        call.arg(caller)
            .arg(lease_id)
            .arg(p.lease_ms)
            .arg(p.concurrency)
            .arg(p.counting.script_name())
            .arg(p.margin_ms)
            .arg(p.reask_ms)
            .arg(p.windows.len());
        for w in &p.windows {
            call.arg(w.limit).arg(w.length_ms);
        }
        match self
            .bounded(call.invoke_async::<Vec<Value>>(&mut conn))
            .await
        {
            Ok(reply) => decision_from(&reply),
            Err(e) => {
                // The script may still run once Redis answers again (it was sent; a frozen
                // Redis reads it when it thaws) and grant a lease no one will use or give
                // back. The release goes out behind it on the same connection, so it undoes
                // that grant at once instead of leaving the slot taken for a whole lease.
                // (The start it logged stays counted: counting one too many is safe.)
                let mut cmd = redis::cmd("ZREM");
                cmd.arg(&k.leases).arg(log_member(lease_id, caller));
                tokio::spawn(async move {
                    let _: redis::RedisResult<i64> = cmd.query_async(&mut conn).await;
                });
                Err(e)
            }
        }
    }

    /// Gives the lease back and moves its start to when the request left (`lua/finish.lua`).
    pub async fn release(
        &self,
        index: usize,
        lease_id: &str,
        caller: &str,
        counted_ms_ago: Option<f64>,
    ) -> Result<(), StoreError> {
        let k = self.keys_of(index)?;
        let mut conn = self.connection().await?;
        let mut call = self.finish.prepare_invoke();
        call.key(&k.log)
            .key(&k.leases)
            .arg(lease_id)
            .arg(format!("{:.3}", counted_ms_ago.unwrap_or(-1.0)))
            .arg(caller);
        let _: i64 = self.bounded(call.invoke_async(&mut conn)).await?;
        Ok(())
    }

    pub async fn observe(
        &self,
        index: usize,
        p: &RuleParams,
        seen: &Observation,
    ) -> Result<u64, StoreError> {
        let k = self.keys_of(index)?;
        let mut conn = self.connection().await?;
        let mut call = self.observe.prepare_invoke();
        call.key(&k.pause).key(&k.learned);
        let signed = |v: Option<u64>| v.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX));
        call.arg(if seen.rate_limited { 1 } else { 0 })
            .arg(signed(seen.retry_after_ms))
            .arg(DEFAULT_PAUSE_MS)
            .arg(signed(seen.stated_limit))
            .arg(signed(seen.stated_window_ms))
            .arg(LEARNED_TTL_MS)
            .arg(p.windows.len());
        for w in &p.windows {
            call.arg(w.limit).arg(w.length_ms);
        }
        self.bounded(call.invoke_async(&mut conn)).await
    }
}

/// The script's reply: `{granted, wait ms, reason, share, used, callers, share window ms}`.
fn decision_from(reply: &[Value]) -> Result<Decision, StoreError> {
    let malformed = || StoreError::Malformed(format!("{reply:?}"));
    let int = |i: usize| match reply.get(i) {
        Some(Value::Int(n)) => u64::try_from(*n).map_err(|_| malformed()),
        _ => Err(malformed()),
    };
    let reason = match reply.get(2) {
        Some(Value::BulkString(b)) => std::str::from_utf8(b).ok(),
        Some(Value::SimpleString(s)) => Some(s.as_str()),
        _ => None,
    };
    let share = Share {
        share: int(3)?,
        used: int(4)?,
        callers: int(5)?,
    };
    if int(0)? == 1 {
        return Ok(Decision::Granted(share));
    }
    let reason = reason.and_then(WaitReason::parse).ok_or_else(malformed)?;
    Ok(Decision::Wait {
        wait_ms: int(1)?,
        reason,
        share,
    })
}
