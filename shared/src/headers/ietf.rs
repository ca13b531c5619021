//! The IETF fields (draft-ietf-httpapi-ratelimit-headers): `RateLimit` with
//! `RateLimit-Policy`, and the older separate `RateLimit-Limit / -Remaining / -Reset`.
//!
//! Not a row of the families table (`families`): these are structured fields whose items
//! name the policy they report on, so reading them is pairing names, not looking up fields.

use std::cmp::Ordering;

use super::families::{read_row, Family, ResourceAt, WindowFrom};
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

/// A quota as a limiter window: a zero quota is no rate (the budget pauses for that instead),
/// and one beyond `u32` is as good as unlimited.
pub(super) fn limiter_window(quota: u64, length_ms: DurationMs) -> Option<Window> {
    (quota > 0).then(|| Window {
        limit: u32::try_from(quota).unwrap_or(u32::MAX),
        length_ms,
    })
}

/// The window of the policy with this quota, for the older forms that report a bare limit.
pub(super) fn window_of_quota(policies: &[Policy], limit: u64) -> Option<DurationMs> {
    policies
        .iter()
        .filter(|p| p.counts_requests && p.quota == Some(limit))
        .find_map(|p| p.window_ms)
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
mod tests {
    use crate::headers::test_support::*;
    use crate::headers::*;

    // --- IETF structured fields ---------------------------------------------------------

    #[test]
    fn ietf_single_policy() {
        let q = quota(
            200,
            &[
                ("RateLimit-Policy", "\"default\";q=100;w=60"),
                ("RateLimit", "\"default\";r=50;t=30"),
            ],
            0,
        );
        assert_eq!(
            q,
            Quota {
                limit: Some(100),
                remaining: Some(50),
                reset_after_ms: Some(30 * SECOND),
                window_ms: Some(60 * SECOND),
                windows: vec![win(100, 60)]
            }
        );
    }

    #[test]
    fn ietf_multiple_policies_report_the_one_ratelimit_names() {
        let q = quota(
            200,
            &[
                (
                    "RateLimit-Policy",
                    "\"burst\";q=10;w=1, \"day\";q=1000;w=86400",
                ),
                ("RateLimit", "\"day\";r=900;t=3600"),
            ],
            0,
        );
        assert_eq!(
            q,
            Quota {
                limit: Some(1000),
                remaining: Some(900),
                reset_after_ms: Some(3600 * SECOND),
                window_ms: Some(86_400 * SECOND),
                windows: vec![win(10, 1), win(1000, 86_400)]
            }
        );
    }

    #[test]
    fn ietf_several_named_states_report_the_most_restrictive() {
        // Policies split over two header lines, names as tokens and strings.
        let q = quota(
            200,
            &[
                ("RateLimit-Policy", "burst;q=10;w=1"),
                ("ratelimit-policy", "\"hour\";q=1000;w=3600"),
                ("RateLimit", "\"burst\";r=9;t=1, hour;r=2;t=1800"),
            ],
            0,
        );
        assert_eq!(q.limit, Some(1000));
        assert_eq!(q.remaining, Some(2));
        assert_eq!(q.window_ms, Some(3600 * SECOND));
    }

    #[test]
    fn ietf_policies_alone_report_the_lowest_rate() {
        let q = quota(
            200,
            &[(
                "RateLimit-Policy",
                "\"burst\";q=10;w=1, \"hour\";q=1000;w=3600",
            )],
            0,
        );
        assert_eq!(q.limit, Some(1000));
        assert_eq!(q.window_ms, Some(3600 * SECOND));
        assert_eq!(q.remaining, None);
    }

    #[test]
    fn ietf_state_naming_an_unknown_policy_keeps_its_state() {
        let q = quota(200, &[("RateLimit", "\"x\";r=3;t=4")], 0);
        assert_eq!(
            q,
            Quota {
                limit: None,
                remaining: Some(3),
                reset_after_ms: Some(4 * SECOND),
                window_ms: None,
                windows: vec![]
            }
        );
    }

    #[test]
    fn ietf_policy_names_may_contain_commas_semicolons_and_escapes() {
        let q = quota(
            200,
            &[
                (
                    "RateLimit-Policy",
                    r#""a,b;\"c\"";q=5;w=10, "other";q=1;w=1"#,
                ),
                ("RateLimit", r#""a,b;\"c\"";r=4;t=2"#),
            ],
            0,
        );
        assert_eq!(q.limit, Some(5));
        assert_eq!(q.remaining, Some(4));
        assert_eq!(q.window_ms, Some(10 * SECOND));
    }

    #[test]
    fn ietf_older_combined_form() {
        let q = quota(
            200,
            &[
                ("RateLimit", "limit=100, remaining=50, reset=5"),
                ("RateLimit-Policy", "100;w=60"),
            ],
            0,
        );
        assert_eq!(
            q,
            Quota {
                limit: Some(100),
                remaining: Some(50),
                reset_after_ms: Some(5 * SECOND),
                window_ms: Some(60 * SECOND),
                windows: vec![win(100, 60)]
            }
        );
    }

    #[test]
    fn ietf_cloudflare_lone_limit_pairs_with_the_lone_policy_whatever_its_name() {
        // As Cloudflare's API sends them: the names differ, but there is one of each.
        let q = quota(
            200,
            &[
                ("Ratelimit", "\"default\";r=50;t=30"),
                ("Ratelimit-Policy", "\"burst\";q=100;w=60"),
            ],
            0,
        );
        assert_eq!(
            q,
            Quota {
                limit: Some(100),
                remaining: Some(50),
                reset_after_ms: Some(30 * SECOND),
                window_ms: Some(60 * SECOND),
                windows: vec![win(100, 60)],
            }
        );
    }

    #[test]
    fn ietf_unmatched_limit_among_several_policies_keeps_only_its_state() {
        let q = quota(
            200,
            &[
                (
                    "RateLimit-Policy",
                    "\"burst\";q=100;w=60, \"daily\";q=1000;w=86400",
                ),
                ("RateLimit", "\"default\";r=3;t=4"),
            ],
            0,
        );
        assert_eq!(
            q,
            Quota {
                limit: None,
                remaining: Some(3),
                reset_after_ms: Some(4 * SECOND),
                window_ms: None,
                // The declarations still hold, whichever state this is.
                windows: vec![win(100, 60), win(1000, 86_400)],
            }
        );
    }

    #[test]
    fn ietf_every_declared_policy_becomes_a_window_and_the_closest_state_is_reported() {
        // The draft's own example of two policies, both reported on.
        let q = quota(
            200,
            &[
                (
                    "RateLimit-Policy",
                    "\"burst\";q=100;w=60,\"daily\";q=1000;w=86400",
                ),
                ("RateLimit", "\"burst\";r=80;t=10, \"daily\";r=5;t=7200"),
            ],
            0,
        );
        assert_eq!(
            q,
            Quota {
                limit: Some(1000),
                remaining: Some(5),
                reset_after_ms: Some(7200 * SECOND),
                window_ms: Some(86_400 * SECOND),
                windows: vec![win(100, 60), win(1000, 86_400)],
            }
        );
    }

    #[test]
    fn ietf_quotas_in_other_units_are_not_request_counts() {
        let policy = concat!(
            "\"bytes\";q=65535;qu=\"content-bytes\";w=10, ",
            "\"conc\";q=5;qu=\"concurrent-requests\", ",
            "\"hourly\";q=1000;qu=\"requests\";w=3600"
        );
        // The exhausted byte budget is neither the quota reported nor an exhausted one.
        let s = read(
            403,
            &[
                ("RateLimit-Policy", policy),
                ("RateLimit", "\"bytes\";r=0;t=5, \"hourly\";r=900;t=1800"),
            ],
            0,
        );
        assert!(!s.rate_limited);
        assert_eq!(
            s.quota,
            Some(Quota {
                limit: Some(1000),
                remaining: Some(900),
                reset_after_ms: Some(1800 * SECOND),
                window_ms: Some(3600 * SECOND),
                windows: vec![win(1000, 3600)],
            })
        );
        // Alone, a byte policy says nothing about requests, nor does the limit paired with it.
        let bytes_only = [
            (
                "RateLimit-Policy",
                "\"bytes\";q=65535;qu=\"content-bytes\";w=10",
            ),
            ("RateLimit", "\"default\";r=100;t=5"),
        ];
        assert_eq!(read(200, &bytes_only, 0).quota, None);
        assert_eq!(read(200, &bytes_only[..1], 0).quota, None);
        // A token unit and any case are the same unit; an unreadable one is not requests.
        let q = quota(200, &[("RateLimit-Policy", "\"a\";q=5;qu=Requests;w=1")], 0);
        assert_eq!(q.limit, Some(5));
        let s = read(
            200,
            &[("RateLimit-Policy", "\"a\";q=5;qu=\"requests;w=1")],
            0,
        );
        assert_eq!(s.quota, None);
    }

    #[test]
    fn ietf_later_draft_available_and_limit_window_are_read() {
        let q = quota(200, &[("RateLimit", "\"default\";a=50;t=30;w=60")], 0);
        assert_eq!(
            q,
            Quota {
                limit: None,
                remaining: Some(50),
                reset_after_ms: Some(30 * SECOND),
                window_ms: Some(60 * SECOND),
                windows: vec![],
            }
        );
        // The policy's window wins over the limit's; the limit's fills in for a policy without.
        let q = quota(
            200,
            &[
                ("RateLimit-Policy", "\"d\";q=100;w=60, \"e\";q=10"),
                ("RateLimit", "\"d\";r=7;t=3;w=10, \"e\";a=9;t=1;w=2"),
            ],
            0,
        );
        assert_eq!((q.limit, q.remaining), (Some(100), Some(7)));
        assert_eq!(q.window_ms, Some(60 * SECOND));
        let q = quota(
            200,
            &[
                ("RateLimit-Policy", "\"e\";q=10"),
                ("RateLimit", "\"e\";a=9;t=1;w=2"),
            ],
            0,
        );
        assert_eq!((q.limit, q.window_ms), (Some(10), Some(2 * SECOND)));
        // `r` is read first where a server sends both.
        let q = quota(200, &[("RateLimit", "\"d\";a=1;r=2")], 0);
        assert_eq!(q.remaining, Some(2));
    }

    #[test]
    fn ietf_partition_keys_and_unknown_parameters_are_ignored() {
        let q = quota(
            200,
            &[
                (
                    "RateLimit-Policy",
                    "\"peruser\";q=100;w=60;pk=:cHJvamVjdDEyMw==:;x-tier=\"gold\"",
                ),
                (
                    "RateLimit",
                    "\"peruser\";r=40;t=20;pk=:cHJvamVjdDEyMw==:;flag;z=?1",
                ),
            ],
            0,
        );
        assert_eq!(
            q,
            Quota {
                limit: Some(100),
                remaining: Some(40),
                reset_after_ms: Some(20 * SECOND),
                window_ms: Some(60 * SECOND),
                windows: vec![win(100, 60)],
            }
        );
    }

    #[test]
    fn ietf_429_without_retry_after_waits_for_the_exhausted_policy() {
        let s = read(
            429,
            &[
                (
                    "RateLimit-Policy",
                    "\"burst\";q=100;w=60, \"daily\";q=1000;w=86400",
                ),
                ("RateLimit", "\"burst\";r=0;t=12, \"daily\";r=400;t=7200"),
            ],
            0,
        );
        assert!(s.rate_limited);
        assert_eq!(s.retry_after_ms, Some(12 * SECOND));
    }

    #[test]
    fn ietf_draft_12_available_reset_as_w_and_cost() {
        // Draft 12's spellings: `a` for the remaining, `w` for the reset, `c` for the cost.
        let s = read(
            200,
            &[
                ("RateLimit-Policy", "\"default\";q=100;w=60"),
                ("RateLimit", "\"default\";a=50;w=30;c=2"),
            ],
            0,
        );
        assert_eq!(
            s.quota,
            Some(Quota {
                limit: Some(100),
                remaining: Some(50),
                reset_after_ms: Some(30 * SECOND),
                window_ms: Some(60 * SECOND),
                windows: vec![win(100, 60)],
            })
        );
        assert_eq!(s.cost, Some(2));
        // Without a policy, a lone `w` is the reset and no window: taken for a window, a reset
        // would overstate the rate.
        let q = quota(200, &[("RateLimit", "\"x\";r=5;w=30")], 0);
        assert_eq!(
            (q.remaining, q.reset_after_ms, q.window_ms),
            (Some(5), Some(30 * SECOND), None)
        );
        // Beside a `t`, `w` stays the window of drafts 7 to 11.
        let q = quota(200, &[("RateLimit", "\"x\";r=5;t=10;w=30")], 0);
        assert_eq!(
            (q.reset_after_ms, q.window_ms),
            (Some(10 * SECOND), Some(30 * SECOND))
        );
        // An exhausted quota's `w` is the back-off of a bare 429.
        let s = read(429, &[("RateLimit", "\"x\";a=0;w=12")], 0);
        assert_eq!(s.retry_after_ms, Some(12 * SECOND));
        // The largest cost among request policies; a byte policy's cost is not a request's.
        let s = read(
            200,
            &[
                (
                    "RateLimit-Policy",
                    "\"b\";q=1000;qu=\"content-bytes\";w=1, \"r\";q=10;w=1",
                ),
                (
                    "RateLimit",
                    "\"b\";r=500;t=1;c=400, \"r\";r=9;t=1;c=3, r;c=x",
                ),
            ],
            0,
        );
        assert_eq!(s.cost, Some(3));
        assert_eq!(read(200, &[("RateLimit", "\"x\";r=5;c=-1")], 0).cost, None);
    }
}
