//! The limiter's answers from its sliding-window log: how long until a slot frees, and the
//! rate-limit headers the log gives.

use std::time::Duration;

use axum::http::{HeaderName, HeaderValue};
use tokio::time::Instant;

use super::*;

impl Inner {
    /// How long until the limiter admits another arrival.
    pub(super) fn wait_for_slot(&self, now: Instant, cfg: &ApiConfig) -> Duration {
        let window = Duration::from_millis(cfg.window_ms);
        let n = self.window_log.len();
        let limit = cfg.limit as usize;
        if n < limit {
            return Duration::ZERO;
        }
        if limit == 0 {
            return window;
        }
        // Once the arrival at this index leaves the window, fewer than `limit` remain.
        let freeing = self.window_log[n - limit];
        (freeing + window).saturating_duration_since(now)
    }

    pub(super) fn rate_limit_headers(
        &self,
        now: Instant,
        cfg: &ApiConfig,
    ) -> Vec<(HeaderName, HeaderValue)> {
        let window = Duration::from_millis(cfg.window_ms);
        let remaining = (cfg.limit as usize).saturating_sub(self.window_log.len());
        let reset = self.window_log.back().map_or(Duration::ZERO, |&t| {
            (t + window).saturating_duration_since(now)
        });
        let reset_s = ceil_secs(reset);
        let window_s = ceil_secs(window);
        let mut h = Vec::new();
        let num = |n: u64| HeaderValue::from(n);
        if matches!(cfg.headers, HeaderMode::Xrate | HeaderMode::Both) {
            h.push((
                HeaderName::from_static("x-ratelimit-limit"),
                num(cfg.limit.into()),
            ));
            h.push((
                HeaderName::from_static("x-ratelimit-remaining"),
                num(remaining as u64),
            ));
            h.push((HeaderName::from_static("x-ratelimit-reset"), num(reset_s)));
        }
        if matches!(cfg.headers, HeaderMode::Ietf | HeaderMode::Both) {
            let policy = format!("\"default\";q={};w={window_s}", cfg.limit);
            let state = format!("\"default\";r={remaining};t={reset_s}");
            for (name, v) in [("ratelimit-policy", policy), ("ratelimit", state)] {
                if let Ok(v) = HeaderValue::from_str(&v) {
                    h.push((HeaderName::from_static(name), v));
                }
            }
        }
        h
    }
}
