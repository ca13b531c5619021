//! The Firefox harness: the demo server in-process ([`Site`], as the Chromium harness has) and a
//! headless Firefox ESR driven by `tests/firefox/driver.mjs`, which speaks WebDriver BiDi to
//! Firefox's own `--remote-debugging-port` through puppeteer-core (no geckodriver; puppeteer-core
//! never downloads a browser).
//!
//! The driver is a node process that takes one JSON command a line on stdin and answers each on
//! stdout (see the script); page and worker console lines and Firefox's own output go to
//! `firefox.log` among the test's artifacts, printed when a test fails. The node process and
//! Firefox are killed when the [`FirefoxHarness`] is dropped, also when a test panics or times
//! out. BiDi cannot stop a service worker or fire Background Sync (Firefox has none), so the
//! tests that need those stay Chromium's.
//!
//! Tests skip (pass with a message) without Firefox, node or the driver's `node_modules`,
//! unless `CI` is set: then they fail.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write as _};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use sluice::browser::{self, Site};
use sluice::server::WwwSource;
use tokio::sync::oneshot;

use super::{
    fresh_artifacts, require, require_wasm, BrowserHarness, BrowserOptions, PageScript, Setup,
};

/// The npm package holding the driver script and its `node_modules`.
const DRIVER_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/firefox");
const DRIVER_SCRIPT: &str = "driver.mjs";
/// How to install what the driver needs.
const DRIVER_INSTALL: &str = "run `npm ci --prefix tests/firefox`";

/// How long Firefox may take to start and show its version.
const LAUNCH_LIMIT: Duration = Duration::from_secs(60);
/// How long a graceful quit may take before the harness kills Firefox.
const QUIT_LIMIT: Duration = Duration::from_secs(30);

/// `SLUICE_FIREFOX`, else `firefox-esr` or `firefox` on `PATH`.
pub fn find_firefox() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SLUICE_FIREFOX") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    ["firefox-esr", "firefox"].into_iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// Whether node runs and `node_modules` holds puppeteer-core at the version `package.json`
/// pins (an older install would drive Firefox with other code than the lockfile says).
fn driver_installed() -> Result<(), String> {
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !node.is_ok_and(|s| s.success()) {
        return Err("node not found on PATH (apt-get install -y nodejs)".into());
    }
    let read_json = |path: PathBuf| -> Result<Value, String> {
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    };
    let dir = Path::new(DRIVER_DIR);
    let pinned = read_json(dir.join("package.json"))?["devDependencies"]["puppeteer-core"].clone();
    let installed = read_json(dir.join("node_modules/puppeteer-core/package.json"))
        .map_err(|e| format!("puppeteer-core is not installed in tests/firefox ({e})"))?["version"]
        .clone();
    if installed != pinned {
        return Err(format!(
            "tests/firefox has puppeteer-core {installed} installed, package.json pins {pinned}"
        ));
    }
    Ok(())
}

/// How a Firefox test's harness is set up (the builders both browsers have are
/// [`BrowserOptions`]'s).
pub type FirefoxOptions = BrowserOptions<Firefox>;

/// What only Firefox's harness takes.
#[derive(Clone, Debug, Default)]
pub struct Firefox {
    /// Firefox preferences on top of the harness's own.
    pub prefs: Map<String, Value>,
}

impl FirefoxOptions {
    /// Firefox stops a service worker `ms` after its last event, also one still holding an
    /// event open with `waitUntil` (its defaults: 30 s each): the browser's own way of stopping
    /// a worker, made short enough for a test, where the Chromium tests stop it over CDP.
    pub fn stop_idle_workers_after(mut self, ms: u64) -> Self {
        let prefs = &mut self.browser.prefs;
        prefs.insert("dom.serviceWorkers.idle_timeout".into(), json!(ms));
        prefs.insert("dom.serviceWorkers.idle_extended_timeout".into(), json!(ms));
        self
    }
}

impl Setup for FirefoxOptions {
    type Harness = FirefoxHarness;

    async fn start(self, name: &str) -> Option<FirefoxHarness> {
        FirefoxHarness::start_with(name, self).await
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("starting node {DRIVER_SCRIPT}: {0}")]
    Spawn(String),
    #[error("the driver could not start Firefox: {0}")]
    Launch(String),
    #[error("the driver exited (its log: firefox.log among the test's artifacts)")]
    Gone,
    #[error("page script failed: {0}")]
    Script(String),
    #[error("{op}: {message}")]
    Failed { op: String, message: String },
    #[error("the driver said something outside its protocol: {0}")]
    Protocol(String),
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, &'static str),
}

/// The driver's answer to one command.
type Answer = Result<Value, DriverError>;

