//! Round trips: what a budget has measured of its way to the server, and the timing margins
//! that follow from it.
//!
//! # What is known about when a request reached the server
//!
//! A request started at `s` and answered at `r` took `r - s = f + p + b`: a forward delay `f`
//! to the server (where it is counted on arrival, at `s + f`), the server's time `p`, and the
//! way back `b`. None of the three is seen on its own. What the measurements give is the
//! fastest recent round trip `m`, which bounds the fixed part of every trip: `f0 + b0 <= m`,
//! where `f0` and `b0` are the shortest forward and return delays the path has.
//!
//! Two requests counted in the same window is what a limit breach is. A new start at `t`
//! arrives no earlier than `t + f0`; an answered earlier request arrived no later than
//! `r - b0`. So the new one arrives at least `W` after it when `t + f0 >= r - b0 + W`, that is
//! when `t >= (r - (f0 + b0)) + W`: the limiter may count the answered request as if it had
//! *started* at `r - m` (its answer time less the fastest round trip), and enforce the window
//! itself, unstretched, against that. [`RoundTrips::arrived_by`] gives that instant, with
//! [`RoundTrips::estimate_slack`] added for how far the measured minimum may still sit above
//! `f0 + b0`.
//!
//! Its cost is the physical one: a request whose forward trip was `j` ms slower than the
//! fastest is counted `j` ms later (plus the slack), so a window of `W` ms loses about `j / W`
//! of its starts when the one-way delay spreads over `j`, whatever the window's length.
//!
//! Until [`PLACED_AFTER`] trips are measured the fastest says too little about `f0 + b0`: an
//! answered request then counts where it was answered, as if its whole trip was the way there.
//! From there until [`TRUSTED_AFTER`], the slack is a wider, provisional one
//! ([`RoundTrips::provisional_slack`]).
//!
//! A request still under way has no answer to bound its arrival: it may yet arrive as late as
//! the forward spread allows. [`RoundTrips::margin`] is what each window is stretched by to
//! cover that: half the spread of recent round trips (the forward half of it when the two ways
//! vary alike) plus the slack. It matters only while the start a window counts back to is
//! still in flight (round trips near the window's length); every answered start is placed by
//! its own answer. A request in flight for twice the slowest recent trip
//! ([`RoundTrips::overdue_after`]: a lost answer, a stalled connection) is counted as arriving
//! at every moment until it is answered, which is what keeps a window that reaches back to it
//! true.
//!
//! All of it widens at once when the network turns jittery (the spread is over the last
//! [`SAMPLES`] trips) and shrinks back as the slow trips leave that window.

use std::collections::VecDeque;

use crate::time::{DurationMs, Millis};

/// Round trips kept: enough for a stable minimum and 90th percentile, few enough that a
/// change of network shows within a second or two of traffic.
pub const SAMPLES: usize = 64;

/// From this many samples on, the trips so far stand in for the spread in a server without
/// burst's spacing (see [`RoundTrips::provisional_spread`]); below it, each start is spaced
/// from the last one's answer. The first ones are where a connection opens: the
/// 4th create reached nginx 1 ms early in one run when they were spaced by the interval alone.
pub const PROVISIONAL_AFTER: usize = 8;

/// From this many samples on, an answered request is placed before its answer by the
/// fastest trip less [`RoundTrips::provisional_slack`]; below it, where it was answered.
pub const PLACED_AFTER: usize = 16;

/// Below this many samples the minimum is no bound to trust: see [`RoundTrips::arrived_by`].
/// With delays spread evenly over `j` each way, the fastest of `n` trips lies more than
/// `0.9 j` (the slack below until [`SAMPLES`] trips) above the path's fixed part with
/// probability `0.6^n`: less than 1 in 10^7 after 32 trips.
pub const TRUSTED_AFTER: usize = SAMPLES / 2;

