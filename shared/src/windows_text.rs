//! Windows as a person writes them on a command line or in a file: `10/1s,3000/1h`, comma-
//! separated `limit/length` pairs. Read by `sluice simulate --windows` and by the proxy's
//! `--windows`, written back in the same form in their reports.

use std::str::FromStr;

use crate::config::Window;

/// A `--windows` value that cannot be read, naming the part at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowsError {
    #[error("no windows given: write limit/length pairs such as 10/1s,3000/1h")]
    Empty,
    #[error("entry {index} of '{input}' is empty: write limit/length pairs such as 10/1s,3000/1h")]
    EmptyEntry { input: String, index: usize },
    #[error("window '{part}' needs the form limit/length, e.g. 10/1s")]
    NoSlash { part: String },
    #[error("window '{part}': the limit '{limit}' is not a whole number above 0")]
    BadLimit { part: String, limit: String },
    #[error("window '{part}': the length '{length}' needs a whole number and a unit (ms, s, m or h), e.g. 1s or 500ms")]
    BadLength { part: String, length: String },
    #[error("window '{part}': unknown unit '{unit}' (use ms, s, m or h)")]
    BadUnit { part: String, unit: String },
    #[error("window '{part}': the length must be above 0")]
    ZeroLength { part: String },
    #[error("window '{part}': the length is too long")]
    TooLong { part: String },
}

/// Reads `10/1s,3000/1h`: comma-separated `limit/length` pairs, the length a whole number and
/// a unit (ms, s, m, h; `10/s` means `10/1s`).
pub fn parse_windows(input: &str) -> Result<Vec<Window>, WindowsError> {
    if input.trim().is_empty() {
        return Err(WindowsError::Empty);
    }
    input
        .split(',')
        .enumerate()
        .map(|(i, part)| {
            let part = part.trim();
            if part.is_empty() {
                return Err(WindowsError::EmptyEntry {
                    input: input.to_string(),
                    index: i + 1,
                });
            }
            parse_window(part)
        })
        .collect()
}

fn parse_window(part: &str) -> Result<Window, WindowsError> {
    let owned = || part.to_string();
    let (limit, length) = part
        .split_once('/')
        .ok_or_else(|| WindowsError::NoSlash { part: owned() })?;
    let (limit, length) = (limit.trim(), length.trim());
    let limit_n = limit
        .parse::<u32>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| WindowsError::BadLimit {
            part: owned(),
            limit: limit.to_string(),
        })?;
    let digits = length
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(length.len());
    let (number, unit) = length.split_at(digits);
    let unit_ms: u64 = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => {
            return Err(WindowsError::BadLength {
                part: owned(),
                length: length.to_string(),
            })
        }
        other => {
            return Err(WindowsError::BadUnit {
                part: owned(),
                unit: other.to_string(),
            })
        }
    };
    let count: u64 = if number.is_empty() {
        1
    } else {
        number
            .parse()
            .map_err(|_| WindowsError::TooLong { part: owned() })?
    };
    if count == 0 {
        return Err(WindowsError::ZeroLength { part: owned() });
    }
    let length_ms = count
        .checked_mul(unit_ms)
        .ok_or_else(|| WindowsError::TooLong { part: owned() })?;
    Ok(Window {
        limit: limit_n,
        length_ms,
    })
}

/// Several windows as one command-line value (see [`parse_windows`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowList(pub Vec<Window>);

impl FromStr for WindowList {
    type Err = WindowsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_windows(s).map(WindowList)
    }
}

/// `10/1s,3000/1h`: the form `--windows` reads.
pub fn windows_text(windows: &[Window]) -> String {
    windows
        .iter()
        .map(|w| format!("{}/{}", w.limit, length_text(w.length_ms)))
        .collect::<Vec<_>>()
        .join(",")
}

/// A window's length as `--windows` writes it: `1s`, `5m`, `1h`, or `250ms`.
pub fn length_text(ms: u64) -> String {
    for (unit_ms, unit) in [(3_600_000, "h"), (60_000, "m"), (1_000, "s")] {
        if ms.is_multiple_of(unit_ms) {
            return format!("{}{unit}", ms / unit_ms);
        }
    }
    format!("{ms}ms")
}
