//! Configuration: budgets (what the remote API allows), lanes and retries.
//!
//! A budget is the unit of rate limiting: one per remote quota (`github:core`,
//! `hubspot:acct-17`), never one per queue, because the server counts every request against the
//! same quota whichever tab or queue sent it.

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::batch::BatchRule;
use crate::job::Lane;
use crate::json::{FromJson, ToJson};
use crate::scope::{Scope, Target};
use crate::time::DurationMs;

/// "At most `limit` starts in any `length_ms` window."
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    pub limit: u32,
    pub length_ms: DurationMs,
}

/// How the limiter counts; choose the one that mirrors the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default, ToJson, FromJson)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    /// Exact log of recent starts: no window placement ever sees more than the limit.
    #[default]
    SlidingLog,
    /// Burst up to the limit, refilled continuously.
    TokenBucket,
    /// Leaky-bucket meter (GCRA): evenly spaced starts with a burst tolerance of the limit.
    Gcra,
    /// Counter reset at fixed boundaries, aligned to the server's reported reset when known.
    FixedWindow,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(default, rename_all = "camelCase")]
pub struct BudgetConfig {
    pub name: String,
    /// All enforced together, e.g. 10 per second AND 5,000 per hour.
    pub windows: Vec<Window>,
    /// Most requests in flight at once.
    pub concurrency: u32,
    pub algorithm: Algorithm,
    /// URL prefixes this budget covers, for jobs that do not name a budget.
    pub match_prefixes: Vec<String>,
    /// Share of the limit to aim for, in (0, 1]: an extra stretch of every window, on top of the
    /// margin the budget measures from its round trips for the jitter between our start and
    /// the server's count (see `round_trips`). 1 (the default) leaves the timing to that
    /// measurement; lower it only to leave room for callers Sluice cannot see.
    pub target_utilization: f64,
    /// Spread starts evenly over the shortest window instead of allowing its whole limit as a
    /// burst (see `Limiter::set_pacing`): interactive jobs then start within one token interval.
    pub pacing: bool,
    /// The API counts CORS preflights (`OPTIONS`) against this budget's limit: each preflight
    /// the browser will send is counted as one more start (see `preflight`). Only a
    /// cross-origin API sees preflights; leave it off for one on the site's own origin.
    pub count_preflights: bool,
    /// How long the browser keeps a preflight's answer for one URL: the API's
    /// `Access-Control-Max-Age` (capped by the browser: Chromium 2 h), or 5 s when it sends
    /// none. Read only with `count_preflights`.
    pub preflight_max_age_ms: DurationMs,
    /// What this API says about limits only in an answer's JSON body: "this status and this
    /// value mean rate limited (or: too many at once), wait this long, the limit is this"
    /// (see `body_rules`). The first rule that matches decides.
    pub body_rules: Vec<BodyRule>,
    /// What else the API counts besides requests (tokens, points, items), each with its
    /// windows; a job spends its `cost` of each (see `resources`).
    pub resources: Vec<ResourceConfig>,
    /// Statuses that mean "these credentials were refused" (`401`, and a `403` an API uses so):
    /// the job is not failed, the budget waits for new credentials from a page
    /// (`setCredentials`) and sends it again with them. Empty: such answers fail as any 4xx.
    pub wait_for_credentials_on: Vec<u16>,
    /// The API's batch endpoints: jobs a rule takes go together, up to its `maxItems` in one
    /// request, each keeping its own outcome (see `batch`).
    pub batches: Vec<BatchRule>,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            windows: vec![],
            concurrency: 4,
            algorithm: Algorithm::SlidingLog,
            match_prefixes: vec![],
            target_utilization: 1.0,
            pacing: true,
            count_preflights: false,
            preflight_max_age_ms: crate::preflight::DEFAULT_PREFLIGHT_MAX_AGE_MS,
            body_rules: vec![],
            resources: vec![],
            wait_for_credentials_on: vec![401],
            batches: vec![],
        }
    }
}

