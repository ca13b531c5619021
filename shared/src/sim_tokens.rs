//! The simulated server's second resource: tokens a minute, as an AI API counts them beside
//! requests. Each request says its real cost in its body (`{"tokens": 812, ...}`, which the
//! arrivals of [`token_jobs`] write); the job's `cost` is only an estimate of it. The server
//! refuses an arrival whose tokens do not fit the sliding minute (429 with `Retry-After`),
//! answers what was spent in the body (`{"usage": {"total_tokens": 812}}`), and, when it sends
//! headers of the resource-suffix family, `x-ratelimit-*-tokens` beside the requests' ones.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::config::Window;
use crate::job::{JobKind, JobSpec, Lane};
use crate::json::{self, Json};
use crate::random::Rng;
use crate::resources::Costs;
use crate::time::{DurationMs, Millis};

/// The token window of `--tokens-per-minute`.
pub const TOKEN_WINDOW_MS: DurationMs = 60_000;

/// What the server counted of tokens.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenReport {
    pub limit_per_minute: u64,
    /// Tokens of the requests the server accepted.
    pub applied: u64,
    /// The most tokens of accepted arrivals in any placement of the minute.
    pub max_in_window: u64,
    /// The most tokens in any minute had the server refused nothing: what shows whether the
    /// client kept to the limit.
    pub max_attempted_in_window: u64,
    /// The least time the applied tokens could take (see `ideal_tokens_ms`: whole minutes, as
    /// the server's sliding minute allows them), over the time taken: the share of the token
    /// limit reached.
    pub share_of_limit: f64,
}

/// The server's sliding minute of tokens.
#[derive(Debug)]
pub struct TokenServer {
    limit: u64,
    log: VecDeque<(Millis, u64)>,
    accepted: Vec<(Millis, u64)>,
    attempted: Vec<(Millis, u64)>,
}

impl TokenServer {
    pub fn new(limit_per_minute: u64) -> Self {
        TokenServer {
            limit: limit_per_minute,
            log: VecDeque::new(),
            accepted: Vec::new(),
            attempted: Vec::new(),
        }
    }

    fn forget(&mut self, now: Millis) {
        while self
            .log
            .front()
            .is_some_and(|&(t, _)| t + TOKEN_WINDOW_MS <= now)
        {
            self.log.pop_front();
        }
    }

    fn used(&self) -> u64 {
        self.log.iter().map(|&(_, n)| n).sum()
    }

    /// An arrival costing `tokens` at `now`: `None` when it fits, else how long until it would.
    pub fn refusal(&mut self, now: Millis, tokens: u64) -> Option<DurationMs> {
        self.forget(now);
        self.attempted.push((now, tokens));
        let mut excess = (self.used() + tokens).saturating_sub(self.limit);
        if excess == 0 {
            return None;
        }
        for &(t, n) in &self.log {
            excess = excess.saturating_sub(n);
            if excess == 0 {
                return Some((t + TOKEN_WINDOW_MS).saturating_sub(now).max(1));
            }
        }
        Some(TOKEN_WINDOW_MS)
    }

    /// The arrival at `now` was accepted.
    pub fn accept(&mut self, now: Millis, tokens: u64) {
        self.log.push_back((now, tokens));
        self.accepted.push((now, tokens));
    }

    /// `x-ratelimit-{limit,remaining,reset}-tokens`, as the resource-suffix family writes them.
    pub fn headers(&mut self, now: Millis) -> Vec<(String, String)> {
        self.forget(now);
        let reset = self
            .log
            .front()
            .map_or(0, |&(t, _)| (t + TOKEN_WINDOW_MS).saturating_sub(now));
        vec![
            ("x-ratelimit-limit-tokens".into(), self.limit.to_string()),
            (
                "x-ratelimit-remaining-tokens".into(),
                self.limit.saturating_sub(self.used()).to_string(),
            ),
            ("x-ratelimit-reset-tokens".into(), format!("{reset}ms")),
        ]
    }

    pub fn report(&self, busy_ms: DurationMs) -> TokenReport {
        let applied: u64 = self.accepted.iter().map(|&(_, n)| n).sum();
        let ideal = ideal_tokens_ms(applied, self.limit);
        TokenReport {
            limit_per_minute: self.limit,
            applied,
            max_in_window: max_amount_in_window(&self.accepted, TOKEN_WINDOW_MS),
            max_attempted_in_window: max_amount_in_window(&self.attempted, TOKEN_WINDOW_MS),
            share_of_limit: if busy_ms == 0 {
                0.0
            } else {
                ideal as f64 / busy_ms as f64
            },
        }
    }
}

