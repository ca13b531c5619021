//! Checking a page's job before anything of it is kept: its URL, method, headers, body size
//! and options, and where it may go (what the worker script allows, then its budget).

use super::*;
use crate::scope::UrlText;

impl Engine {
    /// Checks `spec` against the configuration, before anything of it is kept: refuses
    /// anything a browser would not send, or that would go outside what the worker script
    /// allows. Returns the budget it goes to and its method, upper case.
    pub(super) fn validate(&self, spec: &JobSpec) -> Result<(String, String), EngineError> {
        let method = self.check_request(spec)?;
        Ok((self.route(spec)?, method))
    }

    /// The first half of [`Engine::validate`]: what a browser would not send (the URL's form,
    /// the method, body, headers, options). Returns the method, upper case.
    pub(super) fn check_request(&self, spec: &JobSpec) -> Result<String, EngineError> {
        validate_url(&spec.url)?;
        let method = if spec.method.trim().is_empty() {
            "GET".to_string()
        } else {
            spec.method.trim().to_ascii_uppercase()
        };
        if !method.bytes().all(is_token_byte) {
            return Err(EngineError::InvalidRequest {
                message: format!("'{}' is not an HTTP method", spec.method),
            });
        }
        if matches!(method.as_str(), "CONNECT" | "TRACE" | "TRACK") {
            return Err(EngineError::InvalidRequest {
                message: format!("browsers do not allow {method} requests"),
            });
        }
        if matches!(method.as_str(), "GET" | "HEAD") && spec.body.is_some() {
            return Err(EngineError::InvalidRequest {
                message: format!("a {method} request cannot have a body"),
            });
        }
        if let Some(body) = &spec.body {
            if body.len() > self.config.max_body_bytes {
                return Err(EngineError::BodyTooLarge {
                    bytes: body.len(),
                    max_bytes: self.config.max_body_bytes,
                });
            }
        }
        check_headers(&spec.headers)?;
        if let Some(options) = &spec.options {
            options.validate()?;
        }
        if spec.if_match_from_key && spec.key.as_deref().is_none_or(str::is_empty) {
            return Err(EngineError::InvalidRequest {
                message: "ifMatchFromKey needs a key: it sends the ETag of the last answer to a \
                          job of the same key"
                    .into(),
            });
        }
        Ok(method)
    }

    /// The second half of [`Engine::validate`], the budget a job goes to: where it may go is
    /// checked first, and for every job (naming a budget never takes a job past what the
    /// worker script allows); then its budget is the one it names, or the one whose prefix
    /// matches its URL best. Depends on the URL and the named budget alone (`enqueue_many`
    /// routes a run of jobs to one URL once).
    pub(super) fn route(&self, spec: &JobSpec) -> Result<String, EngineError> {
        let target = Target::parse(&spec.url).map_err(|e| EngineError::InvalidUrl {
            url: spec.url.chars().take(200).collect(),
            message: e.0,
        })?;
        if !self.allowed.is_empty() && !self.allowed.iter().any(|s| s.covers(&target)) {
            return Err(EngineError::UrlNotAllowed {
                url: spec.url.chars().take(200).collect(),
                allowed: self.config.allowed_list(),
            });
        }
        if spec.budget.is_empty() {
            self.config
                .budget_for_url(&target)
                .map(|b| b.name.clone())
                .ok_or_else(|| EngineError::NoBudgetForUrl {
                    url: spec.url.clone(),
                })
        } else if self.budgets.contains_key(&spec.budget) {
            Ok(spec.budget.clone())
        } else {
            Err(EngineError::UnknownBudget {
                budget: spec.budget.clone(),
                known: self.budgets.keys().cloned().collect(),
            })
        }
    }
}

/// Header names an HTTP token, values without line breaks or NULs: what `fetch` would refuse.
pub(super) fn check_headers(headers: &[(String, String)]) -> Result<(), EngineError> {
    for (name, value) in headers {
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err(EngineError::InvalidRequest {
                message: format!("'{name}' is not a valid header name"),
            });
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(EngineError::InvalidRequest {
                message: format!("the value of header '{name}' contains a line break"),
            });
        }
    }
    Ok(())
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// An absolute http(s) URL with a host and no spaces or control characters. (The worker has
/// already resolved relative URLs against its origin.)
pub fn validate_url(url: &str) -> Result<(), EngineError> {
    let invalid = |message: &str| EngineError::InvalidUrl {
        url: url.chars().take(200).collect(),
        message: message.into(),
    };
    if url.len() > 16_384 {
        return Err(invalid("longer than 16,384 characters"));
    }
    // The scheme as written, lower case (`new URL(..).href` writes it so).
    let Some(text) = UrlText::split(url).filter(|t| matches!(t.scheme, "http" | "https")) else {
        return Err(invalid(
            "only absolute http:// and https:// URLs can be sent",
        ));
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("contains spaces or control characters"));
    }
    let host = text.authority.rsplit('@').next().unwrap_or("");
    if host.is_empty() || host.starts_with(':') {
        return Err(invalid("has no host"));
    }
    Ok(())
}
