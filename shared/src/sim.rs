//! A deterministic simulation of the engine against a strict server.
//!
//! This is how the engine's promises are proven: a fake clock, a server that counts arrivals
//! in an exact sliding window and answers 429 the moment a request would exceed it, network
//! latency with jitter between our start and the server's count, an idempotency store that
//! counts applied creates, injected 5xx and "applied, then the response was lost" timeouts,
//! other callers spending the same quota, and rebuilds of the engine from its saved state at
//! random moments — the browser killing the worker. Everything is driven by one seed, so a
//! failing run can be replayed exactly.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::budget::BudgetState;
use crate::config::{EngineConfig, Window};
use crate::engine::{Changes, Engine, Response, Transmit, TransportError};
use crate::headers::Headers;
use crate::job::{Job, JobId, JobKind, JobSpec, JobState, Lane};
use crate::pump::Pump;
use crate::random::Rng;
use crate::sim_tokens::{tokens_of, TokenReport, TokenServer};
use crate::time::{DurationMs, Millis};

/// How the simulated server writes `Retry-After`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RetryAfterForm {
    Delta,
    HttpDate,
    None,
}

/// Which rate-limit headers the simulated server sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeaderStyle {
    None,
    XRateLimit,
    Ietf,
    /// One family per resource, the resource last, resets as Go durations (OpenAI's):
    /// `x-ratelimit-remaining-requests: 7`, `x-ratelimit-reset-requests: 1.5s`, and a tokens
    /// quota the server does not enforce.
    ResourceSuffix,
    /// A vendor prefix, the resource in the middle, resets as RFC 3339 timestamps on the
    /// server's clock (Anthropic's): `anthropic-ratelimit-requests-reset: 2026-12-04T19:30:01Z`.
    VendorPrefix,
    /// An interval quota beside a daily one (HubSpot's): `X-HubSpot-RateLimit-Max`,
    /// `-Remaining`, `-Interval-Milliseconds` for the first window, `-Daily` and
    /// `-Daily-Remaining` for a window of a day where the server enforces one, `-Secondly` and
    /// `-Secondly-Remaining` for one of a second that is not the first.
    IntervalDaily,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerModel {
    /// The real limit, enforced on arrivals.
    pub limit: u32,
    pub window_ms: DurationMs,
    /// One-way network delay: base plus uniform jitter, each way.
    pub one_way_ms: DurationMs,
    pub jitter_ms: DurationMs,
    /// The way there's jitter when it differs from the way back's (`jitter_ms`): a path whose
    /// answers spread wider than its arrivals, as the demo API's `--arrival-jitter-ms` with
    /// `--jitter-ms` makes one.
    #[serde(default)]
    pub arrival_jitter_ms: Option<DurationMs>,
    /// Time the server takes to handle a request.
    pub service_ms: DurationMs,
    pub retry_after: RetryAfterForm,
    pub headers: HeaderStyle,
    /// Share of requests answered 503 without applying them.
    pub fault_rate: f64,
    /// Share of requests applied whose response is then lost (the client times out).
    pub lost_response_rate: f64,
    /// Requests per second that other callers spend from the same quota.
    pub other_callers_per_s: f64,
    /// Share of requests applied and answered `slow_ms` later than the rest (a server that is
    /// slow now and then; beyond the attempt timeout, a hung request).
    #[serde(default)]
    pub slow_rate: f64,
    #[serde(default)]
    pub slow_ms: DurationMs,
    /// A leaky bucket without burst, as nginx's `limit_req` without `burst=`: besides the
    /// windows, an arrival less than `window_ms / limit` after the last accepted one is refused.
    #[serde(default)]
    pub no_burst: bool,
    /// With `no_burst`, nginx's `burst=N nodelay`: a leaky bucket that lets `N` arrivals more
    /// through at once (GCRA with a tolerance of `N` intervals), and no sliding window besides.
    #[serde(default)]
    pub burst: u32,
    /// The first request's way there takes this much longer (its CORS preflight goes first).
    #[serde(default)]
    pub first_extra_ms: DurationMs,
    /// How far the client's clock runs ahead of the server's.
    pub client_clock_ahead_ms: i64,
    /// Further windows the server enforces together with `limit` per `window_ms` (10 per second
    /// AND 3,000 per hour): an arrival is refused when any of them is full.
    #[serde(default)]
    pub extra_windows: Vec<Window>,
    /// Tokens a minute the server also counts, each request's real cost read from its body
    /// (see `sim_tokens`); `None`: requests only.
    #[serde(default)]
    pub tokens_per_minute: Option<u32>,
}

impl ServerModel {
    /// Every window the server enforces, `limit` per `window_ms` first.
    pub fn windows(&self) -> Vec<Window> {
        std::iter::once(Window {
            limit: self.limit,
            length_ms: self.window_ms,
        })
        .chain(self.extra_windows.iter().copied())
        .collect()
    }
}

