//! The worker script's configuration is read strictly: a key the worker does not know is
//! refused, with where it stands and the known key it most likely meant.
//!
//! Why strict here when the rest of the JSON reading follows serde's "unknown fields are
//! ignored": a misspelled key in `self.SLUICE_CONFIG` (`alow`, `windowMs`) otherwise falls back
//! to a default without a word — `alow` to sending only to the worker's own origin, a budget
//! without its window to no budget at all — and the person finds out from a job refused much
//! later, far from the typo. The script is written by a person, once per deploy, so refusing it
//! costs nothing at run time, and the install fails (the working version stays) with a message
//! that reaches the page (see `sw/js/sluice-worker.js`).
//!
//! Pages' `configure` requests and saved records keep serde's lenient rule: they are read by
//! code of one build, and an older record must stay readable by a newer worker.
//!
//! The known keys come from each type's own declaration (`StructFields::FIELDS`, written by the
//! derive), so this module names no field itself: only how the types nest.

use sluice_shared::config::{
    AgingConfig, BodyRule, BudgetConfig, ResourceConfig, RetryConfig, Window,
};
use sluice_shared::json::{FromJson, Json, StructFields};
use sluice_shared::EngineConfig;

use crate::intercept::RouteConfig;

/// How one object of the configuration looks: its known keys, the objects nested in it, and
/// its type's reader (run for its errors, so they name the entry).
struct Shape {
    fields: &'static [&'static str],
    /// Keys read elsewhere than by this type's reader (the worker entry's `packageUrl`).
    extra: &'static [&'static str],
    nested: &'static [(&'static str, Nesting)],
    read: fn(&Json) -> Option<String>,
}

