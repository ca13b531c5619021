//! A small JSON codec for the wasm: the service worker's and the page client's.
//!
//! Every type still derives serde's traits, and serde's JSON form stays the reference: the demo
//! server and the tests speak it. The worker and the page client, though, read and write their
//! records and messages through this module instead of `serde_json`. Serde's derives
//! monomorphize a streaming visitor per type (twice over: maps and sequences), which made up
//! more than a third of the worker's wasm and most of the client's; here there is one parser
//! into a [`Json`] tree, one writer, and per type a small reader and writer over its fields,
//! derived (`#[derive(ToJson, FromJson)]`) from the same declaration and `#[serde(...)]`
//! attributes as serde's traits: one list of fields and names per type, read by both.
//!
//! The output is byte for byte what `serde_json::to_string` writes for the same value (same
//! field order, escapes, integer and float forms), and the input rules are serde's: unknown
//! fields are ignored, a missing `Option` is `None`, `#[serde(default)]` fields and containers
//! fall back to their defaults, integers must fit their type. The tests of each type check
//! both directions against serde. Error messages follow serde's wording; type errors name no
//! line and column.
//!
//! The derives refuse what they cannot follow, at compile time:
//!
//! ```compile_fail
//! // serde would leave the field out; the derive refuses rather than write it.
//! #[derive(sluice_shared::json::ToJson)]
//! struct Cached {
//!     #[serde(skip)]
//!     cache: u32,
//! }
//! ```
//!
//! ```compile_fail
//! // An adjacently tagged enum's form is not the derive's (internally tagged ones are).
//! #[derive(sluice_shared::json::FromJson)]
//! #[serde(tag = "type", content = "data")]
//! enum Message {
//!     Ping,
//! }
//! ```
//!
//! ```compile_fail
//! // Only unit variants, written as strings.
//! #[derive(sluice_shared::json::ToJson)]
//! enum Shape {
//!     Circle { radius: u32 },
//! }
//! ```

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;

/// `#[derive(ToJson, FromJson)]`: a struct's or a unit enum's writer and reader, from its
/// declaration and its `#[serde(...)]` attributes; any serde attribute they cannot follow is
/// a compile error (see the `sluice-json-derive` crate for the ones they do), so that serde
/// and this codec never silently disagree about a type (the module's examples).
pub use sluice_json_derive::{FromJson, ToJson};

/// A parsed JSON value. Strings borrow from the text unless they had escapes.
#[derive(Clone, Debug, PartialEq)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    /// A non-negative integer that fits `u64`.
    U64(u64),
    /// A negative integer that fits `i64`.
    I64(i64),
    /// Any other number.
    F64(f64),
    Str(Cow<'a, str>),
    Arr(Vec<Json<'a>>),
    /// Members in the order written (duplicates kept: readers refuse them).
    Obj(Vec<(Cow<'a, str>, Json<'a>)>),
}

/// Why a text or value could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl Json<'_> {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The member named `key` of an object; the last one if repeated, as in a
    /// `serde_json::Value`.
    pub fn get(&self, key: &str) -> Option<&Self> {
        match self {
            Json::Obj(members) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// What serde calls this value in an "invalid type" error.
    fn unexpected(&self) -> String {
        match self {
            Json::Null => "null".into(),
            Json::Bool(b) => format!("boolean `{b}`"),
            Json::U64(n) => format!("integer `{n}`"),
            Json::I64(n) => format!("integer `{n}`"),
            Json::F64(f) => {
                let mut s = String::from("floating point `");
                write_float(&mut s, *f);
                s.push('`');
                s
            }
            Json::Str(s) => format!("string \"{s}\""),
            Json::Arr(_) => "sequence".into(),
            Json::Obj(_) => "map".into(),
        }
    }

    pub fn invalid_type(&self, expected: &str) -> Error {
        Error(format!(
            "invalid type: {}, expected {expected}",
            self.unexpected()
        ))
    }
}

// ----- reading -----------------------------------------------------------------------------

/// Parses one JSON text (surrounding whitespace allowed), with serde_json's syntax rules and
/// messages.
pub fn parse(text: &str) -> Result<Json<'_>, Error> {
    let mut p = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        depth: 0,
        values: 0,
    };
    let value = p.value()?;
    p.skip_ws();
    if p.pos < p.bytes.len() {
        return Err(p.error_at(p.pos + 1, "trailing characters"));
    }
    Ok(value)
}

/// Parses a text and reads it as `T`.
pub fn from_str<T: FromJson>(text: &str) -> Result<T, Error> {
    T::from_json(&parse(text)?)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: u32,
    values: usize,
}

/// serde_json's nesting limit.
const MAX_DEPTH: u32 = 128;

/// Most values one text may hold. A value in the tree takes 16 bytes or more of the wasm's
/// memory against as little as 2 of text (`0,`), so a message at the size limit could become a
/// tree of 16 million values and hundreds of MiB, and an allocation that fails traps the
/// worker. Two million is far above what the largest real message holds (10,000 jobs of a
/// dozen fields each) and bounds the tree near 32 MiB. serde_json has no such limit; this is
/// the one place the two disagree.
pub const MAX_VALUES: usize = 2_000_000;

