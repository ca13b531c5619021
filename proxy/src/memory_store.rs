//! The budget in this process's memory: the rule of `rule` for one instance, so `sluice proxy`
//! works with nothing installed (and stands in when Redis is down under `--fail-open`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use super::rule::{Decision, Observation, RuleParams, RuleState};

/// One state per budget, by index in the proxy's configuration.
#[derive(Clone)]
pub struct MemoryStore {
    budgets: Arc<Mutex<Vec<RuleState>>>,
}

/// Wall-clock milliseconds, microsecond-exact, like the script's reading of Redis's `TIME`.
fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_micros() as f64 / 1_000.0)
}

impl MemoryStore {
    pub fn new(budgets: usize) -> Self {
        let mut states = Vec::with_capacity(budgets);
        states.resize_with(budgets, RuleState::default);
        Self {
            budgets: Arc::new(Mutex::new(states)),
        }
    }

    /// Runs `f` on budget `index`'s state; `None` for an index the configuration never had.
    fn with<T>(&self, index: usize, f: impl FnOnce(&mut RuleState) -> T) -> Option<T> {
        // A panic while holding the lock left the state as the rule last wrote it: still a
        // valid state, so keep using it.
        let mut states = self.budgets.lock().unwrap_or_else(PoisonError::into_inner);
        states.get_mut(index).map(f)
    }

    pub fn acquire(
        &self,
        index: usize,
        p: &RuleParams,
        caller: &str,
        lease_id: &str,
    ) -> Option<Decision> {
        let now = now_ms();
        self.with(index, |s| s.acquire(p, now, caller, lease_id))
    }

    pub fn release(&self, index: usize, lease_id: &str, caller: &str, counted_ms_ago: Option<f64>) {
        let now = now_ms();
        self.with(index, |s| s.release(now, lease_id, caller, counted_ms_ago));
    }

    pub fn observe(&self, index: usize, p: &RuleParams, seen: &Observation) -> Option<u64> {
        let now = now_ms();
        self.with(index, |s| s.observe(p, now, seen))
    }
}
