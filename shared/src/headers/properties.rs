//! `read_signal` over arbitrary headers: it never panics and what it yields stays in the
//! bounds the engine relies on.

use proptest::prelude::*;

use super::structured::sf_string;
use super::test_support::*;
use super::*;

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
