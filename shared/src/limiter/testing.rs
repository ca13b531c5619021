//! What the limiter's tests share: a caller that starts as soon as allowed, a count of the
//! starts in any placement of a window, a save and restore through both codecs, and the
//! operations the property tests play.

use proptest::prelude::*;

use super::Limiter;
use crate::config::{Algorithm, Window};
use crate::time::{DurationMs, Millis};

/// A realistic wall-clock instant, far from the epoch.
pub(super) const T0: Millis = 1_700_000_000_000;

pub(super) fn w(limit: u32, length_ms: DurationMs) -> Window {
    Window { limit, length_ms }
}

pub(super) fn limiter(algorithm: Algorithm, windows: &[Window], u: f64) -> Limiter {
    Limiter::new(algorithm, windows, u).unwrap()
}

/// Starts as soon as allowed, from `from` on, `count` times; returns the start times.
pub(super) fn greedy(lim: &mut Limiter, from: Millis, count: usize) -> Vec<Millis> {
    let mut at = from;
    (0..count)
        .map(|_| {
            at = lim.next_start_at(at);
            lim.record_start(at);
            at
        })
        .collect()
}

/// Greedy starts until `until` (exclusive).
pub(super) fn greedy_until(lim: &mut Limiter, from: Millis, until: Millis) -> Vec<Millis> {
    let mut out = vec![];
    let mut at = from;
    loop {
        at = lim.next_start_at(at);
        if at >= until {
            return out;
        }
        lim.record_start(at);
        out.push(at);
    }
}

/// Most starts in any half-open interval `[x, x + length)`; `starts` sorted.
pub(super) fn max_in_any_window(starts: &[Millis], length: DurationMs) -> usize {
    let mut first = 0;
    let mut most = 0;
    for (i, &s) in starts.iter().enumerate() {
        while starts[first] + length <= s {
            first += 1;
        }
        most = most.max(i - first + 1);
    }
    most
}

pub(super) fn roundtrip(lim: &Limiter) -> Limiter {
    // The worker's codec must agree with serde on every state a test reaches.
    crate::json::testing::same_as_serde(lim);
    serde_json::from_str(&serde_json::to_string(lim).unwrap()).unwrap()
}

pub(super) const ALL: [Algorithm; 4] = [
    Algorithm::SlidingLog,
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::FixedWindow,
];

#[derive(Clone, Debug)]
pub(super) enum Op {
    /// Wants to start this long after the previous event.
    Start(u64),
    /// Pauses this long, then `start_empty`.
    Empty(u64),
    /// Saves and restores the limiter.
    Save,
    Retune(u32, u64),
    Align(u64),
    StepBack(u64),
}

pub(super) fn windows_strategy(
    lengths: std::ops::RangeInclusive<u64>,
) -> impl Strategy<Value = Vec<Window>> {
    prop::collection::vec((1u32..=200, lengths), 1..=3)
        .prop_map(|ws| ws.into_iter().map(|(l, len)| w(l, len)).collect())
}

/// Utilizations with at most four decimals, which survive JSON exactly; often exactly 1,
/// where no stretch hides an off-by-one.
pub(super) fn utilization_strategy() -> impl Strategy<Value = f64> {
    prop_oneof![
        1 => Just(1.0),
        2 => (1u32..=10_000).prop_map(|k| f64::from(k) / 10_000.0),
    ]
}

/// A gap between events: mostly short (continuous demand), sometimes long.
pub(super) fn gap() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0u64..20, 1 => 0u64..6000]
}

/// Starts, pauses and saves: what the exactness properties allow.
pub(super) fn plain_ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        10 => gap().prop_map(Op::Start),
        1 => gap().prop_map(Op::Empty),
        1 => Just(Op::Save),
    ];
    prop::collection::vec(op, 1..400)
}

/// Everything, clock steps back included.
pub(super) fn any_ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        10 => gap().prop_map(Op::Start),
        1 => gap().prop_map(Op::Empty),
        1 => Just(Op::Save),
        1 => (0u32..=200, 0u64..=5000).prop_map(|(l, len)| Op::Retune(l, len)),
        1 => (0u64..10_000).prop_map(Op::Align),
        1 => (0u64..10_000).prop_map(Op::StepBack),
    ];
    prop::collection::vec(op, 1..300)
}

/// What a caller did: its starts, and for each `start_empty`, when it was and how many
/// starts came before it.
#[derive(Debug, Default)]
pub(super) struct Played {
    pub(super) starts: Vec<Millis>,
    pub(super) pauses: Vec<(Millis, usize)>,
}

/// Plays `ops` on `lim` from `origin`, with a caller that starts at
/// `max(desired, next_start_at)`. Saves are skipped when `saves` is false.
pub(super) fn play(lim: &mut Limiter, origin: Millis, ops: &[Op], saves: bool) -> Played {
    let mut clock = origin;
    let mut played = Played::default();
    for op in ops {
        match *op {
            Op::Start(gap) => {
                let desired = clock + gap;
                let at = lim.next_start_at(desired);
                assert!(at >= desired);
                lim.record_start(at);
                played.starts.push(at);
                clock = at;
            }
            Op::Empty(gap) => {
                clock += gap;
                lim.start_empty(clock);
                played.pauses.push((clock, played.starts.len()));
            }
            Op::Save if saves => *lim = roundtrip(lim),
            Op::Save => {}
            Op::Retune(limit, length_ms) => lim.retune(w(limit, length_ms)),
            Op::Align(ahead) => lim.align_to(clock + ahead),
            Op::StepBack(d) => clock = clock.saturating_sub(d),
        }
    }
    played
}
