//! Reading JSON text into a [`Json`] tree, with serde_json's syntax rules and messages,
//! and its limits on depth and size.

use std::borrow::Cow;

use super::*;

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

pub(super) struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: u32,
    values: usize,
}

/// serde_json's nesting limit.
pub(super) const MAX_DEPTH: u32 = 128;

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
pub(super) fn f64_from_parts(significand: u64, mut exponent: i32) -> Option<f64> {
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
pub(super) fn pow10(e: u32) -> f64 {
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
