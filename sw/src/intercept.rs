//! Fetch interception: requests a page makes with plain `fetch()` that the worker takes off the
//! network path and queues as jobs, answering `202 Accepted` with the job's id at once.
//!
//! Routes are declared in the worker script (`SLUICE_CONFIG.intercept`):
//! `{ method: "POST", prefix: "/api/", header: "X-Sluice-Lane" }`
//! - `method`: one method (any case) or `"*"` for any;
//! - `prefix`: a URL prefix, relative to the worker's origin (`/api/`) or absolute
//!   (`https://api.example/v1/`);
//! - `header` (optional): the route applies only to requests that carry this header, so page
//!   code opts in per request and ordinary `fetch()` calls to the same API pass untouched.
//!
//! Navigations are never intercepted. A queued request becomes a job like any other: its
//! method, URL, headers (minus those a browser sets itself and Sluice's own) and body text;
//! the budget is the one covering the URL unless `X-Sluice-Budget` names one; the kind
//! follows the method (POST create, PATCH patch, DELETE delete, others custom) unless
//! `X-Sluice-Kind` says otherwise; `X-Sluice-Lane` (interactive, bulk, background),
//! `X-Sluice-Key` and `X-Sluice-Group` set lane, ordering key and group. Its `credentials`,
//! `mode`, `redirect`, `referrerPolicy` and `integrity` are kept ([`options_from_request`]),
//! so the request is replayed as the page made it, not with the browser's defaults.

use serde::{Deserialize, Serialize};
use sluice_shared::json::{self, FromJson, Json, ToJson};
use sluice_shared::protocol::ProtocolError;
use sluice_shared::request_options::RequestOptions;
use sluice_shared::resources::Costs;
use sluice_shared::{JobKind, JobSpec, JobState, Lane};

use crate::prefix::resolve_prefix;

/// A route as written in the worker script.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteConfig {
    #[serde(default = "any_method")]
    pub method: String,
    pub prefix: String,
    #[serde(default)]
    pub header: Option<String>,
}

fn any_method() -> String {
    "*".into()
}

/// The keys [`RouteConfig`]'s reader below knows (for the strict check of the worker script's
/// configuration, `crate::config_check`).
impl json::StructFields for RouteConfig {
    const FIELDS: &'static [&'static str] = &["method", "prefix", "header"];
}

impl FromJson for RouteConfig {
    fn from_json(v: &Json) -> Result<Self, json::Error> {
        let mut r = json::Fields::of(v, "struct RouteConfig");
        let route = Self {
            method: r.field_or("method", any_method()),
            prefix: r.field("prefix"),
            header: r.field("header"),
        };
        r.finish()?;
        Ok(route)
    }

    fn placeholder() -> Self {
        Self {
            method: String::new(),
            prefix: String::new(),
            header: None,
        }
    }
}

/// A route ready for matching: method upper-cased, prefix absolute, header lower-cased.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// `None` matches any method.
    pub method: Option<String>,
    pub prefix: String,
    pub header: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Routes(Vec<Route>);

