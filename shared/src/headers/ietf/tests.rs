//! The IETF fields' tests: policies and the live state paired by name, every draft's spelling.

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
