//! Dates as servers write them: HTTP-dates (RFC 9110 §5.6.7) for `Date`, `Retry-After` and
//! resets written as dates, and RFC 3339 timestamps (ISO 8601's extended form) for the resets
//! of the vendors that write those (`anthropic-ratelimit-requests-reset: 2026-12-04T19:30:01Z`).

use crate::time::Millis;

/// An HTTP-date (all three RFC 9110 forms) as epoch milliseconds, by the `httpdate` crate's
/// rules (ASCII only, every field in range, a real day of the month, the weekday matching the
/// date), written out here because that crate goes through `SystemTime` and costs the
/// worker's wasm about 8 KB.
pub(super) fn parse_http_date_ms(v: &str) -> Option<Millis> {
    let s = v.trim();
    if !s.is_ascii() {
        return None;
    }
    let s = s.as_bytes();
    let d = imf_fixdate(s)
        .or_else(|| rfc850_date(s))
        .or_else(|| asctime_date(s))?;
    let valid = d.sec < 60
        && d.min < 60
        && d.hour < 24
        && (1..=12).contains(&d.mon)
        && (1970..=9999).contains(&d.year)
        && d.day >= 1
        && d.day <= days_in_month(d.year, d.mon);
    if !valid {
        return None;
    }
    let days = days_since_epoch(d.year, d.mon, d.day);
    // 1970-01-01 was a Thursday (4; Monday is 1).
    if (days + 3) % 7 + 1 != u64::from(d.wday) {
        return None;
    }
    let secs = days * 86_400 + u64::from(d.hour) * 3_600 + u64::from(d.min) * 60 + u64::from(d.sec);
    Some(secs * 1_000)
}

/// Days from 1970-01-01 to a valid date (year 1970 to 9999, month 1 to 12, a real day of it).
fn days_since_epoch(year: u16, mon: u8, day: u8) -> u64 {
    let y = u64::from(year) - 1;
    let leap_days = (y - 1968) / 4 - (y - 1900) / 100 + (y - 1600) / 400;
    let mut year_day = u64::from(CUMULATIVE_DAYS[usize::from(mon - 1)]) + u64::from(day) - 1;
    if is_leap_year(year) && mon > 2 {
        year_day += 1;
    }
    (u64::from(year) - 1970) * 365 + leap_days + year_day
}

/// An RFC 3339 timestamp as epoch milliseconds: `2026-12-04T19:30:01Z`,
/// `2026-12-04t19:30:01.25+01:00`, `2026-12-04 19:30:01Z` (the space RFC 3339 allows). A fraction
/// is rounded up to the next millisecond, so a reset read from it is never early. An offset is
/// required: a timestamp without one is in some unknown local time, not ours to guess. A leap
/// second (`:60`) reads as the second after, which is later, never earlier.
pub(super) fn parse_rfc3339_ms(v: &str) -> Option<Millis> {
    let s = v.trim().as_bytes();
    if s.len() < 20
        || s[4] != b'-'
        || s[7] != b'-'
        || !matches!(s[10], b'T' | b't' | b' ')
        || s[13] != b':'
        || s[16] != b':'
    {
        return None;
    }
    let year = date_digits(&s[..4])?;
    let mon = two_digits(&s[5..7])?;
    let day = two_digits(&s[8..10])?;
    let hour = two_digits(&s[11..13])?;
    let min = two_digits(&s[14..16])?;
    let sec = two_digits(&s[17..19])?;
    let valid = sec <= 60
        && min < 60
        && hour < 24
        && (1..=12).contains(&mon)
        && (1970..=9999).contains(&year)
        && day >= 1
        && day <= days_in_month(year, mon);
    if !valid {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac_ms = 0u64;
    if let Some(frac) = rest.strip_prefix(b".") {
        let digits = frac.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let mut scale = 100u64;
        for (i, &b) in frac[..digits].iter().enumerate() {
            let d = u64::from(b - b'0');
            if i < 3 {
                frac_ms += d * scale;
                scale /= 10;
            } else if d != 0 {
                frac_ms += 1;
                break;
            }
        }
        rest = &frac[digits..];
    }
    // The offset, in seconds east of UTC.
    let offset: i64 = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hours = two_digits(&[*h1, *h2])?;
            let minutes = two_digits(&[*m1, *m2])?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let secs = i64::from(hours) * 3_600 + i64::from(minutes) * 60;
            if *sign == b'-' {
                -secs
            } else {
                secs
            }
        }
        _ => return None,
    };
    let local = days_since_epoch(year, mon, day) * 86_400
        + u64::from(hour) * 3_600
        + u64::from(min) * 60
        + u64::from(sec);
    // At most 9999-12-31 plus a day: far inside i64.
    let utc = u64::try_from(local as i64 - offset).ok()?;
    Some(utc * 1_000 + frac_ms)
}

