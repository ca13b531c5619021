//! Sending: which ready job starts next and when (`poll_transmit`, `poll_timeout`), with the room its budget's windows, concurrency and resources give it.

use super::*;

impl Engine {
    /// The next request to start now among the jobs ready, if any may. Call
    /// [`Engine::handle_timeout`] first when time has passed, then this repeatedly until `None`,
    /// then arm a timer for [`Engine::poll_timeout`]. The start is counted against the budget at once. Persist
    /// [`Persistence::take_changes`] before the fetch when [`Transmit::save_first`] says so (then
    /// report [`Engine::on_sent`]), else start the fetch at once and persist with the next
    /// save. Report every save that lands with [`Persistence::on_saved`].
    pub fn poll_transmit(&mut self, now: Millis) -> Option<Transmit> {
        self.poll_start(now, false)
    }

    /// As [`Engine::poll_transmit`], for a start that goes out only once a save taken after it
    /// landed, whatever the engine would allow (a page request's save carries it): it is
    /// counted as saved first ([`Transmit::save_first`]), so a restore knows that it went out
    /// later than its saved stamp.
    pub fn poll_transmit_saved_first(&mut self, now: Millis) -> Option<Transmit> {
        self.poll_start(now, true)
    }

    pub(super) fn poll_start(&mut self, now: Millis, saved_first: bool) -> Option<Transmit> {
        if self.is_offline(now) || self.storage == StorageMode::Held {
            return None;
        }
        // Per budget: the head of its top lane, and the head that ranks first once aged.
        let mut best: Option<(Rank, String, JobId, Turn)> = None;
        // Heads that wait for room in a resource (see `Engine::backfill`), and those that no
        // longer do.
        let mut head_waits: Vec<(String, Option<(JobId, Millis)>)> = Vec::new();
        for (name, b) in self.budgets.iter() {
            if !b.has_ready() {
                continue;
            }
            match self.start_at(b, now) {
                Some(t) if t <= now => {}
                _ => continue,
            }
            let Some((rank, mut id, turn)) = b.ready.pick(&self.config.aging, now) else {
                continue;
            };
            if let Some(job) = self
                .table
                .get(id)
                .filter(|_| !b.config.resources.is_empty())
            {
                let margin = b.state.limiter.margin();
                let resources = &b.state.resources;
                if resources.room_at(&b.config.resources, &job.cost, margin, now) > now {
                    let since = b.head_waiting_since(id, now);
                    head_waits.push((name.clone(), Some((id.clone(), since))));
                    match self.backfill(b, id, now) {
                        Some(other) => id = other,
                        None => continue,
                    }
                } else if b.head_wait.is_some() {
                    head_waits.push((name.clone(), None));
                }
            }
            if best.as_ref().is_none_or(|(r, _, _, _)| rank < *r) {
                best = Some((rank, name.clone(), id.clone(), turn));
            }
        }
        for (name, wait) in head_waits {
            if let Some(b) = self.budgets.get_mut(&name) {
                b.head_wait = wait;
            }
        }
        let (_, budget_name, id, turn) = best?;
        if let Some(b) = self.budgets.get_mut(&budget_name) {
            b.ready.took(turn);
        }
        let batch = self
            .budgets
            .get(&budget_name)
            .and_then(|b| self.batch_members(b, &id, now));
        match batch {
            Some((rule, members)) => self.start_batch(budget_name, rule, members, now, saved_first),
            None => self.start_job(budget_name, id, now, saved_first),
        }
    }

    /// Starts job `id` of budget `budget_name` alone.
    pub(super) fn start_job(
        &mut self,
        budget_name: String,
        id: JobId,
        now: Millis,
        saved_first: bool,
    ) -> Option<Transmit> {
        let resend_is_safe = self.table.get(&id).is_some_and(may_resend_early);
        let timeout_ms = self.attempt_timeout_of(&budget_name, &id, resend_is_safe);
        let retried_early = self.was_given_up(&budget_name, &id);
        let is_retry = self.mark_sending(&id, now)? || retried_early;
        let job = self.table.get(&id)?;
        let cost = job.cost.clone();
        let transmit = Transmit {
            job_id: id.clone(),
            budget: budget_name.clone(),
            method: job.method.clone(),
            url: job.url.clone(),
            headers: self.headers_to_send(job),
            body: job.body.clone(),
            options: job.options.clone(),
            timeout_ms,
            save_first: false,
        };
        self.count_start(
            budget_name,
            transmit,
            &cost,
            is_retry,
            &[id],
            saved_first,
            now,
        )
    }

