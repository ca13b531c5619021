//! The strict server: it counts arrivals in exact sliding windows (or, as configured, in fixed
//! windows, and in a leaky bucket and in tokens a minute), refuses with a 429 the moment an
//! arrival would exceed any of them, and keeps an idempotency store that counts applied
//! creates. Strict on purpose: a real API may let a burst slip through, and the simulator must
//! show every one.

use std::collections::{HashMap, HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::headers::{http_date, rate_limit_headers};
use super::simulation::SentRequest;
use super::{max_in_window, Report, WindowPeak};
use crate::config::Window;
use crate::engine::Response;
use crate::random::Rng;
use crate::sim_tokens::{TokenReport, TokenServer};
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

/// How the simulated server counts each of its windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WindowCounting {
    /// Every placement of the window: an arrival is forgotten one window after it came. The
    /// strictest a server can count, and what a server of unknown algorithm is taken for.
    #[default]
    Sliding,
    /// A counter per window on multiples of its length on the server's clock, reset at each
    /// boundary (express-rate-limit's and rate-limiter-flexible's memory stores): what a
    /// budget's `algorithm: 'fixed-window'` is for.
    Fixed,
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
    /// Sliding windows (the default) or fixed ones, for every window the server enforces.
    #[serde(default)]
    pub counting: WindowCounting,
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
            counting: WindowCounting::Sliding,
            extra_windows: vec![],
            tokens_per_minute: None,
        }
    }
}

/// What the server keeps between requests.
pub(super) struct StrictServer<'a> {
    model: &'a ServerModel,
    /// `model.windows()`, once.
    windows: Vec<Window>,
    /// Per window: the arrivals (ours and others') the server counts in it now.
    logs: Vec<VecDeque<Millis>>,
    /// Every arrival of ours the server counted, and every one including those it refused.
    our_arrivals: Vec<Millis>,
    our_attempts: Vec<Millis>,
    /// The last arrival the server accepted, for `ServerModel::no_burst`.
    last_accepted: Option<Millis>,
    tokens: Option<TokenServer>,
    /// The idempotency store: how many times each key came.
    applied: HashMap<String, u64>,
    /// Records made per job (by its `seq`): more than one is a duplicate create.
    records_per_job: HashMap<u64, u64>,
    /// Jobs (by their `seq`) whose first application `Report::applied_per_key` holds: a later
    /// one is not a reordering.
    first_applied: HashSet<u64>,
}

impl<'a> StrictServer<'a> {
    pub(super) fn new(model: &'a ServerModel) -> Self {
        let windows = model.windows();
        Self {
            model,
            logs: vec![VecDeque::new(); windows.len()],
            windows,
            our_arrivals: Vec::new(),
            our_attempts: Vec::new(),
            last_accepted: None,
            tokens: model
                .tokens_per_minute
                .map(|n| TokenServer::new(u64::from(n))),
            applied: HashMap::new(),
            records_per_job: HashMap::new(),
            first_applied: HashSet::new(),
        }
    }

    /// Another caller's request, counted against the same quota. Never refused: what matters
    /// here is only what it leaves us.
    pub(super) fn count_other_caller(&mut self, now: Millis) {
        for log in &mut self.logs {
            log.push_back(now);
        }
        self.last_accepted = Some(now);
    }

    /// Answers one of our requests arriving now: a 429 when any limit is full; otherwise it
    /// counts it, then fails it with a 503 or applies it. `None`: applied, and the response is
    /// lost on its way back (`lost_response_rate`).
    pub(super) fn answer(
        &mut self,
        now: Millis,
        req: &SentRequest,
        rng: &mut Rng,
        report: &mut Report,
    ) -> Option<Response> {
        self.our_attempts.push(now);
        self.forget_old_arrivals(now);
        let wait = self.wait_for_room(now, req.tokens);
        let server_clock = now as i64 - self.model.client_clock_ahead_ms;
        let headers = vec![("Date".to_string(), http_date(server_clock))];
        let (mut response, lost) = match wait {
            Some(wait_ms) => {
                report.rate_limited += 1;
                (self.refuse(wait_ms, server_clock, headers), false)
            }
            None => {
                self.count(now, req.tokens);
                self.handle(req, rng, report, headers)
            }
        };
        let resets = self.resets_in(now);
        response.headers.extend(rate_limit_headers(
            self.model.headers,
            &self.windows,
            &self.logs,
            &resets,
            now,
            server_clock,
            self.tokens.as_mut(),
        ));
        (!lost).then_some(response)
    }

