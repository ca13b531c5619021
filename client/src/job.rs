//! Turning what a page hands to `enqueue` into a [`JobSpec`] the worker accepts.
//!
//! Pages write jobs the way they write `fetch` calls: headers as a plain object, a body as an
//! object to be sent as JSON, a URL relative to the page. The worker only takes the exact wire
//! shape, so the conversion happens here, once, with errors that say what to change.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use sluice_shared::job::{JobKind, JobSpec, Lane};
use sluice_shared::request_options::RequestOptions;

use crate::core::ClientError;

/// A job as a page writes it. Everything but `url` is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct JobInput {
    /// The page's own id for the job; by default the client makes one (a UUID).
    pub id: Option<String>,
    pub budget: Option<String>,
    pub lane: Option<Lane>,
    pub key: Option<String>,
    pub kind: Option<JobKind>,
    pub method: Option<String>,
    pub url: Option<String>,
    pub headers: Option<HeadersInput>,
    /// Read separately by the glue ([`Body`]), which sees the JS value itself.
    pub body: Option<IgnoredAny>,
    pub group_id: Option<String>,
    /// `RequestInit` members, spelled as `fetch` takes them; see `RequestOptions`.
    pub credentials: Option<String>,
    pub mode: Option<String>,
    pub redirect: Option<String>,
    pub referrer_policy: Option<String>,
    pub integrity: Option<String>,
}

/// `{"Name": "value"}` or `[["Name", "value"], ...]`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HeadersInput(pub Vec<(String, String)>);

impl<'de> Deserialize<'de> for HeadersInput {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = HeadersInput;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("headers as an object of strings or an array of [name, value] pairs")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HeadersInput, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    out.push((k, v));
                }
                Ok(HeadersInput(out))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<HeadersInput, A::Error> {
                let mut out = Vec::new();
                while let Some(pair) = seq.next_element::<(String, String)>()? {
                    out.push(pair);
                }
                Ok(HeadersInput(out))
            }

            fn visit_unit<E: de::Error>(self) -> Result<HeadersInput, E> {
                Ok(HeadersInput::default())
            }
        }
        d.deserialize_any(V)
    }
}

/// A job's body as the page gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    None,
    /// A string, sent as it is.
    Text(String),
    /// Anything else, already `JSON.stringify`'d: sent with `Content-Type: application/json`
    /// unless the job names another type.
    Json(String),
}

/// Builds the wire job. `resolve` turns a possibly relative URL into an absolute one;
/// `new_key` makes a fresh idempotency key.
pub fn normalize(
    input: JobInput,
    body: Body,
    resolve: &dyn Fn(&str) -> Result<String, String>,
    new_key: &mut dyn FnMut() -> String,
) -> Result<JobSpec, ClientError> {
    let url = input
        .url
        .filter(|u| !u.trim().is_empty())
        .ok_or_else(|| ClientError::InvalidJob("a job needs a 'url'".into()))?;
    let url =
        resolve(&url).map_err(|e| ClientError::InvalidJob(format!("bad url '{url}': {e}")))?;
    let mut headers = input.headers.unwrap_or_default().0;
    let body = match body {
        Body::None => None,
        Body::Text(s) => Some(s),
        Body::Json(s) => {
            if !has_header(&headers, "content-type") {
                headers.push(("Content-Type".into(), "application/json".into()));
            }
            Some(s)
        }
    };
    let mut spec = JobSpec {
        id: input.id.filter(|id| !id.trim().is_empty()),
        budget: input.budget.unwrap_or_default(),
        lane: input.lane.unwrap_or_default(),
        key: input.key,
        kind: input.kind.unwrap_or_default(),
        method: input.method.unwrap_or_default(),
        url,
        headers,
        body,
        group_id: input.group_id,
        options: Some(RequestOptions {
            credentials: input.credentials,
            mode: input.mode,
            redirect: input.redirect,
            referrer_policy: input.referrer_policy,
            integrity: input.integrity,
        })
        .filter(|o| !o.is_default()),
    };
    prepare(&mut spec, new_key)?;
    Ok(spec)
}

/// What every job goes through before it is sent, from JS or from Rust: the method is
/// upper-cased (POST when it has a body, GET otherwise, if unset); the job gets its id, and a
/// `create` its `Idempotency-Key`, here rather than in the worker, so that an `enqueue` sent
/// again after a lost reply (see `core`) names the same job, which the worker then recognises
/// instead of saving it twice.
pub fn prepare(spec: &mut JobSpec, new_key: &mut dyn FnMut() -> String) -> Result<(), ClientError> {
    spec.method = match spec.method.trim() {
        "" if spec.body.is_some() => "POST".into(),
        "" => "GET".into(),
        m => m.to_ascii_uppercase(),
    };
    if !spec
        .method
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    {
        return Err(ClientError::InvalidJob(format!(
            "'{}' is not an HTTP method",
            spec.method
        )));
    }
    if spec.body.is_some() && matches!(spec.method.as_str(), "GET" | "HEAD") {
        return Err(ClientError::InvalidJob(format!(
            "a {} job cannot have a body; use POST, PUT or PATCH",
            spec.method
        )));
    }
    if spec.kind == JobKind::Create && !has_header(&spec.headers, "idempotency-key") {
        spec.headers.push(("Idempotency-Key".into(), new_key()));
    }
    if spec.id.is_none() {
        spec.id = Some(new_key());
    }
    Ok(())
}

