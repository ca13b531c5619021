//! The proxy's admission rule, as data and as one pure function over a budget's state.
//!
//! Every request asks once per try: may it start now, and if not, how long must it wait?
//! The answer, in this order:
//!
//! 1. **Fresh store.** A store that has never counted (a new or restarted, empty Redis, a new
//!    process) cannot know what was sent in the last window: the budget counts as used to the
//!    full at that instant, so nothing starts for one (longest, stretched) window. That is what
//!    keeps a restarted Redis from opening a burst above the limit.
//! 2. **Pause.** An upstream 429 (or 503 with `Retry-After`) pauses the budget for everyone.
//! 3. **Concurrency.** At most `concurrency` leases at once; a lease expires `lease_ms` after
//!    it was taken, so an instance that dies mid-request holds its slots no longer than that.
//! 4. **Windows**: an exact sliding log (low limits) or GCRA without burst tolerance (high
//!    limits: one instant of state per window).
//!    The log holds, for every start, the latest instant it can have reached the upstream, and
//!    enforces each window at its own length against those: a start is allowed once the
//!    `limit`-th latest of them is a whole window old. A start still under way is logged at
//!    its decision plus `margin_ms`, the spread of arrival delays its instance allows for
//!    (`shared`'s `RoundTrips::margin`, or `--margin-ms` until the instance has measured its
//!    round trips). Once its request is answered it moves to the latest instant it can have
//!    reached the upstream (its answer less the fastest trip measured, `shared`'s
//!    `RoundTrips::arrived_by`), or to its end when it failed, when that is later. This is the
//!    worker's own frame (`Limiter::reached_server_by`): the margin is paid only by the starts
//!    it covers, never again by an answered start already placed at its latest arrival.
//!    A start still unanswered past that latest instant (a slow upstream, a request queued in
//!    the instance's connection pool) may reach the upstream at any moment until its answer:
//!    while its lease lives it counts as arriving now, in every window.
//!    GCRA keeps no starts to place, so it spaces starts over each window stretched by the
//!    margin. Both guarantee at most `limit` arrivals in any half-open window of the length.
//! 5. **Fair share** over the shortest window: every caller that asked within it is active and
//!    is owed `floor(limit / active)` (at least 1) starts per window. A caller past its share
//!    may borrow only what leaves every other active caller's unused share free. Under the log
//!    each caller's usage and what is free are counted exactly from the log (its entries name
//!    their caller); under GCRA, which keeps no log, usage is estimated from two fixed buckets
//!    per caller (the current one and the one before, weighted by its overlap with the sliding
//!    window). The limit itself is enforced exactly by 4.
//!
//! `proxy/src/lua/acquire.lua` carries out the same rule inside Redis (atomically, on Redis's
//! clock) for many instances; [`RuleState::acquire`] carries it out in memory for one. The
//! test `memory_rule_matches_the_lua_script` runs both on the same sequence of asks.

use std::collections::{HashMap, VecDeque};

use sluice_shared::config::{Algorithm, ConfigError, Window};
use sluice_shared::time::DurationMs;

/// How a budget's windows count starts in the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counting {
    /// Exact sliding log: every start in the longest window is kept.
    Log,
    /// GCRA without burst tolerance: one theoretical arrival time per window.
    Gcra,
}

impl Counting {
    /// The budget's algorithm as the proxy can enforce it across instances.
    pub fn from_algorithm(budget: &str, algorithm: Algorithm) -> Result<Self, ConfigError> {
        match algorithm {
            Algorithm::SlidingLog => Ok(Counting::Log),
            Algorithm::Gcra => Ok(Counting::Gcra),
            other => Err(ConfigError(format!(
                "budget '{budget}': the proxy enforces sliding-log (low limits) or gcra (high \
                 limits) across instances, not {other:?}; choose one of those two"
            ))),
        }
    }

    pub fn script_name(self) -> &'static str {
        match self {
            Counting::Log => "log",
            Counting::Gcra => "gcra",
        }
    }
}

