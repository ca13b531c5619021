//! Limiter: decides the earliest instant at which one more request may start.
//!
//! A [`Limiter`] enforces every [`Window`] of a budget at once ("10 per second AND 5,000 per
//! hour"). [`Limiter::next_start_at`] answers "when may the next request start?" with the earliest
//! instant at which *every* window allows one more start, and [`Limiter::record_start`] counts a
//! start. Like the rest of the engine it is sans-IO: it never reads a clock (time comes in as
//! wall-clock milliseconds) and its whole state is plain data. That state is saved to IndexedDB
//! and restored after the browser kills the worker, so nothing in it may be derived from the
//! process: a restored limiter makes exactly the decisions the saved one would have made.
//!
//! # Algorithms
//!
//! Pick the [`Algorithm`] that mirrors how the server counts. Each meters a window in a module
//! of its own, which says what it guarantees and why; all four answer `next_start_at` in O(1)
//! per window. In short:
//!
//! * **Sliding log** (`sliding_log`, the default): never more than `limit` starts in any
//!   placement of a window, the only one of the four with that guarantee, which is what a server
//!   that counts a sliding window, or one whose algorithm we do not know, needs. It costs up to
//!   `limit` timestamps per window.
//! * **Token bucket** (`token_bucket`): a full bucket and then a window's refill, so up to
//!   `2 * limit - 1` starts in a sliding window.
//! * **GCRA** (`gcra`): the token bucket's worst case, in a single timestamp of state.
//! * **Fixed window** (`fixed_window`): a counter per window on the server's grid
//!   ([`Limiter::align_to`]); `2 * limit` starts across a boundary, which is why it is not the
//!   default.
//!
//! This module chooses the meter for each window and combines them: a start is allowed when
//! every window allows it. It keeps what they share: the log of real starts (which the sliding
//! log reads, and a retune replays into a new window), the margins below, and the pacing grid
//! (`pacer`), which spreads evenly what the windows allow.
//!
//! # Margins: why windows are stretched
//!
//! The server does not count our start times: it counts arrivals, which are start times plus a
//! network delay, and the delay varies. Two starts exactly one window apart arrive less than a
//! window apart when the first is slow and the second fast, and the server then counts both in
//! one window, one too many. Two things keep that from happening:
//!
//! * An answered start is logged where it may have reached the server at the latest
//!   ([`Limiter::reached_server_by`]), which its budget derives from its own round trip (see
//!   `round_trips` for the model and why it is safe).
//! * Every window is stretched by a margin of milliseconds ([`Limiter::set_margin`]) for the
//!   starts still under way, which no answer has placed yet. The budget measures it from the
//!   spread of its recent round trips: a millisecond or two on a calm network, tens on a
//!   jittery one, and the same milliseconds on an hourly window as on a one-second one (the
//!   jitter does not grow with the window). A window of `W` ms then loses about `j / W` of its
//!   starts when one-way delays spread over `j` ms.
//!
//! A target utilization `u` below 1 stretches each window further, to `ceil(L / u)` before the
//! margin, for room the budget cannot measure (callers it does not see); it is 1 by default.
//!
//! A fixed window cannot be stretched: its boundaries must stay on the server's grid, and a
//! stretched grid drifts off it by `(1/u - 1) * L` every window (after which one server window
//! could hold two of ours). Its target utilization comes out of the count (at most
//! `floor(u * limit)`, at least 1, per window) and, paced, its margin is kept in time: the
//! pacing grid spreads the count over the length plus the margin, and the count holds in any
//! span that long, read from the log of starts. A start made just before a reset that arrives
//! just after it then finds the next window's count short of it, whichever way the server
//! counts. The margin once came out of the count too, which cost a whole start a window where
//! the margin is a few milliseconds (19 of 20 a second: 0.95 of the limit, where the time
//! costs 1-2%). Unpaced, a fixed window has no spacing to keep a margin in; it bursts its
//! whole count at each boundary, as it says.
//!
//! # Pauses, retunes and clocks
//!
//! After a pause (a 429, a `Retry-After`), [`Limiter::start_empty`] makes the limiter behave as
//! if it had been used to the full just before the pause ended, so requests resume at the steady
//! rate instead of all at once. [`Limiter::retune`] adopts a quota the server reported, keeping
//! the recorded starts so a new limit never opens a burst. Times are wall-clock milliseconds and
//! the wall clock can step back: the limiter never panics on it and never becomes less careful
//! (see [`Limiter::record_start`]).

mod arrivals;
mod fixed_window;
mod gcra;
mod pacer;
mod retune;
mod sliding_log;
#[cfg(test)]
mod testing;
mod token_bucket;
mod weighted_log;

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::config::{Algorithm, ConfigError, Window};
use crate::json::{FromJson, ToJson};
use crate::time::{DurationMs, Millis};
use fixed_window::FixedState;
use gcra::GcraState;
use pacer::{Pacer, NEVER};
use sliding_log::LogState;
use token_bucket::BucketState;

pub use pacer::PACING_CATCH_UP;
pub use weighted_log::WeightedLog;

/// Longest window, after stretching, the limiter works with: 2^53 ms, about 285,000 years.
/// Longer ones are enforced as this long, which makes no difference in practice but keeps every
/// intermediate product inside `u128` and every persisted number exact as a JavaScript number.
const MAX_LENGTH_MS: DurationMs = 1 << 53;

/// Relative distance under which a float quotient counts as the whole number next to it, so
/// that `98 / 0.98` stretches to 100 ms and not to 101 because of a last-bit rounding error.
const SNAP: f64 = 1e-9;

/// How many real starts are kept beyond those still inside the longest window, as a multiple
/// of the largest limit. Only a caller that records starts it was not allowed can fill the
/// history past one limit, so this bounds memory without ever dropping a start the windows need.
const HISTORY_LIMITS: usize = 2;

/// How long starts stay in the log beyond the longest window, as a share of the shortest. The
/// windows themselves need none of it; it is there for reading a server's count against ours
/// ([`Limiter::starts_within`] from a response): the count was taken when the request arrived,
/// up to a round trip after it started, over a window that reaches that much further back
/// than the one ending at our newest start. Round trips are short next to all but the
/// shortest window, so a share of that one is enough.
const HISTORY_BEYOND_WINDOW: (u64, u64) = (1, 2);