impl Routes {
    /// Resolves the script's routes against the worker's origin. Unusable routes (an empty
    /// prefix would take over every request) are left out and described in the warnings.
    pub fn new(configs: &[RouteConfig], origin: &str) -> (Self, Vec<String>) {
        let mut routes = Vec::new();
        let mut warnings = Vec::new();
        for c in configs {
            let method = c.method.trim();
            if c.prefix.trim().is_empty() {
                warnings.push(format!(
                    "intercept route for {method} has an empty prefix and was ignored"
                ));
                continue;
            }
            if method != "*" && (method.is_empty() || !method.bytes().all(is_token_byte)) {
                warnings.push(format!(
                    "intercept route '{method}' is not an HTTP method and was ignored"
                ));
                continue;
            }
            routes.push(Route {
                method: (method != "*").then(|| method.to_ascii_uppercase()),
                prefix: resolve_prefix(c.prefix.trim(), origin),
                header: c
                    .header
                    .as_deref()
                    .map(str::trim)
                    .filter(|h| !h.is_empty())
                    .map(str::to_ascii_lowercase),
            });
        }
        (Self(routes), warnings)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn routes(&self) -> &[Route] {
        &self.0
    }

    /// Whether a request goes to the queue. `has_header` answers for a lower-case name.
    pub fn matches(
        &self,
        method: &str,
        url: &str,
        navigation: bool,
        has_header: impl Fn(&str) -> bool,
    ) -> bool {
        if navigation {
            return false;
        }
        self.0.iter().any(|r| {
            r.method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method))
                && url.starts_with(&r.prefix)
                && r.header.as_deref().is_none_or(&has_header)
        })
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Headers a page cannot set (the browser controls them) or that describe this hop only; they
/// are not copied into the job. `X-Sluice-*` headers are instructions to the worker.
pub fn is_dropped_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    const FORBIDDEN: [&str; 21] = [
        "accept-charset",
        "accept-encoding",
        "access-control-request-headers",
        "access-control-request-method",
        "connection",
        "content-length",
        "cookie",
        "cookie2",
        "date",
        "dnt",
        "expect",
        "host",
        "keep-alive",
        "origin",
        "referer",
        "set-cookie",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "via",
    ];
    FORBIDDEN.contains(&n.as_str())
        || n.starts_with("proxy-")
        || n.starts_with("sec-")
        || n.starts_with("x-sluice-")
}

pub fn kind_for_method(method: &str) -> JobKind {
    match method.to_ascii_uppercase().as_str() {
        "POST" => JobKind::Create,
        "PATCH" => JobKind::Patch,
        "DELETE" => JobKind::Delete,
        _ => JobKind::Custom,
    }
}

/// Builds the job for an intercepted request. `headers` are as the request carries them.
pub fn spec_from_request(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: Option<String>,
    options: RequestOptions,
) -> Result<JobSpec, ProtocolError> {
    let get = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let lane = match get("x-sluice-lane") {
        None => Lane::default(),
        Some(v) => parse_lane(&v).ok_or_else(|| ProtocolError::InvalidRequest {
            message: format!(
                "X-Sluice-Lane '{v}' is not a lane; use interactive, bulk or background"
            ),
        })?,
    };
    let kind = match get("x-sluice-kind") {
        None => kind_for_method(method),
        Some(v) => parse_kind(&v).ok_or_else(|| ProtocolError::InvalidRequest {
            message: format!(
                "X-Sluice-Kind '{v}' is not a kind; use create, patch, delete or custom"
            ),
        })?,
    };
    let cost = match get("x-sluice-cost") {
        None => Costs::default(),
        Some(v) => Costs::from_header(&v).map_err(|e| ProtocolError::InvalidRequest {
            message: format!("X-Sluice-Cost '{v}': {e}"),
        })?,
    };
    let is_bodyless = matches!(method.to_ascii_uppercase().as_str(), "GET" | "HEAD");
    // A loop, not a filtered `collect`: that is several generic functions in the wasm.
    let mut kept = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        if !is_dropped_header(name) {
            kept.push((name.clone(), value.clone()));
        }
    }
    Ok(JobSpec {
        id: None,
        budget: get("x-sluice-budget").unwrap_or_default(),
        lane,
        key: get("x-sluice-key"),
        kind,
        method: method.to_string(),
        url: url.to_string(),
        headers: kept,
        body: if is_bodyless { None } else { body },
        group_id: get("x-sluice-group"),
        options: Some(options),
        cost,
        if_match_from_key: false,
        after: Vec::new(),
    })
}

/// The request's `RequestInit` members as the job keeps them, read by name from the
/// browser's `Request` (`member("credentials")`...). The browser's defaults are left out, so
/// most jobs store nothing; any other value is kept as is and checked at enqueue.
pub fn options_from_request(member: impl Fn(&str) -> Option<String>) -> RequestOptions {
    let unless = |name: &str, default: &str| member(name).filter(|v| v != default);
    RequestOptions {
        credentials: unless("credentials", "same-origin"),
        mode: unless("mode", "cors"),
        redirect: unless("redirect", "follow"),
        referrer_policy: unless("referrerPolicy", ""),
        integrity: unless("integrity", ""),
    }
}

