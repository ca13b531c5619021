//! Turning what a page hands to `enqueue` into a [`JobSpec`] the worker accepts.
//!
//! Pages write jobs the way they write `fetch` calls: headers as a plain object, a body as an
//! object to be sent as JSON, a URL relative to the page. The worker only takes the exact wire
//! shape, so the conversion happens here, once, with errors that say what to change.

use sluice_shared::job::{read_headers, JobKind, JobSpec};
use sluice_shared::json::{self, FromJson, Json, StructFields};
use sluice_shared::request_options::RequestOptions;

use crate::core::ClientError;

/// Reads jobs as a page writes them (the `JobInput` of the TypeScript types) into wire jobs.
///
/// It is the wire job's form ([`JobSpec`], read by its own reader) with the habits of `fetch`
/// calls: the `RequestInit` members (`credentials`, `mode`, ...) stand beside the others rather
/// than under `options`; `headers` may also be an object; `body` may be anything (the glue reads
/// it from the JS value itself: [`Body`]); and `null` means the default for any field. A field
/// it does not know is refused, so that a misspelt one is not silently left out.
pub struct JobReader {
    /// The fields a page may write: made once for all the jobs of an `enqueueMany`.
    known: Vec<&'static str>,
}

impl Default for JobReader {
    fn default() -> Self {
        // The wire job's fields, but `options`, whose members stand at the top level.
        let known = JobSpec::FIELDS
            .iter()
            .filter(|&&name| name != "options")
            .chain(RequestOptions::FIELDS)
            .copied()
            .collect();
        Self { known }
    }
}

impl JobReader {
    /// One job, as parsed from its `JSON.stringify` text.
    pub fn read(&self, value: &Json) -> Result<JobSpec, ClientError> {
        self.read_json(value)
            .map_err(|e| ClientError::InvalidJob(e.0))
    }

    fn read_json(&self, value: &Json) -> Result<JobSpec, json::Error> {
        let members = json::members(value, "struct JobInput")?;
        json::deny_unknown(members, &self.known)?;
        // What the wire job's reader takes as it is; the rest is read here.
        let mut wire_members = Vec::with_capacity(members.len());
        let mut headers = Vec::new();
        for (name, v) in members {
            match (name.as_ref(), v) {
                (_, Json::Null) | ("body", _) => {}
                ("headers", v) => headers = read_headers(v)?,
                _ => wire_members.push((name.clone(), v.clone())),
            }
        }
        let mut spec = JobSpec::from_json(&Json::Obj(wire_members))?;
        spec.headers = headers;
        spec.options = Some(RequestOptions::from_json(value)?).filter(|o| !o.is_default());
        Ok(spec)
    }
}

/// A job's `body` member as `JSON.stringify` wrote it, if it has one.
pub fn body_member<'v, 'a>(job: &'v Json<'a>) -> Option<&'v Json<'a>> {
    match job {
        Json::Obj(members) => members
            .iter()
            .find(|(name, _)| name.as_ref() == "body")
            .map(|(_, v)| v),
        _ => None,
    }
}

/// A job's body as the page gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    None,
    /// A string, sent as it is.
    Text(String),
    /// Anything else, as JSON text: sent with `Content-Type: application/json` unless the job
    /// names another type.
    Json(String),
}

