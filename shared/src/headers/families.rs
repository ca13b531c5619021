//! The vendors' spellings of a quota in separate fields: `X-RateLimit-*`, `X-Rate-Limit-*`,
//! the older IETF `RateLimit-*` (read with its policies in `ietf`), and Shopify's fill level.

use super::ietf::parse_limit_list;
use super::structured::Headers;
use super::values::*;
use super::{non_empty, Quota, MAX_WAIT_MS};
use crate::time::Millis;

/// Shopify's REST bucket drains at 2 calls per second (standard plans); the header gives only
/// the fill level, so the leak rate is what turns it into a window and a reset.
const SHOPIFY_LEAK_PER_SECOND: u64 = 2;

/// `X-RateLimit-Limit / -Remaining / -Reset`, including GitHub's `-Used` and `-Resource`.
///
/// Why: the de-facto convention (GitHub, Twitter/X, countless others). Its reset is a delta at
/// some vendors and an epoch at others (GitHub), so `parse_reset` tells them apart. GitHub's
/// `-Resource` names which bucket (core, search, graphql) but `Quota` has no place for it; the
/// numbers are for the bucket this request used, which is what matters here.
pub(super) fn x_ratelimit(h: &Headers, base: Millis) -> Option<Quota> {
    counters(h, "x-ratelimit-", base)
}

/// `X-Rate-Limit-Limit / -Remaining / -Reset`, with a second hyphen.
///
/// Why: Twitter/X spells the convention this way (its reset an epoch, told apart from a delta by
/// `parse_reset` as for X-RateLimit), and a 429 carrying only `X-Rate-Limit-Reset` still says
/// when to come back.
pub(super) fn x_rate_limit(h: &Headers, base: Millis) -> Option<Quota> {
    counters(h, "x-rate-limit-", base)
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

/// The `<prefix>limit / remaining / reset / used` family, shared by X-RateLimit and the old
/// IETF spelling because they differ only in the prefix.
pub(super) fn counters(h: &Headers, prefix: &str, base: Millis) -> Option<Quota> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::test_support::*;
    use crate::headers::*;

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
}