    /// Drops the arrivals a window no longer counts: a sliding window those a window old, a
    /// fixed one those before its current window began.
    fn forget_old_arrivals(&mut self, now: Millis) {
        let counting = self.model.counting;
        let starts: Vec<Millis> = self
            .windows
            .iter()
            .map(|w| now - self.into_fixed_window(now, w))
            .collect();
        for ((log, w), begin) in self.logs.iter_mut().zip(&self.windows).zip(starts) {
            let gone = |t: Millis| match counting {
                WindowCounting::Sliding => t + w.length_ms <= now,
                WindowCounting::Fixed => t < begin,
            };
            while log.front().is_some_and(|&t| gone(t)) {
                log.pop_front();
            }
        }
    }

    /// How far `now` is into its fixed window of `w`, whose boundaries fall on multiples of the
    /// length on the server's clock.
    fn into_fixed_window(&self, now: Millis, w: &Window) -> DurationMs {
        let server_clock = now as i64 - self.model.client_clock_ahead_ms;
        let into = server_clock.rem_euclid(w.length_ms.max(1) as i64) as DurationMs;
        into.min(now)
    }

    /// Per window, how long until the count it holds now has left it: until its oldest arrival
    /// is a window old (sliding), or until its next boundary (fixed).
    fn resets_in(&self, now: Millis) -> Vec<DurationMs> {
        self.logs
            .iter()
            .zip(&self.windows)
            .map(|(log, w)| match self.model.counting {
                WindowCounting::Sliding => log
                    .front()
                    .map_or(0, |&t| (t + w.length_ms).saturating_sub(now)),
                WindowCounting::Fixed => w.length_ms - self.into_fixed_window(now, w),
            })
            .collect()
    }

    /// How long until an arrival now would fit, `None` when it fits now: the longest of the
    /// waits for each sliding window, for the leaky bucket and for tokens.
    fn wait_for_room(&mut self, now: Millis, tokens: u64) -> Option<DurationMs> {
        // Until each window has room again: when the arrival that leaves it one below
        // its limit drops out (others may have filled it past the limit), or, counted in fixed
        // windows, at the next boundary.
        let counting = self.model.counting;
        let room_in = |(log, w): (&VecDeque<Millis>, &Window), reset: DurationMs| {
            let over_by = log.len().checked_sub(w.limit as usize)?;
            match counting {
                WindowCounting::Sliding => log
                    .get(over_by)
                    .map(|&t| (t + w.length_ms).saturating_sub(now)),
                WindowCounting::Fixed => Some(reset),
            }
        };
        let resets = self.resets_in(now);
        let interval = self.interval();
        let tolerance = interval * u64::from(self.model.burst);
        let too_soon = self
            .last_accepted
            .filter(|_| self.model.no_burst)
            .map(|tat: Millis| (tat + interval).saturating_sub(now + tolerance))
            .filter(|&w| w > 0);
        // A leaky bucket with burst is that alone: no sliding window besides.
        let leaky_only = self.model.no_burst && self.model.burst > 0;
        let no_tokens = self.tokens.as_mut().and_then(|s| s.refusal(now, tokens));
        self.logs
            .iter()
            .zip(&self.windows)
            .zip(resets)
            .filter(|_| !leaky_only)
            .filter_map(|(window, reset)| room_in(window, reset))
            .chain(too_soon)
            .chain(no_tokens)
            .max()
    }

    /// Without burst: one interval after the last accepted arrival, in whole ms.
    fn interval(&self) -> DurationMs {
        self.windows[0]
            .length_ms
            .div_ceil(u64::from(self.windows[0].limit))
    }

