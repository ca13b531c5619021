//! The demo API's settings (`ApiConfig`, changed at run time by a `ConfigPatch`) and the
//! responses a test can script ahead of the limiter (`ScriptedResponse`).

use std::collections::BTreeMap;

use axum::http::{HeaderName, HeaderValue, Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a 429's `Retry-After` is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RetryAfterForm {
    /// Whole seconds, rounded up.
    #[default]
    Delta,
    /// An HTTP-date, rounded up to the next whole second.
    Date,
}

/// Which rate-limit headers every `/api/` response carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum HeaderMode {
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (delta seconds).
    #[default]
    Xrate,
    /// `RateLimit-Policy: "default";q=N;w=S` and `RateLimit: "default";r=N;t=S`.
    Ietf,
    Both,
    None,
}

/// The server's behaviour; changeable at run time through [`ApiHandle::update_config`] or
/// `POST /__sluice/config`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApiConfig {
    /// Admitted arrivals allowed per window.
    pub limit: u32,
    pub window_ms: u64,
    pub latency_ms: u64,
    /// Latency varies uniformly within `latency_ms ± jitter_ms` (never below zero).
    pub jitter_ms: u64,
    /// Each `/api/` request is held a uniform 0..=`arrival_jitter_ms` ms before it arrives (is
    /// counted against the limit and applied), as a network delays the way there; 0 is off.
    pub arrival_jitter_ms: u64,
    /// Share (0..=1) of admitted requests answered 500 or 503 without being applied.
    pub fault_rate: f64,
    /// Share (0..=1) of admitted requests that are applied but answered only after `hang_ms`.
    pub hang_rate: f64,
    pub hang_ms: u64,
    pub retry_after_form: RetryAfterForm,
    pub headers: HeaderMode,
    /// Whether rejected arrivals also enter the sliding window (a punitive server).
    pub count_rejected: bool,
    /// Seed for arrival and latency jitter and fault rolls; `None` seeds from the clock.
    pub seed: Option<u64>,
    /// When set, `/api/` answers 401 (not counted, not applied) to any request whose
    /// `Authorization` is not `Bearer <this>`: a token that expires when a test changes it.
    pub bearer: Option<String>,
    /// Share (0..=1) of batch items (any shape) answered 503 "temporarily unavailable" inside
    /// the batch's answer and not applied, rolled per item after the batch was admitted.
    pub batch_item_fail_rate: f64,
    /// The next N `$batch` sub-requests are answered 429 with `Retry-After: 1` inside the
    /// batch's 200 and not applied. Spent one by one (the config shows what is left); `reset`
    /// sets it back to 0.
    pub batch_sub_rate_limited: u32,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            limit: 10,
            window_ms: 1000,
            latency_ms: 300,
            jitter_ms: 0,
            arrival_jitter_ms: 0,
            fault_rate: 0.0,
            hang_rate: 0.0,
            hang_ms: 120_000,
            retry_after_form: RetryAfterForm::Delta,
            headers: HeaderMode::Xrate,
            count_rejected: false,
            seed: None,
            bearer: None,
            batch_item_fail_rate: 0.0,
            batch_sub_rate_limited: 0,
        }
    }
}

impl ApiConfig {
    /// Defaults without latency, for tests that want fast answers.
    pub fn instant() -> Self {
        Self {
            latency_ms: 0,
            ..Self::default()
        }
    }

    pub fn validate(&self) -> Result<(), ApiConfigError> {
        if self.window_ms == 0 {
            return Err(ApiConfigError::ZeroWindow);
        }
        for (field, rate) in [
            ("faultRate", self.fault_rate),
            ("hangRate", self.hang_rate),
            ("batchItemFailRate", self.batch_item_fail_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(ApiConfigError::RateOutOfRange { field, value: rate });
            }
        }
        Ok(())
    }
}

/// A partial [`ApiConfig`]: fields left out keep their value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ConfigPatch {
    pub limit: Option<u32>,
    pub window_ms: Option<u64>,
    pub latency_ms: Option<u64>,
    pub jitter_ms: Option<u64>,
    pub arrival_jitter_ms: Option<u64>,
    pub fault_rate: Option<f64>,
    pub hang_rate: Option<f64>,
    pub hang_ms: Option<u64>,
    pub retry_after_form: Option<RetryAfterForm>,
    pub headers: Option<HeaderMode>,
    pub count_rejected: Option<bool>,
    pub seed: Option<u64>,
    /// The token `/api/` accepts from now on; an empty one accepts any request again.
    pub bearer: Option<String>,
    pub batch_item_fail_rate: Option<f64>,
    /// Replaces the count of `$batch` sub-requests still to be answered 429.
    pub batch_sub_rate_limited: Option<u32>,
}