/// One "this answer means it" rule of a budget (`bodyRules`); read by `body_rules`, which says
/// why such rules exist.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(default, rename_all = "camelCase")]
pub struct BodyRule {
    /// The statuses whose bodies this rule reads; empty: every status.
    pub status: Vec<u16>,
    /// Dot path of the value that says it: `error.code`, `errors.0.type` (or `errors[0].type`).
    pub path: String,
    /// The value at `path` that means it, compared with the value's text (`"ratelimited"`,
    /// `"429"`, `"true"`), ASCII case ignored. Absent: any value at `path` means it.
    pub equals: Option<String>,
    /// What a match means.
    pub means: BodyMeaning,
    /// Dot path of how long to wait, a number (or a numeric string) in `wait_unit`s.
    pub wait_path: Option<String>,
    pub wait_unit: WaitUnit,
    /// Dot path of the limit: a number of requests per `limit_window_ms`, or a text that says
    /// it in words ("100 requests per minute", "2 calls per second", "10/s").
    pub limit_path: Option<String>,
    /// The window a bare number at `limit_path` counts over.
    pub limit_window_ms: Option<DurationMs>,
}

/// What a body rule's match means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "kebab-case")]
pub enum BodyMeaning {
    /// Over the rate limit: paused and retried as a 429 is.
    #[default]
    RateLimited,
    /// Too many requests open at once: the in-flight cap is lowered for a while; the job is
    /// sent again without a pause and without spending an attempt.
    Concurrency,
}

/// The unit of a body's wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "kebab-case")]
pub enum WaitUnit {
    #[default]
    Seconds,
    Milliseconds,
}

/// One resource of a budget besides its requests (`budgets[].resources[]`): tokens, points,
/// items; metered by `resources`, which says how.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(default, rename_all = "camelCase")]
pub struct ResourceConfig {
    /// The unit, as the API's headers name it (`tokens`, `input-tokens`, `points`) and as
    /// jobs name it in `cost`.
    pub name: String,
    /// All enforced together, e.g. 90,000 per minute.
    pub windows: Vec<Window>,
    /// What a job that names no cost in this unit spends.
    pub default_cost: u64,
    /// Dot path, in a successful answer's JSON body, of what the job really spent
    /// (`usage.total_tokens`): it replaces the estimate.
    pub cost_path: Option<String>,
}

impl Default for ResourceConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            windows: vec![],
            default_cost: 1,
            cost_path: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(default, rename_all = "camelCase")]
pub struct RetryConfig {
    /// Attempts per job, the first included (429s are not counted).
    pub max_attempts: u32,
    pub base_delay_ms: DurationMs,
    pub max_delay_ms: DurationMs,
    /// Retries allowed per request, as a share (0.1: about one retry per ten requests).
    pub retry_ratio: f64,
    /// Retries always allowed however few requests there were.
    pub retry_reserve: f64,
    /// Pause after a 429 that names no time.
    pub default_pause_ms: DurationMs,
    /// Longest an attempt may take before it counts as a timeout (carried out by the worker).
    pub timeout_ms: DurationMs,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base_delay_ms: 500,
            max_delay_ms: 30_000,
            retry_ratio: 0.1,
            retry_reserve: 10.0,
            default_pause_ms: 1_000,
            timeout_ms: 15_000,
        }
    }
}

/// How long a job may wait in each lane before it is served as one lane higher.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(default, rename_all = "camelCase")]
pub struct AgingConfig {
    pub bulk_ms: DurationMs,
    pub background_ms: DurationMs,
}

impl Default for AgingConfig {
    fn default() -> Self {
        Self {
            bulk_ms: 10_000,
            background_ms: 30_000,
        }
    }
}

impl AgingConfig {
    /// How long a job of `lane` waits per lane it rises; interactive jobs are already on top.
    pub fn step(&self, lane: Lane) -> Option<DurationMs> {
        match lane {
            Lane::Interactive => None,
            Lane::Bulk => Some(self.bulk_ms.max(1)),
            Lane::Background => Some(self.background_ms.max(1)),
        }
    }

