//! The families table's tests: each vendor's headers as its documentation shows them, and the
//! spellings the table took over (X-RateLimit, X-Rate-Limit, the older IETF fields), Shopify's.

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

// --- The families table: each vendor's headers as its documentation shows them ----------

/// A quota of these numbers and nothing else.
fn counts(limit: u64, remaining: u64, reset_after_ms: Option<u64>) -> Quota {
    Quota {
        limit: Some(limit),
        remaining: Some(remaining),
        reset_after_ms,
        window_ms: None,
        windows: vec![],
    }
}

#[test]
fn resource_suffix_family_like_openai() {
    // Requests and tokens per minute, each with its own remaining and Go-duration reset.
    let s = read(
        200,
        &[
            ("x-ratelimit-limit-requests", "5000"),
            ("x-ratelimit-limit-tokens", "160000"),
            ("x-ratelimit-remaining-requests", "4999"),
            ("x-ratelimit-remaining-tokens", "159976"),
            ("x-ratelimit-reset-requests", "12ms"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ],
        SERVER_NOW,
    );
    assert_eq!(s.quota, Some(counts(5000, 4999, Some(12))));
    assert_eq!(
        s.resources,
        vec![(
            "tokens".to_owned(),
            counts(160_000, 159_976, Some(6 * MINUTE))
        )]
    );
    assert!(!s.rate_limited);
    // Out of tokens with requests to spare: a 429 without Retry-After waits for the
    // tokens' reset, the later one.
    let s = read(
        429,
        &[
            ("X-RateLimit-Limit-Requests", "60"),
            ("X-RateLimit-Remaining-Requests", "0"),
            ("X-RateLimit-Reset-Requests", "1s"),
            ("X-RateLimit-Limit-Tokens", "150000"),
            ("X-RateLimit-Remaining-Tokens", "0"),
            ("X-RateLimit-Reset-Tokens", "1m30.5s"),
        ],
        0,
    );
    assert!(s.rate_limited);
    assert_eq!(s.retry_after_ms, Some(90_500));
    // Discord's Reset-After is not a resource "after".
    let s = read(200, &[("X-RateLimit-Reset-After", "1.5")], 0);
    assert!(s.resources.is_empty());
}

#[test]
fn resource_in_the_middle_with_epoch_millisecond_resets() {
    let reset = (SERVER_NOW + 2_500).to_string();
    let s = read(
        200,
        &[
            ("X-RateLimit-Requests-Limit", "1000"),
            ("X-RateLimit-Requests-Remaining", "998"),
            ("X-RateLimit-Requests-Reset", &reset),
            ("X-RateLimit-Tokens-Limit", "40000"),
            ("X-RateLimit-Tokens-Remaining", "39000"),
            ("X-RateLimit-Tokens-Reset", &reset),
        ],
        SERVER_NOW,
    );
    assert_eq!(s.quota, Some(counts(1000, 998, Some(2_500))));
    assert_eq!(
        s.resources,
        vec![("tokens".to_owned(), counts(40_000, 39_000, Some(2_500)))]
    );
}

#[test]
fn vendor_prefix_family_like_anthropic() {
    // RFC 3339 resets, measured from the server's Date (the client clock is a minute fast).
    let date = http_date(SERVER_NOW);
    let s = read(
        429,
        &[
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2023-11-14T22:14:00Z"),
            ("anthropic-ratelimit-tokens-limit", "90000"),
            ("anthropic-ratelimit-tokens-remaining", "80000"),
            ("anthropic-ratelimit-tokens-reset", "2023-11-14T22:13:21Z"),
            ("anthropic-ratelimit-input-tokens-limit", "80000"),
            ("anthropic-ratelimit-input-tokens-remaining", "72000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2023-11-14T22:13:21.5Z",
            ),
            ("anthropic-ratelimit-output-tokens-limit", "16000"),
            ("anthropic-ratelimit-output-tokens-remaining", "8000"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2023-11-14T22:13:30Z",
            ),
            ("date", &date),
        ],
        SERVER_NOW + MINUTE,
    );
    assert!(s.rate_limited);
    assert_eq!(s.quota, Some(counts(50, 0, Some(40 * SECOND))));
    assert_eq!(s.retry_after_ms, Some(40 * SECOND));
    assert_eq!(
        s.resources,
        vec![
            ("tokens".to_owned(), counts(90_000, 80_000, Some(SECOND))),
            (
                "input-tokens".to_owned(),
                counts(80_000, 72_000, Some(1_500))
            ),
            (
                "output-tokens".to_owned(),
                counts(16_000, 8_000, Some(10 * SECOND))
            ),
        ]
    );
}

#[test]
fn interval_and_daily_family_like_hubspot() {
    let s = read(
        200,
        &[
            ("X-HubSpot-RateLimit-Max", "100"),
            ("X-HubSpot-RateLimit-Remaining", "97"),
            ("X-HubSpot-RateLimit-Interval-Milliseconds", "10000"),
            ("X-HubSpot-RateLimit-Daily", "250000"),
            ("X-HubSpot-RateLimit-Daily-Remaining", "249000"),
            ("X-HubSpot-RateLimit-Secondly", "10"),
            ("X-HubSpot-RateLimit-Secondly-Remaining", "9"),
        ],
        0,
    );
    // Every window goes to the limiter; the state closest to blocking is the quota.
    assert_eq!(
        s.quota,
        Some(Quota {
            limit: Some(10),
            remaining: Some(9),
            // HubSpot sends no reset: the window is the latest it can be.
            reset_after_ms: Some(SECOND),
            window_ms: Some(SECOND),
            windows: vec![win(100, 10), win(250_000, 86_400), win(10, 1)],
        })
    );
    // An OAuth app gets no daily limit: the interval alone.
    let q = quota(
        200,
        &[
            ("x-hubspot-ratelimit-max", "110"),
            ("x-hubspot-ratelimit-remaining", "0"),
            ("x-hubspot-ratelimit-interval-milliseconds", "10000"),
        ],
        0,
    );
    assert_eq!(
        q,
        Quota {
            limit: Some(110),
            remaining: Some(0),
            reset_after_ms: Some(10 * SECOND),
            window_ms: Some(10 * SECOND),
            windows: vec![win(110, 10)],
        }
    );
    // Out of the interval's quota, a 429 without Retry-After waits the interval out.
    let s = read(
        429,
        &[
            ("x-hubspot-ratelimit-max", "110"),
            ("x-hubspot-ratelimit-remaining", "0"),
            ("x-hubspot-ratelimit-interval-milliseconds", "10000"),
        ],
        0,
    );
    assert_eq!(s.retry_after_ms, Some(10 * SECOND));
    // The daily quota alone (its reset capped at a day, as every wait); a zero or
    // unreadable interval is no window, and then no reset stands in for one.
    let q = quota(200, &[("X-HubSpot-RateLimit-Daily-Remaining", "5")], 0);
    assert_eq!(
        (q.remaining, q.window_ms, q.reset_after_ms),
        (Some(5), Some(86_400 * SECOND), Some(MAX_WAIT_MS))
    );
    for interval in ["0", "-10", "ten", "99999999999999"] {
        let q = quota(
            200,
            &[
                ("X-HubSpot-RateLimit-Max", "100"),
                ("X-HubSpot-RateLimit-Interval-Milliseconds", interval),
            ],
            0,
        );
        assert_eq!(
            (q.window_ms, q.windows.len(), q.reset_after_ms),
            (None, 0, None),
            "{interval}"
        );
    }
    // Only a documented window and nothing sent: nothing read.
    assert_eq!(
        read(200, &[("X-HubSpot-RateLimit-Daily", "x")], 0).quota,
        None
    );
}

#[test]
fn discord_buckets_reset_after_and_global_limits() {
    // Epoch reset with a fraction, and the same as a delta in Reset-After, which wins: it
    // needs no clock (this client's is three minutes slow and the response has no Date).
    let reset = format!("{}.500", SERVER_NOW / SECOND + 1);
    let s = read(
        429,
        &[
            ("X-RateLimit-Limit", "5"),
            ("X-RateLimit-Remaining", "0"),
            ("X-RateLimit-Reset", &reset),
            ("X-RateLimit-Reset-After", "1.500"),
            ("X-RateLimit-Bucket", "abcd1234"),
            ("X-RateLimit-Scope", "user"),
        ],
        SERVER_NOW - 3 * MINUTE,
    );
    assert!(s.rate_limited);
    assert_eq!(s.quota, Some(counts(5, 0, Some(1_500))));
    assert_eq!(s.retry_after_ms, Some(1_500));
    assert_eq!(s.bucket.as_deref(), Some("abcd1234"));
    assert!(!s.global);
    // The global limit, as a 429 says it.
    for global in [
        ("X-RateLimit-Global", "true"),
        ("X-RateLimit-Scope", "global"),
    ] {
        let s = read(429, &[("Retry-After", "0.25"), global], 0);
        assert!(s.global, "{global:?}");
        assert_eq!(s.retry_after_ms, Some(250));
    }
    assert!(!read(429, &[("X-RateLimit-Global", "false")], 0).global);
    // GitHub names its bucket too.
    let s = read(200, &[("x-ratelimit-resource", "search")], 0);
    assert_eq!(s.bucket.as_deref(), Some("search"));
}

#[test]
fn float_counts_and_timestamp_resets_in_the_plain_family() {
    let date = http_date(SERVER_NOW);
    for reset in [
        "2023-11-14T22:14:20Z",
        "2023-11-14T23:14:20.000+01:00",
        "Tue, 14 Nov 2023 22:14:20 GMT",
    ] {
        let q = quota(
            200,
            &[
                ("X-RateLimit-Limit", "100.0"),
                ("X-RateLimit-Remaining", "99.0"),
                ("X-RateLimit-Reset", reset),
                ("Date", &date),
            ],
            SERVER_NOW + 3 * MINUTE,
        );
        assert_eq!(q, counts(100, 99, Some(MINUTE)), "{reset}");
    }
    // A fraction that is not zero is not a count.
    let q = quota(
        200,
        &[
            ("X-RateLimit-Limit", "100"),
            ("X-RateLimit-Remaining", "99.5"),
        ],
        0,
    );
    assert_eq!(q.remaining, None);
}

#[test]
fn the_table_is_consistent() {
    for family in FAMILIES {
        assert!(!family.is_empty());
        for row in *family {
            // Names are matched lower case: a capital in the table would never match.
            let names = [row.prefix, row.limit, row.remaining, row.used];
            for n in names.iter().chain(row.resets.iter().map(|(n, _)| n)) {
                assert_eq!(*n, n.to_ascii_lowercase(), "{row:?}");
            }
            assert!(row.prefix.ends_with('-'), "{row:?}");
            assert!(
                !row.limit.is_empty() || !row.remaining.is_empty(),
                "{row:?}"
            );
            if let WindowFrom::Fixed(ms) = row.window {
                assert!(ms > 0 && ms <= crate::headers::MAX_WINDOW_MS, "{row:?}");
            }
        }
    }
}

#[test]
fn stripe_names_a_concurrency_refusal_which_is_not_a_rate_limit() {
    // Stripe says which of its limiters refused a request; only its concurrency limiters mean
    // "fewer at once", the rate ones are 429s like any other.
    for reason in [
        "global-concurrency",
        "endpoint-concurrency",
        "Endpoint-Concurrency",
    ] {
        let s = read(429, &[("Stripe-Rate-Limited-Reason", reason)], 0);
        assert!(s.concurrency_limited, "{reason}");
        assert!(!s.rate_limited, "{reason}");
    }
    for reason in ["global-rate", "endpoint-rate", "resource-specific"] {
        let s = read(429, &[("Stripe-Rate-Limited-Reason", reason)], 0);
        assert!(!s.concurrency_limited, "{reason}");
        assert!(s.rate_limited, "{reason}");
    }
    // On a success the header means nothing.
    let s = read(
        200,
        &[("Stripe-Rate-Limited-Reason", "global-concurrency")],
        0,
    );
    assert!(!s.concurrency_limited && !s.rate_limited);
}