impl ConfigPatch {
    pub fn apply_to(&self, c: &mut ApiConfig) {
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { c.$f = v; } )* };
        }
        set!(
            limit,
            window_ms,
            latency_ms,
            jitter_ms,
            arrival_jitter_ms,
            fault_rate,
            hang_rate,
            hang_ms,
            retry_after_form,
            headers,
            count_rejected,
            batch_item_fail_rate,
            batch_sub_rate_limited
        );
        if self.seed.is_some() {
            c.seed = self.seed;
        }
        if let Some(token) = &self.bearer {
            c.bearer = (!token.is_empty()).then(|| token.clone());
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiConfigError {
    #[error("windowMs must be positive")]
    ZeroWindow,
    #[error("{field} must be between 0 and 1, got {value}")]
    RateOutOfRange { field: &'static str, value: f64 },
}

/// A response staged for the next matching request under `/api/`.
///
/// With `status`, the entry decides alone: the limiter is bypassed, the response carries only
/// the scripted headers (no computed rate-limit headers), and the request is applied only if
/// `apply` is true. A scripted 429 is not counted by the limiter; any other scripted status is.
/// Without `status`, the request is handled normally (limiter included, random faults skipped)
/// and the scripted headers replace or add to the computed ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ScriptedResponse {
    /// Only requests with this method take the entry (any method if absent).
    pub method: Option<String>,
    /// Only requests whose path starts with this take the entry (any path if absent).
    pub path: Option<String>,
    pub status: Option<u16>,
    pub headers: BTreeMap<String, String>,
    /// Response body for a scripted status (a small JSON note if absent).
    pub body: Option<Value>,
    /// With `status`: apply the request anyway (for "applied, but answered with an error").
    pub apply: Option<bool>,
    /// Apply the request, then hold the response back for `hang_ms`.
    pub apply_then_hang: bool,
    pub hang_ms: Option<u64>,
    /// Replaces the configured latency for this response.
    pub delay_ms: Option<u64>,
}

impl ScriptedResponse {
    /// A response with this status that decides alone (see the type's docs).
    pub fn status(status: u16) -> Self {
        Self {
            status: Some(status),
            ..Self::default()
        }
    }

    /// A normally handled request that is applied and then not answered for `hang_ms`
    /// (configured `hangMs` if `None`).
    pub fn apply_then_hang(hang_ms: Option<u64>) -> Self {
        Self {
            apply_then_hang: true,
            hang_ms,
            ..Self::default()
        }
    }

    /// A normally handled request whose response gets these headers.
    pub fn headers<K: Into<String>, V: Into<String>>(
        headers: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self::default().with_headers(headers)
    }

    pub fn with_headers<K: Into<String>, V: Into<String>>(
        mut self,
        headers: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.headers
            .extend(headers.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    pub fn with_header(self, name: &str, value: &str) -> Self {
        self.with_headers([(name, value)])
    }

    pub fn for_request(mut self, method: Option<&str>, path_prefix: Option<&str>) -> Self {
        self.method = method.map(str::to_owned);
        self.path = path_prefix.map(str::to_owned);
        self
    }

    pub fn validate(&self) -> Result<(), ScriptError> {
        if let Some(s) = self.status {
            StatusCode::from_u16(s).map_err(|_| ScriptError::Status(s))?;
        }
        if let Some(m) = &self.method {
            Method::from_bytes(m.as_bytes()).map_err(|_| ScriptError::Method(m.clone()))?;
        }
        for (k, v) in &self.headers {
            HeaderName::from_bytes(k.as_bytes()).map_err(|_| ScriptError::Header(k.clone()))?;
            HeaderValue::from_str(v).map_err(|_| ScriptError::Header(k.clone()))?;
        }
        Ok(())
    }

    pub(super) fn matches(&self, method: &Method, path: &str) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method.as_str()))
            && self.path.as_deref().is_none_or(|p| path.starts_with(p))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("invalid status {0}")]
    Status(u16),
    #[error("invalid method {0:?}")]
    Method(String),
    #[error("invalid header {0:?}")]
    Header(String),
}