/// The recent round trips of one budget's requests. In memory only: a restarted worker starts
/// from the limiter's saved margin and measures afresh.
#[derive(Clone, Debug, Default)]
pub struct RoundTrips {
    samples: VecDeque<DurationMs>,
    /// The same samples in ascending order, kept as each is recorded: the spread, its
    /// percentile and the provisional one are read several times per answer, and sorting the
    /// samples for each read was 2-3% of the worker's thread at 700 answers a second (`sluice
    /// bench --ceiling --profile`: the answer's bookkeeping went from 54 to 14-24 ms in 2,000).
    sorted: Vec<DurationMs>,
    /// Added to the margin after a 429 that our own timing explains (an arrival that trailed
    /// by more than the trips showed); halved every [`SAMPLES`] trips after.
    widened: DurationMs,
    /// Trips recorded since `widened` last halved.
    since_halved: usize,
    /// The fastest trip over a longer memory than `samples`: see [`FLOOR_MEMORY`].
    floor: Option<DurationMs>,
    /// Trips recorded since `floor` was last renewed.
    since_floor: usize,
}

/// What whole-millisecond clocks cost the bound: times are read in whole milliseconds,
/// rounded down (the worker's `Date.now()`), while a server counts in finer ones, so an answer
/// time can read up to 1 ms early. The fastest trip is the least of many readings, so it does
/// not read long (see the test of whole-millisecond clocks below).
pub const CLOCK_SLACK: DurationMs = 1;

/// Trips after which the floor is close enough to the path's fixed part for the narrower
/// slack (see [`RoundTrips::estimate_slack`]).
const SETTLED_AFTER: usize = 256;

/// Trips the fastest one is remembered for. The fixed part of a path seldom changes, and the
/// fastest of a few dozen jittery trips can sit well above it (with one-way delays spread
/// evenly over `j`, the fastest of 64 trips lies more than `j / 5` above the floor about one
/// time in four), which would place answered requests too early. A path that became slower
/// only makes the old floor careful until it is renewed.
pub const FLOOR_MEMORY: usize = 1_024;

