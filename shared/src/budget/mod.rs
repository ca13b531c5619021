//! One budget's live state: its limiter, the server's view of the quota, a pause, and the
//! retry budget. All of it is saved, because each part protects the server across restarts:
//! the limiter's recent starts stop a burst, the pause keeps a 429's promise, the server view
//! keeps "remaining: 0" from being forgotten, and the retry budget keeps a failing service from
//! being hammered by a worker that restarts.

use serde::{Deserialize, Serialize};

use crate::config::{Algorithm, BudgetConfig, ConfigError, RetryConfig, Window};
use crate::headers::Quota;
use crate::json::{FromJson, ToJson};
use crate::limiter::Limiter;
use crate::random::Rng;
use crate::resources::Resources;
use crate::time::{DurationMs, Millis};

mod quota;
mod refusals;

/// Longest ramp delay after a pause: resuming at a random point of this second spreads the
/// restart of many clients (and of our own in-flight retries) instead of bursting at once
/// (bounded by the pause itself after a single refusal: see [`BudgetState::pause`]).
pub const RESUME_JITTER_MS: DurationMs = 1_000;

/// Windows within which a second 429 at our own full share is taken as others' traffic
/// rather than our own timing (see [`BudgetState::observe_rate_limited`]).
pub const OWN_TIMING_WINDOWS: u64 = 20;
/// ... and within this long at least: on a window of 150 ms, twenty windows are 3 s, and a
/// server that refused every 2-3 s had each other refusal put down to our timing, which cuts
/// nothing (told twice nginx's rate with its burst: 10 refusals in 20 s).
pub const OWN_TIMING_AT_LEAST_MS: DurationMs = 10_000;

/// How fast the estimate of others' share is forgotten, in shortest windows' worth of our own
/// starts: read from headers, every later response corrects it, so it may decay fast.
const OTHERS_HALF_LIFE_WINDOWS: f64 = 20.0;
/// Learned from 429s alone, each probe above the real level costs a 429 and a pause.
const OTHERS_FROM_429_HALF_LIFE_WINDOWS: f64 = 1_000.0;
/// ... and one start of it is given back per this many shortest windows of sending time for
/// each start a window that is ours (one window at least). Counted in starts alone, the lower
/// a belief had cut our share, the slower it came back: one that left 1 start a window of 20
/// took a thousand of them, 17 minutes, to halve (issue 41: one early bare 429). Each probe
/// above the real level costs a 429 and a pause (a second or two of our rate) and gains one
/// start a window: it pays within about 1.5 windows per start of ours. So often while the share
/// is small (from 1 of 20: half back in ~30 s, all in ~95 s), seldom when a start adds a
/// hundredth (told 200 a second where the server allows 100, no headers: every 50 s; a step
/// every 10-30 s there cost 4-5 429s and 0.85-0.87 of the limit instead of 0.91 in a 20 s run).
const OTHERS_FROM_429_STEP_WINDOWS_PER_START: f64 = 0.5;
/// How many doublings of that step a refused probe costs (see
/// [`BudgetState::refused_probe`]), as does our whole share refused twice in a row.
const REFUSED_PROBE_DOUBLINGS: u32 = 2;
/// Probes back off until one step takes this many of our starts: each refused probe costs a
/// 429, and in steady state the promise is at most one per thousand requests.
const PROBE_EVERY_STARTS: f64 = 2_000.0;
/// Doublings of the step at most, whatever the share (2^12 steps).
const MOST_FAILED_PROBES: u32 = 12;

/// What the server last said about the quota, in our terms.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct ServerView {
    /// Starts still allowed before `reset_at`, after subtracting ours that the server had not
    /// yet counted when it answered.
    pub remaining: u64,
    pub reset_at: Millis,
    /// Start time of the request whose response this came from: an older response that arrives
    /// later must not overwrite a fresher view.
    pub observed_start: Millis,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct BudgetCounters {
    /// Every start, retries included.
    pub requests: u64,
    /// Responses that said "over the limit".
    pub rate_limited: u64,
    /// Starts that were retries after a failure.
    pub retries: u64,
}

