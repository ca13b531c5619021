//! Header adapters: what the server said about its rate limit.
//!
//! Servers describe the same few facts (how many requests, how many left, when it resets, how
//! long to back off) in half a dozen spellings. Each adapter below reads one spelling and yields
//! the one `Quota` shape, so the engine never has to know which vendor it is talking to.
//!
//! The spellings read, in the order their quota is preferred (see `read_signal`):
//!
//! - `RateLimit: "default";r=50;t=30` with `RateLimit-Policy: "default";q=100;w=60`: the IETF
//!   structured fields (draft-ietf-httpapi-ratelimit-headers 7 to 12). Policy parameters `q`
//!   (quota), `qu` (quota unit), `w` (window), `pk` (partition key, not needed here); limit
//!   parameters `r` (remaining; `a`, "available", in later drafts), `t` (reset) and `w`.
//! - `RateLimit: limit=100, remaining=50, reset=5`: the older combined dictionary.
//! - `RateLimit-Limit / -Remaining / -Reset` (drafts 0 to 6), the limit optionally a list
//!   `100, 100;w=60`, or paired with the old-form `RateLimit-Policy: 100;w=60`.
//! - `RateLimit-Policy` alone.
//! - `X-RateLimit-Limit / -Remaining / -Reset / -Used / -Resource` (GitHub and most others).
//! - `X-Rate-Limit-Limit / -Remaining / -Reset` (Twitter/X and its imitators).
//! - `X-Shopify-Shop-Api-Call-Limit: 32/40`.
//!
//! And for how long to back off: `Retry-After`, then (once the response is a rate limit)
//! `X-RateLimit-Retry-After`, then the reset of the quotas above.
//!
//! Everything here reads text from the network, so nothing may panic: numbers are parsed by hand
//! (no floats, no signs), arithmetic saturates, and every duration is capped before it leaves.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::config::Window;
use crate::time::{DurationMs, Millis};

/// The longest wait (`retry_after_ms`, `reset_after_ms`) a response can impose. A server that
/// asks for more is more likely confused (or a misread epoch) than serious, and a queue parked
/// for a week looks broken; after a day we simply ask again.
pub const MAX_WAIT_MS: DurationMs = 24 * 60 * 60 * 1000;

/// The longest quota window we believe. Monthly quotas are real, so this is longer than
/// `MAX_WAIT_MS`; a longer window is dropped rather than clamped, because a clamped window would
/// overstate the allowed rate (limit / window) that the limiter is retuned to.
pub const MAX_WINDOW_MS: DurationMs = 31 * 24 * 60 * 60 * 1000;

/// A reset of this many "seconds" or more is an epoch timestamp: as a delta it would be 31
/// years, and as an epoch it is 2001, before any server that sends these headers.
const EPOCH_SECONDS_FROM: u64 = 1_000_000_000;

/// Likewise for epoch milliseconds: as epoch seconds this would be the year 33658.
const EPOCH_MILLIS_FROM: u64 = 1_000_000_000_000;

/// Shopify's REST bucket drains at 2 calls per second (standard plans); the header gives only
/// the fill level, so the leak rate is what turns it into a window and a reset.
const SHOPIFY_LEAK_PER_SECOND: u64 = 2;

/// One shape for every vendor's rate-limit headers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    pub limit: Option<u64>,
    pub remaining: Option<u64>,
    /// Time from the response until the quota resets.
    pub reset_after_ms: Option<DurationMs>,
    /// Length of the quota's window, where the server says it.
    pub window_ms: Option<DurationMs>,
    /// Every request-count policy the server declared, `limit` per `window_ms` among them when
    /// it came from a declaration. A server with a burst and a daily policy enforces both, so
    /// the limiter has to keep to both, while the fields above describe only the one closest to
    /// blocking us.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<Window>,
}

/// Everything rate-related read from one response.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerSignal {
    /// The response says "you are over the limit": 429, 503 with Retry-After, or GitHub's 403
    /// with no requests remaining.
    pub rate_limited: bool,
    /// How long to wait, from `Retry-After` (either form, skew-corrected), from the response.
    /// When rate limited without one: from `X-RateLimit-Retry-After`, else the quota's reset.
    pub retry_after_ms: Option<DurationMs>,
    /// The current quota, from the first adapter that understood the headers.
    pub quota: Option<Quota>,
    /// How long the server held the request for its turn before it counted it, where it said
    /// (`Server-Timing: sluice-hold;dur=870`, from `sluice proxy`; see [`HOLD_FIELD`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_ms: Option<DurationMs>,
}

/// How a server (`sluice proxy`) says, in `Server-Timing`, how long it held a request for its
/// turn before counting it and sending it on: this metric and its duration in milliseconds
/// (`Server-Timing: sluice-hold;dur=870`).
///
/// Why: such a wait is no part of the way to the server or back, yet it is in the round trip
/// the client measures. `sluice proxy` holds a caller past its fair share until its turn (up
/// to a second or two); taken for network spread, a few such trips among a budget's recent
/// ones stretched every window by half a second and cut the caller to a fraction of its share.
pub const HOLD_FIELD: &str = "sluice-hold;dur=";

/// Reads a response's status and headers (names in any case). `now` is when the response
/// arrived on the client's clock. Malformed headers are ignored, never fatal.
pub fn read_signal(status: u16, headers: &[(String, String)], now: Millis) -> ServerSignal {
    let h = Headers(headers);
    let server_date = server_date(&h);
    // Absolute times in headers are written on the server's clock, so they are measured from
    // the server's "now" when it told us; the client's clock is only the fallback.
    let base = server_date.unwrap_or(now);
    let retry_after = retry_after(&h, server_date, now);

    let policies = ietf_policies(&h);
    // Priority order: the IETF fields are the standard and the most precise (they name the
    // policy), X-RateLimit is the de-facto convention, Shopify's fill level is the vaguest.
    let quotas = [
        ietf_ratelimit_field(&h, &policies, base),
        ietf_draft_counters(&h, &policies, base),
        ietf_policies_alone(&policies),
        x_ratelimit(&h, base),
        x_rate_limit(&h, base),
        shopify(&h),
    ];
    let mut matched = quotas.iter().flatten();
    let quota = matched.next().cloned();

    // A 403 is normally "forbidden, don't retry", but GitHub (and imitators) answer an
    // exhausted quota with 403 rather than 429; treating that as permanent would drop jobs
    // that only needed to wait. Any adapter's exhausted quota counts, not just the winner's.
    let exhausted = quotas.iter().flatten().any(|q| q.remaining == Some(0));
    let rate_limited = match status {
        429 => true,
        // 503 alone is an outage; with Retry-After the server is shedding load on purpose.
        503 => retry_after.is_some(),
        // GitHub's secondary limits come as 403 with Retry-After.
        403 => retry_after.is_some() || exhausted,
        _ => false,
    };

    let retry_after_ms = retry_after.or_else(|| {
        if !rate_limited {
            return None;
        }
        // Vendors' own spellings of Retry-After, for a refusal that carries no standard one.
        if let Some(ms) = x_ratelimit_retry_after(&h, base) {
            return Some(ms.min(MAX_WAIT_MS));
        }
        if let Some(ms) = h.first_parsed("x-rate-limit-reset", |v| parse_reset(v, base)) {
            return Some(ms.min(MAX_WAIT_MS));
        }
        // Told to stop but not for how long: the quota's reset is the server's own answer.
        // The exhausted quota's reset is the one that matters, if several were reported.
        quotas
            .iter()
            .flatten()
            .find(|q| q.remaining == Some(0) && q.reset_after_ms.is_some())
            .or_else(|| quotas.iter().flatten().find(|q| q.reset_after_ms.is_some()))
            .and_then(|q| q.reset_after_ms)
    });

    ServerSignal {
        rate_limited,
        retry_after_ms,
        quota,
        held_ms: held(&h),
    }
}

/// `Server-Timing: sluice-hold;dur=870` (see [`HOLD_FIELD`]): the milliseconds the server held
/// the request, the fraction dropped (less of the trip is taken for a hold, never more).
///
/// Only the form `sluice proxy` writes is read: its metric first in the field, `dur` its first
/// parameter, as written. The metric is ours, and every more general reader tried (a
/// structured-list one, a search anywhere in the field) cost the worker's wasm 250-800 bytes
/// gzipped where its budget had little more than that left.
fn held(h: &Headers) -> Option<DurationMs> {
    h.first_parsed("server-timing", |v| {
        let digits = v.strip_prefix(HOLD_FIELD)?;
        let end = digits
            .bytes()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(digits.len());
        parse_count(digits.get(..end)?).map(|ms| ms.min(MAX_WAIT_MS))
    })
}

