//! Header look-up as HTTP means it (names without case, repeated lines) and the lenient
//! structured-field (RFC 8941) reading the IETF fields need.

use super::values::parse_count;

/// Headers looked up the way HTTP means them: names case-insensitive, values without
/// surrounding whitespace. A response's, and a request's where the engine asks what a job
/// already names (its `Idempotency-Key`, its `If-Match`).
pub(crate) struct Headers<'a>(pub(crate) &'a [(String, String)]);

impl<'a> Headers<'a> {
    pub(crate) fn values<'n>(&self, name: &'n str) -> impl Iterator<Item = &'a str> + 'n
    where
        'a: 'n,
    {
        self.0
            .iter()
            .filter(move |(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }

    /// Whether any header's name begins with `prefix` (lowercase), without case.
    pub(super) fn any_named_from(&self, prefix: &str) -> bool {
        self.0.iter().any(|(n, _)| named_from(n, prefix))
    }

    /// Whether a header of that name is present.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.values(name).next().is_some()
    }

    /// For single-valued fields: a repeated header (proxies do that) is taken at its first
    /// readable occurrence instead of failing.
    pub(super) fn first_parsed<T>(
        &self,
        name: &str,
        parse: impl FnMut(&str) -> Option<T>,
    ) -> Option<T> {
        self.values(name).find_map(parse)
    }

    /// For list-valued fields: repeated lines are one list joined by commas (RFC 9110 §5.3).
    pub(super) fn joined(&self, name: &str) -> Option<String> {
        // Pushed one by one rather than `collect` and `join`: a `join` of `&str`s would be a
        // second copy of `join` in the wasm, beside the one for `String`s.
        let mut joined = String::new();
        for v in self.values(name).filter(|v| !v.is_empty()) {
            if !joined.is_empty() {
                joined.push_str(", ");
            }
            joined.push_str(v);
        }
        (!joined.is_empty()).then_some(joined)
    }
}

/// Whether the header name `name` begins with `prefix` (lowercase), without case.
pub(super) fn named_from(name: &str, prefix: &str) -> bool {
    name.trim()
        .as_bytes()
        .get(..prefix.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// One member of a structured-field list or dictionary (RFC 8941), read leniently: enough for
/// `"name";k=v` items, `100;w=60` items and `key=value` dictionary members.
#[derive(Debug)]
pub(super) struct Member<'a> {
    head: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

impl<'a> Member<'a> {
    pub(super) fn parse(s: &'a str) -> Option<Self> {
        let mut parts = split_outside_quotes(s, ';').into_iter();
        let head = parts.next()?.trim();
        if head.is_empty() {
            return None;
        }
        let mut params = Vec::new();
        for p in parts {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            if !k.trim().is_empty() {
                params.push((k.trim(), v.trim()));
            }
        }
        Some(Member { head, params })
    }

    /// The first parameter with this key (keys compared without case: servers vary).
    pub(super) fn param(&self, key: &str) -> Option<&'a str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| *v)
    }

    /// `key=value` when the member is a dictionary entry.
    pub(super) fn dict_entry(&self) -> Option<(&'a str, &'a str)> {
        if self.head.starts_with('"') {
            return None;
        }
        self.head.split_once('=').map(|(k, v)| (k.trim(), v.trim()))
    }

    /// An unquoted integer item (the older policy form).
    pub(super) fn bare_int(&self) -> Option<u64> {
        if self.dict_entry().is_some() {
            return None;
        }
        parse_count(self.head)
    }

    /// The item as a name: a string (quotes and escapes removed) or a token. Strings and tokens
    /// with the same text are the same name, as servers mix them up.
    pub(super) fn name(&self) -> Option<String> {
        if self.dict_entry().is_some() {
            return None;
        }
        sf_string(self.head)
    }
}

/// A string (quotes and escapes removed) or a bare token, as the same text.
pub(super) fn sf_string(v: &str) -> Option<String> {
    let Some(inner) = v.strip_prefix('"') else {
        return Some(v.to_owned());
    };
    let inner = inner.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' { chars.next()? } else { c });
    }
    Some(out)
}

pub(super) fn parse_list(field: &str) -> Vec<Member<'_>> {
    let mut members = Vec::new();
    for part in split_outside_quotes(field, ',') {
        members.extend(Member::parse(part));
    }
    members
}

/// Splits at `sep` except inside double-quoted strings, where a policy name may contain it.
pub(super) fn split_outside_quotes(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if in_quotes {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_quotes = false;
            }
        } else if c == '"' {
            in_quotes = true;
        } else if c == sep {
            parts.push(s.get(start..i).unwrap_or(""));
            start = i.saturating_add(c.len_utf8());
        }
    }
    parts.push(s.get(start..).unwrap_or(""));
    parts
}
