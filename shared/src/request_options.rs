//! How the browser makes a job's request beyond its method, URL, headers and body: the
//! `RequestInit` members that change what is sent (cookies, the referrer) or what may come
//! back (redirects, a checked hash). A request a page made with `fetch(url, {credentials:
//! 'omit'})` and the worker took off the network path is replayed with the same members, not
//! the browser's defaults: replaying it with cookies would send what the page chose not to.
//!
//! The values are kept as the Fetch standard spells them and checked here, at enqueue, so a
//! stored job never holds one the browser would refuse. An absent member is the browser's
//! default (`credentials: 'same-origin'`, `mode: 'cors'`, `redirect: 'follow'`, the
//! referrer policy of the worker, no integrity check).

use serde::{Deserialize, Serialize};

use std::fmt;

use crate::json::{FromJson, ToJson};

/// `RequestInit` members of a job's request; `None` is the browser's default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(default, rename_all = "camelCase")]
pub struct RequestOptions {
    /// `omit`, `same-origin` or `include`: whether cookies and HTTP authentication go along.
    pub credentials: Option<String>,
    /// `cors` or `same-origin`. `no-cors` is refused: its answer is opaque, so Sluice could
    /// not tell a success from a failure or read a rate limit, and would retry what the
    /// server already applied.
    pub mode: Option<String>,
    /// `follow`, `error` or `manual`.
    pub redirect: Option<String>,
    pub referrer_policy: Option<String>,
    /// A subresource-integrity string the response must match.
    pub integrity: Option<String>,
}

const CREDENTIALS: [&str; 3] = ["omit", "same-origin", "include"];
const MODES: [&str; 2] = ["cors", "same-origin"];
const REDIRECTS: [&str; 3] = ["follow", "error", "manual"];
const REFERRER_POLICIES: [&str; 9] = [
    "",
    "no-referrer",
    "no-referrer-when-downgrade",
    "same-origin",
    "origin",
    "strict-origin",
    "origin-when-cross-origin",
    "strict-origin-when-cross-origin",
    "unsafe-url",
];

impl RequestOptions {
    /// True when every member is the browser's default (nothing to store or set).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// Each member is one the browser accepts; the error names the member, the value and
    /// what would do.
    pub fn validate(&self) -> Result<(), InvalidOption> {
        check("credentials", &self.credentials, &CREDENTIALS)?;
        if self.mode.as_deref() == Some("no-cors") {
            return Err(invalid(
                "mode 'no-cors' hides the server's answer, so Sluice could not tell whether the \
                 request was applied; use 'cors' (the API must allow this origin)"
                    .into(),
            ));
        }
        check("mode", &self.mode, &MODES)?;
        check("redirect", &self.redirect, &REDIRECTS)?;
        check("referrerPolicy", &self.referrer_policy, &REFERRER_POLICIES)?;
        if let Some(integrity) = &self.integrity {
            if integrity.bytes().any(|b| b.is_ascii_control()) {
                return Err(invalid("integrity contains a control character".into()));
            }
        }
        Ok(())
    }
}

/// A member the browser would refuse, and what it allows instead. The protocol answers it as
/// an invalid request (`From` in `protocol`, which knows the errors a page sees).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidOption {
    pub message: String,
}

impl fmt::Display for InvalidOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

fn invalid(message: String) -> InvalidOption {
    InvalidOption { message }
}

fn check(member: &str, value: &Option<String>, allowed: &[&str]) -> Result<(), InvalidOption> {
    match value {
        Some(v) if !allowed.contains(&v.as_str()) => {
            let mut message = format!("{member} '{v}' is not one of:");
            for a in allowed.iter().filter(|a| !a.is_empty()) {
                message.push_str(" '");
                message.push_str(a);
                message.push('\'');
            }
            Err(invalid(message))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::testing::same_as_serde;

    #[test]
    fn the_browser_defaults_are_the_default() {
        assert!(RequestOptions::default().is_default());
        assert_eq!(RequestOptions::default().validate(), Ok(()));
    }

    #[test]
    fn members_the_browser_accepts_pass() {
        let options = RequestOptions {
            credentials: Some("omit".into()),
            mode: Some("same-origin".into()),
            redirect: Some("error".into()),
            referrer_policy: Some("no-referrer".into()),
            integrity: Some("sha256-abc=".into()),
        };
        assert_eq!(options.validate(), Ok(()));
        assert!(!options.is_default());
        same_as_serde(&options);
        same_as_serde(&RequestOptions::default());
    }

    #[test]
    fn a_wrong_member_is_named_with_what_would_do() {
        let options = RequestOptions {
            credentials: Some("always".into()),
            ..Default::default()
        };
        let Err(InvalidOption { message }) = options.validate() else {
            panic!("accepted");
        };
        assert_eq!(
            message,
            "credentials 'always' is not one of: 'omit' 'same-origin' 'include'"
        );
    }

    #[test]
    fn no_cors_is_refused_because_its_answer_is_opaque() {
        let options = RequestOptions {
            mode: Some("no-cors".into()),
            ..Default::default()
        };
        let Err(InvalidOption { message }) = options.validate() else {
            panic!("accepted");
        };
        assert!(message.contains("no-cors"), "{message}");
    }
}
