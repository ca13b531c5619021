//! Driving headless Chromium against the demo server: what the end-to-end tests and
//! `sluice bench` share.
//!
//! - [`Site`]: the demo server (site and strict API) in-process on `127.0.0.1:0`, plus the
//!   driver page at [`DRIVER_PATH`]; the Firefox tests point Firefox at one.
//! - [`Rig`]: a [`Site`] plus a fresh Chromium with its own profile.
//! - [`Browser`]: the Chromium process and a CDP connection ([`cdp`]) that attaches to every
//!   page and service worker: stop workers, take a worker offline, fire Background Sync.
//! - [`Tab`]: evaluate script in a page, reload, screenshot, close.
//!
//! Nothing here panics on what the browser or a page sends; every failure is an [`Error`].

pub mod cdp;
pub mod load;
pub mod profile;
mod tab;

use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::header;
use axum::response::IntoResponse;
use axum::Router;
use serde_json::{json, Value};

use crate::api::{ApiConfig, ApiHandle, Arrival};
use crate::server::{self, WwwSource};

pub use cdp::Cdp;
pub use tab::{Key, Leaving, Tab};

/// The driver page: loads the client, registers the worker and exposes `window.sluice` and
/// `window.e2e` (see the file for its query options).
pub const DRIVER_PAGE: &str = include_str!("page.html");
/// Where the [`Rig`] serves [`DRIVER_PAGE`].
pub const DRIVER_PATH: &str = "/e2e.html";
/// A page script (an async function's body) that returns once [`DRIVER_PAGE`] has registered
/// the client, and throws on any other page: the one readiness check for every browser the
/// tests drive, Firefox included.
pub const WAIT_READY_SCRIPT: &str =
    "if (!window.sluiceReady) throw new Error('not the driver page: ' + location.href);\
     await window.sluiceReady;";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no Chromium found: set SLUICE_CHROMIUM or put chromium on PATH (apt-get install -y chromium)")]
    NoChromium,
    #[error("this build has no wasm bundles (built with SLUICE_SKIP_WASM?)")]
    NoWasm,
    #[error("launching Chromium: {0}")]
    Launch(String),
    #[error("CDP: {0}")]
    Cdp(String),
    #[error("page: {0}")]
    Page(String),
    #[error("page script failed: {0}")]
    Script(String),
    #[error("timed out after {limit:?} waiting for {what}")]
    Timeout { what: String, limit: Duration },
    #[error("server: {0}")]
    Server(String),
    #[error("{0}")]
    Io(String),
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

/// Whether the wasm bundles were embedded at build time.
pub fn wasm_built() -> bool {
    crate::assets::pkg("sluice_client_bg.wasm").is_some_and(|b| !b.is_empty())
        && crate::assets::pkg("sluice_sw_bg.wasm").is_some_and(|b| !b.is_empty())
}

