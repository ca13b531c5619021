//! The worker's configuration: what the worker script declares, what a page saved, and which
//! of the two is in force.
//!
//! # Where configuration comes from
//! The worker script (`www/sw.js` in the demo, an app's own) sets `self.SLUICE_CONFIG` before
//! it loads the worker entry (`sluice-worker.js`): the engine's configuration
//! (`budgets`, `retry`, `aging`, `retentionMs`, `maxBodyBytes`, as in
//! [`sluice_shared::EngineConfig`]) plus `intercept` routes (see [`crate::intercept`]).
//! A page can replace the engine part at run time with a `configure` request; that is saved
//! in IndexedDB together with a fingerprint of the script's engine configuration it replaced.
//!
//! # The rule
//! **A configuration saved by a page wins over the script's, for as long as the script's own
//! configuration stays what it was when the page saved.** Restarting the worker, reloading
//! pages or updating the worker script for other reasons keeps the page's configuration; a
//! worker script that ships a *different* configuration (a deploy that changes the limits)
//! wins over the old page-saved one, which is then deleted. Intercept routes come from the
//! script only.
//!
//! Relative URL prefixes (`/api/`) in `matchPrefixes` and routes are resolved against the
//! worker's origin when the configuration is loaded, so the engine only ever sees absolute
//! prefixes and matches them against absolute job URLs.

use serde::{Deserialize, Serialize};
use sluice_shared::json::{self, FromJson, Json};
use sluice_shared::scope::UrlText;
use sluice_shared::{Algorithm, BudgetConfig, EngineConfig, Window};

use crate::config_check::check_script_config;
use crate::intercept::{RouteConfig, Routes};
use crate::prefix::resolve_prefix;

/// What the worker script declares in `self.SLUICE_CONFIG`: the engine's configuration with
/// one more field, `intercept`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptConfig {
    pub engine: EngineConfig,
    pub intercept: Vec<RouteConfig>,
}

impl Default for ScriptConfig {
    /// The demo configuration, used when the script declares none: budget `demo` covers the
    /// origin's `/api/` at 10 starts per second with 4 in flight; nothing is intercepted.
    fn default() -> Self {
        Self {
            engine: EngineConfig {
                budgets: vec![demo_budget()],
                ..EngineConfig::default()
            },
            intercept: vec![],
        }
    }
}

pub fn demo_budget() -> BudgetConfig {
    BudgetConfig {
        name: "demo".into(),
        windows: vec![Window {
            limit: 10,
            length_ms: 1_000,
        }],
        concurrency: 4,
        algorithm: Algorithm::SlidingLog,
        match_prefixes: vec!["/api/".into()],
        ..BudgetConfig::default()
    }
}

impl ScriptConfig {
    /// Reads the script's configuration from its JSON text (`JSON.stringify(SLUICE_CONFIG)`),
    /// with relative prefixes resolved against `origin` and the allow list written out (see
    /// [`script_allow`]). Absent (`undefined`/`null`/empty) means the demo default.
    pub fn from_json(text: &str, origin: &str) -> Result<Self, String> {
        let mut config = Self::read(text)?;
        resolve_engine_prefixes(&mut config.engine, origin);
        config.engine.allow = script_allow(&config.engine, origin);
        config
            .engine
            .validate()
            .map_err(|e| format!("self.SLUICE_CONFIG: {e}"))?;
        Ok(config)
    }

    fn read(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() || text == "null" || text == "undefined" {
            return Ok(Self::default());
        }
        let invalid =
            |e: json::Error| format!("self.SLUICE_CONFIG is not a valid configuration: {e}");
        let value = json::parse(text).map_err(invalid)?;
        // Strict: an unknown or misspelled key is refused, naming where it stands.
        check_script_config(&value)?;
        let intercept = match &value {
            Json::Obj(members) => {
                let mut r = json::Fields::from_members(members);
                let intercept = r.field_or("intercept", Vec::new());
                r.finish().map_err(invalid)?;
                intercept
            }
            _ => vec![],
        };
        let engine = engine_config_from_value(&value)
            .map_err(|e| format!("self.SLUICE_CONFIG is not a valid configuration: {e}"))?;
        Ok(Self { engine, intercept })
    }
}

