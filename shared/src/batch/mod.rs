//! Batching: ready jobs of one rule sent as one request to an API's batch endpoint, each job
//! keeping its own id, state and outcome.
//!
//! Why: an API with a tight limit and a batch endpoint takes a 2,000-contact edit as 20
//! requests of 100 rather than 2,000 requests; at 10 a second that is two seconds instead of
//! three minutes. The queue stays: a batch is one request of its budget (its windows count it
//! once, its concurrency holds one slot), and what the API counts per item is a resource of
//! the budget (`resources`), which every member's `cost` spends, so neither limit is passed.
//!
//! This module is the rule and the two translations, sans-IO and without the engine: which
//! jobs a rule takes ([`BatchRule::captures`]), the batch request's body from its items
//! ([`shapes::batch_body`]) and each item's answer from the batch's ([`shapes::split_answer`]).
//! The engine's `batching` groups ready jobs and applies each item's answer as the answer to
//! that job's own request.

pub mod shapes;

use serde::{Deserialize, Serialize};

use crate::json::{FromJson, ToJson};
use crate::scope::{Target, UrlText};
use crate::time::DurationMs;

/// How a batch endpoint takes its items and answers for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default, ToJson, FromJson)]
#[serde(rename_all = "kebab-case")]
pub enum BatchShape {
    /// A JSON array of the items' bodies, answered by an array of per-item results in the
    /// same order. A result that is an object with a numeric `status` is that item's status,
    /// and its `body` member (or, without one, the whole result) the item's body; any other
    /// result is the item's body with the batch's status.
    #[default]
    Array,
    /// Items under [`BatchRule::items_key`], each its body's members with the id from the
    /// job's URL in [`BatchRule::id_field`] (HubSpot's `POST .../batch/update` with
    /// `{"inputs": [{"id", "properties"}]}`); answered with results matched by that field under
    /// [`BatchRule::results_key`], and failures under [`BatchRule::errors_key`] naming their
    /// ids in `context.ids` or the id field (HubSpot answers 207 when some failed).
    Inputs,
    /// Whole sub-requests (Microsoft Graph's JSON batching, `$batch`):
    /// `{"requests": [{"id", "method", "url", "headers", "body"}]}` answered by
    /// `{"responses": [{"id", "status", "headers", "body"}]}`, a sub-request's own 429 and
    /// `Retry-After` inside a 200. Each `url` is relative to the endpoint's directory.
    Requests,
}

/// One batch endpoint of a budget (`batches`): which jobs it takes and how.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(default, rename_all = "camelCase")]
pub struct BatchRule {
    /// The method of the jobs it takes (`PATCH`), ASCII case ignored.
    pub method: String,
    /// The URL of the jobs it takes: a path (`/api/contacts/:id`), matched against the path of
    /// a job's URL, or an absolute URL; a `:name` segment matches any one segment. A job whose
    /// URL has a query is taken only by the `requests` shape, which can carry it.
    pub url: String,
    /// Where a batch goes: a path on the jobs' own origin, or an absolute URL (within what the
    /// worker script allows).
    pub endpoint: String,
    /// The batch request's method.
    pub endpoint_method: String,
    pub shape: BatchShape,
    /// The most items in one request (the API's own maximum: HubSpot and Graph say 100 and 20).
    pub max_items: u32,
    /// How long a ready job that is not interactive waits for companions before it goes in a
    /// batch of fewer than `max_items`. Interactive jobs never wait.
    pub linger_ms: DurationMs,
    /// `inputs`: the key the items go under.
    pub items_key: String,
    /// `inputs`: the field of each item that holds its id, and by which results are matched.
    pub id_field: String,
    /// `inputs`: the parameter of `url` whose value is an item's id.
    pub id_param: String,
    /// `inputs`: where the answer lists the items that succeeded.
    pub results_key: String,
    /// `inputs`: where the answer lists the items that failed.
    pub errors_key: String,
}

impl Default for BatchRule {
    fn default() -> Self {
        BatchRule {
            method: String::new(),
            url: String::new(),
            endpoint: String::new(),
            endpoint_method: "POST".into(),
            shape: BatchShape::Array,
            max_items: 100,
            linger_ms: 20,
            items_key: "inputs".into(),
            id_field: "id".into(),
            id_param: "id".into(),
            results_key: "results".into(),
            errors_key: "errors".into(),
        }
    }
}