impl<'a> Parser<'a> {
    /// An error at the byte *before* `index` (serde_json counts columns that way).
    fn error_at(&self, index: usize, message: &str) -> Error {
        let index = index.min(self.bytes.len());
        let before = &self.bytes[..index];
        let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
        let column = match before.iter().rposition(|&b| b == b'\n') {
            Some(nl) => index - nl - 1,
            None => index,
        };
        Error(format!("{message} at line {line} column {column}"))
    }

    /// An error about the byte at `pos` (not consumed yet).
    fn peek_error(&self, message: &str) -> Error {
        self.error_at(self.pos + 1, message)
    }

    /// The text from `start` to the current position; both are just after or at an ASCII
    /// byte (a quote, a backslash, an escape), so always on character boundaries. `get`
    /// rather than indexing: indexing's panic for a non-boundary brings core's message
    /// formatting for it into the wasm (about 4 KB), for a case that cannot happen.
    fn slice(&self, start: usize) -> &'a str {
        self.text.get(start..self.pos).unwrap_or_default()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn value(&mut self) -> Result<Json<'a>, Error> {
        self.values += 1;
        if self.values > MAX_VALUES {
            return Err(self.peek_error("too many values (at most 2000000 in one text)"));
        }
        self.skip_ws();
        let Some(b) = self.peek() else {
            return Err(self.error_at(self.pos, "EOF while parsing a value"));
        };
        match b {
            b'n' => self.ident(b"null", Json::Null),
            b't' => self.ident(b"true", Json::Bool(true)),
            b'f' => self.ident(b"false", Json::Bool(false)),
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => {
                self.pos += 1;
                Ok(Json::Str(self.string()?))
            }
            b'[' | b'{' => {
                self.depth += 1;
                if self.depth >= MAX_DEPTH {
                    return Err(self.peek_error("recursion limit exceeded"));
                }
                self.pos += 1;
                let v = if b == b'[' {
                    self.array()
                } else {
                    self.object()
                };
                self.depth -= 1;
                v
            }
            _ => Err(self.peek_error("expected value")),
        }
    }

    fn ident(&mut self, word: &[u8], value: Json<'a>) -> Result<Json<'a>, Error> {
        for &expected in word {
            match self.peek() {
                None => return Err(self.error_at(self.pos, "EOF while parsing a value")),
                Some(b) if b == expected => self.pos += 1,
                Some(_) => return Err(self.error_at(self.pos + 1, "expected ident")),
            }
        }
        Ok(value)
    }

    fn array(&mut self) -> Result<Json<'a>, Error> {
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Json::Arr(items));
        }
        loop {
            items.push(self.value()?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.peek() == Some(b']') {
                        return Err(self.peek_error("trailing comma"));
                    }
                }
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Json::Arr(items));
                }
                Some(_) => return Err(self.peek_error("expected `,` or `]`")),
                None => return Err(self.error_at(self.pos, "EOF while parsing a list")),
            }
        }
    }

    fn object(&mut self) -> Result<Json<'a>, Error> {
        let mut members = Vec::with_capacity(8);
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Json::Obj(members));
        }
        loop {
            match self.peek() {
                Some(b'"') => self.pos += 1,
                Some(_) => return Err(self.peek_error("key must be a string")),
                None => return Err(self.error_at(self.pos, "EOF while parsing an object")),
            }
            let key = self.string()?;
            self.skip_ws();
            match self.peek() {
                Some(b':') => self.pos += 1,
                Some(_) => return Err(self.peek_error("expected `:`")),
                None => return Err(self.error_at(self.pos, "EOF while parsing an object")),
            }
            let value = self.value()?;
            members.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.peek() == Some(b'}') {
                        return Err(self.peek_error("trailing comma"));
                    }
                }
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Json::Obj(members));
                }
                Some(_) => return Err(self.peek_error("expected `,` or `}`")),
                None => return Err(self.error_at(self.pos, "EOF while parsing an object")),
            }
        }
    }

    /// The rest of a string whose opening quote was consumed.
    fn string(&mut self) -> Result<Cow<'a, str>, Error> {
        let start = self.pos;
        let mut owned: Option<String> = None;
        let mut run = start;
        loop {
            // Skip plain characters in one tight loop: most strings have no escapes.
            let plain = self.bytes[self.pos..]
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20);
            let Some(skip) = plain else {
                self.pos = self.bytes.len();
                return Err(self.error_at(self.pos, "EOF while parsing a string"));
            };
            self.pos += skip;
            let b = self.bytes[self.pos];
            match b {
                b'"' => {
                    let tail = self.slice(run);
                    self.pos += 1;
                    return Ok(match owned {
                        None => Cow::Borrowed(tail),
                        Some(mut s) => {
                            s.push_str(tail);
                            Cow::Owned(s)
                        }
                    });
                }
                b'\\' => {
                    owned
                        .get_or_insert_with(String::new)
                        .push_str(self.slice(run));
                    self.pos += 1;
                    let Some(e) = self.peek() else {
                        return Err(self.error_at(self.pos, "EOF while parsing a string"));
                    };
                    self.pos += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\x08',
                        b'f' => '\x0c',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return Err(self.error_at(self.pos, "invalid escape")),
                    };
                    owned.get_or_insert_with(String::new).push(c);
                    run = self.pos;
                }
                // A control character: the only other byte the search stops at.
                _ => {
                    return Err(self.error_at(
                        self.pos + 1,
                        "control character (\\u0000-\\u001F) found while parsing a string",
                    ))
                }
            }
        }
    }

    fn hex4(&mut self) -> Result<u16, Error> {
        let Some(digits) = self.bytes.get(self.pos..self.pos + 4) else {
            self.pos = self.bytes.len();
            return Err(self.error_at(self.pos, "EOF while parsing a string"));
        };
        self.pos += 4;
        let mut n: u16 = 0;
        for &b in digits {
            let digit = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => return Err(self.error_at(self.pos, "invalid escape")),
            };
            n = (n << 4) | u16::from(digit);
        }
        Ok(n)
    }

    /// After `\u`: one code point, joining a surrogate pair.
    fn unicode_escape(&mut self) -> Result<char, Error> {
        let first = self.hex4()?;
        let code = match first {
            0xDC00..=0xDFFF => {
                return Err(self.error_at(self.pos, "lone leading surrogate in hex escape"))
            }
            0xD800..=0xDBFF => {
                for expected in [b'\\', b'u'] {
                    match self.peek() {
                        None => return Err(self.error_at(self.pos, "EOF while parsing a string")),
                        Some(b) => {
                            self.pos += 1;
                            if b != expected {
                                return Err(self.error_at(self.pos, "unexpected end of hex escape"));
                            }
                        }
                    }
                }
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(self.error_at(self.pos, "lone leading surrogate in hex escape"));
                }
                (((u32::from(first) - 0xD800) << 10) | (u32::from(second) - 0xDC00)) + 0x1_0000
            }
            n => u32::from(n),
        };
        char::from_u32(code).ok_or_else(|| self.error_at(self.pos, "invalid unicode code point"))
    }

    /// serde_json's number grammar and conversion (without its `float_roundtrip` feature).
    fn number(&mut self) -> Result<Json<'a>, Error> {
        let positive = if self.peek() == Some(b'-') {
            self.pos += 1;
            false
        } else {
            true
        };
        let mut significand: u64 = 0;
        let mut exponent: i32 = 0;
        let mut overflowed = false;
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(self.peek_error("invalid number"));
                }
            }
            Some(b'1'..=b'9') => {
                while let Some(c @ b'0'..=b'9') = self.peek() {
                    self.pos += 1;
                    let digit = u64::from(c - b'0');
                    if overflowed {
                        exponent += 1;
                    } else if let Some(n) = significand
                        .checked_mul(10)
                        .and_then(|n| n.checked_add(digit))
                    {
                        significand = n;
                    } else {
                        overflowed = true;
                        exponent += 1;
                    }
                }
            }
            None => return Err(self.error_at(self.pos, "EOF while parsing a value")),
            Some(_) => return Err(self.error_at(self.pos + 1, "invalid number")),
        }
        let mut float = overflowed;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            float = true;
            let mut digits = 0;
            while let Some(c @ b'0'..=b'9') = self.peek() {
                self.pos += 1;
                digits += 1;
                if overflowed {
                    continue;
                }
                let digit = u64::from(c - b'0');
                match significand
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(digit))
                {
                    Some(n) => {
                        significand = n;
                        exponent -= 1;
                    }
                    None => overflowed = true,
                }
            }
            if digits == 0 {
                return Err(match self.peek() {
                    Some(_) => self.peek_error("invalid number"),
                    None => self.error_at(self.pos, "EOF while parsing a value"),
                });
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            float = true;
            let positive_exp = match self.peek() {
                Some(b'+') => {
                    self.pos += 1;
                    true
                }
                Some(b'-') => {
                    self.pos += 1;
                    false
                }
                _ => true,
            };
            match self.peek() {
                Some(b'0'..=b'9') => {}
                None => return Err(self.error_at(self.pos, "EOF while parsing a value")),
                Some(_) => return Err(self.error_at(self.pos + 1, "invalid number")),
            }
            let mut exp: i32 = 0;
            while let Some(c @ b'0'..=b'9') = self.peek() {
                self.pos += 1;
                match exp
                    .checked_mul(10)
                    .and_then(|e| e.checked_add(i32::from(c - b'0')))
                {
                    Some(e) => exp = e,
                    None => {
                        if significand != 0 && positive_exp {
                            return Err(self.error_at(self.pos, "number out of range"));
                        }
                        while let Some(b'0'..=b'9') = self.peek() {
                            self.pos += 1;
                        }
                        return Ok(Json::F64(if positive { 0.0 } else { -0.0 }));
                    }
                }
            }
            exponent = if positive_exp {
                exponent.saturating_add(exp)
            } else {
                exponent.saturating_sub(exp)
            };
        }
        if !float {
            return Ok(if positive {
                Json::U64(significand)
            } else {
                let neg = (significand as i64).wrapping_neg();
                // `-0` and integers below i64::MIN are floats, as in serde_json.
                if neg >= 0 {
                    Json::F64(-(significand as f64))
                } else {
                    Json::I64(neg)
                }
            });
        }
        let f = f64_from_parts(significand, exponent)
            .ok_or_else(|| self.error_at(self.pos, "number out of range"))?;
        Ok(Json::F64(if positive { f } else { -f }))
    }
}

