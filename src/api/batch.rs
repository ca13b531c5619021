//! The batch endpoints, in three shapes real APIs use: an array of contact bodies
//! (`POST /api/contacts/batch`), HubSpot's batch update (`POST /api/contacts/batch/update`) and
//! Microsoft Graph's JSON batching (`POST /api/$batch`).
//!
//! A batch is one arrival: `arrive` counts it once against the limiter, rolls its fault and hang
//! once and records it once, and its `Idempotency-Key` covers the whole answer (a repeat replays
//! it and applies no item again). Only then are its items carried out here, one by one in order,
//! each through `carry_out` as the single request it stands for, so an item and the same request
//! sent alone cannot disagree. A body of the wrong shape, or more than [`MAX_BATCH_ITEMS`] items,
//! refuses the whole batch with 400 before any item is applied.
//!
//! The Graph shape is in `graph_batch.rs`.
//!
//! Faults per item, the partial failures a client must retry item by item because the batch as a
//! whole succeeded: `batchItemFailRate` answers an item 503 without applying it (any shape), and
//! `batchSubRateLimited` answers the next N `$batch` sub-requests 429 with `Retry-After: 1`.

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use serde_json::{json, Map, Value};

use super::*;

/// The most items one batch may carry; more is refused whole, as real APIs cap theirs (Graph at
/// 20): high enough that a client's batch size is its own choice, low enough to bound the time
/// one batch holds the API's lock.
pub const MAX_BATCH_ITEMS: usize = 100;

/// What a batch did with its items, recorded on its arrival.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Tally {
    /// Items answered, whatever their status.
    pub(super) items: u32,
    /// Of those, the items carried out (`Outcome::Applied`).
    pub(super) applied: u32,
}

/// The three shapes, told by path.
enum Shape {
    Array,
    HubSpot,
    Graph,
}

fn shape(segs: &[&str]) -> Option<Shape> {
    match segs {
        ["contacts", "batch"] => Some(Shape::Array),
        ["contacts", "batch", "update"] => Some(Shape::HubSpot),
        // A client that percent-encodes the `$` means the same endpoint.
        ["$batch" | "%24batch"] => Some(Shape::Graph),
        _ => None,
    }
}

pub(super) fn is_batch_path(path: &str) -> bool {
    shape(&segments(path)).is_some()
}

/// A HubSpot-style PATCH body, `{"properties": {...}}`, stands for its inner object, so a job's
/// body is the same whether it is sent alone or as a batch input. Only an object whose one field
/// is an object `properties` is taken so: a plain patch may still set other fields.
pub(super) fn unwrap_properties(mut fields: Map<String, Value>) -> Map<String, Value> {
    if fields.len() == 1 {
        if let Some(Value::Object(inner)) = fields.remove("properties") {
            return inner;
        }
    }
    fields
}

impl Inner {
    /// Answers a request to a batch path, `None` for any other path.
    pub(super) fn batch(&mut self, req: &ApiRequest, segs: &[&str]) -> Option<Handled> {
        let shape = shape(segs)?;
        if req.method != Method::POST {
            return Some(Handled::refused(
                StatusCode::METHOD_NOT_ALLOWED,
                "a batch is sent with POST",
            ));
        }
        Some(match shape {
            Shape::Array => self.array_batch(req),
            Shape::HubSpot => self.hubspot_batch(req),
            Shape::Graph => self.graph_batch(req),
        })
    }

    /// One batch item: the `batchItemFailRate` roll, then the single request it stands for (or
    /// the answer it already has when the batch could not make a request of it).
    pub(super) fn item(&mut self, item: Result<ApiRequest, Handled>, tally: &mut Tally) -> Handled {
        tally.items += 1;
        if self.rng.chance(self.config.batch_item_fail_rate) {
            return Handled {
                outcome: Outcome::Fault,
                ..Handled::refused(StatusCode::SERVICE_UNAVAILABLE, "temporarily unavailable")
            };
        }
        let h = match item {
            Ok(req) => self.carry_out(&req),
            Err(h) => h,
        };
        if h.outcome == Outcome::Applied {
            tally.applied += 1;
        }
        h
    }

    /// `[{contact}, ...]` → 200 `[{"status": 201, "body": {contact}} | {"status", "error"}]`.
    fn array_batch(&mut self, req: &ApiRequest) -> Handled {
        let items = match serde_json::from_slice::<Value>(&req.body) {
            Ok(Value::Array(items)) => items,
            Ok(_) => return bad("a contacts batch must be a JSON array of contact objects"),
            Err(e) => return bad(format!("invalid JSON: {e}")),
        };
        if let Err(e) = within_limit(items.len()) {
            return bad(e);
        }
        let mut tally = Tally::default();
        let mut answers = Vec::with_capacity(items.len());
        for body in &items {
            let create = sub_request(req, Method::POST, "/api/contacts".into(), Some(body));
            let h = self.item(Ok(create), &mut tally);
            let status = h.status.as_u16();
            answers.push(if h.status.is_success() {
                json!({ "status": status, "body": h.body })
            } else {
                json!({ "status": status, "error": error_text(&h) })
            });
        }
        answered(StatusCode::OK, Value::Array(answers), tally)
    }

