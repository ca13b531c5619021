//! References to an earlier job's answer in a job's request: `{{job:<id>.body.<path>}}`,
//! `{{job:<id>.header.<name>}}` and `{{job:<id>.status}}`, read here and filled in from the
//! answer once that job is done (see `engine::dependencies`).
//!
//! `<path>` is dot-separated object keys and array indices (`body.data.items.0.id`); `body`
//! alone is the whole body. In a JSON body, a string that is exactly one reference becomes the
//! value found (a number stays a number); a reference inside a longer string, a header value or
//! a non-JSON body becomes the value's text; in the URL, its text percent-encoded.

use crate::job::{Job, JobOutcome};
use crate::json::{self, Json};
use crate::substring;

const OPEN: &str = "{{job:";
const CLOSE: &str = "}}";
/// How a page's browser writes `{{` and `}}` in a URL's path (`new URL` encodes braces there).
const OPEN_ENCODED: &str = "%7B%7Bjob:";
const CLOSE_ENCODED: &str = "%7D%7D";

/// One reference to a part of an earlier job's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultRef<'t> {
    /// The whole reference as written, for messages.
    pub text: &'t str,
    /// The id of the job whose answer it names.
    pub job: &'t str,
    part: AnswerPart<'t>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum AnswerPart<'t> {
    Status,
    Header(&'t str),
    /// Dot-separated keys and indices; empty for the whole body.
    Body(&'t str),
}

/// Every reference in `text`, with where it starts, in order; an error says what to write
/// instead of a malformed one.
pub fn refs_in(text: &str) -> Result<Vec<(usize, ResultRef<'_>)>, String> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = substring::find(&text[from..], OPEN).map(|i| i + from) {
        let inner_start = at + OPEN.len();
        let Some(len) = substring::find(&text[inner_start..], CLOSE) else {
            return Err(format!(
                "'{}' has no closing '}}}}': write {{{{job:<id>.body.id}}}}",
                &text[at..].chars().take(60).collect::<String>()
            ));
        };
        let end = inner_start + len + CLOSE.len();
        found.push((
            at,
            parse(&text[at..end], &text[inner_start..end - CLOSE.len()])?,
        ));
        from = end;
    }
    Ok(found)
}

fn parse<'t>(text: &'t str, inner: &'t str) -> Result<ResultRef<'t>, String> {
    let bad = |why: &str| {
        format!(
            "'{text}' {why}: write {{{{job:<id>.body.<path>}}}}, {{{{job:<id>.header.<name>}}}} \
             or {{{{job:<id>.status}}}}, with the id enqueue returned"
        )
    };
    let (job, rest) = inner.split_once('.').unwrap_or((inner, ""));
    if job.is_empty() || job.contains(['{', '}', ' ']) {
        return Err(bad("names no job id"));
    }
    let part = match rest.split_once('.') {
        _ if rest == "status" => AnswerPart::Status,
        _ if rest == "body" => AnswerPart::Body(""),
        Some(("body", path)) if path.split('.').all(|s| !s.is_empty()) => AnswerPart::Body(path),
        Some(("header", name)) if !name.is_empty() => AnswerPart::Header(name),
        _ => return Err(bad("names no part of the answer")),
    };
    Ok(ResultRef { text, job, part })
}

/// `url` with the references a browser percent-encoded (`%7B%7Bjob:...%7D%7D`) written as
/// references again.
pub fn decode_refs_in_url(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(at) = find_ignoring_case(rest, OPEN_ENCODED) {
        out.push_str(&rest[..at]);
        out.push_str(OPEN);
        rest = &rest[at + OPEN_ENCODED.len()..];
        match find_ignoring_case(rest, CLOSE_ENCODED) {
            Some(end) => {
                out.push_str(&rest[..end]);
                out.push_str(CLOSE);
                rest = &rest[end + CLOSE_ENCODED.len()..];
            }
            None => break,
        }
    }
    out.push_str(rest);
    out
}

fn find_ignoring_case(haystack: &str, needle: &str) -> Option<usize> {
    (0..haystack.len().saturating_sub(needle.len() - 1)).find(|&i| {
        haystack
            .as_bytes()
            .get(i..i + needle.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
    })
}

impl ResultRef<'_> {
    /// The value this reference names in `answer`, or why there is none.
    fn value_in<'a>(&self, answer: &'a JobOutcome) -> Result<Json<'a>, String> {
        let lacks = |what: String| format!("{}: the answer of job {} {what}", self.text, self.job);
        match self.part {
            AnswerPart::Status => Ok(Json::U64(answer.status.into())),
            AnswerPart::Header(name) => answer
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| Json::Str(v.as_str().into()))
                .ok_or_else(|| lacks(format!("has no header '{name}'"))),
            AnswerPart::Body(path) => {
                let Ok(body) = json::parse(&answer.body) else {
                    if path.is_empty() {
                        return Ok(Json::Str(answer.body.as_str().into()));
                    }
                    return Err(lacks("has no JSON body".into()));
                };
                let mut value = Some(&body);
                for step in path.split('.').filter(|s| !s.is_empty()) {
                    value = match value {
                        Some(Json::Arr(items)) => {
                            step.parse().ok().and_then(|i: usize| items.get(i))
                        }
                        Some(other) => other.get(step),
                        None => None,
                    };
                }
                value
                    .cloned()
                    .ok_or_else(|| lacks(format!("has nothing at 'body.{path}'")))
            }
        }
    }
}

