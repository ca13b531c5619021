//! Page-side snippets the tests share: configuring the budget, enqueueing groups of creates
//! and waiting for them, all through the page client's public API as an app would.

/// `await e2e.configure(...)` with one budget `api` over this origin's `/api/` at `limit` per
/// second and `concurrency` in flight; `extra` adds engine settings (`retry: {...}`, `aging:
/// {...}`), or is empty.
pub fn configure(limit: u32, concurrency: u32, extra: &str) -> String {
    let extra = if extra.trim().is_empty() {
        String::new()
    } else {
        format!(", {extra}")
    };
    format!(
        "await e2e.configure({{ budgets: [{{ name: 'api', windows: [{{ limit: {limit}, \
         lengthMs: 1000 }}], concurrency: {concurrency}, matchPrefixes: [(window.API || sessionStorage.API || location.origin) + \
         '/api/'] }}]{extra} }});"
    )
}

/// Enqueues `n` creates as group `group` and keeps a `done` promise per job in
/// `window.dones[group]` (resolving to 'done <status>' or the rejection's code). Returns the
/// ids.
pub fn enqueue_group(n: usize, group: &str) -> String {
    format!(
        r#"
        const jobs = Array.from({{ length: {n} }}, (_, i) => ({{
          url: (window.API || sessionStorage.API || '') + '/api/contacts', kind: 'create', body: {{ name: '{group} ' + i }},
        }}));
        const r = await sluice.enqueueMany(jobs, '{group}');
        window.dones = window.dones || {{}};
        window.dones['{group}'] = r.ids.map((id) => sluice.done(id).then(
          (o) => 'done ' + o.status, (e) => e.code));
        return r.ids;
        "#
    )
}

/// The results of [`enqueue_group`]'s promises, once all settled.
/// Page script: defines `noise(n)`, `2n` characters of random text. Storage tests fill a
/// quota with it: the browser compresses what it stores, and a repeated letter would take next
/// to no room. At most 65,536 bytes a call (`getRandomValues`).
pub const DEFINE_NOISE: &str = "window.noise = (n) => {\
       const bytes = crypto.getRandomValues(new Uint8Array(n));\
       return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');\
     }; return null;";

pub fn settle_group(group: &str) -> String {
    format!("return await Promise.all(window.dones['{group}']);")
}

/// Waits for every job in `ids` (a JSON array) and returns their final statuses, or the error
/// code for a job that did not end done.
pub fn settle_ids(ids_json: &str) -> String {
    format!(
        "return await Promise.all({ids_json}.map((id) => sluice.done(id).then(\
         (o) => 'done ' + o.status, (e) => e.code)));"
    )
}

/// Whether every result of [`settle_group`] or [`settle_ids`] is a success.
pub fn all_done(results: &[String]) -> bool {
    results
        .iter()
        .all(|r| r == "done 201" || r == "done 200" || r == "done 204")
}

/// Polls the page until the budget reports a pause and returns its end (ms since the epoch);
/// throws after about 5 s without one.
pub const WAIT_FOR_PAUSE: &str = "for (let i = 0; ; i++) {\
       const s = await sluice.snapshot();\
       if (s.budgets[0].pausedUntil) return s.budgets[0].pausedUntil;\
       if (i > 500) throw new Error('no pause: ' + JSON.stringify(s.budgets[0]));\
       await e2e.sleep(10);\
     }";
