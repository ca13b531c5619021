//! The security review's findings, each in the browser: what a page hands the worker is
//! replayed as the page made it, nothing it sends or receives can grow the worker's memory
//! past a bound, and (in `input`) nothing goes where the worker script does not allow.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::e2e;
use crate::support::{js, report, BrowserHarness, Options, PageScript};

e2e!(
    /// Finding 4: a page's `fetch(url, {credentials: 'omit'})` that the worker queues is sent
    /// without the site's cookies, as the page asked; the same request with the default
    /// credentials carries them. Before, every replay went with the browser's defaults.
    an_intercepted_fetch_is_replayed_with_the_credentials_the_page_chose,
    60,
    Options::default(),
    |h| {
        let tab = h.open_e2e().await;
        tab.eval(&js::configure(20, 2, "")).await;
        let r = tab
            .eval(
                r#"
                document.cookie = 'sluice_probe=1; path=/';
                const queue = async (credentials) => {
                  const init = { method: 'POST', body: '{}', headers: {
                    'Content-Type': 'application/json', 'X-Sluice-Lane': 'interactive' } };
                  if (credentials) init.credentials = credentials;
                  const res = await fetch('/api/echo', init);
                  const accepted = await res.json();
                  const outcome = await sluice.done(accepted.jobId);
                  return { status: res.status, echo: JSON.parse(outcome.body) };
                };
                return { omit: await queue('omit'), plain: await queue(null) };
                "#,
            )
            .await;
        report(&format!("intercepted with and without credentials: {r}"));
        for case in ["omit", "plain"] {
            assert_eq!(r[case]["status"], 202, "queued, not sent by the page: {r}");
        }
        assert_eq!(
            r["omit"]["echo"]["cookie"],
            Value::Bool(false),
            "credentials 'omit' sent no cookie: {r}"
        );
        assert_eq!(
            r["plain"]["echo"]["cookie"],
            Value::Bool(true),
            "the default credentials send the site's cookie: {r}"
        );
    }
);

e2e!(
    /// Finding 6: a response body of 64 MiB is read only up to the 64 KiB the job keeps; the
    /// rest is never pulled from the connection (the server hands over a small part of it,
    /// what the connection's buffers take before the worker cancels). Before, the whole body
    /// was read into the worker and then cut.
    a_huge_response_body_is_read_only_up_to_what_the_job_keeps,
    60,
    Options::default(),
    |h| {
        const HUGE: u64 = 64 << 20;
        let tab = h.open_e2e().await;
        tab.eval(&js::configure(20, 2, "")).await;
        let r = tab
            .eval(&format!(
                r#"
                const e = await sluice.enqueue({{ url: '/api/large?bytes={HUGE}',
                  method: 'GET', lane: 'interactive' }});
                const outcome = await e.done;
                return {{ status: outcome.status, length: outcome.body.length,
                          allX: /^x*$/.test(outcome.body) }};
                "#
            ))
            .await;
        let sent = h.api.stats().large_bytes_sent;
        report(&format!(
            "64 MiB body: kept {} bytes, the server handed over {:.1} MiB",
            r["length"],
            sent as f64 / f64::from(1 << 20)
        ));
        assert_eq!(r["status"], 200, "{r}");
        assert_eq!(r["length"], 64 * 1024, "the body is kept up to its cap: {r}");
        assert_eq!(r["allX"], true, "{r}");
        assert!(
            sent < HUGE / 4,
            "the worker stopped reading at the cap, yet the server sent {sent} of {HUGE} bytes"
        );
    }
);

