//! Issue 5: the demo page (`www/`) as a person meets it, in headless Chromium.
//!
//! Each test opens the real page at `/`, drives it as a visitor would (keyboard where the issue
//! asks for it, the page's own controls for the demo API) and checks what it shows: the live
//! region's text at each moment, the countdown outside it, the chips, where focus goes, and an
//! axe-core check. Screenshots of the key moments (idle, sending, paused with its countdown,
//! failed, done, cancelled, a second tab, the next visit) are saved as PNGs under the test's
//! artifacts directory, `target/tmp/e2e/<test>/`, and their paths printed.
//!
//! Time is compressed where that weakens nothing: the demo API runs at 200 requests per second
//! with 5 ms latency (Sluice told so, as the page's settings form does) instead of 10 per second
//! and 300 ms, so a bulk change of all 2,000 contacts takes 15-25 s here instead of 3 min 20 s.

use std::path::PathBuf;
use std::time::Instant;

use serde::Deserialize;
use serde_json::Value;
use sluice::api::ScriptedResponse;
use sluice::browser::{Key, Leaving};

use crate::e2e;
use crate::support::axe::{axe_source, inject_axe};
use crate::support::{cpu_note, report, BrowserHarness, Harness, Options, PageScript, Tab};

/// Wide enough for the page's two columns, tall enough for the queue card, the bulk form and
/// the first rows of the table in one screenshot.
const VIEWPORT: (u32, u32) = (1280, 1100);

/// The rate the tests run the demo API at (Sluice is told it too).
const FAST_LIMIT: u32 = 200;

/// What the page shows, from `demo.state()` (counts are rows by the chip they show).
#[derive(Debug, Deserialize)]
struct Shown {
    phase: String,
    banner: String,
    countdown: String,
    eta: String,
    waiting: u64,
    sending: u64,
    saved: u64,
    failed: u64,
    cancelled: u64,
    rows: u64,
}

/// One row as the page shows it, from `demo.row(n)`.
#[derive(Debug, Deserialize)]
struct Row {
    owner: String,
    note: String,
    chip: String,
    text: String,
}

/// Records every change of the live region's text in `window.announced` (what a screen
/// reader would read out), with the page's clock.
const RECORD_ANNOUNCEMENTS: &str = r#"
    const banner = document.getElementById('banner');
    window.announced = [];
    new MutationObserver(() => {
      window.announced.push({ at: Date.now(), text: banner.textContent });
    }).observe(banner, { childList: true, characterData: true, subtree: true });
"#;

/// Opens the demo page and waits until every control works; announcements are recorded from
/// then on.
async fn open_demo(h: &Harness) -> Tab {
    let tab = h.open("/").await;
    tab.set_viewport(VIEWPORT.0, VIEWPORT.1).await;
    tab.eval("await demo.ready;").await;
    tab.eval(RECORD_ANNOUNCEMENTS).await;
    tab
}

async fn shown(tab: &Tab) -> Shown {
    tab.eval_as("return demo.state();").await
}

/// Waits (in the page) until `predicate`, a JS function of `demo.state()`, holds.
async fn wait_shown(tab: &Tab, predicate: &str, secs: u64) -> Shown {
    tab.eval_as(&format!(
        "return await demo.waitFor({predicate}, {});",
        secs * 1000
    ))
    .await
}

async fn row(tab: &Tab, n: u64) -> Row {
    tab.eval_as(&format!("return demo.row({n});")).await
}

/// The texts the live region took since the last call.
async fn take_announcements(tab: &Tab) -> Vec<String> {
    tab.eval_as("return window.announced.splice(0).map((a) => a.text);")
        .await
}

/// Changes the demo API through the page (`tell`: and Sluice's budget, as the page's form
/// does with "Tell Sluice the new limit" ticked).
async fn set_api(tab: &Tab, patch: &str, tell: bool) {
    tab.eval(&format!("await demo.setApi({patch}, {{ tell: {tell} }});"))
        .await;
}

/// Sluice told `limit` per second and the demo API allowing twice that, for the tests that
/// are about the page rather than the limit: a 429 there would only be noise. The exact limit
/// is checked by `demo_bulk_change_at_the_told_limit_draws_no_429`.
async fn set_api_with_headroom(tab: &Tab, limit: u32) {
    set_api(
        tab,
        &format!("{{ limit: {limit}, windowMs: 1000, latencyMs: 20 }}"),
        true,
    )
    .await;
    set_api(tab, &format!("{{ limit: {} }}", limit * 2), false).await;
}

