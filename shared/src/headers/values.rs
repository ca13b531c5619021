//! Numbers, durations and resets as servers write them, read without panicking: digits by
//! hand, arithmetic saturating, every duration capped before it leaves.

use super::http_date::{parse_http_date_ms, parse_rfc3339_ms};
use super::MAX_WAIT_MS;
use super::MAX_WINDOW_MS;
use crate::time::{DurationMs, Millis};

/// How a family writes its reset (see `families`). Whatever the form, the result is the time
/// from the response to the reset, capped at `MAX_WAIT_MS`, never negative: a reset already past
/// is a reset now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ResetForm {
    /// A number or a timestamp, told apart as `parse_reset` and `parse_timestamp_reset` say:
    /// delta seconds (fractions allowed), epoch seconds (>= 10^9), epoch milliseconds
    /// (>= 10^12), an RFC 3339 / ISO 8601 timestamp or an HTTP-date. Timestamps and epochs are
    /// measured from the server's `Date` when it sent one.
    Auto,
    /// Delta seconds only, fractions allowed (Discord's `Reset-After: 1.234`): never an epoch,
    /// whatever its size.
    DeltaSeconds,
    /// A Go duration (`1s`, `6m0s`, `1m30.5s`, `12ms`: what Go's `time.Duration` prints), or
    /// else read as `Auto` (a bare `0`, or the whole seconds some deployments send).
    GoDuration,
}

/// A reset in the given form (see `ResetForm`), as milliseconds from the response.
pub(super) fn read_reset(form: ResetForm, v: &str, base: Millis) -> Option<DurationMs> {
    let after = match form {
        ResetForm::DeltaSeconds => parse_seconds_ms(v),
        ResetForm::GoDuration => parse_go_duration_ms(v).or_else(|| auto_reset(v, base)),
        ResetForm::Auto => auto_reset(v, base),
    };
    Some(after?.min(MAX_WAIT_MS))
}

fn auto_reset(v: &str, base: Millis) -> Option<DurationMs> {
    parse_reset(v, base).or_else(|| parse_timestamp_reset(v, base))
}

/// A reset written as a timestamp (RFC 3339, ISO 8601's extended form with an offset, or an
/// HTTP-date), as milliseconds from `base`, the server's `Date` when it sent one. The two
/// grammars share no text with a number, so reading one after the other is unambiguous.
pub(super) fn parse_timestamp_reset(v: &str, base: Millis) -> Option<DurationMs> {
    let at = parse_rfc3339_ms(v).or_else(|| parse_http_date_ms(v))?;
    Some(at.saturating_sub(base).min(MAX_WAIT_MS))
}

/// A Go duration, as `time.Duration.String()` prints it and `time.ParseDuration` reads it:
/// one or more `<number><unit>` with units `h`, `m`, `s`, `ms`, `us`/`µs`, `ns`, each number
/// digits with an optional fraction (`1m30.5s`, `12ms`, `6m0s`), or a bare `0`. As
/// milliseconds rounded up, so a reset read from it is never early (a fraction is exact to
/// six digits, past them rounded up: Go prints at most nine, and only for units below the
/// second, where the sixth digit is already below a millisecond); saturating, never negative
/// (a sign is refused: a reset in the past is not a duration a server sends).
pub(super) fn parse_go_duration_ms(v: &str) -> Option<DurationMs> {
    let mut rest = v.trim();
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let digit_run = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    // Nanoseconds in u64 (584 years before it saturates, far past any cap): u128 arithmetic
    // would cost the worker's wasm its own division routines.
    let mut nanos: u64 = 0;
    while !rest.is_empty() {
        let whole_len = digit_run(rest);
        let whole = rest.get(..whole_len)?;
        rest = rest.get(whole_len..)?;
        let mut frac = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_len = digit_run(after_dot);
            frac = after_dot.get(..frac_len)?;
            rest = after_dot.get(frac_len..)?;
        }
        if whole.is_empty() && frac.is_empty() {
            return None;
        }
        // The unit runs to the next digit or dot, both ASCII, so this is a char boundary.
        let unit_len = rest
            .bytes()
            .take_while(|b| !b.is_ascii_digit() && *b != b'.')
            .count();
        let unit_ns: u64 = match rest.get(..unit_len)? {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        rest = rest.get(unit_len..)?;
        let whole_n = whole.bytes().fold(0u64, |acc, b| {
            acc.saturating_mul(10)
                .saturating_add(u64::from(b.saturating_sub(b'0')))
        });
        nanos = nanos.saturating_add(whole_n.saturating_mul(unit_ns));
        // The fraction to six digits, exactly (at most 10^6 * 3.6 * 10^12 ns, inside u64),
        // rounded up at the sixth if anything beyond it is not zero: never early.
        let (mut millionths, mut digits, mut beyond) = (0u64, 0u32, false);
        for b in frac.bytes() {
            if digits < 6 {
                millionths = millionths * 10 + u64::from(b - b'0');
                digits += 1;
            } else if b != b'0' {
                beyond = true;
            }
        }
        millionths = millionths * 10u64.pow(6 - digits) + u64::from(beyond);
        nanos = nanos.saturating_add((millionths * unit_ns).div_ceil(1_000_000));
    }
    Some(nanos.div_ceil(1_000_000))
}