/// The text a value stands for inside a longer string, a header or a URL.
fn text_of(value: &Json, reference: &ResultRef) -> Result<String, String> {
    match value {
        Json::Str(s) => Ok(s.to_string()),
        Json::Null => Err(format!(
            "{}: the answer of job {} has null there, which is no text",
            reference.text, reference.job
        )),
        other => Ok(json::to_string(other)),
    }
}

/// `text` with each reference to job `dep` replaced by its value in `answer`'s text, passed
/// through `encode`; `None` when it refers to no part of `dep`'s answer.
fn fill_text(
    text: &str,
    dep: &str,
    answer: &JobOutcome,
    encode: fn(&str) -> String,
) -> Result<Option<String>, String> {
    let refs = refs_in(text)?;
    if !refs.iter().any(|(_, r)| r.job == dep) {
        return Ok(None);
    }
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for (at, r) in refs.iter().filter(|(_, r)| r.job == dep) {
        out.push_str(&text[copied..*at]);
        out.push_str(&encode(&text_of(&r.value_in(answer)?, r)?));
        copied = at + r.text.len();
    }
    out.push_str(&text[copied..]);
    Ok(Some(out))
}

/// Fills the references to job `dep` in `job`'s URL, headers and body from `dep`'s answer.
/// Returns whether anything was filled; an error names the reference the answer cannot fill.
pub fn fill_from(job: &mut Job, dep: &str, answer: &JobOutcome) -> Result<bool, String> {
    let mut filled = false;
    if let Some(url) = fill_text(&job.url, dep, answer, percent_encode)? {
        job.url = url;
        filled = true;
    }
    for (_, value) in job.headers.iter_mut() {
        if let Some(v) = fill_text(value, dep, answer, str::to_owned)? {
            *value = v;
            filled = true;
        }
    }
    let Some(body) = job.body.as_deref().filter(|b| substring::contains(b, OPEN)) else {
        return Ok(filled);
    };
    let new_body = match json::parse(body) {
        Ok(mut tree) => fill_json(&mut tree, dep, answer)?.then(|| json::to_string(&tree)),
        Err(_) => fill_text(body, dep, answer, str::to_owned)?,
    };
    if new_body.is_some() {
        job.body = new_body;
        filled = true;
    }
    Ok(filled)
}

