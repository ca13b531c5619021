//! Answers: what a response or its absence does to a job and its budget (`on_sent`,
//! `on_response`, `on_transport_error`); how the job then ends or is tried again is in
//! `endings`.

use super::*;

/// What an answer said, read once for its request: applied to its job, or to each of a
/// batch's members (see `batching`).
pub(super) struct Answer {
    pub(super) signal: ServerSignal,
    /// Whether a `bodyRules` rule said it (the pause reason says so).
    pub(super) said_by_body: bool,
    /// Where the limiter's log holds the request's start.
    pub(super) started: Millis,
    /// Which credentials it went with (their generation, see `credentials`).
    pub(super) credentials: u64,
}

impl Engine {
    /// The request of a job that was saved before it went out ([`Transmit::save_first`]) has
    /// just been handed to the network: its start counts from now, not from when it was
    /// polled, so a slow save cannot push its arrival past the windows' margin.
    pub fn on_sent(&mut self, id: &str, now: Millis) {
        let Some(budget_name) = self.budget_of_attempt(id) else {
            return;
        };
        let Some(b) = self.budgets.get_mut(&budget_name) else {
            return;
        };
        let Some(entry) = b.in_flight.iter_mut().find(|a| a.job == id) else {
            return;
        };
        entry.unsent = false;
        if now > entry.sent {
            let logged = entry.logged.max(now.saturating_add(entry.shifted));
            b.state.limiter.restamp(entry.logged, logged);
            entry.logged = logged;
            entry.sent = now;
            self.saves.budget_changed(budget_name);
        }
    }

    /// The response to a job's request (or a batch's, see `batching`) arrived.
    pub fn on_response(&mut self, id: &str, response: Response, now: Millis) {
        if self.batches.contains_key(id) {
            self.on_batch_response(id, response, now);
            return;
        }
        let mut signal = read_signal(response.status, &response.headers, now);
        let Some((budget_name, trip, _, credentials)) = self.take_in_flight(id, now, Some(&signal))
        else {
            return;
        };
        let id: JobId = id.to_string();
        let said_by_body = self.read_body_rules(&budget_name, &response, &mut signal);
        if let Some(cost) = self.table.get(&id).map(|job| job.cost.clone()) {
            let success = (200..300).contains(&response.status) && !signal.rate_limited;
            let body = success.then_some(response.body.as_str());
            self.correct_resources(&budget_name, &cost, trip.started, body, &signal, now);
        }
        let answer = Answer {
            signal,
            said_by_body,
            started: trip.started,
            credentials,
        };
        self.answer_job(&id, &budget_name, response, &answer, Some(trip), now);
    }

    /// Reads what the budget's `bodyRules` say of `response` into `signal`; whether one did.
    pub(super) fn read_body_rules(
        &self,
        budget_name: &str,
        response: &Response,
        signal: &mut ServerSignal,
    ) -> bool {
        self.budgets.get(budget_name).is_some_and(|b| {
            apply_body_rules(
                &b.config.body_rules,
                response.status,
                &response.body,
                signal,
            )
        })
    }

    /// What an answer says of the resources (tokens, points) a start of `cost` at `started`
    /// spent: the real amounts from a successful answer's `body`, and the server's counts.
    pub(super) fn correct_resources(
        &mut self,
        budget_name: &str,
        cost: &crate::resources::Costs,
        started: Millis,
        body: Option<&str>,
        signal: &ServerSignal,
        now: Millis,
    ) {
        if let Some(b) = self.budgets.get_mut(budget_name) {
            if !b.config.resources.is_empty() {
                b.state.resources.on_answer(
                    &b.config.resources,
                    cost,
                    started,
                    body,
                    &signal.resources,
                    now,
                );
            }
        }
    }

