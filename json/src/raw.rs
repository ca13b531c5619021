//! JSON carried as text: a value one end of the protocol writes and the other reads, which the
//! page client only forwards.
//!
//! Why: the page client has a budget of 60 KiB of wasm (ARCHITECTURE.md, "Size"), and every
//! type it decodes costs it a reader and a writer. It forwards the worker's status to pages
//! and a page's configuration to the worker without looking inside either (it needs the
//! status's counts alone, read by name), so those travel as [`RawJson`]: written verbatim,
//! read as a whole value, decoded into their type only where they are used. On the wire
//! nothing changes: `"status": {...}` is the same object either way. Measured when it came
//! in: the configuration's and the status's readers and writers were 9.6 KB of the client's
//! wasm (3.2 KB gzipped).

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{parse, to_string, write_str, Error, FromJson, Json, ToJson};

/// A JSON value kept as its text; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawJson(String);

impl RawJson {
    /// `value` written as JSON.
    pub fn of<T: ToJson + ?Sized>(value: &T) -> Self {
        RawJson(to_string(value))
    }

    /// The text, which is one JSON value.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// The text, owned.
    pub fn into_text(self) -> String {
        self.0
    }

    /// The value read as a `T`, with the reader's own errors.
    pub fn read<T: FromJson>(&self) -> Result<T, Error> {
        super::from_str(&self.0)
    }
}

impl Default for RawJson {
    fn default() -> Self {
        RawJson("null".into())
    }
}

impl ToJson for RawJson {
    fn write_json(&self, out: &mut String) {
        out.push_str(&self.0);
    }
}

impl FromJson for RawJson {
    /// The value written back with its members in the order they came (not sorted, as
    /// `Json`'s own writer does), so that what the page wrote is what the worker reads.
    fn from_json(v: &Json) -> Result<Self, Error> {
        let mut text = String::new();
        write_as_it_came(v, &mut text);
        Ok(RawJson(text))
    }

    fn placeholder() -> Self {
        RawJson(String::new())
    }
}

fn write_as_it_came(v: &Json, out: &mut String) {
    match v {
        Json::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_as_it_came(item, out);
            }
            out.push(']');
        }
        Json::Obj(members) => {
            out.push('{');
            for (i, (k, item)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(out, k);
                out.push(':');
                write_as_it_came(item, out);
            }
            out.push('}');
        }
        scalar => scalar.write_json(out),
    }
}

/// serde's side (native tests and the simulator compare the two codecs): the text parsed and
/// written through serde's data model.
impl Serialize for RawJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let value = parse(&self.0).map_err(serde::ser::Error::custom)?;
        SerdeJson(&value).serialize(serializer)
    }
}

struct SerdeJson<'v, 'a>(&'v Json<'a>);

impl Serialize for SerdeJson<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Json::Null => serializer.serialize_unit(),
            Json::Bool(b) => serializer.serialize_bool(*b),
            Json::U64(n) => serializer.serialize_u64(*n),
            Json::I64(n) => serializer.serialize_i64(*n),
            Json::F64(f) => serializer.serialize_f64(*f),
            Json::Str(s) => serializer.serialize_str(s),
            Json::Arr(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&SerdeJson(item))?;
                }
                seq.end()
            }
            Json::Obj(members) => {
                let mut map = serializer.serialize_map(Some(members.len()))?;
                for (k, v) in members {
                    map.serialize_entry(k.as_ref(), &SerdeJson(v))?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut text = String::new();
        TextSeed(&mut text).deserialize(deserializer)?;
        Ok(RawJson(text))
    }
}

/// Writes whatever value comes next as JSON text.
struct TextSeed<'t>(&'t mut String);

impl<'de> DeserializeSeed<'de> for TextSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TextSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        v.write_json(self.0);
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        v.write_json(self.0);
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        v.write_json(self.0);
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        v.write_json(self.0);
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        write_str(self.0, v);
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.push_str("null");
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push('[');
        let mut first = true;
        loop {
            let mark = self.0.len();
            if !first {
                self.0.push(',');
            }
            if seq.next_element_seed(TextSeed(self.0))?.is_none() {
                self.0.truncate(mark);
                break;
            }
            first = false;
        }
        self.0.push(']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.0.push('{');
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            if !first {
                self.0.push(',');
            }
            first = false;
            write_str(self.0, &key);
            self.0.push(':');
            map.next_value_seed(TextSeed(self.0))?;
        }
        self.0.push('}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_written_as_it_is_and_read_back_whole() {
        let raw = RawJson::of(&vec![1u64, 2]);
        assert_eq!(raw.text(), "[1,2]");
        assert_eq!(raw.read::<Vec<u64>>(), Ok(vec![1, 2]));
        let inside = r#"{"z":{"b":[true,null,"x\"y",-3,1.5]},"a":[]}"#;
        let holder: Vec<RawJson> = crate::from_str(&format!("[{inside}]")).unwrap();
        assert_eq!(holder[0].text(), inside);
        assert_eq!(to_string(&holder), format!("[{inside}]"));
    }

    #[test]
    fn serde_reads_and_writes_the_same_text() {
        let inside = r#"{"a":{"b":[true,null,"x\"y",-3,1.5]},"c":{}}"#;
        let raw: RawJson = serde_json::from_str(inside).unwrap();
        assert_eq!(raw.text(), inside);
        assert_eq!(serde_json::to_string(&raw).unwrap(), inside);
    }
}