/// Saves a screenshot of the moment and says where (and when, since the test started).
async fn screenshot(h: &Harness, tab: &Tab, name: &str) -> PathBuf {
    let path = tab.screenshot(name).await;
    report(&format!(
        "screenshot {name} at {:.1?}: {}",
        h.elapsed(),
        path.display()
    ));
    path
}

/// Presses Tab, as a keyboard-only visitor does, until the element matching `selector` has
/// focus; returns what received focus on the way. Panics after `max` presses.
async fn tab_to(tab: &Tab, selector: &str, max: usize) -> Vec<String> {
    let mut path = Vec::new();
    for _ in 0..max {
        tab.press(Key::Tab).await;
        let (name, found): (String, bool) = tab
            .eval_as(&format!(
                "const e = document.activeElement;\
                 return [e ? (e.id ? '#' + e.id : e.tagName.toLowerCase()) : 'nothing',\
                         !!(e && e.matches({selector:?}))];"
            ))
            .await;
        path.push(name);
        if found {
            return path;
        }
    }
    panic!("{selector} never got focus in {max} presses of Tab: {path:?}");
}

/// `1,997` -> 1997.
fn number(text: &str) -> u64 {
    text.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {text:?}"))
}

/// The numbers in `text`, in order ("1,997 changes saved. 3 changes failed." -> [1997, 3]).
fn numbers(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit() && c != ',')
        .map(|w| w.trim_matches(','))
        .filter(|w| !w.is_empty())
        .map(number)
        .collect()
}

/// Why the demo API refuses a change in these tests.
const REFUSED_BECAUSE: &str = "this contact is locked by a merge";

/// A refusal for good (422, not retried) of the next PATCH under `path`, with the reason.
fn refusal(path: &str) -> ScriptedResponse {
    ScriptedResponse {
        body: Some(serde_json::json!({ "error": REFUSED_BECAUSE })),
        ..ScriptedResponse::status(422).for_request(Some("PATCH"), Some(path))
    }
}

/// 1997 -> "1,997", as the page writes numbers.
fn thousands(n: u64) -> String {
    sluice_shared::status::thousands(n)
}

/// PATCHes the demo API applied (the changes that really were saved).
fn applied_patches(h: &Harness) -> usize {
    h.arrivals_where(|a| a.method == "PATCH" && a.applied).len()
}

/// Contacts whose owner at the server is `owner`.
fn contacts_owned_by(h: &Harness, owner: &str) -> usize {
    h.api
        .contacts()
        .iter()
        .filter(|c| c["owner"] == owner)
        .count()
}

/// More than this share of the machine's CPU taken by other work (a compiler, another test
/// run) during a timing makes it a measure of the machine, not of the page: reported, not
/// asserted.
const BUSY_MACHINE: f64 = 0.25;

/// The times from navigation until the table is on screen and until every control works
/// (the marks the page sets), in ms from the navigation's start.
async fn page_timings(tab: &sluice::browser::Tab) -> (f64, f64) {
    tab.eval_as(
        "await demo.ready;\
         const at = (name) => performance.getEntriesByName(name)[0].startTime;\
         return [at('demo:table'), at('demo:ready')];",
    )
    .await
    .unwrap_or_else(|e| panic!("reading the page's timings: {e}"))
}

e2e!(
    /// The page is usable within a second: on a first visit (the worker installs) and on two
    /// more, the times from navigation until the table is on screen and until every control
    /// works are printed and checked.
    ///
    /// The browser is warmed first with the same page on another origin (`localhost`: its own
    /// worker, storage and cache partition), so that the first visit measures the site new to
    /// a running browser, not the start-up of a fresh browser profile, which no visitor waits
    /// for; that one is printed too.
    demo_page_is_usable_within_a_second,
    60,
    Options::default().exclusive(),
    |h| {
        let warm_up = h
            .rig
            .browser
            .open(&format!("http://localhost:{}/", h.addr.port()))
            .await
            .unwrap_or_else(|e| panic!("opening the page on localhost: {e}"));
        let (table_ms, usable_ms) = page_timings(&warm_up).await;
        report(&format!(
            "demo page in a freshly started browser (not checked): table on screen after \
             {table_ms:.0} ms, every control working after {usable_ms:.0} ms"
        ));
        let _ = warm_up.close().await;

        let cpu = h.browser.cpu_sample();
        let tab = h.open("/").await;
        let mut visits = Vec::new();
        for visit in ["first visit", "second visit", "third visit"] {
            if !visits.is_empty() {
                tab.reload().await;
            }
            let (table_ms, usable_ms) = page_timings(&tab.inner).await;
            report(&format!(
                "demo page, {visit}: table on screen after {table_ms:.0} ms, every control \
                 working after {usable_ms:.0} ms"
            ));
            visits.push(usable_ms);
        }
        let load = cpu
            .zip(h.browser.cpu_sample())
            .and_then(|(a, b)| a.until(&b));
        report(&format!("demo page timings: {}", cpu_note(h, cpu)));
        // Usable means usable: the table's keyboard stop and an owner's edit dialog work.
        let opened: bool = tab
            .eval_as(
                "const b = document.querySelector('[data-edit=\"1\"]');\
                 b.click();\
                 const open = document.getElementById('edit-dialog').open;\
                 document.getElementById('edit-dialog').close();\
                 return open && b.tabIndex === 0;",
            )
            .await;
        assert!(opened, "the first row's owner button did not open its dialog");
        assert_eq!(shown(&tab).await.rows, 2000);
        let slowest = visits.iter().copied().fold(0.0, f64::max);
        if load.is_some_and(|l| l.others > BUSY_MACHINE) {
            report(&format!(
                "NOTE: not asserting the page's timings ({visits:?} ms): other work took over \
                 {:.0}% of the machine",
                BUSY_MACHINE * 100.0
            ));
        } else {
            assert!(
                slowest < 1000.0,
                "not usable within a second: {visits:?} ms (first visit first)"
            );
        }
    }
);