/// Everything the worker derives from its script once, at start: fixed for the life of the
/// worker instance (a new script is a new worker).
#[derive(Clone, Debug)]
pub struct Setup {
    /// `http://host:port`, no trailing slash.
    pub origin: String,
    /// The script's engine configuration, prefixes resolved.
    pub script: EngineConfig,
    /// [`fingerprint`] of `script`.
    pub fingerprint: String,
    pub routes: Routes,
    /// Problems with the script's configuration, shown in every status snapshot.
    pub warnings: Vec<String>,
}

impl Setup {
    /// `script_json`: `JSON.stringify(self.SLUICE_CONFIG)`, `None` when it is not set. An
    /// unusable configuration is an error: the worker does not start with it (its install
    /// fails, the working version stays, and the pages hear why).
    pub fn new(script_json: Option<&str>, origin: &str) -> Result<Self, String> {
        let origin = origin.trim_end_matches('/').to_string();
        let script = ScriptConfig::from_json(script_json.unwrap_or(""), &origin)?;
        Ok(Self::from_script(script, origin))
    }

    /// The demo configuration ([`ScriptConfig::default`]), for a worker that was given none.
    pub fn demo(origin: &str) -> Self {
        let origin = origin.trim_end_matches('/').to_string();
        let mut script = ScriptConfig::default();
        resolve_engine_prefixes(&mut script.engine, &origin);
        script.engine.allow = script_allow(&script.engine, &origin);
        Self::from_script(script, origin)
    }

    fn from_script(script: ScriptConfig, origin: String) -> Self {
        let engine = script.engine;
        let (routes, warnings) = Routes::new(&script.intercept, &origin);
        Self {
            fingerprint: fingerprint(&engine),
            origin,
            script: engine,
            routes,
            warnings,
        }
    }
}

/// Reads an engine configuration from its JSON text.
pub fn engine_config_from_json(text: &str) -> Result<EngineConfig, String> {
    engine_config_from_value(&json::parse(text).map_err(|e| e.0)?)
}

/// [`engine_config_from_json`] for an already parsed value. Errors read as those of a
/// `configure` request.
pub fn engine_config_from_value(config: &Json) -> Result<EngineConfig, String> {
    if !matches!(config, Json::Obj(_)) {
        return Err("a configuration must be an object".into());
    }
    EngineConfig::from_json(config)
        .map_err(|e| sluice_shared::protocol::ProtocolError::Malformed { message: e.0 }.to_string())
}

/// Makes every `matchPrefixes` and `allow` entry absolute against `origin` (`http://host:port`).
pub fn resolve_engine_prefixes(config: &mut EngineConfig, origin: &str) {
    for budget in &mut config.budgets {
        for prefix in &mut budget.match_prefixes {
            *prefix = resolve_prefix(prefix, origin);
        }
    }
    // An entry naming another scheme stays as written, for validation to refuse.
    for entry in &mut config.allow {
        if UrlText::split(entry).is_none() {
            *entry = resolve_prefix(entry, origin);
        }
    }
}

/// Where the worker may ever send, from the script's (resolved) configuration: its `allow`,
/// else its budgets' prefixes, else its own origin alone. Written out in full so that a
/// page's configuration can be pinned to it ([`pin_allow`]).
pub fn script_allow(script: &EngineConfig, origin: &str) -> Vec<String> {
    let allow = script.effective_allow();
    if allow.is_empty() {
        vec![format!("{}/", origin.trim_end_matches('/'))]
    } else {
        allow
    }
}

