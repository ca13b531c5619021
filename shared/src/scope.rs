//! Where the worker may send: URL scopes, matched by their parts, never as raw text.
//!
//! A service worker outlives the page that gave it a job, so the worker script (not a page)
//! names the origins, and where wanted the path prefixes, that jobs may ever go to (the
//! configuration's `allow`; without it, the script's own budgets' `matchPrefixes`). A budget's
//! `matchPrefixes` are scopes too.
//!
//! Matching compares the scheme, the host and the port (a default port written out or left
//! out is the same port), and then the path at a segment boundary: the scope
//! `https://api.x.com/v1` covers `https://api.x.com/v1` and `https://api.x.com/v1/contacts`,
//! but not `https://api.x.com/v10`, and `https://api.x.com` never covers
//! `https://api.x.com.evil.example/` (a raw string prefix would). The worker hands the engine
//! URLs as the browser normalised them (`new URL(..).href`: lower-case host, dot segments
//! resolved); anything this parser is unsure of (user info, a backslash, a dot segment, a
//! percent sign in the host) is refused rather than guessed at.

use std::fmt;

/// The parts of an absolute `http:` or `https:` URL that decide where it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `http` or `https`, lower case.
    pub scheme: String,
    /// Lower case; an IPv6 address keeps its brackets.
    pub host: String,
    /// Always explicit: 80 or 443 when the URL names none.
    pub port: u16,
    /// Starts with `/`; without the query and the fragment.
    pub path: String,
}

/// Why a text is no URL the worker can send to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeError(pub String);

impl fmt::Display for ScopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `text` split at byte `at`, which the callers find at an ASCII byte, so always a character
/// boundary. `split_at_checked` rather than indexing: indexing's panic for a non-boundary
/// brings core's message formatting for it into the wasm (about 1.5 KB), for a case that
/// cannot happen.
fn cut(text: &str, at: usize) -> (&str, &str) {
    text.split_at_checked(at).unwrap_or((text, ""))
}

/// A URL's text cut into its pieces exactly as written: no case folded, no default port
/// added, nothing decoded. [`Target::parse`] reads a URL through it, so where the origin ends
/// is decided here alone.
///
/// Why "as written" is needed next to [`Target`]: a batch goes to the same origin as its jobs,
/// spelled the same way (`Target::origin` always writes the port), and a batch rule's URL
/// pattern keeps its `:id` segments and the rest of its path as its author wrote them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UrlText<'a> {
    /// `scheme://authority`: `HTTPS://API.x.com:443` stays so.
    pub origin: &'a str,
    /// What comes before `://`.
    pub scheme: &'a str,
    /// What comes between `://` and the first `/`, `?` or `#`: host, port, any user info.
    pub authority: &'a str,
    /// All after the authority: path, query and fragment; empty when there are none.
    pub rest: &'a str,
}

impl<'a> UrlText<'a> {
    /// Splits `url` after its origin; `None` when it has no `://`. Checks nothing else:
    /// [`Target::parse`] says whether the URL is one the worker can send to.
    pub fn split(url: &'a str) -> Option<Self> {
        // Byte searches, not `str` patterns: each pattern type is its own searcher in the wasm.
        let sep = url.as_bytes().windows(3).position(|w| w == b"://")?;
        let after_scheme = cut(url, sep + 3).1;
        let authority_len = after_scheme
            .bytes()
            .position(|b| matches!(b, b'/' | b'?' | b'#'))
            .unwrap_or(after_scheme.len());
        let (origin, rest) = cut(url, sep + 3 + authority_len);
        Some(UrlText {
            origin,
            scheme: cut(url, sep).0,
            authority: cut(after_scheme, authority_len).0,
            rest,
        })
    }

    /// The port an `http` or `https` URL goes to when it names none (ASCII case ignored);
    /// `None` for any other scheme, which the worker never sends to.
    pub fn default_port(&self) -> Option<u16> {
        if self.scheme.eq_ignore_ascii_case("http") {
            Some(80)
        } else if self.scheme.eq_ignore_ascii_case("https") {
            Some(443)
        } else {
            None
        }
    }
}

