//! `sluice bench --ceiling`: the worker's own cost where the limit is far away (issue 40).
//!
//! Most APIs allow 1-100 requests a second and Sluice's cost hides behind the limit; internal
//! and search APIs allow thousands, and there the worker itself becomes the limit. This sends
//! the same POSTs to the demo API with its limit lifted (5 ms latency) from four clients, with
//! the same number in flight, in alternating order, a fresh browser and server for each run:
//! - **Sluice**: one `enqueueMany`, its budget far above what the concurrency allows;
//! - **Sluice unpaced**: the same with `pacing: false` (what the pacing itself costs);
//! - **plain loop in the worker**: `in_flight` loops of `fetch` then `text()` run in the
//!   service worker's own scope: the same path to the network, no queue;
//! - **plain loop in the page**: the same loops in the page.
//!
//! Each run gives requests per second (first arrival to the last one's response) and the
//! browser's CPU per request (all its processes). The targets compare Sluice with the plain
//! loop in the worker measured in the same sitting.

use super::bulk::plain_loop_js;
use super::peers::Spread;
use super::*;

/// The API's latency in every run.
const LATENCY_MS: u64 = 5;
/// The budget Sluice is told: far above what 16 or 32 in flight reach at 5 ms.
const FAR_LIMIT: u32 = 2_000;

/// What `--ceiling` runs.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CeilingSizes {
    pub requests: usize,
    pub rounds: usize,
    pub in_flight: Vec<u32>,
}

impl CeilingSizes {
    pub fn for_options(o: &BenchOptions) -> CeilingSizes {
        CeilingSizes {
            requests: if o.quick { 2_000 } else { 10_000 },
            rounds: if o.quick { 1 } else { 3 },
            in_flight: vec![16, 32],
        }
    }
}

/// A sender measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Client {
    Sluice,
    SluiceUnpaced,
    LoopInWorker,
    LoopInPage,
}