    /// How long until a job of `lane` ranks above any fresh interactive job: it rises one lane
    /// per step. From then on it takes one start in [`crate::engine::AGED_TURN_EVERY`] while
    /// fresh jobs compete, so it starts within this bound plus that many starts for itself and
    /// for each risen job ahead of it.
    pub fn bound(&self, lane: Lane) -> Option<DurationMs> {
        self.step(lane).map(|s| s * (lane.rank() as u64 + 1))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(default, rename_all = "camelCase")]
pub struct EngineConfig {
    pub budgets: Vec<BudgetConfig>,
    pub retry: RetryConfig,
    pub aging: AgingConfig,
    /// Done jobs are forgotten this long after they finished.
    pub retention_ms: DurationMs,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Where jobs may ever be sent: origins, or origins with a path prefix (see `scope`).
    /// Only the worker script's configuration sets it (the worker pins a page's to the
    /// script's); empty means the script's budgets' `matchPrefixes`.
    pub allow: Vec<String>,
    /// Clear a job's request headers (an `Authorization` among them) when it fails for
    /// good; its record, error and body stay until dismissed. A retry of it then goes
    /// without them. Done and cancelled jobs never keep theirs (see `Engine::finish`).
    pub drop_failed_headers: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            budgets: vec![],
            retry: RetryConfig::default(),
            aging: AgingConfig::default(),
            retention_ms: 3_600_000,
            max_body_bytes: 1 << 20,
            allow: vec![],
            drop_failed_headers: false,
        }
    }
}

/// A configuration that cannot work, with what to change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

impl BudgetConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError(m));
        if self.name.trim().is_empty() {
            return err("a budget needs a name".into());
        }
        if self.windows.is_empty() {
            return err(format!(
                "budget '{}' needs at least one window, e.g. {{limit: 10, lengthMs: 1000}}",
                self.name
            ));
        }
        for w in &self.windows {
            if w.limit == 0 || w.length_ms == 0 {
                return err(format!(
                    "budget '{}': a window needs a limit and a length above 0 (got {} per {} ms)",
                    self.name, w.limit, w.length_ms
                ));
            }
        }
        if self.concurrency == 0 {
            return err(format!(
                "budget '{}': concurrency must be at least 1",
                self.name
            ));
        }
        if !(self.target_utilization > 0.0 && self.target_utilization <= 1.0) {
            return err(format!(
                "budget '{}': targetUtilization must be in (0, 1], got {}",
                self.name,
                crate::json::display_f64(self.target_utilization)
            ));
        }
        if let Some(s) = self
            .wait_for_credentials_on
            .iter()
            .find(|s| !(400..500).contains(*s) || **s == 429)
        {
            return err(format!(
                "budget '{}': waitForCredentialsOn lists {s}, which is no refusal of credentials \
                 (use statuses 400-499 such as 401 and 403, but not 429)",
                self.name
            ));
        }
        for (i, rule) in self.body_rules.iter().enumerate() {
            if let Some(problem) = rule.problem() {
                return err(format!("budget '{}': bodyRules[{i}]: {problem}", self.name));
            }
        }
        for (i, rule) in self.batches.iter().enumerate() {
            if let Some(problem) = rule.problem() {
                return err(format!("budget '{}': batches[{i}]: {problem}", self.name));
            }
        }
        for (i, resource) in self.resources.iter().enumerate() {
            if let Some(problem) = resource.problem() {
                return err(format!("budget '{}': resources[{i}]: {problem}", self.name));
            }
            let name = resource.name.trim();
            if self.resources[..i]
                .iter()
                .any(|r| r.name.trim().eq_ignore_ascii_case(name))
            {
                return err(format!(
                    "budget '{}': resource '{name}' is defined twice",
                    self.name
                ));
            }
        }
        Ok(())
    }
}

