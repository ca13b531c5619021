//! Issue 39, progress per group: `sluice.group(id)` in the browser, what a page shows for an
//! import it enqueued as one group. The counts themselves are the engine's (tested in
//! `shared/tests/scenarios.rs` and `status_counts.rs`).

use serde_json::Value;

use crate::e2e;
use crate::support::{report, BrowserHarness, PageScript};

e2e!(
    /// 30 creates as one group at 10 a second: while they go, the group says how many wait and
    /// when its budget will be through; once done, 30 done, none waiting, an ETA of 0. A group
    /// the worker does not know is `null`.
    a_group_reports_its_progress_and_eta_while_it_goes,
    60,
    |h| {
        let tab = h.open_e2e().await;
        let r: Value = tab
            .eval(
                r#"
                await e2e.configure({ budgets: [{
                  name: 'api', windows: [{ limit: 10, lengthMs: 1000 }], concurrency: 4,
                  matchPrefixes: [location.origin + '/api/'],
                }] });
                const jobs = Array.from({ length: 30 }, (_, i) => ({
                  url: '/api/contacts', kind: 'create', body: { name: 'imported ' + i } }));
                await sluice.enqueueMany(jobs, 'import');
                const early = await sluice.group('import');
                const until = Date.now() + 20000;
                let late;
                for (;;) {
                  late = await sluice.group('import');
                  if (late.done === 30 || Date.now() > until) break;
                  await e2e.sleep(200);
                }
                return { early, late, unknown: await sluice.group('nope') };
                "#,
            )
            .await;
        report(&format!("a group's progress: {r}"));
        let early = &r["early"];
        assert_eq!(early["total"], 30, "{r}");
        assert!(early["waiting"].as_u64().is_some_and(|w| w >= 20), "{r}");
        assert!(
            early["etaMs"]
                .as_u64()
                .is_some_and(|e| (1_500..=6_000).contains(&e)),
            "about 3 s at 10 a second: {r}"
        );
        let late = &r["late"];
        assert_eq!(late["done"], 30, "{r}");
        assert_eq!(late["waiting"], 0, "{r}");
        assert_eq!(late["pending"], 0, "{r}");
        assert_eq!(late["etaMs"], 0, "{r}");
        assert_eq!(r["unknown"], Value::Null, "{r}");
    }
);
