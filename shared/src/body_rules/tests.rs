use proptest::prelude::*;

use super::*;
use crate::headers::read_signal;

fn rule(status: &[u16], path: &str, equals: Option<&str>) -> BodyRule {
    BodyRule {
        status: status.to_vec(),
        path: path.into(),
        equals: equals.map(Into::into),
        ..BodyRule::default()
    }
}

/// The signal of an answer as the engine reads it: headers, then the budget's body rules.
fn signal(rules: &[BodyRule], status: u16, headers: &[(&str, &str)], body: &str) -> ServerSignal {
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    let mut signal = read_signal(status, &headers, 0);
    apply_body_rules(rules, status, body, &mut signal);
    signal
}

#[test]
fn a_success_whose_body_says_rate_limited_is_a_rate_limit() {
    // A wiki API's way: 200, and an error object whose code names the limit.
    let rules = [rule(&[200], "error.code", Some("ratelimited"))];
    let body = r#"{"error": {"code": "ratelimited", "info": "You have hit the edit rate."}}"#;
    let s = signal(&rules, 200, &[], body);
    assert!(s.rate_limited);
    assert_eq!(s.retry_after_ms, None);
    // Another error code, another status, or a body that is not JSON: not this rule's.
    for (status, body) in [
        (200, r#"{"error": {"code": "badtoken"}}"#),
        (200, r#"{"result": "ok"}"#),
        (500, r#"{"error": {"code": "ratelimited"}}"#),
        (200, "<html>ratelimited</html>"),
        (200, ""),
    ] {
        assert!(
            !signal(&rules, status, &[], body).rate_limited,
            "{status} {body}"
        );
    }
}

#[test]
fn the_value_is_compared_as_text_with_case_ignored() {
    let rules = [rule(&[], "errors[0].code", Some("429"))];
    assert!(signal(&rules, 400, &[], r#"{"errors": [{"code": 429}]}"#).rate_limited);
    assert!(signal(&rules, 400, &[], r#"{"errors": [{"code": "429"}]}"#).rate_limited);
    let rules = [rule(&[], "limited", Some("TRUE"))];
    assert!(signal(&rules, 200, &[], r#"{"limited": true}"#).rate_limited);
    assert!(!signal(&rules, 200, &[], r#"{"limited": false}"#).rate_limited);
    // Without `equals`, any value there means it; null does not.
    let rules = [rule(&[403], "error.rate_limit", None)];
    assert!(signal(&rules, 403, &[], r#"{"error": {"rate_limit": {}}}"#).rate_limited);
    assert!(!signal(&rules, 403, &[], r#"{"error": {"rate_limit": null}}"#).rate_limited);
}

#[test]
fn the_wait_comes_from_the_body_unless_a_header_named_one() {
    let mut r = rule(&[429], "error.type", Some("rate_limit"));
    r.wait_path = Some("error.retry_after".into());
    let body = r#"{"error": {"type": "rate_limit", "retry_after": 1.5}}"#;
    assert_eq!(
        signal(&[r.clone()], 429, &[], body).retry_after_ms,
        Some(1_500)
    );
    // A numeric string reads too; milliseconds when the rule says so.
    r.wait_unit = WaitUnit::Milliseconds;
    let body = r#"{"error": {"type": "rate_limit", "retry_after": "250"}}"#;
    assert_eq!(
        signal(&[r.clone()], 429, &[], body).retry_after_ms,
        Some(250)
    );
    // Retry-After is the server's standard word: it wins.
    assert_eq!(
        signal(&[r.clone()], 429, &[("Retry-After", "3")], body).retry_after_ms,
        Some(3_000)
    );
    // A negative or absurd wait is no wait.
    r.wait_unit = WaitUnit::Seconds;
    for wait in ["-1", "1e12", "\"soon\""] {
        let body = format!(r#"{{"error": {{"type": "rate_limit", "retry_after": {wait}}}}}"#);
        assert_eq!(
            signal(&[r.clone()], 429, &[], &body).retry_after_ms,
            None,
            "{wait}"
        );
    }
}

#[test]
fn a_limit_said_in_words_becomes_the_quota_the_limiter_learns() {
    // A shop API's 429: the limit only in its message.
    let mut r = rule(&[429], "errors", None);
    r.limit_path = Some("errors".into());
    let body = r#"{"errors": "Exceeded 2 calls per second for api client. Slow down."}"#;
    let s = signal(&[r.clone()], 429, &[], body);
    assert!(s.rate_limited);
    let quota = s.quota.expect("a quota from the words");
    assert_eq!(
        quota.windows,
        vec![Window {
            limit: 2,
            length_ms: 1_000
        }]
    );
    assert_eq!(quota.remaining, Some(0));
    // A bare number needs the rule's window.
    r.limit_path = Some("limit".into());
    let body = r#"{"errors": "slow down", "limit": 40}"#;
    assert_eq!(signal(&[r.clone()], 429, &[], body).quota, None);
    r.limit_window_ms = Some(60_000);
    let quota = signal(&[r.clone()], 429, &[], body).quota.expect("a quota");
    assert_eq!(
        quota.windows,
        vec![Window {
            limit: 40,
            length_ms: 60_000
        }]
    );
    // Headers that declared the windows are the better source: kept as they are.
    let s = signal(
        &[r],
        429,
        &[
            ("RateLimit-Policy", "10;w=1"),
            ("RateLimit", "limit=10, remaining=0, reset=1"),
        ],
        body,
    );
    let quota = s.quota.expect("the headers' quota");
    assert_eq!(
        quota.windows,
        vec![Window {
            limit: 10,
            length_ms: 1_000
        }]
    );
}

#[test]
fn limits_in_words_as_apis_write_them() {
    let w = |limit, length_ms| Some(Window { limit, length_ms });
    for (text, expected) in [
        ("100 requests per minute", w(100, 60_000)),
        ("Exceeded 2 calls per second for api client", w(2, 1_000)),
        ("limit: 5000 per hour", w(5_000, 3_600_000)),
        ("10/s", w(10, 1_000)),
        ("10 / 1s", w(10, 1_000)),
        ("100 requests every 10 seconds", w(100, 10_000)),
        ("1000 points per 60s", w(1_000, 60_000)),
        ("3 requests per 500 ms", w(3, 500)),
        (
            "You sent 120 requests; the limit is 100 per minute",
            w(100, 60_000),
        ),
        ("at most 20 a day", w(20, 86_400_000)),
        ("Retry in 30 seconds", None),
        ("rate limited", None),
        ("0 per second", None),
        ("", None),
    ] {
        assert_eq!(limit_from_words(text), expected, "{text:?}");
    }
}

#[test]
fn a_concurrency_rule_says_concurrency_not_rate() {
    let mut r = rule(&[429], "error.code", Some("concurrency_limit_exceeded"));
    r.means = BodyMeaning::Concurrency;
    let body = r#"{"error": {"code": "CONCURRENCY_LIMIT_EXCEEDED"}}"#;
    let s = signal(&[r], 429, &[], body);
    assert!(s.concurrency_limited);
    assert!(!s.rate_limited);
}

#[test]
fn the_first_matching_rule_decides() {
    let mut concurrency = rule(&[429], "error.code", Some("too_many_open"));
    concurrency.means = BodyMeaning::Concurrency;
    let rate = rule(&[429], "error.code", None);
    let rules = [concurrency, rate];
    assert!(
        signal(&rules, 429, &[], r#"{"error": {"code": "too_many_open"}}"#).concurrency_limited
    );
    let s = signal(&rules, 429, &[], r#"{"error": {"code": "slow_down"}}"#);
    assert!(s.rate_limited && !s.concurrency_limited);
}

#[test]
fn paths_are_checked_with_a_reason() {
    for (path, ok) in [
        ("error.code", true),
        ("errors.0.type", true),
        ("errors[0].type", true),
        ("a[1][2]", true),
        ("", false),
        ("error..code", false),
        ("error.", false),
        ("errors[0", false),
        ("errors[x]", false),
        ("errors[0]x", false),
    ] {
        let problem = rule(&[], path, None).problem();
        assert_eq!(problem.is_none(), ok, "{path:?}: {problem:?}");
    }
    let mut r = rule(&[], "error", None);
    r.wait_path = Some("a..b".into());
    let problem = r.problem().unwrap_or_default();
    assert!(problem.starts_with("`waitPath` 'a..b'"), "{problem}");
}

#[test]
fn a_budget_with_a_bad_rule_is_refused_naming_it() {
    let config = crate::config::BudgetConfig {
        name: "wiki".into(),
        windows: vec![Window {
            limit: 10,
            length_ms: 1_000,
        }],
        body_rules: vec![rule(&[200], "error.code", None), rule(&[200], "", None)],
        ..Default::default()
    };
    let err = config.validate().expect_err("an empty path");
    assert!(
        err.0
            .starts_with("budget 'wiki': bodyRules[1]: `path` is empty"),
        "{err}"
    );
}

#[test]
fn the_rule_reads_from_a_worker_script_as_written() {
    let text = r#"{"status": [200], "path": "error.code", "equals": "ratelimited",
                  "waitPath": "error.wait", "waitUnit": "milliseconds", "means": "rate-limited"}"#;
    let r: BodyRule = crate::json::from_str(text).expect("a rule");
    assert_eq!(r.status, vec![200]);
    assert_eq!(r.wait_unit, WaitUnit::Milliseconds);
    crate::json::testing::same_as_serde(&r);
}

proptest! {
    #[test]
    fn any_text_reads_without_panic(text in ".{0,80}") {
        let _ = limit_from_words(&text);
        let _ = parse_path(&text);
    }

    #[test]
    fn any_body_and_path_read_without_panic(
        body in r#"[\[\]{}":,0-9a-z. -]{0,60}"#,
        path in r"[a-z0-9.\[\]]{0,12}",
        status in 100u16..600,
    ) {
        let mut r = rule(&[], &path, None);
        r.wait_path = Some(path.clone());
        r.limit_path = Some(path.clone());
        let mut s = ServerSignal::default();
        let matched = apply_body_rules(&[r], status, &body, &mut s);
        prop_assert!(!matched || s.rate_limited);
    }
}