/// A page's configuration may tune limits and add budgets, never widen where the worker
/// sends: whatever `allow` it carries is replaced by the script's. Its budgets must then lie
/// inside (the engine's validation says which does not).
pub fn pin_allow(config: &mut EngineConfig, script: &EngineConfig) {
    config.allow = script.allow.clone();
}

/// A configuration a page saved, with the fingerprint of the script configuration in force
/// when it was saved (see the module docs for the rule).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedConfig {
    pub config: EngineConfig,
    pub script_fingerprint: String,
}

/// Where the configuration in force came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Script,
    Saved,
}

/// Applies the rule: returns the configuration to use, where it came from, and whether the
/// saved one is stale (the script changed since) and should be deleted.
pub fn choose(script: &EngineConfig, saved: Option<SavedConfig>) -> (EngineConfig, Source, bool) {
    match saved {
        Some(s) if s.script_fingerprint == fingerprint(script) => {
            let mut config = s.config;
            pin_allow(&mut config, script);
            if config.validate().is_err() {
                // Saved before the allow list held it (or tampered with): the script's wins.
                return (script.clone(), Source::Script, true);
            }
            (config, Source::Saved, false)
        }
        Some(_) => (script.clone(), Source::Script, true),
        None => (script.clone(), Source::Script, false),
    }
}