e2e!(
    /// Finding 5: a message under the size limit that would parse into tens of millions of
    /// values (hundreds of MiB of parse tree in the worker) is refused with a clear error
    /// before the tree grows, and the worker goes on serving the same tab. A string longer
    /// than the limit is refused before it is copied into the worker at all.
    a_message_that_would_parse_into_too_many_values_is_refused_and_the_worker_goes_on,
    60,
    Options::default(),
    |h| {
        let tab = h.open_e2e().await;
        tab.eval(&js::configure(20, 2, "")).await;
        let r = tab
            .eval(
                r#"
                const worker = navigator.serviceWorker.controller;
                const raw = async (message, pred) => {
                  const from = e2e.raw.length;
                  worker.postMessage(message);
                  return await e2e.waitFor((m) => m && m.type === 'error' && pred(m), 20000, from);
                };
                // 24 MiB of `0,`: 12.5 million values, under the 32 MiB message limit.
                const values = '[' + '0,'.repeat(12_500_000) + '0]';
                const many = await raw(JSON.stringify({ requestId: 'many', type: 'jobs',
                  groupId: null, pad: JSON.parse('[]') }).replace('[]', values),
                  (m) => m.requestId === undefined || m.requestId === null || m.requestId === 'many');
                const long = await raw('x'.repeat((32 << 20) + 1), () => true);
                const after = await sluice.enqueue({ url: '/api/echo', method: 'POST',
                  body: {}, lane: 'interactive' });
                const outcome = await after.done;
                return { many, long, after: outcome.status };
                "#,
            )
            .await;
        report(&format!("too many values: {}", r["many"]));
        assert_eq!(r["many"]["error"]["code"], "malformed", "{r}");
        assert!(
            r["many"]["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("too many values")),
            "{r}"
        );
        assert_eq!(r["long"]["error"]["code"], "too-large", "{r}");
        assert_eq!(r["after"], 200, "the worker still serves the tab: {r}");
    }
);

e2e!(
    /// Finding 7: a job's outcome (the server's status, headers and body) reaches the tab that
    /// enqueued it; every other open tab hears only the job's state. Another tab that asks
    /// (`done(id)`) still gets the outcome. Before, every tab received every job's outcome.
    a_jobs_outcome_goes_to_the_tab_that_enqueued_it_and_to_tabs_that_ask,
    60,
    Options::default(),
    |h| {
        let mine = h.open_e2e().await;
        mine.eval(&js::configure(20, 2, "")).await;
        let other = h.open_e2e().await;
        // It speaks once (as a tab showing the queue does), so the worker knows it is there.
        other
            .eval("await window.sluiceReady; await sluice.snapshot(); return null;")
            .await;
        let r = mine
            .eval(
                r#"
                const e = await sluice.enqueue({ url: '/api/contacts', kind: 'create',
                  lane: 'interactive', body: { name: 'secret-marker-7' } });
                const outcome = await e.done;
                return { id: e.id, status: outcome.status, body: outcome.body };
                "#,
            )
            .await;
        assert_eq!(r["status"], 201, "{r}");
        assert!(r["body"].as_str().is_some_and(|b| b.contains("secret-marker-7")), "{r}");
        let id = r["id"].as_str().expect("id").to_owned();
        // Give the other tab time to hear every broadcast about the job.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let heard = other
            .eval(&format!(
                r#"
                const text = JSON.stringify(e2e.raw);
                const about = e2e.raw.filter((m) => typeof m === 'string' && m.includes('{id}'));
                return {{ leaked: text.includes('secret-marker-7'), about: about.length,
                          withheld: about.some((m) => m.includes('"withheld":true')) }};
                "#
            ))
            .await;
        report(&format!("the other tab heard: {heard}"));
        assert_eq!(heard["leaked"], false, "another tab saw the outcome: {heard}");
        assert!(heard["about"].as_u64().is_some_and(|n| n > 0), "it heard the state: {heard}");
        assert_eq!(heard["withheld"], true, "{heard}");
        let asked = other
            .eval(&format!(
                "const o = await sluice.done('{id}'); return {{ status: o.status, body: o.body }};"
            ))
            .await;
        assert_eq!(asked["status"], 201, "{asked}");
        assert!(
            asked["body"].as_str().is_some_and(|b| b.contains("secret-marker-7")),
            "a tab that asks gets the outcome: {asked}"
        );
    }
);

e2e!(
    /// Finding 5: the worker's wasm stops half-way through its work (here the browser's clock
    /// throws through the Rust code for 300 ms while 40 creates are being sent, which leaves the
    /// instance as a trap does: a borrow left taken, an async task stuck mid-poll). That
    /// instance is fenced and the next event (the page's keep-alive) starts a fresh one that
    /// rebuilds the queue from storage, with the browser never stopping the worker: every job
    /// ends done, each create applied once, the limit kept. Before, the worker kept the broken
    /// instance and sent nothing more until the browser stopped it.
    a_wasm_instance_that_broke_is_replaced_from_storage_with_nothing_lost,
    90,
    // Alone: it checks the told limit on the server's arrivals.
    Options::default().exclusive(),
    |h| {
        const JOBS: usize = 40;
        const LIMIT: u32 = 20;
        let tab = h.open_e2e_with("keepAliveMs=300").await;
        tab.eval(&js::configure(
            LIMIT,
            2,
            "retry: { baseDelayMs: 50, maxDelayMs: 1000, timeoutMs: 2000 }",
        ))
        .await;
        let ids: Vec<String> = tab.eval_as(&js::enqueue_group(JOBS, "broken")).await;
        assert_eq!(ids.len(), JOBS);
        h.wait_until("5 contacts", Duration::from_secs(10), || {
            h.api.contacts().len() >= 5
        })
        .await;
        let stops = h.worker_stops();
        let thrown = h
            .browser
            .eval_in_worker(
                r#"(async () => {
                  const real = Date.now;
                  let thrown = 0;
                  Date.now = () => { thrown += 1; throw new Error('test: the clock fails'); };
                  await new Promise((resolve) => setTimeout(resolve, 300));
                  Date.now = real;
                  return thrown;
                })()"#,
                Duration::from_secs(10),
            )
            .await
            .unwrap_or_else(|e| panic!("breaking the worker's clock: {e}"));
        let contacts_then = h.api.contacts().len();
        report(&format!(
            "the clock threw {thrown} times inside the wasm, {contacts_then} of {JOBS} applied by then"
        ));
        assert!(
            thrown.as_u64().is_some_and(|n| n > 0),
            "the wasm never read the clock in 300 ms of sending: nothing was broken ({thrown})"
        );
        let settling = Instant::now();
        let results: Vec<String> = tab.eval_as(&js::settle_group("broken")).await;
        report(&format!(
            "every job settled {:?} after the clock came back: {}",
            settling.elapsed(),
            if js::all_done(&results) { "all done" } else { "not all done" }
        ));
        assert!(js::all_done(&results), "{results:?}");
        assert_eq!(
            h.worker_stops(),
            stops,
            "the browser stopped the worker: the fresh instance was not the one that recovered"
        );
        let log = h.log().join("\n");
        assert!(
            log.contains("stopped in the middle of its work"),
            "the broken instance was not noticed; worker log:\n{log}"
        );
        // The page heard it too: its subscribers get the worker's error, not only the
        // worker's console.
        let told: Value = tab
            .eval(
                "const e = e2e.broadcasts.find((m) => m.type === 'error');\
                 return e ? e.error : null;",
            )
            .await;
        assert_eq!(told["code"], "crashed", "subscribers were not told: {told}");
        assert!(
            told["message"].as_str().is_some_and(|m| m.contains("the clock fails")),
            "{told}"
        );
        h.assert_each_applied_once(JOBS, LIMIT as usize);
    }
);

