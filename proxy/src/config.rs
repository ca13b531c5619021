//! What `sluice proxy` is told: the upstream, its budgets and routes, the credential, the
//! browser origins it serves, and how it behaves when the shared store fails. Flags, or a JSON
//! file for several budgets; everything is checked once, at start, with messages that say
//! what to change.

use std::path::PathBuf;

use axum::http::HeaderName;
use serde::Deserialize;
use sluice_shared::config::{Algorithm, BudgetConfig, Window};
use sluice_shared::scope::{Scope, Target};

use super::rule::{Counting, RuleParams};
use sluice_shared::windows_text::WindowList;

/// The environment variable the credential is read from unless the file names another.
pub const CREDENTIAL_ENV: &str = "SLUICE_UPSTREAM_CREDENTIAL";

#[derive(clap::Args, Clone, Debug)]
pub struct ProxyArgs {
    /// The API every configured route is forwarded to (and the only place anything goes).
    #[arg(long)]
    pub upstream: String,
    /// Where to listen, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub listen: std::net::SocketAddr,
    /// Share the budget with every instance pointed at this Redis (redis://HOST:PORT); without
    /// it the budget lives in this process's memory (one instance).
    #[arg(long)]
    pub redis: Option<String>,
    /// A JSON file with `budgets` (as the worker's, `matchPrefixes` being paths such as
    /// "/api/"), and optionally `allowOrigins`, `callerHeader` and `credential`
    /// (`{"header": "Authorization", "env": "VAR"}` or `{"header": ..., "value": ...}`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Without --config: the upstream's windows, as limit/length: `10/1s,5000/1h`.
    #[arg(long, value_name = "LIMIT/LENGTH,...", default_value = "10/1s")]
    pub windows: WindowList,
    /// Without --config: most requests in flight at once, across every instance.
    #[arg(long, default_value_t = 4)]
    pub concurrency: u32,
    /// Without --config: `sliding-log` (exact, low limits) or `gcra` (high limits).
    #[arg(long, default_value = "sliding-log", value_parser = parse_algorithm)]
    pub algorithm: Algorithm,
    /// Without --config: the paths forwarded (repeatable); others are answered 404.
    #[arg(long = "route", default_value = "/")]
    pub routes: Vec<String>,
    /// Browser origins allowed to call the proxy (repeatable), e.g. https://app.example.com.
    #[arg(long = "allow-origin")]
    pub allow_origins: Vec<String>,
    /// The header naming the caller (user or device) whose fair share a request spends;
    /// without it, the caller is the client's IP address.
    #[arg(long, default_value = "x-sluice-caller")]
    pub caller_header: String,
    /// The header the credential goes in; its value comes from $SLUICE_UPSTREAM_CREDENTIAL.
    #[arg(long, default_value = "authorization")]
    pub credential_header: String,
    /// Milliseconds a request still under way may trail its decision on its way to the
    /// upstream, until this instance has measured enough round trips to know (then it follows
    /// them, as the worker does).
    #[arg(long, default_value_t = 25)]
    pub margin_ms: u64,
    /// Longest a request may take upstream; then it is answered 504.
    #[arg(long, default_value_t = 30_000)]
    pub upstream_timeout_ms: u64,
    /// How long a concurrency slot stays taken by an instance that died mid-request. Must
    /// exceed --upstream-timeout-ms.
    #[arg(long, default_value_t = 35_000)]
    pub lease_ms: u64,
    /// A request that must wait up to this long is held and sent when its turn comes; one
    /// that must wait longer is answered 429 with Retry-After.
    #[arg(long, default_value_t = 2_000)]
    pub max_wait_ms: u64,
    /// Longest wait for Redis per call; then the proxy fails closed (or open).
    #[arg(long, default_value_t = 250)]
    pub redis_timeout_ms: u64,
    /// When Redis is down or slow, decide with this instance's in-memory budget instead of
    /// answering 503 (each instance then allows the whole limit on its own).
    #[arg(long)]
    pub fail_open: bool,
    /// Prefix of every Redis key, to share one Redis between deployments.
    #[arg(long, default_value = "sluice:")]
    pub key_prefix: String,
}

