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
//!   parameters `r` (remaining; `a`, "available", in later drafts), `t` (reset; `w` in draft
//!   12 when no `t` is sent, else `w` is the limit's window) and `c` (the request's cost).
//! - `RateLimit: limit=100, remaining=50, reset=5`: the older combined dictionary.
//! - `RateLimit-Limit / -Remaining / -Reset` (drafts 0 to 6), the limit optionally a list
//!   `100, 100;w=60`, or paired with the old-form `RateLimit-Policy: 100;w=60`.
//! - `RateLimit-Policy` alone.
//! - The vendors' families, as rows of one table (`families::FAMILIES`, which lists them with
//!   what each gives): `X-RateLimit-*` (GitHub, Discord with `-Reset-After` and `-Bucket`, most
//!   others), `X-Rate-Limit-*` (Twitter/X), one family per resource with the resource last
//!   (`x-ratelimit-remaining-tokens`, OpenAI's, Go-duration resets) or in the middle
//!   (`X-RateLimit-Requests-Limit`; `anthropic-ratelimit-tokens-reset` with RFC 3339 resets),
//!   and HubSpot's interval, daily and per-second quotas.
//! - `X-Shopify-Shop-Api-Call-Limit: 32/40`.
//!
//! And for how long to back off: `Retry-After`, then (once the response is a rate limit)
//! `X-RateLimit-Retry-After`, then the reset of the quotas above (the later of an exhausted
//! request quota's and an exhausted resource's: out of tokens blocks as surely).
//!
//! Everything here reads text from the network, so nothing may panic: numbers are parsed by hand
//! (no floats, no signs: `99.0` is read as the count it is, `99.5` not at all), arithmetic
//! saturates, and every duration is capped before it leaves.
//!
//! The reading is split along those lines: `ietf` for the IETF fields, `families` for the
//! vendors' `<prefix>-limit / -remaining / -reset` spellings (and Shopify's), `values` for
//! numbers, durations and resets, `http_date` for HTTP-dates and RFC 3339 timestamps,
//! `structured` for header look-up
//! and the structured-field syntax. This file holds what the engine sees: `read_signal`,
//! `ServerSignal`, `Quota`, and the back-off fields (`Retry-After` and its vendor spellings).

mod families;
mod http_date;
mod ietf;
#[cfg(test)]
mod properties;
mod quotas;
mod structured;
#[cfg(test)]
mod test_support;
mod values;

use serde::{Deserialize, Serialize};

use crate::config::Window;
use crate::substring;
use crate::time::{DurationMs, Millis};

use families::*;
use http_date::*;
use ietf::*;
pub(crate) use structured::Headers;
use values::*;

/// The longest wait (`retry_after_ms`, `reset_after_ms`) a response can impose. A server that
/// asks for more is more likely confused (or a misread epoch) than serious, and a queue parked
/// for a week looks broken; after a day we simply ask again.
pub const MAX_WAIT_MS: DurationMs = 24 * 60 * 60 * 1000;