fn has_header(headers: &[(String, String)], name: &str) -> bool {
    headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
}

/// Response headers as a page reads them: lower-case names, repeated headers joined with ", "
/// (as `Headers.get` does).
pub fn headers_object(pairs: &[(String, String)]) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for (n, v) in pairs {
        out.entry(n.to_ascii_lowercase())
            .and_modify(|e| {
                e.push_str(", ");
                e.push_str(v);
            })
            .or_insert_with(|| v.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(u: &str) -> Result<String, String> {
        if u.starts_with("http") {
            Ok(u.to_string())
        } else if let Some(rest) = u.strip_prefix('/') {
            Ok(format!("http://127.0.0.1:1234/{rest}"))
        } else {
            Err("not a URL".into())
        }
    }

    fn norm(json: &str, body: Body) -> Result<JobSpec, ClientError> {
        let input: JobInput =
            serde_json::from_str(json).map_err(|e| ClientError::InvalidJob(e.to_string()))?;
        let mut n = 0;
        normalize(input, body, &resolve, &mut || {
            n += 1;
            format!("key-{n}")
        })
    }

    #[test]
    fn fills_in_defaults_and_resolves_the_url() {
        let s = norm(r#"{"url":"/api/contacts"}"#, Body::None).unwrap();
        assert_eq!(s.url, "http://127.0.0.1:1234/api/contacts");
        assert_eq!(s.method, "GET");
        assert_eq!(s.lane, Lane::Bulk);
        assert_eq!(s.kind, JobKind::Custom);
        assert!(s.headers.is_empty());
        assert_eq!(
            s.id.as_deref(),
            Some("key-1"),
            "the id is fixed before the first send"
        );
        let own = norm(r#"{"url":"/x","id":"mine"}"#, Body::None).unwrap();
        assert_eq!(own.id.as_deref(), Some("mine"));
    }

    #[test]
    fn an_object_body_becomes_json() {
        let s = norm(
            r#"{"url":"/api/contacts","kind":"create","headers":{"X-A":"1"},"body":{"name":"Ada"}}"#,
            Body::Json(r#"{"name":"Ada"}"#.into()),
        )
        .unwrap();
        assert_eq!(s.method, "POST");
        assert_eq!(s.body.as_deref(), Some(r#"{"name":"Ada"}"#));
        assert_eq!(
            s.headers,
            vec![
                ("X-A".to_string(), "1".to_string()),
                ("Content-Type".to_string(), "application/json".to_string()),
                ("Idempotency-Key".to_string(), "key-1".to_string()),
            ]
        );
    }

    #[test]
    fn keeps_the_pages_own_content_type_and_key() {
        let s = norm(
            r#"{"url":"/x","method":"put","kind":"create","headers":[["content-type","text/csv"],["Idempotency-Key","mine"]]}"#,
            Body::Json("[]".into()),
        )
        .unwrap();
        assert_eq!(s.method, "PUT");
        assert_eq!(s.headers.len(), 2);
    }

    #[test]
    fn says_what_is_wrong() {
        let e = norm(r#"{"method":"POST"}"#, Body::None).unwrap_err();
        assert_eq!(e.to_string(), "invalid job: a job needs a 'url'");
        let e = norm(r#"{"url":"/x","metod":"POST"}"#, Body::None).unwrap_err();
        assert!(e.to_string().contains("unknown field `metod`"), "{e}");
        let e = norm(r#"{"url":"/x","lane":"urgent"}"#, Body::None).unwrap_err();
        assert!(e.to_string().contains("interactive"), "{e}");
        let e = norm(r#"{"url":"/x","method":"GET"}"#, Body::Text("a".into())).unwrap_err();
        assert!(e.to_string().contains("cannot have a body"), "{e}");
        let e = norm(r#"{"url":"/x","method":"GE T"}"#, Body::None).unwrap_err();
        assert!(e.to_string().contains("not an HTTP method"), "{e}");
        let e = norm(r#"{"url":"nope"}"#, Body::None).unwrap_err();
        assert!(e.to_string().contains("bad url"), "{e}");
        let e = norm(r#"{"url":"/x","headers":{"a":1}}"#, Body::None).unwrap_err();
        assert!(e.to_string().contains("invalid type"), "{e}");
    }

    #[test]
    fn null_fields_mean_defaults() {
        let s = norm(
            r#"{"url":"/x","headers":null,"key":null,"groupId":null,"budget":null}"#,
            Body::None,
        )
        .unwrap();
        assert_eq!(s.budget, "");
        assert!(s.key.is_none());
    }

    #[test]
    fn response_headers_read_like_fetch() {
        let h = headers_object(&[
            ("Location".into(), "/a".into()),
            ("X-Many".into(), "1".into()),
            ("x-many".into(), "2".into()),
        ]);
        assert_eq!(h["location"], "/a");
        assert_eq!(h["x-many"], "1, 2");
    }
}