e2e!(
    /// Idle, sending, failed and done, with the live region's text at each moment: a bulk
    /// change of 2,000 contacts started from the keyboard, three of which the API refuses, then
    /// "Retry failed" pressed from the keyboard.
    demo_bulk_change_announces_sending_failed_and_done,
    120,
    // Alone: 2,000 changes as fast as the worker goes keep a browser busy for ~20 s, which
    // would slow the timing-sensitive tests beside it (and itself) on two cores.
    Options::default().exclusive(),
    |h| {
        let tab = open_demo(h).await;
        let idle = shown(&tab).await;
        assert_eq!(idle.phase, "idle", "{idle:?}");
        assert_eq!(
            idle.banner,
            "Ready. Nothing is waiting: change one owner, or all 2,000 at once."
        );
        assert!(idle.countdown.is_empty() && idle.eta.is_empty(), "{idle:?}");
        screenshot(h, &tab, "1-idle").await;
        // Estimates are rounded to what a rate-based guess can claim.
        let rounded: Vec<String> = tab
            .eval_as(
                "const format = await import('/demo/format.js');\
                 return [4e3, 24e3, 70e3, 98e3, 150e3, 65 * 60e3].map(format.roughly);",
            )
            .await;
        assert_eq!(
            rounded,
            [
                "a few seconds",
                "about 20 s",
                "about 1 min",
                "about 2 min",
                "about 3 min",
                "about 1 h 10 min"
            ]
        );

        set_api(
            &tab,
            &format!("{{ limit: {FAST_LIMIT}, windowMs: 1000, latencyMs: 5 }}"),
            true,
        )
        .await;
        // The warning before a job bigger than a window's whole budget, with the least time,
        // is part of the Apply button's description. The page draws the new limit on its next
        // frame, so the check waits up to 2 s for it (and then asserts what is shown).
        let warning: Value = tab
            .eval(
                "const read = () => {\
                   const apply = document.getElementById('apply');\
                   const described = (apply.getAttribute('aria-describedby') || '').split(' ')\
                     .map((id) => document.getElementById(id).textContent).join(' ');\
                   return { shown: !document.getElementById('capacity-warning').hidden, described };\
                 };\
                 const until = performance.now() + 2000;\
                 let seen = read();\
                 while (!seen.described.includes('200 per second') && performance.now() < until) {\
                   await new Promise((r) => setTimeout(r, 50));\
                   seen = read();\
                 }\
                 return seen;",
            )
            .await;
        assert_eq!(warning["shown"], true, "{warning}");
        assert_eq!(
            warning["described"],
            "Sluice's limit is 200 per second, so 2,000 changes take at least 10 s."
        );

        // The API refuses the first three changes for good.
        h.api
            .script((0..3).map(|_| refusal("/api/contacts/")))
            .expect("script");
        let _ = take_announcements(&tab).await;
        tab.eval("document.getElementById('owner-input').focus();")
            .await;
        tab.press(Key::Enter).await;

        let sending = wait_shown(&tab, "(s) => s.phase === 'sending' && s.saved >= 300", 30).await;
        assert_eq!(
            sending.banner,
            "Sending 2,000 changes, at most 200 per second."
        );
        // Rounded to what a rate-based estimate can claim, never to the second.
        let eta_ok = sending.eta == "Time left: a few seconds."
            || sending.eta.strip_prefix("Time left: about ").is_some_and(|rest| {
                rest.ends_with("0 s.") || rest.ends_with(" min.")
            });
        assert!(eta_ok, "ETA {:?}", sending.eta);
        let last = row(&tab, 2000).await;
        assert_eq!(
            (last.owner.as_str(), last.chip.as_str(), last.text.as_str()),
            ("Maya Patel", "waiting", "Waiting"),
            "the new value shows at once, marked: {last:?}"
        );
        report(&format!("while sending: {sending:?}"));
        screenshot(h, &tab, "2-sending").await;

        let failed = wait_shown(&tab, "(s) => s.phase === 'failed'", 60).await;
        assert_eq!(failed.banner, "1,997 changes saved. 3 changes failed.");
        assert_eq!((failed.saved, failed.failed), (1997, 3), "{failed:?}");
        // The refused ones are the first three to arrive, in whatever order four in flight
        // arrived.
        let failed_numbers: Vec<u64> = tab
            .eval_as(
                "const rows = [];\
                 for (let n = 1; n <= 2000; n++) if (demo.row(n).chip === 'failed') rows.push(n);\
                 return rows;",
            )
            .await;
        assert_eq!(failed_numbers.len(), 3, "{failed_numbers:?}");
        let mut failed_rows = Vec::new();
        for &n in &failed_numbers {
            let r = row(&tab, n).await;
            assert_eq!(
                r.text,
                format!("Failed: HTTP 422: {REFUSED_BECAUSE}"),
                "a failed chip says why"
            );
            assert_eq!(r.note, "not saved", "{r:?}");
            failed_rows.push(r);
        }
        report(&format!("failed rows: {failed_rows:?}"));
        screenshot(h, &tab, "3-failed").await;

        // Keyboard only: Tab to "Retry 3 failed changes", Space presses it, and focus moves to
        // the banner, which says what happens.
        let path = tab_to(&tab, "#retry-failed", 40).await;
        report(&format!("Tab stops to the retry button: {path:?}"));
        let label: String = tab
            .eval_as("return document.activeElement.textContent;")
            .await;
        assert_eq!(label, "Retry 3 failed changes");
        tab.press(Key::Space).await;
        let after_retry: (String, String) = tab
            .eval_as(
                "await demo.waitFor(() => document.activeElement.id === 'banner', 5000);\
                 return [document.activeElement.id, document.activeElement.textContent];",
            )
            .await;
        assert_eq!(after_retry.0, "banner");
        // Three changes can be saved before this reads the banner; the announcements checked
        // below show that it said "Retrying 3 failed changes." first either way.
        assert!(
            ["Retrying 3 failed changes.", "All 2,000 changes saved."]
                .contains(&after_retry.1.as_str()),
            "{after_retry:?}"
        );

        let done = wait_shown(&tab, "(s) => s.phase === 'idle'", 30).await;
        assert_eq!(done.banner, "All 2,000 changes saved.");
        assert_eq!((done.saved, done.failed, done.waiting), (2000, 0, 0));
        assert_eq!(contacts_owned_by(h, "Maya Patel"), 2000);
        screenshot(h, &tab, "4-done").await;

        // The live region changed with the state, never with the clock.
        let announced = take_announcements(&tab).await;
        report(&format!("announced: {announced:?}"));
        assert_eq!(
            announced,
            [
                "Sending 2,000 changes, at most 200 per second.",
                "1,997 changes saved. 3 changes failed.",
                "Retrying 3 failed changes.",
                "All 2,000 changes saved.",
            ]
        );
    }
);