/// `significand * 10^exponent` the way serde_json computes it: one multiplication or division
/// by a power of ten. `None` when it overflows.
fn f64_from_parts(significand: u64, mut exponent: i32) -> Option<f64> {
    let mut f = significand as f64;
    loop {
        let e = exponent.unsigned_abs();
        if e <= 308 {
            let pow = pow10(e);
            if exponent >= 0 {
                f *= pow;
                if f.is_infinite() {
                    return None;
                }
            } else {
                f /= pow;
            }
            return Some(f);
        }
        if f == 0.0 {
            return Some(f);
        }
        if exponent >= 0 {
            return None;
        }
        f /= 1e308;
        exponent += 308;
    }
}

/// 10^e for e <= 308, correctly rounded, as in serde_json's table (numbers in job bodies pass
/// through [`ToJson for Json`](Json) unchanged only if both read them alike). Computed rather
/// than tabled: the 309 floats of a table cost the wasm 2.7 KB gzipped, this loop about 0.1 KB,
/// and a number rarely has an exponent above 22. The test `pow10_is_correctly_rounded` checks
/// every exponent.
fn pow10(e: u32) -> f64 {
    // 5^e as `mantissa * 2^shift`: a 128-bit mantissa keeps far more bits than the 53 the
    // float needs, so its truncation never decides the rounding (the test checks that).
    let mut mantissa: u128 = 1;
    let mut shift: u32 = 0;
    let mut sticky = false;
    for _ in 0..e {
        if mantissa >> 125 != 0 {
            sticky |= mantissa & 7 != 0;
            mantissa >>= 3;
            shift += 3;
        }
        mantissa *= 5;
    }
    // `as` rounds to nearest, ties to even; bits shifted out only break a tie. Then times
    // 2^(shift + e), exactly, to make 10^e = 5^e * 2^e.
    let rounded = (mantissa | u128::from(sticky)) as f64;
    rounded * f64::from_bits(u64::from(1023 + shift + e) << 52)
}

