//! Issue 39, credentials that expire while jobs wait: the demo API accepts one bearer token at
//! a time (`bearer` in its control API), and the token changes in the middle of a bulk import.
//! The engine's side (no loop, no attempt spent, sent once with the new token) is tested in
//! `shared/tests/credentials.rs`.

use std::time::Duration;

use serde_json::Value;
use sluice::api::ConfigPatch;

use crate::e2e;
use crate::support::{report, BrowserHarness, PageScript};

e2e!(
    /// 40 creates with `Authorization: Bearer t1`, 20 a second; after 8 are applied the server
    /// takes only `t2`. The budget stops at the first 401 and every tab's status says it waits
    /// for credentials; no job fails. The page gives `t2` with `setCredentials`, and the rest
    /// go with it: all 40 applied, each once, none failed.
    a_token_that_expires_mid_bulk_waits_for_a_new_one_and_nothing_fails,
    60,
    |h| {
        h.api
            .update_config(&ConfigPatch {
                limit: Some(20),
                latency_ms: Some(20),
                bearer: Some("t1".into()),
                ..Default::default()
            })
            .expect("server config");
        let tab = h.open_e2e().await;
        tab.eval(
            r#"
            await e2e.configure({ budgets: [{
              name: 'api', windows: [{ limit: 20, lengthMs: 1000 }], concurrency: 4,
              matchPrefixes: [location.origin + '/api/'],
            }] });
            const jobs = Array.from({ length: 40 }, (_, i) => ({
              url: '/api/contacts', kind: 'create', body: { name: 'imported ' + i },
              headers: { Authorization: 'Bearer t1' } }));
            await sluice.enqueueMany(jobs, 'import');
            "#,
        )
        .await;
        h.wait_until("8 creates applied", Duration::from_secs(20), || {
            h.api.stats().contacts >= 8
        })
        .await;
        h.api
            .update_config(&ConfigPatch {
                bearer: Some("t2".into()),
                ..Default::default()
            })
            .expect("a new token");
        let waiting: Value = tab
            .eval(
                r#"
                const until = Date.now() + 15000;
                for (;;) {
                  const s = await sluice.snapshot();
                  const b = s.budgets.find((b) => b.name === 'api');
                  if (b.credentialsNeeded || Date.now() > until) {
                    await e2e.sleep(1000);
                    return { needed: b.credentialsNeeded, group: await sluice.group('import') };
                  }
                  await e2e.sleep(100);
                }
                "#,
            )
            .await;
        report(&format!("while the token was refused: {waiting}"));
        let needed = waiting["needed"].as_str().unwrap_or_default();
        assert!(needed.contains("401"), "{waiting}");
        assert!(needed.contains("setCredentials"), "{waiting}");
        assert_eq!(waiting["group"]["failed"], 0, "{waiting}");
        assert_eq!(waiting["group"]["etaMs"], Value::Null, "no ETA while held: {waiting}");
        let applied_while_waiting = h.api.stats().contacts;
        assert!(applied_while_waiting < 40, "{applied_while_waiting}");
        let done: Value = tab
            .eval(
                r#"
                await sluice.setCredentials('api', { Authorization: 'Bearer t2' });
                const until = Date.now() + 20000;
                for (;;) {
                  const g = await sluice.group('import');
                  if (g.done + g.failed === 40 || Date.now() > until) {
                    const s = await sluice.snapshot();
                    return { group: g, needed: s.budgets[0].credentialsNeeded };
                  }
                  await e2e.sleep(100);
                }
                "#,
            )
            .await;
        let stats = h.api.stats();
        report(&format!(
            "after setCredentials: {done}; contacts {}, duplicate creates {}",
            stats.contacts, stats.duplicate_creates
        ));
        assert_eq!(done["group"]["done"], 40, "{done}");
        assert_eq!(done["group"]["failed"], 0, "{done}");
        assert_eq!(done["needed"], Value::Null, "{done}");
        assert_eq!(stats.contacts, 40);
        assert_eq!(stats.duplicate_creates, 0);
    }
);

e2e!(
    /// `setCredentials` for a budget the worker does not have, or with a value `fetch` would
    /// refuse, rejects with the reason on the page.
    bad_credentials_are_refused_on_the_page_with_the_reason,
    30,
    |h| {
        let tab = h.open_e2e().await;
        let r: Value = tab
            .eval(
                r#"
                await e2e.configure({ budgets: [{
                  name: 'api', windows: [{ limit: 20, lengthMs: 1000 }],
                  matchPrefixes: [location.origin + '/api/'],
                }] });
                const tryIt = async (budget, headers) => {
                  try { await sluice.setCredentials(budget, headers); return 'accepted'; }
                  catch (e) { return e.code + ': ' + e.message; }
                };
                return {
                  unknown: await tryIt('nope', { Authorization: 'Bearer x' }),
                  broken: await tryIt('api', { Authorization: 'Bearer x\ny' }),
                  notAnObject: await tryIt('api', 'Bearer x'),
                  fine: await tryIt('api', { Authorization: 'Bearer x' }),
                };
                "#,
            )
            .await;
        report(&format!("setCredentials refusals: {r}"));
        assert!(
            r["unknown"].as_str().is_some_and(|s| s.contains("unknown budget 'nope'")),
            "{r}"
        );
        assert!(
            r["broken"].as_str().is_some_and(|s| s.contains("line break")),
            "{r}"
        );
        assert!(
            r["notAnObject"].as_str().is_some_and(|s| s.contains("credentials")),
            "{r}"
        );
        assert_eq!(r["fine"], "accepted", "{r}");
    }
);