impl Default for ServerModel {
    fn default() -> Self {
        Self {
            limit: 100,
            window_ms: 1_000,
            one_way_ms: 15,
            jitter_ms: 5,
            arrival_jitter_ms: None,
            service_ms: 0,
            retry_after: RetryAfterForm::Delta,
            headers: HeaderStyle::None,
            fault_rate: 0.0,
            lost_response_rate: 0.0,
            other_callers_per_s: 0.0,
            slow_rate: 0.0,
            slow_ms: 0,
            no_burst: false,
            burst: 0,
            first_extra_ms: 0,
            client_clock_ahead_ms: 0,
            extra_windows: vec![],
            tokens_per_minute: None,
        }
    }
}

/// One batch of work handed to the engine at a moment.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Arrival {
    pub at: Millis,
    pub specs: Vec<JobSpec>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scenario {
    pub seed: u64,
    pub engine: EngineConfig,
    pub server: ServerModel,
    pub arrivals: Vec<Arrival>,
    /// Moments at which the worker is killed and the engine rebuilt from its saved state.
    pub rebuilds: Vec<Millis>,
    /// How long one save takes to become durable. The simulated worker runs the real one's
    /// pump ([`crate::pump`]): one save of its own in flight, what changes meanwhile in the
    /// next, and each enqueue saved in a transaction of its own with the starts it makes
    /// possible. Saves wait for the one before them, as IndexedDB's transactions on the same
    /// stores do; a kill loses those in flight. 0: a save lands in the same millisecond, after
    /// what was already due then.
    #[serde(default)]
    pub save_ms: DurationMs,
    /// Give up after this much simulated time.
    pub horizon_ms: DurationMs,
}

/// What the server and the engine did, for assertions and the `simulate` report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub jobs: u64,
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Jobs not in a terminal state when the run ended.
    pub unfinished: u64,
    /// Jobs that were enqueued but are nowhere any more (must be 0). A finished job the
    /// engine forgot after its retention time is not lost (see `forgotten`).
    pub lost: u64,
    /// Finished jobs the engine forgot after its retention time (`EngineConfig::retention_ms`);
    /// they are counted in `done`, `failed` and `cancelled` by their last saved state.
    #[serde(default)]
    pub forgotten: u64,
    pub requests: u64,
    pub rate_limited: u64,
    pub rate_limited_per_1000: f64,
    /// The most of our arrivals the server counted in any window of its length (the first
    /// window's; see `per_window` for all of them).
    pub max_arrivals_in_window: u32,
    /// The most of our starts in any window of the limit's length.
    pub max_starts_in_window: u32,
    /// The same two figures for every window the server enforces, in `ServerModel::windows`
    /// order.
    #[serde(default)]
    pub per_window: Vec<WindowPeak>,
    /// Requests of other callers the server counted against the quota.
    #[serde(default)]
    pub other_arrivals: u64,
    /// Extra records: creates the server applied more than once (must be 0).
    pub duplicate_creates: u64,
    /// Repeated creates the server's idempotency store recognised and did not apply again.
    pub deduplicated_retries: u64,
    pub finished_at_ms: Millis,
    /// Time the jobs would take at exactly the limit (all windows together, see
    /// [`ideal_time_windows`]).
    pub ideal_ms: DurationMs,
    /// From our first start to the last job's finish.
    #[serde(default)]
    pub busy_ms: DurationMs,
    /// Achieved rate over the limit while work was waiting. With several windows, where no one
    /// rate is "the limit": the ideal time over the time taken.
    pub share_of_limit: f64,
    pub rebuilds: u64,
    /// Start times of every request we sent, for property checks.
    #[serde(skip)]
    pub starts: Vec<Millis>,
    /// Ordering keys in the order their jobs were first applied by the server.
    #[serde(skip)]
    pub applied_per_key: BTreeMap<String, Vec<u64>>,
    /// What the server counted of tokens, when it counts them (`ServerModel::tokens_per_minute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokenReport>,
    /// Every job at the end.
    #[serde(skip)]
    pub final_jobs: Vec<Job>,
    /// (enqueued, first start, lane) for each job that started.
    #[serde(skip)]
    pub waits: Vec<(Millis, Millis, Lane)>,
}

/// The most of our arrivals (and starts) in any placement of one of the server's windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowPeak {
    pub limit: u32,
    pub length_ms: DurationMs,
    /// Arrivals the server counted: never above `limit`, since it refuses the rest.
    pub max_arrivals: u32,
    /// Arrivals including the ones it refused with a 429: what a lenient server would have
    /// counted, so this is the figure that shows whether we stayed under the window.
    pub max_attempts: u32,
    pub max_starts: u32,
}

enum Event {
    Enqueue(usize),
    Arrive(u64),
    Respond(u64),
    Timeout(u64),
    Rebuild,
    OtherCaller,
    /// The oldest save in flight of this engine generation landed.
    Saved(u64),
}

/// A save begun and not landed yet.
struct SaveInFlight {
    changes: Changes,
    by: Saver,
}

/// Whose save it is.
enum Saver {
    Pump,
    /// A page request's (an enqueue's), with the starts it carries and the jobs whose enqueue
    /// it acknowledges.
    Request {
        starts: Vec<Transmit>,
        enqueued: Vec<JobId>,
    },
}

