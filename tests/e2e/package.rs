//! The example app (`examples/vite-app`) as an app developer makes it: Sluice installed from the
//! folder `sluice build` writes, the app built by Vite, its files served as they are, the demo
//! API on another origin. Driven through its own buttons, as a person would. And the same app
//! in `vite dev`, where the package's `sluice/vite` plugin serves the worker files and lets Vite
//! serve the page client's wasm from the package's folder outside the app.
//!
//! Also the package's promise to updates: each build's worker wasm is cached under its own
//! name, and an entry never runs against a wasm that is not its build.
//!
//! `.ci/run` builds the example first (`sluice build`, `npm ci`, `tsc --noEmit`, `vite build`); without
//! `examples/vite-app/dist` the test says how to build it and skips, except under CI.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use sluice::api::ConfigPatch;
use sluice::package::Package;

use crate::e2e;
use crate::support::{
    ci, eventually, js, report, test_api_config, vite, BrowserHarness, Options, PageScript, Tab,
};

/// What `public/sw.js` tells Sluice the demo API admits; the API in this test admits exactly
/// that, so one request too many is a 429.
const LIMIT: usize = 10;
/// The example's import button enqueues this many creates.
const IMPORT_SIZE: usize = 50;

fn example_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/vite-app")
}

fn example_dist() -> PathBuf {
    example_dir().join("dist")
}

/// Whether the example is built; says how to build it when not, and fails under CI.
fn example_built() -> bool {
    if example_dist().join("index.html").is_file() {
        return true;
    }
    let how = "examples/vite-app is not built: `cargo run --release -- build`, then \
               `npm ci --prefix examples/vite-app && npm run build --prefix examples/vite-app`";
    assert!(!ci(), "{how} (CI is set, so this is a failure, not a skip)");
    report(&format!("SKIPPED the Vite example's test: {how}"));
    false
}

fn example_options() -> Options {
    let mut api = test_api_config();
    api.limit = LIMIT as u32;
    api.window_ms = 1000;
    // The app signs in (`POST /api/session`) and its worker script sends the token.
    api.bearer = Some("s1".into());
    Options::api(api).cross_origin(10).site(example_dist())
}

/// An import as the page shows it (`#groups li` data attributes).
#[derive(Debug, Deserialize)]
struct Group {
    group: String,
    total: usize,
    done: usize,
    pending: usize,
    cancelled: usize,
    failed: usize,
}

async fn groups(tab: &Tab) -> Vec<Group> {
    tab.eval_as(
        "return Array.from(document.querySelectorAll('#groups li'), (li) => ({\
           group: li.dataset.group, total: +li.dataset.total, done: +li.dataset.done,\
           pending: +li.dataset.pending, cancelled: +li.dataset.cancelled,\
           failed: +li.dataset.failed }));",
    )
    .await
}

/// Waits until the page has registered the worker and enabled its buttons.
async fn wait_started(tab: &Tab) {
    let started = tab
        .eval(
            "for (let i = 0; i < 300; i++) {\
               if (document.body.dataset.ready) break;\
               await new Promise((r) => setTimeout(r, 50));\
             }\
             return [document.body.dataset.ready || 'not yet', \
                     document.getElementById('state').textContent];",
        )
        .await;
    assert_eq!(started[0], "true", "the example did not start: {started}");
}

async fn click(tab: &Tab, id: &str) {
    tab.eval(&format!("document.getElementById('{id}').click();"))
        .await;
}