/// Decides the earliest instant at which one more request may start; see the module docs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct Limiter {
    algorithm: Algorithm,
    /// The windows as configured or reported by the server, before stretching.
    windows: Vec<Window>,
    target_utilization: f64,
    /// One meter per window, in the same order.
    meters: Vec<Meter>,
    /// Real starts, oldest first, at least as far back as the longest window. The sliding log
    /// reads its windows from it, and it answers `starts_within` and rebuilds a meter when a
    /// retune adds a window.
    starts: VecDeque<Millis>,
    /// Spreads starts evenly (none: off). See [`Limiter::set_pacing`].
    #[serde(default)]
    pace: Option<Pacer>,
    /// Starts of the shortest window left to others who share the quota. See
    /// [`Limiter::set_headroom`].
    #[serde(default)]
    headroom: u32,
    /// Milliseconds every window is stretched by for the arrival spread of requests still
    /// under way (see [`Limiter::set_margin`] and `round_trips`).
    #[serde(default)]
    margin: DurationMs,
    /// The last start as it went out (recorded, or restamped to its real send), which the
    /// pacing's quarter-interval spacing counts from. Not the log's newest entry: a request
    /// overdue is moved in the log to where it may have arrived, at every turn while it stays
    /// unanswered, and spacing from that entry held every other slot a quarter interval
    /// behind `now` for as long as it hung (a lost answer stopped all starts for the whole
    /// attempt timeout).
    #[serde(default)]
    last_sent: Millis,
    /// Starts at least one interval of the shortest window apart, plus the margin, with no
    /// catching up: set when the server refused a request while our window was at most half
    /// used (see [`Limiter::set_no_burst`]).
    #[serde(default)]
    no_burst: bool,
    /// How much sooner than its start's spacing a request may arrive, for `no_burst`: the
    /// forward half of the round trips' spread (see `round_trips`); 0 until measured, when
    /// the margin stands in for it.
    #[serde(default)]
    arrival_spread: DurationMs,
    /// For `no_burst`: the latest the last start can have reached the server, once it was
    /// answered (see `round_trips::RoundTrips::arrived_by`): the next start is spaced from
    /// that, with no allowance for spread. `None` while it is unanswered.
    #[serde(default)]
    last_arrived_by: Option<Millis>,
    /// For `no_burst` learned from 429s: the last start's round trip was within the spread
    /// measured so far, so the spread's bound on its arrival (its start plus the forward half
    /// of the spread) can stand beside `last_arrived_by`. A trip beyond it, or one taken before
    /// the spread was measured, may have spent its extra time on the way there: the next start
    /// is spaced from its answer alone. Betting on the return for those drew an arrival 1 ms
    /// early about one run in four against nginx without burst, twice within the first 32
    /// trips, when the spread was not measured and the bet was that the trip took no time at
    /// all.
    ///
    /// Even a typical trip can have spent its extra time on the way there, so the bet is not
    /// taken where the limit was told (one per shortest window): there a 429 breaks a promise.
    /// Against nginx without burst told one per 50 ms, a request 5 ms late on its way drew one
    /// 429 about one CI run in nine; in the simulator (`--no-burst --windows 1/50ms --latency-ms
    /// 12 --arrival-jitter-ms 6 --jitter-ms 1 --concurrency 2`, seeds 1-10 of 300 jobs) 13 429s
    /// with the bet, none without it. Its price is where answers come back jittery: 0.67 of the
    /// limit against 0.72 on the bench's cross-origin path (`--latency-ms 35 --arrival-jitter-ms
    /// 10 --jitter-ms 20`). A learned one keeps the bet (a 429 is how it learns anyway, and
    /// `RoundTrips`' widening after one our timing explains follows), which recovers from an
    /// early bare 429 at 0.9 of the rate where the answer alone gave 0.865
    /// (`an_early_bare_429_from_a_server_without_burst_is_recovered_from_in_seconds`).
    #[serde(default)]
    last_trip_typical: bool,
    /// For `no_burst`: the last start carries a CORS preflight the browser has not cached, so
    /// it reaches the server a round trip later than its start says: the next start waits for
    /// its answer (at most [`PREFLIGHT_WAIT_MS`]).
    #[serde(default)]
    awaiting_preflight: bool,
    /// The last start that carried a CORS preflight after one that had none, until it is
    /// answered: when it went out, and how many starts went out after it meanwhile. It reached
    /// the server a preflight's round trip late, so the starts sent behind it arrived closer to
    /// it than the pacing grid spaced them; once its arrival is known the grid continues from
    /// there (see [`Limiter::answered`]).
    #[serde(default)]
    preflighted: Option<PreflightedStart>,
}

/// A start that carried a CORS preflight, and the starts recorded after it while it was
/// unanswered (see `Limiter::preflighted`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
struct PreflightedStart {
    sent: Millis,
    followed_by: u32,
}

/// The longest the next start of a `no_burst` limiter waits for the answer to a start that
/// carried a CORS preflight (see `Limiter::awaiting_preflight`): beyond it the answer is late
/// for reasons of its own (a lost answer), and the start is spaced as if it had arrived then.
pub const PREFLIGHT_WAIT_MS: DurationMs = 1_000;

impl crate::json::ToJson for State {
    fn write_json(&self, out: &mut String) {
        let (name, body): (&str, &dyn crate::json::ToJson) = match self {
            State::Log(s) => ("{\"log\":", s),
            State::Bucket(s) => ("{\"bucket\":", s),
            State::Gcra(s) => ("{\"gcra\":", s),
            State::Fixed(s) => ("{\"fixed\":", s),
        };
        out.push_str(name);
        body.write_json(out);
        out.push('}');
    }
}

impl crate::json::FromJson for State {
    /// Externally tagged, as serde has it: `{"log": {...}}`.
    fn from_json(v: &crate::json::Json) -> Result<Self, crate::json::Error> {
        use crate::json::{Error, FromJson, Json};
        let members = match v {
            Json::Obj(m) if m.len() == 1 => m,
            Json::Obj(_) => return Err(Error("invalid type: map, expected enum State".into())),
            Json::Str(s) => {
                return Err(Error(format!(
                    "invalid type: unit variant, expected {s} newtype variant"
                )))
            }
            _ => return Err(Error("expected value".into())),
        };
        let (tag, body) = &members[0];
        Ok(match tag.as_ref() {
            "log" => State::Log(FromJson::from_json(body)?),
            "bucket" => State::Bucket(FromJson::from_json(body)?),
            "gcra" => State::Gcra(FromJson::from_json(body)?),
            "fixed" => State::Fixed(FromJson::from_json(body)?),
            other => {
                return Err(Error(format!(
                    "unknown variant `{other}`, expected one of `log`, `bucket`, `gcra`, `fixed`"
                )))
            }
        })
    }

    fn placeholder() -> Self {
        State::Log(crate::json::FromJson::placeholder())
    }
}

impl Limiter {
    /// A limiter enforcing every window at once. Errors on an empty or zero window.
    pub fn new(
        algorithm: Algorithm,
        windows: &[Window],
        target_utilization: f64,
    ) -> Result<Self, ConfigError> {
        if windows.is_empty() {
            return Err(ConfigError(
                "a limiter needs at least one window, e.g. {limit: 10, lengthMs: 1000} for 10 \
                 requests per second"
                    .into(),
            ));
        }
        if let Some(w) = windows.iter().find(|w| w.limit == 0 || w.length_ms == 0) {
            return Err(ConfigError(format!(
                "a window needs a limit and a length above 0 (got {} per {} ms); to stop \
                 sending altogether, pause the budget instead",
                w.limit, w.length_ms
            )));
        }
        // Written so that NaN fails too.
        if !(target_utilization > 0.0 && target_utilization <= 1.0) {
            return Err(ConfigError(format!(
                "targetUtilization must be in (0, 1], e.g. 0.98 to aim at 98% of the limit \
                 (got {})",
                crate::json::display_f64(target_utilization)
            )));
        }
        // Plain loops in this module: each mapped `collect` is several generic functions in
        // the wasm.
        let mut meters = Vec::with_capacity(windows.len());
        for &w in windows {
            meters.push(Meter::fresh(algorithm, w, target_utilization, 0));
        }
        Ok(Self {
            algorithm,
            windows: windows.to_vec(),
            target_utilization,
            meters,
            starts: VecDeque::new(),
            pace: None,
            headroom: 0,
            margin: 0,
            last_sent: 0,
            // One start per shortest window is a server that allows no burst (nginx's
            // `limit_req` without `burst=` is one per `1000 / rate` ms): spaced strictly from
            // the first start, not only after a refusal.
            no_burst: one_per_shortest_window(windows),
            arrival_spread: 0,
            last_arrived_by: None,
            last_trip_typical: false,
            awaiting_preflight: false,
            preflighted: None,
        })
    }