e2e!(
    /// Storage fills while a large batch is being saved: an `enqueueMany` of 250 jobs is
    /// saved as one journal record and then written one job per record, and storage runs out
    /// part way. A restart fills in from the journal every job whose own record is missing,
    /// and while storage is full the record of a job that ends is deleted; so the queue waits
    /// while full rather than send jobs that a restart would bring back and send again (before,
    /// 45 jobs were sent a second time here). The worker is stopped while still full; once
    /// there is room the queue goes on, and no job that ended is sent again.
    a_batch_that_fills_storage_while_it_is_saved_waits_and_is_never_sent_twice,
    150,
    Options::default(),
    |h| {
        const LIMIT: u32 = 20;
        h.override_quota(Some(8 << 20)).await;
        let tab = h.open_e2e_with("keepAliveMs=300").await;
        tab.eval(&js::configure(LIMIT, 2, "")).await;
        // Nearly full first: 1 MB batches of random text (the browser compresses what it
        // stores) until one does not fit, which leaves less than 1 MB. The quota is then raised
        // by 1 MiB, so between 1 and 2 MB are free, and the largest batch of 250 that fits is
        // enqueued: it takes more than half of what is free (the one twice its size did not
        // fit), so writing its jobs out one per record (as many bytes again) cannot.
        tab.eval(js::DEFINE_NOISE).await;
        let filled: u64 = tab
            .eval_as(
                r#"
                let filled = 0;
                for (let batch = 0; batch < 40; batch++) {
                  const jobs = Array.from({ length: 10 }, (_, i) => ({
                    url: '/api/contacts', kind: 'create', lane: 'background',
                    body: { name: 'fill ' + batch + '-' + i, pad: noise(50000) },
                  }));
                  try { await sluice.enqueueMany(jobs, 'fill-' + batch); filled += 10; }
                  catch (e) { if (e.code !== 'storage-full') throw e; return filled; }
                }
                throw new Error('40 MB fitted in a quota of 8 MiB');
                "#,
            )
            .await;
        h.override_quota(Some(9 << 20)).await;
        // If the queue's own save was refused while filling, new jobs are refused without a
        // try for a second after it (`refuse_while_full`); its next save finds the room.
        tab.eval(
            "for (let i = 0; ; i++) { \
               const s = await sluice.snapshot(); \
               if (!s.warnings.some((w) => w.includes('storage is full'))) return i; \
               if (i > 250) throw new Error('storage still full after the quota was raised: ' \
                 + JSON.stringify(s.warnings)); \
               await e2e.sleep(20); \
             }",
        )
        .await;
        let r = tab
            .eval(
                r#"
                for (let pad = 4096; pad >= 64; pad /= 2) {
                  const jobs = Array.from({ length: 250 }, (_, i) => ({
                    url: '/api/contacts', kind: 'create', lane: 'interactive',
                    body: { name: 'big ' + pad + '-' + i, pad: noise(pad) },
                  }));
                  try {
                    const r = await sluice.enqueueMany(jobs, 'big');
                    window.bigIds = r.ids;
                    return { pad, jobs: r.ids.length };
                  } catch (e) { if (e.code !== 'storage-full') throw e; }
                }
                return { pad: null };
                "#,
            )
            .await;
        // Requests made before the batch was taken are left out below: each refused batch
        // stopped an instance, and the requests it had out go again with their keys.
        let accepted_at = h.api.arrivals().len();
        report(&format!("{filled} fill jobs, then a journaled batch: {r}"));
        assert!(r["pad"].is_u64(), "no batch of 250 fitted: {r}");
        assert!(r["pad"] != 4096, "the largest batch fitted: too much room to fill: {r}");
        let fill = filled as usize;
        let big = r["jobs"].as_u64().unwrap_or(0) as usize;
        // Writing the batch out one per record fills storage within a second or two.
        let status: Value = tab
            .eval(
                "for (let i = 0; ; i++) { \
                   const s = await sluice.snapshot(); \
                   if (s.warnings.some((w) => w.includes('storage is full'))) return s; \
                   if (i > 400) throw new Error('storage never filled: ' + JSON.stringify(s)); \
                   await e2e.sleep(20); \
                 }",
            )
            .await;
        report(&format!("full while saving the batch: {}", status["counts"]));
        // Full for a while (the queue is held while the batch is not saved yet; a refused
        // write of the batch may also have restarted the worker, which then finds every job
        // of it in records of their own and goes on sending), then stopped while full.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let at_full = h.api.arrivals().len();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let held = h.api.arrivals().len();
        let starts = h.worker_starts();
        h.stop_worker().await;
        h.wait_until("the successor starts", Duration::from_secs(20), || {
            h.worker_starts() > starts
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        report(&format!(
            "requests while full: {} in 2 s, {} more across the stop",
            held - at_full,
            h.api.arrivals().len() - held
        ));
        // Room again: the pages' keep-alives find it, and everything goes once.
        h.override_quota(None).await;
        let results: Vec<String> = tab
            .eval_as(&js::settle_ids("window.bigIds"))
            .await;
        assert!(js::all_done(&results), "{results:?}");
        let all = fill + big;
        h.wait_until("every job applied", Duration::from_secs(60), || {
            h.api.contacts().len() >= all
        })
        .await;
        // Sent twice after the batch was taken: only a request out when storage filled, or
        // one whose end was in the save that storage refused, may be (the restart sends it
        // again with its key, as after a crash): at most twice the 2 in flight.
        let arrivals = h.api.arrivals();
        let mut sent: std::collections::HashMap<String, (usize, usize)> = Default::default();
        for (i, a) in arrivals.iter().enumerate() {
            if let (Some(key), true) = (&a.idempotency_key, a.status != 429) {
                sent.entry(key.clone()).or_insert((i, 0)).1 += 1;
            }
        }
        let again = sent
            .values()
            .filter(|&&(first, n)| first >= accepted_at && n > 1)
            .count();
        report(&format!(
            "{held} requests before the stop, {} in all, {again} keys sent twice",
            arrivals.len()
        ));
        assert!(again <= 4, "{again} jobs were sent again after they ended");
        h.assert_each_applied_once(all, LIMIT as usize);
        assert_eq!(h.api.stats().rate_limited, 0);
    }
);

e2e!(
    /// Storage full: the site may store 8 MiB in all (Chromium's per-origin quota, set over
    /// CDP before the site stores anything), and the page enqueues batches of incompressible
    /// bodies until one does not fit. That `enqueueMany` is refused with `storage-full`,
    /// saying what to do, and none of it is saved. With storage still full, the queue goes on
    /// sending what it holds, new jobs are refused and the status says why; the worker is
    /// stopped then, and its successor, which finds storage missing the record of those
    /// starts, goes on within the limit without sending a finished job again. The rest is
    /// cancelled while full, and once there is room the idle queue takes the first new job;
    /// every job sent is applied once, within the limit.
    a_full_quota_refuses_new_jobs_clearly_and_the_queue_goes_on_sending,
    150,
    Options::default(),
    |h| {
        const LIMIT: u32 = 20;
        // Before the site stores anything: Chromium reads an origin's quota when its storage
        // is first opened.
        h.override_quota(Some(8 << 20)).await;
        let tab = h.open_e2e_with("keepAliveMs=300").await;
        tab.eval(&js::configure(LIMIT, 2, "")).await;
        // How often each job's end is broadcast: once, however storage came and went.
        tab.eval(
            "window.ends = {}; \
             sluice.subscribe((m) => { if (m.type !== 'jobs') return; \
               for (const u of m.updates) \
                 if (['done', 'failed', 'cancelled'].includes(u.state)) \
                   window.ends[u.id] = (window.ends[u.id] || 0) + 1; }); \
             return null;",
        )
        .await;
        let before: Vec<String> = tab.eval_as(&js::enqueue_group(20, "before")).await;
        assert_eq!(before.len(), 20);
        tab.eval(js::DEFINE_NOISE).await;
        let r = tab
            .eval(
                r#"
                let accepted = 0;
                for (let batch = 0; batch < 40; batch++) {
                  // 50 jobs of 20 KB each: 1 MB a batch.
                  const jobs = Array.from({ length: 50 }, (_, i) => ({
                    url: '/api/contacts', kind: 'create', lane: 'background',
                    body: { name: 'big ' + batch + '-' + i, pad: noise(10000) },
                  }));
                  try {
                    await sluice.enqueueMany(jobs, 'big-' + batch);
                    accepted += jobs.length;
                  } catch (e) {
                    return { accepted, batch, code: e.code, message: e.message };
                  }
                }
                return { accepted, code: null };
                "#,
            )
            .await;
        report(&format!("enqueue into a full quota: {r}"));
        assert_eq!(r["code"], "storage-full", "{r}");
        assert!(
            r["message"]
                .as_str()
                .is_some_and(|m| m.contains("is kept") && m.contains("Enqueue again")),
            "the error says what was kept and what to do: {r}"
        );
        let accepted = r["accepted"].as_u64().unwrap_or(0) as usize;
        assert!(accepted > 0, "some batches fitted before the quota was reached: {r}");
        let refused_batch = r["batch"].as_u64().unwrap_or(0);
        let refused_saved: u64 = tab
            .eval_as(&format!(
                "return (await sluice.jobs('big-{refused_batch}')).length;"
            ))
            .await;
        assert_eq!(refused_saved, 0, "nothing of the refused batch was saved");

        // Storage stays full: the queue goes on sending.
        let results: Vec<String> = tab.eval_as(&js::settle_group("before")).await;
        assert!(js::all_done(&results), "{results:?}");
        let sent_while_full = 20 + accepted / 4;
        h.wait_until(
            "the queue sends while storage is full",
            Duration::from_secs(40),
            || h.api.contacts().len() >= sent_while_full,
        )
        .await;
        let status: serde_json::Value = tab.eval("return await sluice.snapshot();").await;
        assert!(
            status["warnings"]
                .as_array()
                .is_some_and(|w| w.iter().any(|w| w
                    .as_str()
                    .is_some_and(|w| w.contains("storage is full")))),
            "the status says why new jobs are refused: {status}"
        );
        let refused: serde_json::Value = tab
            .eval(
                "try { await sluice.enqueue({ url: '/api/contacts', kind: 'create', \
                   body: { name: 'while full' } }); return null; } \
                 catch (e) { return e.code; }",
            )
            .await;
        assert_eq!(refused, "storage-full", "a new job is refused while storage is full");

        // Stopped while full: the successor counts the starts it cannot see.
        let starts = h.worker_starts();
        let at_stop = h.api.contacts().len();
        // The page heard the ends of the jobs it waited on as they were saved, not from its
        // own fallback long after: the refused batch stopped an instance a moment after it
        // saved some of those ends, and the next instance tells no one of them again.
        assert!(
            at_stop + 20 <= 20 + accepted,
            "the queue was sent to its end ({at_stop} of {}) before the page heard its first \
             20 jobs end",
            20 + accepted
        );
        h.stop_worker().await;
        h.wait_until(
            "the successor sends while storage is still full",
            Duration::from_secs(20),
            || h.worker_starts() > starts && h.api.contacts().len() >= at_stop + 20,
        )
        .await;
        report(&format!(
            "applied: {at_stop} at the stop, {} once the successor sent 20",
            h.api.contacts().len()
        ));

        // Still full, the rest of the big jobs is cancelled (a cancel is the queue's own
        // change, taken while full) and the queue goes idle: no save of its own learns that
        // there is room again, so the first new job after room is back must find out.
        let cancelled: u64 = tab
            .eval_as(&format!(
                "let n = 0; \
                 for (let b = 0; b < {refused_batch}; b++) {{ \
                   try {{ n += (await sluice.cancel('big-' + b)).length; }} \
                   catch (e) {{ if (e.code !== 'not-found') throw e; }} \
                 }} \
                 for (let i = 0; ; i++) {{ \
                   const s = await sluice.snapshot(); \
                   if (s.counts.queued + s.counts.retryWait + s.counts.sending === 0) return n; \
                   if (i > 500) throw new Error('not idle: ' + JSON.stringify(s.counts)); \
                   await e2e.sleep(20); \
                 }}"
            ))
            .await;
        assert!(cancelled > 0, "jobs were still queued to cancel");
        let applied = h.api.contacts().len();

        // Room again: the first new job is taken (its request tries storage again).
        h.override_quota(None).await;
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        let after: Vec<String> = tab.eval_as(&js::enqueue_group(3, "after")).await;
        assert_eq!(after.len(), 3);
        let results: Vec<String> = tab.eval_as(&js::settle_group("after")).await;
        assert!(js::all_done(&results), "{results:?}");
        let all = applied + 3;
        h.wait_until("every job applied", Duration::from_secs(60), || {
            h.api.contacts().len() >= all
        })
        .await;
        h.assert_each_applied_once(all, LIMIT as usize);
        let stats = h.api.stats();
        assert_eq!(stats.rate_limited, 0, "{stats:?}");
        let told_twice: Vec<String> = tab
            .eval_as(
                "return Object.entries(window.ends).filter(([, n]) => n > 1).map(([id]) => id);",
            )
            .await;
        assert!(
            told_twice.is_empty(),
            "ends broadcast again once there was room: {told_twice:?}"
        );
    }
);