e2e!(
    /// The Vite example: a bulk import at the limit through a reload, a second import
    /// cancelled, one interactive create; 0 429s, never more than the limit in a second, and
    /// every create applied once.
    vite_example_imports_through_a_reload_at_the_limit_and_cancels,
    120,
    example_options(),
    |h| {
        if !example_built() {
            return;
        }
        let tab = h.open(&format!("/?api={}", h.api_origin)).await;
        wait_started(&tab).await;

        click(&tab, "import").await;
        h.wait_until("15 contacts", Duration::from_secs(15), || {
            h.api.contacts().len() >= 15
        })
        .await;
        tab.reload().await;
        wait_started(&tab).await;
        let at_reload = h.api.contacts().len();
        report(&format!("vite example: reloaded at {at_reload} contacts"));
        // The token expires in the middle of the import: the budget waits, the page signs in
        // again, and the import goes on with nothing failed.
        h.api
            .update_config(&ConfigPatch {
                bearer: Some("s2".into()),
                ..Default::default()
            })
            .expect("a new token");
        let first = eventually("the import to finish", Duration::from_secs(30), || async {
            let gs = groups(&tab).await;
            gs.into_iter()
                .find(|g| g.total == IMPORT_SIZE && g.pending == 0)
        })
        .await;
        assert_eq!(
            (first.done, first.cancelled, first.failed),
            (IMPORT_SIZE, 0, 0),
            "{first:?}"
        );

        click(&tab, "import").await;
        h.wait_until("5 more contacts", Duration::from_secs(15), || {
            h.api.contacts().len() >= IMPORT_SIZE + 5
        })
        .await;
        click(&tab, "cancel").await;
        let second = eventually("the second import to stop", Duration::from_secs(15), || async {
            let gs = groups(&tab).await;
            gs.into_iter()
                .find(|g| g.group != first.group && g.pending == 0 && g.cancelled > 0)
        })
        .await;
        assert_eq!(second.done + second.cancelled, IMPORT_SIZE, "{second:?}");

        click(&tab, "add").await;
        let added: String = eventually("the contact to be saved", Duration::from_secs(10), || async {
            let text = tab
                .eval("return document.getElementById('added').textContent;")
                .await;
            text.as_str()
                .filter(|t| t.starts_with("Contact saved") || t.starts_with("Not saved"))
                .map(str::to_string)
        })
        .await;
        assert_eq!(added, "Contact saved: HTTP 201");
        // Its edit, queued with a reference to the create's answer, went to the new contact.
        let edited: String = eventually("the contact to be edited", Duration::from_secs(10), || async {
            let status = tab
                .eval("return document.getElementById('added').dataset.edited ?? null;")
                .await;
            status.as_str().map(str::to_string)
        })
        .await;
        assert_eq!(edited, "200");
        let companies: Vec<_> = h
            .api
            .contacts()
            .into_iter()
            .filter(|c| c["company"] == "Analytical Engines")
            .collect();
        assert_eq!(companies.len(), 1, "{companies:?}");
        assert_eq!(companies[0]["name"], "Ada Lovelace", "{companies:?}");

        // Nothing more arrives once every job has ended.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stats = h.api.stats();
        report(&format!("vite example: {stats:?}"));
        assert_eq!(stats.rate_limited, 0, "{stats:?}");
        // The expired token was refused by at most the requests in flight, never in a loop.
        assert!((1..=4).contains(&stats.refused_tokens), "{stats:?}");
        let sign_ins = tab.eval("return document.body.dataset.signIns;").await;
        report(&format!("vite example: signed in {sign_ins} times"));
        assert!(stats.max_in_window <= LIMIT, "{stats:?}");
        assert_eq!(stats.contacts, IMPORT_SIZE + second.done + 1, "{stats:?}");
        assert_eq!(stats.duplicate_creates, 0, "{stats:?}");
        assert_eq!(stats.creates_without_key, 0, "{stats:?}");
        let by_key = h.api.applied_creates_by_key();
        assert_eq!(by_key.len(), stats.contacts, "{by_key:?}");
        assert!(by_key.values().all(|c| *c == 1), "{by_key:?}");
    }
);

/// What the page fetched of `/sluice/NAME` in `vite dev`: status, Content-Type, length.
#[derive(Debug, Deserialize, PartialEq)]
struct Served {
    status: u16,
    #[serde(rename = "type")]
    content_type: String,
    bytes: usize,
}

