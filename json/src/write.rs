//! Writing values as serde_json writes them: [`ToJson`] and the helpers the derive calls.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;

use super::*;

/// An internally tagged enum's writing side, derived with [`ToJson`].
pub trait TaggedWrite {
    /// The value's variant name, as its tag says it.
    fn variant_name(&self) -> &'static str;

    /// The variant's fields, each as `,"key":value` ([`write_field`]).
    fn write_variant_fields(&self, out: &mut String);
}

/// A type written as JSON exactly as serde_json writes it.
pub trait ToJson {
    fn write_json(&self, out: &mut String);
}

/// The JSON text of a value.
pub fn to_string<T: ToJson + ?Sized>(value: &T) -> String {
    let mut out = String::new();
    value.write_json(&mut out);
    out
}

/// Writes a string literal with serde_json's escapes.
pub fn write_str(out: &mut String, s: &str) {
    out.push('"');
    let mut run = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        // `get`, as in `Parser::slice`: `run` and `i` are just after or at ASCII bytes.
        out.push_str(s.get(run..i).unwrap_or_default());
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        } else {
            out.push_str(escape);
        }
        run = i + 1;
    }
    out.push_str(s.get(run..).unwrap_or_default());
    out.push('"');
}

pub(super) fn write_integer(out: &mut String, negative: bool, n: u64) {
    if negative {
        out.push('-');
    }
    // The standard library's integer formatting is in the wasm anyway (messages use it);
    // itoa's faster writer would add a second copy of the digit table and its code.
    let _ = fmt::Write::write_fmt(out, format_args!("{n}"));
}

/// serde_json's float form: the shortest text that reads back the same; not finite is `null`.
pub(super) fn write_float(out: &mut String, f: f64) {
    if f.is_finite() {
        out.push_str(zmij::Buffer::new().format_finite(f));
    } else {
        out.push_str("null");
    }
}

/// A float for a message, like `{}` prints it in all but the form of huge and tiny magnitudes
/// (`1e21`, not 21 digits): `core`'s float formatting costs the wasm about 20 KB.
pub fn display_f64(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    let mut s = String::new();
    write_float(&mut s, f);
    if s.ends_with(".0") {
        s.truncate(s.len() - 2);
    }
    s
}

impl ToJson for f64 {
    fn write_json(&self, out: &mut String) {
        write_float(out, *self);
    }
}

impl ToJson for bool {
    fn write_json(&self, out: &mut String) {
        out.push_str(if *self { "true" } else { "false" });
    }
}

impl ToJson for str {
    fn write_json(&self, out: &mut String) {
        write_str(out, self);
    }
}

impl ToJson for String {
    fn write_json(&self, out: &mut String) {
        write_str(out, self);
    }
}

impl<T: ToJson + ?Sized> ToJson for &T {
    fn write_json(&self, out: &mut String) {
        (**self).write_json(out);
    }
}

impl<T: ToJson> ToJson for Option<T> {
    fn write_json(&self, out: &mut String) {
        match self {
            Some(v) => v.write_json(out),
            None => out.push_str("null"),
        }
    }
}

pub(super) fn write_seq<'t, T: ToJson + 't>(out: &mut String, items: impl Iterator<Item = &'t T>) {
    out.push('[');
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        item.write_json(out);
    }
    out.push(']');
}

impl<T: ToJson> ToJson for [T] {
    fn write_json(&self, out: &mut String) {
        write_seq(out, self.iter());
    }
}

impl<T: ToJson, const N: usize> ToJson for [T; N] {
    fn write_json(&self, out: &mut String) {
        write_seq(out, self.iter());
    }
}

impl<T: ToJson> ToJson for Vec<T> {
    fn write_json(&self, out: &mut String) {
        write_seq(out, self.iter());
    }
}

impl<T: ToJson> ToJson for VecDeque<T> {
    fn write_json(&self, out: &mut String) {
        write_seq(out, self.iter());
    }
}

impl<A: ToJson, B: ToJson> ToJson for (A, B) {
    fn write_json(&self, out: &mut String) {
        out.push('[');
        self.0.write_json(out);
        out.push(',');
        self.1.write_json(out);
        out.push(']');
    }
}

impl ToJson for Json<'_> {
    /// As a `serde_json::Value` holding it writes it: object members sorted by name, the last
    /// of repeated ones kept.
    fn write_json(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => b.write_json(out),
            Json::U64(n) => n.write_json(out),
            Json::I64(n) => n.write_json(out),
            Json::F64(f) => f.write_json(out),
            Json::Str(s) => write_str(out, s),
            Json::Arr(items) => items.write_json(out),
            Json::Obj(members) => {
                // Insertion sort keeps this small; bodies have few members.
                let mut sorted: Vec<&(Cow<str>, Json)> = Vec::with_capacity(members.len());
                for m in members {
                    match sorted.binary_search_by(|x| x.0.as_ref().cmp(m.0.as_ref())) {
                        Ok(i) => sorted[i] = m,
                        Err(i) => sorted.insert(i, m),
                    }
                }
                out.push('{');
                for (i, (k, v)) in sorted.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_str(out, k);
                    out.push(':');
                    v.write_json(out);
                }
                out.push('}');
            }
        }
    }
}

/// Writes `{"tag":"name"` — the start of an internally tagged variant; fields follow with
/// [`write_field`], then `}`.
pub fn open_tagged(out: &mut String, tag: &str, name: &str) {
    out.push_str("{\"");
    out.push_str(tag);
    out.push_str("\":\"");
    out.push_str(name);
    out.push('"');
}

/// Writes `,"key":value`.
pub fn write_field<T: ToJson + ?Sized>(out: &mut String, key: &str, value: &T) {
    out.push_str(",\"");
    out.push_str(key);
    out.push_str("\":");
    value.write_json(out);
}
