//! `sluice bench --limiters`: Sluice, Bottleneck and p-queue in front of real rate limiters.
//!
//! The limiters are those of the browser tests (`tests/e2e/limiters.rs`), started the same way
//! ([`crate::real_limiters`]): nginx `limit_req` without burst and with `burst=5 nodelay`,
//! express-rate-limit with draft-8 headers and rate-limiter-flexible, each at [`RATE`] per
//! second in front of a counting backend. Each client is set up as its documentation suggests
//! for that limit: Sluice with the budget the tests give it for that limiter
//! (docs/choosing-an-algorithm.md), Bottleneck and p-queue on the peers' page with the settings
//! their users pick for 20 per second, whatever the limiter (the page knows nothing of burst or
//! windows), a 429 retried after `Retry-After` or one window without it.
//!
//! Every run gets a fresh backend, limiter and browser; for each limiter the clients take turns
//! run by run (Sluice, Bottleneck, p-queue, Sluice, ...), so that other work on the machine
//! slows each of them alike. Per run: the 429s the limiter logged, the creates' rate at the
//! backend over the nominal rate, and how many of the creates the backend applied once, more
//! than once, or never (counted by each create's body, so clients that send no
//! `Idempotency-Key` are counted the same way). A run that stalls is cut off after
//! [`stall_limit`] and reported with what got through.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::peers::{mean_cpu, run_on_page, Client, PeerFiles, PeerRate, Spread};
use super::{bulk_jobs_js, cpu_use, BenchError, BenchOptions, CONCURRENCY};
use crate::api::{ApiConfig, ApiHandle};
use crate::browser::load::CpuUse;
use crate::browser::{self, Error, Rig, RigOptions};
use crate::real_limiters::{
    backend_creates, counting_backend, limiters_dir, rate_of, Limiter, LimiterError, LimiterProcess,
};

/// What every limiter here allows: 20 requests a second, as in the browser tests.
pub const RATE: u32 = 20;
/// Runs of each client per limiter, unless told.
pub const DEFAULT_RUNS: usize = 2;
/// Creates per run, unless told: about 10 s at [`RATE`].
pub const DEFAULT_JOBS: usize = 200;

/// The group (and body name prefix) of every create, on the peers' page as in the worker.
const GROUP: &str = "bulk";

/// One limiter as the bench runs it, and the budget Sluice is given for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimiterConfig {
    /// Its name on the command line and in the JSON report.
    pub name: &'static str,
    #[serde(skip)]
    pub limiter: Limiter,
    /// The budget's fields besides its name, `concurrency` and `matchPrefixes`.
    pub sluice_budget: &'static str,
}

/// The limiters measured, each with the budget its `*_at_its_rate` browser test gives Sluice.
pub const CONFIGS: [LimiterConfig; 4] = [
    LimiterConfig {
        name: "nginx",
        limiter: Limiter::Nginx { burst: 0 },
        // docs/choosing-an-algorithm.md: no burst is one per interval.
        sluice_budget: "algorithm: 'gcra', windows: [{ limit: 1, lengthMs: 50 }]",
    },
    LimiterConfig {
        name: "nginx-burst-5",
        limiter: Limiter::Nginx { burst: 5 },
        sluice_budget: "algorithm: 'gcra', windows: [{ limit: 6, lengthMs: 300 }]",
    },
    LimiterConfig {
        name: "erl-draft-8",
        limiter: Limiter::Node("erl-draft-8"),
        sluice_budget: "algorithm: 'fixed-window', windows: [{ limit: 20, lengthMs: 1000 }]",
    },
    LimiterConfig {
        name: "rlf",
        limiter: Limiter::Node("rlf"),
        sluice_budget: "algorithm: 'fixed-window', windows: [{ limit: 20, lengthMs: 1000 }]",
    },
];

/// What the limiters' comparison runs.
#[derive(Clone, Debug, Default)]
pub struct LimiterOptions {
    /// Runs of each client per limiter ([`DEFAULT_RUNS`] if `None`).
    pub runs: Option<usize>,
    /// Creates per run ([`DEFAULT_JOBS`] if `None`).
    pub jobs: Option<usize>,
    /// The limiters to run, by [`LimiterConfig::name`]; all of [`CONFIGS`] if empty.
    pub only: Vec<String>,
}

impl LimiterOptions {
    /// Creates per run and runs per client.
    pub fn sizes(&self) -> (usize, usize) {
        (
            self.jobs.unwrap_or(DEFAULT_JOBS),
            self.runs.unwrap_or(DEFAULT_RUNS),
        )
    }

