//! `read_signal` over arbitrary headers: it never panics and what it yields stays in the
//! bounds the engine relies on.

use proptest::prelude::*;

use super::http_date::parse_rfc3339_ms;
use super::structured::sf_string;
use super::test_support::*;
use super::values::{parse_go_duration_ms, parse_whole_count, read_reset, ResetForm};
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

// --- The families table and the value readers it uses --------------------------------------

/// Names of every family in the table, in the shapes resource words take, and near misses.
const FAMILY_NAMES: &[&str] = &[
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "X-RateLimit-Reset-After",
    "X-RateLimit-Bucket",
    "X-RateLimit-Global",
    "X-RateLimit-Scope",
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "x-ratelimit-reset-",
    "x-ratelimit--limit",
    "X-RateLimit-Requests-Limit",
    "X-RateLimit-Requests-Remaining",
    "X-RateLimit-Requests-Reset",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
    "X-HubSpot-RateLimit-Max",
    "X-HubSpot-RateLimit-Remaining",
    "X-HubSpot-RateLimit-Interval-Milliseconds",
    "X-HubSpot-RateLimit-Daily",
    "X-HubSpot-RateLimit-Daily-Remaining",
    "X-HubSpot-RateLimit-Secondly",
    "X-HubSpot-RateLimit-Secondly-Remaining",
    "RateLimit",
    "RateLimit-Policy",
    "Date",
    "Retry-After",
];

/// Text shaped like the families' values: Go durations, RFC 3339 timestamps, floats, counts,
/// and arbitrary text.
fn family_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[ \t]*[-+]?[0-9]{0,25}(\\.[0-9]{0,25})?[ \t]*",
        "([0-9]{0,30}(\\.[0-9]{0,30})?(h|m|s|ms|us|µs|ns|x|)){1,4}",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?([Zz]|[-+][0-9]{2}:[0-9]{2}|)",
        "(\"[a-z]{1,4}\"|[a-z]{1,4})(;(q|qu|w|a|r|t|c)=[-0-9.\"a-z]{0,22}){0,5}",
        any::<u64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|t| http_date(t % (253_402_300_799 * SECOND))),
    ]
}

fn family_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::sample::select(FAMILY_NAMES).prop_map(str::to_owned),
        1 => "(x-ratelimit|anthropic-ratelimit|x-hubspot-ratelimit)-[a-z_-]{0,12}",
        1 => any::<String>(),
    ]
}

/// The bounds the engine relies on, for a quota from any family.
fn assert_sane(q: &Quota) -> Result<(), TestCaseError> {
    prop_assert!(*q != Quota::default(), "a matched quota says something");
    prop_assert!(q.reset_after_ms.is_none_or(|ms| ms <= MAX_WAIT_MS), "{q:?}");
    prop_assert!(
        q.window_ms.is_none_or(|ms| ms > 0 && ms <= MAX_WINDOW_MS),
        "{q:?}"
    );
    for w in &q.windows {
        prop_assert!(w.limit > 0, "{w:?}");
        prop_assert!(w.length_ms > 0 && w.length_ms <= MAX_WINDOW_MS, "{w:?}");
    }
    Ok(())
}

/// Fields of a Go duration: hours, minutes, seconds, fraction digits of the seconds.
fn go_parts() -> impl Strategy<Value = (Option<u64>, Option<u64>, Option<(u64, String)>)> {
    (
        proptest::option::of(0u64..100_000),
        proptest::option::of(0u64..100_000),
        proptest::option::of((0u64..100_000, "[0-9]{0,6}")),
    )
}