e2e!(
    /// The Vite example in `vite dev` (started by the test, stopped after), with nothing but the
    /// `sluice/vite` plugin in its config: the worker files are served unchanged under
    /// `/sluice/`, the page client's wasm from the package's folder outside the app (no 403
    /// from Vite's allow list), and a bulk import runs at the limit with no 429, each create
    /// applied once.
    vite_example_in_dev_mode_serves_the_worker_and_imports_at_the_limit,
    120,
    example_options(),
    |h| {
        let app = example_dir();
        if let Some(why) = vite::missing(&app) {
            assert!(!ci(), "{why} (CI is set, so this is a failure, not a skip)");
            report(&format!("SKIPPED the Vite example's dev-mode test: {why}"));
            return;
        }
        let log = h.artifacts.join("vite.log");
        let started = std::time::Instant::now();
        let dev = vite::ViteDev::start(&app, &h.api_origin, &log)
            .await
            .unwrap_or_else(|e| panic!("{e}; see {}", log.display()));
        report(&format!(
            "vite dev: listening at {} after {:.1?}",
            dev.url,
            started.elapsed()
        ));
        let tab = h.open_url(&format!("{}?api={}", dev.url, h.api_origin)).await;
        wait_started(&tab).await;
        report(&format!(
            "vite dev: page controlled {:.1?} after the start",
            started.elapsed()
        ));

        // The worker files as the package holds them, from the plugin.
        let manifest: serde_json::Value = serde_json::from_slice(
            &std::fs::read(app.join("node_modules/sluice/package.json")).expect("package.json"),
        )
        .expect("the package's package.json");
        let files = manifest["sluice"]["workerFiles"].as_array().expect("workerFiles");
        for name in files.iter().filter_map(|n| n.as_str()) {
            let on_disk = std::fs::metadata(app.join("node_modules/sluice").join(name))
                .expect("worker file")
                .len() as usize;
            let served: Served = tab
                .eval_as(&format!(
                    "const r = await fetch('/sluice/{name}');                     return {{ status: r.status, type: r.headers.get('content-type') || '',                               bytes: (await r.arrayBuffer()).byteLength }};"
                ))
                .await;
            let wanted = if name.ends_with(".wasm") {
                "application/wasm"
            } else {
                "text/javascript; charset=utf-8"
            };
            assert_eq!(
                served,
                Served {
                    status: 200,
                    content_type: wanted.into(),
                    bytes: on_disk
                },
                "/sluice/{name}"
            );
        }
        // The page client's wasm came from the package's own folder, through Vite's `/@fs/`.
        let client_wasm: Vec<String> = tab
            .eval_as(
                "return performance.getEntriesByType('resource').map((e) => e.name)                   .filter((n) => n.includes('sluice_client_bg'));",
            )
            .await;
        assert!(
            client_wasm.len() == 1 && client_wasm[0].contains("/@fs/"),
            "{client_wasm:?}"
        );

        let import_started = std::time::Instant::now();
        click(&tab, "import").await;
        let group = eventually("the import to finish", Duration::from_secs(30), || async {
            let gs = groups(&tab).await;
            gs.into_iter()
                .find(|g| g.total == IMPORT_SIZE && g.pending == 0)
        })
        .await;
        report(&format!(
            "vite dev: {IMPORT_SIZE} creates in {:.1?} at {LIMIT}/s",
            import_started.elapsed()
        ));
        assert_eq!(
            (group.done, group.cancelled, group.failed),
            (IMPORT_SIZE, 0, 0),
            "{group:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stats = h.api.stats();
        report(&format!("vite dev: {stats:?}"));
        assert_eq!(stats.rate_limited, 0, "{stats:?}");
        assert!(stats.max_in_window <= LIMIT, "{stats:?}");
        h.assert_each_applied_once(IMPORT_SIZE, LIMIT);
        drop(dev);
        let vite_log = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !vite_log.contains("outside of Vite serving allow list"),
            "{vite_log}"
        );
    }
);

/// A worker script that loads the package from `/sluice/`, as an app serves it.
const BUILT_WORKER: &str = "self.SLUICE_CONFIG = { packageUrl: '/sluice/' };\n\
                            importScripts('/sluice/sluice-worker.js');\n";

/// `wasm` with a custom section appended: another build of the same code, as far as names,
/// hashes and caches can tell (engines ignore custom sections they do not know).
pub(crate) fn another_build_of(wasm: &[u8], label: &str) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut payload = Vec::new();
    leb128("sluice-test".len(), &mut payload);
    payload.extend_from_slice(b"sluice-test");
    payload.extend_from_slice(label.as_bytes());
    let mut out = wasm.to_vec();
    out.push(0); // custom section
    leb128(payload.len(), &mut out);
    out.extend_from_slice(&payload);
    out
}

/// The package made of this binary's bindings with the worker wasm replaced by `wasm`.
pub(crate) fn package_with(wasm: &[u8]) -> Package {
    Package::from_bindings(|name| {
        if name == "sluice_sw_bg.wasm" {
            Some(wasm)
        } else {
            sluice::assets::pkg(name)
        }
    })
    .expect("package")
}

/// The URLs in the worker's wasm cache, as the page sees Cache Storage.
async fn cached_wasm(tab: &Tab) -> Vec<String> {
    tab.eval_as(
        "const cache = await caches.open('sluice-wasm');\
         return (await cache.keys()).map((r) => r.url);",
    )
    .await
}

/// Asks the browser to check for a new worker version and waits until none is installing
/// or waiting any more; returns whether a new version took control.
async fn update_worker(tab: &Tab) -> bool {
    tab.eval_as(
        "const reg = await navigator.serviceWorker.getRegistration();\
         const before = navigator.serviceWorker.controller;\
         let changed = false;\
         navigator.serviceWorker.addEventListener('controllerchange', () => { changed = true; },\
           { once: true });\
         await reg.update().catch(() => {});\
         for (let i = 0; i < 200; i++) {\
           await e2e.sleep(50);\
           if (!reg.installing && !reg.waiting && (changed || i > 40)) break;\
         }\
         return changed && navigator.serviceWorker.controller !== before;",
    )
    .await
}