impl Target {
    /// Parses an absolute http(s) URL. Never panics, whatever the text.
    pub fn parse(url: &str) -> Result<Self, ScopeError> {
        let bad = |why: &str| Err(ScopeError(format!("'{}' {why}", shorten(url))));
        let Some(text) = UrlText::split(url) else {
            return bad("is not an absolute http:// or https:// URL");
        };
        let Some(default_port) = text.default_port() else {
            return bad("is not an http:// or https:// URL");
        };
        let scheme = text.scheme.to_ascii_lowercase();
        if url.contains('\\') || url.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return bad("contains a backslash, a space or a control character");
        }
        let (authority, after) = (text.authority, text.rest);
        if authority.contains('@') {
            return bad("carries user info (name@host), which fetch refuses");
        }
        let (host, port) = match authority.rfind(':') {
            // A colon inside brackets belongs to an IPv6 address.
            Some(i) if !cut(authority, i).1.contains(']') => {
                let digits = cut(authority, i + 1).1;
                let port = if digits.is_empty() {
                    default_port
                } else if digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit()) {
                    let port = digits
                        .bytes()
                        .fold(0u32, |n, b| n * 10 + u32::from(b - b'0'));
                    match u16::try_from(port) {
                        Ok(p) => p,
                        Err(_) => return bad("has a port above 65535"),
                    }
                } else {
                    return bad("has a port that is not a number");
                };
                (cut(authority, i).0, port)
            }
            _ => (authority, default_port),
        };
        if host.is_empty() {
            return bad("names no host");
        }
        let host_ok = if let Some(inner) = host.strip_prefix('[') {
            inner.strip_suffix(']').is_some_and(|a| {
                !a.is_empty()
                    && a.bytes()
                        .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
            })
        } else {
            host.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        };
        if !host_ok {
            return bad("has a host that is not a plain name or address");
        }
        let path_end = after
            .bytes()
            .position(|b| b == b'?' || b == b'#')
            .unwrap_or(after.len());
        let path = match cut(after, path_end).0 {
            "" => "/",
            path => path,
        };
        let dot_segment = path.split('/').any(|s| {
            s == "."
                || s == ".."
                || s.eq_ignore_ascii_case("%2e")
                || s.eq_ignore_ascii_case("%2e%2e")
        });
        if dot_segment {
            return bad("has a '.' or '..' path segment");
        }
        Ok(Target {
            scheme,
            host: host.to_ascii_lowercase(),
            port,
            path: path.to_string(),
        })
    }

    /// `scheme://host:port`, the port always written.
    pub fn origin(&self) -> String {
        format!("{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// One scope: an origin, and a path prefix within it that ends at a segment boundary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope(Target);

impl Scope {
    /// Parses a scope: an absolute http(s) URL with no query or fragment.
    pub fn parse(text: &str) -> Result<Self, ScopeError> {
        if text.bytes().any(|b| b == b'?' || b == b'#') {
            return Err(ScopeError(format!(
                "'{}' has a query or fragment; a scope is an origin and a path",
                shorten(text)
            )));
        }
        Target::parse(text).map(Scope)
    }

    /// Whether `target` lies inside this scope.
    pub fn covers(&self, target: &Target) -> bool {
        let s = &self.0;
        s.scheme == target.scheme
            && s.host == target.host
            && s.port == target.port
            && path_within(&s.path, &target.path)
    }

    /// Whether every URL `inner` covers, this one covers too.
    pub fn contains(&self, inner: &Scope) -> bool {
        self.covers(&inner.0)
    }

    /// How specific the scope is, for "the longest matching prefix wins".
    pub fn specificity(&self) -> usize {
        self.0.path.len()
    }
}

/// `/v1` and `/v1/` both cover `/v1/x`; `/v1` covers `/v1` itself but not `/v10`.
fn path_within(prefix: &str, path: &str) -> bool {
    if prefix == "/" || prefix == path {
        return true;
    }
    match path.strip_prefix(prefix) {
        Some(rest) => prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

fn shorten(text: &str) -> String {
    let mut s: String = text.chars().take(200).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers(scope: &str, url: &str) -> bool {
        Scope::parse(scope)
            .unwrap()
            .covers(&Target::parse(url).unwrap())
    }

    #[test]
    fn a_host_is_matched_whole_not_as_a_prefix() {
        assert!(covers("https://api.x.com", "https://api.x.com/contacts"));
        assert!(!covers(
            "https://api.x.com",
            "https://api.x.com.evil.example/"
        ));
        assert!(!covers("http://127.0.0.1", "http://127.0.0.10/"));
        assert!(!covers("http://127.0.0.1", "http://127.0.0.1:9/"));
        assert!(covers("http://127.0.0.1:80/", "http://127.0.0.1/a"));
        assert!(covers(
            "HTTPS://API.X.com:443/v1",
            "https://api.x.com/v1/a?q=1#f"
        ));
        assert!(!covers("https://api.x.com", "http://api.x.com/"));
    }

    #[test]
    fn paths_match_at_a_segment_boundary() {
        assert!(covers("https://a.b/v1", "https://a.b/v1"));
        assert!(covers("https://a.b/v1", "https://a.b/v1/x"));
        assert!(covers("https://a.b/v1/", "https://a.b/v1/x"));
        assert!(!covers("https://a.b/v1", "https://a.b/v10"));
        assert!(!covers("https://a.b/v1/", "https://a.b/v1"));
        assert!(covers("https://a.b/", "https://a.b"));
    }

    #[test]
    fn doubtful_urls_are_refused() {
        for url in [
            "ftp://a.b/",
            "https://user@a.b/",
            "https://a.b\\@evil/",
            "https://a.b/x/../admin",
            "https://a.b/%2e%2e/admin",
            "https://a%2eb/",
            "https://a.b:99999/",
            "https://a.b:8x/",
            "https:///x",
            "https://[::1/",
            "a.b/x",
            "",
        ] {
            assert!(Target::parse(url).is_err(), "{url}");
        }
        assert!(Target::parse("http://[::1]:8080/x").is_ok());
        assert!(Scope::parse("https://a.b/x?y").is_err());
    }

    #[test]
    fn url_text_splits_after_the_origin_as_written() {
        let text = UrlText::split("HTTPS://API.x.com:443/v1/c/:id?q=1#f").unwrap();
        assert_eq!(text.origin, "HTTPS://API.x.com:443");
        assert_eq!(text.scheme, "HTTPS");
        assert_eq!(text.authority, "API.x.com:443");
        assert_eq!(text.rest, "/v1/c/:id?q=1#f");
        assert_eq!(text.default_port(), Some(443));
        let bare = UrlText::split("http://[::1]:8080").unwrap();
        assert_eq!(
            (bare.origin, bare.authority, bare.rest),
            ("http://[::1]:8080", "[::1]:8080", "")
        );
        assert_eq!(bare.default_port(), Some(80));
        let query = UrlText::split("https://a.b?x=/y").unwrap();
        assert_eq!((query.origin, query.rest), ("https://a.b", "?x=/y"));
        let other = UrlText::split("ftp://a.b/x").unwrap();
        assert_eq!((other.scheme, other.default_port()), ("ftp", None));
        assert_eq!(UrlText::split("/api/contacts/:id"), None);
        assert_eq!(UrlText::split("é:/x"), None);
        // Whatever the text, the origin and the rest are the URL again.
        for url in ["https://a.b/x", "https://a.b", "https://é.b/é?é#é", "x://"] {
            let text = UrlText::split(url).unwrap();
            assert_eq!(format!("{}{}", text.origin, text.rest), url);
        }
    }

    #[test]
    fn containment_follows_coverage() {
        let outer = Scope::parse("https://a.b/api").unwrap();
        assert!(outer.contains(&Scope::parse("https://a.b/api/v2/").unwrap()));
        assert!(!outer.contains(&Scope::parse("https://a.b/apix").unwrap()));
        assert!(!outer.contains(&Scope::parse("https://a.b.c/api").unwrap()));
    }
}