e2e!(
    /// A 429 provoked with the page's own "Provoke a 429" control: the banner says "Paused for
    /// N seconds" once, the countdown beside it runs down from the pause's end, and "Cancel N
    /// waiting changes" pressed from the keyboard puts focus on a banner that says exactly what
    /// happened, which matches what the server saved.
    demo_pause_shows_a_countdown_and_cancel_says_what_happened,
    90,
    |h| {
        let tab = open_demo(h).await;
        set_api(
            &tab,
            &format!("{{ limit: {FAST_LIMIT}, windowMs: 1000, latencyMs: 5 }}"),
            true,
        )
        .await;
        tab.eval("await demo.applyOwner('Aiko Tanaka');").await;
        wait_shown(&tab, "(s) => s.saved >= 150", 30).await;
        let _ = take_announcements(&tab).await;
        tab.eval("document.getElementById('provoke').click();").await;

        let paused = wait_shown(&tab, "(s) => s.phase === 'paused'", 20).await;
        report(&format!("paused: {paused:?}"));
        let [seconds, 429, left] = numbers(&paused.banner)[..] else {
            panic!("banner {:?}", paused.banner);
        };
        assert_eq!(
            paused.banner,
            format!(
                "Paused for {seconds} seconds: the demo API answered 429 Too Many Requests. \
                 {} changes will be sent after it.",
                thousands(left)
            )
        );
        assert!((2..=11).contains(&seconds), "{paused:?}");
        // The countdown is outside the live region and is the time to the pause's end.
        let countdown: Value = tab
            .eval(
                "const c = document.getElementById('countdown');\
                 const until = Math.max(...demo.status.budgets.map((b) => b.pausedUntil || 0));\
                 return { inLiveRegion: !!c.closest('[role=status], [aria-live]'),\
                          text: c.textContent, leftMs: until - Date.now() };",
            )
            .await;
        assert_eq!(countdown["inLiveRegion"], false, "{countdown}");
        let text = countdown["text"].as_str().unwrap_or("");
        let left_ms = countdown["leftMs"].as_f64().unwrap_or(0.0);
        assert_eq!(
            text,
            format!("Resumes in {} s.", (left_ms / 1000.0).ceil()),
            "{countdown}"
        );
        screenshot(h, &tab, "1-paused").await;

        // A second and a half later the countdown has moved and the live region has not.
        tab.eval("await new Promise((r) => setTimeout(r, 1500));")
            .await;
        let later = shown(&tab).await;
        assert_eq!(later.phase, "paused", "{later:?}");
        assert_eq!(later.banner, paused.banner);
        assert_ne!(later.countdown, paused.countdown, "{later:?}");
        assert_eq!(
            take_announcements(&tab).await,
            std::slice::from_ref(&paused.banner),
            "the pause is announced once, never each tick"
        );

        // Keyboard only: Tab to the cancel button and press Enter.
        let path = tab_to(&tab, "#cancel-waiting", 40).await;
        report(&format!("Tab stops to the cancel button: {path:?}"));
        // Read together: once the pause is over the count moves on between two reads.
        let (label, waiting): (String, u64) = tab
            .eval_as("return [document.activeElement.textContent, demo.state().waiting];")
            .await;
        assert_eq!(
            label,
            format!("Cancel {} waiting changes", thousands(waiting))
        );
        tab.press(Key::Enter).await;
        let focused: (String, String) = tab
            .eval_as(
                "await demo.waitFor(() => document.activeElement.id === 'banner', 8000);\
                 return [document.activeElement.id, document.activeElement.textContent];",
            )
            .await;
        let said = focused.1;
        let [saved, not_sent] = numbers(&said)[..] else {
            panic!("after cancel: {said:?}");
        };
        assert_eq!(
            said,
            format!(
                "{} changes were saved. {} were not sent and are back to their old values.",
                thousands(saved),
                thousands(not_sent)
            )
        );
        assert_eq!(saved + not_sent, 2000, "{said}");
        assert_eq!(saved as usize, applied_patches(h), "the server saw otherwise");
        assert_eq!(contacts_owned_by(h, "Aiko Tanaka"), saved as usize);
        let cancelled = row(&tab, 2000).await;
        assert_eq!(
            (cancelled.owner.as_str(), cancelled.chip.as_str()),
            ("Unassigned", "cancelled"),
            "{cancelled:?}"
        );
        assert_eq!(cancelled.text, "Cancelled, old value back");
        let s = shown(&tab).await;
        assert_eq!((s.saved, s.cancelled, s.waiting), (saved, not_sent, 0));
        screenshot(h, &tab, "2-cancelled").await;
    }
);

