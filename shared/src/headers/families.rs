//! The vendors' spellings of a quota in separate fields, as data: one table of families
//! (`FAMILIES`) read by one reader (`read_group`), so a new vendor is a row. The older IETF
//! `RateLimit-Limit / -Remaining / -Reset` is a row too (`ietf::DRAFT_COUNTERS`), read by the
//! same reader and then paired with its policies in `ietf`.
//!
//! What does not fit a row, and why:
//! - The IETF `RateLimit` / `RateLimit-Policy` fields (`ietf`): structured fields whose items
//!   name the policy they report on, so reading them is pairing names, not looking up fields.
//! - Shopify's `X-Shopify-Shop-Api-Call-Limit: 32/40` (`shopify` below): one field holding the
//!   fill level of a leaky bucket, turned into a quota by a drain rate the header does not say.
//!
//! The table, in the order a family's request quota is preferred (after the IETF fields):
//!
//! | family | names (any case) | what it gives the limiter |
//! |---|---|---|
//! | `X_RATELIMIT` (GitHub, Discord, most) | `X-RateLimit-Limit`, `-Remaining`, `-Used`, `-Reset-After`, `-Reset` | the request quota |
//! | `X_RATE_LIMIT` (Twitter/X) | `X-Rate-Limit-Limit`, `-Remaining`, `-Reset` | the request quota |
//! | `RESOURCE_SUFFIX` (OpenAI and the APIs copying it) | `x-ratelimit-limit-<resource>`, `-remaining-<resource>`, `-reset-<resource>` (Go durations) | `requests` as the request quota, every other resource (`tokens`, ...) in `ServerSignal::resources` |
//! | `RESOURCE_MIDDLE` | `X-RateLimit-<Resource>-Limit`, `-Remaining`, `-Reset` (epoch ms and the rest of `ResetForm::Auto`) | likewise |
//! | `ANTHROPIC` | `anthropic-ratelimit-<resource>-limit`, `-remaining`, `-reset` (RFC 3339) | likewise, resources `requests`, `tokens`, `input-tokens`, `output-tokens` |
//! | `HUBSPOT` (three rows) | `X-HubSpot-RateLimit-Max`, `-Remaining`, `-Interval-Milliseconds`; `-Daily`, `-Daily-Remaining`; `-Secondly`, `-Secondly-Remaining` | a window per row (interval, a day of 86,400,000 ms, a second), the state closest to blocking as the quota, and (no reset is sent) its window as the latest reset |
//!
//! Resets (`ResetForm`): a number below 10^9 is delta seconds, from 10^9 epoch seconds, from
//! 10^12 epoch milliseconds (the rule the X-RateLimit reader always had: as a delta, 10^9 s is
//! 31 years; as epoch seconds, 10^12 is the year 33658); fractions are allowed and rounded up to
//! the millisecond. A text that is no number may be an RFC 3339 timestamp or an HTTP-date.
//! Counts may be written as floats with nothing after the point (`99.0`).

use super::quotas::{limiter_window, most_restrictive_state, parse_limit_list};
use super::structured::{named_from, Headers};
use super::values::{self, *};
use super::{non_empty, Quota, MAX_WAIT_MS};
use crate::config::Window;
use crate::time::{DurationMs, Millis};

/// Shopify's REST bucket drains at 2 calls per second (standard plans); the header gives only
/// the fill level, so the leak rate is what turns it into a window and a reset.
const SHOPIFY_LEAK_PER_SECOND: u64 = 2;

/// The most resources read from one family in one response: a bound on the work a response
/// with thousands of made-up names can cause. Real APIs send two to four.
const MAX_RESOURCES: usize = 8;

/// Where a family's names put the resource word (what the quota counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ResourceAt {
    /// No resource word: the quota counts requests (`x-ratelimit-limit`).
    None,
    /// After the field: `x-ratelimit-limit-requests`, `x-ratelimit-reset-tokens`.
    Suffix,
    /// Between the prefix and the field: `x-ratelimit-requests-limit`,
    /// `anthropic-ratelimit-input-tokens-remaining`.
    Middle,
}

/// Where a family's window length comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WindowFrom {
    /// Nowhere but a limit list (`100, 100;w=60`): most families state no window.
    LimitList,
    /// A field with the length in milliseconds (HubSpot's `-Interval-Milliseconds: 10000`).
    MillisField(&'static str),
    /// A length the vendor documents by the field's name and does not send (HubSpot's
    /// `-Daily` is per day, `-Secondly` per second).
    Fixed(DurationMs),
}