/// The longest quota window we believe. Monthly quotas are real, so this is longer than
/// `MAX_WAIT_MS`; a longer window is dropped rather than clamped, because a clamped window would
/// overstate the allowed rate (limit / window) that the limiter is retuned to.
pub const MAX_WINDOW_MS: DurationMs = 31 * 24 * 60 * 60 * 1000;

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
    /// Quotas of what else the server counts, by the resource word it names them with
    /// (`tokens`, `input-tokens`, `output-tokens`, lower case), from the families that report
    /// one quota per resource (`x-ratelimit-remaining-tokens`, `anthropic-ratelimit-tokens-*`).
    /// Their `requests` resource is `quota`. Read, not yet kept to: a budget counts requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<(String, Quota)>,
    /// The server's name for the limit this response counted against, where it gives one
    /// (Discord's `X-RateLimit-Bucket`, shared by the routes with one limit; GitHub's
    /// `X-RateLimit-Resource`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    /// The refusal was of a limit over everything the client sends, not this bucket's
    /// (Discord's `X-RateLimit-Global: true` or `X-RateLimit-Scope: global`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub global: bool,
    /// What this request cost against its quota, where the server says (the IETF draft 12
    /// `RateLimit` parameter `c`); a request costs 1 unless told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<u64>,
    /// The refusal was of requests open at once, not of the rate: Stripe's
    /// `Stripe-Rate-Limited-Reason` naming a concurrency limiter (`global-concurrency`,
    /// `endpoint-concurrency`), or a budget's body rule saying so (`body_rules`). Such a
    /// refusal pauses nothing: the budget keeps fewer requests in flight for a while
    /// (`concurrency_cap`). `rate_limited` is false then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub concurrency_limited: bool,
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
    // policy), then the vendors' families in the table's order (X-RateLimit, the de-facto
    // convention, first), and Shopify's fill level, the vaguest, last.
    let mut quotas = vec![
        ietf_ratelimit_field(&h, &policies, base),
        ietf_draft_counters(&h, &policies, base),
        ietf_policies_alone(&policies),
    ];
    let mut resources: Vec<(String, Quota)> = Vec::new();
    for family in FAMILIES {
        let read = read_group(family, &h, base);
        quotas.push(read.requests);
        for (word, q) in read.resources {
            if !resources.iter().any(|(w, _)| *w == word) {
                resources.push((word, q));
            }
        }
    }
    quotas.push(shopify(&h));
    let mut matched = quotas.iter().flatten();
    let quota = matched.next().cloned();

    // A 403 is normally "forbidden, don't retry", but GitHub (and imitators) answer an
    // exhausted quota with 403 rather than 429; treating that as permanent would drop jobs
    // that only needed to wait. Any adapter's exhausted quota counts, not just the winner's.
    let exhausted = quotas.iter().flatten().any(|q| q.remaining == Some(0));
    let concurrency_limited = matches!(status, 429 | 403 | 503) && concurrency_refusal(&h);
    let rate_limited = !concurrency_limited
        && match status {
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
        // The exhausted quota's reset is the one that matters, if several were reported; an
        // exhausted resource (tokens) blocks as surely as requests do, so the later of the
        // two resets is the one after which a retry can pass.
        let exhausted_reset = |q: &Quota| q.reset_after_ms.filter(|_| q.remaining == Some(0));
        let requests = quotas.iter().flatten().find_map(exhausted_reset);
        let other = resources
            .iter()
            .filter_map(|(_, q)| exhausted_reset(q))
            .max();
        requests
            .max(other)
            .or_else(|| quotas.iter().flatten().find_map(|q| q.reset_after_ms))
    });

    ServerSignal {
        rate_limited,
        retry_after_ms,
        quota,
        held_ms: held(&h),
        resources,
        bucket: bucket(&h),
        global: global(&h),
        cost: ietf_cost(&h, &policies),
        concurrency_limited,
    }
}

/// Stripe names the limiter that refused a request in `Stripe-Rate-Limited-Reason`: a rate
/// (`global-rate`, `endpoint-rate`, `resource-specific`) or a concurrency limiter
/// (`global-concurrency`, `endpoint-concurrency`). Only the latter is read here; the others are
/// rate limits like any 429.
fn concurrency_refusal(h: &Headers) -> bool {
    h.first_parsed("stripe-rate-limited-reason", |v| {
        substring::contains(&v.to_ascii_lowercase(), "concurrency").then_some(())
    })
    .is_some()
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

/// Keeps a quota only if some adapter actually found something in it.
pub(super) fn non_empty(q: Quota) -> Option<Quota> {
    let any = q.limit.is_some()
        || q.remaining.is_some()
        || q.reset_after_ms.is_some()
        || q.window_ms.is_some();
    any.then_some(q)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::test_support::*;

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
                resources: vec![],
                bucket: None,
                global: false,
                cost: None,
                concurrency_limited: false,
            }
        );
    }

    #[test]
    fn retry_after_on_a_success_is_reported_but_not_a_rate_limit() {
        let s = read(200, &[("Retry-After", "5")], 0);
        assert!(!s.rate_limited);
        assert_eq!(s.retry_after_ms, Some(5 * SECOND));
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
}