e2e!(
    /// A second tab opened while the first sends shows the same queue, live, and the same
    /// outcome when the first tab cancels.
    demo_second_tab_shows_the_same_status_live,
    90,
    |h| {
        let first = open_demo(h).await;
        set_api_with_headroom(&first, 50).await;
        first.eval("await demo.applyOwner('Luis Ortega');").await;
        wait_shown(&first, "(s) => s.saved >= 20", 30).await;

        let second = open_demo(h).await;
        let s = shown(&second).await;
        let [pending] = numbers(&s.banner)[..] else {
            panic!("second tab: {s:?}");
        };
        assert_eq!(
            s.banner,
            format!(
                "Another tab is sending {} changes. This tab shows the same queue, live.",
                thousands(pending)
            )
        );
        // Live: its counts move on while the first tab does the work.
        let moved = wait_shown(
            &second,
            &format!("(s) => s.saved >= {} + 50", s.saved),
            20,
        )
        .await;
        assert_eq!(moved.rows, 2000);
        assert_eq!(moved.saved + moved.waiting + moved.sending, 2000, "{moved:?}");
        let row_there = row(&second, 2000).await;
        assert_eq!(
            (row_there.owner.as_str(), row_there.chip.as_str()),
            ("Luis Ortega", "waiting"),
            "the second tab shows the value on its way: {row_there:?}"
        );
        screenshot(h, &second, "second-tab-sending").await;

        let cancel: Value = first.eval("return await demo.cancelWaiting();").await;
        let said = cancel["text"].as_str().unwrap_or("").to_string();
        let ended = wait_shown(&second, "(s) => s.phase === 'idle'", 15).await;
        assert_eq!(ended.banner, said, "both tabs tell the same outcome");
        assert_eq!(ended.cancelled + ended.saved, 2000, "{ended:?}");
        screenshot(h, &second, "second-tab-cancelled").await;
    }
);