impl EngineConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (i, b) in self.budgets.iter().enumerate() {
            b.validate()?;
            if self.budgets[..i]
                .iter()
                .any(|earlier| earlier.name == b.name)
            {
                return Err(ConfigError(format!("budget '{}' is defined twice", b.name)));
            }
        }
        if self.retry.max_attempts == 0 {
            return Err(ConfigError("retry.maxAttempts must be at least 1".into()));
        }
        let allowed = self.allowed_scopes()?;
        for b in &self.budgets {
            for prefix in &b.match_prefixes {
                let scope = Scope::parse(prefix)
                    .map_err(|e| ConfigError(format!("budget '{}': matchPrefixes: {e}", b.name)))?;
                if !allowed.iter().any(|a| a.contains(&scope)) {
                    return Err(ConfigError(format!(
                        "budget '{}': '{prefix}' is outside what the worker script allows \
                         ({}); a page can add budgets only inside it",
                        b.name,
                        self.allowed_list()
                    )));
                }
            }
        }
        Ok(())
    }

    /// What `allow` stands for: itself, or the budgets' prefixes when it is empty.
    pub fn effective_allow(&self) -> Vec<String> {
        if !self.allow.is_empty() {
            return self.allow.clone();
        }
        let mut all = Vec::new();
        for b in &self.budgets {
            for p in &b.match_prefixes {
                if !all.contains(p) {
                    all.push(p.clone());
                }
            }
        }
        all
    }

    /// The allowed scopes, each parsed; an entry that is no scope is a configuration error.
    pub fn allowed_scopes(&self) -> Result<Vec<Scope>, ConfigError> {
        let mut scopes = Vec::new();
        for entry in self.effective_allow() {
            scopes.push(Scope::parse(&entry).map_err(|e| ConfigError(format!("allow: {e}")))?);
        }
        Ok(scopes)
    }

    /// The allowed scopes as one line, for error messages.
    pub fn allowed_list(&self) -> String {
        let list = self.effective_allow();
        if list.is_empty() {
            return "nothing is allowed: the worker script names no budget prefixes and no \
                    allow list"
                .into();
        }
        // Pushed entry by entry: `join` would be the only copy of it in the worker's wasm.
        let mut text = String::new();
        for (i, entry) in list.iter().enumerate() {
            if i > 0 {
                text.push_str(", ");
            }
            text.push_str(entry);
        }
        text
    }

    /// The budget a URL falls under: the most specific matching prefix wins (prefixes are
    /// matched by origin and path segments, see `scope`).
    pub fn budget_for_url(&self, url: &Target) -> Option<&BudgetConfig> {
        let mut best: Option<(usize, &BudgetConfig)> = None;
        for b in &self.budgets {
            for p in &b.match_prefixes {
                let Ok(scope) = Scope::parse(p) else { continue };
                if scope.covers(url) && best.is_none_or(|(s, _)| scope.specificity() > s) {
                    best = Some((scope.specificity(), b));
                }
            }
        }
        best.map(|(_, b)| b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::testing::{reads_like_serde, same_as_serde};

    #[test]
    fn json_forms_match_serde() {
        let mut c = EngineConfig::default();
        same_as_serde(&c);
        c.budgets.push(BudgetConfig {
            name: "b".into(),
            windows: vec![Window {
                limit: 10,
                length_ms: 1_000,
            }],
            algorithm: Algorithm::Gcra,
            match_prefixes: vec!["/api/".into()],
            target_utilization: 0.9,
            ..BudgetConfig::default()
        });
        c.retry.retry_ratio = 0.25;
        same_as_serde(&c);
        for text in [
            r#"{}"#,
            r#"{"retentionMs":7,"retry":{"maxAttempts":5},"aging":{}}"#,
            r#"{"budgets":[{"name":"a","windows":[{"limit":1,"lengthMs":10}],"algorithm":"token-bucket","targetUtilization":1}]}"#,
            r#"{"budgets":[{"windows":[{"limit":1}]}]}"#,
            r#"{"budgets":[{"algorithm":"leaky"}]}"#,
            r#"{"retentionMs":"x"}"#,
            r#"{"retentionMs":-1}"#,
            r#"{"maxBodyBytes":1.5}"#,
            r#"{"budgets":5}"#,
            r#"{"retry":{"retryRatio":1}}"#,
        ] {
            reads_like_serde::<EngineConfig>(text);
        }
    }
}
