//! Prefixes as a worker script writes them (`/api/`, `api/`, `https://api.example/v1/`),
//! resolved against the worker's origin. Both the configuration's budgets and its interception
//! routes take them, so the rule lives here, beneath both.

use sluice_shared::scope::UrlText;

/// `/api/` -> `http://host:port/api/`; absolute http(s) prefixes are kept as they are.
pub fn resolve_prefix(prefix: &str, origin: &str) -> String {
    if is_absolute_http(prefix) {
        return prefix.to_string();
    }
    let origin = origin.trim_end_matches('/');
    if prefix.starts_with('/') {
        format!("{origin}{prefix}")
    } else {
        format!("{origin}/{prefix}")
    }
}

/// Whether a URL starts with `http://` or `https://` (any case), i.e. needs no resolution.
pub fn is_absolute_http(url: &str) -> bool {
    UrlText::split(url).is_some_and(|text| text.default_port().is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &str = "http://127.0.0.1:8123";

    #[test]
    fn prefixes_resolve_against_the_origin() {
        assert_eq!(
            resolve_prefix("/api/", ORIGIN),
            "http://127.0.0.1:8123/api/"
        );
        assert_eq!(resolve_prefix("api/", ORIGIN), "http://127.0.0.1:8123/api/");
        assert_eq!(
            resolve_prefix("https://api.example/v1/", ORIGIN),
            "https://api.example/v1/"
        );
        assert_eq!(resolve_prefix("/x", "http://h/"), "http://h/x");
    }

    #[test]
    fn absolute_detection_ignores_case() {
        assert!(is_absolute_http("HTTPS://a.example/"));
        assert!(is_absolute_http("http://a"));
        assert!(!is_absolute_http("/api"));
        assert!(!is_absolute_http("ftp://x"));
        assert!(!is_absolute_http("htt"));
        assert!(!is_absolute_http("é"));
    }
}
