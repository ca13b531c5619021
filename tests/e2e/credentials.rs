//! Issue 39, credentials that expire while jobs wait: the demo API accepts one bearer token at
//! a time (`bearer` in its control API), and the token changes in the middle of a bulk import.
//! The engine's side (no loop, no attempt spent, sent once with the new token) is tested in
//! `shared/tests/credentials.rs`.

use std::time::Duration;

use serde_json::Value;
use sluice::api::ConfigPatch;
use sluice::package::Package;

use crate::e2e;
use crate::support::{report, BrowserHarness, Harness, Options, PageScript, Tab};

/// Where the app keeps its token, in IndexedDB, for the page to write and the worker script's
/// credentials function to read: the way an app that signs in on the page shares a token
/// with its worker.
const TOKEN_STORE: &str = r#"
function tokenStore(mode, write) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open('app-auth', 1);
    open.onupgradeneeded = () => open.result.createObjectStore('tokens');
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const db = open.result;
      const store = db.transaction('tokens', mode).objectStore('tokens');
      const request = write ? store.put(write, 'api') : store.get('api');
      request.onsuccess = () => { db.close(); resolve(request.result); };
      request.onerror = () => { db.close(); reject(request.error); };
    };
  });
}
"#;

/// Once 8 creates are applied, the API takes only `t2`: the token the jobs went with expired.
async fn expire_the_token_after_eight_creates(h: &Harness) {
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
}

/// Serves the package under `/sluice/` and a worker script declaring budget `api` (20 a
/// second, 4 in flight, the API's `/api/`) and `credentials`, then opens the test page
/// with it as its worker, keep-alives every second.
async fn open_with_credentials_function(h: &Harness, credentials: &str) -> Tab {
    let site = h.www_dir();
    Package::embedded()
        .expect("package")
        .write(&site.join("sluice"))
        .expect("write the package");
    let script = format!(
        "{TOKEN_STORE}\n\
         self.SLUICE_CONFIG = {{\n\
           packageUrl: '/sluice/',\n\
           budgets: [{{ name: 'api', windows: [{{ limit: 20, lengthMs: 1000 }}], concurrency: 4,\n\
             matchPrefixes: ['/api/'] }}],\n\
           credentials: {credentials},\n\
         }};\n\
         importScripts('/sluice/sluice-worker.js');\n"
    );
    std::fs::write(site.join("sw-credentials.js"), script).expect("the worker script");
    let tab = h
        .open_e2e_with("sw=/sw-credentials.js&keepAliveMs=1000")
        .await;
    tab.eval(&format!("{TOKEN_STORE}\nwindow.tokenStore = tokenStore;"))
        .await;
    tab
}

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
        expire_the_token_after_eight_creates(h).await;
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

e2e!(
    /// The worker script's `credentials` function reads the token from IndexedDB, where the
    /// page keeps it; the 40 creates carry no `Authorization` of their own. The server's token
    /// changes after 8 while the store still holds the old one: the budget waits, and though
    /// the function is asked again at every wake-up (the page's keep-alive every second), the
    /// old token is not sent again. The page then writes the new token to the store, and does
    /// nothing else: the worker's next ask finds it and the rest go, each once.
    a_worker_script_function_supplies_the_token_and_waits_for_a_new_one_without_a_loop,
    90,
    Options::default().with_www_copy(),
    |h| {
        h.api
            .update_config(&ConfigPatch {
                limit: Some(20),
                latency_ms: Some(20),
                bearer: Some("t1".into()),
                ..Default::default()
            })
            .expect("server config");
        let tab = open_with_credentials_function(
            h,
            "async (budget) => {
               const token = await tokenStore('readonly');
               return token ? { Authorization: `Bearer ${token}` } : undefined;
             }",
        )
        .await;
        tab.eval(
            r#"
            await tokenStore('readwrite', 't1');
            const jobs = Array.from({ length: 40 }, (_, i) => ({
              url: '/api/contacts', kind: 'create', body: { name: 'imported ' + i } }));
            await sluice.enqueueMany(jobs, 'import');
            "#,
        )
        .await;
        expire_the_token_after_eight_creates(h).await;
        let waiting: Value = tab
            .eval(
                r#"
                const until = Date.now() + 15000;
                for (;;) {
                  const s = await sluice.snapshot();
                  const b = s.budgets.find((b) => b.name === 'api');
                  if (b.credentialsNeeded || Date.now() > until) {
                    return { needed: b.credentialsNeeded };
                  }
                  await e2e.sleep(100);
                }
                "#,
            )
            .await;
        // The requests that were out when the first 401 came are answered by now (20 ms).
        tokio::time::sleep(Duration::from_secs(1)).await;
        let refused_at_first = h.api.stats().refused_tokens;
        // Five seconds of keep-alives, each a wake-up that asks the function again.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let group: Value = tab.eval("return await sluice.group('import');").await;
        let refused_while_waiting = h.api.stats().refused_tokens;
        report(&format!(
            "while the store held the old token: {waiting}, {group}; 401s {refused_at_first}, \
             then {refused_while_waiting} after 5 s"
        ));
        let needed = waiting["needed"].as_str().unwrap_or_default();
        assert!(needed.contains("401"), "{waiting}");
        assert!(needed.contains("worker script's function"), "{waiting}");
        assert!(
            (1..=4).contains(&refused_at_first),
            "{refused_at_first} refusals: at most the requests in flight"
        );
        assert_eq!(
            refused_while_waiting, refused_at_first,
            "the old token was sent again while the budget waited"
        );
        assert_eq!(group["failed"], 0, "{group}");
        let done: Value = tab
            .eval(
                r#"
                await tokenStore('readwrite', 't2');
                const until = Date.now() + 30000;
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
            "after the store got the new token: {done}; contacts {}, duplicate creates {}, \
             401s {}",
            stats.contacts, stats.duplicate_creates, stats.refused_tokens
        ));
        assert_eq!(done["group"]["done"], 40, "{done}");
        assert_eq!(done["group"]["failed"], 0, "{done}");
        assert_eq!(done["needed"], Value::Null, "{done}");
        assert_eq!(stats.contacts, 40);
        assert_eq!(stats.duplicate_creates, 0);
        assert_eq!(stats.refused_tokens, refused_at_first);
    }
);

e2e!(
    /// A credentials function that throws: nothing is sent, and the job's error on the page
    /// names the function and what it threw.
    a_credentials_function_that_throws_is_named_in_the_jobs_error_on_the_page,
    60,
    Options::default().with_www_copy(),
    |h| {
        let tab = open_with_credentials_function(
            h,
            "() => { throw new Error('the token store is not open yet'); }",
        )
        .await;
        let error: Value = tab
            .eval(
                r#"
                const { id } = await sluice.enqueue({ url: '/api/contacts', kind: 'create',
                  body: { name: 'x' } });
                const until = Date.now() + 15000;
                for (;;) {
                  const job = (await sluice.jobs()).find((j) => j.id === id);
                  if (job?.lastError || Date.now() > until) return job?.lastError ?? null;
                  await e2e.sleep(100);
                }
                "#,
            )
            .await;
        report(&format!("the job's error: {error}"));
        let text = error.to_string();
        assert!(text.contains("credentials function"), "{error}");
        assert!(text.contains("the token store is not open yet"), "{error}");
        assert_eq!(h.api.stats().total, 0, "nothing was sent");
    }
);