/// A type read from a [`Json`] value with serde's rules.
pub trait FromJson: Sized {
    fn from_json(v: &Json) -> Result<Self, Error>;

    /// Whether a struct field of this type may be absent: only an `Option` may (it is then
    /// `None`); any other absent field is serde's "missing field" error.
    const OPTIONAL: bool = false;
}

/// Reads a struct's fields for [`FromJson`]'s derive, keeping the first error.
///
/// Each field yields a value even when it cannot be read (a [`Placeholder`]; fields after the
/// first error are not looked at), and [`Fields::finish`] then returns that error in place of
/// the struct. So the struct is built in one expression without a `?` per field: with one,
/// every field's exit dropped the fields read before it, a sequence of drops per struct and per
/// field in the wasm.
pub struct Fields<'v, 'a> {
    members: &'v [(Cow<'a, str>, Json<'a>)],
    error: Option<Error>,
}

impl<'v, 'a> Fields<'v, 'a> {
    /// The fields of an object; `expected` names the struct in the error for anything else,
    /// which [`Fields::finish`] returns (no field is read then). Not a `Result` itself: one
    /// error exit per struct reader, not two.
    pub fn of(v: &'v Json<'a>, expected: &str) -> Self {
        match members(v, expected) {
            Ok(members) => Fields::from_members(members),
            Err(e) => Fields {
                members: &[],
                error: Some(e),
            },
        }
    }

    /// The fields among an object's members.
    pub fn from_members(members: &'v [(Cow<'a, str>, Json<'a>)]) -> Self {
        Fields {
            members,
            error: None,
        }
    }

    /// The value of `key`, or `None` when it is absent or reading failed already. An absent
    /// field that is not `optional` fails the reading, as a repeated key does. Not generic,
    /// so that the generic readers below stay small.
    fn lookup(&mut self, key: &str, optional: bool) -> Option<&'v Json<'a>> {
        if self.error.is_some() {
            return None;
        }
        match unique(self.members, key) {
            Ok(Some(v)) => return Some(v),
            Ok(None) if optional => {}
            Ok(None) => self.fail(Error(format!("missing field `{key}`"))),
            Err(e) => self.fail(e),
        }
        None
    }

