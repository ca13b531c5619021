//! The one door to a budget's state, wherever it lives, and what happens when the shared store
//! fails: closed (the caller is told to come back; nothing is forwarded) by default, or open
//! onto this instance's in-memory budget with `--fail-open`.

use super::memory_store::MemoryStore;
use super::redis_store::{RedisStore, StoreError};
use super::rule::{Decision, Observation, RuleParams};

pub enum BudgetStore {
    Memory(MemoryStore),
    Redis {
        redis: Box<RedisStore>,
        /// Under `--fail-open`: decides while Redis cannot.
        fallback: Option<MemoryStore>,
    },
}

/// Which store granted a lease, so the release goes to the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    Shared,
    Local,
}

impl BudgetStore {
    pub async fn acquire(
        &self,
        index: usize,
        p: &RuleParams,
        caller: &str,
        lease_id: &str,
    ) -> Result<(Decision, Holder), StoreError> {
        let missing = || StoreError::Malformed(format!("no budget number {index}"));
        match self {
            BudgetStore::Memory(m) => m
                .acquire(index, p, caller, lease_id)
                .map(|d| (d, Holder::Local))
                .ok_or_else(missing),
            BudgetStore::Redis { redis, fallback } => {
                match redis.acquire(index, p, caller, lease_id).await {
                    Ok(d) => Ok((d, Holder::Shared)),
                    Err(e) => match fallback {
                        Some(m) => m
                            .acquire(index, p, caller, lease_id)
                            .map(|d| (d, Holder::Local))
                            .ok_or(e),
                        None => Err(e),
                    },
                }
            }
        }
    }

    /// Gives a lease back. A release that fails leaves the lease to expire: that is what the
    /// lease time is for, so the error is only reported.
    /// `counted_ms_ago`: how long before now the request is to be counted (`None`: it never
    /// left, and counts where it was decided).
    pub async fn release(
        &self,
        index: usize,
        lease_id: &str,
        caller: &str,
        holder: Holder,
        counted_ms_ago: Option<f64>,
    ) {
        match (self, holder) {
            (BudgetStore::Memory(m), _) => m.release(index, lease_id, caller, counted_ms_ago),
            (BudgetStore::Redis { fallback, .. }, Holder::Local) => {
                if let Some(m) = fallback {
                    m.release(index, lease_id, caller, counted_ms_ago);
                }
            }
            (BudgetStore::Redis { redis, .. }, Holder::Shared) => {
                if let Err(e) = redis.release(index, lease_id, caller, counted_ms_ago).await {
                    eprintln!("sluice proxy: a lease is left to expire: {e}");
                }
            }
        }
    }

    /// Tells every instance what the upstream said; returns how long the budget is paused.
    pub async fn observe(
        &self,
        index: usize,
        p: &RuleParams,
        seen: &Observation,
    ) -> Result<u64, StoreError> {
        let missing = || StoreError::Malformed(format!("no budget number {index}"));
        match self {
            BudgetStore::Memory(m) => m.observe(index, p, seen).ok_or_else(missing),
            BudgetStore::Redis { redis, fallback } => {
                // The local budget hears it too, in case it must decide soon.
                if let Some(m) = fallback {
                    m.observe(index, p, seen);
                }
                redis.observe(index, p, seen).await
            }
        }
    }
}
