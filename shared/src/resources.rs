//! Budgets of several resources: a quota of requests and, beside it, of tokens, points or
//! items, each with its windows, where every job spends its own amount.
//!
//! AI APIs limit requests and tokens a minute together; CRMs count points; batch endpoints
//! count items. A budget's `resources` name each such unit with its windows; a job carries its
//! estimated `cost` in them at enqueue (`cost: {tokens: 1200}`), and a job that names none
//! spends the resource's `defaultCost`. A job starts only when the request windows *and* every
//! resource have room for it. Afterwards the answer corrects the count: a configured JSON path
//! in its body says what the job really spent (`usage.total_tokens`), and the headers of the
//! families that report one quota per resource (`x-ratelimit-remaining-tokens`,
//! `anthropic-ratelimit-tokens-remaining`) say what the server has left, which the log takes as
//! spent until the server's reset when it is less than ours says (others spend it too, or our
//! estimates were low).
//!
//! Each resource meters with a [`WeightedLog`] (see there why not the request algorithms).

use serde::{Deserialize, Serialize};

use crate::body_rules::read_number_at;
use crate::config::{ResourceConfig, Window};
use crate::headers::Quota;
use crate::json::{FromJson, ToJson};
use crate::limiter::WeightedLog;
use crate::time::{DurationMs, Millis};

impl ResourceConfig {
    /// Why this resource cannot be used, for the configuration check.
    pub fn problem(&self) -> Option<String> {
        let name = self.name.trim();
        if name.is_empty() {
            return Some("a resource needs a name, e.g. 'tokens'".into());
        }
        if name.eq_ignore_ascii_case("requests") {
            return Some(
                "'requests' is what the budget's own windows count; name the other unit \
                 ('tokens', 'points')"
                    .into(),
            );
        }
        if self.windows.is_empty() {
            return Some(format!(
                "resource '{name}' needs at least one window, e.g. {{limit: 90000, lengthMs: 60000}}"
            ));
        }
        if let Some(w) = self
            .windows
            .iter()
            .find(|w| w.limit == 0 || w.length_ms == 0)
        {
            return Some(format!(
                "resource '{name}': a window needs a limit and a length above 0 (got {} per {} ms)",
                w.limit, w.length_ms
            ));
        }
        if let Some(path) = &self.cost_path {
            if let Err(e) = crate::body_rules::check_path(path) {
                return Some(format!("resource '{name}': `costPath` '{path}': {e}"));
            }
        }
        None
    }
}

/// What a job spends of each resource: `{"tokens": 1200}` on the wire and in a page's job.
/// Kept as a list sorted by name, one entry a name: a job names one or two resources, and a
/// `BTreeMap` cost the page client 2-3 KB of wasm for that.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Costs(Vec<(String, u64)>);

impl Costs {
    /// From `(resource, amount)` pairs; a name given twice keeps its last amount.
    pub fn new(pairs: impl IntoIterator<Item = (String, u64)>) -> Self {
        let mut costs = Costs::default();
        for (name, amount) in pairs {
            costs.set(name, amount);
        }
        costs
    }

    fn set(&mut self, name: String, amount: u64) {
        match self.0.binary_search_by(|(n, _)| n.as_str().cmp(&name)) {
            Ok(i) => self.0[i].1 = amount,
            Err(i) => self.0.insert(i, (name, amount)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// What this job spends of `resource`: its own figure, else the resource's default.
    pub fn of(&self, resource: &ResourceConfig) -> u64 {
        self.0
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(&resource.name))
            .map_or(resource.default_cost, |(_, n)| *n)
    }

    /// `tokens=1200, points=3`: how an intercepted `fetch` says its cost (`X-Sluice-Cost`).
    pub fn from_header(value: &str) -> Result<Costs, String> {
        let mut costs = Costs::default();
        for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, amount) = part
                .split_once('=')
                .ok_or_else(|| format!("'{part}' needs the form name=amount, e.g. tokens=1200"))?;
            let amount = amount.trim().parse::<u64>().map_err(|_| {
                format!(
                    "the amount of '{}' must be a whole number, not '{}'",
                    name.trim(),
                    amount.trim()
                )
            })?;
            costs.set(name.trim().to_string(), amount);
        }
        Ok(costs)
    }
}

