//! How fast a person's action is answered: `enqueue` acknowledgements ([`run_acks`]) and an
//! interactive job's start during a bulk run ([`run_interactive`]).

use super::*;

pub(super) async fn run_acks(options: &BenchOptions, n: usize) -> Result<AckResult, Error> {
    let (ack, cpu) = measure_acks(options, n, false).await?;
    let (ack_held_back, held_back_cpu) = measure_acks(options, n, true).await?;
    Ok(AckResult {
        ack,
        cpu,
        ack_held_back,
        held_back_cpu,
    })
}

/// `n` single enqueues, each awaited; `held_back`: under a budget of one request a minute, so
/// that nothing is sent meanwhile.
pub(super) async fn measure_acks(
    options: &BenchOptions,
    n: usize,
    held_back: bool,
) -> Result<(Percentiles, Option<CpuUse>), Error> {
    let rig = rig(options, 30).await?;
    let tab = rig.open_driver("").await?;
    if held_back {
        tab.eval(
            "await e2e.configure({ budgets: [{ name: 'api', windows: [{ limit: 1, \
             lengthMs: 60000 }], matchPrefixes: [location.origin + '/api/'] }] });",
        )
        .await?;
    } else {
        configure(&tab).await?;
    }
    // Warm: the first call also starts the engine's storage paths.
    tab.eval("await sluice.enqueue({ url: '/api/contacts', kind: 'create', body: { n: -1 } });")
        .await?;
    let cpu = rig.browser.cpu_sample();
    let times: Vec<f64> = tab
        .eval_as(&format!(
            "const out = [];\
             for (let i = 0; i < {n}; i++) {{\
               const t0 = performance.now();\
               await sluice.enqueue({{ url: '/api/contacts', kind: 'create', lane: 'interactive',\
                 body: {{ name: 'single ' + i }} }});\
               out.push(performance.now() - t0);\
             }}\
             return out;"
        ))
        .await?;
    Ok((Percentiles::of(&times), cpu_use(cpu, &rig)))
}

pub(super) async fn run_interactive(
    options: &BenchOptions,
    samples: usize,
) -> Result<InteractiveResult, Error> {
    let rig = rig(options, 30).await?;
    let tab = rig.open_driver("").await?;
    configure(&tab).await?;
    // Enough bulk work to outlast the samples (spaced 150-350 ms apart) with room to spare.
    let bulk_jobs = (samples * 35 + 400).min(5_000);
    tab.eval(&bulk_jobs_js(bulk_jobs, "bulk", &rig.origin))
        .await?;
    let bulk_at: f64 = tab
        .eval_as(
            "await sluice.enqueueMany(window.bulkJobs, 'bulk');\
             return performance.timeOrigin + performance.now();",
        )
        .await?;
    // Measure in the steady state, not in the first second's burst.
    browser::wait_for(
        "the bulk job to be under way",
        Duration::from_secs(20),
        || rig.api.total() >= 150,
    )
    .await?;
    let offset = rig.page_clock_offset_ms(&tab).await?;
    let cpu = rig.browser.cpu_sample();
    let enqueued_at: Vec<f64> = tab
        .eval_as(&format!(
            "const at = [];\
             for (let i = 0; i < {samples}; i++) {{\
               await e2e.sleep(150 + Math.random() * 200);\
               const job = {{ url: '/api/interactive/' + i, method: 'POST', lane: 'interactive',\
                 body: {{ i }} }};\
               at.push(performance.timeOrigin + performance.now());\
               await sluice.enqueue(job);\
             }}\
             return at;"
        ))
        .await?;
    // Every one must have arrived before the bulk job is stopped.
    let paths: Vec<String> = (0..samples)
        .map(|i| format!("/api/interactive/{i}"))
        .collect();
    let mut arrivals = Vec::new();
    let all_in = browser::wait_for(
        "every interactive request to arrive",
        Duration::from_secs(15),
        || {
            arrivals = rig.api.arrivals();
            paths.iter().all(|p| arrivals.iter().any(|a| &a.path == p))
        },
    )
    .await;
    let cpu = cpu_use(cpu, &rig);
    tab.eval("await sluice.cancel('bulk');").await?;
    if let Err(e) = all_in {
        let late: Vec<Value> = tab
            .eval_as(
                "return (await sluice.jobs()).filter((j) => j.lane === 'interactive' \
                 && j.state !== 'done');",
            )
            .await
            .unwrap_or_default();
        return Err(Error::Server(format!("{e}; unfinished: {late:?}")));
    }
    let mut latencies = Vec::with_capacity(samples);
    for (i, page_at) in enqueued_at.iter().enumerate() {
        let path = format!("/api/interactive/{i}");
        let arrival = arrivals
            .iter()
            .find(|a| a.path == path)
            .ok_or_else(|| Error::Server(format!("{path} never arrived")))?;
        latencies.push(rig.arrival_unix_ms(arrival) - (page_at - offset));
    }
    let before_aging: Vec<f64> = latencies
        .iter()
        .zip(&enqueued_at)
        .filter(|(_, at)| *at - bulk_at < DEFAULT_BULK_AGING_MS)
        .map(|(l, _)| *l)
        .collect();
    Ok(InteractiveResult {
        bulk_jobs,
        token_interval_ms: WINDOW_MS as f64 / f64::from(LIMIT),
        start: Percentiles::of(&latencies),
        start_before_aging: Percentiles::of(&before_aging),
        clock_offset_ms: offset,
        cpu,
    })
}
