//! A small JSON codec for the wasm: the service worker's and the page client's.
//!
//! Every type still derives serde's traits, and serde's JSON form stays the reference: the demo
//! server and the tests speak it. The worker and the page client, though, read and write their
//! records and messages through this crate instead of `serde_json`. Serde's derives
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
//! The crate knows no type of Sluice's: the engine's types derive its traits in `sluice-shared`
//! (which re-exports it as `sluice_shared::json`), the worker's and the client's in theirs.
//! Every crate that derives names `sluice-json` among its dependencies, since the derived code
//! calls `::sluice_json`. With the `testing` feature (for dev-dependencies), [`testing`] checks
//! a type against serde_json both ways.
//!
//! The derives refuse what they cannot follow, at compile time:
//!
//! ```compile_fail
//! // serde would leave the field out; the derive refuses rather than write it.
//! #[derive(sluice_json::ToJson)]
//! struct Cached {
//!     #[serde(skip)]
//!     cache: u32,
//! }
//! ```
//!
//! ```compile_fail
//! // An adjacently tagged enum's form is not the derive's (internally tagged ones are).
//! #[derive(sluice_json::FromJson)]
//! #[serde(tag = "type", content = "data")]
//! enum Message {
//!     Ping,
//! }
//! ```
//!
//! ```compile_fail
//! // Only unit variants, written as strings.
//! #[derive(sluice_json::ToJson)]
//! enum Shape {
//!     Circle { radius: u32 },
//! }
//! ```

// `#[derive(ToJson, FromJson)]` names this crate as `::sluice_json`, as it must from the crates
// that use it; this makes the same path work inside it (the tests' types).
extern crate self as sluice_json;

mod parse;
mod raw;
mod read;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;
mod write;

use std::borrow::Cow;
use std::fmt;

pub use parse::*;
pub use raw::RawJson;
pub use read::*;
pub use write::*;

/// `#[derive(ToJson, FromJson)]`: a struct's or a unit enum's writer and reader, from its
/// declaration and its `#[serde(...)]` attributes; any serde attribute they cannot follow is
/// a compile error (see the `sluice-json-derive` crate for the ones they do), so that serde
/// and this codec never silently disagree about a type (the crate's examples).
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
