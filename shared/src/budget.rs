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

/// Longest ramp delay after a pause: resuming at a random point of this second spreads the
/// restart of many clients (and of our own in-flight retries) instead of bursting at once.
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
            consecutive_rate_limits: 0,
            counters: BudgetCounters::default(),
            learned: Vec::new(),
            others: 0.0,
            sends_before_saving: false,
            own_timing_429_at: None,
            others_from_429: false,
            others_faded_at: None,
            failed_probes: 0,
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

    /// When the next request may start, or `None` while the budget is held (trouble) or full.
    pub fn next_start_at(&self, now: Millis, in_flight: usize, concurrency: u32) -> Option<Millis> {
        if self.trouble.is_some() || in_flight >= concurrency as usize {
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
            self.retry_tokens = (self.retry_tokens + retry.retry_ratio).min(retry.retry_reserve);
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
        let resume = until.saturating_add(rng.below_or_equal(RESUME_JITTER_MS));
        self.paused_until = Some(until);
        self.resume_at = Some(resume);
        self.pause_reason = Some(reason);
        self.limiter.start_empty(resume);
        true
    }

    /// Takes in a quota the server reported in the response to the request that made `trip`;
    /// `later_in_flight` of our requests started after it (answered or not) and are not in the
    /// server's count yet. The more careful of the server's and our own view wins.
    ///
    /// A stated limit is adopted from the first response that states it when it is stricter
    /// than what the budget enforces for that window; `configured` stays the ceiling, so a
    /// server that says it allows more never raises a configured window. A limit stated
    /// without its window's length (`X-RateLimit-Limit` alone) is taken for the shortest one.
    pub fn apply_quota(
        &mut self,
        quota: &Quota,
        trip: Trip,
        later_in_flight: u64,
        configured: &[Window],
        now: Millis,
    ) {
        let request_started = trip.started;
        // A limit stated without its length (`X-RateLimit-Limit` alone) is read against the
        // shortest window; then only a stricter limit is news: an equal or looser one read
        // against a guessed window would be no evidence of anything.
        let stated_window = quota
            .window_ms
            .or_else(|| self.shortest_window().map(|w| w.length_ms));
        let reported = match (quota.limit, stated_window) {
            (Some(limit), Some(length_ms)) => {
                let news = quota.window_ms.is_some()
                    || self
                        .shortest_window()
                        .is_some_and(|w| limit < u64::from(w.limit));
                news.then_some((limit, length_ms))
            }
            _ => None,
        };
        // Every policy the server declared is enforced by it, not only the one reported on;
        // the reported one goes last so that it is the one kept for its length.
        let declared = quota
            .windows
            .iter()
            .map(|w| (u64::from(w.limit), w.length_ms));
        for (limit, window_ms) in declared.chain(reported) {
            let ceiling = configured
                .iter()
                .filter(|w| w.length_ms.abs_diff(window_ms) * 10 <= window_ms)
                .map(|w| u64::from(w.limit))
                .min()
                .unwrap_or(u64::MAX);
            let limit = limit.min(ceiling);
            if limit == 0 || window_ms == 0 {
                continue;
            }
            let window = Window {
                limit: limit.min(u32::MAX as u64) as u32,
                length_ms: window_ms,
            };
            if !self.limiter.windows().contains(&window) {
                let pacing = self.limiter.is_paced();
                self.limiter.retune(window);
                self.limiter.set_pacing(pacing);
                // Remember it the way the limiter does: one window per length (within 10%).
                self.learned
                    .retain(|w| w.length_ms.abs_diff(window_ms) * 10 > window_ms);
                self.learned.push(window);
            }
        }
        if let (Some(reset_after), Algorithm::FixedWindow) =
            (quota.reset_after_ms, self.limiter.algorithm())
        {
            // A fixed window only mirrors the server if its boundaries fall where the server's do.
            self.limiter.align_to(now.saturating_add(reset_after));
        }
        let (Some(remaining), Some(reset_after)) = (quota.remaining, quota.reset_after_ms) else {
            return;
        };
        if self
            .server
            .as_ref()
            .is_some_and(|s| s.observed_start > request_started && s.reset_at > now)
        {
            return;
        }
        // Judge the server's view against our expectation before this reading moves it.
        let stricter = self.server_is_stricter(quota, remaining, trip);
        if let Some(w) = self.shortest_window() {
            let describes_shortest = quota
                .window_ms
                .is_none_or(|len| w.length_ms.abs_diff(len) * 10 <= len)
                && quota.limit.is_none_or(|l| l == u64::from(w.limit));
            if describes_shortest {
                self.observe_others(quota.limit.unwrap_or(u64::from(w.limit)), remaining, trip);
            }
        }
        if !stricter {
            // Our own limiter already explains what the server sees, and it knows to the
            // millisecond when a slot frees up, where a reset in whole seconds would make us wait
            // up to a second for nothing. Drop any older, stricter view: this one is fresher.
            self.server = None;
            return;
        }
        self.server = Some(ServerView {
            remaining: remaining.saturating_sub(later_in_flight),
            // A reset "in 0 s" still means the current second: wait at least until it passes.
            reset_at: now.saturating_add(reset_after.max(1)),
            observed_start: request_started,
        });
    }

    /// Whether the server counts more of the quota as spent than our own starts explain (other
    /// callers share it, or we were told a limit that is too high). Only then is its view
    /// worth obeying on top of the limiter.
    ///
    /// The server counts arrivals, which trail our starts by a varying network delay, so its
    /// count may hold more of ours than our window does (see [`Self::ours_the_server_may_count`]);
    /// that much difference is no evidence of anything.
    fn server_is_stricter(&self, quota: &Quota, remaining: u64, trip: Trip) -> bool {
        let windows = self.limiter.windows();
        let window = quota
            .window_ms
            .and_then(|len| {
                windows
                    .iter()
                    .find(|w| w.length_ms.abs_diff(len) * 10 <= len)
            })
            .or_else(|| {
                quota
                    .limit
                    .and_then(|limit| windows.iter().find(|w| u64::from(w.limit) == limit))
            })
            .or_else(|| windows.iter().min_by_key(|w| w.length_ms));
        let Some(window) = window else { return true };
        let limit = quota.limit.unwrap_or(u64::from(window.limit));
        // Past what the log holds, count what it has: that only makes the server look
        // stricter, and obeying it is the careful side.
        let ours = self
            .ours_the_server_may_count(window.length_ms, trip)
            .unwrap_or_else(|| {
                u64::from(self.limiter.starts_within(trip.started, window.length_ms))
            });
        let expected_remaining = limit
            .saturating_sub(ours)
            .saturating_sub(u64::from(self.limiter.headroom()));
        let edge_slack = (limit / 50).max(1);
        remaining.saturating_add(edge_slack) < expected_remaining
    }

    /// The shortest window: the one headroom and pacing apply to.
    fn shortest_window(&self) -> Option<Window> {
        self.limiter
            .windows()
            .iter()
            .min_by_key(|w| w.length_ms)
            .copied()
    }

    /// The shortest window and our starts in it up to `at`.
    fn shortest_window_use(&self, at: Millis) -> Option<(Window, u64)> {
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
    fn ours_the_server_may_count(&self, window_ms: DurationMs, trip: Trip) -> Option<u64> {
        let late_by = trip.arrived_by.saturating_sub(trip.started);
        // Plain sums: each term is far below 2^53 ms (and `saturating_add` here cost the
        // worker's wasm 280 bytes gzipped).
        let reach = window_ms + late_by + self.limiter.margin();
        (reach <= self.limiter.history_ms())
            .then(|| u64::from(self.limiter.starts_within(trip.arrived_by, reach)) + trip.unplaced)
    }

    /// A response reported `remaining` for the shortest window: whatever of the limit is spent
    /// beyond our own starts was spent by others. Rising estimates are taken at once (they
    /// cost 429s), falling ones only through the slow decay of [`Self::forget_others_slowly`].
    fn observe_others(&mut self, limit: u64, remaining: u64, trip: Trip) {
        let Some(w) = self.shortest_window() else {
            return;
        };
        // A reading we cannot compare in full is no evidence of others.
        let Some(ours) = self.ours_the_server_may_count(w.length_ms, trip) else {
            return;
        };
        // A difference of a request or two is noise, not others: a few of ours may sit on the
        // other side of the server's window edge (the same allowance `server_is_stricter` makes).
        let edge_slack = (limit / 50).max(1);
        let others = limit
            .saturating_sub(remaining)
            .saturating_sub(ours)
            .saturating_sub(edge_slack) as f64;
        // Others' traffic is bursty: leaving room for its average still collides with its peaks,
        // and each collision costs a pause. So hold the peak, and let it decay as we probe.
        // Headers that show others' use are the better source from here on.
        if others > 0.0 {
            self.others_from_429 = false;
        }
        self.others = self.others.max(others);
        self.apply_headroom();
    }

    /// A 429: others must have spent what we did not. Grow the estimate at least to that, and
    /// on a repeated refusal cut our own share by a tenth (multiplicative decrease of our rate),
    /// so a handful of 429s finds the real share; it decays back as we probe.
    ///
    /// Only the first 429 of an episode counts: the requests that were in flight with it say
    /// nothing new, and escalating on each would shut the budget down for nothing.
    ///
    /// A 429 that asks for a wait longer than the window is about a longer quota (or an outage),
    /// not about others sharing this window: the pause covers it and it teaches nothing here.
    ///
    /// A 429 while our own starts filled the whole limit, with no others known, is most likely
    /// our own bad luck: one arrival that trailed by more than the margin into the next window. It
    /// cuts nothing (on a limit of 10 the least cut is a tenth of the rate, for the rest of the
    /// run); the caller widens the arrival margin instead, and only a second such 429 within
    /// [`OWN_TIMING_WINDOWS`] windows counts as others'. Returns whether it was put down to
    /// our timing.
    pub fn observe_rate_limited(
        &mut self,
        request_started: Millis,
        retry_after: Option<DurationMs>,
        now: Millis,
    ) -> bool {
        if self.paused_until.is_some_and(|p| p > now) {
            return false;
        }
        let shortest = self.shortest_window().map(|w| w.length_ms);
        // Retry-After comes in whole seconds: "1" is the least a server can say.
        if retry_after
            .zip(shortest)
            .is_some_and(|(wait, len)| wait > len.max(1_000))
        {
            return false;
        }
        let Some((w, ours)) = self.shortest_window_use(request_started) else {
            return false;
        };
        let own_share = u64::from(w.limit.saturating_sub(self.limiter.headroom()).max(1));
        let recently = self.own_timing_429_at.is_some_and(|t| {
            let within = w
                .length_ms
                .saturating_mul(OWN_TIMING_WINDOWS)
                .max(OWN_TIMING_AT_LEAST_MS);
            now.saturating_sub(t) < within
        });
        // With room already left to others, a 429 at our share says their share grew.
        let full = ours + 1 >= own_share && self.limiter.headroom() == 0;
        // A refusal while our own starts used at most a quarter of our share says little
        // about a quota others spend: far likelier, the server counts a burst or a spacing we
        // did not keep (a leaky bucket without burst, nginx's `limit_req`, refusing a second
        // request that arrived 30 ms after the first on 20 a second). Reading it as others
        // spending the rest (`limit - ours`) left 1 of 20 a second. It is put down to our
        // timing, as a full window's is, and starts are spaced strictly from now on. A quarter,
        // not a half: told 200 a second where the server allows 100, the first refusal comes
        // at half our share, and that one is the limit, not the spacing.
        let early = ours.saturating_mul(4) <= own_share;
        if early {
            self.limiter.set_no_burst(true);
        }
        if (full || early) && !recently {
            self.own_timing_429_at = Some(now);
            return true;
        }
        let ours_now = f64::from(w.limit) - self.others;
        let implied = if early {
            // An early refusal again, with starts already spaced strictly: the count says
            // nothing (we had few starts in the window), the spacing was too tight. Half our
            // rate is left to the server's unknown, as TCP halves its window on a loss. Read
            // as others spending the rest of the count (`limit - ours`), nginx told twice its
            // rate kept 2 of 40 a second and reached 0.34 of its rate.
            self.others + ours_now / 2.0
        } else {
            // `ours` holds the refused request itself: the server had room for one fewer, and
            // we keep one more below that. No lower than that either: what the window showed
            // the server accepts, less one, is evidence; a cut beneath it is only loss.
            u64::from(w.limit).saturating_sub(ours) as f64 + 2.0
        };
        // A repeated refusal: our share shrinks by a tenth (at least one start), not by a
        // quarter of the others' estimate, which on a wrong configured limit (the "others"
        // being the half of it that never existed) would cut our rate by a quarter each time.
        let cut = (ours_now * 0.1).max(1.0);
        // Refused again while a belief learned from 429s stands (it was fading back, or a
        // probe above the real level was refused): each such 429 doubles how long the next
        // start takes to come back (at most 2^6 = 64 times).
        if self.others_from_429 {
            self.failed_probes = (self.failed_probes + 1).min(6);
        }
        self.others = implied.max(self.others + cut).min(implied.max(self.others));
        self.others_from_429 = true;
        self.others_faded_at = Some(now);
        self.apply_headroom();
        false
    }

    /// Each start is a probe: an estimate read from headers halves over about twenty windows'
    /// worth of our starts, so we find our way back up when the others stop, without inviting
    /// a 429 every window. One learned from 429s alone halves over a thousand, and besides
    /// gives back one start per [`OTHERS_FROM_429_STEP_WINDOWS_PER_START`] windows of sending
    /// time for each start of our share, twice as long after each refused probe
    /// ([`Self::failed_probes`]): told 40 a second where nginx allows 20 with a burst of 5, in
    /// windows of 150 ms, a fixed step probed (and drew a 429) every 2-3 s.
    fn forget_others_slowly(&mut self, now: Millis) {
        if self.others <= 0.0 {
            return;
        }
        let Some(w) = self.shortest_window() else {
            return;
        };
        let ours = w.limit.saturating_sub(self.limiter.headroom()).max(1);
        let windows = if self.others_from_429 {
            OTHERS_FROM_429_HALF_LIFE_WINDOWS
        } else {
            OTHERS_HALF_LIFE_WINDOWS
        };
        self.others *= half_life_factor(windows * f64::from(ours));
        if self.others_from_429 {
            // Time while sending: a gap between starts counts one window at most, so an idle
            // budget does not forget what it has not probed.
            if let Some(at) = self.others_faded_at {
                let since = now.saturating_sub(at).min(w.length_ms);
                let windows = (OTHERS_FROM_429_STEP_WINDOWS_PER_START * f64::from(ours)).max(1.0)
                    * f64::from(1u32 << self.failed_probes);
                self.others -= since as f64 / (windows * w.length_ms as f64);
            }
            self.others_faded_at = Some(now);
        }
        if self.others < 0.5 {
            self.others = 0.0;
            self.failed_probes = 0;
        }
        self.apply_headroom();
    }

    fn apply_headroom(&mut self) {
        let limit = self.shortest_window().map_or(1, |w| w.limit);
        // Others' traffic arrives at random: leave room for its spread too (about one standard
        // deviation of a count, as for arrivals at random), since every collision costs a pause.
        // A share learned from 429s alone is the level at which the server refused: it is held
        // as it is.
        let spread = if self.others > 0.0 && !self.others_from_429 {
            self.others.sqrt()
        } else {
            0.0
        };
        let headroom = ((self.others + spread).ceil() as u32).min(limit.saturating_sub(1));
        self.limiter.set_headroom(headroom);
    }

    /// Takes one retry token if there is one.
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
    use crate::json::tests::{reads_like_serde, same_as_serde};

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