/// The least time `applied` tokens take against the server's sliding minute: a minute's worth
/// at once, then another each time the minute has passed the one before, so the last part
/// waits a whole minute however small it is. This is what a client that knew every cost in
/// advance could reach; the fluid figure (the last part in proportion) cannot be reached
/// against a sliding window, and it judged short runs harshly: 4.2 minutes' worth of tokens
/// done at 240.6 s, as soon as the server allows, read 0.80 of the limit.
fn ideal_tokens_ms(applied: u64, limit: u64) -> DurationMs {
    if applied <= limit || limit == 0 {
        return 0;
    }
    (applied.div_ceil(limit) - 1) * TOKEN_WINDOW_MS
}

/// The most of the amounts in any half-open window `[t, t + length)`.
fn max_amount_in_window(entries: &[(Millis, u64)], length: DurationMs) -> u64 {
    let mut sorted = entries.to_vec();
    sorted.sort_unstable();
    let (mut best, mut sum, mut lo) = (0, 0, 0);
    for hi in 0..sorted.len() {
        sum += sorted[hi].1;
        while sorted[hi].0 >= sorted[lo].0 + length {
            sum -= sorted[lo].1;
            lo += 1;
        }
        best = best.max(sum);
    }
    best
}

/// A request's real token cost, from its body (`{"tokens": N}`); 0 for any other body.
pub fn tokens_of(body: Option<&str>) -> u64 {
    body.and_then(|b| json::parse(b).ok())
        .and_then(|v| match v.get("tokens") {
            Some(Json::U64(n)) => Some(*n),
            _ => None,
        })
        .unwrap_or(0)
}

/// `n` completions of random size: each carries as its `cost` what an app can bound before
/// sending (the prompt's tokens plus the answer's cap), between a quarter and twice
/// `mean_tokens`, and really spends between half of that and all of it (said in its body; the
/// server counts it, and answers it in `usage.total_tokens`).
pub fn token_jobs(budget: &str, n: usize, mean_tokens: u64, rng: &mut Rng) -> Vec<JobSpec> {
    (0..n)
        .map(|i| {
            let bound = mean_tokens / 4 + rng.below_or_equal(mean_tokens * 7 / 4);
            let real = bound / 2 + rng.below_or_equal(bound / 2);
            JobSpec {
                budget: budget.into(),
                lane: Lane::Bulk,
                kind: JobKind::Create,
                method: "POST".into(),
                url: format!("https://api.example/v1/completions?n={i}"),
                body: Some(format!("{{\"n\":{i},\"tokens\":{}}}", real.max(1))),
                cost: Costs::new([("tokens".to_string(), bound.max(1))]),
                ..JobSpec::default()
            }
        })
        .collect()
}

/// The budget's `tokens` resource for a server of `limit_per_minute`.
pub fn tokens_resource(limit_per_minute: u32) -> crate::config::ResourceConfig {
    crate::config::ResourceConfig {
        name: "tokens".into(),
        windows: vec![Window {
            limit: limit_per_minute,
            length_ms: TOKEN_WINDOW_MS,
        }],
        cost_path: Some("usage.total_tokens".into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minute_refuses_what_does_not_fit_and_says_when_it_would() {
        let mut s = TokenServer::new(1_000);
        assert_eq!(s.refusal(0, 600), None);
        s.accept(0, 600);
        assert_eq!(s.refusal(10, 400), None);
        s.accept(10, 400);
        assert_eq!(s.refusal(20, 1), Some(59_980));
        assert_eq!(s.refusal(60_000, 500), None);
        let r = s.report(60_000);
        assert_eq!(r.applied, 1_000);
        assert_eq!(r.max_in_window, 1_000);
        assert_eq!(r.max_attempted_in_window, 1_001);
    }

    #[test]
    fn a_body_says_its_tokens() {
        assert_eq!(tokens_of(Some(r#"{"n":1,"tokens":812}"#)), 812);
        assert_eq!(tokens_of(Some("{}")), 0);
        assert_eq!(tokens_of(None), 0);
    }
}