/// One row of the table: the names that carry one quota, and how its values are written.
/// Names are written in lower case, without the prefix; "" is a field the family lacks.
#[derive(Clone, Copy, Debug)]
pub(super) struct Family {
    /// Every name starts with this (`x-ratelimit-`).
    pub(super) prefix: &'static str,
    pub(super) resource: ResourceAt,
    pub(super) limit: &'static str,
    pub(super) remaining: &'static str,
    /// A count used so far, for a remaining the server left out (GitHub's `-Used`).
    pub(super) used: &'static str,
    /// The reset's fields, first readable wins, each with its form. None at all: the row's
    /// stated window (`window`) stands in for the reset, as the latest it can be.
    pub(super) resets: &'static [(&'static str, ResetForm)],
    pub(super) window: WindowFrom,
    /// Words in a resource's place that are no resource (Discord's `x-ratelimit-reset-after`
    /// looks like the reset of a resource "after" to the suffix family).
    pub(super) not_resources: &'static [&'static str],
}

/// GitHub's, Discord's and most APIs' `X-RateLimit-Limit / -Remaining / -Reset`.
///
/// Why: the de-facto convention. Its reset is a delta at some vendors and an epoch at others
/// (GitHub; Discord's with a fraction), so the `Auto` form tells them apart; Discord's
/// `-Reset-After` is the same reset as a delta, immune to clock skew, so it is read first.
/// GitHub's `-Resource` and Discord's `-Bucket` name the bucket (`bucket` below); `-Used`
/// stands in for a remaining a proxy dropped. The limit may be the early-draft list
/// `100, 100;w=60` that carries windows.
pub(super) const X_RATELIMIT: Family = Family {
    prefix: "x-ratelimit-",
    resource: ResourceAt::None,
    limit: "limit",
    remaining: "remaining",
    used: "used",
    resets: &[
        ("reset-after", ResetForm::DeltaSeconds),
        ("reset", ResetForm::Auto),
    ],
    window: WindowFrom::LimitList,
    not_resources: &[],
};

/// Twitter/X's `X-Rate-Limit-Limit / -Remaining / -Reset`, with a second hyphen (epoch resets).
pub(super) const X_RATE_LIMIT: Family = Family {
    prefix: "x-rate-limit-",
    resets: &[("reset", ResetForm::Auto)],
    ..X_RATELIMIT
};

/// OpenAI's (and the many APIs that copied it) one family per resource, the resource last:
/// `x-ratelimit-limit-requests: 5000`, `x-ratelimit-remaining-tokens: 159976`,
/// `x-ratelimit-reset-requests: 12ms`, resets as Go durations (`1s`, `6m0s`).
pub(super) const RESOURCE_SUFFIX: Family = Family {
    prefix: "x-ratelimit-",
    resource: ResourceAt::Suffix,
    limit: "limit",
    remaining: "remaining",
    used: "",
    resets: &[("reset", ResetForm::GoDuration)],
    window: WindowFrom::LimitList,
    not_resources: &["after"],
};

/// The resource in the middle: `X-RateLimit-Requests-Limit`, `X-RateLimit-Requests-Remaining`,
/// `X-RateLimit-Requests-Reset`, resets seen as epoch milliseconds (read by size, `Auto`).
pub(super) const RESOURCE_MIDDLE: Family = Family {
    prefix: "x-ratelimit-",
    resource: ResourceAt::Middle,
    resets: &[("reset", ResetForm::Auto)],
    not_resources: &[],
    ..RESOURCE_SUFFIX
};

/// Anthropic's vendor prefix: `anthropic-ratelimit-requests-limit / -remaining / -reset`, and
/// the same for `tokens`, `input-tokens`, `output-tokens`; resets as RFC 3339 timestamps.
pub(super) const ANTHROPIC: Family = Family {
    prefix: "anthropic-ratelimit-",
    ..RESOURCE_MIDDLE
};

/// HubSpot's interval quota: `X-HubSpot-RateLimit-Max` per `-Interval-Milliseconds`, with
/// `-Remaining`. Read with the daily and per-second rows beside it (`FAMILIES`).
pub(super) const HUBSPOT_INTERVAL: Family = Family {
    prefix: "x-hubspot-ratelimit-",
    resource: ResourceAt::None,
    limit: "max",
    remaining: "remaining",
    used: "",
    resets: &[],
    window: WindowFrom::MillisField("interval-milliseconds"),
    not_resources: &[],
};