/// Fills the references to `dep` in the strings of a JSON tree; whether any was.
fn fill_json<'a>(value: &mut Json<'a>, dep: &str, answer: &'a JobOutcome) -> Result<bool, String> {
    match value {
        Json::Str(s) => {
            let refs = refs_in(s)?;
            let whole = match refs.as_slice() {
                [(0, r)] if r.job == dep && r.text.len() == s.len() => Some(r.value_in(answer)?),
                _ => None,
            };
            if let Some(found) = whole {
                *value = found;
                return Ok(true);
            }
            match fill_text(s, dep, answer, str::to_owned)? {
                Some(text) => {
                    *value = Json::Str(text.into());
                    Ok(true)
                }
                None => Ok(false),
            }
        }
        Json::Arr(items) => {
            let mut any = false;
            for item in items {
                any |= fill_json(item, dep, answer)?;
            }
            Ok(any)
        }
        Json::Obj(members) => {
            let mut any = false;
            for (_, member) in members {
                any |= fill_json(member, dep, answer)?;
            }
            Ok(any)
        }
        _ => Ok(false),
    }
}

/// `text` as one URL path segment or query value: every byte but the unreserved ones encoded.
fn percent_encode(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            for c in [b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]] {
                out.push(char::from(c));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(body: &str) -> JobOutcome {
        JobOutcome {
            status: 201,
            headers: vec![("Location".into(), "/api/contacts/7".into())],
            body: body.into(),
        }
    }

    #[test]
    fn reads_the_three_forms_and_says_what_to_write() {
        let refs =
            refs_in("a{{job:c1.body.data.0.id}}b{{job:c2.status}}{{job:c1.header.ETag}}").unwrap();
        assert_eq!(refs.len(), 3);
        assert_eq!(refs[0].0, 1);
        assert_eq!(refs[0].1.job, "c1");
        assert_eq!(refs[1].1.part, AnswerPart::Status);
        assert_eq!(refs[2].1.part, AnswerPart::Header("ETag"));
        for bad in [
            "{{job:c1.id}}",
            "{{job:.body.id}}",
            "{{job:c1.body.}}",
            "{{job:c1.body.id",
        ] {
            let e = refs_in(bad).unwrap_err();
            assert!(e.contains("write {{job:"), "{bad}: {e}");
        }
    }

    #[test]
    fn fills_json_values_text_headers_and_the_url() {
        let mut job = crate::job::tests::job(crate::job::JobState::Queued);
        job.url = "https://api.example/c/{{job:c1.body.id}}?n={{job:c1.body.name}}".into();
        job.headers = vec![("X-Of".into(), "{{job:c1.header.location}}".into())];
        job.body = Some(
            r#"{"contact":"{{job:c1.body.id}}","note":"id {{job:c1.body.id}}","other":"{{job:c2.body.id}}"}"#
                .into(),
        );
        let filled = fill_from(&mut job, "c1", &answer(r#"{"id":7,"name":"A b/c"}"#)).unwrap();
        assert!(filled);
        assert_eq!(job.url, "https://api.example/c/7?n=A%20b%2Fc");
        assert_eq!(job.headers[0].1, "/api/contacts/7");
        assert_eq!(
            job.body.as_deref(),
            Some(r#"{"contact":7,"note":"id 7","other":"{{job:c2.body.id}}"}"#)
        );
        assert!(!fill_from(&mut job, "c3", &answer("{}")).unwrap());
    }

    #[test]
    fn a_missing_value_names_the_reference() {
        let mut job = crate::job::tests::job(crate::job::JobState::Queued);
        job.url = "https://api.example/c/{{job:c1.body.data.id}}".into();
        let e = fill_from(&mut job, "c1", &answer(r#"{"id":7}"#)).unwrap_err();
        assert_eq!(
            e,
            "{{job:c1.body.data.id}}: the answer of job c1 has nothing at 'body.data.id'"
        );
        let e = fill_from(&mut job, "c1", &answer("created")).unwrap_err();
        assert!(e.contains("has no JSON body"), "{e}");
    }

    #[test]
    fn browser_encoded_references_are_read_back() {
        assert_eq!(
            decode_refs_in_url("https://a.example/c/%7B%7Bjob:x.body.id%7d%7D/%7B"),
            "https://a.example/c/{{job:x.body.id}}/%7B"
        );
    }
}
