//! Carrying out a request against the store: an Idempotency-Key's stored answer replayed, else
//! the batch endpoints (`batch.rs`) or the contacts' routes, with their `ETag` and `If-Match`.

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use super::*;

impl Inner {
    /// Carries out a request against the store, honouring Idempotency-Key.
    pub(super) fn carry_out(&mut self, req: &ApiRequest) -> Handled {
        let keyed = req
            .idempotency_key
            .as_ref()
            .filter(|_| !matches!(req.method, Method::GET | Method::HEAD | Method::OPTIONS));
        if let Some(key) = keyed {
            if let Some(s) = self.idempotency.get(key) {
                if s.method != req.method || s.path != req.path {
                    return Handled::refused(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Idempotency-Key already used for a different request",
                    );
                }
                let status = if s.status == StatusCode::CREATED {
                    StatusCode::OK
                } else {
                    s.status
                };
                return Handled {
                    status,
                    body: s.body.clone(),
                    location: s.location.clone(),
                    etag: None,
                    outcome: Outcome::Replayed,
                    replayed: true,
                    batch: None,
                };
            }
        }
        let h = self.route(req);
        if let Some(key) = keyed {
            if h.outcome == Outcome::Applied && h.status.is_success() {
                self.idempotency.insert(
                    key.clone(),
                    Stored {
                        method: req.method.clone(),
                        path: req.path.clone(),
                        status: h.status,
                        body: h.body.clone(),
                        location: h.location.clone(),
                    },
                );
            }
        }
        h
    }

    pub(super) fn route(&mut self, req: &ApiRequest) -> Handled {
        let segs = segments(&req.path);
        if let Some(h) = self.batch(req, &segs) {
            return h;
        }
        let m = &req.method;
        match segs.as_slice() {
            ["contacts"] if *m == Method::POST => match parse_object(&req.body) {
                Ok(mut fields) => {
                    let id = self.next_id;
                    self.next_id += 1;
                    if let Some(Value::String(name)) = fields.get("name") {
                        *self.creates_by_name.entry(name.clone()).or_insert(0) += 1;
                    }
                    fields.insert("id".into(), id.into());
                    let record = Value::Object(fields);
                    self.contacts.insert(id, record.clone());
                    self.versions.insert(id, 1);
                    Handled {
                        location: Some(format!("/api/contacts/{id}")),
                        etag: Some(etag(1)),
                        ..Handled::ok(StatusCode::CREATED, Some(record))
                    }
                }
                Err(e) => Handled::refused(StatusCode::BAD_REQUEST, e),
            },
            ["contacts"] if *m == Method::GET || *m == Method::HEAD => {
                let all: Vec<Value> = self.contacts.values().cloned().collect();
                Handled::ok(StatusCode::OK, Some(Value::Array(all)))
            }
            ["contacts"] => Handled::refused(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
            ["contacts", id] => {
                let Some(id) = id
                    .parse::<u64>()
                    .ok()
                    .filter(|id| self.contacts.contains_key(id))
                else {
                    return Handled::refused(StatusCode::NOT_FOUND, "no such contact");
                };
                self.contact(m, id, req.if_match.as_deref(), &req.body)
            }
            _ => Handled::ok(StatusCode::OK, Some(echo(req))),
        }
    }

    /// One existing contact. A change whose `If-Match` does not name the contact's `ETag` is
    /// refused with 412 and the contact as it is now (RFC 9110, 13.1.1), for the client to
    /// merge its change into.
    pub(super) fn contact(
        &mut self,
        m: &Method,
        id: u64,
        if_match: Option<&str>,
        body: &Bytes,
    ) -> Handled {
        let version = self.versions.get(&id).copied().unwrap_or(1);
        let current = etag(version);
        let changes = matches!(*m, Method::PATCH | Method::PUT | Method::DELETE);
        if let Some(wanted) = if_match.filter(|_| changes) {
            let matches = wanted
                .split(',')
                .map(str::trim)
                .any(|t| t == "*" || t == current);
            if !matches {
                return Handled {
                    body: Some(json!({
                        "error": format!(
                            "precondition failed: contact {id} is at {current}, not {wanted}"
                        ),
                        "current": self.contacts.get(&id).cloned(),
                    })),
                    etag: Some(current),
                    ..Handled::refused(StatusCode::PRECONDITION_FAILED, "")
                };
            }
        }
        match *m {
            Method::GET | Method::HEAD => Handled {
                etag: Some(current),
                ..Handled::ok(StatusCode::OK, self.contacts.get(&id).cloned())
            },
            Method::PATCH | Method::PUT => {
                let fields = match parse_object(body) {
                    Ok(f) if *m == Method::PATCH => unwrap_properties(f),
                    Ok(f) => f,
                    Err(e) => return Handled::refused(StatusCode::BAD_REQUEST, e),
                };
                let Some(record) = self.contacts.get_mut(&id) else {
                    return Handled::refused(StatusCode::NOT_FOUND, "no such contact");
                };
                if *m == Method::PUT {
                    *record = Value::Object(fields);
                } else {
                    merge_patch(record, &Value::Object(fields));
                }
                // The id is the resource's name, not a field a client may change.
                if let Value::Object(o) = record {
                    o.insert("id".into(), id.into());
                }
                let record = record.clone();
                self.versions.insert(id, version + 1);
                if *m == Method::PATCH {
                    *self.patches.entry(id).or_insert(0) += 1;
                }
                Handled {
                    etag: Some(etag(version + 1)),
                    ..Handled::ok(StatusCode::OK, Some(record))
                }
            }
            Method::DELETE => {
                self.contacts.remove(&id);
                self.versions.remove(&id);
                Handled::ok(StatusCode::NO_CONTENT, None)
            }
            _ => Handled::refused(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        }
    }
}

/// A path's segments under `/api`: `/api/contacts/5` is `["contacts", "5"]`.
pub(super) fn segments(path: &str) -> Vec<&str> {
    let rest = path.strip_prefix("/api").unwrap_or(path);
    rest.split('/').filter(|s| !s.is_empty()).collect()
}

/// A contact version's entity tag, as `ETag` and `If-Match` carry it.
fn etag(version: u64) -> String {
    format!("\"v{version}\"")
}