    /// What an answer to job `id` does to the job and its budget: `trip` is the request's own
    /// (its quota is applied), `None` for an item of a batch whose request was answered as a
    /// whole (see `batching`).
    pub(super) fn answer_job(
        &mut self,
        id: &JobId,
        budget_name: &str,
        response: Response,
        answer: &Answer,
        trip: Option<Trip>,
        now: Millis,
    ) {
        let Answer {
            signal,
            said_by_body,
            started,
            credentials,
        } = answer;
        let (said_by_body, started, credentials) = (*said_by_body, *started, *credentials);
        let budget_name = budget_name.to_string();
        let id = id.clone();
        if signal.concurrency_limited {
            self.saves.budget_changed(budget_name.clone());
            self.on_concurrency_refused(&id, &budget_name, now);
            return;
        }
        if let (Some(b), Some(trip)) = (self.budgets.get_mut(&budget_name), trip) {
            if let Some(quota) = &signal.quota {
                // Every start after this request's, in flight or already answered, came after
                // the count the server reported.
                let later = u64::from(
                    b.state
                        .limiter
                        .starts_within(now, now.saturating_sub(started)),
                );
                b.state
                    .apply_quota(quota, trip, later, &b.config.windows, now);
            }
        }
        self.saves.budget_changed(budget_name.clone());
        let refuses_credentials = self.refuses_credentials(&budget_name, response.status, signal);
        if refuses_credentials {
            self.on_credentials_refused(&id, &budget_name, response.status, credentials, now);
            return;
        }
        match classify(response.status, signal.rate_limited) {
            Verdict::Success => {
                if let Some(b) = self.budgets.get_mut(&budget_name) {
                    b.state.consecutive_rate_limits = 0;
                    b.concurrency_cap.on_success(b.config.concurrency, now);
                }
                if let Some(job) = self.table.get_mut(&id) {
                    job.attempts += 1;
                    job.outcome = Some(JobOutcome {
                        status: response.status,
                        headers: response.headers,
                        body: response.body,
                    });
                }
                self.finish(&id, JobState::Done, None, now);
                if let Some(job) = self.table.get(&id) {
                    self.etags.learn(job);
                }
            }
            Verdict::RateLimited => {
                let retry = self.config.retry.clone();
                if let Some(b) = self.budgets.get_mut(&budget_name) {
                    b.state.counters.rate_limited += 1;
                    let own_timing =
                        b.state
                            .observe_rate_limited(started, signal.retry_after_ms, now);
                    if own_timing {
                        b.round_trips.widen();
                        b.follow_round_trips();
                    }
                    // A bare refusal of our own spacing by a server without burst (see
                    // `BudgetState::observe_rate_limited`): it refused that one request, not a
                    // quota. The strict spacing from now on is the answer, not a pause: a
                    // second's pause and its ramp cost nginx's 20 a second a tenth of a 10 s run.
                    // Only the first refusal in a row: a server that refuses every request
                    // (others spent the quota) gets the pause and its doubling, not a request
                    // every interval.
                    let first_in_a_row = b.state.consecutive_rate_limits == 0;
                    if own_timing
                        && first_in_a_row
                        && signal.retry_after_ms.is_none()
                        && b.state.limiter.no_burst()
                    {
                        b.state.consecutive_rate_limits += 1;
                        self.requeue(&id, now);
                        return;
                    }
                    // The answers to requests already in flight when the first 429 of a pause
                    // came are the same refusal, not new ones: they neither double the pause
                    // (four of them would make a second's pause eight) nor count as a streak.
                    let in_pause = b.state.paused_until.is_some_and(|p| p > now);
                    let streak = if in_pause {
                        b.state.consecutive_rate_limits.saturating_sub(1)
                    } else {
                        b.state.consecutive_rate_limits
                    };
                    let shortest = b.state.shortest_window().map(|w| w.length_ms);
                    let wait = signal
                        .retry_after_ms
                        .unwrap_or_else(|| default_pause(streak, shortest, &retry));
                    if !in_pause {
                        b.state.consecutive_rate_limits += 1;
                    }
                    // Say whose wait it is: a bare 429 named none, and a person reading "the
                    // server asked to wait 1 s" would look for a Retry-After that is not there.
                    let answer = if said_by_body {
                        format!("HTTP {} whose body says rate limited", response.status)
                    } else {
                        format!("HTTP {}", response.status)
                    };
                    let reason = if signal.retry_after_ms.is_some() {
                        format!(
                            "the server asked to wait {} ({answer})",
                            human_duration(wait)
                        )
                    } else {
                        format!(
                            "{answer} without Retry-After: pausing {} (our default)",
                            human_duration(wait)
                        )
                    };
                    b.state.pause(now, wait, reason, &mut self.rng);
                }
                // Back to its place at the front of its lane; a 429 is not an attempt.
                self.requeue(&id, now);
            }
            Verdict::Retryable => {
                let error = JobError {
                    status: Some(response.status),
                    message: server_message(response.status, &response.body),
                };
                self.fail_or_retry(&id, &budget_name, error, now);
            }
            Verdict::Conflict => {
                // The server's answer (often the record as it is now) goes to the page, which
                // resolves it: `retry`, with or without a new body, or `dismiss`.
                if let Some(job) = self.table.get_mut(&id) {
                    job.attempts += 1;
                    job.outcome = Some(JobOutcome {
                        status: response.status,
                        headers: response.headers,
                        body: response.body.clone(),
                    });
                }
                let error = JobError {
                    status: Some(response.status),
                    message: format!(
                        "conflict: {} (resolve it: retry as is, retry with a new body, or \
                         dismiss)",
                        server_message(response.status, &response.body)
                    ),
                };
                self.finish(&id, JobState::Conflict, Some(error), now);
            }
            Verdict::Fatal => {
                if let Some(job) = self.table.get_mut(&id) {
                    job.attempts += 1;
                }
                let error = JobError {
                    status: Some(response.status),
                    message: server_message(response.status, &response.body),
                };
                self.finish(&id, JobState::Failed, Some(error), now);
            }
        }
    }