/// Enqueues `n` creates as `group` and asserts each ends done.
async fn run_group(tab: &Tab, n: usize, group: &str) {
    tab.eval(&js::enqueue_group(n, group)).await;
    let results: Vec<String> = tab.eval_as(&js::settle_group(group)).await;
    assert!(js::all_done(&results), "{group}: {results:?}");
}

e2e!(
    /// Each build's worker wasm is cached under its own name: a new build (new entry, new
    /// wasm) takes over, its wasm replaces the old one in the cache, and the queue goes on.
    a_new_build_caches_its_own_wasm_and_drops_the_old,
    90,
    Options::default().with_www_copy(),
    |h| {
        let site = h.www_dir();
        let first = Package::embedded().expect("package");
        first.write(&site.join("sluice")).expect("write the package");
        std::fs::write(site.join("sw-built.js"), BUILT_WORKER).expect("sw-built.js");
        let tab = h.open_e2e_with("sw=/sw-built.js").await;
        tab.eval(&js::configure(50, 4, "")).await;
        run_group(&tab, 10, "first").await;
        let first_url = h.url(&format!("/sluice/{}", first.worker_wasm()));
        assert_eq!(cached_wasm(&tab).await, vec![first_url.clone()]);

        let wasm = sluice::assets::pkg("sluice_sw_bg.wasm").expect("worker wasm");
        let second = package_with(&another_build_of(wasm, "2"));
        assert_ne!(second.worker_wasm(), first.worker_wasm());
        second.write(&site.join("sluice")).expect("write the new build");
        assert!(update_worker(&tab).await, "the new build did not take control");
        // Activation removes the old build's wasm; the page may see control change first.
        let second_url = h.url(&format!("/sluice/{}", second.worker_wasm()));
        let cached = eventually("the old wasm to leave the cache", Duration::from_secs(5), || async {
            let urls = cached_wasm(&tab).await;
            (urls == [second_url.clone()]).then_some(urls)
        })
        .await;
        assert_eq!(cached, [second_url]);
        run_group(&tab, 10, "second").await;
        assert_eq!(h.api.stats().contacts, 20);
    }
);

e2e!(
    /// A server that pairs a new entry with a wasm that is not its build (a stale copy under
    /// the new name) fails the install: the working worker stays and keeps its own wasm.
    a_wasm_that_is_not_its_entrys_build_fails_the_install_and_the_old_worker_stays,
    90,
    Options::default().with_www_copy(),
    |h| {
        let site = h.www_dir();
        let first = Package::embedded().expect("package");
        first.write(&site.join("sluice")).expect("write the package");
        std::fs::write(site.join("sw-built.js"), BUILT_WORKER).expect("sw-built.js");
        let tab = h.open_e2e_with("sw=/sw-built.js").await;
        tab.eval(&js::configure(50, 4, "")).await;
        run_group(&tab, 5, "before").await;
        let versions_before: Vec<String> = h.browser.cdp.state().versions.keys().cloned().collect();

        let wasm = sluice::assets::pkg("sluice_sw_bg.wasm").expect("worker wasm");
        let second = package_with(&another_build_of(wasm, "mismatched"));
        second.write(&site.join("sluice")).expect("write the new build");
        // The old build's bytes under the new build's name.
        std::fs::write(site.join("sluice").join(second.worker_wasm()), wasm).expect("stale wasm");
        assert!(!update_worker(&tab).await, "a mismatched build took control");
        h.wait_until("the new version to be discarded", Duration::from_secs(10), || {
            let st = h.browser.cdp.state();
            let new: Vec<&serde_json::Value> = st
                .versions
                .iter()
                .filter(|(id, _)| !versions_before.contains(id))
                .map(|(_, v)| v)
                .collect();
            !new.is_empty() && new.iter().all(|v| v["status"] == "redundant")
        })
        .await;
        let log = h.log().join("\n");
        assert!(
            log.contains("is not the wasm this sluice-worker.js was built with"),
            "the install failure names the mismatch: {log}"
        );
        let first_url = h.url(&format!("/sluice/{}", first.worker_wasm()));
        assert_eq!(cached_wasm(&tab).await, vec![first_url]);
        run_group(&tab, 5, "after").await;
        assert_eq!(h.api.stats().contacts, 10);
    }
);