proptest! {
    #[test]
    fn families_of_any_text_never_panic_and_stay_sane(
        status in prop_oneof![Just(200u16), Just(403), Just(429), Just(503), any::<u16>()],
        headers in proptest::collection::vec((family_name(), family_value()), 0..12),
        now in any::<u64>(),
    ) {
        let s = read_signal(status, &headers, now);
        prop_assert!(s.retry_after_ms.is_none_or(|ms| ms <= MAX_WAIT_MS));
        prop_assert_eq!(s.rate_limited || status != 429, true);
        if !matches!(status, 403 | 429 | 503) {
            prop_assert!(!s.rate_limited);
        }
        if let Some(q) = &s.quota {
            assert_sane(q)?;
        }
        for (word, q) in &s.resources {
            prop_assert!(!word.is_empty() && word != "requests", "{word:?}");
            prop_assert_eq!(word.clone(), word.to_ascii_lowercase());
            assert_sane(q)?;
        }
        prop_assert!(s.resources.len() <= 3 * 8, "{:?}", s.resources);
        prop_assert!(s.bucket.as_deref().is_none_or(|b| !b.is_empty()));
    }

    #[test]
    fn every_reset_form_of_any_text_is_capped_or_refused(
        v in family_value(),
        base in any::<u64>(),
    ) {
        for form in [ResetForm::Auto, ResetForm::DeltaSeconds, ResetForm::GoDuration] {
            prop_assert!(read_reset(form, &v, base).is_none_or(|ms| ms <= MAX_WAIT_MS));
        }
        let _ = parse_go_duration_ms(&v);
        let _ = parse_rfc3339_ms(&v);
        let _ = parse_whole_count(&v);
    }

    #[test]
    fn go_durations_read_as_their_parts_add_up(parts in go_parts()) {
        let (h, m, s) = parts;
        prop_assume!(h.is_some() || m.is_some() || s.is_some());
        let mut text = String::new();
        let mut nanos: u128 = 0;
        if let Some(h) = h {
            text += &format!("{h}h");
            nanos += u128::from(h) * 3_600_000_000_000;
        }
        if let Some(m) = m {
            text += &format!("{m}m");
            nanos += u128::from(m) * 60_000_000_000;
        }
        if let Some((s, frac)) = &s {
            text += &format!("{s}");
            nanos += u128::from(*s) * 1_000_000_000;
            if !frac.is_empty() {
                text += &format!(".{frac}");
                // The fraction's nanoseconds, rounded up.
                let digits = frac.len() as u32;
                let num: u128 = frac.parse().unwrap_or(0);
                nanos += (num * 1_000_000_000).div_ceil(10u128.pow(digits));
            }
            text += "s";
        }
        let ms = u64::try_from(nanos.div_ceil(1_000_000)).unwrap_or(u64::MAX);
        prop_assert_eq!(parse_go_duration_ms(&text), Some(ms), "{}", text);
        // Read as the suffix family's reset, the same, capped.
        let s = read_signal(
            200,
            &hs(&[("x-ratelimit-reset-requests", &text)]),
            0,
        );
        prop_assert_eq!(
            s.quota.and_then(|q| q.reset_after_ms),
            Some(ms.min(MAX_WAIT_MS))
        );
    }

    #[test]
    fn rfc3339_resets_are_measured_from_the_server_date(
        server_s in 0u64..253_402_000_000,
        wait_s in 0u64..200_000,
        offset_min in -1439i64..=1439,
        now in any::<u64>(),
    ) {
        let at = server_s + wait_s;
        // The reset written in a zone `offset_min` east of UTC, on the local clock there.
        let local = i64::try_from(at).unwrap_or(i64::MAX) + offset_min * 60;
        prop_assume!((0..253_402_300_799).contains(&local));
        let http = http_date(local.unsigned_abs() * SECOND);
        let b = http.as_bytes();
        let month = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
            "Nov", "Dec"]
            .iter()
            .position(|m| m.as_bytes() == &b[8..11])
            .unwrap_or(0) + 1;
        let sign = if offset_min < 0 { '-' } else { '+' };
        let off = offset_min.unsigned_abs();
        let text = format!(
            "{}-{month:02}-{}T{}{sign}{:02}:{:02}",
            &http[12..16],
            &http[5..7],
            &http[17..25],
            off / 60,
            off % 60
        );
        prop_assert_eq!(parse_rfc3339_ms(&text), Some(at * SECOND), "{}", text);
        let date = http_date(server_s * SECOND);
        let s = read_signal(
            200,
            &hs(&[("anthropic-ratelimit-requests-reset", &text), ("Date", &date)]),
            now,
        );
        prop_assert_eq!(
            s.quota.and_then(|q| q.reset_after_ms),
            Some((wait_s * SECOND).min(MAX_WAIT_MS))
        );
    }

    #[test]
    fn whole_counts_read_with_any_zeros_after_the_point(n in any::<u64>(), zeros in 0usize..8) {
        let text = if zeros == 0 { n.to_string() } else { format!("{n}.{}", "0".repeat(zeros)) };
        prop_assert_eq!(parse_whole_count(&text), Some(n));
        let q = read_signal(
            200,
            &hs(&[("X-RateLimit-Remaining", &text), ("x-ratelimit-limit-tokens", &text)]),
            0,
        );
        prop_assert_eq!(q.quota.and_then(|q| q.remaining), Some(n));
        prop_assert_eq!(q.resources.first().and_then(|(_, q)| q.limit), Some(n));
    }

    #[test]
    fn hubspot_windows_are_never_zero_or_overlong(
        max in any::<u64>(),
        interval in any::<u64>(),
        daily in any::<u64>(),
    ) {
        let (max_s, interval_s, daily_s) = (max.to_string(), interval.to_string(), daily.to_string());
        let s = read_signal(
            200,
            &hs(&[
                ("X-HubSpot-RateLimit-Max", &max_s),
                ("X-HubSpot-RateLimit-Interval-Milliseconds", &interval_s),
                ("X-HubSpot-RateLimit-Daily", &daily_s),
            ]),
            0,
        );
        let q = s.quota.expect("a quota");
        assert_sane(&q)?;
        let interval_ok = interval > 0 && interval <= MAX_WINDOW_MS;
        // The interval is a window exactly when it is one: never zero, never past a month.
        let limit = max.min(u64::from(u32::MAX));
        prop_assert_eq!(
            q.windows
                .iter()
                .any(|w| w.length_ms == interval && u64::from(w.limit) == limit),
            interval_ok && max > 0
        );
    }
}