    /// The server refused the job's request for concurrency (too many open at once), not for
    /// its rate: the budget keeps fewer in flight for a while and the job goes back to the
    /// front of its lane, without a pause and without spending an attempt.
    pub(super) fn on_concurrency_refused(&mut self, id: &JobId, budget_name: &str, now: Millis) {
        let wait = match self.budgets.get_mut(budget_name) {
            Some(b) => {
                b.state.counters.rate_limited += 1;
                let open = b.in_flight.len() + 1;
                b.concurrency_cap
                    .on_refused(open, b.config.concurrency, now)
            }
            None => 0,
        };
        if let Some(job) = self.table.get_mut(id) {
            job.not_before = job.not_before.max(now.saturating_add(wait));
        }
        self.requeue(id, now);
    }

    /// The job's request got no response.
    pub fn on_transport_error(&mut self, id: &str, error: TransportError, now: Millis) {
        if self.batches.contains_key(id) {
            self.on_batch_transport_error(id, error, now);
            return;
        }
        let Some((budget_name, _, given_ms, _)) = self.take_in_flight(id, now, None) else {
            return;
        };
        let id: JobId = id.to_string();
        let configured = self.config.retry.timeout_ms;
        match error {
            TransportError::Offline => {
                self.went_offline(now);
                self.requeue(&id, now);
            }
            TransportError::Timeout if given_ms < configured => {
                // Given up at the estimate from measured trips (see `rto`), not at the
                // configured timeout: most likely a lost answer. Tried again with the same
                // idempotency key and twice the time; not an attempt of the job's, so a server
                // slower than anything measured costs a few early tries, never the job.
                if let Some(b) = self.budgets.get_mut(&budget_name) {
                    b.gave_up_early(&id);
                }
                let error = JobError {
                    status: None,
                    message: format!(
                        "no response within {} (2 to 4 times the usual round trip; tried again)",
                        human_duration(given_ms)
                    ),
                };
                self.retry_early(&id, &budget_name, error, now);
            }
            TransportError::Timeout => {
                let error = JobError {
                    status: None,
                    message: format!("no response within {}", human_duration(given_ms)),
                };
                self.fail_or_retry(&id, &budget_name, error, now);
            }
            TransportError::Network(message) => {
                let error = JobError {
                    status: None,
                    message: format!("network error: {message}"),
                };
                self.fail_or_retry(&id, &budget_name, error, now);
            }
        }
    }

    /// A request found the device offline: nothing is sent until the next probe, each one
    /// after twice the wait of the last (a minute at most).
    pub(super) fn went_offline(&mut self, now: Millis) {
        let probe = (2_000u64 << self.offline_streak.min(5)).min(OFFLINE_PROBE_MAX_MS);
        self.offline_streak += 1;
        self.offline_until = Some(now + probe);
    }

    /// The network is back (the browser said so): stop waiting for the next probe.
    pub fn set_online(&mut self) {
        self.offline_until = None;
        self.offline_streak = 0;
    }