/// HubSpot's daily quota: `X-HubSpot-RateLimit-Daily` and `-Daily-Remaining` (API-key apps).
pub(super) const HUBSPOT_DAILY: Family = Family {
    limit: "daily",
    remaining: "daily-remaining",
    window: WindowFrom::Fixed(86_400_000),
    ..HUBSPOT_INTERVAL
};

/// HubSpot's per-second quota: `X-HubSpot-RateLimit-Secondly` and `-Secondly-Remaining`.
pub(super) const HUBSPOT_SECONDLY: Family = Family {
    limit: "secondly",
    remaining: "secondly-remaining",
    window: WindowFrom::Fixed(1_000),
    ..HUBSPOT_INTERVAL
};

/// The families, each a group of rows read together (one row per window the vendor reports),
/// in the order their request quota is preferred. The plain spellings come first, as before
/// the table: a server sending both `X-RateLimit-Limit` and a resource family is reporting its
/// request quota in the plain one.
pub(super) const FAMILIES: &[&[Family]] = &[
    &[X_RATELIMIT],
    &[X_RATE_LIMIT],
    &[RESOURCE_SUFFIX],
    &[RESOURCE_MIDDLE],
    &[ANTHROPIC],
    &[HUBSPOT_INTERVAL, HUBSPOT_DAILY, HUBSPOT_SECONDLY],
];

/// What one family said.
#[derive(Debug, Default)]
pub(super) struct FamilyRead {
    /// The request quota: the family's own where it has no resource word, its `requests`
    /// resource where it has. Of several rows, the state closest to blocking, with every
    /// row's window.
    pub(super) requests: Option<Quota>,
    /// Every other resource's quota, by its word as sent (lower case): `tokens`,
    /// `input-tokens`.
    pub(super) resources: Vec<(String, Quota)>,
}

/// Reads one family (a group of rows, see `FAMILIES`).
pub(super) fn read_group(rows: &[Family], h: &Headers, base: Millis) -> FamilyRead {
    let mut requests: Vec<Quota> = Vec::new();
    let mut windows: Vec<Window> = Vec::new();
    let mut resources = Vec::new();
    for row in rows {
        if row.resource == ResourceAt::None {
            if let Some(q) = read_row(row, h, base, "") {
                windows.extend(q.windows.iter().copied());
                requests.push(q);
            }
            continue;
        }
        for word in resource_words(row, h) {
            let Some(q) = read_row(row, h, base, &word) else {
                continue;
            };
            if word == "requests" {
                windows.extend(q.windows.iter().copied());
                requests.push(q);
            } else if !resources.iter().any(|(w, _): &(String, Quota)| *w == word) {
                resources.push((word, q));
            }
        }
    }
    let requests = if requests.len() > 1 {
        most_restrictive_state(requests.into_iter()).map(|mut q| {
            windows.dedup();
            q.windows = windows;
            q
        })
    } else {
        requests.pop()
    };
    FamilyRead {
        requests,
        resources,
    }
}