    /// Keeps the first error. Not inlined: every generic reader calls it.
    #[inline(never)]
    fn fail(&mut self, error: Error) {
        if self.error.is_none() {
            self.error = Some(error);
        }
    }

    /// A field: present, or absent (an error unless `T` is an `Option`).
    pub fn field<T: FromJson + Placeholder>(&mut self, key: &str) -> T {
        match self.lookup(key, T::OPTIONAL) {
            Some(v) => self.read(v),
            // An absent `Option` is its placeholder, its `Default`: `None`.
            None => T::placeholder(),
        }
    }

    /// A field with a fallback for when it is absent.
    pub fn field_or<T: FromJson + Placeholder>(&mut self, key: &str, fallback: T) -> T {
        match self.lookup(key, true) {
            Some(v) => self.read(v),
            None => fallback,
        }
    }

    /// A present field's value. One body per type for both readers above.
    fn read<T: FromJson + Placeholder>(&mut self, v: &Json) -> T {
        T::from_json(v).unwrap_or_else(|e| {
            self.fail(e);
            T::placeholder()
        })
    }

    /// serde's `deny_unknown_fields`: a member not named in `known` fails the reading.
    pub fn deny_unknown(&mut self, known: &[&str]) {
        if let Err(e) = deny_unknown(self.members, known) {
            self.fail(e);
        }
    }

    /// The first error, if a field could not be read.
    pub fn finish(self) -> Result<(), Error> {
        match self.error {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

/// What a field holds while [`Fields`] reads a struct whose reading has failed: never seen.
/// Any `Default` type has one; a field type without a `Default` of its own names one.
pub trait Placeholder {
    fn placeholder() -> Self;
}

impl<T: Default> Placeholder for T {
    fn placeholder() -> Self {
        T::default()
    }
}

/// The members of an object, or serde's error for anything else.
pub fn members<'v, 'a>(
    v: &'v Json<'a>,
    expected: &str,
) -> Result<&'v [(Cow<'a, str>, Json<'a>)], Error> {
    match v {
        Json::Obj(m) => Ok(m),
        other => Err(other.invalid_type(expected)),
    }
}

/// The one member named `key`, refusing duplicates like serde.
pub fn unique<'v, 'a>(
    members: &'v [(Cow<'a, str>, Json<'a>)],
    key: &str,
) -> Result<Option<&'v Json<'a>>, Error> {
    let mut found = None;
    for (k, v) in members {
        if k == key {
            if found.is_some() {
                return Err(Error(format!("duplicate field `{key}`")));
            }
            found = Some(v);
        }
    }
    Ok(found)
}

/// serde's `deny_unknown_fields`: the first member whose key is not among `known` is an error.
pub fn deny_unknown(members: &[(Cow<str>, Json)], known: &[&str]) -> Result<(), Error> {
    match members.iter().find(|(k, _)| !known.contains(&k.as_ref())) {
        Some((key, _)) => Err(Error(format!(
            "unknown field `{key}`, expected {}",
            one_of(known)
        ))),
        None => Ok(()),
    }
}

/// An internally tagged enum's variant name (`{"<tag>": "name", ...}`) and a reader for the
/// variant's fields, which stand in the same object. `expected` names the enum in the error for
/// anything but an object.
pub fn tagged<'v, 'a>(
    v: &'v Json<'a>,
    tag: &str,
    expected: &str,
) -> Result<(&'v str, Fields<'v, 'a>), Error> {
    let members = members(v, expected)?;
    match unique(members, tag)? {
        Some(Json::Str(name)) => Ok((name, Fields::from_members(members))),
        Some(other) => Err(other.invalid_type("variant identifier")),
        None => Err(Error(format!("missing field `{tag}`"))),
    }
}

/// serde's error for a tag that names none of `variants`.
pub fn unknown_variant(found: &str, variants: &[&str]) -> Error {
    Error(format!(
        "unknown variant `{found}`, expected {}",
        one_of(variants)
    ))
}

/// serde's words for the names it expected: "`a`", "`a` or `b`", "one of `a`, `b`, `c`".
fn one_of(names: &[&str]) -> String {
    let mut out = String::new();
    if names.len() > 2 {
        out.push_str("one of ");
    }
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push_str(if names.len() == 2 { " or " } else { ", " });
        }
        out.push('`');
        out.push_str(name);
        out.push('`');
    }
    out
}

/// The JSON names of a struct's fields, in declaration order (implemented by the derive of
/// [`FromJson`]):
/// for a reader that accepts a struct's fields among others of its own.
/// An internally tagged enum's reading side, derived with [`FromJson`]: its tag, every
/// variant's name (in declaration order) and a reader of one variant's fields, for a message
/// whose tag stands beside fields of its own (a request's `requestId`).
pub trait TaggedRead: Sized {
    /// The member naming the variant (`type`, `code`).
    const TAG: &'static str;
    /// Every variant's name, as the tag says it.
    const VARIANTS: &'static [&'static str];

    /// Variant `name` read from `r`'s members; `None` when `name` is none of [`Self::VARIANTS`].
    /// A field that cannot be read is `r`'s error ([`Fields::finish`]).
    fn read_variant(name: &str, r: &mut Fields<'_, '_>) -> Option<Self>;
}