    pub fn is_offline(&self, now: Millis) -> bool {
        self.offline_until.is_some_and(|t| t > now)
    }

    /// The budget of an attempt in flight: a batch's, or a sending job's.
    pub(super) fn budget_of_attempt(&self, id: &str) -> Option<String> {
        if let Some(batch) = self.batches.get(id) {
            return Some(batch.budget.clone());
        }
        self.table
            .get(id)
            .filter(|job| job.state == JobState::Sending)
            .map(|job| job.budget.clone())
    }

    /// Ends a request's time in flight: `answer` is what its response said when one came (its
    /// trip is measured), `None` when it failed without one (it may have reached the server at
    /// any time until now).
    pub(super) fn take_in_flight(
        &mut self,
        id: &str,
        now: Millis,
        answer: Option<&ServerSignal>,
    ) -> Option<(String, Trip, DurationMs, u64)> {
        let budget_name = self.budget_of_attempt(id)?;
        let b = self.budgets.get_mut(&budget_name)?;
        let at = b.in_flight.iter().position(|a| a.job == id)?;
        let attempt = b.in_flight.swap_remove(at);
        let sent = attempt.sent;
        // A request that took longer than the fastest may have spent the extra time on its way
        // to the server (a busy network process, a connection to open): it is counted where it
        // may have arrived, its answer time less the fastest trip (see `round_trips` for why
        // that is safe). With no trip measured yet (the first answer since this instance
        // started, whose trip often opened the connection), the whole trip may have been on
        // the way there: in the browser, such a first request arrived 25 ms after its start
        // while the next ones took 3, and with nothing moved the first second held 11 arrivals
        // on a limit of 10.
        let (mut logged, mut shifted) = (attempt.logged, attempt.shifted);
        let latest = if let Some(answer) = answer {
            // A wait the server says it held the request for its turn (`sluice proxy`) is no
            // part of the way there or back: the trip measured is the rest (see
            // `headers::HOLD_FIELD`).
            let trip = now.saturating_sub(sent);
            let measured = trip.saturating_sub(answer.held_ms.unwrap_or(0));
            if !attempt.after_preflight {
                b.round_trips.record(measured);
            }
            // Karn's rule: only answered attempts are measured (see `rto`). The whole trip, a
            // proxy's hold included: the timeout is about when an answer may still come.
            b.rto.record(trip);
            b.answered(id);
            let before = b.state.limiter.margin();
            if b.follow_round_trips() {
                // This attempt is out of the list the narrowing moved: it moves by as much.
                let moved = before.saturating_sub(b.state.limiter.margin());
                logged = logged.saturating_add(moved);
                shifted = shifted.saturating_add(moved);
                self.saves.budget_changed(budget_name.clone());
            }
            let arrived_by = b.round_trips.arrived_by(sent, now);
            let typical = !attempt.after_preflight && b.round_trips.within_spread(measured);
            b.state.limiter.answered(sent, arrived_by, typical);
            arrived_by
        } else {
            now
        };
        // In the log's frame.
        let latest = latest.saturating_add(shifted);
        if b.state.limiter.reached_server_by(logged, latest).is_some() {
            self.saves.budget_changed(budget_name.clone());
        }
        let started = logged;
        let arrived_by = latest;
        if answer.is_none() && latest > logged {
            b.ended_unanswered(sent.saturating_add(shifted), latest, now);
        }
        let unplaced = b.unplaced(arrived_by);
        let sample = now.saturating_sub(sent) as f64;
        b.latency_ms = Some(match b.latency_ms {
            Some(avg) => avg * 0.8 + sample * 0.2,
            None => sample,
        });
        Some((
            budget_name,
            Trip {
                started,
                arrived_by,
                unplaced,
            },
            attempt.timeout_ms,
            attempt.credentials,
        ))
    }

    /// Job `id` goes back to its place in its lane, no attempt spent (a refusal of the
    /// budget's, not of the job: a 429, a concurrency or credentials refusal, being offline).
    pub(super) fn requeue(&mut self, id: &JobId, now: Millis) {
        let _ = self.table.transition(id, JobState::Queued);
        self.saves.job_changed(id.clone());
        self.place(id, now);
    }
}
