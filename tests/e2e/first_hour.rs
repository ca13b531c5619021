//! An app developer's first hour: the mistakes a newcomer makes get a clear error on the page,
//! within `controlTimeoutMs`, never a `register()` that waits forever with the reason only in
//! the worker's console; and a page that opens wakes a stopped queue by itself.

use std::time::{Duration, Instant};

use serde_json::Value;
use sluice::package::Package;

use crate::e2e;
use crate::package::{another_build_of, package_with};
use crate::support::{report, BrowserHarness, Harness, Options, PageScript, Tab};

/// How long the pages below let `register()` wait: the errors must come well before it.
const CONTROL_TIMEOUT_MS: u64 = 8_000;

/// Serves `package` under `/sluice/` and `script` as `/sw-first-hour.js`, then
/// [`open_and_register`].
async fn register_with(h: &Harness, script: &str, package: &Package) -> (Value, Duration) {
    let site = h.www_dir();
    package
        .write(&site.join("sluice"))
        .expect("write the package");
    std::fs::write(site.join("sw-first-hour.js"), script).expect("the worker script");
    open_and_register(h).await
}

/// Opens the test page with `/sw-first-hour.js` as its worker and returns the page's
/// `register()` outcome (`ok`, or the error's `code` and `message`) with how long it took.
async fn open_and_register(h: &Harness) -> (Value, Duration) {
    let started = Instant::now();
    let tab: Tab = h
        .open(&format!(
            "/e2e.html?sw=/sw-first-hour.js&controlTimeoutMs={CONTROL_TIMEOUT_MS}"
        ))
        .await;
    let outcome = tab
        .eval(
            "try { await window.sluiceReady; return { ok: true }; }\
             catch (e) { return { ok: false, code: e.code, message: String(e.message) }; }",
        )
        .await;
    let took = started.elapsed();
    report(&format!("register() after {took:.1?}: {outcome}"));
    (outcome, took)
}

/// The page heard the worker's own reason, before its timeout.
fn assert_rejected_with(outcome: &Value, took: Duration, needles: &[&str]) {
    assert_eq!(outcome["ok"], false, "{outcome}");
    assert_eq!(outcome["code"], "cannot-start", "{outcome}");
    let message = outcome["message"].as_str().unwrap_or_default();
    for needle in needles {
        assert!(message.contains(needle), "{needle:?} not in {message:?}");
    }
    assert!(
        took < Duration::from_millis(CONTROL_TIMEOUT_MS),
        "the page waited {took:?}, the whole timeout: the worker's error did not reach it"
    );
}

e2e!(
    /// A `packageUrl` where nothing is served: the wasm is not found, and the page says where
    /// it was looked for and which setting to check.
    a_wrong_package_url_rejects_register_with_where_the_wasm_was_looked_for,
    60,
    Options::default().with_www_copy(),
    |h| {
        let script = "self.SLUICE_CONFIG = { packageUrl: '/nowhere/' };\n\
                      importScripts('/sluice/sluice-worker.js');\n";
        let package = Package::embedded().expect("package");
        let (outcome, took) = register_with(h, script, package).await;
        let wasm_url = h.url(&format!("/nowhere/{}", package.worker_wasm()));
        assert_rejected_with(
            &outcome,
            took,
            &[&wasm_url, "was not found (HTTP 404)", "packageUrl (\"/nowhere/\")"],
        );
    }
);

