//! What the header tests share: a fixed server clock and short ways to read headers.

use std::time::{Duration, UNIX_EPOCH};

use super::{read_signal, Quota, ServerSignal};
use crate::config::Window;
use crate::time::Millis;

pub(crate) const SECOND: u64 = 1000;
pub(crate) const MINUTE: u64 = 60 * SECOND;
/// 2023-11-14T22:13:20Z, a round epoch: 1_700_000_000 s.
pub(crate) const SERVER_NOW: Millis = 1_700_000_000 * SECOND;

pub(crate) fn http_date(at: Millis) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_millis(at))
}

pub(crate) fn hs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

pub(crate) fn read(status: u16, pairs: &[(&str, &str)], now: Millis) -> ServerSignal {
    read_signal(status, &hs(pairs), now)
}

pub(crate) fn quota(status: u16, pairs: &[(&str, &str)], now: Millis) -> Quota {
    read(status, pairs, now).quota.expect("a quota")
}

/// A declared policy as the limiter window it becomes: `limit` per `secs` seconds.
pub(crate) fn win(limit: u32, secs: u64) -> Window {
    Window {
        limit,
        length_ms: secs * SECOND,
    }
}
