//! The first things that must work: registration, one job end to end, and a worker that
//! survives garbage.

use serde_json::Value;

use crate::e2e;
use crate::support::{report, BrowserHarness, PageScript};

e2e!(registers_and_controls_the_page_on_first_visit, 60, |h| {
    let tab = the_first_visit_registers_and_controls_the_page(
        h,
        FirstVisit {
            // Headless Chromium says `HeadlessChrome/`.
            user_agent: "Chrome/",
            background_sync: true,
        },
    )
    .await;
    tab.screenshot("registered").await;
});

/// What the first visit finds in one browser in particular.
pub struct FirstVisit {
    /// A token the user agent string holds (`Firefox/`): the test runs in the browser meant.
    pub user_agent: &'static str,
    /// Whether the registration offers Background Sync (Chromium does, Firefox does not): the
    /// tests of each browser cover the path with it or the one without.
    pub background_sync: bool,
}

/// A fresh profile's first visit, written once for both browsers (Firefox's test runs it too):
/// the worker controls the page on that very load (a navigation, not a reload), its script and
/// scope are the site's, the registration offers Background Sync as `expected` says, and the
/// worker answers through the client. Returns the tab.
pub async fn the_first_visit_registers_and_controls_the_page<H: BrowserHarness>(
    h: &H,
    expected: FirstVisit,
) -> H::Tab {
    let tab = h.open_e2e().await;
    let r = tab
        .eval(
            r#"
            const reg = await navigator.serviceWorker.ready;
            return {
              userAgent: navigator.userAgent,
              load: performance.getEntriesByType('navigation')[0].type,
              controlled: navigator.serviceWorker.controller !== null,
              script: navigator.serviceWorker.controller && navigator.serviceWorker.controller.scriptURL,
              scope: reg.scope,
              backgroundSync: 'sync' in reg,
            };
            "#,
        )
        .await;
    report(&format!("{} first visit: {r}", H::BROWSER));
    assert!(
        r["userAgent"]
            .as_str()
            .is_some_and(|ua| ua.contains(expected.user_agent)),
        "not {}: {r}",
        H::BROWSER
    );
    assert_eq!(r["load"], "navigate", "the first load, not a reload: {r}");
    assert_eq!(r["controlled"], true, "{r}");
    assert_eq!(r["script"], h.site().url("/sw.js"), "{r}");
    assert_eq!(r["scope"], h.site().url("/"), "{r}");
    if expected.background_sync {
        assert_eq!(
            r["backgroundSync"],
            true,
            "{} has no Background Sync: its tests of the path with it cannot run",
            H::BROWSER
        );
    } else {
        assert_eq!(
            r["backgroundSync"],
            false,
            "{} has Background Sync now: these tests no longer cover the path without it",
            H::BROWSER
        );
    }

    // The worker answers through the client.
    let status = tab.eval("return await sluice.snapshot();").await;
    assert!(status["counts"].is_object(), "snapshot: {status}");
    tab
}

e2e!(one_post_is_sent_once_with_an_idempotency_key, 60, |h| {
    one_create_is_sent_once_with_a_key_and_applied_once(h).await;
});

/// One create through the queue reaches the server once, with an Idempotency-Key, and is
/// applied once; written once for both browsers (Firefox's test runs it too).
pub async fn one_create_is_sent_once_with_a_key_and_applied_once(h: &impl BrowserHarness) {
    let tab = h.open_e2e().await;
    tab.eval("await e2e.configure();").await;
    let r = tab
        .eval(
            r#"
            const job = await sluice.enqueue({
              url: '/api/contacts', method: 'POST', kind: 'create', lane: 'interactive',
              body: { name: 'Ada Lovelace', email: 'ada@example.com' },
            });
            const outcome = await job.done;
            return { id: job.id, state: job.state, coalesced: job.coalesced, outcome };
            "#,
        )
        .await;
    assert_eq!(r["outcome"]["status"], 201, "{r}");
    assert_eq!(r["coalesced"], false, "{r}");
    assert!(r["id"].as_str().is_some_and(|s| !s.is_empty()), "{r}");
    let body: Value =
        serde_json::from_str(r["outcome"]["body"].as_str().unwrap_or("null")).expect("JSON body");
    assert_eq!(body["name"], "Ada Lovelace", "{r}");

    let creates = h.arrivals_where(|a| a.method == "POST" && a.path == "/api/contacts");
    assert_eq!(creates.len(), 1, "the server saw {creates:?}");
    assert!(creates[0].idempotency_key.is_some(), "{creates:?}");
    // Applied once by its key: no duplicate create, one contact stored.
    h.assert_each_applied_once(1, 1);
}

/// Whether `s` is a UUID v4 as `crypto.randomUUID()` writes one: lower-case hex in groups of
/// 8-4-4-4-12, version 4, variant 10xx.
fn is_uuid_v4(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == b'-'
            } else {
                c.is_ascii_digit() || (b'a'..=b'f').contains(&c)
            }
        })
        && b[14] == b'4'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b')
}