/// One budget's parameters, as every instance passes them to the store with each ask.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleParams {
    pub windows: Vec<Window>,
    pub concurrency: u32,
    pub counting: Counting,
    /// How far the asking instance's requests may trail their decision on the way to the
    /// upstream (step 4).
    pub margin_ms: DurationMs,
    pub lease_ms: DurationMs,
    /// How soon a request turned away by a full concurrency cap asks again: a lease may be
    /// released any moment, on any instance, and nothing tells this one.
    pub reask_ms: DurationMs,
}

/// A caller's share, for the `RateLimit` / `RateLimit-Policy` headers of its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// Starts per shortest window owed to this caller.
    pub share: u64,
    /// Its starts in the current window (estimated), this one included when granted.
    pub used: u64,
    /// Callers active in the window, this one included.
    pub callers: u64,
}

/// Why a request must wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitReason {
    Paused,
    Concurrency,
    Limit,
    FairShare,
}

impl WaitReason {
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "paused" => WaitReason::Paused,
            "concurrency" => WaitReason::Concurrency,
            "limit" => WaitReason::Limit,
            "fair-share" => WaitReason::FairShare,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Paused => "paused",
            WaitReason::Concurrency => "concurrency",
            WaitReason::Limit => "limit",
            WaitReason::FairShare => "fair-share",
        }
    }
}

/// The answer to one ask.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decision {
    /// Start now; the lease named in the ask is held until released or expired.
    Granted(Share),
    /// Ask again after `wait_ms`.
    Wait {
        wait_ms: u64,
        reason: WaitReason,
        share: Share,
    },
}

/// What an upstream answer said about the shared budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observation {
    pub rate_limited: bool,
    pub retry_after_ms: Option<u64>,
    /// A limit the upstream stated, and the window it named, if any.
    pub stated_limit: Option<u64>,
    pub stated_window_ms: Option<u64>,
}

/// Below this, "free" and "owed" count as equal. Both are sums of the same estimates in
/// different orders (a caller's usage enters each with opposite signs), so exact ties are
/// common and float rounding would break them differently here and in the script.
pub const TIE: f64 = 1e-6;

/// How long a pause lasts after a 429 that names no time.
pub const DEFAULT_PAUSE_MS: u64 = 1_000;

/// How long a limit the upstream stated stays in force after it last said so.
pub const LEARNED_TTL_MS: u64 = 60_000;

/// A start's name in the log: its lease and its caller, so that each caller's starts in the
/// window can be counted exactly. Lease ids have no spaces; the caller is all after the first.
pub fn log_member(lease_id: &str, caller: &str) -> String {
    format!("{lease_id} {caller}")
}

#[derive(Clone, Copy, Debug)]
struct CallerUsage {
    bucket_start: f64,
    current: u64,
    previous: u64,
    last_ask: f64,
}

/// One budget's whole state in memory (one instance). Instants are milliseconds as `f64`,
/// microsecond-exact like the script's.
#[derive(Debug, Default)]
pub struct RuleState {
    /// Set by the first ask: see step 1 of the rule.
    counted_since: Option<f64>,
    paused_until: f64,
    /// Start instants, oldest first, each with its [`log_member`] (sliding log).
    log: VecDeque<(f64, String)>,
    /// Theoretical arrival time per window (GCRA).
    tat: Vec<f64>,
    leases: HashMap<String, f64>,
    callers: HashMap<String, CallerUsage>,
    /// A lower limit per window index, and until when it holds.
    learned: HashMap<usize, u64>,
    learned_until: f64,
}

