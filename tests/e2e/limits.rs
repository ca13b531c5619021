//! What the server sees: the limit is kept and every create is applied once.

use sluice::api::ConfigPatch;

use crate::e2e;

e2e!(a_burst_stays_within_the_servers_limit, 90, |h| {
    h.api
        .update_config(&ConfigPatch {
            limit: Some(60),
            window_ms: Some(1000),
            latency_ms: Some(10),
            ..Default::default()
        })
        .expect("server config");
    let tab = h.open_e2e().await;
    tab.eval(
        "await e2e.configure({ budgets: [{ name: 'api', windows: [{ limit: 60, lengthMs: 1000 }], \
         concurrency: 6, matchPrefixes: [location.origin + '/api/'], targetUtilization: 0.9 }] });",
    )
    .await;
    let started = std::time::Instant::now();
    let statuses: Vec<u16> = tab
        .eval_as(
            r#"
            const jobs = Array.from({ length: 150 }, (_, i) => ({
              url: '/api/contacts', kind: 'create', body: { name: 'c' + i },
            }));
            const r = await sluice.enqueueMany(jobs, 'burst');
            return await Promise.all(r.ids.map(async (id) => (await sluice.done(id)).status));
            "#,
        )
        .await;
    let took = started.elapsed();
    assert_eq!(statuses.len(), 150);
    assert!(statuses.iter().all(|s| *s == 201), "{statuses:?}");
    let stats = h.api.stats();
    assert_eq!(stats.rate_limited, 0, "{stats:?}");
    assert!(stats.max_in_window <= 60, "{stats:?}");
    assert_eq!(stats.contacts, 150, "{stats:?}");
    assert_eq!(stats.duplicate_creates, 0, "{stats:?}");
    // 150 at 54/s (0.9 of 60) is about 2.8 s; anything far slower means the limiter idles.
    assert!(took.as_secs_f64() < 8.0, "150 jobs took {took:?}");
    eprintln!("150 creates in {took:.1?}: {stats:?}");
});
