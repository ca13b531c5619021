//! The rate-limit headers the simulated server writes, in each `HeaderStyle`: the engine must
//! read every family real APIs send, so the server speaks each of them from the same counts.

use std::collections::VecDeque;

use super::server::HeaderStyle;
use crate::config::Window;
use crate::sim_tokens::TokenServer;
use crate::time::{DurationMs, Millis};

/// The headers `style` writes of the server's windows as they stand after an arrival at `now`
/// (`logs[i]`: the arrivals window `i` counts, which all leave it in `resets_ms[i]`), the
/// server's clock reading `server_clock`.
pub(super) fn rate_limit_headers(
    style: HeaderStyle,
    windows: &[Window],
    logs: &[VecDeque<Millis>],
    resets_ms: &[DurationMs],
    now: Millis,
    server_clock: i64,
    tokens: Option<&mut TokenServer>,
) -> Vec<(String, String)> {
    // (window, remaining, milliseconds until what it counts has left it).
    let states_ms: Vec<(Window, u32, DurationMs)> = logs
        .iter()
        .zip(windows)
        .zip(resets_ms)
        .map(|((log, w), &reset)| (*w, w.limit.saturating_sub(log.len() as u32), reset))
        .collect();
    // The same in whole seconds, rounded up, as the older headers and the IETF draft write it.
    let states: Vec<(Window, u32, u64)> = states_ms
        .iter()
        .map(|&(w, remaining, reset_ms)| (w, remaining, reset_ms.div_ceil(1000)))
        .collect();
    let mut out: Vec<(String, String)> = Vec::new();
    match style {
        HeaderStyle::None => {}
        HeaderStyle::XRateLimit => {
            // The older headers carry one window: the one closest to refusing (the first of
            // equals), as servers with several quotas do.
            let (tightest, remaining, reset_s) = states
                .iter()
                .copied()
                .min_by_key(|&(_, remaining, _)| remaining)
                .unwrap_or((windows[0], 0, 0));
            out.push(("X-RateLimit-Limit".into(), tightest.limit.to_string()));
            out.push(("X-RateLimit-Remaining".into(), remaining.to_string()));
            out.push(("X-RateLimit-Reset".into(), reset_s.to_string()));
        }
        HeaderStyle::Ietf => {
            let policy_name = |i: usize| {
                if i == 0 {
                    "default".to_string()
                } else {
                    format!("w{i}")
                }
            };
            let policies: Vec<String> = states
                .iter()
                .enumerate()
                .map(|(i, (w, _, _))| {
                    format!(
                        "\"{}\";q={};w={}",
                        policy_name(i),
                        w.limit,
                        w.length_ms.div_ceil(1000)
                    )
                })
                .collect();
            let live: Vec<String> = states
                .iter()
                .enumerate()
                .map(|(i, (_, r, t))| format!("\"{}\";r={r};t={t}", policy_name(i)))
                .collect();
            out.push(("RateLimit-Policy".into(), policies.join(", ")));
            out.push(("RateLimit".into(), live.join(", ")));
        }
        style => {
            out.extend(family_headers(style, &states_ms, server_clock));
            if let (HeaderStyle::ResourceSuffix, Some(s)) = (style, tokens) {
                out.extend(s.headers(now));
            }
        }
    }
    out
}