    /// How long an attempt of `attempt` (a job, or a batch) is given: the configured timeout,
    /// or less when a lost answer may be sent again early (see `rto`).
    pub(super) fn attempt_timeout_of(
        &self,
        budget_name: &str,
        attempt: &JobId,
        resend_is_safe: bool,
    ) -> DurationMs {
        let configured = self.config.retry.timeout_ms;
        self.budgets
            .get(budget_name)
            .filter(|_| resend_is_safe)
            .map_or(configured, |b| b.attempt_timeout(attempt, configured))
    }

    /// Whether the last attempt of `attempt` was given up early (see `rto`): its next one is a
    /// retry too.
    pub(super) fn was_given_up(&self, budget_name: &str, attempt: &JobId) -> bool {
        self.budgets
            .get(budget_name)
            .is_some_and(|b| b.given_up.iter().any(|(j, _)| j == attempt))
    }

    /// Moves a ready job to sending; `Some(whether it was attempted before)`.
    pub(super) fn mark_sending(&mut self, id: &JobId, now: Millis) -> Option<bool> {
        self.unplace(id);
        let job = self.table.transition(id, JobState::Sending)?.ok()?;
        if job.started_at.is_none() {
            let wait = now.saturating_sub(job.enqueued_at);
            self.counters.waited(job.lane, wait);
        }
        job.started_at = Some(now);
        Some(job.attempts > 0)
    }