/// The persisted state of one budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct BudgetState {
    pub name: String,
    pub limiter: Limiter,
    /// The end of a pause the server asked for (what a countdown shows).
    pub paused_until: Option<Millis>,
    /// When sending really resumes: the pause's end plus a random ramp delay.
    pub resume_at: Option<Millis>,
    pub pause_reason: Option<String>,
    pub server: Option<ServerView>,
    /// Retry tokens: each first attempt adds `retry_ratio`, each retry takes one.
    pub retry_tokens: f64,
    /// Set when retries ran out: nothing is sent on this budget until the user retries.
    pub trouble: Option<String>,
    /// Set when the server refused a request's credentials (a status of the budget's
    /// `waitForCredentialsOn`): nothing is sent on this budget until a page gives new ones
    /// (`Engine::set_credentials`). Saved, so a restarted worker waits too rather than sending
    /// the old ones again.
    #[serde(default)]
    pub credentials_needed: Option<String>,
    /// Rate-limit responses in a row without a success, for the pause when none is named.
    pub consecutive_rate_limits: u32,
    pub counters: BudgetCounters,
    /// Windows the server reported (RateLimit-Policy and the like): they outlive a restart and a
    /// reconfiguration, since the server keeps enforcing them.
    #[serde(default)]
    pub learned: Vec<Window>,
    /// Estimated starts per shortest window that other callers spend from the same quota; the
    /// limiter leaves that much headroom.
    #[serde(default)]
    pub others: f64,
    /// Set (and saved) before the first start that may be fetched before it is saved; cleared
    /// when the budget is idle again. A restore that finds it set counts the starts that may
    /// have gone out unsaved (see [`crate::engine::Engine::restore`]).
    #[serde(default)]
    pub sends_before_saving: bool,
    /// When a 429 was last put down to our own timing (see [`Self::observe_rate_limited`]):
    /// a second one soon after is taken as evidence of others after all.
    #[serde(default)]
    pub own_timing_429_at: Option<Millis>,
    /// `others` was last raised by a 429, not read from the server's headers: with no
    /// headers to read, it is all there is to know of the real budget (a wrong configured
    /// limit, or others' steady use). It is then held exactly (no allowance for random
    /// arrivals) and forgotten slowly, since every probe above it costs a 429 and a pause.
    #[serde(default)]
    pub others_from_429: bool,
    /// When a belief learned from 429s last faded (see [`Self::forget_others_slowly`]).
    #[serde(default)]
    pub others_faded_at: Option<Millis>,
    /// Refusals while a belief learned from 429s stands (a share faded back, refused): each doubles
    /// how long the next start takes to come back (see [`Self::forget_others_slowly`]); a
    /// belief that fades all the way without a refusal resets it.
    #[serde(default)]
    pub failed_probes: u32,
    /// The headroom our starts held at (no refusal) before the belief learned from 429s faded
    /// to the probe now running: a refused probe goes back to it (see
    /// [`Self::observe_rate_limited`]).
    #[serde(default)]
    pub held_headroom: Option<u32>,
    /// Since when a probe runs (the belief faded one start lower) unrefused: a refusal of a
    /// start made since then is the probe's (see [`Self::observe_rate_limited`]).
    #[serde(default)]
    pub probing_since: Option<Millis>,
    /// What the budget's other resources (tokens, points) have spent (see `resources`).
    #[serde(default)]
    pub resources: Resources,
}

/// One request's way to the server, as far as we can tell: when it started, and the latest it
/// can have arrived (its answer time less a usual return, or the answer time itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trip {
    pub started: Millis,
    pub arrived_by: Millis,
    /// Our requests that started before `arrived_by` but that the log holds after it: ones
    /// overdue or given up without an answer, which it moved to where they may have arrived
    /// at the latest. The server may have counted them already; not adding them read a lost
    /// answer or two as other callers and left them a tenth of the limit.
    pub unplaced: u64,
}