    /// The limiters asked for, in [`CONFIGS`]' order; an unknown name is an error naming them.
    pub fn configs(&self) -> Result<Vec<LimiterConfig>, BenchError> {
        if let Some(unknown) = self
            .only
            .iter()
            .find(|n| !CONFIGS.iter().any(|c| c.name == n.as_str()))
        {
            let known: Vec<&str> = CONFIGS.iter().map(|c| c.name).collect();
            return Err(LimiterError::Unknown {
                name: unknown.clone(),
                known: known.join(", "),
            }
            .into());
        }
        Ok(CONFIGS
            .iter()
            .filter(|c| self.only.is_empty() || self.only.iter().any(|n| n == c.name))
            .copied()
            .collect())
    }
}

/// How long a run may take before it is cut off and reported as stalled: 4.5 times the
/// nominal time (as the browser tests allow), and 10 s for the browser to get going.
pub fn stall_limit(jobs: usize) -> Duration {
    Duration::from_secs_f64(jobs as f64 / f64::from(RATE) * 4.5 + 10.0)
}

/// One run of one client against one limiter.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimiterRun {
    /// 429s to creates, from the limiter's own log.
    pub rate_limited: usize,
    /// Creates per second at the backend, first to last, over [`RATE`].
    pub share: f64,
    /// Of the creates asked for, how many the backend applied exactly once, more than once,
    /// and never.
    pub applied_once: usize,
    pub applied_more: usize,
    pub lost: usize,
    /// Jobs that did not end done on the page (Sluice gave them up); 0 for a peer, whose page
    /// fails the run instead.
    pub not_done: usize,
    /// Cut off after [`stall_limit`]: the figures are of what got through by then.
    pub stalled: bool,
    /// CORS preflights the limiter answered.
    pub preflights: usize,
    pub cpu: Option<CpuUse>,
}

/// One client's runs against one limiter.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientFigures {
    pub client: Client,
    pub label: String,
    pub settings: String,
    pub runs: Vec<LimiterRun>,
    pub rate_limited: Spread,
    pub share: Spread,
    pub applied_once: Spread,
    pub applied_more: Spread,
    pub lost: Spread,
    pub cpu: Option<CpuUse>,
}

impl ClientFigures {
    fn of(client: Client, settings: String, runs: Vec<LimiterRun>) -> Self {
        let spread =
            |f: fn(&LimiterRun) -> f64| Spread::of(&runs.iter().map(f).collect::<Vec<_>>());
        ClientFigures {
            client,
            label: client.label(),
            settings,
            rate_limited: spread(|r| r.rate_limited as f64),
            share: spread(|r| r.share),
            applied_once: spread(|r| r.applied_once as f64),
            applied_more: spread(|r| r.applied_more as f64),
            lost: spread(|r| r.lost as f64),
            cpu: mean_cpu(runs.iter().map(|r| r.cpu)),
            runs,
        }
    }
}

/// Every client against one limiter.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimiterTable {
    pub config: LimiterConfig,
    /// The limiter and its figures, in words.
    pub limiter: String,
    pub clients: Vec<ClientFigures>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitersReport {
    pub jobs: usize,
    pub runs_per_client: usize,
    pub rate: u32,
    pub concurrency: u32,
    pub limiters: Vec<LimiterTable>,
    /// The machine's CPU use during the runs, on average.
    pub cpu: Option<CpuUse>,
    pub seconds: f64,
}