e2e!(
    /// Changes still waiting when the last tab closed: the next visit says "Sending N changes
    /// left from your last visit" and offers Cancel.
    demo_next_visit_offers_to_cancel_changes_left_from_the_last_visit,
    90,
    |h| {
        let first = open_demo(h).await;
        set_api_with_headroom(&first, 20).await;
        first.eval("await demo.applyOwner('Amara Okafor');").await;
        wait_shown(&first, "(s) => s.saved >= 10", 30).await;
        first.close().await;

        let next = open_demo(h).await;
        let s = shown(&next).await;
        let [left] = numbers(&s.banner)[..] else {
            panic!("next visit: {s:?}");
        };
        assert_eq!(
            s.banner,
            format!(
                "Sending {} changes left from your last visit.",
                thousands(left)
            )
        );
        assert!(left < 2000 && left > 1000, "{s:?}");
        let cancel_shown: bool = next
            .eval_as("return !document.getElementById('cancel-waiting').hidden;")
            .await;
        assert!(cancel_shown, "no Cancel on the next visit");
        screenshot(h, &next, "next-visit").await;

        let path = tab_to(&next, "#cancel-waiting", 40).await;
        report(&format!("Tab stops to the cancel button: {path:?}"));
        next.press(Key::Enter).await;
        let said: String = next
            .eval_as(
                "await demo.waitFor(() => document.activeElement.id === 'banner', 8000);\
                 return document.activeElement.textContent;",
            )
            .await;
        let [saved, not_sent] = numbers(&said)[..] else {
            panic!("after cancel: {said:?}");
        };
        assert_eq!(saved + not_sent, 2000, "{said}");
        assert_eq!(saved as usize, applied_patches(h), "{said}");
        screenshot(h, &next, "next-visit-cancelled").await;
    }
);

e2e!(
    /// `beforeunload` asks only while interactive or bulk changes wait: not when idle, yes
    /// while a bulk change waits, not when only background reads wait.
    demo_asks_before_leaving_only_while_changes_wait,
    90,
    |h| {
        let tab = open_demo(h).await;
        // Chromium asks only on a page the visitor has used: a key press counts.
        tab.press(Key::Tab).await;
        assert_eq!(tab.leave(&h.url("/")).await, Leaving::Left, "asked while idle");
        tab.eval("await demo.ready;").await;

        set_api(&tab, "{ limit: 1, windowMs: 1000, latencyMs: 20 }", true).await;
        tab.eval("await demo.applyOwner('Chen Wei');").await;
        tab.press(Key::Tab).await;
        let asked = tab.leave("about:blank").await;
        assert!(
            matches!(asked, Leaving::Asked(_)),
            "not asked while 2,000 changes wait"
        );
        assert_eq!(shown(&tab).await.rows, 2000, "the page stayed");

        // Only background reads left: leaving loses nothing a person waits for.
        tab.eval("await demo.cancelWaiting(); demo.refreshVisible();")
            .await;
        tab.eval(
            "await demo.waitFor(() => {\
               const lanes = Object.fromEntries(demo.status.lanes.map((l) => [l.lane, l.waiting]));\
               return lanes.background > 0 && !lanes.bulk && !lanes.interactive;\
             }, 10000);",
        )
        .await;
        tab.press(Key::Tab).await;
        assert_eq!(
            tab.leave("about:blank").await,
            Leaving::Left,
            "asked while only background reads waited"
        );
    }
);