impl BudgetState {
    pub fn new(config: &BudgetConfig, retry: &RetryConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            name: config.name.clone(),
            limiter: limiter_for(config)?,
            paused_until: None,
            resume_at: None,
            pause_reason: None,
            server: None,
            retry_tokens: retry.retry_reserve,
            trouble: None,
            credentials_needed: None,
            consecutive_rate_limits: 0,
            counters: BudgetCounters::default(),
            learned: Vec::new(),
            others: 0.0,
            sends_before_saving: false,
            own_timing_429_at: None,
            others_from_429: false,
            others_faded_at: None,
            failed_probes: 0,
            held_headroom: None,
            probing_since: None,
            resources: Resources::configured(&config.resources),
        })
    }

    /// Adopts a configuration (at every restore, and when a page changes it). The limiter is
    /// rebuilt from the configured windows plus those the server taught us, and the recorded
    /// starts are replayed into it, so neither a new algorithm nor a new window can allow a
    /// burst on top of requests already made.
    pub fn reconfigure(&mut self, config: &BudgetConfig, now: Millis) -> Result<(), ConfigError> {
        self.resources.reconfigure(&config.resources);
        let mut fresh = limiter_for(config)?;
        // The wider of the margin measured so far and the initial one: a restored worker has
        // no trips measured (its network may have changed while it was stopped), and a new
        // configuration has none of its own. The engine narrows it again as trips come back.
        // No starts yet: the old ones are replayed below, where the old margin put them.
        if self.limiter.margin() > fresh.margin() {
            let _ = fresh.set_margin(self.limiter.margin());
        }
        for w in &self.learned {
            fresh.retune(*w);
        }
        fresh.set_pacing(config.pacing);
        fresh.set_headroom(self.limiter.headroom());
        // A server found to allow no burst still allows none; a new window of one start says
        // so by itself (`Limiter::new`), which copying the old flag over would undo.
        if self.limiter.no_burst() {
            fresh.set_no_burst(true);
        }
        if fresh.algorithm() == self.limiter.algorithm()
            && fresh.windows() == self.limiter.windows()
            && fresh.pacing_interval() == self.limiter.pacing_interval()
        {
            return Ok(());
        }
        fresh.replay_starts_of(&self.limiter);
        if self.resume_at.is_some_and(|t| t > now) {
            if let Some(resume) = self.resume_at {
                fresh.start_empty(resume);
            }
        }
        self.limiter = fresh;
        Ok(())
    }

    /// When the next request may start, or `None` while the budget is held (trouble, or waiting
    /// for credentials) or full.
    pub fn next_start_at(&self, now: Millis, in_flight: usize, concurrency: u32) -> Option<Millis> {
        if self.trouble.is_some()
            || self.credentials_needed.is_some()
            || in_flight >= concurrency as usize
        {
            return None;
        }
        let mut at = self.limiter.next_start_at(now);
        if let Some(resume) = self.resume_at {
            at = at.max(resume);
        }
        if let Some(server) = &self.server {
            if server.remaining == 0 && server.reset_at > now {
                at = at.max(server.reset_at);
            }
        }
        Some(at.max(now))
    }

    /// The instant the budget is blocked until by a pause or an exhausted server quota.
    pub fn blocked_until(&self, now: Millis) -> Option<Millis> {
        let pause = self.resume_at.filter(|&t| t > now);
        let quota = self
            .server
            .as_ref()
            .filter(|s| s.remaining == 0 && s.reset_at > now)
            .map(|s| s.reset_at);
        pause.max(quota)
    }

    pub fn record_start(&mut self, now: Millis, is_retry: bool, retry: &RetryConfig) {
        self.limiter.record_start(now);
        self.forget_others_slowly(now);
        self.counters.requests += 1;
        if is_retry {
            self.counters.retries += 1;
        } else {
            self.earn_retry_tokens(1, retry);
        }
        if let Some(server) = &mut self.server {
            if server.reset_at > now {
                server.remaining = server.remaining.saturating_sub(1);
            } else {
                self.server = None;
            }
        }
        if self.resume_at.is_some_and(|t| t <= now) {
            self.resume_at = None;
            self.paused_until = None;
            self.pause_reason = None;
        }
    }

    /// Counts a CORS preflight the browser sends ahead of a request started `now`, for an API
    /// that counts them ([`BudgetConfig::count_preflights`]): one more start against every
    /// window and against the server's remaining quota, but not a request of ours.
    pub fn count_preflight(&mut self, now: Millis) {
        self.limiter.record_start(now);
        if let Some(server) = &mut self.server {
            if server.reset_at > now {
                server.remaining = server.remaining.saturating_sub(1);
            }
        }
    }

    /// A restored budget whose last run sent before saving: up to `n` starts (one round, at
    /// most the concurrency cap) went out whose record was lost with the worker. They happened
    /// before `now`, so counting them at `now` is the careful side: any window that holds one
    /// of them and a start to come holds `now` too.
    pub fn count_unsaved_starts(&mut self, n: u32, now: Millis) {
        self.limiter.count_unrecorded_starts(n, now);
        if let Some(server) = &mut self.server {
            server.remaining = server.remaining.saturating_sub(u64::from(n));
        }
    }

    /// Pauses the whole budget until `now + wait`; a later pause only ever extends it. When it
    /// ends, sending resumes after a random ramp delay with the limiter empty, so traffic ramps
    /// up at the steady rate instead of bursting.
    pub fn pause(&mut self, now: Millis, wait: DurationMs, reason: String, rng: &mut Rng) -> bool {
        let until = now.saturating_add(wait);
        if self.paused_until.is_some_and(|p| p >= until) {
            return false;
        }
        // After a single refusal the ramp spreads restarts over at most the pause itself: a
        // bare 429 pauses one window (150 ms), and a second's ramp behind it left the budget
        // idle for most of that second (nginx with a burst of 5 told twice its rate: 0.80-0.89
        // of it; 0.97-0.99 with the ramp bounded, simulated). Refused again in a row (a wall
        // of refusals: others spent the quota, many clients wait), the whole second spreads
        // them: a doubling pause from 50 ms with short ramps sent 6 requests into the wall in
        // 3 s, not 5.
        let ramp = if self.consecutive_rate_limits <= 1 {
            RESUME_JITTER_MS.min(wait)
        } else {
            RESUME_JITTER_MS
        };
        let resume = until.saturating_add(rng.below_or_equal(ramp));
        self.paused_until = Some(until);
        self.resume_at = Some(resume);
        self.pause_reason = Some(reason);
        self.limiter.start_empty(resume);
        true
    }

    /// The shortest window: the one headroom and pacing apply to.
    pub(super) fn shortest_window(&self) -> Option<Window> {
        self.limiter
            .windows()
            .iter()
            .min_by_key(|w| w.length_ms)
            .copied()
    }

    /// The shortest window and our starts in it up to `at`.
    pub(super) fn shortest_window_use(&self, at: Millis) -> Option<(Window, u64)> {
        let w = self.shortest_window()?;
        Some((w, u64::from(self.limiter.starts_within(at, w.length_ms))))
    }

    /// The most of our own starts a server's count can hold, taken when the request that made
    /// `trip` arrived: the starts in the window ending at its start, and the later ones that
    /// may have overtaken it on the way. Usually that is the window alone. But a browser under
    /// load holds single requests back by tens of milliseconds, and the starts made meanwhile
    /// reach the server first: counting only the window ending at the start read those as
    /// somebody else's, took them for other callers and slowed every window after.
    ///
    /// The log also places each start at the latest instant it can have arrived *less the
    /// margin* (the frame `Limiter::reached_server_by` keeps), so a start logged up to a margin
    /// before the window may still be in the server's count. Without that reach, starts that
    /// went out together (a proxy granting a caller's held requests at its turn) and sat just
    /// past our edge read as somebody else's: two "others" learned on a share of 5 cut the
    /// caller to a third of it.
    ///
    /// `None` when the log no longer reaches back that far (the trip took very long).
    pub(super) fn ours_the_server_may_count(
        &self,
        window_ms: DurationMs,
        trip: Trip,
    ) -> Option<u64> {
        let late_by = trip.arrived_by.saturating_sub(trip.started);
        // Plain sums: each term is far below 2^53 ms (and `saturating_add` here cost the
        // worker's wasm 280 bytes gzipped).
        let reach = window_ms + late_by + self.limiter.margin();
        (reach <= self.limiter.history_ms())
            .then(|| u64::from(self.limiter.starts_within(trip.arrived_by, reach)) + trip.unplaced)
    }

    /// Takes one retry token if there is one.
    /// `n` more first attempts went out than starts were counted (a batch's members, each of
    /// which may fail alone): they earn the retries their own requests would have.
    pub fn earn_retry_tokens(&mut self, n: u32, retry: &RetryConfig) {
        self.retry_tokens =
            (self.retry_tokens + retry.retry_ratio * f64::from(n)).min(retry.retry_reserve);
    }

    pub fn take_retry_token(&mut self) -> bool {
        if self.retry_tokens >= 1.0 {
            self.retry_tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// The user asked to try again: lift the hold and give retries a fresh reserve.
    pub fn clear_trouble(&mut self, retry: &RetryConfig) {
        if self.trouble.take().is_some() {
            self.retry_tokens = retry.retry_reserve;
        }
    }
}

fn limiter_for(config: &BudgetConfig) -> Result<Limiter, ConfigError> {
    let mut limiter = Limiter::new(config.algorithm, &config.windows, config.target_utilization)?;
    // A fresh limiter has no starts to move.
    let _ = limiter.set_margin(initial_margin(config));
    limiter.set_pacing(config.pacing);
    Ok(limiter)
}

/// The arrival margin before any round trip was measured: 2% of the shortest window (20 ms on
/// a second), within 2-50 ms. Measured trips replace it within a few answers (see
/// `round_trips`).
fn initial_margin(config: &BudgetConfig) -> DurationMs {
    let shortest = config
        .windows
        .iter()
        .map(|w| w.length_ms)
        .min()
        .unwrap_or(1_000);
    (shortest / 50).clamp(2, 50)
}

/// `0.5^(1/n)`: the factor that, applied `n` times, halves a value. For `n >= 1` it is
/// `exp(-x)` with `x = ln 2 / n <= 0.7`, summed as its Taylor series to within 1e-15. Why not
/// `powf`: in wasm it links libm's `exp2` with its 4 KB table of constants, about 4 KB of the
/// worker's gzipped download for one multiplication per start.
fn half_life_factor(n: f64) -> f64 {
    let x = std::f64::consts::LN_2 / n.max(1.0);
    let mut term = 1.0;
    let mut sum = 1.0;
    for k in 1..=20 {
        term *= -x / f64::from(k);
        sum += term;
        if term.abs() < 1e-17 {
            break;
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::testing::{reads_like_serde, same_as_serde};

    /// A budget named "b" of `limit` per second.
    fn per_second(limit: u32) -> BudgetConfig {
        BudgetConfig {
            name: "b".into(),
            windows: vec![Window {
                limit,
                length_ms: 1_000,
            }],
            ..BudgetConfig::default()
        }
    }

    #[test]
    fn a_window_of_one_start_configured_later_allows_no_burst() {
        let retry = RetryConfig::default();
        let mut s = BudgetState::new(&per_second(20), &retry).unwrap();
        assert!(!s.limiter.no_burst());
        let one_per_50_ms = BudgetConfig {
            windows: vec![Window {
                limit: 1,
                length_ms: 50,
            }],
            ..per_second(1)
        };
        s.reconfigure(&one_per_50_ms, 0).unwrap();
        assert!(s.limiter.no_burst());
        // And a no-burst server found by a refusal stays one across a reconfiguration.
        s.reconfigure(&per_second(20), 0).unwrap();
        assert!(s.limiter.no_burst());
    }

    #[test]
    fn half_life_factor_is_the_root_of_one_half() {
        for n in [1.0, 2.0, 3.0, 20.0, 200.0, 2_000.0, 1e6] {
            let want = 0.5f64.powf(1.0 / n);
            let got = half_life_factor(n);
            assert!((got - want).abs() < 1e-14, "n = {n}: {got} != {want}");
        }
        // Applied n times, it halves.
        let halved = (0..200).fold(1.0, |v, _| v * half_life_factor(200.0));
        assert!((halved - 0.5).abs() < 1e-12, "{halved}");
    }

    #[test]
    fn apply_quota_learns_every_declared_window() {
        let config = per_second(10);
        let mut state = BudgetState::new(&config, &RetryConfig::default()).unwrap();
        let burst = Window {
            limit: 100,
            length_ms: 60_000,
        };
        let daily = Window {
            limit: 1_000,
            length_ms: 86_400_000,
        };
        // A burst and a daily policy, reported on the daily one.
        let quota = Quota {
            limit: Some(1_000),
            remaining: Some(5),
            reset_after_ms: Some(7_200_000),
            window_ms: Some(86_400_000),
            windows: vec![burst, daily],
        };
        let trip = Trip {
            started: 1_000,
            arrived_by: 1_010,
            unplaced: 0,
        };
        state.apply_quota(&quota, trip, 0, &config.windows, 1_020);
        for w in [burst, daily] {
            assert!(state.limiter.windows().contains(&w), "{w:?}");
        }
        assert_eq!(state.learned, vec![burst, daily]);
        // The same declaration again learns nothing twice.
        state.apply_quota(&quota, trip, 0, &config.windows, 1_030);
        assert_eq!(state.learned, vec![burst, daily]);
    }

    #[test]
    fn our_starts_a_margin_before_the_window_are_ours_not_others() {
        let config = per_second(5);
        let retry = RetryConfig::default();
        let mut state = BudgetState::new(&config, &retry).unwrap();
        let _ = state.limiter.set_margin(30);
        // Four requests a proxy held and granted together at 1,000-1,003: the log holds each at
        // its latest arrival less the margin. Then one more, which the proxy counts with them.
        for at in 970..974 {
            state.record_start(at, false, &retry);
        }
        state.record_start(1_980, false, &retry);
        let quota = Quota {
            limit: Some(5),
            remaining: Some(0),
            reset_after_ms: Some(1_000),
            window_ms: Some(1_000),
            windows: Vec::new(),
        };
        let trip = Trip {
            started: 1_980,
            arrived_by: 1_990,
            unplaced: 0,
        };
        state.apply_quota(&quota, trip, 0, &config.windows, 2_000);
        // All five are ours: nobody else spent the share, and the server is no stricter than
        // our own limiter (which waits for the first of them to leave the window anyway).
        assert_eq!(state.others, 0.0);
        assert!(state.server.is_none(), "{:?}", state.server);
    }

    #[test]
    fn json_form_matches_serde() {
        let config = per_second(10);
        let retry = RetryConfig::default();
        let mut state = BudgetState::new(&config, &retry).unwrap();
        same_as_serde(&state);
        let mut rng = Rng::seeded(1);
        for i in 0..5 {
            state.record_start(1_000 + i, i % 2 == 0, &retry);
        }
        state.pause(1_010, 2_000, "429".into(), &mut rng);
        state.observe_rate_limited(1_004, None, 1_000);
        state.server = Some(ServerView {
            remaining: 0,
            reset_at: 9,
            observed_start: 8,
        });
        state.trouble = Some("t".into());
        state.learned.push(Window {
            limit: 5,
            length_ms: 60_000,
        });
        same_as_serde(&state);
        let mut old: serde_json::Value = serde_json::to_value(&state).unwrap();
        let obj = old.as_object_mut().unwrap();
        obj.remove("learned");
        obj.remove("others");
        reads_like_serde::<BudgetState>(&old.to_string());
        reads_like_serde::<BudgetState>(r#"{"name":"b"}"#);
    }
}