/// A stable fingerprint of a configuration (FNV-1a 64 of its JSON form, in hex). Field order
/// is fixed by the struct definitions, so equal configurations give equal fingerprints.
pub fn fingerprint(config: &EngineConfig) -> String {
    let text = json::to_string(config);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= byte as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &str = "http://127.0.0.1:8123";

    #[test]
    fn script_config_reads_the_documented_shape() {
        let c = ScriptConfig::from_json(
            r#"{
                "budgets": [{"name": "demo", "windows": [{"limit": 10, "lengthMs": 1000}],
                             "concurrency": 4, "algorithm": "sliding-log",
                             "matchPrefixes": ["/api/"]}],
                "retentionMs": 60000,
                "intercept": [{"method": "POST", "prefix": "/api/"}]
            }"#,
            ORIGIN,
        )
        .unwrap();
        assert_eq!(c.engine.budgets.len(), 1);
        assert_eq!(c.engine.allow, [format!("{ORIGIN}/api/")]);
        assert_eq!(c.engine.budgets[0].concurrency, 4);
        assert_eq!(c.engine.retention_ms, 60_000);
        assert_eq!(
            c.engine.retry.max_attempts, 3,
            "unset fields keep their defaults"
        );
        assert_eq!(c.intercept.len(), 1);
    }

    #[test]
    fn absent_script_config_is_the_demo() {
        for text in ["", "null", "undefined"] {
            let c = ScriptConfig::from_json(text, ORIGIN).unwrap();
            assert_eq!(c.engine.budgets[0].name, "demo");
            assert_eq!(c.engine.budgets[0].windows[0].limit, 10);
        }
    }

    #[test]
    fn invalid_script_config_is_refused_with_a_reason() {
        let e = ScriptConfig::from_json(r#"{"budgets": [{"name": "x", "windows": []}]}"#, ORIGIN)
            .unwrap_err();
        assert!(e.contains("at least one window"), "{e}");
        assert!(ScriptConfig::from_json("{", ORIGIN).is_err());
        let e = ScriptConfig::from_json(r#"{"allow": ["ftp://x/"]}"#, ORIGIN).unwrap_err();
        assert!(e.contains("allow"), "{e}");
    }

    #[test]
    fn setup_resolves_budgets_and_routes() {
        let s = Setup::new(
            Some(
                r#"{"budgets": [{"name": "a", "windows": [{"limit": 1, "lengthMs": 10}],
                     "matchPrefixes": ["/api/"]}],
                     "intercept": [{"method": "POST", "prefix": "/api/"}]}"#,
            ),
            "http://127.0.0.1:8123/",
        )
        .unwrap();
        assert!(s.warnings.is_empty(), "{:?}", s.warnings);
        assert_eq!(s.origin, ORIGIN);
        assert_eq!(
            s.script.budgets[0].match_prefixes,
            vec!["http://127.0.0.1:8123/api/"]
        );
        assert!(s
            .routes
            .matches("POST", "http://127.0.0.1:8123/api/x", false, |_| false));
        assert_eq!(s.fingerprint, fingerprint(&s.script));
    }

    #[test]
    fn an_unusable_script_config_is_refused_with_where_and_why() {
        let e = Setup::new(Some(r#"{"budgets": 5}"#), ORIGIN).unwrap_err();
        assert_eq!(
            e,
            "self.SLUICE_CONFIG.budgets: must be a list ([...]), not a number"
        );
        let e = Setup::new(Some(r#"{"alow": ["/api/"]}"#), ORIGIN).unwrap_err();
        assert!(
            e.starts_with("self.SLUICE_CONFIG: unknown key `alow`; did you mean `allow`?"),
            "{e}"
        );
        let s = Setup::new(None, ORIGIN).unwrap();
        assert_eq!(s.script.budgets[0].name, "demo");
        assert_eq!(Setup::demo(ORIGIN).script, s.script);
    }

    #[test]
    fn engine_prefixes_resolve_against_the_origin() {
        let mut c = ScriptConfig::default().engine;
        resolve_engine_prefixes(&mut c, ORIGIN);
        assert_eq!(
            c.budgets[0].match_prefixes,
            vec!["http://127.0.0.1:8123/api/"]
        );
    }

    #[test]
    fn engine_configs_read_like_configure_requests() {
        let c = engine_config_from_json(r#"{"retentionMs": 7}"#).unwrap();
        assert_eq!(c.retention_ms, 7);
        assert!(engine_config_from_json(r#"{"retentionMs": "x"}"#).is_err());
        assert!(engine_config_from_json("5").is_err());
        assert!(engine_config_from_json("{} , \"x\": 1").is_err());
    }

    #[test]
    fn saved_config_wins_until_the_script_changes() {
        let script = ScriptConfig::from_json("", ORIGIN).unwrap().engine;
        let mut page = script.clone();
        page.retention_ms = 5;
        let saved = SavedConfig {
            config: page.clone(),
            script_fingerprint: fingerprint(&script),
        };
        assert_eq!(
            choose(&script, Some(saved.clone())),
            (page, Source::Saved, false)
        );
        let mut deployed = script.clone();
        deployed.budgets[0].windows[0].limit = 20;
        assert_eq!(
            choose(&deployed, Some(saved)),
            (deployed.clone(), Source::Script, true)
        );
        assert_eq!(choose(&deployed, None), (deployed, Source::Script, false));
    }

    #[test]
    fn a_page_never_widens_where_the_worker_sends() {
        let script = ScriptConfig::from_json("", ORIGIN).unwrap().engine;
        // A saved page configuration that allowed itself another origin, and a budget there.
        let mut page = script.clone();
        page.allow = vec!["https://evil.example/".into()];
        let saved = SavedConfig {
            config: page.clone(),
            script_fingerprint: fingerprint(&script),
        };
        let (chosen, source, _) = choose(&script, Some(saved));
        assert_eq!(
            (chosen.allow.clone(), source),
            (script.allow.clone(), Source::Saved)
        );
        page.budgets[0].match_prefixes = vec!["https://evil.example/".into()];
        let saved = SavedConfig {
            config: page,
            script_fingerprint: fingerprint(&script),
        };
        assert_eq!(choose(&script, Some(saved)), (script, Source::Script, true));
    }

    #[test]
    fn fingerprints_are_stable_and_sensitive() {
        let a = ScriptConfig::default().engine;
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
        let mut b = a.clone();
        b.budgets[0].concurrency = 5;
        assert_ne!(fingerprint(&a), fingerprint(&b));
        assert_eq!(fingerprint(&a).len(), 16);
    }
}
