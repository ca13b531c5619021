//! The end-to-end harness: the demo server in-process, a headless Chromium, and helpers to
//! drive pages and the service worker.
//!
//! Every test gets its own server (on `127.0.0.1:0`), its own browser and profile directory,
//! so tests are independent and can run in parallel. The browser is killed when the
//! [`Harness`] is dropped, also when a test panics or times out.
//!
//! Tests skip (pass with a message) when Chromium is missing, unless `CI` is set: then a
//! missing browser fails them.

#![allow(dead_code)] // helpers for tests still to come

pub mod cdp;

use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::http::header;
use axum::response::IntoResponse;
use chromiumoxide::cdp::js_protocol::runtime::EvaluateParams;
use chromiumoxide::error::CdpError;
use chromiumoxide::page::ScreenshotParams;
use chromiumoxide::{Browser, Page};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use sluice::api::{ApiConfig, ApiHandle};
use sluice::server::{self, WwwSource};

pub use cdp::Cdp;

/// The test page: loads the client, registers `/sw.js` and exposes `window.sluice`.
pub const E2E_PAGE: &str = include_str!("../page.html");

/// How long a whole test may take unless it says otherwise.
pub const DEFAULT_TEST_SECS: u64 = 90;

/// Declares an end-to-end test: a multi-threaded tokio test that starts a [`Harness`] (or
/// skips), runs the body with `$h: &Harness` under a time limit, and always kills the
/// browser. `e2e!(name, secs, |h| { ... })`.
#[macro_export]
macro_rules! e2e {
    ($(#[$meta:meta])* $name:ident, $secs:expr, |$h:ident| $body:block) => {
        $(#[$meta])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some(harness) = $crate::support::Harness::start(stringify!($name)).await else {
                return;
            };
            let $h: &$crate::support::Harness = &harness;
            let limit = std::time::Duration::from_secs($secs);
            let started = std::time::Instant::now();
            let result = tokio::time::timeout(limit, async move $body).await;
            if result.is_err() {
                panic!("{} timed out after {:?}", stringify!($name), limit);
            }
            eprintln!("{} took {:.1?}", stringify!($name), started.elapsed());
        }
    };
    ($(#[$meta:meta])* $name:ident, |$h:ident| $body:block) => {
        $crate::e2e!($(#[$meta])* $name, $crate::support::DEFAULT_TEST_SECS, |$h| $body);
    };
}

/// Time-compressed server limits: fast tests, still rate-limited.
pub fn test_api_config() -> ApiConfig {
    ApiConfig {
        limit: 100,
        window_ms: 1000,
        latency_ms: 5,
        seed: Some(7),
        ..ApiConfig::default()
    }
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// `SLUICE_CHROMIUM`, else the first of the usual names on `PATH`.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SLUICE_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for name in [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// Skips (returns false) with a message, or panics under CI.
fn require(ok: bool, what: &str) -> bool {
    if ok {
        return true;
    }
    if ci() {
        panic!("{what} (CI is set, so this is a failure, not a skip)");
    }
    // Straight to the stderr handle: libtest captures `eprintln!` of passing tests, and a skip
    // must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {}: {what}; install it (apt-get install -y chromium) to run end-to-end tests",
        std::thread::current().name().unwrap_or("e2e test")
    );
    false
}

/// The Chromium process; killed with its whole process group when dropped.
struct Chrome {
    child: Child,
    /// Removed after the process is gone (fields drop after `Drop::drop`).
    _profile: tempfile::TempDir,
}

impl Chrome {
    async fn launch(exe: &Path, artifacts: &Path) -> Result<(Chrome, String), String> {
        let profile = tempfile::Builder::new()
            .prefix("sluice-e2e-")
            .tempdir()
            .map_err(|e| format!("profile dir: {e}"))?;
        let log = std::fs::File::create(artifacts.join("chromium.log"))
            .map_err(|e| format!("chromium.log: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-dev-shm-usage",
            "--disable-extensions",
            "--mute-audio",
            "--remote-debugging-port=0",
            "--window-size=1024,768",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
        // Its own process group, so that the renderers and the zygote die with it.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", exe.display()))?;
        let chrome = Chrome {
            child,
            _profile: profile,
        };
        // Chromium writes the port it chose and the browser's websocket path here.
        let port_file = chrome._profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    return Ok((
                        chrome,
                        format!("ws://127.0.0.1:{}{}", port.trim(), path.trim()),
                    ));
                }
            }
            if Instant::now() > deadline {
                return Err("Chromium did not open its debugging port in 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for Chrome {
    fn drop(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: sends a signal to the process group this harness created; no memory access.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server, a browser and the helpers to drive them. Dropping it kills the browser.
pub struct Harness {
    pub name: String,
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`
    pub origin: String,
    /// The demo API: records every arrival, configurable at run time.
    pub api: ApiHandle,
    pub cdp: Cdp,
    /// Screenshots and the browser's log go here (`target/tmp/e2e/<test>/`).
    pub artifacts: PathBuf,
    browser: Browser,
    handler: tokio::task::JoinHandle<()>,
    started: Instant,
    // Last: the process is killed after the connections are dropped.
    _chrome: Chrome,
}

impl Harness {
    /// Starts the server and the browser; `None` means "skip this test" (no Chromium and not
    /// under CI, or a build without the wasm bundles).
    pub async fn start(name: &str) -> Option<Harness> {
        Self::start_with(name, test_api_config()).await
    }

    pub async fn start_with(name: &str, config: ApiConfig) -> Option<Harness> {
        let chromium = find_chromium();
        if !require(
            chromium.is_some(),
            "Chromium not found (set SLUICE_CHROMIUM or put chromium on PATH)",
        ) {
            return None;
        }
        let wasm_built = sluice::assets::pkg("sluice_client_bg.wasm")
            .is_some_and(|b| !b.is_empty())
            && sluice::assets::pkg("sluice_sw_bg.wasm").is_some_and(|b| !b.is_empty());
        if !require(
            wasm_built,
            "the wasm bundles were not built (SLUICE_SKIP_WASM?)",
        ) {
            return None;
        }
        let started = Instant::now();
        let artifacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("e2e")
            .join(name);
        let _ = std::fs::remove_dir_all(&artifacts);
        std::fs::create_dir_all(&artifacts).expect("artifacts dir");

        config.validate().expect("API config");
        let api = ApiHandle::new(config);
        let app = server::router(api.clone(), WwwSource::Embedded).route(
            "/e2e.html",
            axum::routing::get(|| async {
                (
                    [
                        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                        (header::CACHE_CONTROL, "no-cache"),
                    ],
                    E2E_PAGE,
                )
                    .into_response()
            }),
        );
        let addr = server::serve_in_background(SocketAddr::from(([127, 0, 0, 1], 0)), app)
            .await
            .expect("server");

        let (chrome, ws_url) = Chrome::launch(&chromium.unwrap(), &artifacts)
            .await
            .unwrap_or_else(|e| panic!("launching Chromium: {e}"));
        // Ours first, so that it sees the worker targets from the start.
        let cdp = Cdp::connect(&ws_url)
            .await
            .unwrap_or_else(|e| panic!("CDP: {e}"));
        let (browser, mut handler) = Browser::connect(ws_url.clone())
            .await
            .unwrap_or_else(|e| panic!("chromiumoxide: {e}"));
        // Errors here are mostly events of a newer protocol than chromiumoxide knows: not fatal.
        let handler = tokio::spawn(async move { while handler.next().await.is_some() {} });
        cdp.note(format!("browser up in {:.1?}", started.elapsed()));
        Some(Harness {
            name: name.to_string(),
            origin: format!("http://{addr}"),
            addr,
            api,
            cdp,
            artifacts,
            browser,
            handler,
            started,
            _chrome: chrome,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.origin, path)
    }

    /// Opens a new tab at `path` (on this server) and waits for it to load.
    pub async fn open(&self, path: &str) -> Tab {
        let page = self
            .browser
            .new_page(self.url(path))
            .await
            .unwrap_or_else(|e| panic!("opening {path}: {e}"));
        Tab {
            page,
            artifacts: self.artifacts.clone(),
        }
    }

    /// Opens the test page and waits until the client is registered and the page controlled.
    pub async fn open_e2e(&self) -> Tab {
        self.open_e2e_with("").await
    }

    /// As [`Harness::open_e2e`], with a query string for the page (`resendAfterMs=500`).
    pub async fn open_e2e_with(&self, query: &str) -> Tab {
        let path = if query.is_empty() {
            "/e2e.html".to_string()
        } else {
            format!("/e2e.html?{query}")
        };
        let tab = self.open(&path).await;
        tab.wait_ready().await;
        tab
    }

    /// Sends a `ServiceWorker.*` command through a page session.
    async fn service_worker_call(&self, method: &str, params: Value) -> Result<Value, String> {
        let session = self.cdp.control_session().await?;
        self.cdp.call(method, params, Some(&session)).await
    }

    /// Stops the service worker (its memory is gone; the next event starts it afresh) and waits
    /// until the browser reports it stopped. It may be running again already when this returns
    /// (a page's keep-alive restarts it at once).
    pub async fn stop_worker(&self) {
        self.cdp.note("harness: stopping all workers");
        let stops = self.worker_stops();
        self.service_worker_call("ServiceWorker.stopAllWorkers", json!({}))
            .await
            .unwrap_or_else(|e| panic!("stopAllWorkers: {e}"));
        self.wait_until("the worker to stop", Duration::from_secs(10), || {
            self.worker_stops() > stops
        })
        .await;
    }

    /// How many times a running service worker stopped so far.
    pub fn worker_stops(&self) -> u64 {
        self.cdp.state().worker_stops
    }

    /// Whether any service worker version is starting or running.
    pub fn worker_running(&self) -> bool {
        self.cdp.state().versions.values().any(|v| {
            matches!(
                v["runningStatus"].as_str(),
                Some("starting") | Some("running")
            )
        })
    }

    /// How many times a service worker was started so far.
    pub fn worker_starts(&self) -> u64 {
        self.cdp.state().worker_starts
    }

    /// Takes the worker's own network offline or back online (pages are not affected). Applies
    /// to workers started later too, before their first line runs.
    pub async fn set_worker_offline(&self, offline: bool) {
        self.cdp
            .note(format!("harness: worker offline = {offline}"));
        let sessions: Vec<String> = {
            let mut st = self.cdp.state();
            st.offline = offline;
            st.workers.values().flatten().cloned().collect()
        };
        for s in sessions {
            // A session of a worker that is going away fails: the next one gets the flag.
            if let Err(e) = self.cdp.emulate_offline(&s, offline).await {
                self.cdp.note(format!("emulating offline={offline}: {e}"));
            }
        }
    }

    /// The id of the registration whose scope is on this server.
    pub async fn registration_id(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = self
                .cdp
                .state()
                .registrations
                .iter()
                .find(|(_, scope)| scope.starts_with(&self.origin))
                .map(|(id, _)| id.clone());
            if let Some(id) = found {
                return id;
            }
            assert!(
                Instant::now() < deadline,
                "no service worker registration for {} was reported",
                self.origin
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Fires a Background Sync event at the worker.
    pub async fn dispatch_sync(&self, tag: &str, last_chance: bool) {
        let registration_id = self.registration_id().await;
        self.service_worker_call(
            "ServiceWorker.dispatchSyncEvent",
            json!({
                "origin": self.origin,
                "registrationId": registration_id,
                "tag": tag,
                "lastChance": last_chance,
            }),
        )
        .await
        .unwrap_or_else(|e| panic!("dispatchSyncEvent: {e}"));
    }

    /// Waits until `check` holds, polling every 20 ms; panics with `what` after `limit`.
    pub async fn wait_until(&self, what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !check() {
            assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Console output of pages and workers so far, with harness notes.
    pub fn log(&self) -> Vec<String> {
        self.cdp.state().log.clone()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let log = self.log();
        let failed = std::thread::panicking();
        let text = log.join("\n");
        let _ = std::fs::write(self.artifacts.join("console.log"), &text);
        if failed {
            eprintln!(
                "---- {}: browser console and harness notes ({:.1?}) ----\n{text}\n---- artifacts: {} ----",
                self.name,
                self.started.elapsed(),
                self.artifacts.display()
            );
        }
        self.handler.abort();
    }
}

/// One browser tab.
pub struct Tab {
    pub page: Page,
    artifacts: PathBuf,
}

impl Tab {
    /// Runs `body` as the body of an async function in the page and returns its result
    /// (JSON-serialisable) or the exception's text.
    pub async fn try_eval(&self, body: &str) -> Result<Value, String> {
        let expression = format!(
            "(async () => {{ {body}\n}})().then(v => JSON.stringify(v === undefined ? null : v))"
        );
        let params = EvaluateParams::builder()
            .expression(expression)
            .await_promise(true)
            .return_by_value(true)
            .build()
            .map_err(|e| e.to_string())?;
        let result = match self.page.evaluate_expression(params).await {
            Ok(r) => r,
            Err(CdpError::JavascriptException(details)) => {
                let text = details
                    .exception
                    .as_ref()
                    .and_then(|e| e.description.clone())
                    .unwrap_or_else(|| details.text.clone());
                return Err(text);
            }
            Err(e) => return Err(e.to_string()),
        };
        let text: String = result.into_value().map_err(|e| e.to_string())?;
        serde_json::from_str(&text).map_err(|e| format!("result is not JSON: {e}: {text}"))
    }

    /// [`Tab::try_eval`] that panics on an exception.
    pub async fn eval(&self, body: &str) -> Value {
        self.try_eval(body)
            .await
            .unwrap_or_else(|e| panic!("page script failed: {e}\n--- script ---\n{body}"))
    }

    /// [`Tab::eval`] into a type.
    pub async fn eval_as<T: DeserializeOwned>(&self, body: &str) -> T {
        let v = self.eval(body).await;
        serde_json::from_value(v.clone())
            .unwrap_or_else(|e| panic!("unexpected result {v}: {e}\n--- script ---\n{body}"))
    }

    /// Waits until the test page registered the client (`window.sluice`).
    pub async fn wait_ready(&self) {
        self.eval(
            "if (!window.sluiceReady) throw new Error('not the e2e page'); await window.sluiceReady;",
        )
        .await;
    }

    /// Reloads and waits for the load (not for the client: see [`Tab::wait_ready`]).
    pub async fn reload(&self) {
        self.page.reload().await.expect("reload");
    }

    pub async fn goto(&self, url: &str) {
        self.page.goto(url).await.expect("goto");
    }

    /// Saves a PNG under the test's artifacts directory and returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let path = self.artifacts.join(format!("{name}.png"));
        let png = self
            .page
            .screenshot(ScreenshotParams::builder().build())
            .await
            .expect("screenshot");
        std::fs::write(&path, png).expect("write screenshot");
        path
    }

    pub async fn close(self) {
        let _ = self.page.close().await;
    }
}

/// Runs `f` until it returns `Some`, polling; panics with `what` after `limit`.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