e2e!(
    /// A server that answers something else than the wasm at its URL (a dev server's
    /// index.html for a path it does not know): "not wasm", not "another build".
    a_package_url_that_serves_a_page_instead_of_wasm_says_so,
    60,
    Options::default().with_www_copy(),
    |h| {
        let package = Package::embedded().expect("package");
        let site = h.www_dir();
        std::fs::create_dir_all(site.join("fallback")).expect("folder");
        std::fs::write(
            site.join("fallback").join(package.worker_wasm()),
            "<!doctype html><html><body>the app</body></html>",
        )
        .expect("a page in place of the wasm");
        let script = "self.SLUICE_CONFIG = { packageUrl: '/fallback' };\n\
                      importScripts('/sluice/sluice-worker.js');\n";
        let (outcome, took) = register_with(h, script, package).await;
        // `/fallback` without its slash is taken as the folder it names.
        let wasm_url = h.url(&format!("/fallback/{}", package.worker_wasm()));
        assert_rejected_with(
            &outcome,
            took,
            &[&wasm_url, "is not wasm: the server answered an HTML page", "packageUrl"],
        );
        let message = outcome["message"].as_str().unwrap_or_default();
        assert!(!message.contains("built with"), "{message}");
    }
);

e2e!(
    /// The worker entry of one build beside the wasm of another: the install fails and the page
    /// hears which files to serve together.
    a_wasm_of_another_build_rejects_register_with_the_mismatch,
    60,
    Options::default().with_www_copy(),
    |h| {
        let wasm = sluice::assets::pkg("sluice_sw_bg.wasm").expect("worker wasm");
        let package = package_with(&another_build_of(wasm, "first-hour"));
        let site = h.www_dir();
        package.write(&site.join("sluice")).expect("write the package");
        // This build's wasm under the other build's name.
        std::fs::write(site.join("sluice").join(package.worker_wasm()), wasm).expect("wasm");
        let script = "self.SLUICE_CONFIG = { packageUrl: '/sluice/' };\n\
                      importScripts('/sluice/sluice-worker.js');\n";
        std::fs::write(site.join("sw-first-hour.js"), script).expect("the worker script");
        let (outcome, took) = open_and_register(h).await;
        assert_rejected_with(
            &outcome,
            took,
            &["is not the wasm this sluice-worker.js was built with"],
        );
    }
);

e2e!(
    /// A misspelled key inside a budget (`windowMs` for `lengthMs`) stops the worker from
    /// installing, and the page hears the entry, the key and the key it most likely meant.
    a_misspelled_configuration_key_rejects_register_naming_the_entry_and_the_key,
    60,
    Options::default().with_www_copy(),
    |h| {
        let script = "self.SLUICE_CONFIG = { packageUrl: '/sluice/', budgets: [\n\
                        { name: 'api', windows: [{ limit: 10, lengthMs: 1000 }] },\n\
                        { name: 'crm', windows: [{ limit: 5, windowMs: 1000 }] }] };\n\
                      importScripts('/sluice/sluice-worker.js');\n";
        let package = Package::embedded().expect("package");
        let (outcome, took) = register_with(h, script, package).await;
        assert_rejected_with(
            &outcome,
            took,
            &["self.SLUICE_CONFIG.budgets[1].windows[0]: unknown key `windowMs`; did you mean `lengthMs`?"],
        );
    }
);

e2e!(
    /// A page that opens while the worker is stopped with work queued, and only registers and
    /// subscribes (it never asks anything): sending resumes and its subscriber hears the status
    /// within a couple of seconds, not when some later request happens to wake the worker.
    opening_a_page_wakes_a_stopped_queue_and_its_subscriber_hears_the_status,
    90,
    |h| {
        let tab = h.open_e2e().await;
        tab.eval(&crate::support::js::configure(10, 2, "")).await;
        tab.eval(&crate::support::js::enqueue_group(60, "waiting"))
            .await;
        h.wait_until("a few creates", Duration::from_secs(10), || {
            h.api.contacts().len() >= 5
        })
        .await;
        tab.close().await;
        h.stop_worker().await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stopped_at = h.api.contacts().len();
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        assert_eq!(h.api.contacts().len(), stopped_at, "nothing runs while stopped");

        let opened = Instant::now();
        let tab = h.open_e2e().await;
        h.wait_until(
            "sending to resume with only a page open",
            Duration::from_secs(3),
            || h.api.contacts().len() > stopped_at + 2,
        )
        .await;
        let resumed = opened.elapsed();
        let status: Value = tab
            .eval(
                "const until = Date.now() + 3000;\
                 for (;;) {\
                   const s = e2e.broadcasts.find((m) => m.type === 'status');\
                   if (s) return s.status.counts;\
                   if (Date.now() > until) return null;\
                   await e2e.sleep(20);\
                 }",
            )
            .await;
        report(&format!(
            "resumed {resumed:.1?} after the page opened; first status {status}"
        ));
        assert!(status.is_object(), "no status reached the subscriber");
        assert!(resumed < Duration::from_secs(3), "{resumed:?}");
    }
);