impl Client {
    const ALL: [Client; 4] = [
        Client::Sluice,
        Client::SluiceUnpaced,
        Client::LoopInWorker,
        Client::LoopInPage,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Client::Sluice => "Sluice, one enqueueMany",
            Client::SluiceUnpaced => "Sluice, pacing: false",
            Client::LoopInWorker => "plain fetch loop in the worker",
            Client::LoopInPage => "plain fetch loop in the page",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CeilingRun {
    pub client: Client,
    pub in_flight: u32,
    pub round: usize,
    pub requests: usize,
    pub finish_s: f64,
    pub rate_per_s: f64,
    /// The browser's CPU (every process of it) over the run, per request.
    pub browser_cpu_ms_per_request: Option<f64>,
    /// How busy the rest of the machine was meanwhile.
    pub cpu: Option<CpuUse>,
}

/// One client at one concurrency, over the rounds.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CeilingSummary {
    pub client: Client,
    pub in_flight: u32,
    pub rate_per_s: Spread,
    pub browser_cpu_ms_per_request: Spread,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CeilingReport {
    pub sizes: CeilingSizes,
    pub latency_ms: u64,
    pub runs: Vec<CeilingRun>,
    pub summary: Vec<CeilingSummary>,
    pub targets: Vec<TargetCheck>,
    pub seconds: f64,
}

/// Runs every client `rounds` times at each concurrency, the order rotating each round.
pub async fn run(
    options: &BenchOptions,
    progress: &dyn Fn(&str),
) -> Result<CeilingReport, BenchError> {
    let started = Instant::now();
    let sizes = CeilingSizes::for_options(options);
    let mut runs = Vec::new();
    for &in_flight in &sizes.in_flight {
        for round in 0..sizes.rounds {
            for k in 0..Client::ALL.len() {
                let client = Client::ALL[(k + round) % Client::ALL.len()];
                progress(&format!(
                    "{} requests, {in_flight} in flight, round {}: {}",
                    sizes.requests,
                    round + 1,
                    client.name()
                ));
                let run =
                    run_one(options, client, in_flight, sizes.requests, round, progress).await?;
                progress(&format!(
                    "  {:.0}/s, {} ms of browser CPU per request",
                    run.rate_per_s,
                    run.browser_cpu_ms_per_request
                        .map_or("?".into(), |ms| format!("{ms:.2}"))
                ));
                runs.push(run);
            }
        }
    }
    let summary = summarize(&runs, &sizes.in_flight);
    let targets = targets(&summary, &sizes.in_flight);
    Ok(CeilingReport {
        sizes,
        latency_ms: LATENCY_MS,
        runs,
        summary,
        targets,
        seconds: started.elapsed().as_secs_f64(),
    })
}

async fn run_one(
    options: &BenchOptions,
    client: Client,
    in_flight: u32,
    requests: usize,
    round: usize,
    progress: &dyn Fn(&str),
) -> Result<CeilingRun, Error> {
    let api = ApiConfig {
        limit: u32::MAX,
        window_ms: WINDOW_MS,
        latency_ms: LATENCY_MS,
        seed: Some(1),
        ..ApiConfig::default()
    };
    let rig = rig_at(options, api, false).await?;
    let tab = rig.open_driver("").await?;
    let origin = rig.origin.clone();
    let pacing = client != Client::SluiceUnpaced;
    if matches!(client, Client::Sluice | Client::SluiceUnpaced) {
        tab.eval(&format!(
            "await e2e.configure({{ budgets: [{{ name: 'api', windows: [{{ limit: {FAR_LIMIT}, \
             lengthMs: 1000 }}], concurrency: {in_flight}, pacing: {pacing}, \
             matchPrefixes: ['{origin}/api/'] }}] }});"
        ))
        .await?;
        tab.eval(&bulk_jobs_js(requests, "ceiling", &origin))
            .await?;
    }
    let profiled = match options.profile_dir {
        Some(_) => rig.browser.start_profiles().await?,
        None => Vec::new(),
    };
    let before = rig.browser.cpu_sample();
    match client {
        Client::Sluice | Client::SluiceUnpaced => {
            // Polled every 100 ms rather than awaiting every job's `done`: the page's own
            // bookkeeping of 10,000 promises is not the worker's cost.
            tab.eval(&format!(
                "await sluice.enqueueMany(window.bulkJobs, 'ceiling');\
                 for (;;) {{\
                   const g = await sluice.group('ceiling');\
                   if (g && g.done + g.failed >= {requests}) {{\
                     if (g.failed) throw new Error(g.failed + ' jobs failed');\
                     break;\
                   }}\
                   await e2e.sleep(100);\
                 }}"
            ))
            .await?;
        }
        Client::LoopInWorker => {
            rig.browser
                .eval_in_worker(
                    &plain_loop_js(&origin, requests, in_flight),
                    Duration::from_secs(300),
                )
                .await?;
        }
        Client::LoopInPage => {
            tab.eval(&format!(
                "return await {};",
                plain_loop_js(&origin, requests, in_flight)
            ))
            .await?;
        }
    }
    let after = rig.browser.cpu_sample();
    if let Some(dir) = &options.profile_dir {
        let client = serde_json::to_value(client)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let stem = format!("{client}-{in_flight}-{}", round + 1);
        save_profiles(&rig.browser, &profiled, dir, &stem, progress).await?;
    }
    let arrivals = rig.api.arrivals();
    let finish_s = finish_time_s(&arrivals, LATENCY_MS)?;
    let browser_ms = match (&before, &after) {
        (Some(b), Some(a)) => b.browser_ms_until(a),
        _ => None,
    };
    Ok(CeilingRun {
        client,
        in_flight,
        round,
        requests: arrivals.len(),
        finish_s,
        rate_per_s: arrivals.len() as f64 / finish_s,
        browser_cpu_ms_per_request: browser_ms.map(|ms| ms / arrivals.len().max(1) as f64),
        cpu: match (before, after) {
            (Some(b), Some(a)) => b.until(&a),
            _ => None,
        },
    })
}

fn summarize(runs: &[CeilingRun], in_flight: &[u32]) -> Vec<CeilingSummary> {
    let mut out = Vec::new();
    for &n in in_flight {
        for client in Client::ALL {
            let mine: Vec<&CeilingRun> = runs
                .iter()
                .filter(|r| r.client == client && r.in_flight == n)
                .collect();
            let rates: Vec<f64> = mine.iter().map(|r| r.rate_per_s).collect();
            let cpu: Vec<f64> = mine
                .iter()
                .filter_map(|r| r.browser_cpu_ms_per_request)
                .collect();
            out.push(CeilingSummary {
                client,
                in_flight: n,
                rate_per_s: Spread::of(&rates),
                browser_cpu_ms_per_request: Spread::of(&cpu),
            });
        }
    }
    out
}

/// Issue 40's targets, on the medians: Sluice at >= 0.95 of the plain loop in the worker's
/// rate, with CPU per request within 1.2x of it; pacing costing nothing measurable (the paced
/// run at >= 0.97 of the unpaced one).
fn targets(summary: &[CeilingSummary], in_flight: &[u32]) -> Vec<TargetCheck> {
    let median = |client: Client, n: u32| {
        summary
            .iter()
            .find(|s| s.client == client && s.in_flight == n)
    };
    let mut checks = Vec::new();
    for &n in in_flight {
        let (Some(sluice), Some(unpaced), Some(plain)) = (
            median(Client::Sluice, n),
            median(Client::SluiceUnpaced, n),
            median(Client::LoopInWorker, n),
        ) else {
            continue;
        };
        let share = sluice.rate_per_s.median / plain.rate_per_s.median;
        checks.push(TargetCheck {
            what: format!("rate vs the worker's plain loop, {n} in flight"),
            target: ">= 0.95".into(),
            measured: format!("{share:.3}"),
            met: share >= 0.95,
        });
        let cpu =
            sluice.browser_cpu_ms_per_request.median / plain.browser_cpu_ms_per_request.median;
        checks.push(TargetCheck {
            what: format!("CPU per request vs the plain loop, {n} in flight"),
            target: "<= 1.2x".into(),
            measured: format!("{cpu:.2}x"),
            met: cpu <= 1.2,
        });
        let pacing = sluice.rate_per_s.median / unpaced.rate_per_s.median;
        checks.push(TargetCheck {
            what: format!("paced vs unpaced rate, {n} in flight"),
            target: ">= 0.97".into(),
            measured: format!("{pacing:.3}"),
            met: pacing >= 0.97,
        });
    }
    checks
}

/// The report as a table for people.
pub fn table(report: &CeilingReport) -> String {
    let mut out = format!(
        "sluice bench --ceiling: {} POSTs per run, API limit lifted, {} ms latency, {} \
         rounds, alternating ({:.0} s)\n",
        report.sizes.requests, report.latency_ms, report.sizes.rounds, report.seconds
    );
    for &n in &report.sizes.in_flight {
        out.push_str(&format!(
            "\n{n} in flight      requests/s (min / median / max)   browser CPU ms per request\n"
        ));
        for s in report.summary.iter().filter(|s| s.in_flight == n) {
            let r = &s.rate_per_s;
            let c = &s.browser_cpu_ms_per_request;
            out.push_str(&format!(
                "  {:<32} {:>6.0} / {:>6.0} / {:>6.0}   {:.2} ({:.2}-{:.2})\n",
                s.client.name(),
                r.min,
                r.median,
                r.max,
                c.median,
                c.min,
                c.max
            ));
        }
    }
    out.push('\n');
    let width = report
        .targets
        .iter()
        .map(|t| t.what.len())
        .max()
        .unwrap_or(0);
    for t in &report.targets {
        out.push_str(&t.line(width));
    }
    out
}