/// Runs axe on the page; returns the violations as `impact rule: help (n elements)`, and
/// panics on any serious or critical one. Rules axe could not decide ("incomplete") are
/// reported. Colour contrast it may leave undecided only because an element is partly hidden
/// (axe cannot tell the background of what it cannot see; on these pages, the rows the
/// table's scroll area cuts off at its edge), not for a background it could not work out
/// (an image, a gradient, a translucent layer), which could hide a real contrast fault.
///
/// The table's rows after its first chunk of 100 are taken out of the document while axe runs
/// (and put back after): every row comes from one template, the first chunk holds every kind
/// of chip the tests make, and axe walks the whole document even for parts it is told to
/// exclude, which for 2,000 rows takes it 15-45 s here.
async fn axe_check(tab: &Tab, moment: &str) -> Vec<String> {
    let started = Instant::now();
    let r: Value = tab
        .eval(
            "const body = document.getElementById('contacts-body');\
             const rest = [...body.children].slice(1);\
             rest.forEach((chunk) => chunk.remove());\
             let r;\
             try { r = await axe.run(document); }\
             finally { body.append(...rest); }\
             return {\
               passed: r.passes.length,\
               incomplete: r.incomplete.map((v) => v.id),\
               contrastUndecidedBecause: [...new Set(r.incomplete\
                 .filter((v) => v.id === 'color-contrast')\
                 .flatMap((v) => v.nodes.map((n) => ((n.any[0] || {}).data || {}).messageKey\
                   || (n.any[0] || {}).message || 'unknown')))],\
               violations: r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,\
                 nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 5),\
                 count: v.nodes.length })),\
             };",
        )
        .await;
    let violations = r["violations"].as_array().cloned().unwrap_or_default();
    let lines: Vec<String> = violations
        .iter()
        .map(|v| {
            format!(
                "{} {}: {} ({} elements, e.g. {})",
                v["impact"].as_str().unwrap_or("?"),
                v["id"].as_str().unwrap_or("?"),
                v["help"].as_str().unwrap_or(""),
                v["count"],
                v["nodes"]
            )
        })
        .collect();
    report(&format!(
        "axe, {moment}: {} rules passed, {} violations {lines:?}, undecided {} ({:.1?})",
        r["passed"],
        lines.len(),
        r["incomplete"],
        started.elapsed()
    ));
    let undecided_because: Vec<&str> = r["contrastUndecidedBecause"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    assert!(
        undecided_because
            .iter()
            .all(|k| *k == "elmPartiallyObscured"),
        "colour contrast undecided {moment} for another reason than a partly hidden \
         element: {undecided_because:?}"
    );
    let grave: Vec<&String> = violations
        .iter()
        .zip(&lines)
        .filter(|(v, _)| matches!(v["impact"].as_str(), Some("serious") | Some("critical")))
        .map(|(_, l)| l)
        .collect();
    assert!(
        grave.is_empty(),
        "serious or critical accessibility violations {moment}: {grave:#?}"
    );
    lines
}

e2e!(
    /// axe-core in the page finds no serious or critical violation: idle; while sending, with
    /// waiting, sending, saved and failed chips, the progress bar, the warnings and the Cancel,
    /// Retry and Discard buttons; after a cancel, with cancelled rows; and with an owner's edit
    /// dialog open.
    demo_has_no_serious_accessibility_violations,
    90,
    |h| {
        let Some(axe) = axe_source() else {
            return;
        };
        let tab = open_demo(h).await;
        inject_axe(&tab, &axe).await;
        axe_check(&tab, "idle").await;

        // One change refused for good (a failed chip), a few saved, the rest waiting.
        set_api_with_headroom(&tab, 5).await;
        h.api
            .push_script(refusal("/api/contacts/1"))
            .expect("script");
        tab.eval("await demo.editOwner(1, 'Sofia Rossi');").await;
        wait_shown(&tab, "(s) => s.failed === 1", 15).await;
        tab.eval("await demo.applyOwner('Jonas Berg');").await;
        let busy = wait_shown(&tab, "(s) => s.saved >= 5", 15).await;
        report(&format!("axe while busy: {busy:?}"));
        axe_check(&tab, "while sending, with a failed change").await;
        screenshot(h, &tab, "busy").await;

        tab.eval("await demo.cancelWaiting();").await;
        axe_check(&tab, "after a cancel, with cancelled rows").await;

        tab.eval("document.querySelector('[data-edit=\"3\"]').click();")
            .await;
        axe_check(&tab, "with the edit dialog open").await;
        screenshot(h, &tab, "dialog").await;
        tab.press(Key::Escape).await;
        let closed: bool = tab
            .eval_as("return !document.getElementById('edit-dialog').open;")
            .await;
        assert!(closed, "Escape did not close the dialog");
    }
);

e2e!(
    /// Sluice told the demo API's exact limit, at a rate the worker reaches: a bulk change
    /// draws no 429.
    demo_bulk_change_at_the_told_limit_draws_no_429,
    60,
    |h| {
        let tab = open_demo(h).await;
        set_api(&tab, "{ limit: 20, windowMs: 1000, latencyMs: 20 }", true).await;
        tab.eval("await demo.applyOwner('Amara Okafor');").await;
        wait_shown(&tab, "(s) => s.saved >= 60", 30).await;
        let arrivals: Vec<String> = h
            .api
            .arrivals()
            .iter()
            .take(25)
            .map(|a| format!("{:.0} ms {} {}", a.at_ms, a.path, a.status))
            .collect();
        assert_eq!(h.api.count_429(), 0, "first arrivals: {arrivals:#?}");
        assert!(h.api.max_in_window(1000) <= 20, "{arrivals:#?}");
        tab.eval("await demo.cancelWaiting();").await;
    }
);

e2e!(
    /// "Use the batch endpoint" switched on from the keyboard, kept across a reload, and a bulk
    /// change of every contact sent through the HubSpot-style batch endpoint at the demo API's
    /// default 10 requests a second (Sluice told): every owner changed, a request per 100
    /// changes or so, no 429, and the page's count of requests versus changes saved says so.
    demo_batch_switch_sends_the_bulk_change_in_few_requests,
    60,
    |h| {
        let tab = open_demo(h).await;
        set_api(&tab, "{ limit: 10, windowMs: 1000, latencyMs: 20 }", true).await;
        let off: (bool, String, bool) = tab
            .eval_as(
                "const s = document.getElementById('use-batch');\
                 return [s.checked, s.getAttribute('role'), demo.state().batch];",
            )
            .await;
        assert_eq!(off, (false, "switch".into(), false), "the switch starts off");

        // Keyboard only: Tab to the switch, Space turns it on.
        let path = tab_to(&tab, "#use-batch", 20).await;
        report(&format!("Tab stops to the batch switch: {path:?}"));
        tab.press(Key::Space).await;
        wait_shown(&tab, "(s) => s.batch && !s.batchLocked", 5).await;

        // Kept across a reload, and given to the worker again.
        tab.reload().await;
        tab.eval("await demo.ready;").await;
        let kept: (bool, bool, Option<String>) = tab
            .eval_as(
                "const s = document.getElementById('use-batch');\
                 return [s.checked, demo.state().batch, s.getAttribute('aria-disabled')];",
            )
            .await;
        assert_eq!(kept, (true, true, None), "the switch after a reload");
        screenshot(h, &tab, "batch-switch-on").await;

        let contacts = h.api.contacts().len();
        let started = Instant::now();
        tab.eval("await demo.applyOwner('Sofia Rossi');").await;
        let done = wait_shown(
            &tab,
            &format!("(s) => s.phase === 'idle' && s.saved === {contacts}"),
            20,
        )
        .await;
        let took = started.elapsed();
        assert_eq!(
            done.banner,
            format!("All {} changes saved.", thousands(contacts as u64))
        );
        assert_eq!(contacts_owned_by(h, "Sofia Rossi"), contacts);
        let stats = h.api.stats();
        let twice = (1..=contacts as u64)
            .filter(|&id| h.api.patches_of(id) != 1)
            .count();
        report(&format!(
            "batch switch on: {contacts} contacts changed in {took:.1?} with {} requests \
             ({} batches carrying {} items), {} 429s, at most {} in a second",
            stats.total,
            stats.batches,
            stats.batch_items,
            stats.rate_limited,
            stats.max_in_window
        ));
        assert_eq!(twice, 0, "a contact not patched exactly once");
        assert_eq!(stats.patches_applied, contacts);
        assert_eq!(stats.rate_limited, 0, "{stats:?}");
        assert!(
            stats.total <= contacts / 50 + 5,
            "{} requests for {contacts} changes",
            stats.total
        );

        // The page's count of requests versus changes saved (read at the server's next poll).
        let expected = format!(
            "{} requests · {} changes saved",
            thousands(stats.total as u64),
            thousands(contacts as u64)
        );
        let traffic: String = tab
            .eval_as(&format!(
                "const el = document.getElementById('traffic');\
                 await demo.waitFor(() => el.textContent === {expected:?}, 5000).catch(() => {{}});\
                 return el.textContent;"
            ))
            .await;
        assert_eq!(traffic, expected);
        screenshot(h, &tab, "batch-done").await;
    }
);