impl RuleState {
    /// The rule of the module docs for one ask at `now`.
    pub fn acquire(&mut self, p: &RuleParams, now: f64, caller: &str, lease_id: &str) -> Decision {
        if self.learned_until <= now {
            self.learned.clear();
        }
        let margin = p.margin_ms as f64;
        // The log carries the margin in its entries (step 4); GCRA's windows carry it instead.
        let stretch = match p.counting {
            Counting::Log => 0.0,
            Counting::Gcra => margin,
        };
        let mut limits = Vec::with_capacity(p.windows.len());
        let mut lengths = Vec::with_capacity(p.windows.len());
        let (mut longest, mut fair) = (0.0_f64, 0usize);
        for (i, w) in p.windows.iter().enumerate() {
            let limit = self
                .learned
                .get(&i)
                .map_or(u64::from(w.limit), |&l| l.min(u64::from(w.limit)));
            let length = w.length_ms as f64 + stretch;
            limits.push(limit);
            lengths.push(length);
            longest = longest.max(length);
            if length < lengths[fair] {
                fair = i;
            }
        }
        if self.counted_since.is_none() {
            // Whatever was sent before may still arrive as late as the margin allows.
            let unstretched = p.windows.iter().map(|w| w.length_ms).max().unwrap_or(0);
            self.counted_since = Some(now);
            self.paused_until = self.paused_until.max(now + unstretched as f64 + margin);
        }

        let (fair_len, fair_limit) = (lengths[fair], limits[fair]);
        self.callers.retain(|_, u| u.last_ask > now - fair_len);
        let mut total = 0.0;
        let mut others = Vec::new();
        let mut mine = CallerUsage {
            bucket_start: now,
            current: 0,
            previous: 0,
            last_ask: now,
        };
        // Under the log, each caller's starts in the window are counted exactly from it.
        // A caller turned away for its share may ask again when anything this step reads
        // changes: a start leaving the window or another caller going inactive (under GCRA,
        // which has no log: after one interval).
        let mut exact: HashMap<&str, u64> = HashMap::new();
        let mut next_change: Option<f64> = None;
        if p.counting == Counting::Log {
            for (at, member) in &self.log {
                if *at > now - fair_len {
                    if let Some((_, who)) = member.split_once(' ') {
                        *exact.entry(who).or_default() += 1;
                    }
                    if next_change.is_none() {
                        next_change = Some(*at + fair_len);
                    }
                }
            }
        }
        let mut mine_used = exact.get(caller).map_or(0.0, |&n| n as f64);
        let mut active = 0u64;
        for (name, u) in self.callers.iter_mut() {
            if now >= u.bucket_start + fair_len {
                let k = ((now - u.bucket_start) / fair_len).floor();
                u.previous = if k == 1.0 { u.current } else { 0 };
                u.current = 0;
                u.bucket_start += k * fair_len;
            }
            let used = match p.counting {
                Counting::Log => exact.get(name.as_str()).map_or(0.0, |&n| n as f64),
                Counting::Gcra => {
                    u.previous as f64 * (1.0 - (now - u.bucket_start) / fair_len) + u.current as f64
                }
            };
            if name == caller {
                mine = *u;
                mine_used = used;
            } else {
                others.push(used);
                if p.counting == Counting::Log {
                    let inactive_at = u.last_ask + fair_len;
                    if next_change.is_none_or(|n| inactive_at < n) {
                        next_change = Some(inactive_at);
                    }
                }
            }
            active += 1;
            total += used;
        }
        if !self.callers.contains_key(caller) {
            active += 1;
        }
        let share_count = (fair_limit / active).max(1);
        mine.last_ask = now;
        let share = |used: f64| Share {
            share: share_count,
            used: used.floor() as u64,
            callers: active,
        };
        let deny = |state: &mut Self, wait: f64, reason: WaitReason| {
            state.callers.insert(caller.to_owned(), mine);
            Decision::Wait {
                wait_ms: wait.ceil().max(1.0) as u64,
                reason,
                share: share(mine_used),
            }
        };

        if self.paused_until > now {
            let wait = self.paused_until - now;
            return deny(self, wait, WaitReason::Paused);
        }
        self.leases.retain(|_, &mut expiry| expiry > now);
        if self.leases.len() as u64 >= u64::from(p.concurrency) {
            return deny(self, p.reask_ms as f64, WaitReason::Concurrency);
        }
        let mut wait = 0.0_f64;
        // What the fair-share step may hand out: exact from the log, estimated under GCRA.
        let mut counted_in_fair_window = total;
        if self.tat.len() != p.windows.len() {
            self.tat.resize(p.windows.len(), 0.0);
        }
        // Requests still unanswered past the latest arrival their decision logged may reach
        // the upstream any moment: until answered they count as arriving now (step 4).
        let overdue: Vec<f64> = match p.counting {
            Counting::Gcra => Vec::new(),
            // The log is in order of instants: only its part up to now can be overdue.
            Counting::Log => self
                .log
                .iter()
                .take_while(|(at, _)| *at <= now)
                .filter(|(_, member)| {
                    member
                        .split_once(' ')
                        .is_some_and(|(id, _)| self.leases.contains_key(id))
                })
                .map(|(at, _)| *at)
                .collect(),
        };
        for i in 0..p.windows.len() {
            match p.counting {
                Counting::Gcra => {
                    if self.tat[i] > now {
                        wait = wait.max(self.tat[i] - now);
                    }
                }
                Counting::Log => {
                    let from = now - lengths[i];
                    let logged = self.log.iter().rev().take_while(|(s, _)| *s > from).count();
                    // Overdue starts the window no longer holds by their logged instant.
                    let held = overdue.iter().filter(|&&at| at <= from).count();
                    let inside = (logged + held) as u64;
                    if i == fair {
                        counted_in_fair_window = inside as f64;
                    }
                    if inside >= limits[i] {
                        // The window frees when its (inside - limit)-th oldest start leaves it:
                        // in order, those logged before now, the held ones (at now, until
                        // answered: ask again soon), then those logged at or after now.
                        let nth = (inside - limits[i]) as usize;
                        let first = self.log.len() - logged;
                        let before_now = self
                            .log
                            .iter()
                            .skip(first)
                            .take_while(|(s, _)| *s < now)
                            .count();
                        let frees_in = if nth < before_now {
                            self.log[first + nth].0 + lengths[i] - now
                        } else if nth < before_now + held {
                            p.reask_ms as f64
                        } else {
                            self.log[first + nth - held].0 + lengths[i] - now
                        };
                        wait = wait.max(frees_in);
                    }
                }
            }
        }
        if wait > 0.0 {
            return deny(self, wait, WaitReason::Limit);
        }
        if mine_used + 1.0 > share_count as f64 {
            let owed: f64 = others
                .iter()
                .filter(|&&u| u < share_count as f64)
                .map(|&u| share_count as f64 - u)
                .sum();
            if fair_limit as f64 - counted_in_fair_window - 1.0 < owed - TIE {
                let again = next_change.map_or(fair_len / fair_limit as f64, |n| n - now);
                return deny(self, again, WaitReason::FairShare);
            }
        }

        match p.counting {
            Counting::Gcra => {
                for i in 0..p.windows.len() {
                    self.tat[i] = self.tat[i].max(now) + lengths[i] / limits[i] as f64;
                }
            }
            Counting::Log => {
                // Where it may arrive at the latest while its trip stays within the margin.
                // Margins change as trips are measured, so a later decision may sit earlier.
                let latest = now + margin;
                let at = self.log.partition_point(|(s, _)| *s <= latest);
                self.log.insert(at, (latest, log_member(lease_id, caller)));
                // Kept for twice the longest window (instances log starts with margins of
                // their own), and as long as a lease lives: an unanswered start counts.
                let kept_from = now - (2.0 * longest).max(p.lease_ms as f64);
                while self.log.front().is_some_and(|(s, _)| *s < kept_from) {
                    self.log.pop_front();
                }
            }
        }
        self.leases
            .insert(lease_id.to_owned(), now + p.lease_ms as f64);
        mine.current += 1;
        self.callers.insert(caller.to_owned(), mine);
        Decision::Granted(share(mine_used + 1.0))
    }

