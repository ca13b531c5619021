//! The bulk measurements: many creates at once against the strict API ([`run_bulk`]), and a
//! plain `fetch` loop on the same path for comparison ([`plain_rate`]).

use super::*;

pub(super) async fn run_bulk(
    options: &BenchOptions,
    jobs: usize,
    latency_ms: u64,
    cross_origin: bool,
) -> Result<BulkResult, Error> {
    let config = if cross_origin {
        cross_origin_api(latency_ms)
    } else {
        api(latency_ms)
    };
    let rig = rig_at(options, config, cross_origin).await?;
    let tab = rig.open_driver("").await?;
    configure_for(&tab, &format!("'{}'", rig.api_origin)).await?;
    tab.eval(&bulk_jobs_js(jobs, "bulk", &rig.api_origin))
        .await?;
    let cpu = rig.browser.cpu_sample();
    let page_ms: f64 = tab
        .eval_as(
            "const t0 = performance.now();\
             const r = await sluice.enqueueMany(window.bulkJobs, 'bulk');\
             const ends = await Promise.all(r.ids.map((id) => sluice.done(id).then(\
               (o) => o.status, (e) => e.code)));\
             const bad = ends.filter((s) => s !== 201 && s !== 200);\
             if (bad.length) throw new Error(bad.length + ' jobs did not end done: ' + bad[0]);\
             return performance.now() - t0;",
        )
        .await?;
    let cpu = cpu_use(cpu, &rig);
    let stats = rig.api.stats();
    let finish_s = finish_time_s(&rig.api.arrivals(), latency_ms)?;
    let latency_s = latency_ms as f64 / 1000.0;
    let ideal_s = (jobs as f64 - 1.0) / f64::from(LIMIT) + latency_s;
    let preflights = rig.api.preflights();
    let plain_rate_per_s = if cross_origin {
        Some(plain_rate(&rig, jobs, latency_ms).await?)
    } else {
        None
    };
    let concurrency_s = match plain_rate_per_s {
        Some(rate) => jobs as f64 / rate,
        None => jobs as f64 * latency_s / f64::from(CONCURRENCY),
    };
    let bound_s = ideal_s.max(concurrency_s);
    Ok(BulkResult {
        jobs,
        latency_ms,
        cross_origin,
        preflights,
        requests: stats.total,
        finish_s,
        ideal_s,
        bound_s,
        share_of_limit: jobs as f64 / finish_s / f64::from(LIMIT),
        share_of_bound: bound_s / finish_s,
        rate_limited: stats.rate_limited,
        max_in_window: stats.max_in_window,
        duplicate_creates: stats.duplicate_creates,
        page_s: page_ms / 1000.0,
        cpu,
        plain_rate_per_s,
    })
}

/// Requests a plain loop measures for the concurrency bound: enough for a steady rate (at about
/// 100 per second, 10 s), fewer than a full bulk run to keep the bench short.
pub(super) const PLAIN_LOOP_REQUESTS: usize = 1_000;

/// What [`CONCURRENCY`] requests in flight reach here with no limiter (see
/// [`BulkResult::plain_rate_per_s`]): the rig's API with its limit lifted, the same jitter,
/// creates sent from the worker's own global scope by `CONCURRENCY` loops of `fetch` then
/// `text()`, timed like a bulk run (first arrival to the last one's response).
pub(super) async fn plain_rate(rig: &Rig, jobs: usize, latency_ms: u64) -> Result<f64, Error> {
    let measured = rig.api.config();
    let unlimited = ApiConfig {
        limit: u32::MAX,
        ..measured.clone()
    };
    rig.api
        .set_config(unlimited)
        .map_err(|e| Error::Server(e.to_string()))?;
    rig.api.reset();
    let loop_js = plain_loop_js(&rig.api_origin, jobs.min(PLAIN_LOOP_REQUESTS), CONCURRENCY);
    let ran = rig
        .browser
        .eval_in_worker(&loop_js, Duration::from_secs(120))
        .await;
    // The rig's API goes back to what was measured whatever the loop did.
    rig.api
        .set_config(measured)
        .map_err(|e| Error::Server(e.to_string()))?;
    ran?;
    let arrivals = rig.api.arrivals();
    let finish_s = finish_time_s(&arrivals, latency_ms)?;
    Ok(arrivals.len() as f64 / finish_s)
}

/// `in_flight` loops that together POST `n` creates to `origin`, each reading its answer
/// before the next: an async expression that resolves to `n`. Run in the worker (its own path
/// to the network) or in the page.
pub(super) fn plain_loop_js(origin: &str, n: usize, in_flight: u32) -> String {
    format!(
        "(async () => {{ let i = 0; const one = async () => {{ while (i < {n}) {{ i += 1; \
         const r = await fetch('{origin}/api/contacts', {{ method: 'POST', headers: \
         {{ 'content-type': 'application/json', 'idempotency-key': 'plain-' + i }}, \
         body: JSON.stringify({{ name: 'plain ' + i }}) }}); await r.text(); }} }}; \
         await Promise.all(Array.from({{ length: {in_flight} }}, one)); return i; }})()"
    )
}

/// From the first arrival to the last one's response (its latency after it), in seconds.
pub(super) fn finish_time_s(arrivals: &[Arrival], latency_ms: u64) -> Result<f64, Error> {
    let (Some(first), Some(last)) = (arrivals.first(), arrivals.last()) else {
        return Err(Error::Server("no request arrived".into()));
    };
    Ok((last.at_ms + latency_ms as f64 - first.at_ms) / 1000.0)
}