impl RoundTrips {
    pub fn record(&mut self, round_trip: DurationMs) {
        self.since_floor += 1;
        if self.since_floor >= FLOOR_MEMORY {
            // Renewed from the recent trips alone, so a path that got slower is followed.
            self.since_floor = 0;
            self.floor = self.samples.iter().copied().min();
        }
        self.floor = Some(self.floor.map_or(round_trip, |f| f.min(round_trip)));
        self.since_halved += 1;
        if self.since_halved >= SAMPLES {
            self.since_halved = 0;
            self.widened /= 2;
        }
        if self.samples.len() == SAMPLES {
            if let Some(oldest) = self.samples.pop_front() {
                if let Ok(at) = self.sorted.binary_search(&oldest) {
                    self.sorted.remove(at);
                }
            }
        }
        self.samples.push_back(round_trip);
        let at = self.sorted.partition_point(|&t| t <= round_trip);
        self.sorted.insert(at, round_trip);
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    fn fastest(&self) -> Option<DurationMs> {
        self.floor
    }

    /// The 90th percentile less the fastest: how much trips vary, both ways together. A
    /// percentile, not the slowest, so that one stalled request does not widen every window.
    pub fn spread(&self) -> Option<DurationMs> {
        if self.samples.len() < TRUSTED_AFTER {
            return None;
        }
        let sorted = &self.sorted;
        let p90 = sorted[(sorted.len() * 9 / 10).min(sorted.len() - 1)];
        Some(p90.saturating_sub(self.floor.unwrap_or(sorted[0])))
    }

    /// How far the fastest measured trip may still lie above the path's true fixed part. With
    /// delays spread evenly over `j` each way (round trips over `2j`, a spread of about
    /// `1.8 j`), the fastest of `n` trips lies about `j * sqrt(2 / n)` above it: `0.2 j` after
    /// 50 trips, `0.09 j` after 256. So half the spread until [`SAMPLES`] trips were measured
    /// since the floor was renewed, a quarter until [`SETTLED_AFTER`], an eighth after, rounded
    /// up: a fastest trip that was fast both ways is no bound on a pair of trips fast one way
    /// each, and no spread is too small for that.
    ///
    /// On top of that, [`CLOCK_SLACK`] for the clock the times are read from.
    pub fn estimate_slack(&self) -> DurationMs {
        let spread = self.spread().unwrap_or(0);
        let trips = self.since_floor_renewed();
        CLOCK_SLACK
            + if trips < SAMPLES {
                spread.div_ceil(2)
            } else if trips < SETTLED_AFTER {
                spread.div_ceil(4)
            } else {
                spread.div_ceil(8)
            }
    }

    /// Trips the floor was taken over.
    fn since_floor_renewed(&self) -> usize {
        self.since_floor.max(self.samples.len())
    }

    /// The latest instant a request started at `started` and answered at `answered` (this
    /// trip already recorded) can have reached the server, in the frame where a new start is
    /// compared without its own forward delay (see the module docs).
    ///
    /// Before [`TRUSTED_AFTER`] trips the fastest one says less about the fixed part of the
    /// path (on a jittery one it can lie tens of milliseconds above it, and the first request
    /// of a connection spends its handshake on the way there): until [`PLACED_AFTER`] trips
    /// the whole trip may have been the way there, and a request counts where it was answered;
    /// from there, with [`RoundTrips::provisional_slack`].
    pub fn arrived_by(&self, started: Millis, answered: Millis) -> Millis {
        let slack = if self.samples.len() >= TRUSTED_AFTER {
            Some(self.estimate_slack())
        } else {
            self.provisional_slack()
        };
        let (Some(fastest), Some(slack)) = (self.fastest(), slack) else {
            return answered.max(started);
        };
        let back = fastest.saturating_sub(slack);
        answered.saturating_sub(back).max(started)
    }

    /// Whether a trip of `round_trip` (already recorded) is one the spread measured so far
    /// describes: at most twice the spread above the fastest. Only for such a trip may the
    /// forward half of the spread bound how late it arrived; an outlier beyond it may have
    /// spent all its extra time on the way there. Twice, not once: the spread is a 90th
    /// percentile, and judging the slowest tenth as outliers cost 0.005 of the rate in the
    /// simulator (30 ms trips, 50 ms apart) while its jitter never leaves twice the spread.
    /// Before [`PROVISIONAL_AFTER`] trips none is known to be typical; until the spread is
    /// trusted, the provisional one stands in for it.
    pub fn within_spread(&self, round_trip: DurationMs) -> bool {
        match (
            self.spread().or_else(|| self.provisional_spread()),
            self.fastest(),
        ) {
            (Some(spread), Some(fastest)) => {
                round_trip <= fastest.saturating_add(spread.saturating_mul(2))
            }
            _ => false,
        }
    }

    /// How long a request may be in flight before it is overdue: hung rather than slow, twice
    /// the slowest recent trip (a lost answer, a stalled connection). Until then the margin
    /// covers it (see the module docs).
    pub fn overdue_after(&self) -> Option<DurationMs> {
        self.samples
            .iter()
            .copied()
            .max()
            .map(|m| m.saturating_mul(2))
    }

    /// What each window should be stretched by for the requests still under way (see the
    /// module docs), once enough trips were measured.
    pub fn margin(&self) -> Option<DurationMs> {
        self.spread()
            .map(|spread| spread.div_ceil(2) + self.estimate_slack() + self.widened)
    }

    /// How much sooner than its start's spacing a request may arrive: the forward half of
    /// the spread, the clock's slack, and any widening a 429 of our own timing asked for.
    /// Before the spread is trusted, from [`PROVISIONAL_AFTER`] trips on, the provisional one
    /// stands in for it (see [`RoundTrips::provisional_spread`]).
    pub fn arrival_spread(&self) -> Option<DurationMs> {
        self.spread()
            .or_else(|| self.provisional_spread())
            .map(|spread| spread.div_ceil(2) + CLOCK_SLACK + self.widened)
    }

    /// The second slowest trip so far less the fastest, from [`PROVISIONAL_AFTER`] trips until
    /// the spread is trusted: nearly the whole range rather than a percentile, as a few trips
    /// say little of the tail, but not the one slowest, which among the first trips is often
    /// a connection being opened and would stretch the spacing of the next two dozen. Only the
    /// spacing of a server without burst uses it; without it those trips are spaced from their
    /// answers, a round trip per start: against nginx, 200 creates reached 0.90 of the rate
    /// instead of 0.93, as 32 of them waited about 10 ms more each.
    fn provisional_spread(&self) -> Option<DurationMs> {
        if self.samples.len() < PROVISIONAL_AFTER {
            return None;
        }
        let sorted = &self.sorted;
        Some(sorted[sorted.len() - 2] - sorted[0])
    }

    /// The slack of [`RoundTrips::arrived_by`] from [`PLACED_AFTER`] trips until the spread is
    /// trusted: twice the provisional spread, each read with its clock's slack, plus
    /// [`CLOCK_SLACK`]. The fastest of a few trips lies above the path's fixed part by some of
    /// the range they span; for it to lie above by more than twice what the others span
    /// beyond it, all of them must sit in the slowest part of the path's range. Counted over
    /// 60,000 runs on paths spread evenly over 1.5, 5 and 20 ms each way (the test below runs
    /// a tenth of them): no placement early from 16 trips on, 4 in 28 million from 12 on, a
    /// few hundred from 8 on without the clock's slack inside. Against nginx without burst
    /// told its rate, each start before the fastest trip is trusted waited about 10 ms more
    /// when counted where it was answered.
    fn provisional_slack(&self) -> Option<DurationMs> {
        if self.samples.len() < PLACED_AFTER {
            return None;
        }
        self.provisional_spread()
            .map(|spread| CLOCK_SLACK + spread.saturating_add(CLOCK_SLACK).saturating_mul(2))
    }

    /// A 429 that our own timing explains: some arrival trailed its start by more than the
    /// margin allowed for. Widen it by half (at least 2 ms) for the next few hundred trips.
    pub fn widen(&mut self) {
        let current = self.margin().unwrap_or(0);
        self.widened = self.widened.saturating_add((current / 2).max(2));
        self.since_halved = 0;
    }

    /// The margin to adopt in place of `current`, if it should change: at once when it widens,
    /// and only when it would shrink by a quarter when it narrows, so that a limiter is not
    /// rebuilt on every answer for a millisecond.
    pub fn margin_update(&self, current: DurationMs) -> Option<DurationMs> {
        let m = self.margin()?;
        (m > current || current - m >= (current / 4).max(1)).then_some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(samples: &[DurationMs]) -> RoundTrips {
        let mut r = RoundTrips::default();
        for &s in samples {
            r.record(s);
        }
        r
    }

    /// The ordered copy holds exactly the samples, in order, as they come and go.
    #[test]
    fn the_ordered_samples_follow_the_window() {
        let mut r = RoundTrips::default();
        for i in 0..(SAMPLES as u64 * 3) {
            r.record(10 + (i * 37 + i * i) % 23);
            let mut expected: Vec<DurationMs> = r.samples.iter().copied().collect();
            expected.sort_unstable();
            assert_eq!(r.sorted, expected, "after {} trips", i + 1);
        }
    }

    #[test]
    fn no_margin_before_enough_trips() {
        let r = with(&[30; TRUSTED_AFTER - 1]);
        assert_eq!(r.margin(), None);
        // Placed by the provisional slack: twice a spread of nothing with the clock's slack,
        // and the clock's slack.
        assert_eq!(r.arrived_by(1_000, 1_032), 1_032 - 30 + 3 * CLOCK_SLACK);
        // The whole trip may have been the way there.
        let r = with(&[30; PLACED_AFTER - 1]);
        assert_eq!(r.arrived_by(1_000, 1_032), 1_032);
        assert_eq!(RoundTrips::default().arrived_by(1_000, 1_040), 1_040);
    }

    #[test]
    fn only_a_trip_within_twice_the_spread_is_typical() {
        let mut trips = with(&[10; 32]);
        assert!(!with(&[10; 7]).within_spread(10), "not measured yet");
        let first = with(&[10, 30, 14, 10, 12, 10, 10, 10]);
        assert_eq!(
            first.arrival_spread(),
            Some(2 + CLOCK_SLACK),
            "half of the second slowest less the fastest"
        );
        assert!(first.within_spread(18));
        assert!(!first.within_spread(30), "the one slow trip is an outlier");
        for t in [12, 14, 16, 18] {
            trips.record(t);
        }
        let spread = trips.spread().expect("measured");
        assert!(spread > 0);
        assert!(trips.within_spread(10 + 2 * spread));
        assert!(!trips.within_spread(10 + 2 * spread + 1));
    }

    #[test]
    fn a_calm_network_needs_the_clock_slack_alone() {
        let r = with(&[30; SAMPLES]);
        assert_eq!(r.spread(), Some(0));
        assert_eq!(r.margin(), Some(CLOCK_SLACK));
        // A trip as fast as the fastest arrived by its start (plus the slack).
        assert_eq!(r.arrived_by(1_000, 1_030), 1_000 + CLOCK_SLACK);
    }

    #[test]
    fn the_margin_follows_the_spread_and_shrinks_back() {
        let jittery: Vec<DurationMs> = (0..64).map(|i| 30 + (i * 37 % 41)).collect();
        let mut r = with(&jittery);
        let wide = r.margin().unwrap();
        // Half the 36 ms spread, plus a quarter of it while the floor is young.
        assert!((25..=35).contains(&wide), "{wide}");
        for _ in 0..SAMPLES {
            r.record(31);
        }
        // The floor of 30 is remembered longer than the spread: 1 ms of spread is left, and a
        // quarter of it rounds up.
        assert_eq!(r.margin(), Some(1 + CLOCK_SLACK + 1));
    }

    #[test]
    fn the_margin_widens_at_once_and_narrows_by_quarters() {
        let r = with(&[30; SAMPLES]);
        assert_eq!(r.margin_update(0), Some(1));
        assert_eq!(r.margin_update(1), None);
        // From 20 ms: 1 ms is more than a quarter less.
        assert_eq!(r.margin_update(20), Some(1));
        let mut r = with(&[30; SAMPLES]);
        for i in 0..20 {
            r.record(30 + i);
        }
        let m = r.margin().unwrap();
        assert_eq!(r.margin_update(m - 1), Some(m));
        assert_eq!(r.margin_update(m + 1), None);
    }

    #[test]
    fn the_floor_outlives_the_samples_and_is_renewed() {
        let mut r = with(&[20]);
        for _ in 0..SAMPLES * 2 {
            r.record(40);
        }
        // Still the 20 ms trip: the path's fixed part seldom changes. The spread is 20 ms, the
        // slack a quarter of it while the floor is young.
        assert_eq!(r.arrived_by(1_000, 1_040), 1_020 + 5 + CLOCK_SLACK);
        for _ in 0..SETTLED_AFTER {
            r.record(40);
        }
        // Settled: an eighth, rounded up.
        assert_eq!(r.arrived_by(1_000, 1_040), 1_020 + 3 + CLOCK_SLACK);
        for _ in 0..FLOOR_MEMORY {
            r.record(40);
        }
        // Renewed from the recent trips: the path got slower.
        assert_eq!(r.arrived_by(1_000, 1_040), 1_000 + CLOCK_SLACK);
    }

    #[test]
    fn a_slow_answer_counts_its_request_late() {
        let mut r = with(&[30; SAMPLES]);
        r.record(90);
        // 60 ms slower than the fastest: it may have spent them on the way there.
        assert_eq!(r.arrived_by(1_000, 1_090), 1_060 + CLOCK_SLACK);
    }

    #[test]
    fn a_429_of_our_own_widens_the_margin_for_a_while() {
        let mut r = with(&[30; SAMPLES]);
        r.widen();
        assert_eq!(r.margin(), Some(3));
        for _ in 0..SAMPLES {
            r.record(30);
        }
        assert_eq!(r.margin(), Some(2));
    }

    /// Times read in whole milliseconds, rounded down, for trips of a fixed length that start
    /// at every phase of a millisecond: each request is placed no earlier than its real start
    /// (the frame `arrived_by` answers in when the way there is fixed). Without the clock
    /// slack, some phases placed it up to 1 ms early.
    #[test]
    fn whole_millisecond_clocks_never_place_an_arrival_early() {
        let floor = |t: f64| t.floor() as Millis;
        for trip_us in [30_000_u64, 30_300, 30_999] {
            let trip = trip_us as f64 / 1_000.0;
            let starts: Vec<f64> = (0..SAMPLES as u64 * 2)
                .map(|i| 1_000.0 + i as f64 * 7.0 + (i * 37 % 100) as f64 / 100.0)
                .collect();
            let mut r = RoundTrips::default();
            for &s in &starts {
                r.record(floor(s + trip) - floor(s));
            }
            for phase in 0..100 {
                let s = 5_000.0 + f64::from(phase) / 100.0;
                let placed = r.arrived_by(floor(s), floor(s + trip));
                assert!(
                    placed as f64 >= s,
                    "a {trip} ms trip started at {s} placed at {placed}"
                );
            }
        }
    }

    /// A small deterministic generator of numbers uniform in [0, 1), from `seed`.
    fn uniform_from(mut seed: u64) -> impl FnMut() -> f64 {
        move || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 11) as f64 / (1_u64 << 53) as f64
        }
    }