    /// A 429, with `Retry-After` as the model writes it.
    fn refuse(
        &self,
        wait_ms: DurationMs,
        server_clock: i64,
        mut headers: Vec<(String, String)>,
    ) -> Response {
        match self.model.retry_after {
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
    }

    /// Counts an accepted arrival of ours in every window, the leaky bucket and the tokens.
    fn count(&mut self, now: Millis, tokens: u64) {
        for log in &mut self.logs {
            log.push_back(now);
        }
        // As a theoretical arrival time less one interval: without burst, the last
        // accepted arrival; with it, where the bucket's level stands.
        let interval = self.interval();
        self.last_accepted = Some(match self.last_accepted {
            Some(tat) if self.model.no_burst => (tat + interval).max(now),
            _ => now,
        });
        self.our_arrivals.push(now);
        if let Some(s) = self.tokens.as_mut() {
            s.accept(now, tokens);
        }
    }

    /// A request counted: a 503 now and then (`fault_rate`), else applied. The flag: its
    /// response is lost on the way back.
    fn handle(
        &mut self,
        req: &SentRequest,
        rng: &mut Rng,
        report: &mut Report,
        headers: Vec<(String, String)>,
    ) -> (Response, bool) {
        if rng.unit() < self.model.fault_rate {
            let response = Response {
                status: 503,
                headers,
                body: "{\"message\":\"try later\"}".into(),
            };
            return (response, false);
        }
        let count = self.apply(req, report);
        let lost = rng.unit() < self.model.lost_response_rate;
        let body = if self.tokens.is_some() {
            format!("{{\"usage\":{{\"total_tokens\":{}}}}}", req.tokens)
        } else {
            "{}".into()
        };
        let response = Response {
            status: if count == 1 { 201 } else { 200 },
            headers,
            body,
        };
        (response, lost)
    }

    /// The idempotency store applies a key once; a create that came with a second key for the
    /// same job would make a second record. Returns how many times the request's key came.
    fn apply(&mut self, req: &SentRequest, report: &mut Report) -> u64 {
        let count = match &req.idempotency_key {
            Some(k) => {
                let c = self.applied.entry(k.clone()).or_insert(0);
                *c += 1;
                if *c == 1 {
                    *self.records_per_job.entry(req.seq_tag).or_insert(0) += 1;
                }
                *c
            }
            None => 1,
        };
        // A job sent again because the save of its outcome was lost with the worker is
        // applied again, but it is not a reordering.
        if count == 1 && self.first_applied.insert(req.seq_tag) {
            if let Some(key) = &req.key {
                report
                    .applied_per_key
                    .entry(key.clone())
                    .or_default()
                    .push(req.seq_tag);
            }
        }
        count
    }

    pub(super) fn windows(&self) -> &[Window] {
        &self.windows
    }

    /// Per window, the most of our arrivals, attempts and `starts` in any placement of it, or,
    /// counted in fixed windows, in any one of them (two of them may hold twice the limit
    /// across a boundary, which such a server allows).
    pub(super) fn peaks(&self, starts: &[Millis]) -> Vec<WindowPeak> {
        let most = |times: &[Millis], w: &Window| match self.model.counting {
            WindowCounting::Sliding => max_in_window(times, w.length_ms),
            WindowCounting::Fixed => {
                let mut per_window: HashMap<i64, u32> = HashMap::new();
                for &t in times {
                    let server_clock = t as i64 - self.model.client_clock_ahead_ms;
                    let window = server_clock.div_euclid(w.length_ms.max(1) as i64);
                    *per_window.entry(window).or_insert(0) += 1;
                }
                per_window.values().copied().max().unwrap_or(0)
            }
        };
        self.windows
            .iter()
            .map(|w| WindowPeak {
                limit: w.limit,
                length_ms: w.length_ms,
                max_arrivals: most(&self.our_arrivals, w),
                max_attempts: most(&self.our_attempts, w),
                max_starts: most(starts, w),
            })
            .collect()
    }

    /// Extra records: creates applied more than once.
    pub(super) fn duplicate_creates(&self) -> u64 {
        self.records_per_job.values().map(|c| c - 1).sum()
    }

    /// Repeated keys the idempotency store recognised.
    pub(super) fn deduplicated_retries(&self) -> u64 {
        self.applied.values().map(|c| c - 1).sum()
    }

    pub(super) fn token_report(&self, busy_ms: DurationMs) -> Option<TokenReport> {
        self.tokens.as_ref().map(|s| s.report(busy_ms))
    }
}