impl ToJson for Costs {
    fn write_json(&self, out: &mut String) {
        out.push('{');
        for (i, (name, n)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            crate::json::write_str(out, name);
            out.push(':');
            n.write_json(out);
        }
        out.push('}');
    }
}

impl FromJson for Costs {
    fn from_json(v: &crate::json::Json) -> Result<Self, crate::json::Error> {
        let members = crate::json::members(v, "a map of resource names to amounts")?;
        let mut costs = Costs::default();
        for (name, n) in members {
            costs.set(name.to_string(), u64::from_json(n)?);
        }
        Ok(costs)
    }

    fn placeholder() -> Self {
        Costs::default()
    }
}

impl Serialize for Costs {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, n) in &self.0 {
            map.serialize_entry(name, n)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Costs {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<String, u64>::deserialize(deserializer)?;
        Ok(Costs::new(map))
    }
}

/// One resource's state: its windows (the configured ones, narrowed by what the server
/// reported) and what was started. Saved with its budget.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct ResourceState {
    pub name: String,
    pub windows: Vec<Window>,
    pub log: WeightedLog,
}

/// What the status says of one resource.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToJson, FromJson)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    pub name: String,
    /// The tightest window's limit and length.
    pub limit: u64,
    pub window_ms: DurationMs,
    /// Spent in that window up to now.
    pub used: u64,
    pub remaining: u64,
    /// When that window is empty again (now when nothing is spent).
    pub frees_at: Millis,
}

impl ResourceState {
    fn new(config: &ResourceConfig) -> Self {
        ResourceState {
            name: config.name.trim().to_string(),
            windows: config.windows.clone(),
            log: WeightedLog::default(),
        }
    }

    fn longest(&self) -> DurationMs {
        self.windows.iter().map(|w| w.length_ms).max().unwrap_or(0)
    }

    /// The server reported this resource's quota: a smaller limit than ours over a window of
    /// the same length is adopted, and what it has left, when less than our count says, is
    /// taken as spent until its reset.
    fn apply_quota(&mut self, quota: &Quota, now: Millis) {
        if let (Some(limit), Some(length)) = (quota.limit, quota.window_ms) {
            if let Some(w) = self.windows.iter_mut().find(|w| w.length_ms == length) {
                w.limit = w.limit.min(u32::try_from(limit).unwrap_or(u32::MAX)).max(1);
            }
        }
        let (Some(remaining), Some(window)) = (quota.remaining, self.tightest()) else {
            return;
        };
        let limit = quota.limit.unwrap_or(u64::from(window.limit));
        let server_used = limit.saturating_sub(remaining);
        let ours = self.log.used_within(now, window.length_ms);
        if server_used > ours {
            // Placed so that it leaves the window when the server's count resets (at once if
            // it named no reset: then it stays a whole window, the careful side).
            let leaves_after = quota.reset_after_ms.unwrap_or(window.length_ms);
            let at = now
                .saturating_add(leaves_after.min(window.length_ms))
                .saturating_sub(window.length_ms);
            self.log.insert(at, server_used - ours);
        }
    }

    /// The window with the least room per millisecond.
    fn tightest(&self) -> Option<Window> {
        self.windows.iter().copied().min_by(|a, b| {
            let ra = u128::from(a.limit) * u128::from(b.length_ms);
            let rb = u128::from(b.limit) * u128::from(a.length_ms);
            ra.cmp(&rb)
        })
    }

    fn status(&self, now: Millis) -> Option<ResourceStatus> {
        // The window closest to full, as a share of its limit.
        let (w, used) = self
            .windows
            .iter()
            .map(|w| (*w, self.log.used_within(now, w.length_ms)))
            .max_by(|(a, ua), (b, ub)| {
                (u128::from(*ua) * u128::from(b.limit))
                    .cmp(&(u128::from(*ub) * u128::from(a.limit)))
            })?;
        Some(ResourceStatus {
            name: self.name.clone(),
            limit: u64::from(w.limit),
            window_ms: w.length_ms,
            used,
            remaining: u64::from(w.limit).saturating_sub(used),
            frees_at: if used == 0 {
                now
            } else {
                self.log.empty_at(now, w.length_ms)
            },
        })
    }
}