/// An internally tagged enum's writing side, derived with [`ToJson`].
pub trait TaggedWrite {
    /// The value's variant name, as its tag says it.
    fn variant_name(&self) -> &'static str;

    /// The variant's fields, each as `,"key":value` ([`write_field`]).
    fn write_variant_fields(&self, out: &mut String);
}

pub trait StructFields {
    const FIELDS: &'static [&'static str];
}

impl FromJson for String {
    fn from_json(v: &Json) -> Result<Self, Error> {
        match v {
            Json::Str(s) => Ok(s.to_string()),
            other => Err(other.invalid_type("a string")),
        }
    }
}

impl FromJson for bool {
    fn from_json(v: &Json) -> Result<Self, Error> {
        match v {
            Json::Bool(b) => Ok(*b),
            other => Err(other.invalid_type("a boolean")),
        }
    }
}

impl FromJson for f64 {
    fn from_json(v: &Json) -> Result<Self, Error> {
        match v {
            Json::U64(n) => Ok(*n as f64),
            Json::I64(n) => Ok(*n as f64),
            Json::F64(f) => Ok(*f),
            other => Err(other.invalid_type("f64")),
        }
    }
}

/// An integer of any width: `name` is serde's name for the type, `min` and `max` its range.
fn integer(v: &Json, name: &str, min: i64, max: u64) -> Result<i128, Error> {
    let n = match v {
        Json::U64(n) => i128::from(*n),
        Json::I64(n) => i128::from(*n),
        other => return Err(other.invalid_type(name)),
    };
    if n < i128::from(min) || n > i128::from(max) {
        return Err(Error(format!(
            "invalid value: {}, expected {name}",
            v.unexpected()
        )));
    }
    Ok(n)
}

macro_rules! json_integers {
    ($($t:ident),*) => {$(
        impl FromJson for $t {
            fn from_json(v: &Json) -> Result<Self, Error> {
                integer(v, stringify!($t), $t::MIN as i64, $t::MAX as u64).map(|n| n as $t)
            }
        }

        impl ToJson for $t {
            fn write_json(&self, out: &mut String) {
                #[allow(unused_comparisons)]
                let negative = *self < 0;
                let n = if negative {
                    (*self as i64).unsigned_abs()
                } else {
                    *self as u64
                };
                write_integer(out, negative, n);
            }
        }
    )*};
}

json_integers!(u16, u32, u64, usize, i64);

impl<T: FromJson> FromJson for Option<T> {
    fn from_json(v: &Json) -> Result<Self, Error> {
        match v {
            Json::Null => Ok(None),
            other => T::from_json(other).map(Some),
        }
    }

    const OPTIONAL: bool = true;
}

fn items<'v, 'a>(v: &'v Json<'a>) -> Result<&'v [Json<'a>], Error> {
    match v {
        Json::Arr(items) => Ok(items),
        other => Err(other.invalid_type("a sequence")),
    }
}

impl<T: FromJson> FromJson for Vec<T> {
    /// A plain loop: `collect` into a `Result` is several generic functions per element type
    /// in the wasm.
    fn from_json(v: &Json) -> Result<Self, Error> {
        let items = items(v)?;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(T::from_json(item)?);
        }
        Ok(out)
    }
}

impl<T: FromJson> FromJson for VecDeque<T> {
    /// Through a `Vec`, whose buffer the `VecDeque` takes over.
    fn from_json(v: &Json) -> Result<Self, Error> {
        Vec::from_json(v).map(VecDeque::from)
    }
}

impl<A: FromJson, B: FromJson> FromJson for (A, B) {
    fn from_json(v: &Json) -> Result<Self, Error> {
        let items = items(v).map_err(|_| v.invalid_type("a tuple of size 2"))?;
        let short = || {
            Error(format!(
                "invalid length {}, expected a tuple of size 2",
                items.len()
            ))
        };
        // In serde's order: each element as it comes, then the length.
        let a = A::from_json(items.first().ok_or_else(short)?)?;
        let b = B::from_json(items.get(1).ok_or_else(short)?)?;
        if items.len() > 2 {
            return Err(Error("trailing characters".into()));
        }
        Ok((a, b))
    }
}

// ----- writing -----------------------------------------------------------------------------

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

fn write_integer(out: &mut String, negative: bool, n: u64) {
    if negative {
        out.push('-');
    }
    // The standard library's integer formatting is in the wasm anyway (messages use it);
    // itoa's faster writer would add a second copy of the digit table and its code.
    let _ = fmt::Write::write_fmt(out, format_args!("{n}"));
}