struct InFlight {
    job_id: JobId,
    /// Which incarnation of the engine sent it: responses to a dead one are lost.
    generation: u64,
    idempotency_key: Option<String>,
    key: Option<String>,
    seq_tag: u64,
    /// Its real cost in tokens, from its body (see `sim_tokens`).
    tokens: u64,
    response: Option<Response>,
    lost: bool,
    settled: bool,
}

/// Runs a scenario to completion (or the horizon) and reports.
impl Report {
    /// The figures as one line of JSON (without the per-request detail), for messages.
    pub fn summary(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

pub fn run(scenario: &Scenario) -> Report {
    let mut rng = Rng::seeded(scenario.seed);
    let server = &scenario.server;
    let mut engine = Engine::new(scenario.engine.clone(), Rng::seeded(rng.next_u64()))
        .expect("scenario configuration must be valid");
    let mut generation = 0u64;
    // The "IndexedDB" of the simulated worker: what it persisted.
    let mut saved_jobs: HashMap<JobId, Job> = HashMap::new();
    let mut saved_budgets: HashMap<String, BudgetState> = HashMap::new();
    let mut events: BinaryHeap<Reverse<(Millis, u64, usize)>> = BinaryHeap::new();
    let mut payloads: Vec<Option<Event>> = Vec::new();
    let mut seq = 0u64;
    let mut push = |events: &mut BinaryHeap<_>, payloads: &mut Vec<Option<Event>>, at, e| {
        payloads.push(Some(e));
        events.push(Reverse((at, seq, payloads.len() - 1)));
        seq += 1;
    };
    for (i, a) in scenario.arrivals.iter().enumerate() {
        push(&mut events, &mut payloads, a.at, Event::Enqueue(i));
    }
    for &at in &scenario.rebuilds {
        push(&mut events, &mut payloads, at, Event::Rebuild);
    }
    if server.other_callers_per_s > 0.0 {
        push(&mut events, &mut payloads, 0, Event::OtherCaller);
    }
    let mut report = Report::default();
    let mut requests: Vec<InFlight> = Vec::new();
    let windows = server.windows();
    // Per window: the arrivals (ours and others') the server counts in it now.
    let mut server_logs: Vec<VecDeque<Millis>> = vec![VecDeque::new(); windows.len()];
    // Every arrival of ours the server counted, and every one including those it refused.
    let mut our_arrivals: Vec<Millis> = Vec::new();
    let mut our_attempts: Vec<Millis> = Vec::new();
    // The last arrival the server accepted, for `ServerModel::no_burst`.
    let mut last_accepted: Option<Millis> = None;
    let mut token_server = server
        .tokens_per_minute
        .map(|n| TokenServer::new(u64::from(n)));
    // Finished jobs the engine forgot after the retention time: their last saved state.
    let mut forgotten: HashMap<JobId, Job> = HashMap::new();
    let mut applied: HashMap<String, u64> = HashMap::new();
    let mut records_per_job: HashMap<u64, u64> = HashMap::new();
    let mut first_applied: HashSet<u64> = HashSet::new();
    let mut enqueued_ids: Vec<JobId> = Vec::new();
    let mut first_start: HashMap<JobId, Millis> = HashMap::new();
    let mut tag = 0u64;
    let timeout_ms = scenario.engine.retry.timeout_ms;
    let mut now: Millis = 0;
    let mut enqueues_left = scenario.arrivals.len();
    let mut busy_from: Option<Millis> = None;

    // A save landing: the "IndexedDB" takes it, the engine learns it.
    let land = |engine: &mut Engine,
                changes: Changes,
                saved_jobs: &mut HashMap<JobId, Job>,
                saved_budgets: &mut HashMap<String, BudgetState>,
                forgotten: &mut HashMap<JobId, Job>| {
        engine.on_saved(changes.save);
        for j in changes.jobs {
            saved_jobs.insert(j.id.clone(), j);
        }
        for id in changes.removed {
            if let Some(j) = saved_jobs.remove(&id) {
                if j.state.is_terminal() {
                    forgotten.insert(id, j);
                }
            }
        }
        for b in changes.budgets {
            saved_budgets.insert(b.name.clone(), b);
        }
    };

    // The worker's pump, the same code the service worker runs (see `crate::pump`); this
    // loop only carries out what it asks for against the fake clock, server and storage.
    let mut pump = Pump::default();
    // Saves begun and not landed, oldest first. Like IndexedDB's transactions on the same
    // stores, each waits for the one before it and then takes `save_ms`.
    let mut saves: VecDeque<SaveInFlight> = VecDeque::new();
    let mut storage_free_at: Millis = 0;
    loop {
        pump.turn(&mut engine, now);
        for t in pump.poll_sends() {
            report.requests += 1;
            report.starts.push(now);
            first_start.entry(t.job_id.clone()).or_insert_with(|| {
                if let Some(j) = engine.job(&t.job_id) {
                    report.waits.push((j.enqueued_at, now, j.lane));
                }
                now
            });
            busy_from.get_or_insert(now);
            let job = engine.job(&t.job_id);
            let idem = Headers(&t.headers)
                .values("idempotency-key")
                .next()
                .map(str::to_owned);
            let key = job.and_then(|j| j.key.clone());
            let seq_tag = job.map_or(0, |j| j.seq);
            requests.push(InFlight {
                job_id: t.job_id.clone(),
                generation,
                idempotency_key: idem,
                key,
                seq_tag,
                tokens: tokens_of(t.body.as_deref()),
                response: None,
                lost: false,
                settled: false,
            });
            let id = tag;
            tag += 1;
            let first = if report.requests == 1 {
                server.first_extra_ms
            } else {
                0
            };
            let up = server.one_way_ms
                + first
                + rng.below_or_equal(server.arrival_jitter_ms.unwrap_or(server.jitter_ms));
            push(&mut events, &mut payloads, now + up, Event::Arrive(id));
            push(
                &mut events,
                &mut payloads,
                now + t.timeout_ms.min(timeout_ms),
                Event::Timeout(id),
            );
        }

        if pump.poll_save() {
            let changes = engine.take_changes();
            storage_free_at = storage_free_at.max(now) + scenario.save_ms;
            saves.push_back(SaveInFlight {
                changes,
                by: Saver::Pump,
            });
            push(
                &mut events,
                &mut payloads,
                storage_free_at,
                Event::Saved(generation),
            );
        }

        let next_event = events.peek().map(|Reverse((t, _, _))| *t);
        let next_timer = pump.poll_timeout(&engine, now);
        let next = match (next_event, next_timer) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => break,
        };
        if next > scenario.horizon_ms {
            break;
        }
        now = next;
        if next_event != Some(now) {
            continue; // the pump's timer fired: loop back to its turn
        }
        let Some(Reverse((_, _, idx))) = events.pop() else {
            break;
        };
        let Some(event) = payloads.get_mut(idx).and_then(Option::take) else {
            continue;
        };
        match event {
            Event::Saved(of) => {
                if of != generation {
                    continue;
                }
                let Some(save) = saves.pop_front() else {
                    continue;
                };
                land(
                    &mut engine,
                    save.changes,
                    &mut saved_jobs,
                    &mut saved_budgets,
                    &mut forgotten,
                );
                match save.by {
                    Saver::Pump => pump.on_saved(true),
                    Saver::Request { starts, enqueued } => {
                        // `enqueue` resolves now: the page knows its jobs are kept.
                        enqueued_ids.extend(enqueued);
                        pump.request_save_ended(starts, true);
                    }
                }
            }
            Event::Enqueue(i) => {
                enqueues_left -= 1;
                let specs = scenario.arrivals[i].specs.clone();
                let mut enqueued = Vec::new();
                for spec in specs {
                    if let Ok(e) = engine.enqueue(spec, now) {
                        if !e.coalesced {
                            enqueued.push(e.id);
                        }
                    }
                }
                // As the worker handles a page's request: its own save, with the starts it
                // makes possible.
                let starts = pump.request_save_begins(&mut engine, now);
                let changes = engine.take_changes();
                if changes.is_empty() {
                    pump.request_save_ended(starts, true);
                } else {
                    pump.save_taken(now);
                    storage_free_at = storage_free_at.max(now) + scenario.save_ms;
                    saves.push_back(SaveInFlight {
                        changes,
                        by: Saver::Request { starts, enqueued },
                    });
                    push(
                        &mut events,
                        &mut payloads,
                        storage_free_at,
                        Event::Saved(generation),
                    );
                }
            }
            Event::OtherCaller => {
                report.other_arrivals += 1;
                for log in &mut server_logs {
                    log.push_back(now);
                }
                last_accepted = Some(now);
                // Half the mean gap plus up to a whole one: the gaps average `gap`, so others
                // spend `other_callers_per_s`.
                let gap = (1000.0 / server.other_callers_per_s).max(1.0) as u64;
                let jitter = rng.below_or_equal(gap);
                push(
                    &mut events,
                    &mut payloads,
                    now + gap / 2 + jitter,
                    Event::OtherCaller,
                );
            }
            Event::Arrive(id) => {
                let server_now = now;
                our_attempts.push(server_now);
                for (log, w) in server_logs.iter_mut().zip(&windows) {
                    while log.front().is_some_and(|&t| t + w.length_ms <= server_now) {
                        log.pop_front();
                    }
                }
                let req = &mut requests[id as usize];
                // Until each window has room again: when the arrival that leaves it one below
                // its limit drops out (others may have filled it past the limit).
                let room_in = |log: &VecDeque<Millis>, w: &Window| {
                    let over_by = log.len().checked_sub(w.limit as usize)?;
                    log.get(over_by)
                        .map(|&t| (t + w.length_ms).saturating_sub(server_now))
                };
                // Without burst: one interval after the last accepted arrival, in whole ms.
                let interval = windows[0].length_ms.div_ceil(u64::from(windows[0].limit));
                let tolerance = interval * u64::from(server.burst);
                let too_soon = last_accepted
                    .filter(|_| server.no_burst)
                    .map(|tat: Millis| (tat + interval).saturating_sub(server_now + tolerance))
                    .filter(|&w| w > 0);
                // A leaky bucket with burst is that alone: no sliding window besides.
                let leaky_only = server.no_burst && server.burst > 0;
                let no_tokens = token_server
                    .as_mut()
                    .and_then(|s| s.refusal(server_now, req.tokens));
                let wait = server_logs
                    .iter()
                    .zip(&windows)
                    .filter(|_| !leaky_only)
                    .filter_map(|(log, w)| room_in(log, w))
                    .chain(too_soon)
                    .chain(no_tokens)
                    .max();
                let over = wait.is_some();
                let server_clock = now as i64 - server.client_clock_ahead_ms;
                let mut headers = vec![("Date".to_string(), http_date(server_clock))];
                let response = if over {
                    report.rate_limited += 1;
                    let wait_ms = wait.unwrap_or(1000);
                    match server.retry_after {
                        RetryAfterForm::Delta => headers.push((
                            "Retry-After".into(),
                            wait_ms.div_ceil(1000).max(1).to_string(),
                        )),
                        RetryAfterForm::HttpDate => headers.push((
                            "Retry-After".into(),
                            // HTTP dates have whole seconds: round up so it is never early.
                            http_date(server_clock + wait_ms as i64 + 999),
                        )),
                        RetryAfterForm::None => {}
                    }
                    Response {
                        status: 429,
                        headers,
                        body: "{\"message\":\"rate limited\"}".into(),
                    }
                } else {
                    for log in &mut server_logs {
                        log.push_back(server_now);
                    }
                    // As a theoretical arrival time less one interval: without burst, the last
                    // accepted arrival; with it, where the bucket's level stands.
                    last_accepted = Some(match last_accepted {
                        Some(tat) if server.no_burst => (tat + interval).max(server_now),
                        _ => server_now,
                    });
                    our_arrivals.push(server_now);
                    if let Some(s) = token_server.as_mut() {
                        s.accept(server_now, req.tokens);
                    }
                    if rng.unit() < server.fault_rate {
                        Response {
                            status: 503,
                            headers,
                            body: "{\"message\":\"try later\"}".into(),
                        }
                    } else {
                        // The idempotency store applies a key once; a create that came with
                        // a second key for the same job would make a second record.
                        let count = match &req.idempotency_key {
                            Some(k) => {
                                let c = applied.entry(k.clone()).or_insert(0);
                                *c += 1;
                                if *c == 1 {
                                    *records_per_job.entry(req.seq_tag).or_insert(0) += 1;
                                }
                                *c
                            }
                            None => 1,
                        };
                        // A job sent again because the save of its outcome was lost with
                        // the worker is applied again, but it is not a reordering.
                        if count == 1 && first_applied.insert(req.seq_tag) {
                            if let Some(key) = &req.key {
                                report
                                    .applied_per_key
                                    .entry(key.clone())
                                    .or_default()
                                    .push(req.seq_tag);
                            }
                        }
                        if rng.unit() < server.lost_response_rate {
                            req.lost = true;
                        }
                        let body = if token_server.is_some() {
                            format!("{{\"usage\":{{\"total_tokens\":{}}}}}", req.tokens)
                        } else {
                            "{}".into()
                        };
                        Response {
                            status: if count == 1 { 201 } else { 200 },
                            headers,
                            body,
                        }
                    }
                };
                let mut response = response;
                // (window, remaining, reset in seconds) for each window.
                let states: Vec<(Window, u32, u64)> = server_logs
                    .iter()
                    .zip(&windows)
                    .map(|(log, w)| {
                        let remaining = w.limit.saturating_sub(log.len() as u32);
                        let reset_s = log
                            .front()
                            .map_or(0, |&t| (t + w.length_ms).saturating_sub(server_now))
                            .div_ceil(1000);
                        (*w, remaining, reset_s)
                    })
                    .collect();
                // The older headers carry one window: the one closest to refusing (the first
                // of equals), as servers with several quotas do.
                let (tightest, remaining, reset_s) = states
                    .iter()
                    .copied()
                    .min_by_key(|&(_, remaining, _)| remaining)
                    .unwrap_or((windows[0], 0, 0));
                let policy_name = |i: usize| {
                    if i == 0 {
                        "default".to_string()
                    } else {
                        format!("w{i}")
                    }
                };
                match server.headers {
                    HeaderStyle::None => {}
                    HeaderStyle::XRateLimit => {
                        response
                            .headers
                            .push(("X-RateLimit-Limit".into(), tightest.limit.to_string()));
                        response
                            .headers
                            .push(("X-RateLimit-Remaining".into(), remaining.to_string()));
                        response
                            .headers
                            .push(("X-RateLimit-Reset".into(), reset_s.to_string()));
                    }
                    HeaderStyle::Ietf => {
                        let policies: Vec<String> = states
                            .iter()
                            .enumerate()
                            .map(|(i, (w, _, _))| {
                                format!(
                                    "\"{}\";q={};w={}",
                                    policy_name(i),
                                    w.limit,
                                    w.length_ms.div_ceil(1000)
                                )
                            })
                            .collect();
                        let live: Vec<String> = states
                            .iter()
                            .enumerate()
                            .map(|(i, (_, r, t))| format!("\"{}\";r={r};t={t}", policy_name(i)))
                            .collect();
                        response
                            .headers
                            .push(("RateLimit-Policy".into(), policies.join(", ")));
                        response.headers.push(("RateLimit".into(), live.join(", ")));
                    }
                    style => {
                        // (window, remaining, milliseconds until the oldest arrival leaves it).
                        let states_ms: Vec<(Window, u32, DurationMs)> = server_logs
                            .iter()
                            .zip(&windows)
                            .map(|(log, w)| {
                                let reset = log
                                    .front()
                                    .map_or(0, |&t| (t + w.length_ms).saturating_sub(server_now));
                                (*w, w.limit.saturating_sub(log.len() as u32), reset)
                            })
                            .collect();
                        response
                            .headers
                            .extend(family_headers(style, &states_ms, server_clock));
                        if let (HeaderStyle::ResourceSuffix, Some(s)) =
                            (style, token_server.as_mut())
                        {
                            response.headers.extend(s.headers(server_now));
                        }
                    }
                }
                if !req.lost {
                    req.response = Some(response);
                    // Drawn only when asked for, so that the other runs keep their sequences.
                    let slow = if server.slow_rate > 0.0 && rng.unit() < server.slow_rate {
                        server.slow_ms
                    } else {
                        0
                    };
                    let down = server.service_ms
                        + slow
                        + server.one_way_ms
                        + rng.below_or_equal(server.jitter_ms);
                    push(&mut events, &mut payloads, now + down, Event::Respond(id));
                }
            }
            Event::Respond(id) => {
                let req = &mut requests[id as usize];
                if req.settled || req.generation != generation {
                    continue;
                }
                req.settled = true;
                if let Some(r) = req.response.take() {
                    pump.on_response(&mut engine, &req.job_id, r, now);
                }
            }
            Event::Timeout(id) => {
                let req = &mut requests[id as usize];
                if req.settled || req.generation != generation {
                    continue;
                }
                req.settled = true;
                pump.on_transport_error(&mut engine, &req.job_id, TransportError::Timeout, now);
            }
            Event::Rebuild => {
                // The browser killed the worker: memory is gone, IndexedDB remains.
                report.rebuilds += 1;
                generation += 1;
                // The saves in flight and the starts waiting for one are lost with it; the
                // new instance runs a new pump.
                saves.clear();
                storage_free_at = now;
                pump = Pump::default();
                let jobs: Vec<Job> = saved_jobs.values().cloned().collect();
                let budgets: Vec<BudgetState> = saved_budgets.values().cloned().collect();
                engine = Engine::restore(
                    scenario.engine.clone(),
                    Rng::seeded(rng.next_u64()),
                    jobs,
                    budgets,
                    now,
                )
                .expect("saved state must restore");
            }
        }
        if enqueues_left == 0 && engine.jobs().all(|j| j.state.is_terminal()) {
            break;
        }
    }

    // ---- the report ----
    let jobs: Vec<Job> = engine.jobs().cloned().collect();
    let present: HashSet<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    let forgotten: Vec<&Job> = forgotten
        .values()
        .filter(|j| !present.contains(j.id.as_str()))
        .collect();
    let forgotten_ids: HashSet<&str> = forgotten.iter().map(|j| j.id.as_str()).collect();
    report.lost = enqueued_ids
        .iter()
        .filter(|id| !present.contains(id.as_str()) && !forgotten_ids.contains(id.as_str()))
        .count() as u64;
    report.forgotten = forgotten.len() as u64;
    report.jobs = enqueued_ids.len() as u64;
    for j in jobs.iter().chain(forgotten.iter().copied()) {
        match j.state {
            JobState::Done => report.done += 1,
            JobState::Failed => report.failed += 1,
            JobState::Cancelled => report.cancelled += 1,
            _ => report.unfinished += 1,
        }
    }
    report.duplicate_creates = records_per_job.values().map(|c| c - 1).sum();
    report.deduplicated_retries = applied.values().map(|c| c - 1).sum();
    report.finished_at_ms = jobs
        .iter()
        .chain(forgotten.iter().copied())
        .filter_map(|j| j.finished_at)
        .max()
        .unwrap_or(now);
    report.rate_limited_per_1000 = if report.requests == 0 {
        0.0
    } else {
        report.rate_limited as f64 * 1000.0 / report.requests as f64
    };
    report.per_window = windows
        .iter()
        .map(|w| WindowPeak {
            limit: w.limit,
            length_ms: w.length_ms,
            max_arrivals: max_in_window(&our_arrivals, w.length_ms),
            max_attempts: max_in_window(&our_attempts, w.length_ms),
            max_starts: max_in_window(&report.starts, w.length_ms),
        })
        .collect();
    report.max_arrivals_in_window = report.per_window[0].max_arrivals;
    report.max_starts_in_window = report.per_window[0].max_starts;
    let accepted = report.requests.saturating_sub(report.rate_limited);
    report.ideal_ms = ideal_time_windows(accepted, &windows);
    let busy = busy_from.map_or(0, |b| report.finished_at_ms.saturating_sub(b));
    report.busy_ms = busy;
    report.share_of_limit = if busy == 0 {
        0.0
    } else if windows.len() == 1 {
        let rate = accepted as f64 / busy as f64;
        rate / (server.limit as f64 / server.window_ms as f64)
    } else {
        report.ideal_ms as f64 / busy as f64
    };
    report.tokens = token_server.map(|s| s.report(busy));
    report.final_jobs = jobs;
    report
}

/// The most timestamps in any half-open window `[t, t + length)`.
pub fn max_in_window(times: &[Millis], length: DurationMs) -> u32 {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..sorted.len() {
        while sorted[hi] >= sorted[lo] + length {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best as u32
}

/// Time from the first to the last of `n` starts at exactly the limit's rate.
pub fn ideal_time(n: u64, w: Window) -> DurationMs {
    n.saturating_sub(1) * w.length_ms / u64::from(w.limit.max(1))
}

/// Time from the first to the last of `n` starts as early as all `windows` together allow,
/// paced evenly over the shortest one as the limiter paces: each start comes one pacing
/// interval after the one before, and no sooner than a window's length after the start
/// `limit` places before it. With 10 per second and 3,000 per hour, 4,000 starts take 300 s
/// for the first 3,000, wait for the hour to pass the first start, and take 100 s more.
pub fn ideal_time_windows(n: u64, windows: &[Window]) -> DurationMs {
    match windows {
        [] => 0,
        [w] => ideal_time(n, *w),
        _ => {
            let Some(shortest) = windows.iter().min_by_key(|w| w.length_ms) else {
                return 0;
            };
            let interval = shortest.length_ms as f64 / f64::from(shortest.limit.max(1));
            let mut starts: Vec<f64> = Vec::with_capacity(n as usize);
            for i in 0..n as usize {
                let mut at = starts.last().map_or(0.0, |&t| t + interval);
                for w in windows {
                    let limit = w.limit.max(1) as usize;
                    if i >= limit {
                        at = at.max(starts[i - limit] + w.length_ms as f64);
                    }
                }
                starts.push(at);
            }
            starts.last().map_or(0, |&t| t.floor() as DurationMs)
        }
    }
}

/// The headers of the families `HeaderStyle::ResourceSuffix`, `VendorPrefix` and
/// `IntervalDaily` say, for the server's windows as (window, remaining, ms to its reset).
fn family_headers(
    style: HeaderStyle,
    states: &[(Window, u32, DurationMs)],
    server_clock: i64,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut push = |name: &str, value: String| out.push((name.to_string(), value));
    // The window closest to refusing speaks for requests, as the older headers do.
    let Some(&(tightest, remaining, reset_ms)) = states.iter().min_by_key(|s| s.1) else {
        return out;
    };
    match style {
        HeaderStyle::ResourceSuffix => {
            push("x-ratelimit-limit-requests", tightest.limit.to_string());
            push("x-ratelimit-remaining-requests", remaining.to_string());
            push("x-ratelimit-reset-requests", go_duration(reset_ms));
            // Tokens the server does not count: a quota that never runs out.
            let tokens = u64::from(tightest.limit) * 1_000;
            push("x-ratelimit-limit-tokens", tokens.to_string());
            push("x-ratelimit-remaining-tokens", (tokens - 1).to_string());
            push("x-ratelimit-reset-tokens", go_duration(1));
        }
        HeaderStyle::VendorPrefix => {
            push(
                "anthropic-ratelimit-requests-limit",
                tightest.limit.to_string(),
            );
            push(
                "anthropic-ratelimit-requests-remaining",
                remaining.to_string(),
            );
            // Whole seconds on the server's clock, rounded up so the reset is never early.
            let at = server_clock + reset_ms as i64 + 999;
            push("anthropic-ratelimit-requests-reset", rfc3339(at));
        }
        HeaderStyle::IntervalDaily => {
            let (first, first_remaining, _) = states[0];
            push("X-HubSpot-RateLimit-Max", first.limit.to_string());
            push("X-HubSpot-RateLimit-Remaining", first_remaining.to_string());
            push(
                "X-HubSpot-RateLimit-Interval-Milliseconds",
                first.length_ms.to_string(),
            );
            for (i, &(w, left, _)) in states.iter().enumerate() {
                if w.length_ms == 86_400_000 {
                    push("X-HubSpot-RateLimit-Daily", w.limit.to_string());
                    push("X-HubSpot-RateLimit-Daily-Remaining", left.to_string());
                } else if w.length_ms == 1_000 && i > 0 {
                    push("X-HubSpot-RateLimit-Secondly", w.limit.to_string());
                    push("X-HubSpot-RateLimit-Secondly-Remaining", left.to_string());
                }
            }
        }
        HeaderStyle::None | HeaderStyle::XRateLimit | HeaderStyle::Ietf => {}
    }
    out
}

/// A duration as Go's `time.Duration` prints it, to the millisecond: `12ms`, `1.5s`, `6m0s`.
fn go_duration(ms: DurationMs) -> String {
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let (h, m, s, frac) = (
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1_000 % 60,
        ms % 1_000,
    );
    let secs = if frac == 0 {
        format!("{s}s")
    } else {
        format!("{s}.{}s", format!("{frac:03}").trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

/// An instant as an RFC 3339 timestamp in UTC, whole seconds: `2026-12-04T19:30:01Z`.
fn rfc3339(ms: i64) -> String {
    // `Sun, 06 Nov 1994 08:49:37 GMT`, rearranged.
    let d = http_date(ms);
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| d.get(8..11) == Some(*m))
    .map_or(1, |i| i + 1);
    format!(
        "{}-{month:02}-{}T{}Z",
        d.get(12..16).unwrap_or("1970"),
        d.get(5..7).unwrap_or("01"),
        d.get(17..25).unwrap_or("00:00:00")
    )
}

fn http_date(ms: i64) -> String {
    let secs = (ms.max(0) / 1000) as u64;
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// `n` single creates in `lane`, one arrival each, spread evenly over `span_ms` from `from`.
pub fn spread_creates(
    budget: &str,
    lane: Lane,
    n: usize,
    from: Millis,
    span_ms: DurationMs,
) -> Vec<Arrival> {
    (0..n)
        .map(|i| Arrival {
            at: from + span_ms * (i as u64 + 1) / (n as u64 + 1),
            specs: vec![JobSpec {
                budget: budget.into(),
                lane,
                kind: JobKind::Create,
                method: "POST".into(),
                url: format!("https://api.example/contacts?{}={i}", lane.name()),
                body: Some(format!("{{\"{}\":{i}}}", lane.name())),
                ..JobSpec::default()
            }],
        })
        .collect()
}

/// A bulk job of `n` creates on one budget, all enqueued at `at`.
pub fn bulk_creates(budget: &str, n: usize, at: Millis) -> Arrival {
    Arrival {
        at,
        specs: (0..n)
            .map(|i| JobSpec {
                budget: budget.into(),
                lane: Lane::Bulk,
                kind: JobKind::Create,
                method: "POST".into(),
                url: format!("https://api.example/contacts?n={i}"),
                body: Some(format!("{{\"n\":{i}}}")),
                ..JobSpec::default()
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_headers_are_read_back_as_written() {
        assert_eq!(go_duration(0), "0ms");
        assert_eq!(go_duration(12), "12ms");
        assert_eq!(go_duration(1_500), "1.5s");
        assert_eq!(go_duration(1_005), "1.005s");
        assert_eq!(go_duration(360_000), "6m0s");
        assert_eq!(go_duration(3_723_000), "1h2m3s");
        assert_eq!(rfc3339(1_700_000_000_999), "2023-11-14T22:13:20Z");
        let w = |limit, length_ms| Window { limit, length_ms };
        let states = [
            (w(100, 10_000), 40, 2_500),
            (w(250_000, 86_400_000), 1_000, 60_000),
            (w(10, 1_000), 3, 200),
        ];
        let now = 1_700_000_000_000;
        for style in [
            HeaderStyle::ResourceSuffix,
            HeaderStyle::VendorPrefix,
            HeaderStyle::IntervalDaily,
        ] {
            let mut headers = family_headers(style, &states, now as i64);
            headers.push(("Date".into(), http_date(now as i64)));
            let s = crate::headers::read_signal(200, &headers, now);
            let q = s.quota.clone().expect("a quota");
            match style {
                // The window closest to refusing, its reset to the millisecond or (RFC 3339,
                // whole seconds) rounded up.
                HeaderStyle::ResourceSuffix => {
                    assert_eq!(
                        (q.limit, q.remaining, q.reset_after_ms),
                        (Some(10), Some(3), Some(200))
                    );
                    assert_eq!(s.resources.len(), 1, "{s:?}");
                }
                HeaderStyle::VendorPrefix => {
                    assert_eq!(
                        (q.limit, q.remaining, q.reset_after_ms),
                        (Some(10), Some(3), Some(1_000))
                    );
                }
                _ => {
                    assert_eq!((q.limit, q.remaining), (Some(10), Some(3)));
                    assert_eq!(
                        q.windows,
                        vec![w(100, 10_000), w(250_000, 86_400_000), w(10, 1_000)]
                    );
                }
            }
        }
    }

    #[test]
    fn the_ideal_with_several_windows_waits_for_the_longest() {
        let w = |limit, length_ms| Window { limit, length_ms };
        // One window: the old formula.
        assert_eq!(ideal_time_windows(2_000, &[w(100, 1_000)]), 19_990);
        // 10/s alone binds until the hourly quota runs out at 3,000.
        let both = [w(10, 1_000), w(3_000, 3_600_000)];
        assert_eq!(ideal_time_windows(3_000, &both), 299_900);
        assert_eq!(ideal_time_windows(4_000, &both), 3_699_900);
        assert_eq!(ideal_time_windows(0, &both), 0);
    }
}
