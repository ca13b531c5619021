//! Checks of a type against serde_json, both ways: the codec's own tests use them, and so do
//! the tests of every crate whose types derive `ToJson` and `FromJson` (through the `testing`
//! feature, a dev-dependency only: serde_json must stay out of the wasm).

use std::fmt;

use crate::{from_str, to_string, FromJson, ToJson};

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
