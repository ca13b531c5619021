//! Microsoft Graph's JSON batching, `POST /api/$batch` (see `batch.rs` for what all batches
//! share): each sub-request is carried out as the single request it names.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use serde_json::{json, Map, Value};

use super::*;

impl Inner {
    /// Graph's JSON batching: `{"requests": [{"id", "method", "url", "headers", "body",
    /// "dependsOn"}]}` → 200 `{"responses": [{"id", "status", "headers", "body"}]}`. Graph may
    /// answer in any order; this keeps the requests' (a client must still match by `id`). Each
    /// sub-request is carried out as the request it names, its own `Idempotency-Key` and
    /// `If-Match` honoured; one whose `dependsOn` names a request that failed is answered 424,
    /// as Graph does, and not carried out.
    pub(super) fn graph_batch(&mut self, req: &ApiRequest) -> Handled {
        let subs = match graph_requests(&req.body) {
            Ok(subs) => subs,
            Err(e) => return bad(e),
        };
        let mut tally = Tally::default();
        let mut succeeded: HashMap<String, bool> = HashMap::new();
        let mut responses = Vec::with_capacity(subs.len());
        for sub in subs {
            let failed = sub
                .depends_on
                .iter()
                .find(|d| !succeeded.get(*d).copied().unwrap_or(false));
            let h = if let Some(dep) = failed {
                tally.items += 1;
                Handled::refused(
                    StatusCode::FAILED_DEPENDENCY,
                    format!("request {dep}, which this one depends on, failed"),
                )
            } else if self.config.batch_sub_rate_limited > 0 {
                // Spent from the config itself, so `GET /__sluice/config` shows what is left.
                self.config.batch_sub_rate_limited -= 1;
                tally.items += 1;
                Handled {
                    outcome: Outcome::RateLimited,
                    ..Handled::refused(StatusCode::TOO_MANY_REQUESTS, "rate limited")
                }
            } else {
                let request = sub.request(req);
                self.item(Ok(request), &mut tally)
            };
            succeeded.insert(sub.id.clone(), h.status.is_success());
            responses.push(graph_response(&sub.id, &h));
        }
        answered(StatusCode::OK, json!({ "responses": responses }), tally)
    }
}

/// One `$batch` sub-request, checked.
struct SubRequest {
    id: String,
    method: Method,
    /// Under `/api`, as the single request's.
    path: String,
    query: Option<String>,
    headers: Vec<(String, String)>,
    body: Option<Value>,
    depends_on: Vec<String>,
}

impl SubRequest {
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    }

    fn request(&self, batch: &ApiRequest) -> ApiRequest {
        ApiRequest {
            query: self.query.clone(),
            idempotency_key: self.header("Idempotency-Key"),
            if_match: self.header("If-Match"),
            ..sub_request(
                batch,
                self.method.clone(),
                self.path.clone(),
                self.body.as_ref(),
            )
        }
    }
}

/// The sub-requests of a `$batch`, all checked before any is carried out: what Graph refuses the
/// whole batch for (a missing field, an id used twice, a body without `Content-Type`, a
/// `dependsOn` naming no earlier request) is refused here likewise, and so is a URL that is not
/// relative to `/api` or names a batch (batches do not nest).
fn graph_requests(body: &Bytes) -> Result<Vec<SubRequest>, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON: {e}"))?;
    let Some(Value::Array(requests)) = value.get("requests") else {
        return Err(
            r#"a $batch must be {"requests": [{"id": "1", "method": "POST", "url": "/contacts", ...}]}"#
                .into(),
        );
    };
    within_limit(requests.len())?;
    let mut subs: Vec<SubRequest> = Vec::with_capacity(requests.len());
    for (i, r) in requests.iter().enumerate() {
        let text = |field: &str| match r.get(field) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(Value::Number(n)) if field == "id" => Ok(n.to_string()),
            _ => Err(format!("requests[{i}].{field} must be a non-empty string")),
        };
        let id = text("id")?;
        if subs.iter().any(|s| s.id == id) {
            return Err(format!("requests[{i}]: id {id:?} is used twice"));
        }
        let method = text("method")?;
        let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("requests[{i}].method {method:?} is not an HTTP method"))?;
        let url = text("url")?;
        if url.contains("://") || url.starts_with("//") {
            return Err(format!(
                "requests[{i}].url must be relative to /api, like \"/contacts/5\", not {url:?}"
            ));
        }
        let (path, query) = match url.split_once('?') {
            Some((p, q)) => (p, Some(q.to_owned())),
            None => (url.as_str(), None),
        };
        let path = format!("/api/{}", path.trim_start_matches('/'));
        if is_batch_path(&path) {
            return Err(format!("requests[{i}]: a batch cannot contain a batch"));
        }
        let headers = match r.get("headers") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(h)) => h
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    _ => Err(format!("requests[{i}].headers.{k} must be a string")),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(format!("requests[{i}].headers must be an object")),
        };
        let body = r.get("body").filter(|b| !b.is_null()).cloned();
        let depends_on = match r.get("dependsOn") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(ids)) => ids
                .iter()
                .map(|d| match d.as_str() {
                    Some(d) if subs.iter().any(|s| s.id == d) => Ok(d.to_owned()),
                    _ => Err(format!(
                        "requests[{i}].dependsOn must name earlier requests' ids, got {d}"
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(format!("requests[{i}].dependsOn must be an array of ids")),
        };
        let sub = SubRequest {
            id,
            method,
            path,
            query,
            headers,
            body,
            depends_on,
        };
        if sub.body.is_some() && sub.header("Content-Type").is_none() {
            return Err(format!(
                "requests[{i}] has a body but no Content-Type header (Graph requires one)"
            ));
        }
        subs.push(sub);
    }
    Ok(subs)
}

/// A sub-request's answer as Graph writes it: its headers as a JSON object, its body as JSON.
fn graph_response(id: &str, h: &Handled) -> Value {
    let mut headers = Map::new();
    let mut header = |k: &str, v: &str| headers.insert(k.to_owned(), Value::from(v));
    if h.outcome == Outcome::RateLimited {
        header("Retry-After", "1");
    }
    if let Some(location) = &h.location {
        header("Location", location);
    }
    if let Some(tag) = &h.etag {
        header("ETag", tag);
    }
    if h.replayed {
        header("Idempotent-Replayed", "true");
    }
    let body = h
        .body
        .as_ref()
        .filter(|_| h.status != StatusCode::NO_CONTENT);
    if body.is_some() {
        header("Content-Type", "application/json");
    }
    let mut res = json!({ "id": id, "status": h.status.as_u16(), "headers": headers });
    if let (Some(body), Value::Object(o)) = (body, &mut res) {
        o.insert("body".into(), body.clone());
    }
    res
}