    /// Pacing: starts on an even grid, one per shortest window's length over its limit.
    ///
    /// Why: a sliding log allows the whole limit at once, and once saturated it repeats that
    /// burst every window, leaving gaps in between. A person's action that arrives in a gap
    /// waits for the next window; with starts spread evenly it waits at most one token interval.
    /// Pacing costs nothing in a steady run (the rate is the same) and only the opening burst of
    /// an idle budget. It is taken from the shortest window only: pacing a bulk job by an hourly
    /// quota would be far too careful while the per-second window allows more.
    ///
    /// The grid is exact, in fractions of a millisecond, and a start that comes late by up to
    /// [`PACING_CATCH_UP`] intervals is made up by the next ones, so that timers firing late do
    /// not cost the rate; catching up never breaks the limit. The `pacer` module says how.
    pub fn set_pacing(&mut self, on: bool) {
        let grid = if on {
            self.shortest()
                .map(|m| (self.spread_length(m), self.own_share(m)))
        } else {
            None
        };
        self.pace = match (grid, self.pace) {
            (None, _) => None,
            // Same spacing: keep the grid's position.
            (Some((step, per)), Some(old)) if old.step == step && old.per == per => Some(old),
            (Some((step, per)), old) => {
                // A new spacing starts from where the old grid had got to, in whole ms.
                let next = old.map_or(0, |p| p.next_ceil());
                Some(Pacer {
                    next,
                    frac: 0,
                    step,
                    per,
                    until: NEVER,
                })
            }
        };
    }

    /// Leaves `n` starts of every shortest window to other callers of the same quota (other
    /// devices, a server-side job) that the budget has learned about: we may start at most
    /// `limit - n` in any such window (never fewer than one). Exact for every algorithm: it is
    /// checked against the log of real starts, which every algorithm keeps.
    pub fn set_headroom(&mut self, n: u32) {
        if n != self.headroom {
            self.headroom = n;
            if self.pace.is_some() {
                self.set_pacing(true);
            }
        }
    }

    pub fn headroom(&self) -> u32 {
        self.headroom
    }

    /// A server that allows no burst at all (a leaky bucket without one, as nginx's
    /// `limit_req` without `burst=`) refuses a request that arrives less than one interval
    /// after the one before, whatever the window's count. With this set, each start comes at
    /// least an interval of the shortest window (our share of it) after the last one went out,
    /// plus how much sooner it may arrive ([`Limiter::set_arrival_spread`]), and late starts
    /// are not made up. Costs that spread's share of the rate, where pacing alone lost a
    /// start now and then to a 429.
    pub fn set_no_burst(&mut self, on: bool) {
        self.no_burst = on;
    }

    pub fn no_burst(&self) -> bool {
        self.no_burst
    }

    /// How much sooner than its spacing a request may arrive (see `no_burst`), as the budget
    /// measured it from its round trips.
    pub fn set_arrival_spread(&mut self, ms: DurationMs) {
        self.arrival_spread = ms;
    }

    /// Stretches every window by `ms` on top of the target utilization: the margin for the
    /// arrival spread of requests still under way, from what the budget measured of its round
    /// trips (see `round_trips` for the model and why it is safe). A fixed window keeps it in
    /// its pacing instead (its boundaries must stay on the server's grid): see
    /// `fixed_spread_earliest`.
    ///
    /// Recorded starts are kept, as by a retune, so a narrower margin never opens a burst. A
    /// start that [`Limiter::reached_server_by`] moved sits at its latest arrival less the
    /// margin of that moment; narrowing by `d` would count it `d` too early, so every logged
    /// start moves `d` later (moving a start later only makes every window stricter, and the
    /// ones not moved pay that for at most one window). Each change rebuilds the meters and
    /// respaces the pacing grid: callers change it only when it moved by enough to matter (see
    /// `round_trips::RoundTrips::margin_update`).
    ///
    /// Returns how far the logged starts moved: a caller that names starts by their logged
    /// instant ([`Limiter::restamp`], [`Limiter::reached_server_by`]) moves its own records
    /// of the starts in flight by as much.
    #[must_use]
    pub fn set_margin(&mut self, ms: DurationMs) -> DurationMs {
        let ms = ms.min(MAX_LENGTH_MS / 2);
        if ms == self.margin {
            return 0;
        }
        let moved = self.margin.saturating_sub(ms);
        if moved > 0 {
            for s in self.starts.iter_mut() {
                *s = s.saturating_add(moved);
            }
        }
        self.margin = ms;
        for i in 0..self.meters.len() {
            let fresh = Meter::fresh(self.algorithm, self.windows[i], self.target_utilization, ms);
            self.meters[i] = self.meters[i].retuned(fresh, &self.starts);
        }
        if self.pace.is_some() {
            self.set_pacing(true);
        }
        moved
    }

    pub fn margin(&self) -> DurationMs {
        self.margin
    }

    fn shortest(&self) -> Option<&Meter> {
        self.meters.iter().min_by_key(|m| m.length)
    }

    /// The span a meter's limit is spread over in steady state: its length, which for every
    /// meter but a fixed window is already stretched by the margin. A fixed window's
    /// boundaries stay on the server's grid, so its margin is kept here, in the spacing.
    fn spread_length(&self, meter: &Meter) -> DurationMs {
        match meter.state {
            State::Fixed(_) => meter.length.saturating_add(self.margin).min(MAX_LENGTH_MS),
            _ => meter.length,
        }
    }

    /// A paced fixed window keeps its margin in time, as its spacing (see `spread_length`),
    /// and spacing alone does not hold when starts bunch up to make up for late ones: so it
    /// also holds its limit in any span of its length plus the margin, read from the log of
    /// real starts. That bounds what a server counting sliding windows sees across a boundary
    /// as the sliding log does, and it allows each fixed window its whole count. Unpaced, a
    /// fixed window is what it says (its whole count at each boundary).
    fn fixed_spread_earliest(&self) -> Millis {
        if self.pace.is_none() {
            return 0;
        }
        let shortest = self.shortest().map(|m| m.length);
        let mut earliest = 0;
        for m in self
            .meters
            .iter()
            .filter(|m| matches!(m.state, State::Fixed(_)))
        {
            let ours = if Some(m.length) == shortest {
                self.own_share(m)
            } else {
                m.limit
            };
            if let Some(i) = self.starts.len().checked_sub(ours as usize) {
                earliest = earliest.max(self.starts[i].saturating_add(self.spread_length(m)));
            }
        }
        earliest
    }

    /// The starts of a window that are ours to use.
    fn own_share(&self, meter: &Meter) -> u32 {
        meter.limit.saturating_sub(self.headroom).max(1)
    }

    pub fn is_paced(&self) -> bool {
        self.pace.is_some()
    }

    /// The pacing interval as `(step, per)`: one start per `step / per` ms.
    pub fn pacing_interval(&self) -> Option<(DurationMs, u32)> {
        self.pace.map(|p| (p.step, p.per))
    }