#[derive(Clone, Copy)]
enum Nesting {
    One(&'static Shape),
    List(&'static Shape),
}

fn read_as<T: FromJson>(v: &Json) -> Option<String> {
    T::from_json(v).err().map(|e| e.0)
}

const WINDOW: Shape = Shape {
    fields: <Window as StructFields>::FIELDS,
    extra: &[],
    nested: &[],
    read: read_as::<Window>,
};

const BODY_RULE: Shape = Shape {
    fields: <BodyRule as StructFields>::FIELDS,
    extra: &[],
    nested: &[],
    read: read_as::<BodyRule>,
};

const RESOURCE: Shape = Shape {
    fields: <ResourceConfig as StructFields>::FIELDS,
    extra: &[],
    nested: &[("windows", Nesting::List(&WINDOW))],
    read: read_as::<ResourceConfig>,
};

const BUDGET: Shape = Shape {
    fields: <BudgetConfig as StructFields>::FIELDS,
    extra: &[],
    nested: &[
        ("windows", Nesting::List(&WINDOW)),
        ("bodyRules", Nesting::List(&BODY_RULE)),
        ("resources", Nesting::List(&RESOURCE)),
    ],
    read: read_as::<BudgetConfig>,
};

const RETRY: Shape = Shape {
    fields: <RetryConfig as StructFields>::FIELDS,
    extra: &[],
    nested: &[],
    read: read_as::<RetryConfig>,
};

const AGING: Shape = Shape {
    fields: <AgingConfig as StructFields>::FIELDS,
    extra: &[],
    nested: &[],
    read: read_as::<AgingConfig>,
};

const ROUTE: Shape = Shape {
    fields: <RouteConfig as StructFields>::FIELDS,
    extra: &[],
    nested: &[],
    read: read_as::<RouteConfig>,
};

/// `intercept` is read by the worker ([`crate::intercept`]), `packageUrl` by its entry script.
const SCRIPT: Shape = Shape {
    fields: <EngineConfig as StructFields>::FIELDS,
    extra: &["intercept", "packageUrl"],
    nested: &[
        ("budgets", Nesting::List(&BUDGET)),
        ("retry", Nesting::One(&RETRY)),
        ("aging", Nesting::One(&AGING)),
        ("intercept", Nesting::List(&ROUTE)),
    ],
    read: read_as::<EngineConfig>,
};

/// The first problem with the worker script's configuration (its parsed JSON), named by where
/// it stands: `self.SLUICE_CONFIG.budgets[0].windows[0]: unknown key `windowMs`; did you mean `lengthMs`? ...`.
/// Entries are checked before the object holding them, so a problem is named by its innermost
/// place.
pub fn check_script_config(config: &Json) -> Result<(), String> {
    if !matches!(config, Json::Obj(_)) {
        return Err(format!(
            "{ROOT} must be an object ({{ budgets: [...], allow: [...] }}), not {}",
            kind_of(config)
        ));
    }
    check(config, &SCRIPT, ROOT)
}

/// How the messages name the configuration: as the worker script spells it.
const ROOT: &str = "self.SLUICE_CONFIG";

fn check(value: &Json, shape: &Shape, path: &str) -> Result<(), String> {
    let place = |path: &str| format!("{path}: ");
    let Json::Obj(members) = value else {
        // The reader names the wrong type.
        return match (shape.read)(value) {
            Some(e) => Err(format!("{}{e}", place(path))),
            None => Ok(()),
        };
    };
    for (key, _) in members.iter() {
        let known = |k: &&str| *k == key.as_ref();
        if !shape.fields.iter().any(known) && !shape.extra.iter().any(known) {
            return Err(format!(
                "{}{}",
                place(path),
                unknown_key(key, shape.fields, shape.extra)
            ));
        }
    }
    for (key, nesting) in shape.nested {
        let Some((_, child)) = members.iter().find(|(k, _)| k == key) else {
            continue;
        };
        let child_path = format!("{path}.{key}");
        match (nesting, child) {
            (Nesting::One(inner), _) => check(child, inner, &child_path)?,
            (Nesting::List(inner), Json::Arr(items)) => {
                for (i, item) in items.iter().enumerate() {
                    check(item, inner, &format!("{child_path}[{i}]"))?;
                }
            }
            (Nesting::List(_), other) => {
                return Err(format!(
                    "{child_path}: must be a list ([...]), not {}",
                    kind_of(other)
                ))
            }
        }
    }
    match (shape.read)(value) {
        Some(e) => Err(format!("{}{e}", place(path))),
        None => Ok(()),
    }
}

/// "unknown key `alow`; did you mean `allow`? Known keys: ..."
fn unknown_key(key: &str, fields: &[&str], extra: &[&str]) -> String {
    let known: Vec<&str> = fields.iter().chain(extra).copied().collect();
    let mut message = format!("unknown key `{key}`");
    if let Some(near) = nearest(key, &known) {
        message.push_str(&format!("; did you mean `{near}`?"));
    } else {
        message.push('.');
    }
    message.push_str(" Known keys: ");
    message.push_str(&known.join(", "));
    message
}

/// The known key closest to `key` by edit distance (ignoring case), if close enough to be a
/// slip of the keyboard or a near synonym rather than another word: at most a third of its
/// letters differ (at least 2), or it ends the same way (`windowMs` for `lengthMs`).
fn nearest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let lower = key.to_ascii_lowercase();
    let (best, distance) = known
        .iter()
        .map(|k| (*k, strsim::levenshtein(&lower, &k.to_ascii_lowercase())))
        .min_by_key(|(_, d)| *d)?;
    let tolerance = (key.chars().count() / 3).max(2);
    if distance <= tolerance {
        return Some(best);
    }
    // A unit suffix names the kind of value: `windowMs` can only be one of the `...Ms` keys.
    let suffix = |k: &str| {
        k.char_indices()
            .rev()
            .find(|(_, c)| c.is_ascii_uppercase())
            .map(|(i, _)| k[i..].to_string())
    };
    let key_suffix = suffix(key)?;
    let same_suffix: Vec<&str> = known
        .iter()
        .copied()
        .filter(|k| suffix(k).as_deref() == Some(key_suffix.as_str()))
        .collect();
    match same_suffix.as_slice() {
        [only] => Some(only),
        _ => None,
    }
}

fn kind_of(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Str(_) => "a string",
        Json::Arr(_) => "a list",
        Json::Obj(_) => "an object",
        _ => "a number",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_shared::json;

    fn problem(text: &str) -> String {
        check_script_config(&json::parse(text).expect("test JSON")).expect_err(text)
    }

    #[test]
    fn the_documented_shape_passes() {
        let text = r#"{
            "budgets": [{"name": "a", "windows": [{"limit": 10, "lengthMs": 1000}],
                         "concurrency": 4, "algorithm": "gcra", "matchPrefixes": ["/api/"]}],
            "retry": {"maxAttempts": 5}, "aging": {"bulkMs": 1000},
            "allow": ["/api/"], "retentionMs": 1, "intercept": [{"prefix": "/api/"}],
            "packageUrl": "/sluice/"
        }"#;
        assert_eq!(check_script_config(&json::parse(text).unwrap()), Ok(()));
    }

