//! How one arrival is decided, recorded and answered ([`ApiHandle::arrive`]), under one lock,
//! and how long a request is held before it arrives (`api.rs`'s docs give the order of decisions).

use std::time::Duration;

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use serde_json::json;
use tokio::time::Instant;

use super::*;

impl ApiHandle {
    /// How long a request just received is held before it arrives (see the module docs).
    pub(super) fn arrival_hold(&self) -> Duration {
        let mut inner = self.lock();
        let jitter_ms = inner.config.arrival_jitter_ms;
        inner.rng.arrival_hold(jitter_ms)
    }

    /// Decides the answer to one arrival, records it, and carries it out, all under one lock so
    /// the arrival order, the limiter's log and the record agree.
    pub(super) fn arrive(&self, req: ApiRequest, received: Instant) -> Reply {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let now = Instant::now();
        let cfg = inner.config.clone();
        let window = Duration::from_millis(cfg.window_ms);
        while inner
            .window_log
            .front()
            .is_some_and(|&t| now.duration_since(t) >= window)
        {
            inner.window_log.pop_front();
        }

        let script = inner
            .script
            .iter()
            .position(|s| s.matches(&req.method, &req.path))
            .and_then(|i| inner.script.remove(i));

        let mut headers: Vec<(HeaderName, HeaderValue)> = Vec::new();
        let mut rate_headers = true;
        let mut hang: Option<Duration> = None;
        let admitted;
        let status;
        let body;
        let outcome;
        let mut applied = false;
        let mut batch: Option<Tally> = None;

        if let Some(scripted_status) = script.as_ref().and_then(|s| s.status) {
            let s = script.as_ref().expect("checked above");
            status = StatusCode::from_u16(scripted_status).unwrap_or(StatusCode::OK);
            admitted = status != StatusCode::TOO_MANY_REQUESTS;
            if admitted || cfg.count_rejected {
                inner.window_log.push_back(now);
            }
            rate_headers = false;
            if s.apply == Some(true) {
                let h = inner.carry_out(&req);
                applied = h.applied();
                batch = h.batch;
            }
            if s.apply_then_hang {
                hang = Some(Duration::from_millis(s.hang_ms.unwrap_or(cfg.hang_ms)));
            }
            body = Some(
                s.body
                    .clone()
                    .unwrap_or_else(|| json!({ "scripted": true, "status": scripted_status })),
            );
            outcome = Outcome::Scripted;
        } else if inner.window_log.len() >= cfg.limit as usize {
            if cfg.count_rejected {
                inner.window_log.push_back(now);
            }
            admitted = false;
            let wait = inner.wait_for_slot(now, &cfg);
            headers.push((header::RETRY_AFTER, retry_after(wait, cfg.retry_after_form)));
            status = StatusCode::TOO_MANY_REQUESTS;
            body = Some(json!({
                "error": "rate limited",
                "limit": cfg.limit,
                "windowMs": cfg.window_ms,
                "retryAfterMs": wait.as_millis() as u64,
            }));
            outcome = Outcome::RateLimited;
        } else {
            inner.window_log.push_back(now);
            admitted = true;
            // A scripted entry without a status asks for normal handling, so random faults
            // would only make the staged scenario flaky.
            let random = script.is_none();
            if random && inner.rng.chance(cfg.fault_rate) {
                status = if inner.rng.chance(0.5) {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                body = Some(json!({ "error": "injected fault" }));
                outcome = Outcome::Fault;
            } else {
                let hang_ms = match &script {
                    Some(s) if s.apply_then_hang => Some(s.hang_ms.unwrap_or(cfg.hang_ms)),
                    None if inner.rng.chance(cfg.hang_rate) => Some(cfg.hang_ms),
                    _ => None,
                };
                hang = hang_ms.map(Duration::from_millis);
                let h = inner.carry_out(&req);
                applied = h.applied();
                batch = h.batch;
                if h.replayed {
                    headers.push((
                        HeaderName::from_static("idempotent-replayed"),
                        HeaderValue::from_static("true"),
                    ));
                }
                if let Some(loc) = h.location.and_then(|l| HeaderValue::from_str(&l).ok()) {
                    headers.push((header::LOCATION, loc));
                }
                if let Some(tag) = h.etag.and_then(|t| HeaderValue::from_str(&t).ok()) {
                    headers.push((header::ETAG, tag));
                }
                status = h.status;
                body = h.body;
                outcome = h.outcome;
            }
        }

        if rate_headers {
            headers.extend(inner.rate_limit_headers(now, &cfg));
        }
        if let Some(s) = &script {
            for (k, v) in &s.headers {
                // Validated when queued.
                let (Ok(k), Ok(v)) = (
                    HeaderName::from_bytes(k.as_bytes()),
                    HeaderValue::from_str(v),
                ) else {
                    continue;
                };
                headers.retain(|(n, _)| *n != k);
                headers.push((k, v));
            }
        }

        let latency = match script.as_ref().and_then(|s| s.delay_ms) {
            Some(ms) => Duration::from_millis(ms),
            None => inner.rng.latency(&cfg),
        };
        let delay = hang.unwrap_or(latency);

        let at = now.duration_since(inner.epoch);
        let seq = inner.arrivals.last().map_or(1, |a| a.seq + 1);
        inner.arrivals.push(Arrival {
            seq,
            at_ms: at.as_secs_f64() * 1000.0,
            at_ns: at.as_nanos() as u64,
            received_ms: received
                .saturating_duration_since(inner.epoch)
                .as_secs_f64()
                * 1000.0,
            answer_ms: (at + delay).as_secs_f64() * 1000.0,
            method: req.method.to_string(),
            path: req.path.clone(),
            idempotency_key: req.idempotency_key.clone(),
            status: status.as_u16(),
            applied,
            admitted,
            outcome,
            hung: hang.is_some(),
            scripted: script.is_some(),
            batch_items: batch.map(|t| t.items),
            items_applied: batch.map_or(0, |t| t.applied),
        });

        Reply {
            status,
            headers,
            body,
            arrived: now,
            delay,
        }
    }
}