fn parse_algorithm(text: &str) -> Result<Algorithm, String> {
    match text {
        "sliding-log" => Ok(Algorithm::SlidingLog),
        "gcra" => Ok(Algorithm::Gcra),
        other => Err(format!(
            "'{other}': the proxy enforces sliding-log or gcra across instances"
        )),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    budgets: Vec<BudgetConfig>,
    #[serde(default)]
    allow_origins: Vec<String>,
    caller_header: Option<String>,
    credential: Option<CredentialFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialFile {
    header: String,
    value: Option<String>,
    env: Option<String>,
}

/// The credential the proxy adds to every upstream request (never one from the browser).
#[derive(Clone)]
pub struct Credential {
    pub header: HeaderName,
    pub value: axum::http::HeaderValue,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({}: <hidden>)", self.header)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("sluice proxy: {0}")]
pub struct ProxyConfigError(pub String);

/// One budget as the proxy runs it.
#[derive(Clone, Debug)]
pub struct ProxyBudget {
    pub name: String,
    pub rule: RuleParams,
    /// Its routes, each as the upstream scope it covers.
    pub routes: Vec<Scope>,
    /// The shortest window, unstretched: what a caller's share is stated against.
    pub share_window: Window,
}

/// Everything checked and resolved.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// The upstream's scheme, host, port and base path, without a trailing slash.
    pub upstream: String,
    pub upstream_scope: Scope,
    pub budgets: Vec<ProxyBudget>,
    /// Origins as `scheme://host:port`, the port always written.
    pub allow_origins: Vec<String>,
    pub caller_header: HeaderName,
    pub credential: Option<Credential>,
    pub upstream_timeout_ms: u64,
    pub max_wait_ms: u64,
    pub redis: Option<String>,
    pub redis_timeout_ms: u64,
    pub fail_open: bool,
    pub key_prefix: String,
}

impl ProxyConfig {
    /// Resolves the flags (and the file they name); `env` reads environment variables.
    pub fn resolve(
        args: &ProxyArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ProxyConfigError> {
        let err = |m: String| ProxyConfigError(m);
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| err(format!("cannot read --config {}: {e}", path.display())))?;
                serde_json::from_str::<ConfigFile>(&text)
                    .map_err(|e| err(format!("--config {}: {e}", path.display())))?
            }
            None => ConfigFile::default(),
        };

        let upstream = args.upstream.trim_end_matches('/').to_owned();
        Target::parse(&upstream).map_err(|e| err(format!("--upstream: {e}")))?;
        if upstream.contains(['?', '#']) {
            return Err(err(format!(
                "--upstream '{upstream}' has a query or fragment; give the base URL only"
            )));
        }
        let upstream_scope =
            Scope::parse(&format!("{upstream}/")).map_err(|e| err(format!("--upstream: {e}")))?;

        let budgets_in = if file.budgets.is_empty() {
            vec![BudgetConfig {
                name: "upstream".into(),
                windows: args.windows.0.clone(),
                concurrency: args.concurrency,
                algorithm: args.algorithm,
                match_prefixes: args.routes.clone(),
                ..BudgetConfig::default()
            }]
        } else {
            file.budgets
        };
        if args.lease_ms <= args.upstream_timeout_ms {
            return Err(err(format!(
                "--lease-ms ({}) must exceed --upstream-timeout-ms ({}): a lease that expires \
                 while its request is still under way would let one more start",
                args.lease_ms, args.upstream_timeout_ms
            )));
        }
        let mut budgets = Vec::new();
        for b in &budgets_in {
            b.validate().map_err(|e| err(e.to_string()))?;
            if budgets_in.iter().filter(|o| o.name == b.name).count() > 1 {
                return Err(err(format!("budget '{}' is defined twice", b.name)));
            }
            let counting =
                Counting::from_algorithm(&b.name, b.algorithm).map_err(|e| err(e.to_string()))?;
            if b.match_prefixes.is_empty() {
                return Err(err(format!(
                    "budget '{}' has no routes: give matchPrefixes such as [\"/api/\"]",
                    b.name
                )));
            }
            let mut routes = Vec::new();
            for prefix in &b.match_prefixes {
                if !prefix.starts_with('/') {
                    return Err(err(format!(
                        "budget '{}': route '{prefix}' must be a path starting with '/' (the \
                         proxy forwards only to --upstream)",
                        b.name
                    )));
                }
                let scope = Scope::parse(&format!("{upstream}{prefix}"))
                    .map_err(|e| err(format!("budget '{}': route '{prefix}': {e}", b.name)))?;
                routes.push(scope);
            }
            let share_window = b
                .windows
                .iter()
                .copied()
                .min_by_key(|w| w.length_ms)
                .ok_or_else(|| err(format!("budget '{}' needs a window", b.name)))?;
            budgets.push(ProxyBudget {
                name: b.name.clone(),
                rule: RuleParams {
                    windows: b.windows.clone(),
                    concurrency: b.concurrency,
                    counting,
                    margin_ms: args.margin_ms,
                    lease_ms: args.lease_ms,
                    reask_ms: 20,
                },
                routes,
                share_window,
            });
        }

        let mut allow_origins = Vec::new();
        for o in args.allow_origins.iter().chain(&file.allow_origins) {
            let t = Target::parse(o).map_err(|e| err(format!("allowed origin: {e}")))?;
            if t.path != "/" {
                return Err(err(format!(
                    "allowed origin '{o}' has a path; an origin is scheme://host[:port]"
                )));
            }
            allow_origins.push(t.origin());
        }

        let caller_header = file.caller_header.as_deref().unwrap_or(&args.caller_header);
        let caller_header = HeaderName::try_from(caller_header)
            .map_err(|e| err(format!("caller header '{caller_header}': {e}")))?;

        let (cred_header, cred_value) = match &file.credential {
            Some(c) => {
                let value = match (&c.value, &c.env) {
                    (Some(v), None) => Some(v.clone()),
                    (None, Some(var)) => Some(env(var).ok_or_else(|| {
                        err(format!(
                            "the credential's environment variable {var} is not set"
                        ))
                    })?),
                    _ => {
                        return Err(err(
                            "credential: give exactly one of \"value\" and \"env\"".into()
                        ))
                    }
                };
                (c.header.clone(), value)
            }
            None => (args.credential_header.clone(), env(CREDENTIAL_ENV)),
        };
        let credential = match cred_value {
            None => None,
            Some(value) => Some(Credential {
                header: HeaderName::try_from(cred_header.as_str())
                    .map_err(|e| err(format!("credential header '{cred_header}': {e}")))?,
                value: axum::http::HeaderValue::try_from(value).map_err(|_| {
                    err("the credential is not a valid header value (control characters?)".into())
                })?,
            }),
        };

        if let Some(url) = &args.redis {
            if !url.starts_with("redis://") && !url.starts_with("rediss://") {
                return Err(err(format!(
                    "--redis '{url}' is not a redis:// URL (e.g. redis://127.0.0.1:6379)"
                )));
            }
        }

        Ok(Self {
            upstream,
            upstream_scope,
            budgets,
            allow_origins,
            caller_header,
            credential,
            upstream_timeout_ms: args.upstream_timeout_ms,
            max_wait_ms: args.max_wait_ms,
            redis: args.redis.clone(),
            redis_timeout_ms: args.redis_timeout_ms,
            fail_open: args.fail_open,
            key_prefix: args.key_prefix.clone(),
        })
    }

    /// The budget whose route covers `target` (the most specific route wins).
    pub fn budget_for(&self, target: &Target) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for (i, b) in self.budgets.iter().enumerate() {
            for r in &b.routes {
                if r.covers(target) && best.is_none_or(|(s, _)| r.specificity() > s) {
                    best = Some((r.specificity(), i));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    pub fn origin_allowed(&self, origin: &str) -> bool {
        Target::parse(origin)
            .map(|t| t.path == "/" && self.allow_origins.contains(&t.origin()))
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ProxyArgs,
    }

    fn args(argv: &[&str]) -> ProxyArgs {
        let mut all = vec!["proxy"];
        all.extend_from_slice(argv);
        Cli::try_parse_from(all).expect("parse").args
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn routes_are_paths_under_the_upstream_only() {
        let c = ProxyConfig::resolve(
            &args(&["--upstream", "http://127.0.0.1:9000/", "--route", "/api/"]),
            &no_env,
        )
        .expect("valid");
        let at = |u: &str| Target::parse(u).expect("url");
        assert_eq!(
            c.budget_for(&at("http://127.0.0.1:9000/api/contacts")),
            Some(0)
        );
        assert_eq!(c.budget_for(&at("http://127.0.0.1:9000/apix")), None);
        assert_eq!(c.budget_for(&at("http://127.0.0.1:9000/admin")), None);
        let e = ProxyConfig::resolve(
            &args(&[
                "--upstream",
                "http://a.example",
                "--route",
                "https://b.example/",
            ]),
            &no_env,
        )
        .expect_err("a route is a path");
        assert!(e.to_string().contains("must be a path"), "{e}");
    }

    #[test]
    fn the_credential_comes_from_the_environment_and_is_never_printed() {
        let env = |name: &str| (name == CREDENTIAL_ENV).then(|| "Bearer s3cret".to_owned());
        let c =
            ProxyConfig::resolve(&args(&["--upstream", "http://a.example"]), &env).expect("valid");
        let cred = c.credential.expect("credential");
        assert_eq!(cred.header.as_str(), "authorization");
        assert_eq!(cred.value, "Bearer s3cret");
        assert!(!format!("{cred:?}").contains("s3cret"));
    }

    #[test]
    fn bad_settings_are_refused_with_what_to_change() {
        for (argv, says) in [
            (
                &["--upstream", "ftp://a.example"][..],
                "http:// or https://",
            ),
            (
                &[
                    "--upstream",
                    "http://a.example",
                    "--lease-ms",
                    "10",
                    "--upstream-timeout-ms",
                    "20",
                ][..],
                "must exceed",
            ),
            (
                &[
                    "--upstream",
                    "http://a.example",
                    "--redis",
                    "localhost:6379",
                ][..],
                "redis://",
            ),
            (
                &[
                    "--upstream",
                    "http://a.example",
                    "--allow-origin",
                    "https://x.example/app",
                ][..],
                "has a path",
            ),
        ] {
            let e = ProxyConfig::resolve(&args(argv), &no_env).expect_err("invalid");
            assert!(e.to_string().contains(says), "{argv:?}: {e}");
        }
        let mut cli = vec![
            "proxy",
            "--upstream",
            "http://a.example",
            "--algorithm",
            "token-bucket",
        ];
        assert!(Cli::try_parse_from(std::mem::take(&mut cli)).is_err());
    }

    #[test]
    fn a_config_file_names_budgets_routes_and_the_credentials_variable() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("proxy.json");
        std::fs::write(
            &path,
            r#"{
              "budgets": [
                {"name": "core", "windows": [{"limit": 10, "lengthMs": 1000}],
                 "matchPrefixes": ["/v1/"]},
                {"name": "search", "windows": [{"limit": 2, "lengthMs": 1000}],
                 "algorithm": "sliding-log", "matchPrefixes": ["/v1/search"]}
              ],
              "allowOrigins": ["https://app.example"],
              "credential": {"header": "x-api-key", "env": "MY_KEY"}
            }"#,
        )
        .expect("write");
        let path_text = path.to_string_lossy().into_owned();
        let argv = [
            "--upstream",
            "http://a.example",
            "--config",
            path_text.as_str(),
        ];
        let env = |name: &str| (name == "MY_KEY").then(|| "k-123".to_owned());
        let c = ProxyConfig::resolve(&args(&argv), &env).expect("valid");
        let at = |u: &str| Target::parse(u).expect("url");
        assert_eq!(c.budget_for(&at("http://a.example/v1/contacts")), Some(0));
        assert_eq!(c.budget_for(&at("http://a.example/v1/search/x")), Some(1));
        assert!(c.origin_allowed("https://app.example"));
        let cred = c.credential.expect("credential");
        assert_eq!(
            (cred.header.as_str(), cred.value.to_str().ok()),
            ("x-api-key", Some("k-123"))
        );

        let e = ProxyConfig::resolve(&args(&argv), &no_env).expect_err("no variable");
        assert!(e.to_string().contains("MY_KEY"), "{e}");
        std::fs::write(&path, r#"{"budget": []}"#).expect("write");
        let e = ProxyConfig::resolve(&args(&argv), &no_env).expect_err("unknown field");
        assert!(e.to_string().contains("budget"), "{e}");
    }

    #[test]
    fn origins_compare_by_scheme_host_and_port() {
        let c = ProxyConfig::resolve(
            &args(&[
                "--upstream",
                "http://a.example",
                "--allow-origin",
                "https://app.example",
            ]),
            &no_env,
        )
        .expect("valid");
        assert!(c.origin_allowed("https://app.example"));
        assert!(c.origin_allowed("https://app.example:443"));
        assert!(!c.origin_allowed("http://app.example"));
        assert!(!c.origin_allowed("https://app.example.evil.example"));
        assert!(!c.origin_allowed("null"));
    }
}