    /// The request under `lease_id` is over: its lease is given back, and its start is
    /// counted `counted_ms_ago` before `now` (see `lua/finish.lua`) if that is later than the
    /// decision. `None`: it never left, and counts where it was decided.
    pub fn release(&mut self, now: f64, lease_id: &str, caller: &str, counted_ms_ago: Option<f64>) {
        self.leases.remove(lease_id);
        let Some(back) = counted_ms_ago else { return };
        let left = now - back;
        let member = log_member(lease_id, caller);
        let Some(pos) = self.log.iter().position(|(_, m)| *m == member) else {
            return;
        };
        if left > self.log[pos].0 {
            if let Some((_, id)) = self.log.remove(pos) {
                let at = self.log.partition_point(|(s, _)| *s <= left);
                self.log.insert(at, (left, id));
            }
        }
    }

    /// Applies what the upstream said (see `lua/observe.lua`); returns how long the budget
    /// stays paused from `now`.
    pub fn observe(&mut self, p: &RuleParams, now: f64, seen: &Observation) -> u64 {
        if let Some(stated) = seen.stated_limit.filter(|&l| l > 0) {
            let shortest = (0..p.windows.len()).min_by_key(|&i| p.windows[i].length_ms);
            let pick = seen
                .stated_window_ms
                .and_then(|w| p.windows.iter().position(|x| x.length_ms == w))
                .or(shortest);
            if let Some(i) = pick {
                if stated < u64::from(p.windows[i].limit) {
                    self.learned.insert(i, stated);
                    self.learned_until = now + LEARNED_TTL_MS as f64;
                }
            }
        }
        if seen.rate_limited {
            let wait = seen.retry_after_ms.unwrap_or(DEFAULT_PAUSE_MS) as f64;
            self.paused_until = self.paused_until.max(now + wait);
        }
        (self.paused_until - now).max(0.0).ceil() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn params(limit: u32, length_ms: u64, counting: Counting, concurrency: u32) -> RuleParams {
        RuleParams {
            windows: vec![Window { limit, length_ms }],
            concurrency,
            counting,
            margin_ms: 0,
            lease_ms: 10_000,
            reask_ms: 20,
        }
    }

    /// A state whose fresh-store wait (step 1) has passed by `length_ms` of the window.
    fn warmed(p: &RuleParams) -> RuleState {
        let mut s = RuleState::default();
        s.acquire(p, 0.0, "warm-up", "warm-up");
        s
    }

    /// Runs asks by `callers` in turn from `start`, each at the instant the last answer named,
    /// releasing every lease at once; returns the grants' instants and callers.
    fn run(
        p: &RuleParams,
        state: &mut RuleState,
        callers: &[&str],
        asks: usize,
        step_ms: f64,
    ) -> Vec<(f64, String)> {
        let mut now = 0.0;
        let mut grants = Vec::new();
        for n in 0..asks {
            let caller = callers[n % callers.len()];
            let id = format!("l{n}");
            if let Decision::Granted(_) = state.acquire(p, now, caller, &id) {
                state.release(now, &id, caller, None);
                grants.push((now, caller.to_owned()));
            }
            now += step_ms;
        }
        grants
    }

    fn most_in_any_window(grants: &[(f64, String)], length: f64) -> usize {
        let times: Vec<f64> = grants.iter().map(|g| g.0).collect();
        let mut most = 0;
        for (i, &t) in times.iter().enumerate() {
            // The half-open window (t - length, t] ending at each grant.
            let inside = times[..=i].iter().filter(|&&s| s > t - length).count();
            most = most.max(inside);
        }
        most
    }

    #[test]
    fn a_fresh_budget_waits_one_window_before_its_first_start() {
        let p = params(5, 1_000, Counting::Log, 4);
        let mut s = RuleState::default();
        match s.acquire(&p, 0.0, "a", "1") {
            Decision::Wait {
                wait_ms, reason, ..
            } => assert_eq!((wait_ms, reason), (1_000, WaitReason::Paused)),
            other => panic!("expected a wait, got {other:?}"),
        }
        assert!(matches!(
            s.acquire(&p, 1_000.0, "a", "2"),
            Decision::Granted(_)
        ));
    }

    #[test]
    fn concurrency_counts_leases_until_released_or_expired() {
        let p = params(100, 1_000, Counting::Log, 2);
        let mut s = warmed(&p);
        let t = 1_000.0;
        assert!(matches!(s.acquire(&p, t, "a", "1"), Decision::Granted(_)));
        assert!(matches!(s.acquire(&p, t, "a", "2"), Decision::Granted(_)));
        assert!(matches!(
            s.acquire(&p, t, "a", "3"),
            Decision::Wait {
                reason: WaitReason::Concurrency,
                ..
            }
        ));
        s.release(t, "1", "a", None);
        assert!(matches!(s.acquire(&p, t, "a", "3"), Decision::Granted(_)));
        // Lease 2 was never released (its instance died): it expires after lease_ms.
        assert!(matches!(
            s.acquire(&p, t + 9_999.0, "a", "4"),
            Decision::Wait {
                reason: WaitReason::Concurrency,
                ..
            }
        ));
        s.release(t, "3", "a", None);
        assert!(matches!(
            s.acquire(&p, t + 10_001.0, "a", "4"),
            Decision::Granted(_)
        ));
    }

    #[test]
    fn an_upstream_429_pauses_and_a_stated_limit_retunes() {
        let p = params(10, 1_000, Counting::Log, 4);
        let mut s = warmed(&p);
        let t = 1_000.0;
        assert!(matches!(s.acquire(&p, t, "a", "1"), Decision::Granted(_)));
        let seen = Observation {
            rate_limited: true,
            retry_after_ms: Some(2_000),
            stated_limit: Some(3),
            stated_window_ms: Some(1_000),
        };
        assert_eq!(s.observe(&p, t, &seen), 2_000);
        s.release(t, "1", "a", Some(0.0));
        assert!(matches!(
            s.acquire(&p, t + 1_999.0, "a", "2"),
            Decision::Wait {
                reason: WaitReason::Paused,
                ..
            }
        ));
        let mut now = t + 2_000.0;
        let mut granted = 0;
        while now < t + 2_900.0 {
            if let Decision::Granted(_) = s.acquire(&p, now, "a", &format!("x{now}")) {
                granted += 1;
            }
            now += 10.0;
        }
        // The retuned limit: 3 per second.
        assert_eq!(granted, 3);
    }

    #[test]
    fn an_answered_start_counts_at_its_latest_arrival_and_pays_no_margin_again() {
        let mut p = params(1, 1_000, Counting::Log, 4);
        p.margin_ms = 30;
        let mut s = warmed(&p);
        // Under way: it may arrive up to the margin after its decision.
        let t = 2_100.0;
        assert!(matches!(s.acquire(&p, t, "a", "1"), Decision::Granted(_)));
        assert!(matches!(
            s.acquire(&p, t + 1_029.0, "a", "2"),
            Decision::Wait {
                reason: WaitReason::Limit,
                ..
            }
        ));
        // Answered: it reached the upstream by 20 ms after its decision, inside the margin, so
        // it keeps the margin's place.
        s.release(t + 100.0, "1", "a", Some(80.0));
        assert!(matches!(
            s.acquire(&p, t + 1_030.0, "a", "2"),
            Decision::Granted(_)
        ));
        // One that may have arrived 60 ms after its decision counts there, and the window
        // after it is one window, not one window and a margin.
        let t = t + 1_030.0;
        s.release(t + 100.0, "2", "a", Some(40.0));
        assert!(matches!(
            s.acquire(&p, t + 1_059.0, "a", "3"),
            Decision::Wait {
                reason: WaitReason::Limit,
                ..
            }
        ));
        assert!(matches!(
            s.acquire(&p, t + 1_060.0, "a", "3"),
            Decision::Granted(_)
        ));
    }

    #[test]
    fn a_request_slow_to_reach_the_upstream_counts_until_answered() {
        let p = params(2, 1_000, Counting::Log, 4);
        let mut s = warmed(&p);
        let t = 1_000.0;
        assert!(matches!(
            s.acquire(&p, t, "a", "slow"),
            Decision::Granted(_)
        ));
        assert!(matches!(
            s.acquire(&p, t, "a", "quick"),
            Decision::Granted(_)
        ));
        s.release(t + 30.0, "quick", "a", Some(30.0));
        // A window later "slow" is still on its way: it may arrive any moment, so only one
        // more start fits beside it, and the next is told to ask again soon, not in a window.
        let t = t + 1_001.0;
        assert!(matches!(s.acquire(&p, t, "a", "c"), Decision::Granted(_)));
        match s.acquire(&p, t, "a", "d") {
            Decision::Wait {
                wait_ms, reason, ..
            } => assert_eq!((wait_ms, reason), (p.reask_ms, WaitReason::Limit)),
            other => panic!("expected a wait, got {other:?}"),
        }
        // Answered: it reached the upstream by 1,150, so the window holds it and "c" until
        // "c" leaves it.
        s.release(t + 199.0, "slow", "a", Some(50.0));
        s.release(t + 199.0, "c", "a", Some(199.0));
        match s.acquire(&p, t + 199.0, "a", "d") {
            Decision::Wait {
                wait_ms, reason, ..
            } => assert_eq!((wait_ms, reason), (801, WaitReason::Limit)),
            other => panic!("expected a wait, got {other:?}"),
        }
        assert!(matches!(
            s.acquire(&p, t + 1_000.0, "a", "d"),
            Decision::Granted(_)
        ));
    }

    #[test]
    fn a_busy_caller_cannot_starve_a_light_one() {
        let p = params(10, 1_000, Counting::Log, 100);
        let mut s = warmed(&p);
        let mut now = 1_000.0;
        let (mut busy, mut light, mut light_asks) = (0, 0, 0);
        let mut n = 0;
        while now < 11_000.0 {
            n += 1;
            // The busy caller asks every 5 ms, the light one every 250 ms: 4 a second, inside
            // its share of 5 (the estimate of its usage may be off by a fraction of a start).
            if let Decision::Granted(_) = s.acquire(&p, now, "busy", &format!("b{n}")) {
                busy += 1;
            }
            if (now as u64).is_multiple_of(250) {
                light_asks += 1;
                if let Decision::Granted(_) = s.acquire(&p, now, "light", &format!("l{n}")) {
                    light += 1;
                }
            }
            s.leases.clear();
            now += 5.0;
        }
        // Every ask of the light caller is served.
        assert_eq!(light, light_asks, "busy {busy}");
        // And the busy one takes the rest, less the one start a second kept free for the light
        // caller's unused share (what the guarantee costs while it asks below its share).
        assert!(busy + light >= 90, "busy {busy}, light {light}");
    }

    proptest! {
        /// Whatever the callers, the asks' spacing and the algorithm, no half-open window of
        /// the configured length ever holds more than the limit.
        #[test]
        fn never_above_the_limit(
            limit in 1u32..30,
            length_ms in 50u64..2_000,
            gcra in any::<bool>(),
            callers in 1usize..6,
            step in 0.1f64..40.0,
        ) {
            let counting = if gcra { Counting::Gcra } else { Counting::Log };
            let p = params(limit, length_ms, counting, 1_000);
            let mut s = RuleState::default();
            let names: Vec<String> = (0..callers).map(|c| format!("c{c}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let grants = run(&p, &mut s, &refs, 3_000, step);
            prop_assert!(most_in_any_window(&grants, length_ms as f64) <= limit as usize);
        }

        /// Requests that take any time to reach the upstream (up to three windows, longer
        /// than any margin) and are answered a trip later: the arrivals, not the decisions,
        /// never exceed the limit in any window.
        #[test]
        fn slow_requests_never_put_arrivals_above_the_limit(
            limit in 1u32..12,
            length_ms in 100u64..1_000,
            delays in proptest::collection::vec(0.0f64..3.0, 200),
            step in 1.0f64..40.0,
        ) {
            let p = params(limit, length_ms, Counting::Log, 4);
            let mut s = RuleState::default();
            let fastest = 5.0;
            // (answered at, lease, arrived at)
            let mut under_way: Vec<(f64, String, f64)> = Vec::new();
            let mut arrivals = Vec::new();
            let mut now = 0.0;
            let mut next = 0;
            while next < delays.len() {
                under_way.sort_by(|a, b| b.0.total_cmp(&a.0));
                while under_way.last().is_some_and(|u| u.0 <= now) {
                    if let Some((answered, lease, arrived)) = under_way.pop() {
                        s.release(answered, &lease, "a", Some(fastest));
                        arrivals.push((arrived, String::new()));
                    }
                }
                let lease = format!("l{next}");
                if let Decision::Granted(_) = s.acquire(&p, now, "a", &lease) {
                    let arrived = now + delays[next] * length_ms as f64;
                    under_way.push((arrived + fastest, lease, arrived));
                    next += 1;
                }
                now += step;
            }
            for (_, _, arrived) in under_way {
                arrivals.push((arrived, String::new()));
            }
            arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
            prop_assert!(most_in_any_window(&arrivals, length_ms as f64) <= limit as usize);
        }
    }
}
