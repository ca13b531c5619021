//! The IETF fields (draft-ietf-httpapi-ratelimit-headers): `RateLimit` with
//! `RateLimit-Policy`, and the older separate `RateLimit-Limit / -Remaining / -Reset`.
//!
//! Not a row of the families table (`families`): these are structured fields whose items
//! name the policy they report on, so reading them is pairing names, not looking up fields.

use std::cmp::Ordering;

use super::families::{read_row, Family, ResourceAt, WindowFrom};
use super::quotas::{limiter_window, most_restrictive_state};
use super::structured::*;
use super::values::*;
use super::{non_empty, Quota};
use crate::config::Window;
use crate::time::{DurationMs, Millis};

/// `RateLimit: "default";r=50;t=30` (current IETF draft) and the older combined dictionary
/// `RateLimit: limit=100, remaining=50, reset=5`.
///
/// Why: this field carries the live state; it names the policy it refers to, so the limit and
/// window come from the matching `RateLimit-Policy` entry. When it names several, the one that
/// will block us first is the one to respect, and every declared policy goes to the limiter as
/// a window of its own.
///
/// Pairing: a limit belongs to the policy of the same name. One policy and one limit belong
/// together whatever their names: Cloudflare's API sends `RateLimit: "default";r=50;t=30` with
/// `RateLimit-Policy: "burst";q=100;w=60`, and there is nothing else the state could be about.
/// With more of either, only names pair them; a limit that names no policy still reports its
/// state (and its own `w`, if it has one), just without a limit.
///
/// A policy counting anything but requests (`qu="content-bytes"`, `qu="concurrent-requests"`)
/// is left out, and so is its limit: neither its quota nor its remaining is a number of
/// requests, and read as one it would retune the limiter to a rate the server never set.
pub(super) fn ietf_ratelimit_field(
    h: &Headers,
    policies: &[Policy],
    base: Millis,
) -> Option<Quota> {
    let field = h.joined("ratelimit")?;
    let members = parse_list(&field);

    // Older draft: a dictionary. Only its known keys count, so junk doesn't "match".
    let mut dict = Quota::default();
    for (key, value, member) in members
        .iter()
        .filter_map(|m| m.dict_entry().map(|(k, v)| (k, v, m)))
    {
        if key.eq_ignore_ascii_case("limit") {
            dict.limit = dict.limit.or_else(|| parse_count(value));
            dict.window_ms = dict
                .window_ms
                .or_else(|| member.param("w").and_then(parse_window));
        } else if key.eq_ignore_ascii_case("remaining") {
            dict.remaining = dict.remaining.or_else(|| parse_count(value));
        } else if key.eq_ignore_ascii_case("reset") {
            dict.reset_after_ms = dict.reset_after_ms.or_else(|| parse_reset(value, base));
        }
    }
    if let Some(mut quota) = non_empty(dict) {
        if quota.window_ms.is_none() {
            quota.window_ms = quota.limit.and_then(|l| window_of_quota(policies, l));
        }
        quota.windows = declared_windows(policies);
        return Some(quota);
    }

    // Current draft: a list of items, each naming a policy.
    let mut items = Vec::new();
    for m in &members {
        if m.dict_entry().is_none() {
            items.push(m);
        }
    }
    let only_pair = items.len() == 1 && policies.len() == 1;
    let mut candidates = Vec::new();
    for m in items {
        let name = m.name();
        let policy = name
            .as_deref()
            .and_then(|n| policies.iter().find(|p| p.name.as_deref() == Some(n)))
            .or_else(|| policies.first().filter(|_| only_pair));
        if policy.is_some_and(|p| !p.counts_requests) {
            continue;
        }
        // Draft 12 may rename the reset `t` to `w`, where drafts 7 to 11 let a limit carry its
        // window as `w`. The rule: beside a `t`, `w` is the window (as every server sending
        // both means it); alone, it is the reset. Read that way a `w` is never taken for a
        // window it might not be: a reset taken for a window would overstate the rate (limit
        // per a shorter window), a window taken for a reset only waits longer.
        let (reset, limit_window) = match m.param("t") {
            Some(t) => (Some(t), m.param("w")),
            None => (m.param("w"), None),
        };
        candidates.extend(non_empty(Quota {
            limit: policy.and_then(|p| p.quota),
            // Later drafts call the remaining quota "available"; `r` first, as most send it.
            remaining: m.param("r").or_else(|| m.param("a")).and_then(parse_count),
            reset_after_ms: reset.and_then(|t| parse_reset(t, base)),
            // The policy declares the window; a window on the limit is the fallback.
            window_ms: policy
                .and_then(|p| p.window_ms)
                .or_else(|| limit_window.and_then(parse_window)),
            windows: Vec::new(),
        }));
    }
    let mut quota = most_restrictive_state(candidates.into_iter())?;
    quota.windows = declared_windows(policies);
    Some(quota)
}

/// What this request cost against its policies, where the server says: the `c` parameter of
/// a `RateLimit` item (draft 12), for items whose policy counts requests (or is not declared).
/// Of several, the largest: the cost that would run a quota out first.
pub(super) fn ietf_cost(h: &Headers, policies: &[Policy]) -> Option<u64> {
    let field = h.joined("ratelimit")?;
    let mut cost = None;
    for m in parse_list(&field) {
        if m.dict_entry().is_some() {
            continue;
        }
        let name = m.name();
        let other_unit = name
            .as_deref()
            .and_then(|n| policies.iter().find(|p| p.name.as_deref() == Some(n)))
            .is_some_and(|p| !p.counts_requests);
        if other_unit {
            continue;
        }
        if let Some(c) = m.param("c").and_then(parse_count) {
            cost = cost.max(Some(c));
        }
    }
    cost
}