    /// The earliest instant `>= now` at which every window allows one more start.
    pub fn next_start_at(&self, now: Millis) -> Millis {
        // Each window allows a start from some instant on and for ever after (until the next
        // start is recorded), so the earliest instant all of them allow is the latest of those.
        // Making up for late starts goes at four times the rate at most, never in a burst:
        // requests sent together queue behind one another on the way, and the server would
        // count them later than we do by however long that queue is. A quarter, not a half:
        // a budget its slots hold near the limit has two slots free within half an interval
        // at about one start in three, and the second one waiting cost ~1.5% of the rate.
        let paced = self.pace.map_or(now, |p| {
            let quarter_interval = (p.step.div_ceil(4 * u64::from(p.per))).max(1);
            let spaced = self
                .starts
                .back()
                .map_or(0, |_| self.last_sent.saturating_add(quarter_interval));
            p.earliest().max(spaced)
        });
        let shared = match self.shortest() {
            Some(m) if self.headroom > 0 => {
                let ours = self.own_share(m) as usize;
                self.starts.len().checked_sub(ours).map_or(now, |i| {
                    self.starts[i].saturating_add(self.spread_length(m))
                })
            }
            _ => now,
        };
        let strict = match self.windows.iter().min_by_key(|w| w.length_ms) {
            Some(w) if self.no_burst && !self.starts.is_empty() => {
                // The server's interval (the window over our share of it, stretched by the
                // target utilization alone): the margin is a window's, and it is added below
                // once per start as the arrival spread instead.
                let length = stretch(w.length_ms, self.target_utilization);
                let ours = w.limit.saturating_sub(self.headroom).max(1);
                let interval = length.div_ceil(u64::from(ours));
                let spread = if self.arrival_spread > 0 {
                    self.arrival_spread
                } else {
                    self.margin
                };
                // From where the last start reached the server: known once it was answered,
                // else its start plus the spread, or, when it carried a preflight, not known
                // until it is answered.
                let unanswered = if self.awaiting_preflight {
                    self.last_sent.saturating_add(PREFLIGHT_WAIT_MS)
                } else {
                    self.last_sent.saturating_add(spread)
                };
                // Once answered, from the answer's bound, which is safe. After a typical trip
                // to a server whose lack of burst was learned from its 429s, the earlier of
                // that and the spread's bound: a bet that the trip's extra time was not all on
                // the way there (see `last_trip_typical`), which a told limit does not take.
                let bet = self.last_trip_typical
                    && !self.awaiting_preflight
                    && !one_per_shortest_window(&self.windows);
                let from = match self.last_arrived_by {
                    Some(arrived) if bet => arrived.min(unanswered),
                    Some(arrived) => arrived,
                    None => unanswered,
                };
                from.saturating_add(interval)
            }
            _ => now,
        };
        let paced = paced
            .max(shared)
            .max(strict)
            .max(self.fixed_spread_earliest());
        self.meters
            .iter()
            .map(|m| m.earliest(&self.starts))
            .fold(now.max(paced), Millis::max)
    }

    /// Counts a start at `at` (never earlier than the last recorded start).
    ///
    /// Real time only moves forward, so a start reported earlier than one already recorded
    /// means the wall clock stepped back (or reports arrived out of order): the start really
    /// happened after the last one. It is counted at the last start's instant. After a step
    /// back by `D` every recorded instant lies `D` ahead of the new clock, so the limiter is
    /// more careful, never less, until those starts age out.
    ///
    /// "The last start" is the last one recorded ([`Limiter::last_sent`]), not the log's newest
    /// entry: an answered or overdue start moves in the log to where it may have arrived, and
    /// a new start may really come before that. Clamped to such an entry, it was counted later
    /// than it went out, so a server's count taken between the two held one of ours that our
    /// log did not, and it was read as another caller's. It is sorted into the log instead.
    pub fn record_start(&mut self, at: Millis) {
        let last = if self.last_sent > 0 {
            Some(self.last_sent)
        } else {
            // Saved before `last_sent` was kept.
            self.starts.back().copied()
        };
        let at = last.map_or(at, |last| at.max(last));
        self.starts.push_back(at);
        let mut i = self.starts.len() - 1;
        while i > 0 && self.starts[i - 1] > at {
            self.starts.swap(i, i - 1);
            i -= 1;
        }
        // A start at or before `at - longest` shares no window with `at` or anything later,
        // but a server's count read later may still hold it.
        let horizon = self.history_ms();
        let cap = self.history_cap();
        while let Some(&oldest) = self.starts.front() {
            if oldest.saturating_add(horizon) <= at || self.starts.len() > cap {
                self.starts.pop_front();
            } else {
                break;
            }
        }
        for meter in &mut self.meters {
            meter.record(at);
        }
        self.pace = self.pace.map(|p| p.after_on_grid(at));
        self.last_sent = self.last_sent.max(at);
        self.last_arrived_by = None;
        self.awaiting_preflight = false;
        if let Some(p) = &mut self.preflighted {
            p.followed_by = p.followed_by.saturating_add(1);
        }
    }