pub(super) struct HttpDate {
    year: u16,
    mon: u8,
    day: u8,
    hour: u8,
    min: u8,
    sec: u8,
    /// 1 (Monday) to 7.
    wday: u8,
}

pub(super) const MONTHS: [&[u8]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];
pub(super) const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
pub(super) const CUMULATIVE_DAYS: [u16; 12] =
    [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];

pub(super) fn is_leap_year(y: u16) -> bool {
    y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400))
}

pub(super) fn days_in_month(year: u16, mon: u8) -> u8 {
    match mon {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// All ASCII digits, as a number.
pub(super) fn date_digits(s: &[u8]) -> Option<u16> {
    s.iter().try_fold(0u16, |n, &c| {
        let d = c.wrapping_sub(b'0');
        (d < 10).then(|| n * 10 + u16::from(d))
    })
}

pub(super) fn two_digits(s: &[u8]) -> Option<u8> {
    date_digits(s).map(|n| n as u8)
}

/// 1 to 12 for `Jan` to `Dec`.
pub(super) fn month(s: &[u8]) -> Option<u8> {
    MONTHS.iter().position(|m| *m == s).map(|i| i as u8 + 1)
}

/// 1 to 7 for the three-letter day names.
pub(super) fn short_weekday(s: &[u8]) -> Option<u8> {
    WEEKDAYS
        .iter()
        .position(|w| &w.as_bytes()[..3] == s)
        .map(|i| i as u8 + 1)
}

/// `Sun, 06 Nov 1994 08:49:37 GMT`
pub(super) fn imf_fixdate(s: &[u8]) -> Option<HttpDate> {
    if s.len() != 29
        || &s[25..] != b" GMT"
        || &s[3..5] != b", "
        || s[7] != b' '
        || s[11] != b' '
        || s[16] != b' '
        || s[19] != b':'
        || s[22] != b':'
    {
        return None;
    }
    Some(HttpDate {
        sec: two_digits(&s[23..25])?,
        min: two_digits(&s[20..22])?,
        hour: two_digits(&s[17..19])?,
        day: two_digits(&s[5..7])?,
        mon: month(&s[8..11])?,
        year: date_digits(&s[12..16])?,
        wday: short_weekday(&s[..3])?,
    })
}

/// `Sunday, 06-Nov-94 08:49:37 GMT` (two-digit years below 70 are 20xx).
pub(super) fn rfc850_date(s: &[u8]) -> Option<HttpDate> {
    if s.len() < 23 {
        return None;
    }
    let (wday, s) = WEEKDAYS.iter().enumerate().find_map(|(i, name)| {
        let rest = s.strip_prefix(name.as_bytes())?.strip_prefix(b", ")?;
        Some((i as u8 + 1, rest))
    })?;
    if s.len() != 22
        || s[2] != b'-'
        || s[6] != b'-'
        || s[12] != b':'
        || s[15] != b':'
        || &s[18..22] != b" GMT"
    {
        return None;
    }
    let year = date_digits(&s[7..9])?;
    Some(HttpDate {
        sec: two_digits(&s[16..18])?,
        min: two_digits(&s[13..15])?,
        hour: two_digits(&s[10..12])?,
        day: two_digits(&s[0..2])?,
        mon: month(&s[3..6])?,
        year: if year < 70 { year + 2000 } else { year + 1900 },
        wday,
    })
}

/// `Sun Nov  6 08:49:37 1994`
pub(super) fn asctime_date(s: &[u8]) -> Option<HttpDate> {
    if s.len() != 24
        || s[3] != b' '
        || s[7] != b' '
        || s[10] != b' '
        || s[13] != b':'
        || s[16] != b':'
        || s[19] != b' '
    {
        return None;
    }
    Some(HttpDate {
        sec: two_digits(&s[17..19])?,
        min: two_digits(&s[14..16])?,
        hour: two_digits(&s[11..13])?,
        day: if s[8] == b' ' {
            two_digits(&s[9..10])?
        } else {
            two_digits(&s[8..10])?
        },
        mon: month(&s[4..7])?,
        year: date_digits(&s[20..24])?,
        wday: short_weekday(&s[..3])?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// What the `httpdate` crate makes of a text (the rules `parse_http_date_ms` follows).
    fn by_httpdate(v: &str) -> Option<Millis> {
        let at = httpdate::parse_http_date(v.trim()).ok()?;
        let since = at.duration_since(UNIX_EPOCH).ok()?;
        Some(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
    }

    #[test]
    fn http_dates_parse_as_httpdate_parses_them() {
        let texts = [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "  Sun, 06 Nov 1994 08:49:37 GMT ",
            "Mon, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 31 Nov 1994 08:49:37 GMT",
            "Thu, 29 Feb 1996 00:00:00 GMT",
            "Sat, 29 Feb 1997 00:00:00 GMT",
            "Tue, 29 Feb 2000 23:59:59 GMT",
            "Thu, 01 Jan 1970 00:00:00 GMT",
            "Wed, 31 Dec 1969 23:59:59 GMT",
            "Fri, 31 Dec 9999 23:59:59 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:60:37 GMT",
            "Sun, 06 Xyz 1994 08:49:37 GMT",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun,_06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sunday, 06-Nov-94_08:49:37 GMT",
            "Sunday, 06-Nov-04 08:49:37 GMT",
            "Saturday, 06-Nov-04 08:49:37 GMT",
            "Sunday 06-Nov-94 08:49:37 GMT",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun Nov 06 08:49:37 1994",
            "Sun Nov 6  08:49:37 1994",
            "Mon Nov  6 08:49:37 1994",
            "Sun Nov  6 08:49:37 1994 ",
            "Sún, 06 Nov 1994 08:49:37 GMT",
            "",
            "120",
            "Sun, 0a Nov 1994 08:49:37 GMT",
        ];
        for t in texts {
            assert_eq!(parse_http_date_ms(t), by_httpdate(t), "{t:?}");
        }
        for secs in (0..4_000_000_000u64).step_by(7_777_777) {
            let t = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
            assert_eq!(parse_http_date_ms(&t), Some(secs * 1000), "{t}");
        }
    }

    #[test]
    fn rfc3339_timestamps() {
        // 1_700_000_000 s is 2023-11-14T22:13:20Z.
        let at = 1_700_000_000_000;
        for (text, ms) in [
            ("2023-11-14T22:13:20Z", at),
            ("2023-11-14t22:13:20z", at),
            ("2023-11-14 22:13:20Z", at),
            (" 2023-11-14T22:13:20Z ", at),
            ("2023-11-14T23:13:20+01:00", at),
            ("2023-11-14T16:43:20-05:30", at),
            ("2023-11-14T22:13:20.250Z", at + 250),
            ("2023-11-14T22:13:20.2501Z", at + 251),
            ("2023-11-14T22:13:20.000000Z", at),
            ("2023-11-14T22:13:60Z", at + 40_000),
            ("1970-01-01T00:00:00Z", 0),
            ("2000-02-29T00:00:00Z", 951_782_400_000),
        ] {
            assert_eq!(parse_rfc3339_ms(text), Some(ms), "{text}");
        }
        for junk in [
            "",
            "2023-11-14T22:13:20",
            "2023-11-14",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T24:00:00Z",
            "2023-02-29T00:00:00Z",
            "2023-13-01T00:00:00Z",
            "2023-11-14T22:13:20+1:00",
            "2023-11-14T22:13:20+24:00",
            "1969-12-31T23:59:59Z",
            "1970-01-01T00:00:00+00:01",
            "2023-11-14T22:13:20Zjunk",
            "２０23-11-14T22:13:20Z",
            "Tue, 14 Nov 2023 22:13:20 GMT",
        ] {
            assert_eq!(parse_rfc3339_ms(junk), None, "{junk:?}");
        }
        // Every date an HTTP-date can name reads the same written as RFC 3339.
        for secs in (0..253_402_300_799u64).step_by(9_876_543_211) {
            let http = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
            let b = http.as_bytes();
            let month = MONTHS.iter().position(|m| *m == &b[8..11]).unwrap() + 1;
            let text = format!(
                "{}-{month:02}-{}T{}Z",
                &http[12..16],
                &http[5..7],
                &http[17..25]
            );
            assert_eq!(parse_rfc3339_ms(&text), Some(secs * 1000), "{text}");
        }
    }
}