    #[test]
    fn a_misspelled_top_level_key_names_the_key_it_meant() {
        let e = problem(r#"{"alow": ["https://api.example/"]}"#);
        assert!(
            e.starts_with("self.SLUICE_CONFIG: unknown key `alow`; did you mean `allow`?"),
            "{e}"
        );
        assert!(e.contains("Known keys: budgets,"), "{e}");
        assert!(e.contains("packageUrl"), "{e}");
    }

    #[test]
    fn a_misspelled_window_key_names_its_entry_and_the_key() {
        let e = problem(
            r#"{"budgets": [{"name": "a", "windows": [{"limit": 1, "lengthMs": 10}]},
                            {"name": "b", "windows": [{"limit": 1, "windowMs": 10}]}]}"#,
        );
        assert_eq!(
            e,
            "self.SLUICE_CONFIG.budgets[1].windows[0]: unknown key `windowMs`; did you mean `lengthMs`? \
             Known keys: limit, lengthMs"
        );
    }

    #[test]
    fn a_body_rule_is_checked_as_its_own_entry() {
        let ok = r#"{"budgets": [{"name": "w", "windows": [{"limit": 1, "lengthMs": 10}],
            "bodyRules": [{"status": [200], "path": "error.code", "equals": "ratelimited",
                           "waitPath": "error.wait", "waitUnit": "milliseconds",
                           "means": "concurrency", "limitPath": "m", "limitWindowMs": 1000}]}]}"#;
        assert_eq!(check_script_config(&json::parse(ok).unwrap()), Ok(()));
        let e = problem(
            r#"{"budgets": [{"name": "w", "windows": [{"limit": 1, "lengthMs": 10}],
                "bodyRules": [{"path": "error.code", "waitpath": "error.wait"}]}]}"#,
        );
        assert!(
            e.starts_with(
                "self.SLUICE_CONFIG.budgets[0].bodyRules[0]: unknown key `waitpath`; did you \
                 mean `waitPath`?"
            ),
            "{e}"
        );
        let e = problem(
            r#"{"budgets": [{"name": "w", "windows": [{"limit": 1, "lengthMs": 10}],
                "bodyRules": [{"path": "a", "means": "slow"}]}]}"#,
        );
        assert!(
            e.starts_with("self.SLUICE_CONFIG.budgets[0].bodyRules[0]: unknown variant `slow`"),
            "{e}"
        );
    }

    #[test]
    fn a_malformed_value_names_its_entry() {
        let e = problem(
            r#"{"budgets": [{"name": "a", "windows": [{"limit": "ten", "lengthMs": 1}]}]}"#,
        );
        assert!(
            e.starts_with("self.SLUICE_CONFIG.budgets[0].windows[0]: invalid type"),
            "{e}"
        );
        let e = problem(r#"{"budgets": [{"name": "a", "windows": [{"lengthMs": 1}]}]}"#);
        assert_eq!(
            e,
            "self.SLUICE_CONFIG.budgets[0].windows[0]: missing field `limit`"
        );
        let e = problem(r#"{"budgets": 5}"#);
        assert_eq!(
            e,
            "self.SLUICE_CONFIG.budgets: must be a list ([...]), not a number"
        );
        let e = problem(r#"{"retry": {"maxAtempts": 2}}"#);
        assert!(
            e.starts_with(
                "self.SLUICE_CONFIG.retry: unknown key `maxAtempts`; did you mean `maxAttempts`?"
            ),
            "{e}"
        );
        let e = problem(r#"{"intercept": [{"prefix": "/a/", "headr": "X"}]}"#);
        assert!(
            e.starts_with(
                "self.SLUICE_CONFIG.intercept[0]: unknown key `headr`; did you mean `header`?"
            ),
            "{e}"
        );
        assert!(problem("5").contains("must be an object"));
    }

    #[test]
    fn a_word_unlike_every_key_suggests_none() {
        let e = problem(r#"{"colour": 1}"#);
        assert!(
            e.starts_with("self.SLUICE_CONFIG: unknown key `colour`. Known keys:"),
            "{e}"
        );
    }
}