/// serde_json's float form: the shortest text that reads back the same; not finite is `null`.
fn write_float(out: &mut String, f: f64) {
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

fn write_seq<'t, T: ToJson + 't>(out: &mut String, items: impl Iterator<Item = &'t T>) {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Checks that `value` is written exactly as serde_json writes it and reads back equal.
    pub fn same_as_serde<T>(value: &T)
    where
        T: ToJson + FromJson + serde::Serialize + serde::de::DeserializeOwned + PartialEq,
        T: fmt::Debug,
    {
        let ours = to_string(value);
        let theirs = serde_json::to_string(value).unwrap();
        assert_eq!(ours, theirs);
        let back: T = from_str(&theirs).unwrap();
        assert_eq!(&back, value);
        let back: T = serde_json::from_str(&ours).unwrap();
        assert_eq!(&back, value);
    }

    /// Checks that a text reads the same as serde reads it, or fails where serde fails.
    pub fn reads_like_serde<T>(text: &str)
    where
        T: FromJson + serde::de::DeserializeOwned + PartialEq + fmt::Debug,
    {
        let ours = from_str::<T>(text);
        let theirs = serde_json::from_str::<T>(text);
        match (ours, theirs) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
            (Err(a), Err(b)) => {
                let b = b.to_string();
                assert!(b.starts_with(&a.0), "{text}: ours {a:?}, serde_json {b:?}");
            }
            (a, b) => panic!("{text}: ours {a:?}, serde_json {b:?}"),
        }
    }

    /// The derive's attributes that no wire type uses yet, checked against serde's all the
    /// same: a rule applied to every name, a renamed field, a default from a function and
    /// from the type, unknown fields refused.
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize, ToJson, FromJson)]
    #[serde(rename_all = "SCREAMING-KEBAB-CASE", deny_unknown_fields)]
    struct EveryFieldAttribute {
        #[serde(rename = "renamed")]
        plain: String,
        #[serde(default = "seven")]
        from_path: u32,
        #[serde(default)]
        from_type: Option<bool>,
    }

    fn seven() -> u32 {
        7
    }

    /// A struct's own `Default` for its absent fields, but a field's `default` wins.
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize, ToJson, FromJson)]
    #[serde(default)]
    struct StructDefault {
        from_struct: u32,
        #[serde(default)]
        from_type: u32,
    }

    impl Default for StructDefault {
        fn default() -> Self {
            StructDefault {
                from_struct: 3,
                from_type: 4,
            }
        }
    }

    /// Two variants: serde words the names it expected as "`a` or `b`".
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize, ToJson, FromJson)]
    #[serde(rename_all = "snake_case")]
    enum TwoVariants {
        FirstOne,
        #[serde(rename = "other")]
        Second,
    }

    #[test]
    fn derived_attributes_read_and_write_as_serde_does() {
        same_as_serde(&EveryFieldAttribute {
            plain: "p".into(),
            from_path: 1,
            from_type: Some(true),
        });
        for text in [
            r#"{"renamed":"p"}"#,
            r#"{"renamed":"p","FROM-PATH":2,"FROM-TYPE":false}"#,
            r#"{"plain":"p"}"#,
            r#"{"renamed":"p","extra":1}"#,
            r#"{"FROM-PATH":2}"#,
        ] {
            reads_like_serde::<EveryFieldAttribute>(text);
        }
        same_as_serde(&StructDefault::default());
        for text in [r#"{}"#, r#"{"fromStruct":1}"#, r#"{"from_struct":1}"#] {
            reads_like_serde::<StructDefault>(text);
        }
        assert_eq!(
            from_str::<StructDefault>("{}"),
            Ok(StructDefault {
                from_struct: 3,
                from_type: 0
            })
        );
        same_as_serde(&TwoVariants::FirstOne);
        same_as_serde(&TwoVariants::Second);
        for text in [r#""first_one""#, r#""other""#, r#""Second""#, "1"] {
            reads_like_serde::<TwoVariants>(text);
        }
        let unknown = from_str::<TwoVariants>(r#""Second""#).expect_err("not a name");
        assert_eq!(
            unknown.0,
            "unknown variant `Second`, expected `first_one` or `other`"
        );
    }

    #[test]
    fn a_text_of_more_values_than_the_limit_is_refused_before_its_tree_grows() {
        let at_limit = format!("[{}0]", "0,".repeat(MAX_VALUES - 2));
        assert!(parse(&at_limit).is_ok());
        let over = format!("[{}0]", "0,".repeat(MAX_VALUES - 1));
        let error = parse(&over).expect_err("over the limit");
        assert!(error.0.starts_with("too many values"), "{error:?}");
    }

    #[test]
    fn pow10_is_correctly_rounded() {
        for e in 0..=308 {
            let exact: f64 = format!("1e{e}").parse().unwrap();
            assert_eq!(pow10(e).to_bits(), exact.to_bits(), "10^{e}");
        }
    }

    #[test]
    fn values_parse_like_serde_json() {
        let texts = [
            "null",
            " true ",
            "false",
            "0",
            "-0",
            "12345678901234567890",
            "123456789012345678901234",
            "-9223372036854775808",
            "-9223372036854775809",
            "1.5",
            "-0.98",
            "3.7000000000000006",
            "1e3",
            "1E-7",
            "2.5e+2",
            "0.1",
            "123.456e-5",
            "\"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"",
            "\"é😀\"",
            "[1, [2, []], {}]",
            "{\"a\": {\"b\": [null]}, \"c\": \"d\"}",
        ];
        for text in texts.into_iter().chain([
            "{\"b\":1,\"a\":{\"z\":[1.5,-2,\"\\n\"],\"y\":null},\"b\":true,\"\":0}",
            "1e300",
            "-0.0",
            "100000000000000000000000",
        ]) {
            let ours = parse(text).unwrap();
            let theirs: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(to_value(&ours), theirs, "{text}");
            assert_eq!(to_string(&ours), theirs.to_string(), "{text}");
            assert_eq!(
                ours.get("b").map(to_value),
                theirs.get("b").cloned(),
                "{text}"
            );
        }
    }

    fn to_value(v: &Json) -> serde_json::Value {
        use serde_json::Value;
        match v {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::U64(n) => Value::from(*n),
            Json::I64(n) => Value::from(*n),
            Json::F64(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Json::Str(s) => Value::String(s.to_string()),
            Json::Arr(items) => Value::Array(items.iter().map(to_value).collect()),
            Json::Obj(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (k.to_string(), to_value(v)))
                    .collect(),
            ),
        }
    }

    #[test]
    fn syntax_errors_match_serde_json() {
        let texts = [
            "",
            "   ",
            "{",
            "[1,]",
            "[1 2]",
            "{\"a\" 1}",
            "{\"a\":1,}",
            "{1:2}",
            "nul",
            "nulx",
            "tru",
            "01",
            "1.",
            "1.e5",
            "1e",
            "1e+",
            "-",
            "- 1",
            "\"abc",
            "\"a\\x\"",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "\"\\u12\"",
            "\"a\nb\"",
            "1 2",
            "{} x",
            "\n\n  [1,\n  }",
            "1e400",
            "-1e99999999999",
            "@",
        ];
        for text in texts {
            let ours = parse(text).map(|_| ()).expect_err(text).0;
            let theirs = serde_json::from_str::<serde_json::Value>(text)
                .unwrap_err()
                .to_string();
            assert_eq!(ours, theirs, "{text:?}");
        }
        let deep = "[".repeat(200);
        assert_eq!(
            parse(&deep).unwrap_err().0,
            serde_json::from_str::<serde_json::Value>(&deep)
                .unwrap_err()
                .to_string()
        );
    }

    #[test]
    fn writes_strings_and_numbers_like_serde_json() {
        for s in [
            "",
            "plain",
            "q\"b\\s/",
            "\u{1}\u{1f}\u{7f}\n\r\t\u{8}\u{c}",
            "é😀",
        ] {
            assert_eq!(to_string(s), serde_json::to_string(s).unwrap());
        }
        for f in [
            0.0,
            -0.0,
            0.98,
            0.1,
            1e21,
            1e-7,
            3.7000000000000006,
            f64::NAN,
            1.0,
        ] {
            assert_eq!(to_string(&f), serde_json::to_string(&f).unwrap());
        }
        for f in [
            0.98,
            2.0,
            -1.0,
            0.0,
            -0.0,
            1.5,
            f64::NAN,
            f64::INFINITY,
            -f64::INFINITY,
        ] {
            assert_eq!(display_f64(f), f.to_string());
        }
        for n in [0u64, 1, 9, 10, u64::MAX] {
            assert_eq!(to_string(&n), serde_json::to_string(&n).unwrap());
        }
        assert_eq!(to_string(&-5i64), "-5");
        assert_eq!(to_string(&i64::MIN), i64::MIN.to_string());
    }

    #[test]
    fn primitives_read_like_serde() {
        for text in [
            "5",
            "-1",
            "1.5",
            "5000000000",
            "\"x\"",
            "null",
            "true",
            "[]",
        ] {
            reads_like_serde::<u32>(text);
            reads_like_serde::<u16>(text);
            reads_like_serde::<u64>(text);
            reads_like_serde::<i64>(text);
            reads_like_serde::<usize>(text);
            reads_like_serde::<f64>(text);
            reads_like_serde::<bool>(text);
            reads_like_serde::<String>(text);
            reads_like_serde::<Option<String>>(text);
            reads_like_serde::<Vec<u32>>(text);
        }
        for text in ["[\"a\",\"b\"]", "[\"a\"]", "[]", "{}", "[[\"a\",\"b\"]]"] {
            reads_like_serde::<(String, String)>(text);
            reads_like_serde::<Vec<(String, String)>>(text);
        }
    }
}
