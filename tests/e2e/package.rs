//! The example app (`examples/vite-app`) as an app developer makes it: Sluice installed from the
//! folder `sluice build` writes, the app built by Vite, its files served as they are, the demo
//! API on another origin. Driven through its own buttons, as a person would.
//!
//! `.ci/run` builds it first (`sluice build`, `npm ci`, `tsc --noEmit`, `vite build`); without
//! `examples/vite-app/dist` the test says how to build it and skips, except under CI.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::e2e;
use crate::support::{ci, eventually, report, test_api_config, Options, Tab};

/// What `public/sw.js` tells Sluice the demo API admits; the API in this test admits exactly
/// that, so one request too many is a 429.
const LIMIT: usize = 10;
/// The example's import button enqueues this many creates.
const IMPORT_SIZE: usize = 50;

fn example_dist() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/vite-app/dist")
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

        // Nothing more arrives once every job has ended.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stats = h.api.stats();
        report(&format!("vite example: {stats:?}"));
        assert_eq!(stats.rate_limited, 0, "{stats:?}");
        assert!(stats.max_in_window <= LIMIT, "{stats:?}");
        assert_eq!(stats.contacts, IMPORT_SIZE + second.done + 1, "{stats:?}");
        assert_eq!(stats.duplicate_creates, 0, "{stats:?}");
        assert_eq!(stats.creates_without_key, 0, "{stats:?}");
        let by_key = h.api.applied_creates_by_key();
        assert_eq!(by_key.len(), stats.contacts, "{by_key:?}");
        assert!(by_key.values().all(|c| *c == 1), "{by_key:?}");
    }
);
