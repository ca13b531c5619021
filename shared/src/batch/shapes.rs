//! The batch request's body from its items, and each item's answer from the batch's, for each
//! [`BatchShape`]. Pure text in, text out: the engine decides what an item's answer does.

use std::borrow::Cow;

use super::{BatchRule, BatchShape};
use crate::json::{parse, to_string, Json};
use crate::scope::Target;

/// One job as a batch carries it.
#[derive(Clone, Copy, Debug)]
pub struct BatchItem<'a> {
    pub method: &'a str,
    pub url: &'a str,
    /// Its own request headers (its idempotency key, an `If-Match`), which only the `requests`
    /// shape can carry per item.
    pub headers: &'a [(String, String)],
    pub body: Option<&'a str>,
    /// `inputs`: its id, from its URL's [`BatchRule::id_param`].
    pub id: Option<&'a str>,
}

/// What the batch's answer says of one item: read as the answer to that job's own request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// Why a job cannot go in a batch of this rule (it then goes alone).
pub fn unfit(rule: &BatchRule, endpoint: &str, item: &BatchItem) -> Option<String> {
    match rule.shape {
        BatchShape::Array | BatchShape::Inputs => {
            let body = item.body.unwrap_or("{}");
            match parse(body) {
                Ok(Json::Obj(_)) => None,
                Ok(_) if rule.shape == BatchShape::Array => None,
                Ok(_) => Some("its body is not a JSON object".into()),
                Err(e) => Some(format!("its body is not JSON ({e})")),
            }
        }
        BatchShape::Requests => relative_url(endpoint, item.url)
            .is_none()
            .then(|| format!("'{}' is not under the batch endpoint's directory", item.url)),
    }
}

/// The batch request's body; `Err` names the item that cannot be carried (see [`unfit`]).
pub fn batch_body(rule: &BatchRule, endpoint: &str, items: &[BatchItem]) -> Result<String, String> {
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if let Some(why) = unfit(rule, endpoint, item) {
            return Err(format!("item {i}: {why}"));
        }
        let json_body = || item.body.map(parse).transpose().map_err(|e| e.0);
        out.push(match rule.shape {
            BatchShape::Array => json_body()?.unwrap_or(Json::Null),
            BatchShape::Inputs => {
                let body = json_body()?;
                let mut members: Vec<(Cow<str>, Json)> = vec![(
                    Cow::Borrowed(rule.id_field.as_str()),
                    Json::Str(Cow::Borrowed(item.id.unwrap_or_default())),
                )];
                if let Some(Json::Obj(own)) = body {
                    members.extend(own.into_iter().filter(|(k, _)| *k != rule.id_field));
                }
                Json::Obj(members)
            }
            BatchShape::Requests => {
                let url = relative_url(endpoint, item.url).unwrap_or_default();
                let mut headers: Vec<(Cow<str>, Json)> = item
                    .headers
                    .iter()
                    .filter(|(name, _)| !name.eq_ignore_ascii_case("authorization"))
                    .map(|(n, v)| {
                        (
                            Cow::Borrowed(n.as_str()),
                            Json::Str(Cow::Borrowed(v.as_str())),
                        )
                    })
                    .collect();
                // Graph refuses a sub-request with a body and no `Content-Type`.
                let typed = item
                    .headers
                    .iter()
                    .any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
                if let (Some(text), false) = (item.body, typed) {
                    let kind = if parse(text).is_ok() {
                        "application/json"
                    } else {
                        "text/plain"
                    };
                    headers.push((
                        Cow::Borrowed("Content-Type"),
                        Json::Str(Cow::Borrowed(kind)),
                    ));
                }
                let mut members: Vec<(Cow<str>, Json)> = vec![
                    (
                        Cow::Borrowed("id"),
                        Json::Str(Cow::Owned((i + 1).to_string())),
                    ),
                    (
                        Cow::Borrowed("method"),
                        Json::Str(Cow::Borrowed(item.method)),
                    ),
                    (Cow::Borrowed("url"), Json::Str(Cow::Owned(url))),
                    (Cow::Borrowed("headers"), Json::Obj(headers)),
                ];
                if let Some(text) = item.body {
                    // A body that is not JSON goes as a string, as Graph takes text bodies.
                    let value = parse(text).unwrap_or(Json::Str(Cow::Borrowed(text)));
                    members.push((Cow::Borrowed("body"), value));
                }
                Json::Obj(members)
            }
        });
    }
    let all = Json::Arr(out);
    Ok(to_string(&match rule.shape {
        BatchShape::Array => all,
        BatchShape::Inputs => Json::Obj(vec![(Cow::Borrowed(rule.items_key.as_str()), all)]),
        BatchShape::Requests => Json::Obj(vec![(Cow::Borrowed("requests"), all)]),
    }))
}

