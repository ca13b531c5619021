//! What the browser adds to a request on its way out: CORS preflights and its HTTP cache.
//!
//! A request to another origin that is not "simple" in the Fetch standard's sense (a method
//! other than GET, HEAD or POST, or any header outside the CORS-safelisted few, such as the
//! `Idempotency-Key` every create carries, or `Authorization`) is preceded by an `OPTIONS`
//! preflight. The browser keeps the preflight's answer in its preflight cache, keyed by the
//! request's URL (with the origin and credentials mode), for the `Access-Control-Max-Age` the
//! API sent, capped by the browser (Chromium: 2 h; Firefox: 24 h), or 5 s when the API sent
//! none. The worker never sees a preflight or its headers: it can only know, from the request
//! alone, when the browser will send one.
//!
//! Two rules follow, and this module holds both:
//! - [`bypasses_http_cache`]: which requests the worker sends with `cache: 'no-store'`. Any
//!   cache mode other than the default also makes Chromium skip its preflight cache (checked:
//!   20 preflights for 20 non-simple POSTs with `no-store`, 1 with the default mode), which
//!   doubles the requests of every job. Unsafe methods (POST, PUT, PATCH, DELETE) are never
//!   answered from the HTTP cache in the default mode, so they keep it; only GET and HEAD, which
//!   the cache could answer (the engine would then count a start the server never saw, and hand
//!   the job a stale answer), bypass it. A simple GET needs no preflight either way.
//! - [`Preflights`]: for an API that counts `OPTIONS` against its limit (a budget's
//!   `countPreflights`), the engine counts each preflight the browser will send as one more
//!   start, at the instant of the request that causes it (it arrives just before it).

use crate::time::{DurationMs, Millis};

/// How long the browser keeps a preflight's answer when the API sends no
/// `Access-Control-Max-Age` (the Fetch standard's default, Chromium's and Firefox's).
pub const DEFAULT_PREFLIGHT_MAX_AGE_MS: DurationMs = 5_000;

/// Whether a request must be sent past the HTTP cache (`cache: 'no-store'`): GET and HEAD only.
pub fn bypasses_http_cache(method: &str) -> bool {
    method.eq_ignore_ascii_case("GET") || method.eq_ignore_ascii_case("HEAD")
}

/// Whether a cross-origin request with this method and these headers is preceded by a CORS
/// preflight (the Fetch standard's CORS-safelisted method and request-header rules).
///
/// A body given as a string makes the browser send `Content-Type: text/plain;charset=UTF-8`
/// when the request names none, which is safelisted: so a header list without `Content-Type`
/// is simple on that count.
pub fn needs_preflight(method: &str, headers: &[(String, String)]) -> bool {
    let safelisted_method = ["GET", "HEAD", "POST"]
        .iter()
        .any(|m| method.eq_ignore_ascii_case(m));
    if !safelisted_method {
        return true;
    }
    let mut total_len = 0usize;
    for (name, value) in headers {
        if !is_safelisted_header(name, value) {
            return true;
        }
        total_len = total_len.saturating_add(value.len());
    }
    // The standard also preflights when the safelisted headers' values exceed 1,024 bytes.
    total_len > 1_024
}

fn is_safelisted_header(name: &str, value: &str) -> bool {
    if value.len() > 128 {
        return false;
    }
    let bad_byte = |b: u8| {
        (b < 0x20 && b != b'\t')
            || matches!(
                b,
                b'"' | b'('
                    | b')'
                    | b':'
                    | b'<'
                    | b'>'
                    | b'?'
                    | b'@'
                    | b'['
                    | b'\\'
                    | b']'
                    | b'{'
                    | b'}'
                    | 0x7f
            )
    };
    let name = name.trim();
    if name.eq_ignore_ascii_case("accept") {
        !value.bytes().any(bad_byte)
    } else if name.eq_ignore_ascii_case("accept-language")
        || name.eq_ignore_ascii_case("content-language")
    {
        value.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b' ' | b'*' | b',' | b'-' | b'.' | b';' | b'=')
        })
    } else if name.eq_ignore_ascii_case("content-type") {
        if value.bytes().any(bad_byte) {
            return false;
        }
        let essence = value.split(';').next().unwrap_or("").trim();
        [
            "application/x-www-form-urlencoded",
            "multipart/form-data",
            "text/plain",
        ]
        .iter()
        .any(|t| essence.eq_ignore_ascii_case(t))
    } else {
        false
    }
}