/// Completes a job a page wrote ([`JobReader`]) with its body. `resolve` turns a possibly
/// relative URL into an absolute one; `new_key` makes a fresh idempotency key.
pub fn normalize(
    mut spec: JobSpec,
    body: Body,
    resolve: &dyn Fn(&str) -> Result<String, String>,
    new_key: &mut dyn FnMut() -> String,
) -> Result<JobSpec, ClientError> {
    if spec.url.trim().is_empty() {
        return Err(ClientError::InvalidJob("a job needs a 'url'".into()));
    }
    spec.url = resolve(&spec.url)
        .map_err(|e| ClientError::InvalidJob(format!("bad url '{}': {e}", spec.url)))?;
    spec.body = match body {
        Body::None => None,
        Body::Text(s) => Some(s),
        Body::Json(s) => {
            if !has_header(&spec.headers, "content-type") {
                spec.headers
                    .push(("Content-Type".into(), "application/json".into()));
            }
            Some(s)
        }
    };
    spec.id = spec.id.filter(|id| !id.trim().is_empty());
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

/// Response headers as a page reads them: lower-case names in order, repeated headers joined
/// with ", " (as `Headers` does).
pub fn headers_object(pairs: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (n, v) in pairs {
        let name = n.to_ascii_lowercase();
        match out.binary_search_by(|(k, _)| k.cmp(&name)) {
            Ok(i) => {
                out[i].1.push_str(", ");
                out[i].1.push_str(v);
            }
            Err(i) => out.insert(i, (name, v.clone())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_shared::job::Lane;

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
        let value = json::parse(json).map_err(|e| ClientError::InvalidJob(e.0))?;
        let spec = JobReader::default().read(&value)?;
        let mut n = 0;
        normalize(spec, body, &resolve, &mut || {
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
    fn bad_input_gets_the_readers_words() {
        let message = |json: &str| norm(json, Body::None).unwrap_err().to_string();
        assert_eq!(
            message(r#"{"url":"/x","metod":"POST"}"#),
            "invalid job: unknown field `metod`, expected one of `id`, `budget`, `lane`, `key`, \
             `kind`, `method`, `url`, `headers`, `body`, `groupId`, `cost`, `ifMatchFromKey`, `after`, `credentials`, `mode`, \
             `redirect`, `referrerPolicy`, `integrity`"
        );
        // The wire's `options` is spelt out at the top level, as `fetch` takes it.
        assert!(message(r#"{"url":"/x","options":{}}"#).contains("unknown field `options`"));
        assert_eq!(
            message(r#"{"url":"/x","headers":{"a":1}}"#),
            "invalid job: invalid type: integer `1`, expected a string"
        );
        assert_eq!(
            message(r#"{"url":"/x","headers":"a: 1"}"#),
            "invalid job: invalid type: string \"a: 1\", expected headers as an object of \
             strings or an array of [name, value] pairs"
        );
        assert_eq!(
            message(r#"{"url":"/x","headers":[["a"]]}"#),
            "invalid job: invalid length 1, expected a tuple of size 2"
        );
        assert_eq!(
            message(r#"{"url":"/x","credentials":true}"#),
            "invalid job: invalid type: boolean `true`, expected a string"
        );
        assert_eq!(
            message(r#"{"url":"/x","kind":"make"}"#),
            "invalid job: unknown variant `make`, expected one of `create`, `patch`, `delete`, \
             `custom`"
        );
        assert_eq!(
            message("[1]"),
            "invalid job: invalid type: sequence, expected struct JobInput"
        );
        assert!(message("{").starts_with("invalid job: EOF while parsing"));
    }

    #[test]
    fn request_options_stand_beside_the_other_fields() {
        let s = norm(
            r#"{"url":"/x","credentials":"omit","referrerPolicy":"no-referrer","mode":null}"#,
            Body::None,
        )
        .unwrap();
        assert_eq!(
            s.options,
            Some(RequestOptions {
                credentials: Some("omit".into()),
                referrer_policy: Some("no-referrer".into()),
                ..RequestOptions::default()
            })
        );
        assert_eq!(norm(r#"{"url":"/x"}"#, Body::None).unwrap().options, None);
    }

    #[test]
    fn null_fields_mean_defaults() {
        let s = norm(
            r#"{"url":"/x","headers":null,"key":null,"groupId":null,"budget":null,"lane":null,"kind":null,"method":null,"id":null,"body":null,"integrity":null}"#,
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
        assert_eq!(
            h,
            [
                ("location".to_string(), "/a".to_string()),
                ("x-many".to_string(), "1, 2".to_string())
            ]
        );
    }
}