/// The older drafts' `RateLimit-Limit / -Remaining / -Reset` as a row of the families table
/// (`families`): the plain X-RateLimit names under another prefix, without `-Used`. The reset
/// is delta seconds by the drafts and epoch seconds at GitLab, hence `Auto`.
pub(super) const DRAFT_COUNTERS: Family = Family {
    prefix: "ratelimit-",
    resource: ResourceAt::None,
    limit: "limit",
    remaining: "remaining",
    used: "",
    resets: &[("reset", ResetForm::Auto)],
    window: WindowFrom::LimitList,
    not_resources: &[],
};

/// `RateLimit-Limit / -Remaining / -Reset`, the separate fields of the older IETF drafts.
///
/// Why: many servers froze on an early draft. Its limit may be a list carrying the policy
/// (`100, 100;w=60`), and later drafts of it paired the fields with `RateLimit-Policy: 100;w=60`;
/// either gives the window.
pub(super) fn ietf_draft_counters(h: &Headers, policies: &[Policy], base: Millis) -> Option<Quota> {
    let mut quota = read_row(&DRAFT_COUNTERS, h, base, "")?;
    if quota.window_ms.is_none() {
        quota.window_ms = quota.limit.and_then(|l| window_of_quota(policies, l));
    }
    // The policies beside the limit (`100, 100;w=60, 1000;w=3600`) came from `counters`.
    quota.windows.extend(declared_windows(policies));
    Some(quota)
}

/// `RateLimit-Policy` without any live state.
///
/// Why: the policy alone still tells the limiter the rate to keep to. With several, the lowest
/// sustained rate (quota / window) is the one that binds in the long run.
pub(super) fn ietf_policies_alone(policies: &[Policy]) -> Option<Quota> {
    policies
        .iter()
        .filter(|p| p.counts_requests && p.quota.is_some())
        .min_by(|a, b| compare_rates(a, b))
        .map(|p| Quota {
            limit: p.quota,
            remaining: None,
            reset_after_ms: None,
            window_ms: p.window_ms,
            windows: declared_windows(policies),
        })
}

/// One entry of `RateLimit-Policy`.
#[derive(Debug)]
pub(super) struct Policy {
    /// The name the `RateLimit` field refers to it by (current draft only).
    name: Option<String>,
    quota: Option<u64>,
    window_ms: Option<DurationMs>,
    /// The quota unit (`qu`) is requests, the default; other units are kept only so that the
    /// limit naming them is recognised and left out.
    counts_requests: bool,
}

/// `RateLimit-Policy` in both forms: current `"default";q=100;w=60` (a named item) and older
/// `100;w=60` (the quota is the item itself).
pub(super) fn ietf_policies(h: &Headers) -> Vec<Policy> {
    let Some(field) = h.joined("ratelimit-policy") else {
        return Vec::new();
    };
    // Plain loops in this module: each filtered or mapped `collect` is several generic
    // functions in the worker's wasm.
    let mut policies = Vec::new();
    for m in parse_list(&field) {
        if m.dict_entry().is_some() {
            continue;
        }
        let window_ms = m.param("w").and_then(parse_window);
        // An unreadable unit is not known to be requests: the careful reading is "not ours".
        let counts_requests = m
            .param("qu")
            .is_none_or(|u| sf_string(u).is_some_and(|u| u.eq_ignore_ascii_case("requests")));
        let policy = match m.bare_int() {
            Some(quota) => Policy {
                name: None,
                quota: Some(quota),
                window_ms,
                counts_requests,
            },
            None => Policy {
                name: m.name(),
                quota: m.param("q").and_then(parse_count),
                window_ms,
                counts_requests,
            },
        };
        // A named policy is kept even when it says nothing usable, so that the limit naming it
        // pairs with it instead of with a stranger.
        if policy.name.is_some() || policy.quota.is_some() || policy.window_ms.is_some() {
            policies.push(policy);
        }
    }
    policies
}

/// The request-count policies that declare both a quota and a window, as limiter windows.
pub(super) fn declared_windows(policies: &[Policy]) -> Vec<Window> {
    let mut windows = Vec::new();
    for p in policies {
        if let (true, Some(quota), Some(length_ms)) = (p.counts_requests, p.quota, p.window_ms) {
            windows.extend(limiter_window(quota, length_ms));
        }
    }
    windows
}

/// The window of the policy with this quota, for the older forms that report a bare limit.
pub(super) fn window_of_quota(policies: &[Policy], limit: u64) -> Option<DurationMs> {
    policies
        .iter()
        .filter(|p| p.counts_requests && p.quota == Some(limit))
        .find_map(|p| p.window_ms)
}

/// Orders policies by sustained rate (quota / window), lowest first; policies without a window
/// can't be compared by rate and come after those with one, by quota.
pub(super) fn compare_rates(a: &Policy, b: &Policy) -> Ordering {
    match (a.quota, a.window_ms, b.quota, b.window_ms) {
        (Some(qa), Some(wa), Some(qb), Some(wb)) => {
            // qa / wa < qb / wb without division or overflow.
            (u128::from(qa) * u128::from(wb)).cmp(&(u128::from(qb) * u128::from(wa)))
        }
        (_, Some(_), _, None) => Ordering::Less,
        (_, None, _, Some(_)) => Ordering::Greater,
        _ => a.quota.cmp(&b.quota),
    }
}

#[cfg(test)]
mod tests;