/// A reset of this many "seconds" or more is an epoch timestamp: as a delta it would be 31
/// years, and as an epoch it is 2001, before any server that sends these headers.
const EPOCH_SECONDS_FROM: u64 = 1_000_000_000;

/// Likewise for epoch milliseconds: as epoch seconds this would be the year 33658.
const EPOCH_MILLIS_FROM: u64 = 1_000_000_000_000;

/// A count: plain ASCII digits only. A sign, a fraction or an exponent in a count means we are
/// misreading the header, so it is ignored rather than rounded into a plausible number.
pub(super) fn parse_count(v: &str) -> Option<u64> {
    let v = v.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// A count as some vendors write it, a float with nothing after the point (`99.0`): a count all
/// the same. A fraction that is not zero (`50.5`) is a misreading, ignored as `parse_count`
/// ignores a sign.
pub(super) fn parse_whole_count(v: &str) -> Option<u64> {
    let v = v.trim();
    match v.split_once('.') {
        Some((whole, zeros)) if !zeros.is_empty() && zeros.bytes().all(|b| b == b'0') => {
            parse_count(whole)
        }
        Some(_) => None,
        None => parse_count(v),
    }
}

/// Non-negative seconds as milliseconds: `30`, or `1.5` (some servers send fractions; Shopify
/// sends `2.0`), rounded up to the next millisecond so we never come back early. No sign, no
/// exponent, no `NaN`/`inf`: those are not delta-seconds. Overlong numbers saturate rather than
/// fail, because "a very long time" is still what the server meant; callers cap it.
pub(super) fn parse_seconds_ms(v: &str) -> Option<u64> {
    let v = v.trim();
    let (whole, frac) = match v.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (v, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) {
        return None;
    }
    let seconds = whole.bytes().fold(0u64, |acc, b| {
        acc.saturating_mul(10)
            .saturating_add(u64::from(b.saturating_sub(b'0')))
    });
    let mut ms = seconds.saturating_mul(1000);
    if let Some(frac) = frac {
        if !digits(frac) {
            return None;
        }
        let mut frac_ms = 0u64;
        let mut scale = 100u64;
        for (i, b) in frac.bytes().enumerate() {
            let d = u64::from(b.saturating_sub(b'0'));
            if i < 3 {
                frac_ms = frac_ms.saturating_add(d.saturating_mul(scale));
                scale /= 10;
            } else if d != 0 {
                frac_ms = frac_ms.saturating_add(1);
                break;
            }
        }
        ms = ms.saturating_add(frac_ms);
    }
    Some(ms)
}

/// A reset as "milliseconds from the response", whichever way the server wrote it: delta
/// seconds, epoch seconds or epoch milliseconds (told apart by size, see the constants). Epochs
/// are measured from `base`, the server's `Date` when it sent one.
pub(super) fn parse_reset(v: &str, base: Millis) -> Option<DurationMs> {
    // The value in thousandths, so the thresholds are in thousandths too.
    let thousandths = parse_seconds_ms(v)?;
    let after = if thousandths >= EPOCH_MILLIS_FROM.saturating_mul(1000) {
        thousandths.div_ceil(1000).saturating_sub(base)
    } else if thousandths >= EPOCH_SECONDS_FROM.saturating_mul(1000) {
        thousandths.saturating_sub(base)
    } else {
        thousandths
    };
    Some(after.min(MAX_WAIT_MS))
}

/// A policy window in seconds. A zero window is meaningless (and a division by zero waiting to
/// happen downstream); an overlong one is dropped, see `MAX_WINDOW_MS`.
pub(super) fn parse_window(v: &str) -> Option<DurationMs> {
    window_ms(parse_seconds_ms(v)?)
}

pub(super) fn window_ms(ms: DurationMs) -> Option<DurationMs> {
    (ms > 0 && ms <= MAX_WINDOW_MS).then_some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::test_support::*;

    #[test]
    fn reset_detection_thresholds() {
        // Just under 1e9 s is a (capped) delta; at 1e9 it is an epoch, long past.
        assert_eq!(parse_reset("999999999", SERVER_NOW), Some(MAX_WAIT_MS));
        assert_eq!(parse_reset("1000000000", SERVER_NOW), Some(0));
        assert_eq!(parse_reset("86399", SERVER_NOW), Some(86_399 * SECOND));
        // An epoch reset a week ahead is capped at a day.
        let week = (SERVER_NOW / SECOND + 7 * 86_400).to_string();
        assert_eq!(parse_reset(&week, SERVER_NOW), Some(MAX_WAIT_MS));
    }

    #[test]
    fn go_durations_as_go_prints_them() {
        for (text, ms) in [
            ("0", 0),
            ("1s", SECOND),
            ("6m0s", 6 * MINUTE),
            ("12ms", 12),
            ("1m30.5s", 90_500),
            ("1h2m3s", 3_723 * SECOND),
            ("2h45m0.5s", (2 * 3600 + 45 * 60) * SECOND + 500),
            (".5s", 500),
            ("1.5h", 90 * MINUTE),
            // Below a millisecond rounds up: the reset is never early.
            ("999us", 1),
            ("999\u{b5}s", 1),
            ("1ns", 1),
            ("0s", 0),
            ("0.0001s", 1),
            // Past six digits a fraction rounds up at the sixth: an hour's is 3.6 ms.
            ("0.0000001h", 4),
            ("1.0000000s", SECOND),
            ("0.1234567ms", 1),
            (" 3s ", 3 * SECOND),
        ] {
            assert_eq!(parse_go_duration_ms(text), Some(ms), "{text:?}");
        }
        for junk in [
            "", "s", "1", "-1s", "+1s", "1x", "1.s.", "1sm", "1 s", ".s", "1e3s", "ms", "1S",
            "1..5s", "NaN", "inf",
        ] {
            assert_eq!(parse_go_duration_ms(junk), None, "{junk:?}");
        }
        // Overlong saturates (at u64::MAX nanoseconds) rather than fails; read_reset caps it.
        let huge = "9".repeat(60) + "h";
        assert_eq!(
            parse_go_duration_ms(&huge),
            Some(u64::MAX.div_ceil(1_000_000))
        );
        assert_eq!(
            read_reset(ResetForm::GoDuration, &huge, 0),
            Some(MAX_WAIT_MS)
        );
    }

    #[test]
    fn whole_counts_may_be_written_as_floats() {
        assert_eq!(parse_whole_count("99.0"), Some(99));
        assert_eq!(parse_whole_count(" 100.000 "), Some(100));
        assert_eq!(parse_whole_count("7"), Some(7));
        for junk in ["99.5", "99.", ".0", "-1.0", "1e3", "99.0.0", "NaN", ""] {
            assert_eq!(parse_whole_count(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn each_reset_form_reads_what_it_says() {
        let base = SERVER_NOW;
        let epoch_s = (SERVER_NOW / SECOND + 30).to_string();
        let epoch_ms = (SERVER_NOW + 30 * SECOND).to_string();
        // 2023-11-14T22:13:20Z is SERVER_NOW.
        for v in [
            "30",
            "30.0",
            epoch_s.as_str(),
            epoch_ms.as_str(),
            "2023-11-14T22:13:50Z",
            "2023-11-14T23:13:50+01:00",
            "Tue, 14 Nov 2023 22:13:50 GMT",
        ] {
            assert_eq!(
                read_reset(ResetForm::Auto, v, base),
                Some(30 * SECOND),
                "{v}"
            );
        }
        // Delta seconds are never an epoch, however large (then capped).
        assert_eq!(
            read_reset(ResetForm::DeltaSeconds, &epoch_s, base),
            Some(MAX_WAIT_MS)
        );
        assert_eq!(
            read_reset(ResetForm::DeltaSeconds, "1.234", base),
            Some(1234)
        );
        assert_eq!(
            read_reset(ResetForm::DeltaSeconds, "2023-11-14T22:13:50Z", base),
            None
        );
        // Go durations, and the bare seconds some deployments of that family send.
        assert_eq!(
            read_reset(ResetForm::GoDuration, "6m0s", base),
            Some(6 * MINUTE)
        );
        assert_eq!(
            read_reset(ResetForm::GoDuration, "20", base),
            Some(20 * SECOND)
        );
        // A timestamp already past is a reset now.
        assert_eq!(
            read_reset(ResetForm::Auto, "2023-11-14T22:00:00Z", base),
            Some(0)
        );
        for form in [
            ResetForm::Auto,
            ResetForm::DeltaSeconds,
            ResetForm::GoDuration,
        ] {
            for junk in ["", "soon", "-5", "Infinity", "2023-11-14T22:13:50"] {
                assert_eq!(read_reset(form, junk, base), None, "{form:?} {junk:?}");
            }
        }
    }
}