    /// After a pause: from `at` on, starts come only at the steady rate (limit / window), with
    /// no burst, as if the limiter had been used to the full just before `at`.
    ///
    /// Starts recorded before `at` keep counting: this only ever makes the limiter stricter.
    pub fn start_empty(&mut self, at: Millis) {
        for meter in &mut self.meters {
            meter.start_empty(at);
        }
        // No catching up on the time the pause took.
        if let Some(pace) = &mut self.pace {
            pace.skip_to(at);
        }
    }

    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Sustained starts per millisecond this limiter allows (the tightest window, after the
    /// utilization margin and the headroom left to other callers): what an ETA divides by.
    pub fn sustained_rate_per_ms(&self) -> f64 {
        let shortest = self.shortest().map(|m| m.length);
        self.meters
            .iter()
            .map(|m| {
                let ours = if Some(m.length) == shortest {
                    self.own_share(m)
                } else {
                    m.limit
                };
                f64::from(ours) / self.spread_length(m) as f64
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// Starts recorded in `(now - length, now]`, for the achieved-rate figure and for reading a
    /// server's count against ours.
    ///
    /// Exact for lengths up to [`Self::history_ms`]; beyond that, a lower bound (older starts
    /// have been forgotten).
    pub fn starts_within(&self, now: Millis, length: DurationMs) -> u32 {
        let from = self
            .starts
            .partition_point(|&s| s.saturating_add(length) <= now);
        let to = self.starts.partition_point(|&s| s <= now);
        u32::try_from(to.saturating_sub(from)).unwrap_or(u32::MAX)
    }

    /// How far back from its newest start the log holds every start (unless a caller recorded
    /// more starts than it was allowed): [`Self::starts_within`] is exact for spans up to this.
    pub fn history_ms(&self) -> DurationMs {
        // A fixed window's limit also holds over its length plus the margin.
        let longest = self
            .meters
            .iter()
            .map(|m| self.spread_length(m))
            .max()
            .unwrap_or(0);
        let shortest = self.meters.iter().map(|m| m.length).min().unwrap_or(0);
        let (num, den) = HISTORY_BEYOND_WINDOW;
        longest.saturating_add(shortest.saturating_mul(num) / den)
    }

    fn history_cap(&self) -> usize {
        let largest = self.meters.iter().map(|m| m.limit).max().unwrap_or(0) as usize;
        largest.saturating_mul(HISTORY_LIMITS).saturating_add(16)
    }
}

/// One window as enforced: its limit and length after the utilization margin, and the state of
/// the limiter's algorithm for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
struct Meter {
    /// Starts allowed per `length`: the window's limit (fixed windows: after the target
    /// utilization).
    limit: u32,
    /// Length enforced, in ms: the stretched length (fixed windows: the server's).
    length: DurationMs,
    state: State,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum State {
    Log(LogState),
    Bucket(BucketState),
    Gcra(GcraState),
    Fixed(FixedState),
}

impl Meter {
    fn fresh(algorithm: Algorithm, window: Window, utilization: f64, margin: DurationMs) -> Self {
        let stretched = stretch(window.length_ms, utilization)
            .saturating_add(margin)
            .min(MAX_LENGTH_MS);
        let (limit, length, state) = match algorithm {
            Algorithm::SlidingLog => (window.limit, stretched, State::Log(LogState::default())),
            Algorithm::TokenBucket => (
                window.limit,
                stretched,
                State::Bucket(BucketState::full(window.limit)),
            ),
            Algorithm::Gcra => (window.limit, stretched, State::Gcra(GcraState::default())),
            Algorithm::FixedWindow => (
                shrink(window.limit, utilization),
                window.length_ms.min(MAX_LENGTH_MS),
                State::Fixed(FixedState::default()),
            ),
        };
        Self {
            limit,
            length,
            state,
        }
    }

    /// From this instant on (until the next start), this window allows one more start.
    fn earliest(&self, starts: &VecDeque<Millis>) -> Millis {
        let (limit, length) = (self.limit, self.length);
        match &self.state {
            State::Log(log) => log.earliest(limit, length, starts),
            State::Bucket(bucket) => bucket.earliest(limit, length),
            State::Gcra(gcra) => gcra.earliest(limit, length),
            State::Fixed(fixed) => fixed.earliest(limit),
        }
    }

    fn record(&mut self, at: Millis) {
        let (limit, length) = (self.limit, self.length);
        match &mut self.state {
            State::Log(log) => log.record(limit, at),
            State::Bucket(bucket) => bucket.record(limit, length, at),
            State::Gcra(gcra) => gcra.record(limit, length, at),
            State::Fixed(fixed) => fixed.record(length, at),
        }
    }

    fn start_empty(&mut self, at: Millis) {
        let (limit, length) = (self.limit, self.length);
        match &mut self.state {
            State::Log(log) => log.start_empty(limit, length, at),
            State::Bucket(bucket) => bucket.start_empty(limit, length, at),
            State::Gcra(gcra) => gcra.start_empty(limit, length, at),
            State::Fixed(fixed) => fixed.start_empty(limit, length, at),
        }
    }

    /// This window's state carried over to `fresh`'s limit and length.
    fn retuned(&self, fresh: Meter, starts: &VecDeque<Millis>) -> Meter {
        let (limit, length) = (fresh.limit, fresh.length);
        let state = match &self.state {
            State::Log(log) => State::Log(log.retuned(self.length, limit, length)),
            State::Bucket(bucket) => {
                State::Bucket(bucket.retuned(self.limit, self.length, limit, length))
            }
            State::Gcra(gcra) => {
                let last = starts.back().copied().unwrap_or(0);
                State::Gcra(gcra.retuned(self.limit, self.length, limit, length, last))
            }
            State::Fixed(fixed) => State::Fixed(fixed.retuned(length, starts)),
        };
        Meter {
            limit,
            length,
            state,
        }
    }

    /// Brings a meter that has just been added up to date with the starts already recorded.
    fn catch_up(&mut self, starts: &VecDeque<Millis>) {
        let (limit, length) = (self.limit, self.length);
        match &mut self.state {
            // Reads the recorded starts directly.
            State::Log(_) => {}
            State::Bucket(bucket) => starts.iter().for_each(|&s| bucket.record(limit, length, s)),
            State::Gcra(gcra) => starts.iter().for_each(|&s| gcra.record(limit, length, s)),
            State::Fixed(fixed) => fixed.refit(length, starts),
        }
    }
}

/// One start per shortest window: a server that allows no burst, told so (nginx's `limit_req`
/// without `burst=` is one per `1000 / rate` ms). Spaced strictly from the first start, not only
/// after a refusal, and never on a bet (see [`Limiter::next_start_at`]).
fn one_per_shortest_window(windows: &[Window]) -> bool {
    windows
        .iter()
        .min_by_key(|w| w.length_ms)
        .is_some_and(|w| w.limit == 1)
}

/// `ceil(length / utilization)`, snapped to the whole number when float error is all that
/// separates it from one.
fn stretch(length: DurationMs, utilization: f64) -> DurationMs {
    let exact = length as f64 / utilization;
    let whole = exact.round();
    let stretched = if (exact - whole).abs() <= exact * SNAP {
        whole
    } else {
        exact.ceil()
    };
    // `as` saturates; the stretch never shortens a window.
    (stretched as u64).clamp(length.min(MAX_LENGTH_MS), MAX_LENGTH_MS)
}

/// `floor(limit * utilization)`, at least 1, snapped like `stretch`.
fn shrink(limit: u32, utilization: f64) -> u32 {
    let exact = f64::from(limit) * utilization;
    let whole = exact.round();
    let shrunk = if (exact - whole).abs() <= exact * SNAP {
        whole
    } else {
        exact.floor()
    };
    (shrunk as u32).clamp(1, limit)
}

// Exact integer arithmetic for the meters and the pacer, which keep instants and levels in whole
// fractions (of a millisecond, of a token) so that nothing is ever rounded in a start's favour.
// Kept here once, which also keeps their divisions' zero checks in this file: the location of a
// check that can panic names its source file, so each file with one adds its path to the
// worker's wasm (the pacer's and the GCRA's did until they divided here).

/// An instant kept exactly in `1/per` ms, from its whole milliseconds and the fraction over them
/// (`0..per`): how the GCRA keeps its theoretical arrival time and the pacer its grid.
fn scaled(whole: Millis, frac: u64, per: u32) -> u128 {
    u128::from(whole) * u128::from(per) + u128::from(frac)
}

/// The whole milliseconds (saturating) and the fraction over them of an instant kept in `1/per`
/// ms: the inverse of [`scaled`].
fn unscaled(scaled: u128, per: u32) -> (Millis, u64) {
    (
        to_millis(scaled / u128::from(per)),
        (scaled % u128::from(per)) as u64,
    )
}

/// An instant or a duration kept in `1/per` ms, rounded up to whole milliseconds.
fn ceil_millis(scaled: u128, per: u32) -> Millis {
    to_millis(scaled.div_ceil(u128::from(per)))
}

/// Whole milliseconds, saturating: an instant past `u64::MAX` is as good as never.
fn to_millis(x: u128) -> Millis {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// `a * b / c` rounded down, without overflow for `b, c <= 2^64` as long as the result fits.
fn mul_div_floor(a: u128, b: u128, c: u128) -> u128 {
    (a / c)
        .saturating_mul(b)
        .saturating_add((a % c).saturating_mul(b) / c)
}

/// `a * b / c` rounded up, like `mul_div_floor`.
fn mul_div_ceil(a: u128, b: u128, c: u128) -> u128 {
    (a / c)
        .saturating_mul(b)
        .saturating_add((a % c).saturating_mul(b).div_ceil(c))
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_restamped_start_counts_from_when_it_went_out() {
        let mut lim = limiter(Algorithm::SlidingLog, &[w(2, 1_000)], 0.98);
        lim.record_start(T0);
        lim.record_start(T0 + 10);
        // The first waited 50 ms for a save: the window counts from T0 + 50, after the second.
        lim.restamp(T0, T0 + 50);
        assert_eq!(lim.next_start_at(T0), T0 + 10 + 1_021);
        lim.record_start(T0 + 1_031);
        assert_eq!(lim.next_start_at(T0 + 1_031), T0 + 50 + 1_021);
        // Never earlier than recorded.
        lim.restamp(T0 + 1_031, T0 + 1_000);
        assert_eq!(lim.next_start_at(T0 + 1_031), T0 + 50 + 1_021);
    }

    #[test]
    fn new_rejects_unusable_configurations() {
        let err = |windows: &[Window], u: f64| {
            Limiter::new(Algorithm::SlidingLog, windows, u)
                .unwrap_err()
                .0
        };
        assert!(err(&[], 1.0).contains("at least one window"));
        assert!(err(&[w(0, 1000)], 1.0).contains("above 0"));
        assert!(err(&[w(10, 0)], 1.0).contains("above 0"));
        assert!(err(&[w(10, 1000)], 0.0).contains("targetUtilization"));
        assert!(err(&[w(10, 1000)], 1.01).contains("targetUtilization"));
        assert!(err(&[w(10, 1000)], f64::NAN).contains("targetUtilization"));
        assert!(Limiter::new(Algorithm::SlidingLog, &[w(10, 1000)], 1.0).is_ok());
    }

    #[test]
    fn utilization_stretches_windows_and_rounds_up_to_whole_milliseconds() {
        let mut lim = limiter(Algorithm::SlidingLog, &[w(10, 1000)], 0.5);
        greedy(&mut lim, T0, 10);
        assert_eq!(lim.next_start_at(T0), T0 + 2000);
        assert_eq!(lim.sustained_rate_per_ms(), 10.0 / 2000.0);
        assert_eq!(stretch(1000, 0.98), 1021);
        assert_eq!(stretch(3_600_000, 0.98), 3_673_470);
        // 98 / 0.98 is 100.00000000000001 in floats: still 100.
        assert_eq!(stretch(98, 0.98), 100);
        assert_eq!(stretch(7, 1.0), 7);
        assert_eq!(stretch(u64::MAX, 0.5), MAX_LENGTH_MS);
        assert_eq!(shrink(100, 0.98), 98);
        assert_eq!(shrink(10, 0.98), 9);
        assert_eq!(shrink(1, 0.1), 1);
    }

    /// After `start_empty(at)` with continuous demand: the first start about one interval after
    /// `at`, then evenly spaced, never more than the limit in a window.
    fn assert_resumes_at_steady_rate(algorithm: Algorithm) {
        let (limit, length) = (10, 1000);
        let mut lim = limiter(algorithm, &[w(limit, length)], 1.0);
        let at = T0 + 5_000;
        lim.start_empty(at);
        let starts = greedy_until(&mut lim, at, at + 3 * length);
        assert_eq!(starts[0], at + 100, "{algorithm:?}: {starts:?}");
        for pair in starts[..10].windows(2) {
            assert_eq!(pair[1] - pair[0], 100, "{algorithm:?}: {starts:?}");
        }
        assert!(max_in_any_window(&starts[..10], length) <= limit as usize);
        assert!(starts.len() >= 28, "{algorithm:?}: {starts:?}");
    }

    #[test]
    fn start_empty_resumes_at_the_steady_rate_without_a_burst() {
        for algorithm in ALL {
            assert_resumes_at_steady_rate(algorithm);
        }
        // The sliding log stays exact through it, and on the tightest window.
        let mut lim = limiter(Algorithm::SlidingLog, &[w(10, 1000), w(30, 10_000)], 1.0);
        lim.start_empty(T0);
        let starts = greedy_until(&mut lim, T0, T0 + 30_000);
        assert_eq!(starts[0], T0 + 334);
        assert_eq!(starts[1] - starts[0], 333);
        assert!(max_in_any_window(&starts, 10_000) <= 30);
        assert!(max_in_any_window(&starts, 1000) <= 10);
    }

    #[test]
    fn start_empty_keeps_counting_the_real_starts_before_it() {
        let mut lim = limiter(Algorithm::SlidingLog, &[w(5, 1000)], 1.0);
        let mut starts = greedy(&mut lim, T0, 5);
        // Pacing alone would allow one at T0 + 210, but the five real ones fill the window.
        lim.start_empty(T0 + 10);
        assert_eq!(lim.next_start_at(T0 + 10), T0 + 1000);
        starts.extend(greedy_until(&mut lim, T0 + 10, T0 + 3000));
        assert!(max_in_any_window(&starts, 1000) <= 5, "{starts:?}");
        // Buckets allowed one at T0 + 200 anyway; the pause only pushes it back.
        for algorithm in [Algorithm::Gcra, Algorithm::TokenBucket] {
            let mut lim = limiter(algorithm, &[w(5, 1000)], 1.0);
            greedy(&mut lim, T0, 5);
            assert_eq!(lim.next_start_at(T0 + 10), T0 + 200);
            lim.start_empty(T0 + 10);
            assert_eq!(lim.next_start_at(T0 + 10), T0 + 210, "{algorithm:?}");
        }
        // Fixed: the count stays; pacing comes on top.
        let mut lim = limiter(Algorithm::FixedWindow, &[w(5, 1000)], 1.0);
        greedy(&mut lim, T0, 5);
        lim.start_empty(T0 + 10);
        assert_eq!(lim.next_start_at(T0 + 10), T0 + 1000);
        assert_eq!(greedy(&mut lim, T0 + 10, 2), [T0 + 1000, T0 + 1010]);
    }

    #[test]
    fn a_pause_at_an_earlier_instant_never_loosens_a_later_one() {
        for algorithm in ALL {
            let mut once = limiter(algorithm, &[w(10, 1000), w(40, 10_000)], 0.9);
            greedy(&mut once, T0, 3);
            once.start_empty(T0 + 5000);
            let mut twice = once.clone();
            // After a clock step back, say: the pause already in force still holds.
            twice.start_empty(T0 + 100);
            assert_eq!(
                greedy(&mut twice, T0 + 100, 30),
                greedy(&mut once, T0 + 100, 30),
                "{algorithm:?}"
            );
        }
    }

    #[test]
    fn retune_replaces_the_window_of_about_that_length_and_keeps_the_starts() {
        let mut lim = limiter(
            Algorithm::SlidingLog,
            &[w(10, 1000), w(1000, 3_600_000)],
            1.0,
        );
        greedy(&mut lim, T0, 10);
        // Within 10% of 1000 ms: replaces it. A lower limit waits for the recorded starts.
        lim.retune(w(5, 1050));
        assert_eq!(lim.windows(), [w(5, 1050), w(1000, 3_600_000)]);
        assert_eq!(lim.next_start_at(T0), T0 + 1050);
        // A higher limit allows only the difference now.
        lim.retune(w(15, 1000));
        assert_eq!(lim.windows(), [w(15, 1000), w(1000, 3_600_000)]);
        assert_eq!(greedy(&mut lim, T0, 6), [T0, T0, T0, T0, T0, T0 + 1000]);
        // Zero is not a rate: ignored.
        lim.retune(w(0, 1000));
        assert_eq!(lim.windows()[0], w(15, 1000));
    }

    #[test]
    fn retune_adds_a_window_of_a_new_length_counting_past_starts() {
        for algorithm in ALL {
            let mut lim = limiter(algorithm, &[w(10, 1000)], 1.0);
            greedy(&mut lim, T0, 10);
            lim.retune(w(15, 3_600_000));
            assert_eq!(lim.windows().len(), 2);
            // T0 + 2,800,000 is a whole hour, where the fixed hourly window resets.
            let starts = greedy_until(&mut lim, T0, T0 + 2_800_000);
            if algorithm != Algorithm::TokenBucket && algorithm != Algorithm::Gcra {
                assert_eq!(starts.len(), 5, "{algorithm:?}: {starts:?}");
            } else {
                // Refilling meters: 5 left now, and some refill over 50 minutes.
                assert!(starts.len() <= 5 + 12, "{algorithm:?}: {starts:?}");
                assert!(starts[..5].iter().all(|&s| s < T0 + 1100), "{starts:?}");
            }
        }
    }

    #[test]
    fn retune_never_opens_a_burst_above_the_new_limit() {
        for algorithm in ALL {
            let mut lim = limiter(algorithm, &[w(100, 1000)], 1.0);
            let base = 1_700_000_000_000;
            greedy(&mut lim, base, 50);
            lim.retune(w(40, 1000));
            // 50 used of a new 40: nothing now.
            assert!(lim.next_start_at(base) > base, "{algorithm:?}");
            let mut lim = limiter(algorithm, &[w(100, 1000)], 1.0);
            greedy(&mut lim, base, 50);
            lim.retune(w(60, 1000));
            let burst = greedy(&mut lim, base, 20)
                .into_iter()
                .filter(|&s| s == base)
                .count();
            assert_eq!(burst, 10, "{algorithm:?}");
        }
        // A pause carries over too.
        let mut lim = limiter(Algorithm::SlidingLog, &[w(10, 1000)], 1.0);
        lim.start_empty(T0);
        lim.retune(w(10, 1050));
        assert!(lim.next_start_at(T0) > T0);
    }

    #[test]
    fn a_restored_limiter_behaves_exactly_like_the_saved_one() {
        for algorithm in ALL {
            let mut lim = limiter(algorithm, &[w(7, 1000), w(20, 10_000)], 0.9);
            greedy(&mut lim, T0, 12);
            lim.start_empty(T0 + 2500);
            greedy(&mut lim, T0 + 2500, 3);
            lim.retune(w(25, 3_600_000));
            lim.align_to(T0 + 777);
            crate::json::testing::same_as_serde(&lim);
            let json = serde_json::to_string(&lim).unwrap();
            let mut restored: Limiter = serde_json::from_str(&json).unwrap();
            assert_eq!(restored, lim, "{algorithm:?}");
            assert_eq!(
                greedy(&mut restored, T0 + 3000, 40),
                greedy(&mut lim, T0 + 3000, 40),
                "{algorithm:?}"
            );
            assert_eq!(restored, lim);
        }
    }

    #[test]
    fn the_saved_state_keeps_its_format() {
        // Saved worker state is restored from IndexedDB by later versions: every field name and
        // variant tag here is part of that format, and a change must come with a migration.
        for (algorithm, expected) in ALL.into_iter().zip(SAVED) {
            let mut lim = limiter(algorithm, &[w(2, 1000), w(3, 10_000)], 0.9);
            lim.set_pacing(true);
            lim.set_headroom(1);
            let _ = lim.set_margin(5);
            greedy(&mut lim, T0, 2);
            lim.start_empty(T0 + 2500);
            lim.retune(w(4, 60_000));
            lim.align_to(T0 + 777);
            // Both declarations of the format: the worker's codec and serde's.
            assert_eq!(crate::json::to_string(&lim), expected, "{algorithm:?}");
            assert_eq!(serde_json::to_string(&lim).unwrap(), expected);
            let restored: Limiter = crate::json::from_str(expected).unwrap();
            assert_eq!(restored, lim, "{algorithm:?}");
            // State saved before `lastArrivedBy`, `awaitingPreflight` and `preflighted` reads
            // the same.
            let older = expected.replace(
                r#","lastArrivedBy":null,"lastTripTypical":false,"awaitingPreflight":false,"preflighted":null"#,
                "",
            );
            let restored: Limiter = crate::json::from_str(&older).unwrap();
            assert_eq!(restored, lim, "{algorithm:?}");
        }
    }

    /// What `the_saved_state_keeps_its_format` saves, one per algorithm in the order of `ALL`.
    const SAVED: [&str; 4] = [
        r#"{"algorithm":"sliding-log","windows":[{"limit":2,"lengthMs":1000},{"limit":3,"lengthMs":10000},{"limit":4,"lengthMs":60000}],"targetUtilization":0.9,"meters":[{"limit":2,"length":1117,"state":{"log":{"floor":[1700000003059,1700000003617],"shift":0}}},{"limit":3,"length":11117,"state":{"log":{"floor":[1700000006206,1700000009912,1700000013617],"shift":0}}},{"limit":4,"length":66672,"state":{"log":{"floor":[],"shift":0}}}],"starts":[1700000000000,1700000001117],"pace":{"next":1700000002500,"frac":0,"step":1117,"per":1,"until":9007199254740991},"headroom":1,"margin":5,"lastSent":1700000001117,"noBurst":false,"arrivalSpread":0,"lastArrivedBy":null,"lastTripTypical":false,"awaitingPreflight":false,"preflighted":null}"#,
        r#"{"algorithm":"token-bucket","windows":[{"limit":2,"lengthMs":1000},{"limit":3,"lengthMs":10000},{"limit":4,"lengthMs":60000}],"targetUtilization":0.9,"meters":[{"limit":2,"length":1117,"state":{"bucket":{"tokens":0,"partial":0,"at":1700000002500}}},{"limit":3,"length":11117,"state":{"bucket":{"tokens":0,"partial":0,"at":1700000002500}}},{"limit":4,"length":66672,"state":{"bucket":{"tokens":2,"partial":4468,"at":1700000001117}}}],"starts":[1700000000000,1700000001117],"pace":{"next":1700000002500,"frac":0,"step":1117,"per":1,"until":9007199254740991},"headroom":1,"margin":5,"lastSent":1700000001117,"noBurst":false,"arrivalSpread":0,"lastArrivedBy":null,"lastTripTypical":false,"awaitingPreflight":false,"preflighted":null}"#,
        r#"{"algorithm":"gcra","windows":[{"limit":2,"lengthMs":1000},{"limit":3,"lengthMs":10000},{"limit":4,"lengthMs":60000}],"targetUtilization":0.9,"meters":[{"limit":2,"length":1117,"state":{"gcra":{"tat":1700000003617,"tatFrac":0}}},{"limit":3,"length":11117,"state":{"gcra":{"tat":1700000013617,"tatFrac":0}}},{"limit":4,"length":66672,"state":{"gcra":{"tat":1700000033336,"tatFrac":0}}}],"starts":[1700000000000,1700000001117],"pace":{"next":1700000002500,"frac":0,"step":1117,"per":1,"until":9007199254740991},"headroom":1,"margin":5,"lastSent":1700000001117,"noBurst":false,"arrivalSpread":0,"lastArrivedBy":null,"lastTripTypical":false,"awaitingPreflight":false,"preflighted":null}"#,
        r#"{"algorithm":"fixed-window","windows":[{"limit":2,"lengthMs":1000},{"limit":3,"lengthMs":10000},{"limit":4,"lengthMs":60000}],"targetUtilization":0.9,"meters":[{"limit":1,"length":1000,"state":{"fixed":{"phase":777,"end":1700000001777,"count":1,"pacer":{"next":1700000003500,"frac":0,"step":1000,"per":1,"until":1700000003500}}}},{"limit":2,"length":10000,"state":{"fixed":{"phase":777,"end":1700000010777,"count":1,"pacer":{"next":1700000007500,"frac":0,"step":10000,"per":2,"until":1700000012500}}}},{"limit":3,"length":60000,"state":{"fixed":{"phase":20777,"end":1700000060777,"count":1,"pacer":null}}}],"starts":[1700000000000,1700000001005],"pace":{"next":1700000002500,"frac":0,"step":1005,"per":1,"until":9007199254740991},"headroom":1,"margin":5,"lastSent":1700000001005,"noBurst":false,"arrivalSpread":0,"lastArrivedBy":null,"lastTripTypical":false,"awaitingPreflight":false,"preflighted":null}"#,
    ];

    #[test]
    fn a_clock_step_back_never_panics_nor_loosens_the_limit() {
        for algorithm in ALL {
            let mut lim = limiter(algorithm, &[w(5, 1000), w(50, 60_000)], 0.95);
            let starts = greedy(&mut lim, T0, 5);
            let last = *starts.last().unwrap();
            let at_last = starts.iter().filter(|&&s| s == last).count() as u32;
            let mut twin = lim.clone();
            // The clock jumps back an hour.
            let back = T0 - 3_600_000;
            assert!(lim.next_start_at(back) >= back);
            lim.record_start(back);
            // The start is counted at the last instant known, not an hour before the others,
            // so nothing opens up early because of it.
            twin.record_start(last);
            assert_eq!(lim, twin, "{algorithm:?}");
            assert_eq!(lim.starts_within(last, 1), at_last + 1, "{algorithm:?}");
            assert_eq!(lim.starts_within(back, 1000), 0);
            lim.start_empty(back);
            lim.retune(w(4, 1000));
            lim.align_to(back);
            assert!(lim.next_start_at(back) > back, "{algorithm:?}");
            // Far in the past or future, and at the very end of time: no panic, no overflow.
            lim.record_start(0);
            lim.start_empty(u64::MAX);
            assert!(lim.next_start_at(u64::MAX) == u64::MAX);
            lim.record_start(u64::MAX);
            let _ = lim.starts_within(u64::MAX, u64::MAX);
            let _ = roundtrip(&lim);
        }
    }

    /// A server without burst learned from its 429s (20 a second, one per 50 ms): the next
    /// start is spaced from the earlier of the answered bound and the spread's bound only when
    /// the last trip was a typical one; after an outlier, or before the spread was measured,
    /// from the answered bound alone.
    #[test]
    fn without_burst_an_outlier_trip_is_spaced_from_its_answer() {
        for (typical, next) in [(true, T0 + 3 + 50), (false, T0 + 20 + 50)] {
            let mut lim = limiter(Algorithm::Gcra, &[w(20, 1000)], 1.0);
            lim.set_no_burst(true);
            lim.set_arrival_spread(3);
            lim.record_start(T0);
            lim.answered(T0, T0 + 20, typical);
            assert_eq!(lim.next_start_at(T0), next, "typical trip: {typical}");
        }
    }

    /// Told one per 50 ms, a server without burst whose limit we were told: the next start is
    /// spaced from the answered bound after any trip, typical or not; before the answer, from
    /// the start plus the spread.
    #[test]
    fn without_burst_told_every_answered_trip_is_spaced_from_its_answer() {
        for (answered, typical, next) in [
            (None, false, T0 + 3 + 50),
            (Some(T0 + 20), true, T0 + 20 + 50),
            (Some(T0 + 20), false, T0 + 20 + 50),
        ] {
            let mut lim = limiter(Algorithm::Gcra, &[w(1, 50)], 1.0);
            assert!(lim.no_burst());
            lim.set_arrival_spread(3);
            lim.record_start(T0);
            if let Some(at) = answered {
                lim.answered(T0, at, typical);
            }
            assert_eq!(
                lim.next_start_at(T0),
                next,
                "{answered:?}, typical: {typical}"
            );
        }
    }

    #[test]
    fn starts_within_counts_the_half_open_interval() {
        let mut lim = limiter(Algorithm::SlidingLog, &[w(100, 1000)], 1.0);
        for t in [T0, T0 + 10, T0 + 500, T0 + 999] {
            lim.record_start(t);
        }
        assert_eq!(lim.starts_within(T0 + 999, 1000), 4);
        assert_eq!(lim.starts_within(T0 + 1000, 1000), 3);
        assert_eq!(lim.starts_within(T0 + 1010, 1000), 2);
        assert_eq!(lim.starts_within(T0 + 500, 1), 1);
        assert_eq!(lim.starts_within(T0 + 500, 0), 0);
        assert_eq!(lim.starts_within(T0 - 1, 1000), 0);
        assert_eq!(lim.starts_within(5, 1000), 0);
    }

    #[test]
    fn sustained_rate_is_the_tightest_window_after_the_margin() {
        let lim = limiter(Algorithm::Gcra, &[w(10, 1000), w(5000, 3_600_000)], 0.98);
        assert_eq!(lim.sustained_rate_per_ms(), 5000.0 / 3_673_470.0);
        let lim = limiter(
            Algorithm::SlidingLog,
            &[w(10, 1000), w(50_000, 3_600_000)],
            1.0,
        );
        assert_eq!(lim.sustained_rate_per_ms(), 0.01);
    }

    #[test]
    fn memory_stays_bounded_at_a_thousand_starts_per_second() {
        for algorithm in ALL {
            let mut lim = limiter(algorithm, &[w(1000, 1000), w(5000, 3_600_000)], 0.98);
            let mut at = T0;
            for i in 0..20_000u64 {
                // Demand for a start every millisecond, with a pause now and then.
                at = lim.next_start_at(at + 1);
                lim.record_start(at);
                if i % 5000 == 4999 {
                    lim.start_empty(at);
                }
            }
            // The hour's 5,000, and what 1,000 per second adds in the 510 ms (half the
            // stretched second) kept beyond it for reading server counts.
            assert!(lim.starts.len() <= 5000 + 510, "{}", lim.starts.len());
            if let State::Log(log) = &lim.meters[1].state {
                assert!(log.floor.len() <= 5000);
            }
            let json = serde_json::to_string(&lim).unwrap();
            assert!(json.len() < 300_000, "{algorithm:?}: {}", json.len());
        }
        // Starts recorded without asking cannot grow the history without bound either.
        let mut lim = limiter(Algorithm::SlidingLog, &[w(3, 3_600_000)], 1.0);
        for _ in 0..1000 {
            lim.record_start(T0);
        }
        assert!(lim.starts.len() <= 3 * HISTORY_LIMITS + 16);
        assert_eq!(lim.next_start_at(T0), T0 + 3_600_000);
    }

    // ---- Properties ----

    /// After each pause, the k-th start comes no earlier than k intervals of `length / limit`
    /// after it, for each meter (fixed windows: while their pacing lasts, one window).
    fn assert_paced(lim: &Limiter, played: &Played) {
        for &(at, before) in &played.pauses {
            for meter in &lim.meters {
                let (n, len) = (u128::from(meter.limit), u128::from(meter.length));
                for (k, &s) in played.starts[before..].iter().enumerate() {
                    if u128::from(s) >= u128::from(at) + len {
                        break;
                    }
                    let k = k as u128 + 1;
                    assert!(
                        k * len <= n * u128::from(s - at),
                        "start {k} after a pause at {at} came at {s}: {meter:?}"
                    );
                }
            }
        }
    }

    proptest! {
        #[test]
        fn every_algorithm_resumes_at_the_steady_rate_after_a_pause(
            algorithm in prop::sample::select(ALL.to_vec()),
            windows in windows_strategy(1..=5000),
            u in utilization_strategy(),
            ops in plain_ops(),
        ) {
            let mut lim = limiter(algorithm, &windows, u);
            let played = play(&mut lim, T0, &ops, true);
            assert_paced(&lim, &played);
        }

        #[test]
        fn a_restored_limiter_makes_the_same_decisions(
            algorithm in prop::sample::select(ALL.to_vec()),
            windows in windows_strategy(1..=5000),
            u in utilization_strategy(),
            ops in any_ops(),
        ) {
            let mut saved = limiter(algorithm, &windows, u);
            let mut kept = saved.clone();
            let with_saves = play(&mut saved, 0, &ops, true).starts;
            let without = play(&mut kept, 0, &ops, false).starts;
            prop_assert_eq!(with_saves, without);
            prop_assert_eq!(saved, kept);
        }

        #[test]
        fn buckets_never_exceed_capacity_plus_refill(
            algorithm in prop::sample::select(vec![Algorithm::TokenBucket, Algorithm::Gcra]),
            windows in windows_strategy(1..=5000),
            u in utilization_strategy(),
            ops in plain_ops(),
        ) {
            let mut lim = limiter(algorithm, &windows, u);
            let starts = play(&mut lim, 0, &ops, true).starts;
            for meter in &lim.meters {
                let (n, len) = (u64::from(meter.limit), meter.length);
                let mut first = 0;
                for (i, &s) in starts.iter().enumerate() {
                    while starts[first] + len <= s {
                        first += 1;
                    }
                    // Starts in (s - len, s]: a full bucket at the first, plus the refill since.
                    let allowed = n + n * (s - starts[first]) / len;
                    prop_assert!((i - first + 1) as u64 <= allowed);
                }
            }
        }
    }
}
