//! What several header spellings share once read: a count with its declared windows, a quota
//! as a limiter window, and the state closest to blocking among several. Below both the IETF
//! reader (`ietf`) and the families' (`families`), so that neither imports the other for it.

use super::structured::*;
use super::values::*;
use super::Quota;
use crate::config::Window;
use crate::time::DurationMs;

/// A `*-Limit` value: a plain count, or the early-draft list `100, 100;w=60, 1000;w=3600`
/// whose first member is the limit in force and the rest describe policies (returned as
/// windows: the server enforces them all).
pub(super) fn parse_limit_list(v: &str) -> (Option<u64>, Option<DurationMs>, Vec<Window>) {
    let members = parse_list(v);
    let Some(limit) = members.first().and_then(Member::bare_int) else {
        return (None, None, Vec::new());
    };
    let window = members
        .iter()
        .filter(|m| m.bare_int() == Some(limit))
        .find_map(|m| m.param("w").and_then(parse_window));
    let mut windows = Vec::new();
    for m in &members {
        if let (Some(quota), Some(length_ms)) = (m.bare_int(), m.param("w").and_then(parse_window))
        {
            windows.extend(limiter_window(quota, length_ms));
        }
    }
    (Some(limit), window, windows)
}

/// A quota as a limiter window: a zero quota is no rate (the budget pauses for that instead),
/// and one beyond `u32` is as good as unlimited.
pub(super) fn limiter_window(quota: u64, length_ms: DurationMs) -> Option<Window> {
    (quota > 0).then(|| Window {
        limit: u32::try_from(quota).unwrap_or(u32::MAX),
        length_ms,
    })
}

/// Of several live quotas, the one that blocks first: fewest remaining, then longest reset.
pub(super) fn most_restrictive_state(candidates: impl Iterator<Item = Quota>) -> Option<Quota> {
    candidates.min_by(|a, b| {
        let remaining = |q: &Quota| q.remaining.unwrap_or(u64::MAX);
        remaining(a)
            .cmp(&remaining(b))
            .then_with(|| b.reset_after_ms.cmp(&a.reset_after_ms))
    })
}