// ---------------------------------------------------------------------------------------------
// Adapters
// ---------------------------------------------------------------------------------------------

/// The server's `Date`, in epoch milliseconds.
///
/// Why: client clocks are often minutes off. Every absolute time a server sends (an HTTP-date
/// `Retry-After`, an epoch reset) is on the server's clock, so subtracting the server's own
/// `Date` gives the duration it meant, whatever our clock says.
fn server_date(h: &Headers) -> Option<Millis> {
    h.first_parsed("date", parse_http_date_ms)
}

/// `Retry-After`: delta-seconds or an HTTP-date (RFC 9110 §10.2.3).
///
/// Why: it is the server's explicit instruction and beats anything inferred from quotas. The
/// delta form is immune to clock skew; the date form is measured from the server's `Date`
/// (see `server_date`) and only from our clock when the server gave none.
fn retry_after(h: &Headers, server_date: Option<Millis>, now: Millis) -> Option<DurationMs> {
    h.first_parsed("retry-after", |v| {
        if let Some(ms) = parse_seconds_ms(v) {
            return Some(ms.min(MAX_WAIT_MS));
        }
        let at = parse_http_date_ms(v)?;
        // A date already past means "now", not a negative wait.
        Some(
            at.saturating_sub(server_date.unwrap_or(now))
                .min(MAX_WAIT_MS),
        )
    })
}

/// `X-RateLimit-Retry-After`: the back-off, spelled like the quota headers beside it. Seen as
/// delta seconds, epoch seconds and epoch milliseconds (`parse_reset` tells them apart), and as
/// an HTTP-date.
///
/// Why: some servers send it instead of `Retry-After` on their 429s; it beats a reset inferred
/// from the quota because it is the server's own instruction. Read only for a response that is
/// already a rate limit, unlike `Retry-After`: the name is a vendor's, not a standard's, so it
/// does not turn a 403 or a 503 into one, and `Retry-After` still wins where both are sent.
fn x_ratelimit_retry_after(h: &Headers, base: Millis) -> Option<DurationMs> {
    h.first_parsed("x-ratelimit-retry-after", |v| {
        parse_reset(v, base).or_else(|| {
            let at = parse_http_date_ms(v)?;
            Some(at.saturating_sub(base).min(MAX_WAIT_MS))
        })
    })
}

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
fn ietf_ratelimit_field(h: &Headers, policies: &[Policy], base: Millis) -> Option<Quota> {
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
        candidates.extend(non_empty(Quota {
            limit: policy.and_then(|p| p.quota),
            // Later drafts call the remaining quota "available"; `r` first, as most send it.
            remaining: m.param("r").or_else(|| m.param("a")).and_then(parse_count),
            reset_after_ms: m.param("t").and_then(|t| parse_reset(t, base)),
            // The policy declares the window; a window on the limit is the fallback.
            window_ms: policy
                .and_then(|p| p.window_ms)
                .or_else(|| m.param("w").and_then(parse_window)),
            windows: Vec::new(),
        }));
    }
    let mut quota = most_restrictive_state(candidates.into_iter())?;
    quota.windows = declared_windows(policies);
    Some(quota)
}