/// One row's quota, for one resource word ("" for a family without them).
pub(super) fn read_row(row: &Family, h: &Headers, base: Millis, word: &str) -> Option<Quota> {
    // Every field of a row begins with its prefix: a response without one (most responses,
    // for most rows) is passed over at once, not once per field, each a look-up of its own
    // name through every header.
    if !h.any_named_from(row.prefix) {
        return None;
    }
    let name = |field: &str| match row.resource {
        ResourceAt::None => format!("{}{field}", row.prefix),
        ResourceAt::Suffix => format!("{}{field}-{word}", row.prefix),
        ResourceAt::Middle => format!("{}{word}-{field}", row.prefix),
    };
    let field = |f: &str, parse: &mut dyn FnMut(&str) -> Option<u64>| {
        if f.is_empty() {
            None
        } else {
            h.first_parsed(&name(f), parse)
        }
    };
    let (mut limit, mut window_ms, mut windows) = h
        .joined(&name(row.limit))
        .map(|v| parse_limit_list(&v))
        .unwrap_or((None, None, Vec::new()));
    if limit.is_none() {
        limit = field(row.limit, &mut parse_whole_count);
    }
    let used = field(row.used, &mut parse_whole_count);
    let remaining = field(row.remaining, &mut parse_whole_count)
        // GitHub always sends both, but a proxy trimming headers may keep only one; used and
        // limit determine remaining.
        .or_else(|| Some(limit?.saturating_sub(used?)));
    let reset_after_ms = row
        .resets
        .iter()
        .find_map(|&(f, form)| field(f, &mut |v| read_reset(form, v, base)));
    let stated_window = match row.window {
        WindowFrom::LimitList => None,
        WindowFrom::MillisField(f) => field(f, &mut |v| values::window_ms(parse_count(v)?)),
        WindowFrom::Fixed(ms) => {
            // A window nobody sent says nothing alone: the row matched only if a count did.
            if limit.is_none() && remaining.is_none() && reset_after_ms.is_none() {
                return None;
            }
            Some(ms)
        }
    };
    if let Some(length_ms) = stated_window {
        window_ms = window_ms.or(Some(length_ms));
        windows.extend(limit.and_then(|l| limiter_window(l, length_ms)));
    }
    // A family that sends no reset (HubSpot) still has one: its quota is whole again one
    // window from now at the latest, fixed or sliding. That bound, never early, is what lets
    // the budget keep to a remaining shared with other callers; without a reset a remaining is
    // only a number (see `BudgetState::apply_quota`).
    let reset_after_ms = match (reset_after_ms, stated_window) {
        (None, Some(length_ms)) if row.resets.is_empty() => Some(length_ms.min(MAX_WAIT_MS)),
        (reset, _) => reset,
    };
    non_empty(Quota {
        limit,
        remaining,
        reset_after_ms,
        window_ms,
        windows,
    })
}

/// The resource words a row's names carry in this response, in the order first seen, lower
/// case, at most `MAX_RESOURCES`.
fn resource_words(row: &Family, h: &Headers) -> Vec<String> {
    let mut fields = vec![row.limit, row.remaining, row.used];
    fields.extend(row.resets.iter().map(|&(f, _)| f));
    let mut words: Vec<String> = Vec::new();
    for (name, _) in h.0 {
        // Lowered only when the prefix matches: most names are not the row's.
        if !named_from(name, row.prefix) {
            continue;
        }
        let name = name.trim().to_ascii_lowercase();
        let Some(rest) = name.strip_prefix(row.prefix) else {
            continue;
        };
        for f in fields.iter().filter(|f| !f.is_empty()) {
            let word = match row.resource {
                ResourceAt::None => None,
                ResourceAt::Suffix => rest.strip_prefix(f).and_then(|r| r.strip_prefix('-')),
                ResourceAt::Middle => rest.strip_suffix(f).and_then(|r| r.strip_suffix('-')),
            };
            let Some(word) = word.filter(|w| !w.is_empty()) else {
                continue;
            };
            if !row.not_resources.contains(&word)
                && !words.iter().any(|w| w == word)
                && words.len() < MAX_RESOURCES
            {
                words.push(word.to_owned());
            }
        }
    }
    words
}

/// The named bucket this response counted against, where the server names it: Discord's
/// `X-RateLimit-Bucket` (a hash shared by routes with one limit), GitHub's
/// `X-RateLimit-Resource` (`core`, `search`, `graphql`).
pub(super) fn bucket(h: &Headers) -> Option<String> {
    ["x-ratelimit-bucket", "x-ratelimit-resource"]
        .iter()
        .find_map(|n| h.first_parsed(n, |v| (!v.is_empty()).then(|| v.to_owned())))
}

/// Discord's global limit: `X-RateLimit-Global: true`, or `X-RateLimit-Scope: global`, on a
/// 429 that counted every route rather than the bucket's.
pub(super) fn global(h: &Headers) -> bool {
    h.values("x-ratelimit-global")
        .any(|v| v.eq_ignore_ascii_case("true"))
        || h.values("x-ratelimit-scope")
            .any(|v| v.eq_ignore_ascii_case("global"))
}

/// `X-Shopify-Shop-Api-Call-Limit: 32/40`: 32 of a 40-call leaky bucket used.
///
/// Why: Shopify gives only the fill level; the bucket drains at a known rate, so a full bucket
/// empties in `limit / rate` seconds (the window) and the current fill in `used / rate`
/// seconds (when the whole quota is back: the reset).
pub(super) fn shopify(h: &Headers) -> Option<Quota> {
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

#[cfg(test)]
mod tests;