/// Commands sent and not yet answered.
#[derive(Default)]
struct Waiting {
    next_id: u64,
    answers: HashMap<u64, oneshot::Sender<Answer>>,
    /// The driver's stdout closed: no answer will come.
    gone: bool,
}

/// One driver process and the Firefox it launched; both are killed when dropped, unless
/// Firefox was quit.
struct Driver {
    node: Mutex<Child>,
    stdin: Mutex<ChildStdin>,
    waiting: Arc<Mutex<Waiting>>,
    /// Firefox's process id, also its process group's (puppeteer starts it detached).
    firefox_pid: Option<libc::pid_t>,
    quit: AtomicBool,
    version: String,
}

impl Driver {
    /// Starts the driver, which launches `firefox` on `profile` with `prefs`; its stderr (and
    /// so Firefox's output) is appended to `log`.
    async fn launch(
        firefox: &Path,
        profile: &Path,
        prefs: &Map<String, Value>,
        log: &Path,
    ) -> Result<Driver, DriverError> {
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| DriverError::Spawn(format!("{}: {e}", log.display())))?;
        let launch = json!({
            "executablePath": firefox,
            "userDataDir": profile,
            "prefs": prefs,
        });
        let mut cmd = Command::new("node");
        cmd.arg(DRIVER_SCRIPT)
            .arg(launch.to_string())
            .current_dir(DRIVER_DIR)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file);
        // Its own process group, so that nothing it starts outlives the harness.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut node = cmd.spawn().map_err(|e| DriverError::Spawn(e.to_string()))?;
        let (Some(stdin), Some(stdout)) = (node.stdin.take(), node.stdout.take()) else {
            return Err(DriverError::Spawn("no pipes to the driver".into()));
        };
        let waiting = Arc::new(Mutex::new(Waiting::default()));
        let (ready_tx, ready_rx) = oneshot::channel();
        let reader_waiting = waiting.clone();
        // A thread, not a task: the reads block, and tests run on two runtime threads.
        std::thread::spawn(move || read_answers(BufReader::new(stdout), ready_tx, &reader_waiting));
        let mut driver = Driver {
            node: Mutex::new(node),
            stdin: Mutex::new(stdin),
            waiting,
            firefox_pid: None,
            quit: AtomicBool::new(false),
            version: String::new(),
        };
        let ready = tokio::time::timeout(LAUNCH_LIMIT, ready_rx)
            .await
            .map_err(|_| DriverError::Timeout(LAUNCH_LIMIT, "Firefox to start"))?
            .map_err(|_| DriverError::Gone)??;
        driver.firefox_pid = ready["browserPid"]
            .as_i64()
            .and_then(|pid| libc::pid_t::try_from(pid).ok());
        driver.version = ready["version"].as_str().unwrap_or("unknown").to_string();
        Ok(driver)
    }

    /// Sends `op` with `params` and waits for its answer.
    async fn call(&self, op: &str, params: Value) -> Answer {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut w = lock(&self.waiting);
            if w.gone {
                return Err(DriverError::Gone);
            }
            w.next_id += 1;
            let id = w.next_id;
            w.answers.insert(id, tx);
            id
        };
        let mut command = match params {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        command.insert("id".into(), json!(id));
        command.insert("op".into(), json!(op));
        let line = format!("{}\n", Value::Object(command));
        {
            let mut stdin = lock(&self.stdin);
            if stdin
                .write_all(line.as_bytes())
                .and_then(|()| stdin.flush())
                .is_err()
            {
                lock(&self.waiting).answers.remove(&id);
                return Err(DriverError::Gone);
            }
        }
        match rx.await {
            Ok(Err(DriverError::Failed { message, .. })) => Err(DriverError::Failed {
                op: op.to_string(),
                message,
            }),
            Ok(answer) => answer,
            Err(_) => Err(DriverError::Gone),
        }
    }

    /// Quits Firefox as a person quitting it would (its profile is written out and closed),
    /// then waits for the driver to exit.
    async fn quit(&self) -> Result<(), DriverError> {
        tokio::time::timeout(QUIT_LIMIT, self.call("quit", json!({})))
            .await
            .map_err(|_| DriverError::Timeout(QUIT_LIMIT, "Firefox to quit"))??;
        self.quit.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + QUIT_LIMIT;
        while !matches!(lock(&self.node).try_wait(), Ok(Some(_))) {
            if Instant::now() > deadline {
                return Err(DriverError::Timeout(QUIT_LIMIT, "the driver to exit"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let mut node = lock(&self.node);
        let groups = [
            self.firefox_pid
                .filter(|_| !self.quit.load(Ordering::SeqCst)),
            libc::pid_t::try_from(node.id()).ok(),
        ];
        for pid in groups.into_iter().flatten() {
            // SAFETY: sends a signal to a process group this harness started; touches no
            // memory.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = node.kill();
        let _ = node.wait();
    }
}

/// A lock that a panicking test thread left poisoned is still good: what it guards is a map
/// of answers or a pipe.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Reads the driver's stdout: the first line is its `ready` (or `fatal`), each later one
/// answers a command. When the driver exits, every command still waiting hears so.
fn read_answers(
    stdout: BufReader<std::process::ChildStdout>,
    ready: oneshot::Sender<Result<Value, DriverError>>,
    waiting: &Mutex<Waiting>,
) {
    let mut ready = Some(ready);
    for line in stdout.lines() {
        let Ok(line) = line else { break };
        let message: Value = match serde_json::from_str(&line) {
            Ok(m) => m,
            Err(_) => {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(Err(DriverError::Protocol(line)));
                }
                continue;
            }
        };
        if let Some(tx) = ready.take() {
            let _ = tx.send(match (message.get("ready"), message.get("fatal")) {
                (Some(r), _) => Ok(r.clone()),
                (None, Some(f)) => Err(DriverError::Launch(f.as_str().unwrap_or("?").into())),
                (None, None) => Err(DriverError::Protocol(line)),
            });
            continue;
        }
        let Some(id) = message["id"].as_u64() else {
            continue;
        };
        let answer = match message.get("error") {
            None => Ok(message.get("ok").cloned().unwrap_or(Value::Null)),
            Some(e) if message["script"] == true => {
                Err(DriverError::Script(e.as_str().unwrap_or("?").into()))
            }
            Some(e) => Err(DriverError::Failed {
                op: String::new(),
                message: e.as_str().unwrap_or("?").into(),
            }),
        };
        if let Some(tx) = lock(waiting).answers.remove(&id) {
            let _ = tx.send(answer);
        }
    }
    let mut w = lock(waiting);
    w.gone = true;
    // Dropping the senders tells each waiting command the driver is gone.
    w.answers.clear();
}

/// A server and a Firefox driven at it, with the helpers the tests use. Dropping it kills
/// Firefox.
pub struct FirefoxHarness {
    pub name: String,
    pub site: Site,
    /// The driver's and Firefox's log and the arrivals go here (`target/tmp/e2e/<test>/`).
    pub artifacts: PathBuf,
    firefox: PathBuf,
    prefs: Map<String, Value>,
    /// Replaced by [`FirefoxHarness::restart`]. Before `profile`: fields drop in order, and
    /// Firefox must be gone before its profile is removed.
    driver: Mutex<Arc<Driver>>,
    /// Kept across restarts: it is the browser's disk (IndexedDB, registrations).
    profile: tempfile::TempDir,
    started: Instant,
}

impl Deref for FirefoxHarness {
    type Target = Site;

    fn deref(&self) -> &Site {
        &self.site
    }
}

/// What every Firefox in these tests gets.
fn harness_prefs() -> Map<String, Value> {
    let mut prefs = Map::new();
    // Worker console output in the log, where BiDi cannot reach.
    prefs.insert("devtools.console.stdout.content".into(), json!(true));
    prefs
}

impl FirefoxHarness {
    /// Starts the server and Firefox; `None` means "skip this test" (something missing and
    /// not under CI).
    pub async fn start_with(name: &str, options: FirefoxOptions) -> Option<FirefoxHarness> {
        let firefox = find_firefox();
        if !require(
            firefox.is_some(),
            "Firefox not found (set SLUICE_FIREFOX or put firefox-esr on PATH)",
            "install it (apt-get install -y firefox-esr)",
        ) {
            return None;
        }
        let installed = driver_installed();
        let problem = installed.as_ref().err().cloned().unwrap_or_default();
        if !require(installed.is_ok(), &problem, DRIVER_INSTALL) {
            return None;
        }
        if !require_wasm() {
            return None;
        }
        let firefox = firefox?;
        let started = Instant::now();
        let artifacts = fresh_artifacts(name);
        let site = Site::start(options.api, WwwSource::Embedded, options.cross_origin, &[])
            .await
            .unwrap_or_else(|e| panic!("starting the server: {e}"));
        let profile = tempfile::Builder::new()
            .prefix("sluice-firefox-")
            .tempdir()
            .expect("profile dir");
        let mut prefs = harness_prefs();
        prefs.extend(options.browser.prefs);
        let driver = Driver::launch(
            &firefox,
            profile.path(),
            &prefs,
            &artifacts.join("firefox.log"),
        )
        .await
        .unwrap_or_else(|e| panic!("starting Firefox: {e}"));
        let harness = FirefoxHarness {
            name: name.to_string(),
            site,
            artifacts,
            firefox,
            prefs,
            driver: Mutex::new(Arc::new(driver)),
            profile,
            started,
        };
        harness.note(format!(
            "{} up in {:.1?}",
            harness.driver().version,
            harness.started.elapsed()
        ));
        Some(harness)
    }

    fn driver(&self) -> Arc<Driver> {
        lock(&self.driver).clone()
    }

    /// The browser's name and version, as BiDi reports it (`firefox/153.8.0`).
    pub fn version(&self) -> String {
        self.driver().version.clone()
    }

    /// Quits Firefox as a person would, with whatever is open, and starts it again on the same
    /// profile: what a person closing the last window (on Linux, Firefox quits) and coming back
    /// later does. Tabs opened before are gone.
    pub async fn restart(&self) {
        let old = self.driver();
        old.quit()
            .await
            .unwrap_or_else(|e| panic!("quitting Firefox: {e}"));
        self.note("Firefox quit; starting it again on the same profile");
        let restarted = Instant::now();
        let new = Driver::launch(
            &self.firefox,
            self.profile.path(),
            &self.prefs,
            &self.artifacts.join("firefox.log"),
        )
        .await
        .unwrap_or_else(|e| panic!("starting Firefox again: {e}"));
        *lock(&self.driver) = Arc::new(new);
        self.note(format!("Firefox up again in {:.1?}", restarted.elapsed()));
    }

    /// Waits until `check` holds, polling every 20 ms; panics with `what` after `limit`.
    pub async fn wait_until(&self, what: &str, limit: Duration, check: impl FnMut() -> bool) {
        browser::wait_for(what, limit, check)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// A line in the log, between Firefox's.
    pub fn note(&self, line: impl Into<String>) {
        let path = self.artifacts.join("firefox.log");
        if let Ok(mut log) = std::fs::OpenOptions::new().append(true).open(path) {
            let _ = writeln!(log, "harness: {}", line.into());
        }
    }
}

impl BrowserHarness for FirefoxHarness {
    type Tab = FirefoxTab;

    const BROWSER: &'static str = "Firefox";

    fn site(&self) -> &Site {
        &self.site
    }

    fn artifacts(&self) -> &Path {
        &self.artifacts
    }

    /// This process and Firefox's process group (Firefox's own processes); the node driver,
    /// in a group of its own, counts as other work.
    fn cpu_sample(&self) -> Option<browser::load::CpuSample> {
        let group = self
            .driver()
            .firefox_pid
            .and_then(|pid| u32::try_from(pid).ok());
        browser::load::CpuSample::take(group)
    }

    /// Opens a new tab at `path` (on this server) and waits for it to load.
    async fn open(&self, path: &str) -> FirefoxTab {
        let driver = self.driver();
        let opened = driver
            .call("open", json!({ "url": self.url(path) }))
            .await
            .unwrap_or_else(|e| panic!("opening {path}: {e}"));
        let page = opened["page"]
            .as_u64()
            .unwrap_or_else(|| panic!("open answered {opened}"));
        FirefoxTab { driver, page }
    }
}

/// How much of the log a failing test prints: the end, where the failure is.
const LOG_LINES_ON_FAILURE: usize = 200;

impl Drop for FirefoxHarness {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let path = self.artifacts.join("firefox.log");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(LOG_LINES_ON_FAILURE)..];
        eprintln!(
            "---- {}: Firefox, driver and harness log, last {} lines ({:.1?}) ----\n{}\n---- artifacts: {} ----",
            self.name,
            tail.len(),
            self.started.elapsed(),
            tail.join("\n"),
            self.artifacts.display()
        );
    }
}

/// One Firefox tab; every helper panics with the script and the error on failure.
pub struct FirefoxTab {
    driver: Arc<Driver>,
    page: u64,
}

impl PageScript for FirefoxTab {
    async fn try_eval(&self, body: &str) -> Result<Value, String> {
        self.driver
            .call("eval", json!({ "page": self.page, "body": body }))
            .await
            .map_err(|e| match e {
                DriverError::Script(text) => text,
                other => other.to_string(),
            })
    }
}

impl FirefoxTab {
    /// Reloads as a person does (`location.reload()`, a `beforeunload` prompt accepted) and
    /// waits for the load, not for the client: see [`PageScript::wait_ready`].
    pub async fn reload(&self) {
        self.driver
            .call("reload", json!({ "page": self.page }))
            .await
            .unwrap_or_else(|e| panic!("reload: {e}"));
    }

    /// Closes the tab.
    pub async fn close(self) {
        self.driver
            .call("close", json!({ "page": self.page }))
            .await
            .unwrap_or_else(|e| panic!("closing the tab: {e}"));
    }
}