/// The preflights this budget's requests caused and when, as the browser's preflight cache
/// holds them. Kept in memory only: after a restart the browser may still hold entries this
/// has forgotten, so the engine counts a preflight the browser does not send, the careful side.
///
/// A list, not a hash map: it holds the URLs of one preflight max age (a few hundred at most
/// for a bulk job of one URL per record at 100 per second and 5 s), and a map of its own key
/// and value types is several kilobytes of the worker's wasm.
#[derive(Clone, Debug, Default)]
pub struct Preflights {
    /// URL (without its fragment) and the instant its last preflight went out.
    sent_at: Vec<(String, Millis)>,
}

/// Entries kept before the expired ones are swept: a bulk job over thousands of record URLs
/// would otherwise keep one per record for the worker's life.
const SWEEP_ABOVE: usize = 1_024;

impl Preflights {
    /// Called for each start of a request that [`needs_preflight`]: whether the browser sends
    /// a preflight for it now (none cached for its URL within `max_age_ms`). A wall clock that
    /// stepped back counts as expired, the careful side.
    pub fn on_start(&mut self, url: &str, now: Millis, max_age_ms: DurationMs) -> bool {
        let url = url.split('#').next().unwrap_or(url);
        let fresh = |at: Millis| now >= at && now - at < max_age_ms;
        if let Some(entry) = self.sent_at.iter_mut().find(|(u, _)| u == url) {
            if fresh(entry.1) {
                return false;
            }
            entry.1 = now;
            return true;
        }
        if self.sent_at.len() >= SWEEP_ABOVE {
            self.sent_at.retain(|(_, at)| fresh(*at));
        }
        self.sent_at.push((url.to_owned(), now));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn simple_requests_need_no_preflight() {
        assert!(!needs_preflight("GET", &[]));
        assert!(!needs_preflight(
            "post",
            &h(&[("Content-Type", "text/plain;charset=UTF-8")])
        ));
        assert!(!needs_preflight(
            "POST",
            &h(&[("Accept", "application/json")])
        ));
        assert!(!needs_preflight(
            "HEAD",
            &h(&[("Accept-Language", "en-GB, de;q=0.5")])
        ));
    }

    #[test]
    fn everything_else_is_preflighted() {
        assert!(needs_preflight("PATCH", &[]));
        assert!(needs_preflight("DELETE", &[]));
        assert!(needs_preflight(
            "POST",
            &h(&[("Content-Type", "application/json")])
        ));
        assert!(needs_preflight("POST", &h(&[("Idempotency-Key", "k")])));
        assert!(needs_preflight("GET", &h(&[("Authorization", "Bearer x")])));
        assert!(needs_preflight("GET", &h(&[("Accept", &"a".repeat(129))])));
        assert!(needs_preflight("GET", &h(&[("Accept", "a\"b")])));
    }

    #[test]
    fn only_get_and_head_bypass_the_http_cache() {
        assert!(bypasses_http_cache("GET"));
        assert!(bypasses_http_cache("head"));
        for m in ["POST", "PUT", "PATCH", "DELETE"] {
            assert!(!bypasses_http_cache(m), "{m}");
        }
    }

    #[test]
    fn one_preflight_per_url_per_max_age() {
        let mut p = Preflights::default();
        assert!(p.on_start("https://api.example/a", 1_000, 5_000));
        assert!(!p.on_start("https://api.example/a", 5_999, 5_000));
        assert!(!p.on_start("https://api.example/a#frag", 2_000, 5_000));
        assert!(p.on_start("https://api.example/b", 2_000, 5_000));
        assert!(p.on_start("https://api.example/a", 6_000, 5_000));
        // A clock stepped back: counted again rather than trusted.
        assert!(p.on_start("https://api.example/a", 10, 5_000));
    }

    #[test]
    fn many_urls_are_swept_once_expired() {
        let mut p = Preflights::default();
        for i in 0..SWEEP_ABOVE as u64 {
            assert!(p.on_start(&format!("u{i}"), i, 10));
        }
        assert!(p.on_start("late", 100_000, 10));
        assert_eq!(p.sent_at.len(), 1);
    }
}
