//! Issue 37 in the browser: a budget of two resources configured by a page, jobs that carry
//! their cost, and the status that says which resource binds and when it frees. The engine's
//! side (the weighted log, corrections from the answer, backfilling) is tested in
//! `shared/tests/dialects.rs`; here, what a page and the worker carry between them.

use serde_json::Value;

use crate::e2e;
use crate::support::{report, BrowserHarness, PageScript};

e2e!(
    /// Five creates of 300 tokens against 1,000 tokens a minute: three go at once, two wait
    /// for the minute to turn, and every tab's status says so (tokens the tightest, 900 spent,
    /// free again a minute after the first start). The `cost` a page gives reaches the worker
    /// through the page client, and the `resources` of a page's configuration are the worker's.
    a_budget_of_tokens_holds_jobs_until_their_cost_fits_and_says_so,
    60,
    |h| {
        let tab = h.open_e2e().await;
        let r: Value = tab
            .eval(
                r#"
                await e2e.configure({ budgets: [{
                  name: 'api', windows: [{ limit: 50, lengthMs: 1000 }], concurrency: 4,
                  matchPrefixes: [location.origin + '/api/'],
                  resources: [{ name: 'tokens', windows: [{ limit: 1000, lengthMs: 60000 }] }],
                }] });
                const started = Date.now();
                const jobs = Array.from({ length: 5 }, (_, i) => ({
                  url: '/api/contacts', kind: 'create', body: { name: 'costly ' + i },
                  cost: { tokens: 300 },
                }));
                const { ids } = await sluice.enqueueMany(jobs, 'costly');
                const until = Date.now() + 5000;
                let s;
                for (;;) {
                  s = await sluice.snapshot();
                  if (s.counts.done >= 3 || Date.now() > until) break;
                  await e2e.sleep(50);
                }
                await e2e.sleep(500);
                s = await sluice.snapshot();
                const b = s.budgets.find((b) => b.name === 'api');
                return { ids: ids.length, counts: s.counts, resources: b.resources,
                         tightest: b.tightest, started, now: Date.now() };
                "#,
            )
            .await;
        report(&format!("tokens budget in the browser: {r}"));
        assert_eq!(r["ids"], 5, "{r}");
        assert_eq!(r["counts"]["done"], 3, "three of 300 fit 1,000: {r}");
        assert_eq!(r["counts"]["queued"], 2, "two wait for the minute: {r}");
        assert_eq!(r["tightest"], "tokens", "{r}");
        let tokens = &r["resources"][0];
        assert_eq!(tokens["name"], "tokens", "{r}");
        assert_eq!(tokens["used"], 900, "{r}");
        assert_eq!(tokens["remaining"], 100, "{r}");
        let frees_in = tokens["freesAt"].as_f64().unwrap_or(0.0) - r["started"].as_f64().unwrap_or(0.0);
        assert!(
            (59_000.0..=61_500.0).contains(&frees_in),
            "frees a minute after the first start: {frees_in} ms: {r}"
        );
        assert_eq!(h.api.contacts().len(), 3, "the server saw three creates");
    }
);
