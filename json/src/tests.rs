//! The codec against serde_json: the parser, the writer, the primitive readers and the
//! derive's attributes.

use super::*;
use crate::testing::{reads_like_serde, same_as_serde};

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

/// Fields left out when empty: first, between and last, in a struct and in a tagged variant.
#[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, ToJson, FromJson)]
struct SkippedWhenEmpty {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    first: Option<u32>,
    always: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    between: Vec<String>,
    #[serde(default, skip_serializing_if = "is_off")]
    last: bool,
}

fn is_off(b: &bool) -> bool {
    !*b
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize, ToJson, FromJson)]
#[serde(tag = "type", rename_all = "camelCase")]
enum TaggedSkip {
    One {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        maybe: Option<u32>,
        kept: u32,
    },
}

/// Only optional fields, all empty: `{}`.
#[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, ToJson, FromJson)]
struct AllSkipped {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    only: Option<u32>,
}

#[test]
fn fields_skipped_when_empty_are_written_as_serde_writes_them() {
    same_as_serde(&SkippedWhenEmpty::default());
    assert_eq!(to_string(&SkippedWhenEmpty::default()), r#"{"always":0}"#);
    same_as_serde(&SkippedWhenEmpty {
        first: Some(1),
        always: 2,
        between: vec!["b".into()],
        last: true,
    });
    same_as_serde(&SkippedWhenEmpty {
        first: None,
        always: 2,
        between: vec![],
        last: true,
    });
    same_as_serde(&TaggedSkip::One {
        maybe: None,
        kept: 1,
    });
    same_as_serde(&TaggedSkip::One {
        maybe: Some(3),
        kept: 1,
    });
    same_as_serde(&AllSkipped::default());
    assert_eq!(to_string(&AllSkipped::default()), "{}");
    same_as_serde(&AllSkipped { only: Some(1) });
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
    for text in [
        "[1,2,3]",
        "[1,2]",
        "[1,2,3,4]",
        "[1,\"2\",3]",
        "{}",
        "3",
        "[]",
    ] {
        reads_like_serde::<[u64; 3]>(text);
    }
    reads_like_serde::<[u64; 0]>("[]");
    same_as_serde(&[0u64, 7, u64::MAX]);
}