/// `RateLimit-Limit / -Remaining / -Reset`, the separate fields of the older IETF drafts.
///
/// Why: many servers froze on an early draft. Its limit may be a list carrying the policy
/// (`100, 100;w=60`), and later drafts of it paired the fields with `RateLimit-Policy: 100;w=60`;
/// either gives the window.
fn ietf_draft_counters(h: &Headers, policies: &[Policy], base: Millis) -> Option<Quota> {
    let mut quota = counters(h, "ratelimit-", base)?;
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
fn ietf_policies_alone(policies: &[Policy]) -> Option<Quota> {
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

/// `X-RateLimit-Limit / -Remaining / -Reset`, including GitHub's `-Used` and `-Resource`.
///
/// Why: the de-facto convention (GitHub, Twitter/X, countless others). Its reset is a delta at
/// some vendors and an epoch at others (GitHub), so `parse_reset` tells them apart. GitHub's
/// `-Resource` names which bucket (core, search, graphql) but `Quota` has no place for it; the
/// numbers are for the bucket this request used, which is what matters here.
fn x_ratelimit(h: &Headers, base: Millis) -> Option<Quota> {
    counters(h, "x-ratelimit-", base)
}

/// `X-Rate-Limit-Limit / -Remaining / -Reset`, with a second hyphen.
///
/// Why: Twitter/X spells the convention this way (its reset an epoch, told apart from a delta by
/// `parse_reset` as for X-RateLimit), and a 429 carrying only `X-Rate-Limit-Reset` still says
/// when to come back.
fn x_rate_limit(h: &Headers, base: Millis) -> Option<Quota> {
    counters(h, "x-rate-limit-", base)
}

/// `X-Shopify-Shop-Api-Call-Limit: 32/40`: 32 of a 40-call leaky bucket used.
///
/// Why: Shopify gives only the fill level; the bucket drains at a known rate, so a full bucket
/// empties in `limit / rate` seconds (the window) and the current fill in `used / rate`
/// seconds (when the whole quota is back: the reset).
fn shopify(h: &Headers) -> Option<Quota> {
    h.first_parsed("x-shopify-shop-api-call-limit", |v| {
        let (used, limit) = v.split_once('/')?;
        let used = parse_count(used.trim())?;
        let limit = parse_count(limit.trim())?;
        let drain_ms = |calls: u64| calls.saturating_mul(1000) / SHOPIFY_LEAK_PER_SECOND;
        Some(Quota {
            limit: Some(limit),
            remaining: Some(limit.saturating_sub(used)),
            reset_after_ms: Some(drain_ms(used).min(MAX_WAIT_MS)),
            window_ms: window_ms(drain_ms(limit)),
            windows: Vec::new(),
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Shared pieces of the adapters
// ---------------------------------------------------------------------------------------------

/// The `<prefix>limit / remaining / reset / used` family, shared by X-RateLimit and the old
/// IETF spelling because they differ only in the prefix.
fn counters(h: &Headers, prefix: &str, base: Millis) -> Option<Quota> {
    let name = |suffix: &str| format!("{prefix}{suffix}");
    let (limit, window_ms, windows) = h
        .joined(&name("limit"))
        .map(|v| parse_limit_list(&v))
        .unwrap_or((None, None, Vec::new()));
    let used = h.first_parsed(&name("used"), parse_count);
    let remaining = h
        .first_parsed(&name("remaining"), parse_count)
        // GitHub always sends both, but a proxy trimming headers may keep only one; used and
        // limit determine remaining.
        .or_else(|| Some(limit?.saturating_sub(used?)));
    let reset_after_ms = h.first_parsed(&name("reset"), |v| parse_reset(v, base));
    non_empty(Quota {
        limit,
        remaining,
        reset_after_ms,
        window_ms,
        windows,
    })
}

/// A `*-Limit` value: a plain count, or the early-draft list `100, 100;w=60, 1000;w=3600`
/// whose first member is the limit in force and the rest describe policies (returned as
/// windows: the server enforces them all).
fn parse_limit_list(v: &str) -> (Option<u64>, Option<DurationMs>, Vec<Window>) {
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
struct Policy {
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
fn ietf_policies(h: &Headers) -> Vec<Policy> {
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
fn declared_windows(policies: &[Policy]) -> Vec<Window> {
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
fn limiter_window(quota: u64, length_ms: DurationMs) -> Option<Window> {
    (quota > 0).then(|| Window {
        limit: u32::try_from(quota).unwrap_or(u32::MAX),
        length_ms,
    })
}

/// The window of the policy with this quota, for the older forms that report a bare limit.
fn window_of_quota(policies: &[Policy], limit: u64) -> Option<DurationMs> {
    policies
        .iter()
        .filter(|p| p.counts_requests && p.quota == Some(limit))
        .find_map(|p| p.window_ms)
}

/// Of several live quotas, the one that blocks first: fewest remaining, then longest reset.
fn most_restrictive_state(candidates: impl Iterator<Item = Quota>) -> Option<Quota> {
    candidates.min_by(|a, b| {
        let remaining = |q: &Quota| q.remaining.unwrap_or(u64::MAX);
        remaining(a)
            .cmp(&remaining(b))
            .then_with(|| b.reset_after_ms.cmp(&a.reset_after_ms))
    })
}

/// Orders policies by sustained rate (quota / window), lowest first; policies without a window
/// can't be compared by rate and come after those with one, by quota.
fn compare_rates(a: &Policy, b: &Policy) -> Ordering {
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

/// Keeps a quota only if some adapter actually found something in it.
fn non_empty(q: Quota) -> Option<Quota> {
    let any = q.limit.is_some()
        || q.remaining.is_some()
        || q.reset_after_ms.is_some()
        || q.window_ms.is_some();
    any.then_some(q)
}

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

/// A count: plain ASCII digits only. A sign, a fraction or an exponent in a count means we are
/// misreading the header, so it is ignored rather than rounded into a plausible number.
fn parse_count(v: &str) -> Option<u64> {
    let v = v.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// Non-negative seconds as milliseconds: `30`, or `1.5` (some servers send fractions; Shopify
/// sends `2.0`), rounded up to the next millisecond so we never come back early. No sign, no
/// exponent, no `NaN`/`inf`: those are not delta-seconds. Overlong numbers saturate rather than
/// fail, because "a very long time" is still what the server meant; callers cap it.
fn parse_seconds_ms(v: &str) -> Option<u64> {
    let v = v.trim();
    let (whole, frac) = match v.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (v, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) {
        return None;
    }
    let seconds = whole.bytes().fold(0u64, |acc, b| {
        acc.saturating_mul(10)
            .saturating_add(u64::from(b.saturating_sub(b'0')))
    });
    let mut ms = seconds.saturating_mul(1000);
    if let Some(frac) = frac {
        if !digits(frac) {
            return None;
        }
        let mut frac_ms = 0u64;
        let mut scale = 100u64;
        for (i, b) in frac.bytes().enumerate() {
            let d = u64::from(b.saturating_sub(b'0'));
            if i < 3 {
                frac_ms = frac_ms.saturating_add(d.saturating_mul(scale));
                scale /= 10;
            } else if d != 0 {
                frac_ms = frac_ms.saturating_add(1);
                break;
            }
        }
        ms = ms.saturating_add(frac_ms);
    }
    Some(ms)
}

/// A reset as "milliseconds from the response", whichever way the server wrote it: delta
/// seconds, epoch seconds or epoch milliseconds (told apart by size, see the constants). Epochs
/// are measured from `base`, the server's `Date` when it sent one.
fn parse_reset(v: &str, base: Millis) -> Option<DurationMs> {
    // The value in thousandths, so the thresholds are in thousandths too.
    let thousandths = parse_seconds_ms(v)?;
    let after = if thousandths >= EPOCH_MILLIS_FROM.saturating_mul(1000) {
        thousandths.div_ceil(1000).saturating_sub(base)
    } else if thousandths >= EPOCH_SECONDS_FROM.saturating_mul(1000) {
        thousandths.saturating_sub(base)
    } else {
        thousandths
    };
    Some(after.min(MAX_WAIT_MS))
}

/// A policy window in seconds. A zero window is meaningless (and a division by zero waiting to
/// happen downstream); an overlong one is dropped, see `MAX_WINDOW_MS`.
fn parse_window(v: &str) -> Option<DurationMs> {
    window_ms(parse_seconds_ms(v)?)
}

fn window_ms(ms: DurationMs) -> Option<DurationMs> {
    (ms > 0 && ms <= MAX_WINDOW_MS).then_some(ms)
}

/// An HTTP-date (all three RFC 9110 forms) as epoch milliseconds, by the `httpdate` crate's
/// rules (ASCII only, every field in range, a real day of the month, the weekday matching the
/// date), written out here because that crate goes through `SystemTime` and costs the
/// worker's wasm about 8 KB.
fn parse_http_date_ms(v: &str) -> Option<Millis> {
    let s = v.trim();
    if !s.is_ascii() {
        return None;
    }
    let s = s.as_bytes();
    let d = imf_fixdate(s)
        .or_else(|| rfc850_date(s))
        .or_else(|| asctime_date(s))?;
    let valid = d.sec < 60
        && d.min < 60
        && d.hour < 24
        && (1..=12).contains(&d.mon)
        && (1970..=9999).contains(&d.year)
        && d.day >= 1
        && d.day <= days_in_month(d.year, d.mon);
    if !valid {
        return None;
    }
    let y = u64::from(d.year) - 1;
    let leap_days = (y - 1968) / 4 - (y - 1900) / 100 + (y - 1600) / 400;
    let mut year_day = u64::from(CUMULATIVE_DAYS[usize::from(d.mon - 1)]) + u64::from(d.day) - 1;
    if is_leap_year(d.year) && d.mon > 2 {
        year_day += 1;
    }
    let days = (u64::from(d.year) - 1970) * 365 + leap_days + year_day;
    // 1970-01-01 was a Thursday (4; Monday is 1).
    if (days + 3) % 7 + 1 != u64::from(d.wday) {
        return None;
    }
    let secs = days * 86_400 + u64::from(d.hour) * 3_600 + u64::from(d.min) * 60 + u64::from(d.sec);
    Some(secs * 1_000)
}

struct HttpDate {
    year: u16,
    mon: u8,
    day: u8,
    hour: u8,
    min: u8,
    sec: u8,
    /// 1 (Monday) to 7.
    wday: u8,
}

const MONTHS: [&[u8]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const CUMULATIVE_DAYS: [u16; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];

fn is_leap_year(y: u16) -> bool {
    y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400))
}

fn days_in_month(year: u16, mon: u8) -> u8 {
    match mon {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// All ASCII digits, as a number.
fn date_digits(s: &[u8]) -> Option<u16> {
    s.iter().try_fold(0u16, |n, &c| {
        let d = c.wrapping_sub(b'0');
        (d < 10).then(|| n * 10 + u16::from(d))
    })
}

fn two_digits(s: &[u8]) -> Option<u8> {
    date_digits(s).map(|n| n as u8)
}

/// 1 to 12 for `Jan` to `Dec`.
fn month(s: &[u8]) -> Option<u8> {
    MONTHS.iter().position(|m| *m == s).map(|i| i as u8 + 1)
}

/// 1 to 7 for the three-letter day names.
fn short_weekday(s: &[u8]) -> Option<u8> {
    WEEKDAYS
        .iter()
        .position(|w| &w.as_bytes()[..3] == s)
        .map(|i| i as u8 + 1)
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`
fn imf_fixdate(s: &[u8]) -> Option<HttpDate> {
    if s.len() != 29
        || &s[25..] != b" GMT"
        || &s[3..5] != b", "
        || s[7] != b' '
        || s[11] != b' '
        || s[16] != b' '
        || s[19] != b':'
        || s[22] != b':'
    {
        return None;
    }
    Some(HttpDate {
        sec: two_digits(&s[23..25])?,
        min: two_digits(&s[20..22])?,
        hour: two_digits(&s[17..19])?,
        day: two_digits(&s[5..7])?,
        mon: month(&s[8..11])?,
        year: date_digits(&s[12..16])?,
        wday: short_weekday(&s[..3])?,
    })
}

/// `Sunday, 06-Nov-94 08:49:37 GMT` (two-digit years below 70 are 20xx).
fn rfc850_date(s: &[u8]) -> Option<HttpDate> {
    if s.len() < 23 {
        return None;
    }
    let (wday, s) = WEEKDAYS.iter().enumerate().find_map(|(i, name)| {
        let rest = s.strip_prefix(name.as_bytes())?.strip_prefix(b", ")?;
        Some((i as u8 + 1, rest))
    })?;
    if s.len() != 22
        || s[2] != b'-'
        || s[6] != b'-'
        || s[12] != b':'
        || s[15] != b':'
        || &s[18..22] != b" GMT"
    {
        return None;
    }
    let year = date_digits(&s[7..9])?;
    Some(HttpDate {
        sec: two_digits(&s[16..18])?,
        min: two_digits(&s[13..15])?,
        hour: two_digits(&s[10..12])?,
        day: two_digits(&s[0..2])?,
        mon: month(&s[3..6])?,
        year: if year < 70 { year + 2000 } else { year + 1900 },
        wday,
    })
}

/// `Sun Nov  6 08:49:37 1994`
fn asctime_date(s: &[u8]) -> Option<HttpDate> {
    if s.len() != 24
        || s[3] != b' '
        || s[7] != b' '
        || s[10] != b' '
        || s[13] != b':'
        || s[16] != b':'
        || s[19] != b' '
    {
        return None;
    }
    Some(HttpDate {
        sec: two_digits(&s[17..19])?,
        min: two_digits(&s[14..16])?,
        hour: two_digits(&s[11..13])?,
        day: if s[8] == b' ' {
            two_digits(&s[9..10])?
        } else {
            two_digits(&s[8..10])?
        },
        mon: month(&s[4..7])?,
        year: date_digits(&s[20..24])?,
        wday: short_weekday(&s[..3])?,
    })
}

// ---------------------------------------------------------------------------------------------
// Headers and structured fields
// ---------------------------------------------------------------------------------------------

/// The response's headers, looked up the way HTTP means them: names case-insensitive, values
/// without surrounding whitespace.
struct Headers<'a>(&'a [(String, String)]);

impl<'a> Headers<'a> {
    fn values<'n>(&self, name: &'n str) -> impl Iterator<Item = &'a str> + 'n
    where
        'a: 'n,
    {
        self.0
            .iter()
            .filter(move |(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }

    /// For single-valued fields: a repeated header (proxies do that) is taken at its first
    /// readable occurrence instead of failing.
    fn first_parsed<T>(&self, name: &str, parse: impl FnMut(&str) -> Option<T>) -> Option<T> {
        self.values(name).find_map(parse)
    }

    /// For list-valued fields: repeated lines are one list joined by commas (RFC 9110 §5.3).
    fn joined(&self, name: &str) -> Option<String> {
        // Pushed one by one rather than `collect` and `join`: a `join` of `&str`s would be a
        // second copy of `join` in the wasm, beside the one for `String`s.
        let mut joined = String::new();
        for v in self.values(name).filter(|v| !v.is_empty()) {
            if !joined.is_empty() {
                joined.push_str(", ");
            }
            joined.push_str(v);
        }
        (!joined.is_empty()).then_some(joined)
    }
}

/// One member of a structured-field list or dictionary (RFC 8941), read leniently: enough for
/// `"name";k=v` items, `100;w=60` items and `key=value` dictionary members.
#[derive(Debug)]
struct Member<'a> {
    head: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

impl<'a> Member<'a> {
    fn parse(s: &'a str) -> Option<Self> {
        let mut parts = split_outside_quotes(s, ';').into_iter();
        let head = parts.next()?.trim();
        if head.is_empty() {
            return None;
        }
        let mut params = Vec::new();
        for p in parts {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            if !k.trim().is_empty() {
                params.push((k.trim(), v.trim()));
            }
        }
        Some(Member { head, params })
    }

    /// The first parameter with this key (keys compared without case: servers vary).
    fn param(&self, key: &str) -> Option<&'a str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| *v)
    }

    /// `key=value` when the member is a dictionary entry.
    fn dict_entry(&self) -> Option<(&'a str, &'a str)> {
        if self.head.starts_with('"') {
            return None;
        }
        self.head.split_once('=').map(|(k, v)| (k.trim(), v.trim()))
    }

    /// An unquoted integer item (the older policy form).
    fn bare_int(&self) -> Option<u64> {
        if self.dict_entry().is_some() {
            return None;
        }
        parse_count(self.head)
    }

    /// The item as a name: a string (quotes and escapes removed) or a token. Strings and tokens
    /// with the same text are the same name, as servers mix them up.
    fn name(&self) -> Option<String> {
        if self.dict_entry().is_some() {
            return None;
        }
        sf_string(self.head)
    }
}

/// A string (quotes and escapes removed) or a bare token, as the same text.
fn sf_string(v: &str) -> Option<String> {
    let Some(inner) = v.strip_prefix('"') else {
        return Some(v.to_owned());
    };
    let inner = inner.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' { chars.next()? } else { c });
    }
    Some(out)
}

fn parse_list(field: &str) -> Vec<Member<'_>> {
    let mut members = Vec::new();
    for part in split_outside_quotes(field, ',') {
        members.extend(Member::parse(part));
    }
    members
}

/// Splits at `sep` except inside double-quoted strings, where a policy name may contain it.
fn split_outside_quotes(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if in_quotes {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_quotes = false;
            }
        } else if c == '"' {
            in_quotes = true;
        } else if c == sep {
            parts.push(s.get(start..i).unwrap_or(""));
            start = i.saturating_add(c.len_utf8());
        }
    }
    parts.push(s.get(start..).unwrap_or(""));
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// What the `httpdate` crate makes of a text (the rules `parse_http_date_ms` follows).
    fn by_httpdate(v: &str) -> Option<Millis> {
        let at = httpdate::parse_http_date(v.trim()).ok()?;
        let since = at.duration_since(UNIX_EPOCH).ok()?;
        Some(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
    }

    #[test]
    fn http_dates_parse_as_httpdate_parses_them() {
        let texts = [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "  Sun, 06 Nov 1994 08:49:37 GMT ",
            "Mon, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 31 Nov 1994 08:49:37 GMT",
            "Thu, 29 Feb 1996 00:00:00 GMT",
            "Sat, 29 Feb 1997 00:00:00 GMT",
            "Tue, 29 Feb 2000 23:59:59 GMT",
            "Thu, 01 Jan 1970 00:00:00 GMT",
            "Wed, 31 Dec 1969 23:59:59 GMT",
            "Fri, 31 Dec 9999 23:59:59 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:60:37 GMT",
            "Sun, 06 Xyz 1994 08:49:37 GMT",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun,_06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sunday, 06-Nov-94_08:49:37 GMT",
            "Sunday, 06-Nov-04 08:49:37 GMT",
            "Saturday, 06-Nov-04 08:49:37 GMT",
            "Sunday 06-Nov-94 08:49:37 GMT",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun Nov 06 08:49:37 1994",
            "Sun Nov 6  08:49:37 1994",
            "Mon Nov  6 08:49:37 1994",
            "Sun Nov  6 08:49:37 1994 ",
            "Sún, 06 Nov 1994 08:49:37 GMT",
            "",
            "120",
            "Sun, 0a Nov 1994 08:49:37 GMT",
        ];
        for t in texts {
            assert_eq!(parse_http_date_ms(t), by_httpdate(t), "{t:?}");
        }
        for secs in (0..4_000_000_000u64).step_by(7_777_777) {
            let t = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
            assert_eq!(parse_http_date_ms(&t), Some(secs * 1000), "{t}");
        }
    }

    const SECOND: u64 = 1000;
    const MINUTE: u64 = 60 * SECOND;
    /// 2023-11-14T22:13:20Z, a round epoch: 1_700_000_000 s.
    const SERVER_NOW: Millis = 1_700_000_000 * SECOND;

    fn http_date(at: Millis) -> String {
        httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_millis(at))
    }

    fn hs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn read(status: u16, pairs: &[(&str, &str)], now: Millis) -> ServerSignal {
        read_signal(status, &hs(pairs), now)
    }

    fn quota(status: u16, pairs: &[(&str, &str)], now: Millis) -> Quota {
        read(status, pairs, now).quota.expect("a quota")
    }

    /// A declared policy as the limiter window it becomes: `limit` per `secs` seconds.
    fn win(limit: u32, secs: u64) -> Window {
        Window {
            limit,
            length_ms: secs * SECOND,
        }
    }

    // --- Retry-After --------------------------------------------------------------------

    #[test]
    fn retry_after_delta_seconds_ignores_a_client_clock_three_minutes_fast() {
        let date = http_date(SERVER_NOW);
        let s = read(
            429,
            &[("Retry-After", "120"), ("Date", &date)],
            SERVER_NOW + 3 * MINUTE,
        );
        assert!(s.rate_limited);
        assert_eq!(s.retry_after_ms, Some(120 * SECOND));
    }

    #[test]
    fn retry_after_http_date_is_measured_from_the_server_date_not_a_fast_client_clock() {
        let date = http_date(SERVER_NOW);
        let retry = http_date(SERVER_NOW + 2 * MINUTE);
        let s = read(
            429,
            &[("Retry-After", &retry), ("Date", &date)],
            SERVER_NOW + 3 * MINUTE,
        );
        // The server meant two minutes; the client clock alone would have said "already past".
        assert_eq!(s.retry_after_ms, Some(2 * MINUTE));
    }

    #[test]
    fn retry_after_http_date_without_date_header_uses_the_client_clock() {
        let retry = http_date(SERVER_NOW + 2 * MINUTE);
        let s = read(429, &[("Retry-After", &retry)], SERVER_NOW + 30 * SECOND);
        assert_eq!(s.retry_after_ms, Some(90 * SECOND));
        // With an invalid Date, same fallback.
        let s = read(
            429,
            &[("Retry-After", &retry), ("Date", "yesterday-ish")],
            SERVER_NOW + 30 * SECOND,
        );
        assert_eq!(s.retry_after_ms, Some(90 * SECOND));
    }

    #[test]
    fn retry_after_in_the_past_is_zero_never_negative() {
        let retry = http_date(SERVER_NOW - MINUTE);
        let s = read(429, &[("Retry-After", &retry)], SERVER_NOW);
        assert_eq!(s.retry_after_ms, Some(0));
        let date = http_date(SERVER_NOW);
        let s = read(429, &[("Retry-After", &retry), ("Date", &date)], 0);
        assert_eq!(s.retry_after_ms, Some(0));
    }

    #[test]
    fn retry_after_accepts_the_obsolete_date_forms() {
        // RFC 850 and asctime for 1994-11-06T08:49:37Z, measured from a Date 37 s earlier.
        let date = "Sun, 06 Nov 1994 08:49:00 GMT";
        for retry in ["Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"] {
            let s = read(503, &[("Retry-After", retry), ("Date", date)], 0);
            assert_eq!(s.retry_after_ms, Some(37 * SECOND), "{retry}");
            assert!(s.rate_limited);
        }
    }

    #[test]
    fn retry_after_huge_values_are_capped() {
        let s = read(429, &[("Retry-After", "99999999999999999999999999")], 0);
        assert_eq!(s.retry_after_ms, Some(MAX_WAIT_MS));
        let s = read(429, &[("Retry-After", "31536000")], 0);
        assert_eq!(s.retry_after_ms, Some(MAX_WAIT_MS));
        let s = read(
            429,
            &[("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT")],
            SERVER_NOW,
        );
        assert_eq!(s.retry_after_ms, Some(MAX_WAIT_MS));
    }

    #[test]
    fn retry_after_fractional_seconds_round_up_to_the_millisecond() {
        let s = read(429, &[("Retry-After", "1.5")], 0);
        assert_eq!(s.retry_after_ms, Some(1500));
        let s = read(429, &[("Retry-After", "2.0")], 0);
        assert_eq!(s.retry_after_ms, Some(2000));
        let s = read(429, &[("Retry-After", "0.0001")], 0);
        assert_eq!(s.retry_after_ms, Some(1));
    }

    #[test]
    fn retry_after_junk_is_ignored() {
        for junk in [
            "",
            "-5",
            "+5",
            "NaN",
            "inf",
            "-inf",
            "1e3",
            "5s",
            "five",
            ".5",
            "5.",
            "1.2.3",
            "0x10",
            "１２",
            "Wed, 32 Oct 2015 07:28:00 GMT",
        ] {
            let s = read(429, &[("Retry-After", junk)], SERVER_NOW);
            assert_eq!(s.retry_after_ms, None, "{junk:?}");
            assert!(s.rate_limited, "429 is a rate limit whatever its headers");
        }
    }

    #[test]
    fn status_503_is_rate_limited_only_with_retry_after() {
        assert!(!read(503, &[], 0).rate_limited);
        assert!(!read(503, &[("Retry-After", "soon")], 0).rate_limited);
        let s = read(503, &[("Retry-After", "10")], 0);
        assert!(s.rate_limited);
        assert_eq!(s.retry_after_ms, Some(10 * SECOND));
    }

    #[test]
    fn a_proxys_hold_is_read_from_server_timing() {
        let held = |pairs: &[(&str, &str)]| read(200, pairs, 0).held_ms;
        assert_eq!(
            held(&[(
                "Server-Timing",
                "sluice-hold;dur=870.6, db;dur=53;desc=\"a, b\""
            )]),
            Some(870)
        );
        // A repeated field is read at its first readable value.
        assert_eq!(
            held(&[
                ("server-timing", "db;dur=53"),
                ("Server-Timing", "sluice-hold;dur=20")
            ]),
            Some(20)
        );
        for unread in [
            "sluice-hold",
            "sluice-hold;dur=-5",
            "sluice-hold;dur=x",
            "db;dur=53",
        ] {
            assert_eq!(held(&[("Server-Timing", unread)]), None, "{unread}");
        }
        // Capped at the longest wait; a number too long to be one is not read (taking no hold
        // off a trip is the careful side).
        assert_eq!(
            held(&[("Server-Timing", "sluice-hold;dur=99999999999999")]),
            Some(MAX_WAIT_MS)
        );
        assert_eq!(
            held(&[("Server-Timing", "sluice-hold;dur=99999999999999999999999")]),
            None
        );
    }

    #[test]
    fn status_429_without_headers_is_rate_limited_with_unknown_wait() {
        assert_eq!(
            read(429, &[], 0),
            ServerSignal {
                rate_limited: true,
                retry_after_ms: None,
                quota: None,
                held_ms: None,
            }
        );
    }

    #[test]
    fn retry_after_on_a_success_is_reported_but_not_a_rate_limit() {
        let s = read(200, &[("Retry-After", "5")], 0);
        assert!(!s.rate_limited);
        assert_eq!(s.retry_after_ms, Some(5 * SECOND));
    }

    // --- X-RateLimit and the old IETF spelling --------------------------------------------

    #[test]
    fn x_ratelimit_reset_as_delta_seconds() {
        let q = quota(
            200,
            &[
                ("X-RateLimit-Limit", "100"),
                ("X-RateLimit-Remaining", "42"),
                ("X-RateLimit-Reset", "30"),
            ],
            SERVER_NOW,
        );
        assert_eq!(
            q,
            Quota {
                limit: Some(100),
                remaining: Some(42),
                reset_after_ms: Some(30 * SECOND),
                window_ms: None,
                windows: vec![]
            }
        );
    }

    #[test]
    fn x_ratelimit_reset_as_epoch_seconds_is_measured_from_the_server_date() {
        let date = http_date(SERVER_NOW);
        let reset = (SERVER_NOW / SECOND + 45).to_string();
        // Client clock three minutes fast: the server's Date still gives 45 s.
        let q = quota(
            200,
            &[("X-RateLimit-Reset", &reset), ("Date", &date)],
            SERVER_NOW + 3 * MINUTE,
        );
        assert_eq!(q.reset_after_ms, Some(45 * SECOND));
    }

    #[test]
    fn x_ratelimit_reset_as_epoch_without_date_uses_the_client_clock() {
        let reset = (SERVER_NOW / SECOND + 45).to_string();
        let q = quota(
            200,
            &[("X-RateLimit-Reset", &reset)],
            SERVER_NOW + 5 * SECOND,
        );
        assert_eq!(q.reset_after_ms, Some(40 * SECOND));
        // An epoch already past is a reset "now".
        let q = quota(200, &[("X-RateLimit-Reset", &reset)], SERVER_NOW + MINUTE);
        assert_eq!(q.reset_after_ms, Some(0));
    }

    #[test]
    fn x_ratelimit_reset_as_epoch_milliseconds_is_detected() {
        let reset = (SERVER_NOW + 2500).to_string();
        let q = quota(200, &[("X-RateLimit-Reset", &reset)], SERVER_NOW);
        assert_eq!(q.reset_after_ms, Some(2500));
        // Fractional epoch seconds (Discord-style) too.
        let reset = format!("{}.250", SERVER_NOW / SECOND + 2);
        let q = quota(200, &[("X-RateLimit-Reset", &reset)], SERVER_NOW);
        assert_eq!(q.reset_after_ms, Some(2250));
    }

    #[test]
    fn reset_detection_thresholds() {
        // Just under 1e9 s is a (capped) delta; at 1e9 it is an epoch, long past.
        assert_eq!(parse_reset("999999999", SERVER_NOW), Some(MAX_WAIT_MS));
        assert_eq!(parse_reset("1000000000", SERVER_NOW), Some(0));
        assert_eq!(parse_reset("86399", SERVER_NOW), Some(86_399 * SECOND));
        // An epoch reset a week ahead is capped at a day.
        let week = (SERVER_NOW / SECOND + 7 * 86_400).to_string();
        assert_eq!(parse_reset(&week, SERVER_NOW), Some(MAX_WAIT_MS));
    }

    #[test]
    fn older_ietf_draft_fields_with_policy_window() {
        let q = quota(
            200,
            &[
                ("RateLimit-Limit", "100, 100;w=60, 1000;w=3600"),
                ("RateLimit-Remaining", "7"),
                ("RateLimit-Reset", "12"),
            ],
            0,
        );
        assert_eq!(
            q,
            Quota {
                limit: Some(100),
                remaining: Some(7),
                reset_after_ms: Some(12 * SECOND),
                window_ms: Some(60 * SECOND),
                windows: vec![win(100, 60), win(1000, 3600)]
            }
        );
        // The same with the window in a separate old-form RateLimit-Policy.
        let q = quota(
            200,
            &[
                ("RateLimit-Limit", "100"),
                ("RateLimit-Remaining", "7"),
                ("RateLimit-Reset", "12"),
                ("RateLimit-Policy", "10;w=1, 100;w=60"),
            ],
            0,
        );
        assert_eq!(q.limit, Some(100));
        assert_eq!(q.window_ms, Some(60 * SECOND));
    }

    #[test]
    fn older_ietf_triple_reset_is_the_back_off_of_a_bare_429() {
        // Draft 0-6 style, as still sent by many gateways (e.g. express-rate-limit's
        // `standardHeaders: 'draft-6'`): delta-second reset, no Retry-After.
        let s = read(
            429,
            &[
                ("RateLimit-Limit", "100"),
                ("RateLimit-Remaining", "0"),
                ("RateLimit-Reset", "50"),
            ],
            SERVER_NOW,
        );
        assert!(s.rate_limited);
        assert_eq!(s.retry_after_ms, Some(50 * SECOND));
        assert_eq!(
            s.quota,
            Some(Quota {
                limit: Some(100),
                remaining: Some(0),
                reset_after_ms: Some(50 * SECOND),
                window_ms: None,
                windows: vec![],
            })
        );
        // Retry-After still wins when present.
        let s = read(
            429,
            &[
                ("RateLimit-Remaining", "0"),
                ("RateLimit-Reset", "50"),
                ("Retry-After", "20"),
            ],
            0,
        );
        assert_eq!(s.retry_after_ms, Some(20 * SECOND));
    }

    #[test]
    fn older_ietf_limit_list_policies_all_become_windows() {
        let q = quota(
            200,
            &[
                ("RateLimit-Limit", "10, 10;w=1, 1000;w=3600"),
                ("RateLimit-Remaining", "9"),
                ("RateLimit-Reset", "1"),
            ],
            0,
        );
        assert_eq!(q.limit, Some(10));
        assert_eq!(q.window_ms, Some(SECOND));
        assert_eq!(q.windows, vec![win(10, 1), win(1000, 3600)]);
    }

    #[test]
    fn x_ratelimit_retry_after_backs_off_a_429_without_retry_after() {
        // It beats the quota's reset: it is the server's instruction, the reset an inference.
        let s = read(
            429,
            &[
                ("X-RateLimit-Limit", "60"),
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset", "60"),
                ("X-RateLimit-Retry-After", "30"),
            ],
            0,
        );
        assert!(s.rate_limited);
        assert_eq!(s.retry_after_ms, Some(30 * SECOND));
        // Retry-After beats it.
        let s = read(
            429,
            &[("X-RateLimit-Retry-After", "30"), ("Retry-After", "5")],
            0,
        );
        assert_eq!(s.retry_after_ms, Some(5 * SECOND));
    }

    #[test]
    fn x_ratelimit_retry_after_epochs_and_dates_are_measured_from_the_server_date() {
        let date = http_date(SERVER_NOW);
        let client = SERVER_NOW + 3 * MINUTE;
        let epoch_s = (SERVER_NOW / SECOND + 45).to_string();
        let epoch_ms = (SERVER_NOW + 45 * SECOND).to_string();
        let at = http_date(SERVER_NOW + 45 * SECOND);
        for v in [epoch_s.as_str(), epoch_ms.as_str(), at.as_str(), "45"] {
            let s = read(
                429,
                &[("x-ratelimit-retry-after", v), ("Date", &date)],
                client,
            );
            assert_eq!(s.retry_after_ms, Some(45 * SECOND), "{v}");
        }
        let s = read(429, &[("X-RateLimit-Retry-After", "99999999")], 0);
        assert_eq!(s.retry_after_ms, Some(MAX_WAIT_MS));
    }

    #[test]
    fn x_ratelimit_retry_after_alone_does_not_make_a_rate_limit() {
        for status in [200, 403, 503] {
            let s = read(status, &[("X-RateLimit-Retry-After", "30")], 0);
            assert!(!s.rate_limited, "{status}");
            assert_eq!(s.retry_after_ms, None, "{status}");
        }
        let s = read(429, &[("X-RateLimit-Retry-After", "soon")], 0);
        assert!(s.rate_limited);
        assert_eq!(s.retry_after_ms, None);
    }

    #[test]
    fn x_rate_limit_family_like_twitter() {
        // Twitter/X v1.1 and v2: epoch-second reset, client clock fast by three minutes.
        let date = http_date(SERVER_NOW);
        let reset = (SERVER_NOW / SECOND + 900).to_string();
        let s = read(
            429,
            &[
                ("x-rate-limit-limit", "900"),
                ("x-rate-limit-remaining", "0"),
                ("x-rate-limit-reset", &reset),
                ("date", &date),
            ],
            SERVER_NOW + 3 * MINUTE,
        );
        assert!(s.rate_limited);
        assert_eq!(s.retry_after_ms, Some(900 * SECOND));
        assert_eq!(
            s.quota,
            Some(Quota {
                limit: Some(900),
                remaining: Some(0),
                reset_after_ms: Some(900 * SECOND),
                window_ms: None,
                windows: vec![],
            })
        );
        // Only the reset, as a delta: still the back-off of a 429, and Retry-After still wins.
        let s = read(429, &[("X-Rate-Limit-Reset", "42")], 0);
        assert_eq!(s.retry_after_ms, Some(42 * SECOND));
        let s = read(
            429,
            &[("X-Rate-Limit-Reset", "42"), ("Retry-After", "7")],
            0,
        );
        assert_eq!(s.retry_after_ms, Some(7 * SECOND));
        // X-RateLimit, the commoner spelling, is preferred when both are sent.
        let q = quota(
            200,
            &[("X-Rate-Limit-Limit", "900"), ("X-RateLimit-Limit", "60")],
            0,
        );
        assert_eq!(q.limit, Some(60));
    }

    // --- GitHub -------------------------------------------------------------------------

    #[test]
    fn github_403_with_remaining_zero_is_rate_limited_until_the_reset() {
        let date = http_date(SERVER_NOW);
        let reset = (SERVER_NOW / SECOND + 600).to_string();
        let s = read(
            403,
            &[
                ("x-ratelimit-limit", "5000"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", &reset),
                ("x-ratelimit-used", "5000"),
                ("x-ratelimit-resource", "core"),
                ("date", &date),
            ],
            SERVER_NOW - 3 * MINUTE,
        );
        assert!(s.rate_limited);
        assert_eq!(s.retry_after_ms, Some(600 * SECOND));
        assert_eq!(
            s.quota,
            Some(Quota {
                limit: Some(5000),
                remaining: Some(0),
                reset_after_ms: Some(600 * SECOND),
                window_ms: None,
                windows: vec![]
            })
        );
    }

    #[test]
    fn github_403_with_requests_left_is_not_a_rate_limit() {
        let s = read(
            403,
            &[
                ("x-ratelimit-limit", "5000"),
                ("x-ratelimit-remaining", "4999"),
                ("x-ratelimit-reset", "1700000600"),
            ],
            SERVER_NOW,
        );
        assert!(!s.rate_limited);
        assert_eq!(s.retry_after_ms, None);
        assert!(!read(403, &[], 0).rate_limited);
    }

    #[test]
    fn github_secondary_limit_is_403_or_429_with_retry_after() {
        for status in [403, 429] {
            let s = read(
                status,
                &[("retry-after", "60"), ("x-ratelimit-remaining", "4000")],
                0,
            );
            assert!(s.rate_limited, "{status}");
            assert_eq!(s.retry_after_ms, Some(MINUTE));
        }
    }

    #[test]
    fn github_used_stands_in_for_a_missing_remaining() {
        let q = quota(
            200,
            &[("x-ratelimit-limit", "60"), ("x-ratelimit-used", "45")],
            0,
        );
        assert_eq!(q.remaining, Some(15));
    }

    #[test]
    fn rate_limited_without_retry_after_waits_for_the_exhausted_quota_reset() {
        let s = read(
            429,
            &[
                ("X-RateLimit-Limit", "10"),
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset", "17"),
            ],
            0,
        );
        assert_eq!(s.retry_after_ms, Some(17 * SECOND));
        // Retry-After, when present, wins over the reset.
        let s = read(429, &[("X-RateLimit-Reset", "17"), ("Retry-After", "3")], 0);
        assert_eq!(s.retry_after_ms, Some(3 * SECOND));
        // Not rate limited: the reset is only in the quota.
        let s = read(200, &[("X-RateLimit-Reset", "17")], 0);
        assert_eq!(s.retry_after_ms, None);
    }

    // --- Shopify ------------------------------------------------------------------------

    #[test]
    fn shopify_call_limit_is_a_leaky_bucket() {
        let q = quota(200, &[("X-Shopify-Shop-Api-Call-Limit", " 32/40 ")], 0);
        assert_eq!(
            q,
            Quota {
                limit: Some(40),
                remaining: Some(8),
                // 32 calls drain at 2 per second.
                reset_after_ms: Some(16 * SECOND),
                window_ms: Some(20 * SECOND),
                windows: vec![]
            }
        );
        let q = quota(200, &[("x-shopify-shop-api-call-limit", "40 / 40")], 0);
        assert_eq!(q.remaining, Some(0));
        // Over-full (seen during plan changes): nothing remaining, not an underflow.
        let q = quota(200, &[("x-shopify-shop-api-call-limit", "45/40")], 0);
        assert_eq!(q.remaining, Some(0));
    }

    #[test]
    fn shopify_429_uses_its_fractional_retry_after() {
        let s = read(
            429,
            &[
                ("X-Shopify-Shop-Api-Call-Limit", "40/40"),
                ("Retry-After", "2.0"),
            ],
            0,
        );
        assert!(s.rate_limited);
        assert_eq!(s.retry_after_ms, Some(2 * SECOND));
    }

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

    // --- Priority, case, junk -----------------------------------------------------------

    #[test]
    fn ietf_wins_over_x_ratelimit_which_wins_over_shopify() {
        let all = [
            ("X-Shopify-Shop-Api-Call-Limit", "1/40"),
            ("X-RateLimit-Limit", "60"),
            ("X-RateLimit-Remaining", "59"),
            ("RateLimit-Policy", "\"d\";q=100;w=60"),
            ("RateLimit", "\"d\";r=50;t=30"),
        ];
        assert_eq!(quota(200, &all, 0).limit, Some(100));
        assert_eq!(quota(200, &all[..3], 0).limit, Some(60));
        assert_eq!(quota(200, &all[..1], 0).limit, Some(40));
    }

    #[test]
    fn a_lower_priority_exhausted_quota_still_makes_a_403_a_rate_limit() {
        let s = read(
            403,
            &[
                ("RateLimit", "\"d\";r=5;t=30"),
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset", "20"),
            ],
            0,
        );
        assert!(s.rate_limited);
        assert_eq!(s.retry_after_ms, Some(20 * SECOND));
        assert_eq!(s.quota.and_then(|q| q.remaining), Some(5));
    }

    #[test]
    fn header_names_ignore_case_and_values_ignore_whitespace() {
        let q = quota(
            200,
            &[
                ("x-RATELIMIT-limit", "  100 "),
                (" X-RateLimit-Remaining ", "\t5"),
                ("X-RATELIMIT-RESET", " 9 "),
            ],
            0,
        );
        assert_eq!(q.limit, Some(100));
        assert_eq!(q.remaining, Some(5));
        assert_eq!(q.reset_after_ms, Some(9 * SECOND));
        let s = read(429, &[("RETRY-AFTER", "  7  ")], 0);
        assert_eq!(s.retry_after_ms, Some(7 * SECOND));
    }

    #[test]
    fn no_rate_limit_headers_means_no_quota() {
        let s = read(
            200,
            &[
                ("Content-Type", "text/plain"),
                ("Date", &http_date(SERVER_NOW)),
            ],
            0,
        );
        assert_eq!(s, ServerSignal::default());
    }

    #[test]
    fn garbage_values_are_ignored() {
        let s = read(
            200,
            &[
                ("X-RateLimit-Limit", "-1"),
                ("X-RateLimit-Remaining", "NaN"),
                ("X-RateLimit-Reset", "tomorrow"),
                ("X-RateLimit-Used", "1e3"),
                ("RateLimit-Limit", "lots"),
                ("RateLimit-Remaining", "50.5"),
                ("RateLimit", "\"unterminated;r=5"),
                ("RateLimit-Policy", ";;;,,,=;q=;w=-3"),
                ("X-Shopify-Shop-Api-Call-Limit", "32/"),
                ("Retry-After", "-60"),
                ("Date", "not a date"),
                ("X-RateLimit-Retry-After", "-30"),
                ("X-Rate-Limit-Limit", "0x10"),
                ("X-Rate-Limit-Reset", "soon"),
            ],
            SERVER_NOW,
        );
        assert_eq!(s, ServerSignal::default());
        // Junk in one field doesn't spoil a good neighbour.
        let q = quota(
            200,
            &[
                ("X-RateLimit-Limit", "100"),
                ("X-RateLimit-Remaining", "-3"),
                ("X-RateLimit-Reset", "Infinity"),
            ],
            0,
        );
        assert_eq!(q.limit, Some(100));
        assert_eq!(q.remaining, None);
        assert_eq!(q.reset_after_ms, None);
        // Zero and over-long windows are not believed.
        let q = quota(200, &[("RateLimit-Policy", "\"a\";q=5;w=0")], 0);
        assert_eq!(q.window_ms, None);
        let q = quota(200, &[("RateLimit-Policy", "\"a\";q=5;w=99999999999")], 0);
        assert_eq!(q.window_ms, None);
    }

    #[test]
    fn repeated_single_valued_headers_use_the_first_readable_one() {
        let s = read(429, &[("Retry-After", "later"), ("retry-after", "8")], 0);
        assert_eq!(s.retry_after_ms, Some(8 * SECOND));
    }

    #[test]
    fn signals_round_trip_through_json() {
        let s = read(
            429,
            &[
                ("Retry-After", "3"),
                ("X-Shopify-Shop-Api-Call-Limit", "40/40"),
            ],
            0,
        );
        let json = serde_json::to_string(&s).expect("serializes");
        let back: ServerSignal = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, s);
    }

    // --- Properties ---------------------------------------------------------------------

    const KNOWN_NAMES: &[&str] = &[
        "Retry-After",
        "Date",
        "RateLimit",
        "RateLimit-Policy",
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
        "X-RateLimit-Limit",
        "x-ratelimit-remaining",
        "X-RATELIMIT-RESET",
        "x-ratelimit-used",
        "x-ratelimit-resource",
        "X-Shopify-Shop-Api-Call-Limit",
        "X-RateLimit-Retry-After",
        "X-Rate-Limit-Limit",
        "x-rate-limit-remaining",
        "X-Rate-Limit-Reset",
    ];

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            proptest::sample::select(KNOWN_NAMES).prop_map(str::to_owned),
            any::<String>(),
        ]
    }

    /// Arbitrary text, plus text shaped like what these headers hold, so the parsers' deeper
    /// paths get exercised and not just their first rejection.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "[ \t]*[-+]?[0-9]{0,25}(\\.[0-9]{0,6})?[ \t]*",
            "[0-9]{1,20}/[0-9]{1,20}",
            "(\"[a-z,;\\\\\"]{0,6}\"|[a-z0-9]{1,6})(;[a-zA-Z]{1,2}(=[-0-9.\"]{0,22})?){0,4}(, ?(\"[a-z]{0,4}\"|[a-z0-9]{1,4})(;[qrtw]=[0-9]{0,20}){0,3}){0,3}",
            "\"[a-z]{1,6}\"(;(q|qu|w|pk|r|t|a)=(\"[a-z-]{0,14}\"|[0-9]{0,8})){0,5}(, ?\"[a-z]{1,6}\"(;(q|qu|w|r|t|a)=[0-9]{0,8}){0,4}){0,2}",
            "(limit|remaining|reset|x)=[-0-9.]{0,22}(, ?(limit|remaining|reset)=[-0-9.]{0,22}){0,3}",
            IETF_ITEMS,
            any::<u64>().prop_map(|t| http_date(t % (253_402_300_799 * SECOND))),
        ]
    }

    /// Current-draft policy and limit lists, with every parameter the adapters read or skip.
    const IETF_ITEMS: &str = concat!(
        "(\"[a-z]{0,4}\"|[a-z]{1,4})",
        "(;(q|qu|w|pk|a|r|t|x)(=(\"[a-zA-Z;,-]{0,20}\"?|[-0-9.]{0,22}|:[A-Za-z0-9+/=]{0,8}:?))?){0,5}",
        "(, ?(\"[a-z]{0,4}\"|[a-z]{1,4})(;(q|qu|w|a|r|t)=[\"a-z0-9-]{0,22}){0,4}){0,3}",
    );

    fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
        proptest::collection::vec((name(), value()), 0..8)
    }

    proptest! {
        #[test]
        fn read_signal_never_panics_and_stays_sane(
            status in prop_oneof![Just(200u16), Just(403), Just(429), Just(503), any::<u16>()],
            headers in headers(),
            now in any::<u64>(),
        ) {
            let s = read_signal(status, &headers, now);
            prop_assert!(s.retry_after_ms.is_none_or(|ms| ms <= MAX_WAIT_MS));
            if status == 429 {
                prop_assert!(s.rate_limited);
            }
            if !matches!(status, 403 | 429 | 503) {
                prop_assert!(!s.rate_limited);
            }
            if let Some(q) = s.quota {
                prop_assert!(q != Quota::default(), "a matched quota says something");
                prop_assert!(q.reset_after_ms.is_none_or(|ms| ms <= MAX_WAIT_MS));
                prop_assert!(q.window_ms.is_none_or(|ms| ms > 0 && ms <= MAX_WINDOW_MS));
                for w in &q.windows {
                    prop_assert!(w.limit > 0, "{w:?}");
                    prop_assert!(w.length_ms > 0 && w.length_ms <= MAX_WINDOW_MS, "{w:?}");
                }
            }
        }

        #[test]
        fn arbitrary_names_and_values_never_panic(
            headers in proptest::collection::vec((any::<String>(), any::<String>()), 0..8),
            status in any::<u16>(),
            now in any::<u64>(),
        ) {
            let _ = read_signal(status, &headers, now);
        }

        #[test]
        fn retry_after_date_wait_does_not_depend_on_the_client_clock(
            // HTTP-dates end with the year 9999.
            server_s in 0u64..253_402_000_000,
            wait_s in 0u64..200_000,
            now in any::<u64>(),
        ) {
            let server = server_s * SECOND;
            let retry = http_date(server + wait_s * SECOND);
            let date = http_date(server);
            let s = read_signal(429, &hs(&[("Retry-After", &retry), ("Date", &date)]), now);
            prop_assert_eq!(s.retry_after_ms, Some((wait_s * SECOND).min(MAX_WAIT_MS)));
        }

        #[test]
        fn retry_after_delta_is_seconds_capped(secs in any::<u64>(), now in any::<u64>()) {
            let s = read_signal(429, &hs(&[("Retry-After", &secs.to_string())]), now);
            prop_assert_eq!(
                s.retry_after_ms,
                Some(secs.saturating_mul(SECOND).min(MAX_WAIT_MS))
            );
        }

        #[test]
        fn ietf_fields_of_any_text_never_panic_and_stay_sane(
            policy in prop_oneof![any::<String>(), IETF_ITEMS],
            limit in prop_oneof![any::<String>(), IETF_ITEMS],
            status in prop_oneof![Just(200u16), Just(403), Just(429)],
        ) {
            let s = read_signal(
                status,
                &hs(&[("RateLimit-Policy", &policy), ("RateLimit", &limit)]),
                SERVER_NOW,
            );
            prop_assert!(s.retry_after_ms.is_none_or(|ms| ms <= MAX_WAIT_MS));
            if let Some(q) = s.quota {
                prop_assert!(q.reset_after_ms.is_none_or(|ms| ms <= MAX_WAIT_MS));
                prop_assert!(q.window_ms.is_none_or(|ms| ms > 0 && ms <= MAX_WINDOW_MS));
                prop_assert!(q.windows.iter().all(|w| w.limit > 0 && w.length_ms > 0));
            }
        }

        #[test]
        fn ietf_other_units_never_read_as_requests(
            unit in "\"?[a-zA-Z-]{0,20}\"?",
            names in ("[a-z]{1,6}", "[a-z]{1,6}"),
            q in any::<u64>(),
            w in any::<u64>(),
            r in any::<u64>(),
            t in any::<u64>(),
        ) {
            prop_assume!(sf_string(&unit).is_none_or(|u| !u.eq_ignore_ascii_case("requests")));
            let (policy_name, limit_name) = names;
            let policy = format!("\"{policy_name}\";q={q};qu={unit};w={w}");
            let limit = format!("\"{limit_name}\";r={r};t={t}");
            let s = read_signal(
                403,
                &hs(&[("RateLimit-Policy", &policy), ("RateLimit", &limit)]),
                0,
            );
            prop_assert_eq!(s.quota, None);
            prop_assert!(!s.rate_limited);
        }

        #[test]
        fn ietf_reads_any_named_policy_and_state(
            name in "[a-z]{1,8}",
            q in 1u64..=u64::from(u32::MAX),
            w in 1u64..=31 * 86_400,
            r in any::<u64>(),
            t in 0u64..86_400,
        ) {
            let policy = format!("\"{name}\";q={q};w={w}");
            let limit = format!("{name};r={r};t={t}");
            let q_read = read_signal(
                200,
                &hs(&[("RateLimit-Policy", &policy), ("RateLimit", &limit)]),
                0,
            )
            .quota
            .expect("a quota");
            prop_assert_eq!(q_read.limit, Some(q));
            prop_assert_eq!(q_read.remaining, Some(r));
            prop_assert_eq!(q_read.reset_after_ms, Some(t * SECOND));
            prop_assert_eq!(q_read.window_ms, Some(w * SECOND));
            prop_assert_eq!(q_read.windows, vec![Window {
                limit: u32::try_from(q).unwrap_or(u32::MAX),
                length_ms: w * SECOND,
            }]);
        }

        #[test]
        fn x_ratelimit_retry_after_of_any_text_never_beats_retry_after(
            v in prop_oneof![any::<String>(), "[0-9]{0,25}(\\.[0-9]{0,4})?"],
            secs in 0u64..200_000,
            now in any::<u64>(),
        ) {
            let s = read_signal(429, &hs(&[("X-RateLimit-Retry-After", &v)]), now);
            prop_assert!(s.retry_after_ms.is_none_or(|ms| ms <= MAX_WAIT_MS));
            let retry = secs.to_string();
            let s = read_signal(
                429,
                &hs(&[("X-RateLimit-Retry-After", &v), ("Retry-After", &retry)]),
                now,
            );
            prop_assert_eq!(s.retry_after_ms, Some((secs * SECOND).min(MAX_WAIT_MS)));
        }

        #[test]
        fn x_rate_limit_of_any_text_never_panics_and_reads_any_counts(
            reset in prop_oneof![any::<String>(), "[0-9]{0,25}(\\.[0-9]{0,4})?"],
            limit in any::<u64>(),
            remaining in any::<u64>(),
            now in any::<u64>(),
        ) {
            let (l, r) = (limit.to_string(), remaining.to_string());
            let s = read_signal(
                429,
                &hs(&[
                    ("X-Rate-Limit-Limit", &l),
                    ("X-Rate-Limit-Remaining", &r),
                    ("X-Rate-Limit-Reset", &reset),
                ]),
                now,
            );
            prop_assert!(s.retry_after_ms.is_none_or(|ms| ms <= MAX_WAIT_MS));
            let q = s.quota.expect("a quota");
            prop_assert_eq!((q.limit, q.remaining), (Some(limit), Some(remaining)));
            prop_assert!(q.reset_after_ms.is_none_or(|ms| ms <= MAX_WAIT_MS));
        }

        #[test]
        fn shopify_reads_any_used_and_limit(used in any::<u64>(), limit in any::<u64>()) {
            let v = format!("{used}/{limit}");
            let q = read_signal(200, &hs(&[("X-Shopify-Shop-Api-Call-Limit", &v)]), 0)
                .quota
                .expect("a quota");
            prop_assert_eq!(q.limit, Some(limit));
            prop_assert_eq!(q.remaining, Some(limit.saturating_sub(used)));
        }
    }
}