e2e!(
    /// Every rejection is a `SluiceError` exported by the package: page code tells Sluice's
    /// errors apart with `instanceof` and reads their stable `code`.
    rejections_are_sluice_errors_a_page_can_test_with_instanceof,
    60,
    |h| {
        let tab = h.open_e2e().await;
        let seen = tab
            .eval(
                "const { SluiceError } = await import('/pkg/sluice_client.js');\
                 try {\
                   await sluice.enqueue({ url: '/api/contacts', budget: 'no-such-budget' });\
                   return { rejected: false };\
                 } catch (e) {\
                   return { rejected: true, sluice: e instanceof SluiceError,\
                            error: e instanceof Error, name: e.name, code: e.code,\
                            message: e.message };\
                 }",
            )
            .await;
        assert_eq!(seen["rejected"], true, "{seen}");
        assert_eq!(seen["sluice"], true, "{seen}");
        assert_eq!(seen["error"], true, "{seen}");
        assert_eq!(seen["name"], "SluiceError", "{seen}");
        assert_eq!(seen["code"], "unknown-budget", "{seen}");
    }
);

e2e!(
    /// A deploy whose worker cannot start (here a misspelled setting) while an older version
    /// works: a page that opens still registers (the old worker serves it), and its subscriber
    /// hears why the new version did not install, although that was said before it listened.
    a_new_version_that_cannot_start_is_news_for_subscribers_while_the_old_one_serves,
    90,
    Options::default().with_www_copy(),
    |h| {
        let site = h.www_dir();
        let package = Package::embedded().expect("package");
        package.write(&site.join("sluice")).expect("write the package");
        let good = "self.SLUICE_CONFIG = { packageUrl: '/sluice/' };\n\
                    importScripts('/sluice/sluice-worker.js');\n";
        std::fs::write(site.join("sw-first-hour.js"), good).expect("the worker script");
        let first = h.open_e2e_with("sw=/sw-first-hour.js").await;
        first.eval(&crate::support::js::configure(50, 4, "")).await;

        let broken = "self.SLUICE_CONFIG = { packageUrl: '/sluice/', retentoinMs: 1000 };\n\
                      importScripts('/sluice/sluice-worker.js');\n";
        std::fs::write(site.join("sw-first-hour.js"), broken).expect("the new worker script");
        let second = h
            .open_e2e_with(&format!(
                "sw=/sw-first-hour.js&controlTimeoutMs={CONTROL_TIMEOUT_MS}"
            ))
            .await;
        let heard: Value = second
            .eval(
                "const until = Date.now() + 8000;\
                 for (;;) {\
                   const e = e2e.broadcasts.find((m) => m.type === 'error');\
                   if (e) return e.error;\
                   if (Date.now() > until) return null;\
                   await e2e.sleep(20);\
                 }",
            )
            .await;
        report(&format!("the second page heard: {heard}"));
        assert_eq!(heard["code"], "cannot-start", "{heard}");
        let message = heard["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("unknown key `retentoinMs`; did you mean `retentionMs`?"),
            "{message}"
        );
        // The old version still sends for both pages.
        let done: Value = second
            .eval(
                "const job = await sluice.enqueue({ url: '/api/contacts', kind: 'create',\
                   body: { name: 'still served' } });\
                 return (await job.done).status;",
            )
            .await;
        assert_eq!(done, 201);
    }
);