/// Polls `check` every 20 ms until it holds, for at most `limit`.
pub async fn wait_for(
    what: &str,
    limit: Duration,
    mut check: impl FnMut() -> bool,
) -> Result<(), Error> {
    let deadline = Instant::now() + limit;
    while !check() {
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.into(),
                limit,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// The Chromium process; killed with its whole process group when dropped.
struct Chrome {
    child: Child,
    /// Removed after the process is gone (fields drop after `Drop::drop`).
    profile: tempfile::TempDir,
}

impl Chrome {
    async fn launch(exe: &Path, log: Option<&Path>) -> Result<(Chrome, String), Error> {
        let profile = tempfile::Builder::new()
            .prefix("sluice-chromium-")
            .tempdir()
            .map_err(|e| Error::Launch(format!("profile dir: {e}")))?;
        let stderr = match log {
            Some(path) => Stdio::from(
                std::fs::File::create(path)
                    .map_err(|e| Error::Launch(format!("{}: {e}", path.display())))?,
            ),
            None => Stdio::null(),
        };
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
        .stderr(stderr);
        // Its own process group, so that the renderers and the zygote die with it.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd
            .spawn()
            .map_err(|e| Error::Launch(format!("starting {}: {e}", exe.display())))?;
        let mut chrome = Chrome { child, profile };
        // Chromium writes the port it chose and the browser's websocket path here.
        let port_file = chrome.profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    let url = format!("ws://127.0.0.1:{}{}", port.trim(), path.trim());
                    return Ok((chrome, url));
                }
            }
            if let Ok(Some(status)) = chrome.child.try_wait() {
                return Err(Error::Launch(format!("Chromium exited at start: {status}")));
            }
            if Instant::now() > deadline {
                return Err(Error::Launch(
                    "Chromium did not open its debugging port in 30 s".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for Chrome {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: sends a signal to the process group we created; touches no memory.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A headless Chromium and our CDP connection to it. Dropping it kills the browser.
pub struct Browser {
    pub cdp: Cdp,
    // Last: the process is killed after the connection is dropped.
    _chrome: Chrome,
}

impl Browser {
    /// Launches `exe` headless with a fresh profile; its stderr goes to `log` if given.
    pub async fn launch(exe: &Path, log: Option<&Path>) -> Result<Browser, Error> {
        let started = Instant::now();
        let (chrome, ws_url) = Chrome::launch(exe, log).await?;
        let cdp = Cdp::connect(&ws_url).await.map_err(Error::Cdp)?;
        cdp.open_control_page().await.map_err(Error::Cdp)?;
        cdp.note(format!("browser up in {:.1?}", started.elapsed()));
        Ok(Browser {
            cdp,
            _chrome: chrome,
        })
    }

    /// Opens a new tab at `url` and waits for it to load.
    pub async fn open(&self, url: &str) -> Result<Tab, Error> {
        Tab::open(&self.cdp, url).await
    }

    /// The browser's process id, which is also the id of its process group.
    pub fn pid(&self) -> u32 {
        self._chrome.child.id()
    }

    /// CPU counters now, for [`load::CpuSample::until`].
    pub fn cpu_sample(&self) -> Option<load::CpuSample> {
        load::CpuSample::take(Some(self.pid()))
    }

    /// Sends a browser-wide command (`ServiceWorker.*`, `Storage.*`) through the control page
    /// session.
    async fn browser_call(&self, method: &str, params: Value) -> Result<Value, Error> {
        let session = self.cdp.control_session().await.map_err(Error::Cdp)?;
        self.cdp
            .call(method, params, Some(&session))
            .await
            .map_err(Error::Cdp)
    }

    /// Sets how many bytes `origin` may store in all (IndexedDB included), or with `None`
    /// gives it back the browser's own quota. Chromium enforces it on writes with
    /// `QuotaExceededError` when it is set before the origin's storage is first opened (its
    /// `navigator.storage.estimate()` still reports the default quota). What counts is the
    /// database's files: the browser compresses values (a write of repeated text takes next
    /// to no room), and the files grow for a while after a burst of writes.
    pub async fn override_quota(&self, origin: &str, bytes: Option<u64>) -> Result<(), Error> {
        self.cdp
            .note(format!("driver: quota of {origin} = {bytes:?} bytes"));
        let params = match bytes {
            Some(b) => json!({ "origin": origin, "quotaSize": b }),
            None => json!({ "origin": origin }),
        };
        self.browser_call("Storage.overrideQuotaForOrigin", params)
            .await
            .map(|_| ())
    }

    /// Stops every service worker (their memory is gone; the next event starts them afresh)
    /// and waits until the browser reports one stopped. A worker may be running again already
    /// when this returns (a page's keep-alive restarts it at once).
    pub async fn stop_workers(&self) -> Result<(), Error> {
        self.cdp.note("driver: stopping all workers");
        let stops = self.worker_stops();
        self.browser_call("ServiceWorker.stopAllWorkers", json!({}))
            .await?;
        wait_for("the worker to stop", Duration::from_secs(10), || {
            self.worker_stops() > stops
        })
        .await
    }

    /// How many times a running service worker stopped so far.
    pub fn worker_stops(&self) -> u64 {
        self.cdp.state().worker_stops
    }

    /// How many times a service worker was started so far.
    pub fn worker_starts(&self) -> u64 {
        self.cdp.state().worker_starts
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

    /// Takes the workers' own network offline or back online (pages are not affected).
    /// Applies to workers started later too, before their first line runs.
    pub async fn set_worker_offline(&self, offline: bool) {
        self.cdp.note(format!("driver: worker offline = {offline}"));
        let sessions: Vec<String> = {
            let mut st = self.cdp.state();
            st.offline = offline;
            st.offline_set = true;
            st.workers.values().flatten().cloned().collect()
        };
        for s in sessions {
            // A session of a worker that is going away fails: the next one gets the flag.
            if let Err(e) = self.cdp.emulate_offline(&s, offline).await {
                self.cdp.note(format!("emulating offline={offline}: {e}"));
            }
        }
    }

    /// Runs `expression` (an async function body's value: a promise is awaited) in the running
    /// service worker, as the worker's own code, and returns its value. For measurements that
    /// must take the worker's own path to the network (see `bench`).
    pub async fn eval_in_worker(&self, expression: &str, limit: Duration) -> Result<Value, Error> {
        let session = {
            let st = self.cdp.state();
            st.workers.values().flatten().next().cloned()
        };
        let session = session.ok_or_else(|| Error::Cdp("no service worker is attached".into()))?;
        let reply = self
            .cdp
            .call_with_timeout(
                "Runtime.evaluate",
                json!({ "expression": expression, "awaitPromise": true, "returnByValue": true }),
                Some(&session),
                limit,
            )
            .await
            .map_err(Error::Cdp)?;
        if let Some(e) = reply.get("exceptionDetails") {
            return Err(Error::Script(e.to_string()));
        }
        Ok(reply["result"]["value"].clone())
    }

    /// The id of the registration whose scope is under `origin`.
    pub async fn registration_id(&self, origin: &str) -> Result<String, Error> {
        let mut found = None;
        wait_for(
            "a service worker registration to be reported",
            Duration::from_secs(10),
            || {
                found = self
                    .cdp
                    .state()
                    .registrations
                    .iter()
                    .find(|(_, scope)| scope.starts_with(origin))
                    .map(|(id, _)| id.clone());
                found.is_some()
            },
        )
        .await?;
        found.ok_or_else(|| Error::Cdp("registration vanished".into()))
    }

    /// Fires a Background Sync event at the worker registered for `origin`.
    pub async fn dispatch_sync(
        &self,
        origin: &str,
        tag: &str,
        last_chance: bool,
    ) -> Result<(), Error> {
        let registration_id = self.registration_id(origin).await?;
        self.browser_call(
            "ServiceWorker.dispatchSyncEvent",
            json!({
                "origin": origin,
                "registrationId": registration_id,
                "tag": tag,
                "lastChance": last_chance,
            }),
        )
        .await
        .map(drop)
    }

    /// Console output of pages and workers so far, with driver notes.
    pub fn log(&self) -> Vec<String> {
        self.cdp.state().log.clone()
    }
}

/// What a [`Rig`] is made of.
#[derive(Clone, Debug, Default)]
pub struct RigOptions {
    pub api: ApiConfig,
    /// Where `www/` comes from; a directory lets a test deploy a changed `sw.js`.
    pub www: WwwSource,
    /// Chromium to run; [`find_chromium`] if `None`.
    pub chromium: Option<PathBuf>,
    /// Chromium's stderr goes here.
    pub browser_log: Option<PathBuf>,
    /// Also serve the API on a port of its own, as an API on another origin (CORS and its
    /// preflights included), and let the worker script send there: see [`Rig::api_origin`].
    pub cross_origin: bool,
    /// Other origins the worker script lets jobs go to (`http://HOST:PORT`): a `sluice proxy`
    /// in front of the API, say.
    pub also_allow: Vec<String>,
}

/// The demo server in-process (site, strict API and the driver page at [`DRIVER_PATH`]), with
/// no browser: what a [`Rig`] points Chromium at, and what the Firefox tests drive Firefox at.
pub struct Site {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`
    pub origin: String,
    /// Where the API is called: [`Site::origin`], or its own origin with
    /// [`RigOptions::cross_origin`].
    pub api_origin: String,
    /// The demo API: records every arrival, configurable at run time.
    pub api: ApiHandle,
    /// The wall-clock time of the API's time zero, to put arrivals on the pages' clock.
    api_epoch_unix_ms: f64,
}

/// Milliseconds since the Unix epoch, as pages count them (`performance.timeOrigin +
/// performance.now()`).
pub fn unix_ms(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

impl Site {
    /// Serves `www` and the API on `127.0.0.1:0`; with `cross_origin`, the API also on a port
    /// of its own, which the worker script is allowed to send to, as it is to `also_allow`.
    pub async fn start(
        api: ApiConfig,
        www: WwwSource,
        cross_origin: bool,
        also_allow: &[String],
    ) -> Result<Site, Error> {
        if !wasm_built() {
            return Err(Error::NoWasm);
        }
        api.validate().map_err(|e| Error::Server(e.to_string()))?;
        let api = ApiHandle::new(api);
        // Taken right after the API's own `Instant` zero: microseconds apart.
        let api_epoch_unix_ms = unix_ms(SystemTime::now());
        let mut other_origins = Vec::new();
        if cross_origin {
            let api_addr = server::serve_in_background(
                SocketAddr::from(([127, 0, 0, 1], 0)),
                crate::api::router(api.clone()),
            )
            .await
            .map_err(|e| Error::Server(e.to_string()))?;
            other_origins.push(format!("http://{api_addr}"));
        }
        let api_origin = other_origins.first().cloned();
        other_origins.extend_from_slice(also_allow);
        let app = driver_router(api.clone(), www, other_origins);
        let addr = server::serve_in_background(SocketAddr::from(([127, 0, 0, 1], 0)), app)
            .await
            .map_err(|e| Error::Server(e.to_string()))?;
        let origin = format!("http://{addr}");
        Ok(Site {
            api_origin: api_origin.unwrap_or_else(|| origin.clone()),
            origin,
            addr,
            api,
            api_epoch_unix_ms,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.origin, path)
    }

    /// Forgets everything the API recorded (see [`ApiHandle::reset`]) and restarts its clock.
    pub fn reset_api(&mut self) {
        self.api.reset();
        self.api_epoch_unix_ms = unix_ms(SystemTime::now());
    }

    /// An arrival's time on the Unix clock in milliseconds, comparable with a page's
    /// `performance.timeOrigin + performance.now()` after [`Rig::page_clock_offset_ms`].
    pub fn arrival_unix_ms(&self, a: &Arrival) -> f64 {
        self.api_epoch_unix_ms + a.at_ns as f64 / 1e6
    }

    /// A time on the Unix clock as the API's own time (its `atMs`).
    pub fn api_ms(&self, unix_ms: f64) -> f64 {
        unix_ms - self.api_epoch_unix_ms
    }
}

/// The demo server in-process ([`Site`], whose fields it derefs to) and a Chromium pointed at
/// it.
pub struct Rig {
    pub site: Site,
    pub browser: Browser,
}

impl Deref for Rig {
    type Target = Site;

    fn deref(&self) -> &Site {
        &self.site
    }
}

impl DerefMut for Rig {
    fn deref_mut(&mut self) -> &mut Site {
        &mut self.site
    }
}

impl Rig {
    pub async fn start(options: RigOptions) -> Result<Rig, Error> {
        let chromium = options
            .chromium
            .clone()
            .or_else(find_chromium)
            .ok_or(Error::NoChromium)?;
        let site = Site::start(
            options.api,
            options.www,
            options.cross_origin,
            &options.also_allow,
        )
        .await?;
        let browser = Browser::launch(&chromium, options.browser_log.as_deref()).await?;
        Ok(Rig { site, browser })
    }

    /// Opens the driver page (with `query`, e.g. `keepAliveMs=300`, if not empty) and waits
    /// until the client is registered and the page controlled.
    pub async fn open_driver(&self, query: &str) -> Result<Tab, Error> {
        let path = if query.is_empty() {
            DRIVER_PATH.to_string()
        } else {
            format!("{DRIVER_PATH}?{query}")
        };
        let tab = self.browser.open(&self.url(&path)).await?;
        tab.wait_ready().await?;
        Ok(tab)
    }

    /// How far the page's high-resolution clock runs ahead of this process's wall clock, in
    /// ms: the midpoint of a script round trip, repeated and the tightest taken.
    pub async fn page_clock_offset_ms(&self, tab: &Tab) -> Result<f64, Error> {
        let mut best: Option<(f64, f64)> = None;
        for _ in 0..15 {
            let before = unix_ms(SystemTime::now());
            let page: f64 = tab
                .eval_as("return performance.timeOrigin + performance.now();")
                .await?;
            let after = unix_ms(SystemTime::now());
            let rtt = after - before;
            let offset = page - (before + after) / 2.0;
            if best.is_none_or(|(r, _)| rtt < r) {
                best = Some((rtt, offset));
            }
        }
        best.map(|(_, o)| o)
            .ok_or_else(|| Error::Page("no clock reading".into()))
    }
}

/// The demo site and API plus the driver page.
pub fn driver_router(api: ApiHandle, www: WwwSource, other_origins: Vec<String>) -> Router {
    server::router_allowing(api, www, other_origins).route(
        DRIVER_PATH,
        axum::routing::get(|| async {
            (
                [
                    (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                    (header::CACHE_CONTROL, "no-cache"),
                ],
                DRIVER_PAGE,
            )
                .into_response()
        }),
    )
}

/// Writes every embedded `www/` file into `dir`, for serving with [`WwwSource::Dir`] and
/// changing some (a new `sw.js`) while the browser runs.
pub fn write_www(dir: &Path) -> Result<(), Error> {
    for (rel, bytes) in crate::assets::www_files() {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::Io(format!("{}: {e}", parent.display())))?;
        }
        std::fs::write(&path, bytes).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    }
    Ok(())
}