    /// Counts a start of budget `budget_name` that carries `members` (one job, or a batch's)
    /// and costs `cost` of its resources, and returns the request to make.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn count_start(
        &mut self,
        budget_name: String,
        transmit: Transmit,
        cost: &crate::resources::Costs,
        is_retry: bool,
        members: &[JobId],
        saved_first: bool,
        now: Millis,
    ) -> Option<Transmit> {
        let retry_config = self.config.retry.clone();
        // A request filled in from another job's answer is in storage before it leaves (see
        // `dependencies`).
        let filled = members
            .iter()
            .any(|id| self.table.get(id).is_some_and(|j| j.filled));
        let credentials = self.credentials_generation(&budget_name);
        let b = self.budgets.get_mut(&budget_name)?;
        let save_first = saved_first
            || filled
            || (self.storage == StorageMode::Recorded
                && (b.mark != Mark::Saved || b.unsaved_starts >= b.config.concurrency));
        b.state.sends_before_saving = true;
        if !save_first {
            b.unsaved_starts += 1;
            b.untaken_starts += 1;
        }
        b.state.record_start(now, is_retry, &retry_config);
        // A batch's members earn retries as their own requests would have: each may fail alone.
        if !is_retry && members.len() > 1 {
            b.state
                .earn_retry_tokens(members.len() as u32 - 1, &retry_config);
        }
        // A request the browser sends a CORS preflight ahead of reaches the server a round
        // trip late: after one that had none (or first of all), a server without burst would
        // see the next one too soon after it. Requests that all carry one are late alike.
        let preflighted = needs_preflight(&transmit.method, &transmit.headers)
            && b.preflights
                .on_start(&transmit.url, now, b.config.preflight_max_age_ms);
        let after_preflight = preflighted && !b.last_start_preflighted;
        if after_preflight {
            b.state.limiter.await_preflight();
        }
        b.last_start_preflighted = preflighted;
        let carried = members.len() as f64;
        b.jobs_per_start = Some(
            b.jobs_per_start
                .map_or(carried, |avg| avg * 0.8 + carried * 0.2),
        );
        b.state.resources.record(&b.config.resources, cost, now);
        if b.config.count_preflights && preflighted {
            b.state.count_preflight(now);
        }
        b.in_flight.push(InFlight {
            job: transmit.job_id.clone(),
            logged: now,
            sent: now,
            shifted: 0,
            unsent: save_first,
            timeout_ms: transmit.timeout_ms,
            after_preflight,
            credentials,
        });
        for id in members {
            if save_first {
                // Written as sending (a plain start is not: see `Changes::started`), so that a
                // restore knows its start went out later than the saved log says (see
                // `Engine::restore_more`).
                self.saves.job_changed(id.clone());
            }
            self.saves.job_started(id.clone());
        }
        self.saves.budget_changed(budget_name);
        Some(Transmit {
            save_first,
            ..transmit
        })
    }

    /// When budget `b`'s next job may start: when its request windows and concurrency allow
    /// one, and its other resources (tokens, points) have room for what the job at the head of
    /// its lanes costs, or for a job behind it that may pass it (see [`Engine::backfill`]).
    pub(super) fn start_at(&self, b: &Budget, now: Millis) -> Option<Millis> {
        let mut t = b.next_start_at(now)?;
        if !b.config.batches.is_empty() {
            if let Some((_, head, _)) = b.ready.pick(&self.config.aging, now) {
                if let Some(until) = self.lingers_until(b, head, now) {
                    t = t.max(until);
                }
            }
        }
        if b.config.resources.is_empty() {
            return Some(t);
        }
        let (_, id, _) = b.ready.pick(&self.config.aging, now)?;
        let cost = &self.table.get(id)?.cost;
        let room =
            b.state
                .resources
                .room_at(&b.config.resources, cost, b.state.limiter.margin(), t);
        if room > t && self.backfill(b, id, t).is_some() {
            return Some(t);
        }
        Some(room)
    }

    /// A ready job that may start at `t` in place of `head`, the job at the head of `b`'s
    /// lanes, which waits for room in a resource: the first of those behind it (in lane order,
    /// [`BACKFILL_SCAN`] per lane) that fits every resource now. Without it, what is left below
    /// the head's cost in each window goes unused while the head waits for the window to
    /// turn: 0.89-0.91 of a token limit with bounds of 1-10% of it (`sluice simulate
    /// --tokens-per-minute`). The head is passed for one window of its resources from when it
    /// started waiting, no longer: then nothing passes it, and it starts once the window has
    /// room for it, within a second window at most.
    pub(super) fn backfill<'b>(&self, b: &'b Budget, head: &JobId, t: Millis) -> Option<&'b JobId> {
        let longest = b
            .config
            .resources
            .iter()
            .flat_map(|r| r.windows.iter().map(|w| w.length_ms))
            .max()?;
        if t.saturating_sub(b.head_waiting_since(head, t)) >= longest {
            return None;
        }
        let margin = b.state.limiter.margin();
        b.ready.behind_heads(BACKFILL_SCAN).find(|id| {
            self.table.get(id).is_some_and(|job| {
                b.state
                    .resources
                    .room_at(&b.config.resources, &job.cost, margin, t)
                    <= t
            })
        })
    }

    /// The next instant at which a request could start (or a backoff ends), if anything waits.
    /// `Some(t)` with `t <= now` means "call `poll_transmit` now". `None`: nothing can happen
    /// until an input arrives (a response, an enqueue, a retry).
    pub fn poll_timeout(&self, now: Millis) -> Option<Millis> {
        let waiting = self.scheduler.has_waiting();
        if let Some(t) = self.offline_until.filter(|&t| t > now) {
            return waiting.then_some(t);
        }
        let mut next = self.scheduler.next_due();
        if self.storage == StorageMode::Held {
            // Nothing starts until a save lands, which wakes the pump anyway.
            return next;
        }
        for b in self.budgets.values() {
            if !b.has_ready() {
                continue;
            }
            if let Some(t) = self.start_at(b, now) {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        // Forgetting done jobs needs no timer of its own: it rides along with every
        // `handle_timeout`, which the pump runs on each turn.
        next
    }
}
