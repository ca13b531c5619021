//! Header adapters: what the server said about its rate limit. (Interface fixed; in progress.)

use serde::{Deserialize, Serialize};

use crate::time::{DurationMs, Millis};

/// One shape for every vendor's rate-limit headers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    pub limit: Option<u64>,
    pub remaining: Option<u64>,
    /// Time from the response until the quota resets.
    pub reset_after_ms: Option<DurationMs>,
    /// Length of the quota's window, where the server says it.
    pub window_ms: Option<DurationMs>,
}

/// Everything rate-related read from one response.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerSignal {
    /// The response says "you are over the limit": 429, 503 with Retry-After, or GitHub's 403
    /// with no requests remaining.
    pub rate_limited: bool,
    /// How long to wait, from `Retry-After` (either form, skew-corrected), from the response.
    pub retry_after_ms: Option<DurationMs>,
    /// The current quota, from the first adapter that understood the headers.
    pub quota: Option<Quota>,
}

/// Reads a response's status and headers (names in any case). `now` is when the response
/// arrived on the client's clock. Malformed headers are ignored, never fatal.
pub fn read_signal(status: u16, headers: &[(String, String)], now: Millis) -> ServerSignal {
    let _ = (status, headers, now);
    ServerSignal::default()
}
