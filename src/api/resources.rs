//! The `/api/` resources' bodies (contacts, echo, large streamed answers), `Retry-After`
//! values and the seeded random numbers the faults and jitter draw.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::http::HeaderValue;
use serde_json::{json, Map, Value};

use super::*;

pub(super) fn parse_object(body: &Bytes) -> Result<Map<String, Value>, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("body must be a JSON object".into()),
        Err(e) => Err(format!("invalid JSON: {e}")),
    }
}

/// RFC 7396 JSON merge patch: objects merge recursively, `null` removes a field.
pub(super) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in patch {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

pub(super) fn echo(req: &ApiRequest) -> Value {
    let body = if req.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&req.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&req.body).into_owned()))
    };
    json!({
        "ok": true,
        "method": req.method.as_str(),
        "path": req.path,
        "query": req.query,
        "idempotencyKey": req.idempotency_key,
        "cookie": req.cookie,
        "body": body,
    })
}

/// `bytes=N` of `/api/large`: 1 MiB unless given, at most 1 GiB.
pub(super) fn large_size(query: Option<&str>) -> u64 {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("bytes="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1 << 20)
        .min(1 << 30)
}

/// `bytes` of `x`, made a chunk at a time as the connection takes them, each counted in
/// `sent` when handed over: a client that stops reading stops the count (after what the
/// connection's buffers hold).
pub(super) fn large_body(bytes: u64, sent: Arc<AtomicU64>) -> Body {
    const CHUNK: u64 = 16 << 10;
    let chunks = futures::stream::unfold(0u64, move |done| {
        let sent = sent.clone();
        async move {
            if done >= bytes {
                return None;
            }
            let n = CHUNK.min(bytes - done);
            sent.fetch_add(n, Ordering::Relaxed);
            let chunk = Bytes::from(vec![b'x'; n as usize]);
            Some((Ok::<_, std::convert::Infallible>(chunk), done + n))
        }
    });
    Body::from_stream(chunks)
}

pub(super) fn ceil_secs(d: Duration) -> u64 {
    d.as_nanos().div_ceil(1_000_000_000) as u64
}

pub(super) fn retry_after(wait: Duration, form: RetryAfterForm) -> HeaderValue {
    match form {
        RetryAfterForm::Delta => HeaderValue::from(ceil_secs(wait)),
        RetryAfterForm::Date => {
            // An HTTP-date has whole seconds; rounding down would invite a retry that is early.
            let at = SystemTime::now() + wait;
            let since_epoch = at.duration_since(UNIX_EPOCH).unwrap_or_default();
            let rounded = UNIX_EPOCH + Duration::from_secs(ceil_secs(since_epoch));
            HeaderValue::from_str(&httpdate::fmt_http_date(rounded))
                .unwrap_or_else(|_| HeaderValue::from(ceil_secs(wait)))
        }
    }
}

/// Small seeded generator for arrival holds, jitter and fault rolls: reproducible with a seed,
/// no dependency.
pub(super) struct SplitMix64(u64);

impl SplitMix64 {
    pub(super) fn new(seed: Option<u64>) -> Self {
        let seed = seed.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0x5eed, |d| d.as_nanos() as u64)
        });
        Self(seed)
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(super) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Draws only when `p > 0`, so enabling faults does not shift other sequences in tests
    /// that leave them off.
    pub(super) fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// A uniform 0..=`jitter_ms` ms; draws only when `jitter_ms > 0`, like [`Self::chance`].
    pub(super) fn arrival_hold(&mut self, jitter_ms: u64) -> Duration {
        if jitter_ms == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(self.next_u64() % (jitter_ms + 1))
    }

    pub(super) fn latency(&mut self, cfg: &ApiConfig) -> Duration {
        let ms = if cfg.jitter_ms == 0 {
            cfg.latency_ms
        } else {
            let spread = self.next_u64() % (2 * cfg.jitter_ms + 1);
            (cfg.latency_ms + spread).saturating_sub(cfg.jitter_ms)
        };
        Duration::from_millis(ms)
    }
}
