//! Numbers, durations and resets as servers write them, read without panicking: digits by
//! hand, arithmetic saturating, every duration capped before it leaves.

use super::MAX_WAIT_MS;
use super::MAX_WINDOW_MS;
use crate::time::{DurationMs, Millis};

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
}