fn parse_lane(v: &str) -> Option<Lane> {
    Lane::ALL
        .into_iter()
        .find(|l| l.name().eq_ignore_ascii_case(v))
}

fn parse_kind(v: &str) -> Option<JobKind> {
    match v.to_ascii_lowercase().as_str() {
        "create" => Some(JobKind::Create),
        "patch" => Some(JobKind::Patch),
        "delete" => Some(JobKind::Delete),
        "custom" => Some(JobKind::Custom),
        _ => None,
    }
}

/// The `202 Accepted` body for a queued request. Only `json` writes it: its `#[serde]`
/// attribute is read by that derive alone.
#[derive(ToJson)]
#[serde(rename_all = "camelCase")]
struct Accepted<'a> {
    job_id: &'a str,
    coalesced: bool,
    state: JobState,
}

pub fn accepted_body(job_id: &str, coalesced: bool, state: JobState) -> String {
    json::to_string(&Accepted {
        job_id,
        coalesced,
        state,
    })
}

/// The status and JSON body answering an intercepted request that could not be queued:
/// `{"error": <ProtocolError>, "message": <its text>}`.
pub fn error_response(error: &ProtocolError) -> (u16, String) {
    let status = match error {
        ProtocolError::TooLarge { .. } => 413,
        ProtocolError::Storage { .. } | ProtocolError::Unavailable { .. } => 503,
        _ => 400,
    };
    let mut body = String::from("{\"error\":");
    json::ToJson::write_json(error, &mut body);
    json::write_field(&mut body, "message", &error.to_string());
    body.push('}');
    (status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &str = "http://127.0.0.1:8123";

    fn routes(json: &str) -> Routes {
        let configs: Vec<RouteConfig> = json::from_str(json).unwrap();
        assert_eq!(
            configs,
            serde_json::from_str::<Vec<RouteConfig>>(json).unwrap()
        );
        let (routes, warnings) = Routes::new(&configs, ORIGIN);
        assert!(warnings.is_empty(), "{warnings:?}");
        routes
    }

    fn no_headers(_: &str) -> bool {
        false
    }

    #[test]
    fn matches_method_and_same_origin_prefix() {
        let r = routes(r#"[{"method": "post", "prefix": "/api/"}]"#);
        assert!(r.matches(
            "POST",
            "http://127.0.0.1:8123/api/contacts",
            false,
            no_headers
        ));
        assert!(!r.matches(
            "GET",
            "http://127.0.0.1:8123/api/contacts",
            false,
            no_headers
        ));
        assert!(!r.matches("POST", "http://127.0.0.1:8123/apix", false, no_headers));
        assert!(!r.matches("POST", "http://127.0.0.1:9999/api/x", false, no_headers));
        assert!(!r.matches("POST", "http://127.0.0.1:8123/api/x", true, no_headers));
    }

    #[test]
    fn matches_absolute_prefix_and_any_method() {
        let r = routes(r#"[{"method": "*", "prefix": "https://api.example/v1/"}]"#);
        assert!(r.matches("DELETE", "https://api.example/v1/x/1", false, no_headers));
        assert!(r.matches("GET", "https://api.example/v1/", false, no_headers));
        assert!(!r.matches("GET", "https://api.example/v2/", false, no_headers));
        let r = routes(r#"[{"prefix": "/q/"}]"#);
        assert!(r.matches("PUT", "http://127.0.0.1:8123/q/1", false, no_headers));
    }

    #[test]
    fn header_condition_lets_pages_opt_in() {
        let r = routes(r#"[{"method": "POST", "prefix": "/api/", "header": "X-Sluice-Lane"}]"#);
        let url = "http://127.0.0.1:8123/api/contacts";
        assert!(!r.matches("POST", url, false, no_headers));
        assert!(r.matches("POST", url, false, |h| h == "x-sluice-lane"));
    }

    #[test]
    fn unusable_routes_are_reported_not_used() {
        let configs: Vec<RouteConfig> = serde_json::from_str(
            r#"[{"method": "POST", "prefix": ""}, {"method": "PO ST", "prefix": "/a"}]"#,
        )
        .unwrap();
        let (r, warnings) = Routes::new(&configs, ORIGIN);
        assert!(r.is_empty());
        assert_eq!(warnings.len(), 2);
    }

    #[test]
    fn builds_a_job_from_a_request() {
        let headers = vec![
            ("content-type".to_string(), "application/json".to_string()),
            ("x-sluice-lane".to_string(), "Interactive".to_string()),
            ("x-sluice-key".to_string(), "contact:7".to_string()),
            ("cookie".to_string(), "a=b".to_string()),
            ("sec-fetch-mode".to_string(), "cors".to_string()),
        ];
        let spec = spec_from_request(
            "PATCH",
            "http://127.0.0.1:8123/api/contacts/7",
            &headers,
            Some("{\"name\":\"x\"}".into()),
            RequestOptions {
                credentials: Some("omit".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            spec.options.and_then(|o| o.credentials).as_deref(),
            Some("omit")
        );
        assert_eq!(spec.kind, JobKind::Patch);
        assert_eq!(spec.lane, Lane::Interactive);
        assert_eq!(spec.key.as_deref(), Some("contact:7"));
        assert_eq!(spec.budget, "", "left to the URL match");
        assert_eq!(
            spec.headers,
            vec![("content-type".to_string(), "application/json".to_string())]
        );
        assert_eq!(spec.body.as_deref(), Some("{\"name\":\"x\"}"));
    }

    #[test]
    fn a_request_keeps_what_differs_from_the_browser_defaults() {
        let page_made = |name: &str| {
            Some(
                match name {
                    "credentials" => "omit",
                    "mode" => "cors",
                    "redirect" => "error",
                    "referrerPolicy" => "no-referrer",
                    "integrity" => "",
                    _ => "unexpected",
                }
                .to_string(),
            )
        };
        assert_eq!(
            options_from_request(page_made),
            RequestOptions {
                credentials: Some("omit".into()),
                mode: None,
                redirect: Some("error".into()),
                referrer_policy: Some("no-referrer".into()),
                integrity: None,
            }
        );
        let defaults = |name: &str| {
            Some(
                match name {
                    "credentials" => "same-origin",
                    "mode" => "cors",
                    "redirect" => "follow",
                    _ => "",
                }
                .to_string(),
            )
        };
        assert!(options_from_request(defaults).is_default());
        assert!(options_from_request(|_| None).is_default());
    }

    #[test]
    fn kinds_follow_methods_unless_told() {
        assert_eq!(kind_for_method("post"), JobKind::Create);
        assert_eq!(kind_for_method("DELETE"), JobKind::Delete);
        assert_eq!(kind_for_method("PUT"), JobKind::Custom);
        let h = vec![("X-Sluice-Kind".to_string(), "custom".to_string())];
        let spec =
            spec_from_request("POST", "http://h/api", &h, None, RequestOptions::default()).unwrap();
        assert_eq!(spec.kind, JobKind::Custom);
    }

    #[test]
    fn bad_instructions_are_refused() {
        let h = vec![("x-sluice-lane".to_string(), "urgent".to_string())];
        let e = spec_from_request("POST", "http://h/api", &h, None, RequestOptions::default())
            .unwrap_err();
        assert!(
            e.to_string().contains("interactive, bulk or background"),
            "{e}"
        );
    }

    #[test]
    fn get_requests_carry_no_body() {
        let spec = spec_from_request(
            "GET",
            "http://h/api",
            &[],
            Some(String::new()),
            RequestOptions::default(),
        )
        .unwrap();
        assert_eq!(spec.body, None);
    }

    #[test]
    fn responses_are_json() {
        let body = accepted_body("j1", false, JobState::Queued);
        assert_eq!(body, r#"{"jobId":"j1","coalesced":false,"state":"queued"}"#);
        let error = ProtocolError::Storage {
            message: "x\"y".into(),
        };
        let (status, body) = error_response(&error);
        assert_eq!(status, 503);
        assert_eq!(
            body,
            serde_json::json!({ "error": error, "message": error.to_string() }).to_string()
        );
        assert!(body.contains("\"code\":\"storage\""), "{body}");
        let (status, _) = error_response(&ProtocolError::NoBudgetForUrl { url: "u".into() });
        assert_eq!(status, 400);
    }
}
