//! Real parts for the proxy's tests: a `redis-server` of the test's own on a free port with a
//! temporary directory, `sluice proxy` instances as child processes (so one can be killed
//! mid-request), the strict demo API as the upstream, and callers that keep asking.
//!
//! Tests skip (pass with a message) when `redis-server` is missing, unless `CI` is set: then a
//! missing server is a failure.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// One heavy test at a time: each runs several processes that count time against a limit,
/// and nine of them at once on a two-core machine measure the machine, not the proxy.
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// How long the proxy says it held a request for its turn (`Server-Timing:
/// sluice-hold;dur=MS`), read by the worker's own reader, so that a test sees what the worker
/// would take from the answer (an upstream's own metrics after ours included).
pub fn held_ms(headers: &reqwest::header::HeaderMap) -> Option<u64> {
    let fields: Vec<(String, String)> = headers
        .iter()
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
        .collect();
    sluice_shared::headers::read_signal(200, &fields, 0).held_ms
}

/// Straight to stderr: libtest captures `eprintln!` of passing tests, and figures must be seen.
pub fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Whether `redis-server` can be run; skips with a message (or fails under CI) if not.
pub fn redis_available(test: &str) -> bool {
    if sluice::proxy::redis_server::installed() {
        return true;
    }
    if ci() {
        panic!("redis-server is not installed (CI is set, so this is a failure, not a skip)");
    }
    report(&format!(
        "SKIPPED {test}: redis-server is not installed (apt-get install -y redis-server)"
    ));
    false
}

/// Whether Chromium and the wasm bundles are there for a browser test; skips with a message
/// (or fails under CI) if not.
pub fn browser_available(test: &str) -> bool {
    let missing = if sluice::browser::find_chromium().is_none() {
        "Chromium not found (apt-get install -y chromium, or set SLUICE_CHROMIUM)"
    } else if !sluice::browser::wasm_built() {
        "the wasm bundles were not built (build without SLUICE_SKIP_WASM)"
    } else {
        return true;
    };
    if ci() {
        panic!("{missing} (CI is set, so this is a failure, not a skip)");
    }
    report(&format!("SKIPPED {test}: {missing}"));
    false
}

#[derive(clap::Parser)]
struct Flags {
    #[command(flatten)]
    args: sluice::proxy::ProxyArgs,
}

/// A proxy's configuration from its command-line flags (after `proxy`), as `sluice proxy`
/// reads them; `env` stands in for the environment.
pub fn proxy_config(
    flags: &[&str],
    env: &dyn Fn(&str) -> Option<String>,
) -> sluice::proxy::ProxyConfig {
    use clap::Parser;
    let argv = std::iter::once("proxy").chain(flags.iter().copied());
    let parsed = Flags::try_parse_from(argv).expect("proxy flags");
    sluice::proxy::ProxyConfig::resolve(&parsed.args, env).expect("proxy config")
}

/// A test's own Redis (see `sluice::proxy::redis_server`).
pub struct Redis(pub sluice::proxy::redis_server::RedisServer);

impl Redis {
    pub fn start() -> Self {
        Redis(sluice::proxy::redis_server::RedisServer::start().expect("redis-server starts"))
    }

    pub fn url(&self) -> String {
        self.0.url()
    }

    pub fn restart_empty(&mut self) {
        self.0.restart_empty().expect("redis-server restarts");
    }

    pub fn freeze(&self) {
        self.0.freeze();
    }

    pub fn thaw(&self) {
        self.0.thaw();
    }
}

/// One `sluice proxy` process.
pub struct Proxy {
    pub addr: SocketAddr,
    child: Option<Child>,
}

impl Proxy {
    /// Starts `sluice proxy --upstream <upstream> --listen 127.0.0.1:0 <extra>` and waits for
    /// the line that says where it listens.
    pub fn start(upstream: SocketAddr, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("proxy")
            .args(["--upstream", &format!("http://{upstream}")])
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("sluice proxy starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the proxy says where it listens");
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"));
        Proxy {
            addr,
            child: Some(child),
        }
    }

    /// SIGKILL: no chance to give anything back.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Every answer the callers got, by caller and status.
#[derive(Default, Debug)]
pub struct Tally {
    pub answers: Vec<(usize, u16, Instant)>,
}

impl Tally {
    pub fn count(&self, status: u16) -> usize {
        self.answers.iter().filter(|a| a.1 == status).count()
    }

    pub fn ok_of(&self, caller: usize) -> usize {
        self.answers
            .iter()
            .filter(|a| a.0 == caller && a.1 == 200)
            .count()
    }
}

/// `callers` callers, each asking again as soon as it is answered (after Retry-After on a
/// 429 or 503), each through proxy `caller % proxies.len()`, until `stop` says so.
pub async fn load(
    proxies: Arc<Mutex<Vec<SocketAddr>>>,
    callers: usize,
    run_for: Duration,
) -> Tally {
    let tally = Arc::new(Mutex::new(Tally::default()));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let end = Instant::now() + run_for;
    let mut tasks = Vec::new();
    for caller in 0..callers {
        let (client, tally, proxies) = (client.clone(), tally.clone(), proxies.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let addr = {
                    let list = proxies.lock().expect("list");
                    list[caller % list.len()]
                };
                let sent = client
                    .get(format!("http://{addr}/api/contacts"))
                    .header("x-sluice-caller", format!("caller-{caller}"))
                    .send()
                    .await;
                let (status, wait) = match sent {
                    Ok(r) => {
                        let wait = r
                            .headers()
                            .get("retry-after")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse::<u64>().ok());
                        (r.status().as_u16(), wait)
                    }
                    // An instance that was killed: counted as 0 and asked again soon.
                    Err(_) => (0, Some(0)),
                };
                tally
                    .lock()
                    .expect("tally")
                    .answers
                    .push((caller, status, Instant::now()));
                match (status, wait) {
                    (200, _) => {}
                    (_, Some(s)) => {
                        tokio::time::sleep(Duration::from_millis((s * 1000).max(50))).await
                    }
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    Arc::try_unwrap(tally)
        .map(|m| m.into_inner().expect("tally"))
        .unwrap_or_default()
}

pub use sluice::bench::proxy::share_of_limit;