    /// The way there and the way back vary on their own (a browser's network process, its
    /// event loop): a request fast one way and another fast the other way make a pair faster
    /// than any trip measured. With the floor taken over one window of samples, rounding the
    /// slack's share of a spread of a millisecond or two down to nothing let such pairs place
    /// an arrival too early.
    #[test]
    fn trips_fast_one_way_each_are_covered() {
        let floor = |t: f64| t.floor() as Millis;
        let mut uniform = uniform_from(0x2545_f491);
        let mut early = 0;
        for _ in 0..200 {
            let mut r = RoundTrips::default();
            let mut at = 1_000.0;
            let mut answered = Vec::new();
            for _ in 0..SAMPLES {
                let (there, back) = (0.2 + 1.5 * uniform(), 30.0 + 1.5 * uniform());
                at += 3.0 + uniform();
                r.record(floor(at + there + back) - floor(at));
                answered.push((at, there, back));
            }
            for &(start, there, back) in &answered {
                let placed = r.arrived_by(floor(start), floor(start + there + back));
                let new_there = 0.2 + 1.5 * uniform();
                // A new start placed a window after `placed` arrives a window after this one.
                if (placed as f64) + new_there < start + there {
                    early += 1;
                }
            }
        }
        assert_eq!(early, 0, "arrivals placed early in 12,800 pairs");
    }