/// Finds the peers and the limiters, and measures every client against each limiter.
pub async fn run(
    options: &BenchOptions,
    limiter_options: &LimiterOptions,
    progress: &dyn Fn(&str),
) -> Result<LimitersReport, BenchError> {
    let started = Instant::now();
    let configs = limiter_options.configs()?;
    // Before minutes of measuring, not after: everything must be installed.
    let files = PeerFiles::find(&options.peer_options)?;
    for config in &configs {
        if let Some(missing) = config.limiter.missing(&limiters_dir()) {
            return Err(LimiterError::from(missing).into());
        }
    }
    let (jobs, runs) = limiter_options.sizes();
    let peer_rate = PeerRate {
        limit: RATE,
        window_ms: 1000,
        concurrency: CONCURRENCY,
    };
    let mut limiters = Vec::new();
    for config in configs {
        let mut per_client: Vec<Vec<LimiterRun>> = Client::ALL.iter().map(|_| Vec::new()).collect();
        for round in 1..=runs {
            for (client, results) in Client::ALL.iter().zip(per_client.iter_mut()) {
                progress(&format!(
                    "limiters: {}, run {round}/{runs}, {}: {jobs} creates",
                    config.limiter.describe(RATE),
                    client.label()
                ));
                results.push(run_once(options, &files, &config, *client, jobs, &peer_rate).await?);
            }
        }
        let clients = Client::ALL
            .iter()
            .zip(per_client)
            .map(|(client, runs)| {
                let settings = match client {
                    Client::Sluice => format!(
                        "budget {{ {}, concurrency: {CONCURRENCY} }} (the worker)",
                        config.sluice_budget
                    ),
                    _ => client.settings(&peer_rate),
                };
                ClientFigures::of(*client, settings, runs)
            })
            .collect();
        limiters.push(LimiterTable {
            limiter: config.limiter.describe(RATE),
            config,
            clients,
        });
    }
    let cpu = mean_cpu(
        limiters
            .iter()
            .flat_map(|l| &l.clients)
            .flat_map(|c| &c.runs)
            .map(|r| r.cpu),
    );
    Ok(LimitersReport {
        jobs,
        runs_per_client: runs,
        rate: RATE,
        concurrency: CONCURRENCY,
        limiters,
        cpu,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// What the driver page reports of Sluice's run.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SluiceOutcome {
    not_done: usize,
}

/// Page script: hands the jobs of [`bulk_jobs_js`] to the worker and waits for each to end;
/// how many did not end done.
const SLUICE_RUN_JS: &str = "const r = await sluice.enqueueMany(window.bulkJobs, 'bulk');\
     const ends = await Promise.all(r.ids.map((id) => sluice.done(id).then(\
       (o) => o.status, (e) => e.code)));\
     return { notDone: ends.filter((s) => s !== 201 && s !== 200).length };";

/// One run: a fresh backend, limiter and browser, `client` sending `jobs` creates through it.
async fn run_once(
    options: &BenchOptions,
    files: &PeerFiles,
    config: &LimiterConfig,
    client: Client,
    jobs: usize,
    peer_rate: &PeerRate,
) -> Result<LimiterRun, BenchError> {
    let (backend_addr, backend) = counting_backend()
        .await
        .map_err(|e| BenchError::Io(format!("the counting backend: {e}")))?;
    // Starting it waits for its readiness (up to 10 s): off the runtime's threads.
    let kind = config.limiter;
    let limiter = tokio::task::spawn_blocking(move || {
        LimiterProcess::start(kind, backend_addr, RATE, &limiters_dir())
    })
    .await
    .map_err(|e| BenchError::Io(format!("starting {}: {e}", kind.describe(RATE))))??;
    let origin = limiter.origin.clone();
    let limit = stall_limit(jobs);
    let (outcome, cpu) = match client.page_name() {
        None => {
            let rig = Rig::start(RigOptions {
                chromium: options.chromium.clone(),
                also_allow: vec![origin.clone()],
                ..RigOptions::default()
            })
            .await?;
            let tab = rig.open_driver("").await?;
            tab.eval(&format!(
                "await e2e.configure({{ budgets: [{{ name: 'api', {}, concurrency: \
                 {CONCURRENCY}, matchPrefixes: ['{origin}/api/'] }}] }});",
                config.sluice_budget
            ))
            .await?;
            tab.eval(&bulk_jobs_js(jobs, GROUP, &origin)).await?;
            let cpu = rig.browser.cpu_sample();
            let outcome = tokio::time::timeout(limit, tab.eval_as::<SluiceOutcome>(SLUICE_RUN_JS))
                .await
                .ok()
                .transpose()?
                .map(|o| o.not_done);
            (outcome, cpu_use(cpu, &rig))
        }
        Some(name) => {
            let rig = Rig::start(files.rig_options(options, ApiConfig::default())).await?;
            let page = tokio::time::timeout(
                limit,
                run_on_page(&rig, files, name, &origin, jobs, peer_rate),
            )
            .await
            .ok()
            .transpose()?;
            let cpu = page.as_ref().and_then(|p| p.cpu);
            (page.map(|_| 0), cpu)
        }
    };
    // The limiter logs an answer once it is sent: wait until it logged every create the
    // backend saw, so that no 429 is missed.
    browser::wait_for(
        "the limiter to log every create the backend answered",
        Duration::from_secs(5),
        || limiter.logged_creates() >= backend_creates(&backend),
    )
    .await
    .map_err(|e| {
        Error::Server(format!(
            "{} ({}): {e}; its errors:\n{}",
            kind.describe(RATE),
            client.label(),
            limiter.errors()
        ))
    })?;
    let answers = limiter.answers();
    let posts: Vec<f64> = backend
        .arrivals()
        .iter()
        .filter(|a| a.method == "POST")
        .map(|a| a.at_ms)
        .collect();
    let applied = Applied::count(&backend, jobs);
    Ok(LimiterRun {
        rate_limited: answers
            .iter()
            .filter(|a| a.method == "POST" && a.status == 429)
            .count(),
        share: rate_of(&posts) / f64::from(RATE),
        applied_once: applied.once,
        applied_more: applied.more,
        lost: applied.never,
        not_done: outcome.unwrap_or(0),
        stalled: outcome.is_none(),
        preflights: answers.iter().filter(|a| a.method == "OPTIONS").count(),
        cpu,
    })
}

/// How often the backend applied each of the creates `GROUP 0` .. `GROUP jobs-1`.
struct Applied {
    once: usize,
    more: usize,
    never: usize,
}

impl Applied {
    /// Counted by the `name` each create's body carries: every client sends the same bodies,
    /// with or without an `Idempotency-Key`.
    fn count(backend: &ApiHandle, jobs: usize) -> Applied {
        let mut by_name: HashMap<String, usize> = HashMap::new();
        for contact in backend.contacts() {
            if let Some(name) = contact.get("name").and_then(|n| n.as_str()) {
                *by_name.entry(name.to_string()).or_insert(0) += 1;
            }
        }
        let times: Vec<usize> = (0..jobs)
            .map(|i| by_name.get(&format!("{GROUP} {i}")).copied().unwrap_or(0))
            .collect();
        Applied {
            once: times.iter().filter(|&&n| n == 1).count(),
            more: times.iter().filter(|&&n| n > 1).count(),
            never: times.iter().filter(|&&n| n == 0).count(),
        }
    }
}

/// A count's spread as `min/median/max`, a median between two runs with its half.
fn counts(s: &Spread) -> String {
    let n = |v: f64| {
        if v.fract() == 0.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.1}")
        }
    };
    format!("{}/{}/{}", n(s.min), n(s.median), n(s.max))
}