/// Most items a rule may put in one request.
pub const MAX_BATCH_ITEMS: u32 = 1_000;
/// Longest a rule may let a job wait for companions.
pub const MAX_LINGER_MS: DurationMs = 10_000;

impl BatchRule {
    /// What is wrong with this rule, in words a person can act on; `None` when it can be used.
    pub fn problem(&self) -> Option<String> {
        if self.method.trim().is_empty() {
            return Some(
                "`method` is missing: the method of the jobs it takes, e.g. \"PATCH\"".into(),
            );
        }
        if self.url.trim().is_empty() {
            return Some(
                "`url` is missing: the URL of the jobs it takes, e.g. \"/api/contacts/:id\"".into(),
            );
        }
        if !self.url.starts_with('/') {
            if let Err(e) = Target::parse(&self.url) {
                return Some(format!("`url`: {e} (write a path, or an absolute URL)"));
            }
        }
        if self.endpoint.trim().is_empty() {
            return Some(
                "`endpoint` is missing: where a batch goes, e.g. \"/api/contacts/batch\"".into(),
            );
        }
        if !self.endpoint.starts_with('/') {
            if let Err(e) = Target::parse(&self.endpoint) {
                return Some(format!(
                    "`endpoint`: {e} (write a path, or an absolute URL)"
                ));
            }
        }
        if self.endpoint_method.trim().is_empty() {
            return Some("`endpointMethod` is empty".into());
        }
        if !(1..=MAX_BATCH_ITEMS).contains(&self.max_items) {
            return Some(format!(
                "`maxItems` is {}: it must be 1 to {MAX_BATCH_ITEMS}",
                self.max_items
            ));
        }
        if self.linger_ms > MAX_LINGER_MS {
            return Some(format!(
                "`lingerMs` is {}: at most {MAX_LINGER_MS} (a job waits that long for \
                 companions)",
                self.linger_ms
            ));
        }
        if self.shape == BatchShape::Inputs {
            let param = format!(":{}", self.id_param);
            if !self.url.split('/').any(|segment| segment == param) {
                return Some(format!(
                    "shape `inputs` puts each item's id from the URL in `{}`, but `url` '{}' \
                     has no segment '{param}' (`idParam`)",
                    self.id_field, self.url
                ));
            }
        }
        None
    }

    /// Whether a job of `method` to `url` is one this rule takes, with the values of its
    /// URL's `:name` segments; `None` when it is not.
    pub fn captures(&self, method: &str, url: &str) -> Option<Vec<(String, String)>> {
        if !method.eq_ignore_ascii_case(self.method.trim()) {
            return None;
        }
        if url.contains('?') && self.shape != BatchShape::Requests {
            return None;
        }
        let job = Target::parse(url).ok()?;
        let pattern_path = if self.url.starts_with('/') {
            self.url.as_str()
        } else {
            let pattern = Target::parse(&self.url).ok()?;
            if (pattern.scheme.as_str(), pattern.host.as_str(), pattern.port)
                != (job.scheme.as_str(), job.host.as_str(), job.port)
            {
                return None;
            }
            // The pattern's path as written, so its `:id` segments are kept.
            UrlText::split(&self.url)?.rest
        };
        let wanted: Vec<&str> = pattern_path.split('/').collect();
        let given: Vec<&str> = job.path.split('/').collect();
        if wanted.len() != given.len() {
            return None;
        }
        let mut captured = Vec::new();
        for (w, g) in wanted.iter().zip(&given) {
            match w.strip_prefix(':') {
                Some(name) if !g.is_empty() => captured.push((name.to_string(), g.to_string())),
                Some(_) => return None,
                None if w == g => {}
                None => return None,
            }
        }
        Some(captured)
    }

    /// The batch endpoint for jobs to `job_url`'s origin.
    pub fn endpoint_for(&self, job_url: &str) -> Option<String> {
        if !self.endpoint.starts_with('/') {
            return Some(self.endpoint.clone());
        }
        // Only a URL the worker can send to has a batch endpoint.
        Target::parse(job_url).ok()?;
        // The origin as the page wrote it (not `Target::origin`, which always writes the
        // port): the batch goes to the same origin, spelled the same way.
        let origin = UrlText::split(job_url)?.origin;
        Some(format!("{origin}{}", self.endpoint))
    }
}

#[cfg(test)]
mod tests;