/// The headers of the families `HeaderStyle::ResourceSuffix`, `VendorPrefix` and
/// `IntervalDaily` say, for the server's windows as (window, remaining, ms to its reset).
fn family_headers(
    style: HeaderStyle,
    states: &[(Window, u32, DurationMs)],
    server_clock: i64,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut push = |name: &str, value: String| out.push((name.to_string(), value));
    // The window closest to refusing speaks for requests, as the older headers do.
    let Some(&(tightest, remaining, reset_ms)) = states.iter().min_by_key(|s| s.1) else {
        return out;
    };
    match style {
        HeaderStyle::ResourceSuffix => {
            push("x-ratelimit-limit-requests", tightest.limit.to_string());
            push("x-ratelimit-remaining-requests", remaining.to_string());
            push("x-ratelimit-reset-requests", go_duration(reset_ms));
            // Tokens the server does not count: a quota that never runs out.
            let tokens = u64::from(tightest.limit) * 1_000;
            push("x-ratelimit-limit-tokens", tokens.to_string());
            push("x-ratelimit-remaining-tokens", (tokens - 1).to_string());
            push("x-ratelimit-reset-tokens", go_duration(1));
        }
        HeaderStyle::VendorPrefix => {
            push(
                "anthropic-ratelimit-requests-limit",
                tightest.limit.to_string(),
            );
            push(
                "anthropic-ratelimit-requests-remaining",
                remaining.to_string(),
            );
            // Whole seconds on the server's clock, rounded up so the reset is never early.
            let at = server_clock + reset_ms as i64 + 999;
            push("anthropic-ratelimit-requests-reset", rfc3339(at));
        }
        HeaderStyle::IntervalDaily => {
            let (first, first_remaining, _) = states[0];
            push("X-HubSpot-RateLimit-Max", first.limit.to_string());
            push("X-HubSpot-RateLimit-Remaining", first_remaining.to_string());
            push(
                "X-HubSpot-RateLimit-Interval-Milliseconds",
                first.length_ms.to_string(),
            );
            for (i, &(w, left, _)) in states.iter().enumerate() {
                if w.length_ms == 86_400_000 {
                    push("X-HubSpot-RateLimit-Daily", w.limit.to_string());
                    push("X-HubSpot-RateLimit-Daily-Remaining", left.to_string());
                } else if w.length_ms == 1_000 && i > 0 {
                    push("X-HubSpot-RateLimit-Secondly", w.limit.to_string());
                    push("X-HubSpot-RateLimit-Secondly-Remaining", left.to_string());
                }
            }
        }
        HeaderStyle::None | HeaderStyle::XRateLimit | HeaderStyle::Ietf => {}
    }
    out
}

/// A duration as Go's `time.Duration` prints it, to the millisecond: `12ms`, `1.5s`, `6m0s`.
fn go_duration(ms: DurationMs) -> String {
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let (h, m, s, frac) = (
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1_000 % 60,
        ms % 1_000,
    );
    let secs = if frac == 0 {
        format!("{s}s")
    } else {
        format!("{s}.{}s", format!("{frac:03}").trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

/// An instant as an RFC 3339 timestamp in UTC, whole seconds: `2026-12-04T19:30:01Z`.
fn rfc3339(ms: i64) -> String {
    // `Sun, 06 Nov 1994 08:49:37 GMT`, rearranged.
    let d = http_date(ms);
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| d.get(8..11) == Some(*m))
    .map_or(1, |i| i + 1);
    format!(
        "{}-{month:02}-{}T{}Z",
        d.get(12..16).unwrap_or("1970"),
        d.get(5..7).unwrap_or("01"),
        d.get(17..25).unwrap_or("00:00:00")
    )
}

pub(super) fn http_date(ms: i64) -> String {
    let secs = (ms.max(0) / 1000) as u64;
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_headers_are_read_back_as_written() {
        assert_eq!(go_duration(0), "0ms");
        assert_eq!(go_duration(12), "12ms");
        assert_eq!(go_duration(1_500), "1.5s");
        assert_eq!(go_duration(1_005), "1.005s");
        assert_eq!(go_duration(360_000), "6m0s");
        assert_eq!(go_duration(3_723_000), "1h2m3s");
        assert_eq!(rfc3339(1_700_000_000_999), "2023-11-14T22:13:20Z");
        let w = |limit, length_ms| Window { limit, length_ms };
        let states = [
            (w(100, 10_000), 40, 2_500),
            (w(250_000, 86_400_000), 1_000, 60_000),
            (w(10, 1_000), 3, 200),
        ];
        let now = 1_700_000_000_000;
        for style in [
            HeaderStyle::ResourceSuffix,
            HeaderStyle::VendorPrefix,
            HeaderStyle::IntervalDaily,
        ] {
            let mut headers = family_headers(style, &states, now as i64);
            headers.push(("Date".into(), http_date(now as i64)));
            let s = crate::headers::read_signal(200, &headers, now);
            let q = s.quota.clone().expect("a quota");
            match style {
                // The window closest to refusing, its reset to the millisecond or (RFC 3339,
                // whole seconds) rounded up.
                HeaderStyle::ResourceSuffix => {
                    assert_eq!(
                        (q.limit, q.remaining, q.reset_after_ms),
                        (Some(10), Some(3), Some(200))
                    );
                    assert_eq!(s.resources.len(), 1, "{s:?}");
                }
                HeaderStyle::VendorPrefix => {
                    assert_eq!(
                        (q.limit, q.remaining, q.reset_after_ms),
                        (Some(10), Some(3), Some(1_000))
                    );
                }
                _ => {
                    assert_eq!((q.limit, q.remaining), (Some(10), Some(3)));
                    assert_eq!(
                        q.windows,
                        vec![w(100, 10_000), w(250_000, 86_400_000), w(10, 1_000)]
                    );
                }
            }
        }
    }
}