/// One line of a limiter's table: its cells padded to their columns.
fn row(cells: &[String; 8]) -> String {
    let [client, rejected, share, once, more, lost, stalled, cpu] = cells;
    format!(
        "{client:<18} {rejected:<16} {share:<18} {once:<15} {more:<8} {lost:<15} {stalled:<8} \
         {cpu}\n"
    )
}

/// The comparison as a table per limiter, for a terminal.
pub fn table(r: &LimitersReport) -> String {
    let mut s = format!(
        "limiters: {} creates per run, runs of each client per limiter: {}, every limiter at \
         {}/s, {} in flight; {:.0} s",
        r.jobs, r.runs_per_client, r.rate, r.concurrency, r.seconds
    );
    if let Some(c) = &r.cpu {
        s.push_str(&format!(
            "; machine CPU during the runs: ours {:.0}%, others {:.0}%",
            c.ours * 100.0,
            c.others * 100.0
        ));
    }
    s.push_str("\nfigures are min/median/max over the runs\n");
    for l in &r.limiters {
        s.push_str(&format!("\n{} ({})\n", l.limiter, l.config.name));
        let header = [
            "client".to_string(),
            "429s".into(),
            format!("share of {}/s", r.rate),
            "applied once".into(),
            "twice+".into(),
            "lost".into(),
            "stalled".into(),
            "others' CPU".into(),
        ];
        s.push_str(&row(&header));
        for c in &l.clients {
            s.push_str(&row(&[
                c.label.clone(),
                counts(&c.rate_limited),
                format!(
                    "{:.3}/{:.3}/{:.3}",
                    c.share.min, c.share.median, c.share.max
                ),
                counts(&c.applied_once),
                counts(&c.applied_more),
                counts(&c.lost),
                format!(
                    "{}/{}",
                    c.runs.iter().filter(|r| r.stalled).count(),
                    c.runs.len()
                ),
                c.cpu
                    .map_or("n/a".into(), |u| format!("{:.0}%", u.others * 100.0)),
            ]));
        }
        for c in &l.clients {
            s.push_str(&format!("  {}: {}\n", c.label, c.settings));
            let stalled = c.runs.iter().filter(|r| r.stalled).count();
            if stalled > 0 {
                s.push_str(&format!(
                    "    {stalled} run(s) stalled: cut off after {:.0} s, figures of what got \
                     through by then (creates not applied by then counted lost)\n",
                    stall_limit(r.jobs).as_secs_f64()
                ));
            }
            let not_done: usize = c.runs.iter().map(|r| r.not_done).sum();
            if not_done > 0 {
                s.push_str(&format!(
                    "    {not_done} job(s) did not end done on the page\n"
                ));
            }
        }
    }
    s.push_str(
        "\n429s: to creates, from the limiter's own log; share: creates per second at the \
         backend, first to last, over the nominal rate; applied: each create by its body at the \
         backend (twice+: more than once; lost: never, or in a stalled run not by the cut-off); \
         stalled: runs cut off after 4.5 times their nominal time and 10 s\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rate_limited: usize, share: f64, lost: usize, stalled: bool) -> LimiterRun {
        LimiterRun {
            rate_limited,
            share,
            applied_once: 200 - lost,
            applied_more: 0,
            lost,
            not_done: 0,
            stalled,
            preflights: 1,
            cpu: None,
        }
    }

    #[test]
    fn sizes_and_limiters_default_unless_told() {
        assert_eq!(LimiterOptions::default().sizes(), (200, 2));
        let all = LimiterOptions::default().configs().expect("all");
        assert_eq!(
            all.iter().map(|c| c.name).collect::<Vec<_>>(),
            ["nginx", "nginx-burst-5", "erl-draft-8", "rlf"]
        );
        let told = LimiterOptions {
            runs: Some(1),
            jobs: Some(40),
            only: vec!["rlf".into(), "nginx".into()],
        };
        assert_eq!(told.sizes(), (40, 1));
        let some: Vec<&str> = told
            .configs()
            .expect("known")
            .iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(some, ["nginx", "rlf"], "in the bench's order");
        let err = LimiterOptions {
            only: vec!["haproxy".into()],
            ..LimiterOptions::default()
        }
        .configs()
        .expect_err("unknown");
        assert!(err.to_string().contains("\"haproxy\"") && err.to_string().contains("rlf"));
    }

    #[test]
    fn sluice_gets_the_budget_the_docs_map_each_limiter_to() {
        let budget = |name: &str| {
            CONFIGS
                .iter()
                .find(|c| c.name == name)
                .map(|c| c.sluice_budget)
        };
        assert_eq!(
            budget("nginx"),
            Some("algorithm: 'gcra', windows: [{ limit: 1, lengthMs: 50 }]")
        );
        assert_eq!(
            budget("nginx-burst-5"),
            Some("algorithm: 'gcra', windows: [{ limit: 6, lengthMs: 300 }]")
        );
        assert_eq!(stall_limit(200), Duration::from_secs(55));
    }

    #[test]
    fn the_table_has_a_row_per_client_under_each_limiter() {
        let rate = PeerRate {
            limit: RATE,
            window_ms: 1000,
            concurrency: CONCURRENCY,
        };
        let clients = vec![
            ClientFigures::of(
                Client::Sluice,
                "budget".into(),
                vec![run(0, 0.94, 0, false), run(1, 0.86, 0, false)],
            ),
            ClientFigures::of(
                Client::Bottleneck,
                Client::Bottleneck.settings(&rate),
                vec![run(12, 0.71, 0, false), run(40, 0.52, 3, true)],
            ),
        ];
        let report = LimitersReport {
            jobs: 200,
            runs_per_client: 2,
            rate: RATE,
            concurrency: CONCURRENCY,
            limiters: vec![LimiterTable {
                config: CONFIGS[0],
                limiter: CONFIGS[0].limiter.describe(RATE),
                clients,
            }],
            cpu: None,
            seconds: 61.0,
        };
        let text = table(&report);
        assert!(
            text.contains("nginx limit_req rate=20r/s (nginx)"),
            "{text}"
        );
        let sluice = text
            .lines()
            .find(|l| l.starts_with("sluice "))
            .expect("a row for sluice");
        let cells: Vec<&str> = sluice.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "sluice",
                "0/0.5/1",
                "0.860/0.900/0.940",
                "200/200/200",
                "0/0/0",
                "0/0/0",
                "0/2",
                "n/a"
            ],
            "{text}"
        );
        let bottleneck = text
            .lines()
            .find(|l| l.starts_with("bottleneck "))
            .expect("a row for bottleneck");
        assert!(
            bottleneck.contains(" 12/26/40 ")
                && bottleneck.contains(" 0/1.5/3 ")
                && bottleneck.contains(" 1/2 "),
            "{text}"
        );
        assert!(text.contains("minTime 50 ms, maxConcurrent 4"), "{text}");
        assert!(text.contains("1 run(s) stalled"), "{text}");
        let json = serde_json::to_value(&report).expect("JSON");
        assert_eq!(json["limiters"][0]["config"]["name"], "nginx");
        assert_eq!(
            json["limiters"][0]["clients"][1]["runs"][1]["stalled"],
            true
        );
    }
}
