//! The end-to-end harness: a thin, panicking layer over `sluice::browser` (which `sluice
//! bench` uses too): the demo server in-process, a headless Chromium, and the `e2e!` macro.
//!
//! Every test gets its own server (on `127.0.0.1:0`), its own browser and profile directory,
//! so tests are independent and can run in parallel. The browser is killed when the
//! [`Harness`] is dropped, also when a test panics or times out.
//!
//! Tests skip (pass with a message) when Chromium is missing, unless `CI` is set: then a
//! missing browser fails them.

#![allow(dead_code)] // not every test binary module uses every helper

use std::future::Future;
use std::io::Write as _;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice::api::{ApiConfig, ApiHandle, Arrival};
use sluice::browser::{self, Rig, RigOptions, Site};
use sluice::server::WwwSource;

/// How long a whole test may take unless it says otherwise.
pub const DEFAULT_TEST_SECS: u64 = 90;

pub mod axe;
pub mod firefox;
pub mod js;
pub mod page;
pub mod vite;

pub use page::PageScript;

/// How to get the wasm bundles the browser tests serve.
const WASM_INSTALL: &str = "build without SLUICE_SKIP_WASM";

/// Declares an end-to-end test: a multi-threaded tokio test that starts a harness (or skips),
/// runs the body with `$h` (a reference to it) under a time limit, and always kills the
/// browser. `e2e!(name, secs, |h| { ... })` starts Chromium's [`Harness`] with default
/// [`Options`]; `e2e!(name, secs, options, |h| { ... })` starts the harness `options` is for
/// (see [`Setup`]: Chromium's [`Options`] or Firefox's [`firefox::FirefoxOptions`]).
#[macro_export]
macro_rules! e2e {
    ($(#[$meta:meta])* $name:ident, $secs:expr, $options:expr, |$h:ident| $body:block) => {
        $(#[$meta])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let options = $options;
            let _turn = $crate::support::Turn::take(options.exclusive).await;
            let Some(harness) =
                $crate::support::Setup::start(options, stringify!($name)).await
            else {
                return;
            };
            let $h = &harness;
            let limit = std::time::Duration::from_secs($secs);
            let started = std::time::Instant::now();
            let result = tokio::time::timeout(limit, async move $body).await;
            if result.is_err() {
                panic!("{} timed out after {:?}", stringify!($name), limit);
            }
            $crate::support::report(&format!(
                "{} took {:.1?}",
                stringify!($name),
                started.elapsed()
            ));
        }
    };
    ($(#[$meta:meta])* $name:ident, $secs:expr, |$h:ident| $body:block) => {
        $crate::e2e!(
            $(#[$meta])* $name, $secs, $crate::support::Options::default(), |$h| $body
        );
    };
    ($(#[$meta:meta])* $name:ident, |$h:ident| $body:block) => {
        $crate::e2e!($(#[$meta])* $name, $crate::support::DEFAULT_TEST_SECS, |$h| $body);
    };
}

/// What an [`e2e!`] test is started with (a [`BrowserOptions`], which also says whether the
/// test runs alone): it names the harness.
pub trait Setup {
    type Harness;

    /// Starts the harness; `None` means "skip this test".
    fn start(self, name: &str) -> impl Future<Output = Option<Self::Harness>>;
}

impl Setup for Options {
    type Harness = Harness;

    async fn start(self, name: &str) -> Option<Harness> {
        Harness::start_with(name, self).await
    }
}

/// What a test asks of either browser's harness ([`Harness`], [`firefox::FirefoxHarness`]):
/// each says how it opens a tab, where its API and artifacts are; opening the test page and
/// the checks on what the API saw are written once here, so that a scenario can be written
/// once for both browsers (generic over this trait) and both harnesses check alike.
pub trait BrowserHarness {
    type Tab: PageScript;

    /// The browser's name, for reports ("Chromium", "Firefox").
    const BROWSER: &'static str;

    /// The demo server this test's pages load from and send to.
    fn site(&self) -> &Site;

    /// The demo API (see [`Site::api`]).
    fn api(&self) -> &ApiHandle {
        &self.site().api
    }

    /// Screenshots, the browser's log and the arrivals go here (`target/tmp/e2e/<test>/`).
    fn artifacts(&self) -> &Path;

    /// CPU counters now, this process and the browser's (see [`cpu_note`]).
    fn cpu_sample(&self) -> Option<browser::load::CpuSample>;

    /// Opens a new tab at `path` (on this server) and waits for it to load.
    async fn open(&self, path: &str) -> Self::Tab;

    /// Opens the test page and waits until the client is registered and the page controlled.
    async fn open_e2e(&self) -> Self::Tab {
        self.open_e2e_with("").await
    }

    /// As [`BrowserHarness::open_e2e`], with a query string for the page (`keepAliveMs=300`).
    async fn open_e2e_with(&self, query: &str) -> Self::Tab {
        let path = if query.is_empty() {
            browser::DRIVER_PATH.to_string()
        } else {
            format!("{}?{query}", browser::DRIVER_PATH)
        };
        let tab = self.open(&path).await;
        tab.wait_ready().await;
        // Kept in sessionStorage too, so that a reloaded page sends where it did.
        tab.eval(&format!(
            "window.API = sessionStorage.API = '{}';",
            self.site().api_origin
        ))
        .await;
        tab
    }

    /// Every arrival the API recorded, also written to `arrivals.json` among the test's
    /// artifacts for a look after a failure.
    fn saved_arrivals(&self) -> Vec<Arrival> {
        save_arrivals(self.api(), self.artifacts())
    }

    /// [`assert_each_applied_once`] on this test's API.
    fn assert_each_applied_once(&self, n: usize, limit: usize) {
        assert_each_applied_once(self.api(), self.artifacts(), n, limit)
    }

    /// Arrivals at the API matching `f`.
    fn arrivals_where(&self, f: impl Fn(&Arrival) -> bool) -> Vec<Arrival> {
        self.api().arrivals().into_iter().filter(|a| f(a)).collect()
    }
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

/// How a test's harness is set up, in either browser: what both harnesses take (the API, the
/// API's origin, whether the test runs alone), with what only one browser's harness takes in
/// `browser` ([`Chromium`]'s site, [`firefox::Firefox`]'s preferences). The builders both have
/// are written once here; [`Options`] and [`firefox::FirefoxOptions`] name the two.
#[derive(Clone, Debug)]
pub struct BrowserOptions<B> {
    pub api: ApiConfig,
    /// Run alone: the test measures time, and another browser sharing the two cores would
    /// measure the machine instead of the worker.
    pub exclusive: bool,
    /// Call the API on an origin of its own (CORS and preflights), as real apps do: the
    /// `js` helpers send to `window.API`, which [`BrowserHarness::open_e2e`] sets.
    pub cross_origin: bool,
    /// What only this browser's harness takes.
    pub browser: B,
}

/// How a Chromium test's harness is set up.
pub type Options = BrowserOptions<Chromium>;

/// What only Chromium's harness takes: the site it serves.
#[derive(Clone, Debug, Default)]
pub struct Chromium {
    /// Serve `www/` from a temporary copy the test may change (see [`Harness::www_dir`]).
    pub www_copy: bool,
    /// Serve this directory as the site instead of `www/` (an app's built files).
    pub site: Option<PathBuf>,
    /// Other origins the worker script lets jobs go to (`http://HOST:PORT`): a real rate
    /// limiter in front of an API, say (see `RigOptions::also_allow`).
    pub also_allow: Vec<String>,
}

impl<B: Default> Default for BrowserOptions<B> {
    fn default() -> Self {
        Self {
            api: test_api_config(),
            exclusive: false,
            cross_origin: false,
            browser: B::default(),
        }
    }
}

impl<B: Default> BrowserOptions<B> {
    pub fn api(api: ApiConfig) -> Self {
        Self {
            api,
            ..Self::default()
        }
    }
}

impl<B> BrowserOptions<B> {
    pub fn exclusive(mut self) -> Self {
        self.exclusive = true;
        self
    }

    /// The API on another origin, with arrival jitter 0..`jitter_ms` and answer jitter
    /// ±`jitter_ms`: where users are.
    pub fn cross_origin(mut self, jitter_ms: u64) -> Self {
        self.cross_origin = true;
        self.api.jitter_ms = jitter_ms;
        self.api.arrival_jitter_ms = jitter_ms;
        self
    }
}

impl Options {
    pub fn with_www_copy(mut self) -> Self {
        self.browser.www_copy = true;
        self
    }

    /// Serves `dir` as the site (its `/sw.js` gets the other origin's allow list as the demo's
    /// does), instead of `www/`.
    pub fn site(mut self, dir: PathBuf) -> Self {
        self.browser.site = Some(dir);
        self
    }

    /// Lets the worker script send jobs to `origin` too (`http://HOST:PORT`).
    pub fn also_allow(mut self, origin: &str) -> Self {
        self.browser.also_allow.push(origin.to_string());
        self
    }
}

/// A test's turn to run: shared by ordinary tests, sole for [`Options::exclusive`] ones.
/// tokio's lock is fair, so a waiting exclusive test is not starved by a stream of others.
pub enum Turn {
    Shared(tokio::sync::OwnedRwLockReadGuard<()>),
    Sole(tokio::sync::OwnedRwLockWriteGuard<()>),
}

impl Turn {
    pub async fn take(exclusive: bool) -> Turn {
        static LOCK: std::sync::OnceLock<std::sync::Arc<tokio::sync::RwLock<()>>> =
            std::sync::OnceLock::new();
        let lock = LOCK.get_or_init(Default::default).clone();
        if exclusive {
            Turn::Sole(lock.write_owned().await)
        } else {
            Turn::Shared(lock.read_owned().await)
        }
    }
}

pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Straight to the stderr handle: libtest captures `eprintln!` of passing tests, and skips and
/// timings must be seen.
pub fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// How busy the machine was since `since` (from [`BrowserHarness::cpu_sample`]), for the report
/// of a test that measures time.
pub fn cpu_note(h: &impl BrowserHarness, since: Option<browser::load::CpuSample>) -> String {
    match since.zip(h.cpu_sample()).and_then(|(a, b)| a.until(&b)) {
        Some(u) => format!(
            "machine CPU: this test {:.0}%, other work {:.0}%",
            u.ours * 100.0,
            u.others * 100.0
        ),
        None => "machine CPU unknown".into(),
    }
}

/// Skips (returns false) with a message saying what is missing and how to `install` it, or
/// panics under CI.
pub fn require(ok: bool, what: &str, install: &str) -> bool {
    if ok {
        return true;
    }
    if ci() {
        panic!("{what} (CI is set, so this is a failure, not a skip)");
    }
    report(&format!(
        "SKIPPED {}: {what}; {install} to run it",
        std::thread::current().name().unwrap_or("e2e test")
    ));
    false
}

/// Skips (returns false) or fails as [`require`] does when the wasm bundles were not built;
/// both browsers' harnesses need them.
fn require_wasm() -> bool {
    require(
        browser::wasm_built(),
        "the wasm bundles were not built (SLUICE_SKIP_WASM?)",
        WASM_INSTALL,
    )
}

/// The test `name`'s artifacts directory (`target/tmp/e2e/<test>/`), emptied of an earlier
/// run's.
fn fresh_artifacts(name: &str) -> PathBuf {
    let artifacts = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("e2e")
        .join(name);
    let _ = std::fs::remove_dir_all(&artifacts);
    std::fs::create_dir_all(&artifacts).expect("artifacts dir");
    artifacts
}

/// Every arrival `api` recorded, also written to `arrivals.json` in `artifacts` for a look
/// after a failure.
pub fn save_arrivals(api: &ApiHandle, artifacts: &Path) -> Vec<Arrival> {
    let arrivals = api.arrivals();
    let _ = std::fs::write(
        artifacts.join("arrivals.json"),
        serde_json::to_vec_pretty(&arrivals).unwrap_or_default(),
    );
    arrivals
}

/// Exactly one 429 reached the API, and nothing arrived during the `pause_ms` it asked for:
/// the pause was kept, whatever happened to the pages or the worker meanwhile. The check
/// starts once no request can still be on its way from before the worker heard of the 429:
/// the 429's answer takes up to the API's latency plus its jitter to get back, and a request
/// sent just before then up to the arrival jitter to arrive (and 5 ms for the browser). It
/// ends 2 ms before the pause does.
pub fn assert_one_pause_kept(api: &ApiHandle, pause_ms: f64) {
    let config = api.config();
    let still_on_its_way =
        (config.latency_ms + config.jitter_ms + config.arrival_jitter_ms) as f64 + 5.0;
    let arrivals = api.arrivals();
    let rejected: Vec<&Arrival> = arrivals.iter().filter(|a| a.status == 429).collect();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    let heard_by = rejected[0].at_ms + still_on_its_way;
    let early: Vec<String> = arrivals
        .iter()
        .filter(|a| a.at_ms > heard_by && a.at_ms < rejected[0].at_ms + pause_ms - 2.0)
        .map(|a| format!("{a:?}, {:.1} ms after the 429", a.at_ms - rejected[0].at_ms))
        .collect();
    assert!(
        early.is_empty(),
        "sent during the pause (the 429 arrived at {:.1} ms; requests already on their way \
         may arrive until {still_on_its_way:.0} ms after it): {early:?}",
        rejected[0].at_ms
    );
}

/// Every create applied exactly once, `n` of them, each with a key, and never more than
/// `limit` arrivals in any second: "never above the limit" is asserted in every lifecycle case,
/// since reloads, restarts, pauses and offline spells are where it is hard. The arrivals are
/// saved among the test's `artifacts`.
pub fn assert_each_applied_once(api: &ApiHandle, artifacts: &Path, n: usize, limit: usize) {
    let stats = api.stats();
    assert_eq!(stats.contacts, n, "{stats:?}");
    assert_eq!(stats.duplicate_creates, 0, "{stats:?}");
    assert_eq!(stats.creates_without_key, 0, "{stats:?}");
    let by_key = api.applied_creates_by_key();
    assert_eq!(by_key.len(), n, "{by_key:?}");
    assert!(by_key.values().all(|c| *c == 1), "{by_key:?}");
    let arrivals = save_arrivals(api, artifacts);
    let densest = densest_second(&arrivals);
    // The figures behind the verdict, for every test that checks the limit this way: how close
    // to it the arrivals came (a span below 1,000 ms is a breach).
    report(&format!(
        "{}: {n} applied once each; densest second {} of {limit}; shortest span of {} arrivals \
         {}; 429s {}",
        std::thread::current().name().unwrap_or("e2e test"),
        densest.len(),
        limit + 1,
        shortest_span_note(api, limit),
        stats.rate_limited
    ));
    assert!(
        densest.len() <= limit,
        "{} arrivals in one second, limit {limit}: at {:?} ms (arrivals.json in {}); {stats:?}",
        densest.len(),
        densest.iter().map(|a| a.at_ms.round()).collect::<Vec<_>>(),
        artifacts.display()
    );
}

/// [`ApiHandle::shortest_span`] of `limit + 1` arrivals as a report prints it: a span below
/// the server's window is a breach, just above it a close call.
pub fn shortest_span_note(api: &ApiHandle, limit: usize) -> String {
    api.shortest_span(limit)
        .map_or("-".into(), |ms| format!("{ms:.2} ms"))
}

/// The admitted arrivals of the busiest half-open second.
pub fn densest_second(arrivals: &[Arrival]) -> Vec<Arrival> {
    let admitted: Vec<&Arrival> = arrivals.iter().filter(|a| a.admitted).collect();
    let mut best = (0, 0);
    let mut start = 0;
    for end in 0..admitted.len() {
        while admitted[end].at_ns - admitted[start].at_ns >= 1_000_000_000 {
            start += 1;
        }
        if end + 1 - start > best.1 - best.0 {
            best = (start, end + 1);
        }
    }
    admitted[best.0..best.1]
        .iter()
        .map(|a| (*a).clone())
        .collect()
}

/// A server, a browser and the helpers to drive them. Dropping it kills the browser.
pub struct Harness {
    pub name: String,
    pub rig: Rig,
    /// Screenshots and the browser's log go here (`target/tmp/e2e/<test>/`).
    pub artifacts: PathBuf,
    /// The served copy of `www/` when the test asked for one.
    www: Option<tempfile::TempDir>,
    started: Instant,
}

impl Deref for Harness {
    type Target = Rig;

    fn deref(&self) -> &Rig {
        &self.rig
    }
}

impl Harness {
    /// Starts the server and the browser; `None` means "skip this test" (no Chromium and not
    /// under CI, or a build without the wasm bundles).
    pub async fn start(name: &str) -> Option<Harness> {
        Self::start_with(name, Options::default()).await
    }

    pub async fn start_with(name: &str, options: Options) -> Option<Harness> {
        let chromium = browser::find_chromium();
        if !require(
            chromium.is_some(),
            "Chromium not found (set SLUICE_CHROMIUM or put chromium on PATH)",
            "install it (apt-get install -y chromium)",
        ) {
            return None;
        }
        if !require_wasm() {
            return None;
        }
        let started = Instant::now();
        let artifacts = fresh_artifacts(name);
        let www = options.browser.www_copy.then(|| {
            let dir = tempfile::Builder::new()
                .prefix("sluice-www-")
                .tempdir()
                .expect("www dir");
            browser::write_www(dir.path()).expect("copy www");
            dir
        });
        let rig = Rig::start(RigOptions {
            api: options.api,
            www: match (&www, options.browser.site) {
                (Some(copy), _) => WwwSource::Dir(copy.path().into()),
                (None, Some(site)) => WwwSource::Dir(site),
                (None, None) => WwwSource::Embedded,
            },
            chromium,
            browser_log: Some(artifacts.join("chromium.log")),
            cross_origin: options.cross_origin,
            also_allow: options.browser.also_allow,
        })
        .await
        .unwrap_or_else(|e| panic!("starting the server and browser: {e}"));
        Some(Harness {
            name: name.to_string(),
            rig,
            artifacts,
            www,
            started,
        })
    }

    /// Time since the harness started (server and browser included), for reports.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Opens a new tab at `url`, on any server (an app's own dev server), and waits for it to
    /// load.
    pub async fn open_url(&self, url: &str) -> Tab {
        let inner = self
            .rig
            .browser
            .open(url)
            .await
            .unwrap_or_else(|e| panic!("opening {url}: {e}"));
        Tab {
            inner,
            artifacts: self.artifacts.clone(),
        }
    }

    /// The served copy of `www/` (only with [`Options::with_www_copy`]).
    pub fn www_dir(&self) -> PathBuf {
        self.www
            .as_ref()
            .expect("this test was not started with a www copy")
            .path()
            .to_path_buf()
    }

    /// Stops the service worker and waits until the browser reports it stopped (see
    /// [`sluice::browser::Browser::stop_workers`]).
    pub async fn stop_worker(&self) {
        self.rig
            .browser
            .stop_workers()
            .await
            .unwrap_or_else(|e| panic!("stopping the worker: {e}"));
    }

    pub fn worker_stops(&self) -> u64 {
        self.rig.browser.worker_stops()
    }

    pub fn worker_running(&self) -> bool {
        self.rig.browser.worker_running()
    }

    pub fn worker_starts(&self) -> u64 {
        self.rig.browser.worker_starts()
    }

    pub async fn set_worker_offline(&self, offline: bool) {
        self.rig.browser.set_worker_offline(offline).await
    }

    /// Lets the site store at most `bytes` in all, or its default quota again with `None`
    /// (see [`sluice::browser::Browser::override_quota`]).
    pub async fn override_quota(&self, bytes: Option<u64>) {
        self.rig
            .browser
            .override_quota(&self.origin, bytes)
            .await
            .unwrap_or_else(|e| panic!("Storage.overrideQuotaForOrigin: {e}"));
    }

    /// Fires a Background Sync event at the worker.
    pub async fn dispatch_sync(&self, tag: &str, last_chance: bool) {
        self.rig
            .browser
            .dispatch_sync(&self.origin, tag, last_chance)
            .await
            .unwrap_or_else(|e| panic!("dispatchSyncEvent: {e}"));
    }

    /// Waits until `check` holds, polling every 20 ms; panics with `what` after `limit`.
    pub async fn wait_until(&self, what: &str, limit: Duration, check: impl FnMut() -> bool) {
        browser::wait_for(what, limit, check)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Console output of pages and workers so far, with harness notes.
    pub fn log(&self) -> Vec<String> {
        self.rig.browser.log()
    }

    pub fn note(&self, line: impl Into<String>) {
        self.rig.browser.cdp.note(line);
    }
}

impl BrowserHarness for Harness {
    type Tab = Tab;

    const BROWSER: &'static str = "Chromium";

    fn site(&self) -> &Site {
        &self.rig.site
    }

    fn artifacts(&self) -> &Path {
        &self.artifacts
    }

    /// See [`sluice::browser::Browser::cpu_sample`].
    fn cpu_sample(&self) -> Option<browser::load::CpuSample> {
        self.rig.browser.cpu_sample()
    }

    /// Opens a new tab at `path` (on this server) and waits for it to load.
    async fn open(&self, path: &str) -> Tab {
        let inner = self
            .rig
            .browser
            .open(&self.url(path))
            .await
            .unwrap_or_else(|e| panic!("opening {path}: {e}"));
        Tab {
            inner,
            artifacts: self.artifacts.clone(),
        }
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
    }
}

/// One browser tab; every helper panics with the script and the error on failure.
pub struct Tab {
    pub inner: browser::Tab,
    artifacts: PathBuf,
}

impl PageScript for Tab {
    async fn try_eval(&self, body: &str) -> Result<Value, String> {
        self.inner.eval(body).await.map_err(|e| match e {
            browser::Error::Script(text) => text,
            other => other.to_string(),
        })
    }
}

impl Tab {
    /// Reloads and waits for the load (not for the client: see [`PageScript::wait_ready`]).
    pub async fn reload(&self) {
        self.inner.reload().await.expect("reload");
    }

    pub async fn goto(&self, url: &str) {
        self.inner.goto(url).await.expect("goto");
    }

    /// Takes this tab's own network offline or back online.
    pub async fn set_offline(&self, offline: bool) {
        self.inner
            .set_offline(offline)
            .await
            .unwrap_or_else(|e| panic!("page offline={offline}: {e}"));
    }

    /// Saves a PNG under the test's artifacts directory and returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let path = self.artifacts.join(format!("{name}.png"));
        self.inner
            .save_screenshot(&path)
            .await
            .unwrap_or_else(|e| panic!("screenshot: {e}"));
        path
    }

    /// Lays the page out for a `width` × `height` window (screenshots take that size).
    pub async fn set_viewport(&self, width: u32, height: u32) {
        self.inner
            .set_viewport(width, height)
            .await
            .unwrap_or_else(|e| panic!("setting the viewport: {e}"));
    }

    /// Presses `key` (trusted input: moves focus, activates buttons).
    pub async fn press(&self, key: browser::Key) {
        self.inner
            .press(key)
            .await
            .unwrap_or_else(|e| panic!("pressing {key:?}: {e}"));
    }

    /// Runs `source` as a classic script in the page's global scope (to inject a library).
    pub async fn run_script(&self, source: &str) {
        self.inner
            .run_script(source)
            .await
            .unwrap_or_else(|e| panic!("injected script failed: {e}"));
    }

    /// Navigates to `url`, declining a `beforeunload` confirmation if the page asks for one.
    pub async fn leave(&self, url: &str) -> browser::Leaving {
        self.inner
            .leave(url)
            .await
            .unwrap_or_else(|e| panic!("leaving for {url}: {e}"))
    }

    pub async fn close(self) {
        let _ = self.inner.close().await;
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