e2e!(
    /// The page draws its jobs' ids and Idempotency-Keys from `crypto.getRandomValues`, 64 ids'
    /// bytes at a time: across several refills every id and every key of a group is a distinct
    /// UUID v4, and the server sees each key once.
    a_groups_ids_and_idempotency_keys_are_distinct_uuids,
    60,
    |h| {
        let tab = h.open_e2e().await;
        tab.eval(&crate::support::js::configure(200, 8, "")).await;
        let ids: Vec<String> = tab
            .eval_as(&crate::support::js::enqueue_group(150, "u"))
            .await;
        let results: Vec<String> = tab.eval_as(&crate::support::js::settle_group("u")).await;
        assert!(crate::support::js::all_done(&results), "{results:?}");
        let keys: Vec<String> = h
            .arrivals_where(|a| a.method == "POST" && a.path == "/api/contacts")
            .into_iter()
            .filter_map(|a| a.idempotency_key)
            .collect();
        assert_eq!(keys.len(), 150, "one create each, each with a key");
        let all: std::collections::BTreeSet<&str> =
            ids.iter().chain(&keys).map(String::as_str).collect();
        assert_eq!(all.len(), 300, "150 ids and 150 keys, all different");
        let bad: Vec<&&str> = all.iter().filter(|s| !is_uuid_v4(s)).collect();
        assert!(bad.is_empty(), "not UUID v4: {bad:?}");
    }
);

e2e!(
    malformed_messages_get_errors_and_the_worker_goes_on,
    60,
    |h| {
        let tab = h.open_e2e().await;
        tab.eval("await e2e.configure();").await;
        let r = tab
        .eval(
            r#"
            const from = e2e.raw.length;
            const worker = navigator.serviceWorker.controller;
            const isError = (m) => m && m.type === 'error';
            worker.postMessage({ not: 'a string' });
            const notString = await e2e.waitFor(isError, 5000, from);
            const second = e2e.raw.length;
            worker.postMessage('{this is not json');
            const notJson = await e2e.waitFor(isError, 5000, second);
            const third = e2e.raw.length;
            worker.postMessage(JSON.stringify({ requestId: 'u1', type: 'launchRockets' }));
            const unknown = await e2e.waitFor((m) => isError(m) && m.requestId === 'u1', 5000, third);
            const fourth = e2e.raw.length;
            worker.postMessage(JSON.stringify({ requestId: 'u2', type: 'enqueue', job: { lane: 'urgent' } }));
            const badField = await e2e.waitFor((m) => isError(m) && m.requestId === 'u2', 5000, fourth);

            const job = await sluice.enqueue({ url: '/api/contacts', kind: 'create', body: { name: 'Grace' } });
            const outcome = await job.done;
            return { notString, notJson, unknown, badField, status: outcome.status };
            "#,
        )
        .await;
        assert_eq!(r["notString"]["error"]["code"], "malformed", "{r}");
        assert_eq!(r["notString"]["requestId"], Value::Null, "{r}");
        assert_eq!(r["notJson"]["error"]["code"], "malformed", "{r}");
        assert_eq!(r["unknown"]["error"]["code"], "unknown-type", "{r}");
        assert_eq!(r["unknown"]["error"]["found"], "launchRockets", "{r}");
        assert_eq!(r["badField"]["error"]["code"], "malformed", "{r}");
        assert_eq!(r["status"], 201, "{r}");
    }
);

e2e!(client_errors_carry_codes_and_messages, 60, |h| {
    let tab = h.open_e2e().await;
    tab.eval("await e2e.configure();").await;
    let r = tab
        .eval(
            r#"
            const grab = async (p) => { try { await p; return null; } catch (e) { return { code: e.code, message: e.message }; } };
            return {
              noUrl: await grab(sluice.enqueue({ method: 'POST' })),
              typo: await grab(sluice.enqueue({ url: '/api/x', metod: 'POST' })),
              getWithBody: await grab(sluice.enqueue({ url: '/api/x', method: 'GET', body: 'x' })),
              unknownBudget: await grab(sluice.enqueue({ url: '/api/x', budget: 'nope' })),
              notFound: await grab(sluice.retry('no-such-job')),
            };
            "#,
        )
        .await;
    assert_eq!(r["noUrl"]["code"], "invalid-job", "{r}");
    assert_eq!(r["typo"]["code"], "invalid-job", "{r}");
    assert!(
        r["typo"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("metod"),
        "{r}"
    );
    assert_eq!(r["getWithBody"]["code"], "invalid-job", "{r}");
    assert_eq!(r["unknownBudget"]["code"], "unknown-budget", "{r}");
    assert!(
        r["unknownBudget"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("api"),
        "{r}"
    );
    assert_eq!(r["notFound"]["code"], "not-found", "{r}");
});