/// Every resource of one budget (none for a budget of requests alone). Saved as the list.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Resources(pub Vec<ResourceState>);

impl ToJson for Resources {
    fn write_json(&self, out: &mut String) {
        self.0.write_json(out);
    }
}

impl FromJson for Resources {
    fn from_json(v: &crate::json::Json) -> Result<Self, crate::json::Error> {
        Vec::from_json(v).map(Resources)
    }

    fn placeholder() -> Self {
        Resources::default()
    }
}

impl Resources {
    /// A budget's resources as configured, nothing spent yet.
    pub fn configured(configs: &[ResourceConfig]) -> Self {
        let mut fresh = Resources::default();
        fresh.reconfigure(configs);
        fresh
    }

    /// Adopts a budget's configured resources: ones kept by name keep what they logged (and
    /// the windows the server taught them, where no longer than configured), new ones start
    /// empty, dropped ones go.
    pub fn reconfigure(&mut self, configs: &[ResourceConfig]) {
        let old = std::mem::take(&mut self.0);
        for config in configs {
            let mut fresh = ResourceState::new(config);
            if let Some(kept) = old.iter().find(|r| r.name == fresh.name) {
                fresh.log = kept.log.clone();
                for w in &mut fresh.windows {
                    if let Some(learned) = kept.windows.iter().find(|k| k.length_ms == w.length_ms)
                    {
                        w.limit = w.limit.min(learned.limit);
                    }
                }
            }
            self.0.push(fresh);
        }
    }

    /// The earliest instant, `now` or later, at which a job costing `costs` fits every
    /// resource (windows stretched by `margin`).
    pub fn room_at(
        &self,
        configs: &[ResourceConfig],
        costs: &Costs,
        margin: DurationMs,
        now: Millis,
    ) -> Millis {
        self.0
            .iter()
            .zip(configs)
            .map(|(r, c)| r.log.earliest(&r.windows, costs.of(c), margin, now))
            .max()
            .unwrap_or(now)
    }

    /// A job costing `costs` started at `at`.
    pub fn record(&mut self, configs: &[ResourceConfig], costs: &Costs, at: Millis) {
        for (r, c) in self.0.iter_mut().zip(configs) {
            r.log.forget_before(at, r.longest().saturating_mul(2));
            r.log.record(at, costs.of(c));
        }
    }

    /// Up to `n` starts whose record was lost with the worker: each counted at `now` at the
    /// largest amount kept (else the default cost), the careful side.
    pub fn count_unrecorded(&mut self, configs: &[ResourceConfig], n: u32, now: Millis) {
        for (r, c) in self.0.iter_mut().zip(configs) {
            let each = r.log.largest().unwrap_or(c.default_cost);
            r.log.record(now, each.saturating_mul(u64::from(n)));
        }
    }

    /// What an answer says of the job started at `started` with `costs`: the real amounts from
    /// its body (each resource's `costPath`), and each resource's quota from the headers (by
    /// the resource word the families report, case ignored).
    pub fn on_answer(
        &mut self,
        configs: &[ResourceConfig],
        costs: &Costs,
        started: Millis,
        body: Option<&str>,
        quotas: &[(String, Quota)],
        now: Millis,
    ) {
        let parsed = body.and_then(|b| crate::json::parse(b).ok());
        for (r, c) in self.0.iter_mut().zip(configs) {
            if let (Some(path), Some(body)) = (&c.cost_path, &parsed) {
                if let Some(actual) = read_number_at(body, path) {
                    if actual.is_finite() && actual >= 0.0 {
                        r.log.correct(started, costs.of(c), actual.ceil() as u64);
                    }
                }
            }
            if let Some((_, q)) = quotas.iter().find(|(w, _)| w.eq_ignore_ascii_case(&r.name)) {
                r.apply_quota(q, now);
            }
        }
    }

    pub fn statuses(&self, now: Millis) -> Vec<ResourceStatus> {
        self.0.iter().filter_map(|r| r.status(now)).collect()
    }
}

#[cfg(test)]
mod tests;