    /// HubSpot's batch update (`{"inputs": [{"id", "properties"}]}`), each input a PATCH of its
    /// contact. As HubSpot documents it: 200 when every input succeeded, 207 Multi-Status when
    /// any failed, with `status: "COMPLETE"` (the work is done either way), `results` for the
    /// contacts changed (`id` as a string, `properties` the contact now), and per failure an
    /// `errors` entry `{"status": "error", "category", "message", "context": {"ids": [id]}}`
    /// plus `numErrors`. HubSpot's timestamps and links are left out. One entry per failed input
    /// (HubSpot may group ids sharing an error; a client should read every id of `context.ids`).
    /// Every entry also has `httpStatus`, a number of this server's own: the status the single
    /// PATCH would have got (503 for `SERVICE_UNAVAILABLE`), so a client can tell an error worth
    /// retrying from one that is not without knowing HubSpot's categories.
    fn hubspot_batch(&mut self, req: &ApiRequest) -> Handled {
        let inputs = match hubspot_inputs(&req.body) {
            Ok(inputs) => inputs,
            Err(e) => return bad(e),
        };
        let mut tally = Tally::default();
        let (mut results, mut errors) = (Vec::new(), Vec::new());
        for (id, properties) in inputs {
            let patch = match id.parse::<u64>() {
                Ok(n) => Ok(sub_request(
                    req,
                    Method::PATCH,
                    format!("/api/contacts/{n}"),
                    Some(&Value::Object(properties)),
                )),
                // Not a path of its own: an id that is no number names no contact, as the
                // single PATCH of such a path would say.
                Err(_) => Err(Handled::refused(StatusCode::NOT_FOUND, "no such contact")),
            };
            let h = self.item(patch, &mut tally);
            if h.status.is_success() {
                results.push(json!({ "id": id, "properties": h.body }));
            } else {
                errors.push(json!({
                    "status": "error",
                    "category": category(h.status),
                    "message": error_text(&h),
                    "context": { "ids": [id] },
                    "httpStatus": h.status.as_u16(),
                }));
            }
        }
        let status = if errors.is_empty() {
            StatusCode::OK
        } else {
            StatusCode::MULTI_STATUS
        };
        let body = json!({
            "status": "COMPLETE",
            "results": results,
            "numErrors": errors.len(),
            "errors": errors,
        });
        answered(status, body, tally)
    }
}

pub(super) fn bad(message: impl Into<String>) -> Handled {
    Handled::refused(StatusCode::BAD_REQUEST, message)
}

pub(super) fn within_limit(items: usize) -> Result<(), String> {
    if items > MAX_BATCH_ITEMS {
        return Err(format!(
            "a batch takes at most {MAX_BATCH_ITEMS} items, got {items}"
        ));
    }
    Ok(())
}

pub(super) fn answered(status: StatusCode, body: Value, tally: Tally) -> Handled {
    Handled {
        batch: Some(tally),
        ..Handled::ok(status, Some(body))
    }
}

/// An item's request, with the batch's `Cookie` flag (it came on the same connection) and no key
/// or `If-Match` of its own.
pub(super) fn sub_request(
    batch: &ApiRequest,
    method: Method,
    path: String,
    body: Option<&Value>,
) -> ApiRequest {
    ApiRequest {
        method,
        path,
        query: None,
        idempotency_key: None,
        cookie: batch.cookie,
        if_match: None,
        body: body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string())),
    }
}

/// The message of a refused item's answer (`{"error": ...}`, as the single request has it).
fn error_text(h: &Handled) -> String {
    h.body
        .as_ref()
        .and_then(|b| b.get("error"))
        .and_then(Value::as_str)
        .unwrap_or("failed")
        .to_owned()
}

/// HubSpot's error category for the status the single request got.
fn category(status: StatusCode) -> &'static str {
    match status.as_u16() {
        404 => "OBJECT_NOT_FOUND",
        409 | 412 => "CONFLICT",
        429 => "RATE_LIMITED",
        503 => "SERVICE_UNAVAILABLE",
        s if s >= 500 => "INTERNAL_ERROR",
        _ => "VALIDATION_ERROR",
    }
}

/// One input of a HubSpot batch update: its id as given (a string), its properties.
type Input = (String, Map<String, Value>);

/// The inputs of a HubSpot batch update, all checked before any is applied.
fn hubspot_inputs(body: &Bytes) -> Result<Vec<Input>, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("invalid JSON: {e}"))?;
    let Some(Value::Array(inputs)) = value.get("inputs") else {
        return Err(
            r#"a batch update must be {"inputs": [{"id": "1", "properties": {...}}, ...]}"#.into(),
        );
    };
    within_limit(inputs.len())?;
    inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let id = match input.get("id") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => return Err(format!("inputs[{i}].id must be a string or a number")),
            };
            let Some(Value::Object(properties)) = input.get("properties") else {
                return Err(format!("inputs[{i}].properties must be an object"));
            };
            Ok((id, properties.clone()))
        })
        .collect()
}