/// Each item's answer in a successful batch's answer (`status` 2xx), in the items' order;
/// `None` for an item the answer does not mention (it is tried again).
pub fn split_answer(
    rule: &BatchRule,
    status: u16,
    body: &str,
    items: &[BatchItem],
) -> Vec<Option<ItemAnswer>> {
    let mut answers = vec![None; items.len()];
    let Ok(tree) = parse(body) else {
        return answers;
    };
    match rule.shape {
        BatchShape::Array => {
            let Json::Arr(results) = tree else {
                return answers;
            };
            for (slot, result) in answers.iter_mut().zip(results) {
                let own_status = result.get("status").and_then(as_status);
                *slot = Some(match own_status {
                    Some(s) => ItemAnswer {
                        status: s,
                        headers: Vec::new(),
                        body: result
                            .get("body")
                            .map_or_else(|| to_string(&result), text_of),
                    },
                    None => ItemAnswer {
                        status: if status == 207 { 200 } else { status },
                        headers: Vec::new(),
                        body: to_string(&result),
                    },
                });
            }
        }
        BatchShape::Inputs => {
            let position = |id: &str| items.iter().position(|item| item.id == Some(id));
            if let Some(Json::Arr(results)) = tree.get(&rule.results_key) {
                for result in results {
                    if let Some(i) = result
                        .get(&rule.id_field)
                        .and_then(id_text)
                        .and_then(|id| position(&id))
                    {
                        answers[i] = Some(ItemAnswer {
                            status: 200,
                            headers: Vec::new(),
                            body: to_string(result),
                        });
                    }
                }
            }
            if let Some(Json::Arr(errors)) = tree.get(&rule.errors_key) {
                for error in errors {
                    let error_status = error_status(error);
                    let mut ids: Vec<String> = match error.get("context").and_then(|c| c.get("ids"))
                    {
                        Some(Json::Arr(ids)) => ids.iter().filter_map(id_text).collect(),
                        _ => Vec::new(),
                    };
                    ids.extend(error.get(&rule.id_field).and_then(id_text));
                    for i in ids.iter().filter_map(|id| position(id)) {
                        answers[i] = Some(ItemAnswer {
                            status: error_status,
                            headers: Vec::new(),
                            body: to_string(error),
                        });
                    }
                }
            }
        }
        BatchShape::Requests => {
            let Some(Json::Arr(responses)) = tree.get("responses") else {
                return answers;
            };
            for response in responses {
                let index = response
                    .get("id")
                    .and_then(id_text)
                    .and_then(|id| id.parse::<usize>().ok())
                    .and_then(|n| n.checked_sub(1))
                    .filter(|&i| i < items.len());
                let (Some(i), Some(status)) = (index, response.get("status").and_then(as_status))
                else {
                    continue;
                };
                let headers = match response.get("headers") {
                    Some(Json::Obj(members)) => members
                        .iter()
                        .map(|(name, value)| (name.to_string(), text_of(value)))
                        .collect(),
                    _ => Vec::new(),
                };
                answers[i] = Some(ItemAnswer {
                    status,
                    headers,
                    body: response.get("body").map(text_of).unwrap_or_default(),
                });
            }
        }
    }
    answers
}

/// The status a failure entry of an `inputs` answer says: a numeric `status` or `statusCode`,
/// else its `category` as HubSpot names them, else 400 (a failure the server gives no reason
/// to try again).
fn error_status(error: &Json) -> u16 {
    if let Some(s) = ["httpStatus", "statusCode", "status", "code"]
        .iter()
        .find_map(|k| error.get(k).and_then(as_status))
    {
        return s;
    }
    match error.get("category").and_then(Json::as_str).unwrap_or("") {
        "RATE_LIMITS" | "RATE_LIMITED" | "TOO_MANY_REQUESTS" => 429,
        "OBJECT_NOT_FOUND" | "NOT_FOUND" => 404,
        "CONFLICT" | "OBJECT_ALREADY_EXISTS" => 409,
        "UNAUTHORIZED" => 401,
        "FORBIDDEN" | "MISSING_SCOPES" => 403,
        "SERVICE_UNAVAILABLE" | "TIMEOUT" => 503,
        "INTERNAL_ERROR" | "SERVER_ERROR" => 500,
        _ => 400,
    }
}

/// A numeric status in 100..=599, written as a number or a numeric string.
fn as_status(value: &Json) -> Option<u16> {
    let n = match value {
        Json::U64(n) => *n,
        Json::Str(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    u16::try_from(n).ok().filter(|s| (100..=599).contains(s))
}

/// An id written as a string or a number.
fn id_text(value: &Json) -> Option<String> {
    match value {
        Json::Str(s) => Some(s.to_string()),
        Json::U64(n) => Some(n.to_string()),
        Json::I64(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A string's own text; any other value as JSON.
fn text_of(value: &Json) -> String {
    match value {
        Json::Str(s) => s.to_string(),
        other => to_string(other),
    }
}

/// `url` relative to the directory of `endpoint` (`https://h/v1.0/$batch` and
/// `https://h/v1.0/users/7?x=1` give `/users/7?x=1`), when it is on the same origin and under
/// that directory.
pub fn relative_url(endpoint: &str, url: &str) -> Option<String> {
    let (e, u) = (Target::parse(endpoint).ok()?, Target::parse(url).ok()?);
    if (e.scheme.as_str(), e.host.as_str(), e.port) != (u.scheme.as_str(), u.host.as_str(), u.port)
    {
        return None;
    }
    let directory = &e.path[..e.path.rfind('/').unwrap_or(0)];
    let rest = u.path.strip_prefix(directory)?;
    if !rest.starts_with('/') {
        return None;
    }
    let query = url.find('?').map_or("", |i| &url[i..]);
    let query = &query[..query.find('#').unwrap_or(query.len())];
    Some(format!("{rest}{query}"))
}
