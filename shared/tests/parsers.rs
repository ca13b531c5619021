//! Every parser a page or a server reaches, over arbitrary input: it never panics, and where a
//! reference exists it agrees with it (serde_json for JSON, the derived serde shapes for
//! requests and stored records, `httpdate` for `Retry-After` dates).

use std::time::{Duration, UNIX_EPOCH};

use proptest::prelude::*;
use sluice_shared::config::EngineConfig;
use sluice_shared::headers::read_signal;
use sluice_shared::job::{Job, JobSpec};
use sluice_shared::json;
use sluice_shared::protocol::{decode_request, Envelope};

/// Texts near JSON: fragments of valid messages glued and cut at random, so the parsers meet
/// almost-right input far more often than uniformly random bytes would reach it.
fn near_json() -> impl Strategy<Value = String> {
    const PIECES: [&str; 24] = [
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"",
        "\\",
        "\\u00e9",
        "\\ud800",
        "null",
        "true",
        "false",
        "0",
        "-1",
        "1e999",
        "12.5",
        "\"type\"",
        "\"enqueue\"",
        "\"job\"",
        "\"url\"",
        "\"https://api.example/x\"",
        "\"requestId\"",
        " ",
    ];
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(&PIECES[..]).prop_map(str::to_owned),
            1 => any::<String>(),
        ],
        0..40,
    )
    .prop_map(|parts| parts.concat())
}

/// Well-formed requests with random field values, some of them the wrong type.
fn request_like() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just("null".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap_or_default()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        Just(r#"{"url":"https://api.example/x","method":"POST","body":"{}"}"#.to_owned()),
    ];
    let kind = prop::sample::select(
        &[
            "enqueue",
            "enqueueMany",
            "cancel",
            "retry",
            "dismiss",
            "configure",
            "snapshot",
            "jobs",
            "keepAlive",
            "launch",
        ][..],
    );
    let field = prop::sample::select(
        &[
            "job", "jobs", "groupId", "target", "id", "config", "ids", "extra",
        ][..],
    );
    (kind, prop::collection::vec((field, value), 0..4)).prop_map(|(kind, fields)| {
        let mut text = format!(r#"{{"requestId":"r1","type":"{kind}""#);
        for (name, value) in fields {
            text.push_str(&format!(r#","{name}":{value}"#));
        }
        text.push('}');
        text
    })
}

fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![near_json(), request_like(), any::<String>()]
}

/// How our reader refuses a struct given as a JSON array (see [`reads_like_serde`]).
const STRUCT_FROM_ARRAY: &str = "invalid type: sequence, expected struct";

/// Our reader and serde's agree on `T`: both accept (with equal values) or both refuse. One
/// difference is meant: serde's derived structs also read a JSON array, its items taken as the
/// fields in declaration order (so `[]` is a `JobSpec` with every field defaulted); ours reads
/// a struct from an object only, the one form the protocol and the records use, and says so.
fn reads_like_serde<T>(text: &str) -> Result<(), TestCaseError>
where
    T: json::FromJson + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    match (json::from_str::<T>(text), serde_json::from_str::<T>(text)) {
        (Ok(ours), Ok(theirs)) => prop_assert_eq!(ours, theirs, "{:?}", text),
        (Err(_), Err(_)) => {}
        (Err(ours), Ok(_)) if ours.0.starts_with(STRUCT_FROM_ARRAY) => {}
        (ours, theirs) => {
            prop_assert!(false, "{text:?}: ours {ours:?}, serde_json {theirs:?}")
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// A page's job, a stored job record and a configuration read exactly as the derived
    /// serde shapes read them, whatever the text.
    #[test]
    fn jobs_records_and_configurations_read_as_serde_reads_them(text in any_text()) {
        reads_like_serde::<JobSpec>(&text)?;
        reads_like_serde::<Job>(&text)?;
        reads_like_serde::<EngineConfig>(&text)?;
    }

    /// Any message a page can send is decoded or refused with an error, never a panic; what is
    /// decoded is what the derived `Envelope` reads from the same text.
    #[test]
    fn any_message_is_decoded_as_the_derived_envelope_or_refused(text in any_text()) {
        if let Ok(ours) = decode_request(&text) {
            // Unknown fields are ignored by both; serde refusing what we accept would be a
            // request the typed client could not have sent.
            if let Ok(theirs) = serde_json::from_str::<Envelope>(&text) {
                prop_assert_eq!(ours, theirs, "{:?}", text);
            }
        }
    }

    /// Rate-limit headers of any text, under any name the adapters read, never panic, and
    /// what they yield stays inside the bounds the engine relies on.
    #[test]
    fn rate_limit_headers_of_any_text_are_read_or_ignored(
        status in prop::sample::select(&[200u16, 403, 429, 503][..]),
        headers in prop::collection::vec(
            (
                prop::sample::select(&[
                    "Retry-After", "RateLimit", "RateLimit-Policy", "X-RateLimit-Limit",
                    "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Retry-After",
                    "X-Rate-Limit-Limit", "X-Rate-Limit-Remaining", "X-Rate-Limit-Reset",
                    "X-Shopify-Shop-Api-Call-Limit", "Date",
                ][..]),
                prop_oneof![any::<String>(), near_json(), any::<u64>().prop_map(|n| n.to_string())],
            ),
            0..6,
        ),
        now in 0u64..4_102_444_800_000,
    ) {
        let headers: Vec<(String, String)> =
            headers.into_iter().map(|(n, v)| (n.to_owned(), v)).collect();
        let signal = read_signal(status, &headers, now);
        if let Some(q) = signal.quota {
            if let Some(w) = q.window_ms {
                prop_assert!(w > 0 && w <= sluice_shared::headers::MAX_WINDOW_MS, "{:?}", w);
            }
        }
    }

    /// `Retry-After` as an HTTP-date means the time from the response's own `Date` to it,
    /// as `httpdate` reads both.
    #[test]
    fn a_retry_after_date_is_read_as_httpdate_reads_it(
        sent_s in 1_000_000_000u64..4_000_000_000,
        wait_s in 0u64..3_600,
        now in 0u64..4_102_444_800_000,
    ) {
        let at = |s: u64| httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(s));
        let headers = vec![
            ("Date".to_owned(), at(sent_s)),
            ("Retry-After".to_owned(), at(sent_s + wait_s)),
        ];
        let signal = read_signal(429, &headers, now);
        prop_assert!(signal.rate_limited);
        prop_assert_eq!(signal.retry_after_ms, Some(wait_s * 1_000));
    }
}