    /// The same between [`PLACED_AFTER`] and [`TRUSTED_AFTER`] trips, where only a few
    /// trips say where the path's fixed part lies: on paths spread evenly over 1.5, 5 and 20
    /// ms each way (30 ms fixed), no request whose trip is already recorded is placed earlier
    /// than it can have arrived, after any number of trips in between.
    #[test]
    fn the_first_few_trips_place_no_arrival_early() {
        let floor = |t: f64| t.floor() as Millis;
        let mut uniform = uniform_from(0x9e37_79b9);
        let mut pairs = 0;
        let mut early = Vec::new();
        for jitter in [1.5, 5.0, 20.0] {
            for _ in 0..2_000 {
                let mut r = RoundTrips::default();
                let mut at = 1_000.0;
                let mut trips = Vec::new();
                for _ in 0..TRUSTED_AFTER - 1 {
                    let (there, back) = (15.0 + jitter * uniform(), 15.0 + jitter * uniform());
                    at += 3.0 + uniform();
                    r.record(floor(at + there + back) - floor(at));
                    trips.push((at, there, back));
                    if r.len() < PLACED_AFTER {
                        continue;
                    }
                    for &(start, there, back) in &trips {
                        pairs += 1;
                        let placed = r.arrived_by(floor(start), floor(start + there + back));
                        // A start placed at `placed` arrives no sooner than the fastest way
                        // there: it must not be sooner than this trip's arrival.
                        if placed as f64 + 15.0 < start + there {
                            early.push((jitter, r.len(), placed as f64 + 15.0 - start - there));
                        }
                    }
                }
            }
        }
        assert!(pairs > 1_000_000, "{pairs}");
        assert!(
            early.is_empty(),
            "{} of {pairs} placed early: {:?}",
            early.len(),
            &early[..early.len().min(5)]
        );
    }
}
