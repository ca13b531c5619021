//! A batch's answer (see `batching`): split into each member's answer, which goes through
//! the same code as the answer to a member's own request (`answer_job`), or, when it is the
//! whole batch's (a refusal, a 5xx, a lost or timed-out request), answered for every member
//! at once, with one retry token and one backoff between them.

use super::batching::{CarriedItem, InFlightBatch};
use super::*;
use crate::batch::shapes::{split_answer, BatchItem, ItemAnswer};
use crate::resources::Costs;

impl Engine {
    /// The answer to a batch's request arrived. A successful one (2xx, not a refusal by its
    /// headers or body) is split into each member's answer, which does to that member what
    /// the answer to its own request would (an item's 429 pauses the budget and that member
    /// waits for its turn again; an item's 4xx fails it alone); the batch's quota headers count
    /// once. Any other answer is the whole batch's: a 429 pauses once and every member goes
    /// back to its place, a 5xx retries the members with one retry token between them.
    pub(super) fn on_batch_response(&mut self, carrier: &str, response: Response, now: Millis) {
        let mut signal = read_signal(response.status, &response.headers, now);
        let Some((budget_name, trip, _, credentials)) =
            self.take_in_flight(carrier, now, Some(&signal))
        else {
            return;
        };
        let Some(batch) = self.batches.remove(carrier) else {
            return;
        };
        // Answered: the members' fates are known, and whatever goes again may go with others.
        for id in &batch.members {
            if let Some(job) = self.table.get_mut(id) {
                job.batch = None;
            }
        }
        let said_by_body = self.read_body_rules(&budget_name, &response, &mut signal);
        let cost = match self.budgets.get(&budget_name) {
            Some(b) => self.costs_of(b, &batch.members),
            None => Costs::default(),
        };
        self.correct_resources(&budget_name, &cost, trip.started, None, &signal, now);
        let answer = Answer {
            signal,
            said_by_body,
            started: trip.started,
            credentials,
        };
        let whole = !(200..300).contains(&response.status)
            || answer.signal.rate_limited
            || answer.signal.concurrency_limited;
        let Some(rule) = self
            .budgets
            .get(&budget_name)
            .and_then(|b| b.config.batches.get(batch.rule))
            .cloned()
        else {
            return;
        };
        if whole {
            self.answer_whole_batch(&batch, &budget_name, response, &answer, trip, now);
            return;
        }
        // The batch's own headers (its quota) count once, for the batch; each item's answer
        // then says what happened to that item.
        let carried = self.items_of(&rule, &batch.members);
        let items: Vec<BatchItem> = carried.iter().map(CarriedItem::item).collect();
        // A member that is gone (it cannot be: a sending job is neither cancelled nor
        // forgotten) would shift every answer after it onto the wrong job: none is read then.
        let answers = if items.len() == batch.members.len() {
            split_answer(&rule, response.status, &response.body, &items)
        } else {
            vec![None; batch.members.len()]
        };
        let mut applied_quota = false;
        let mut failed = Vec::new();
        for (id, item_answer) in batch.members.iter().zip(answers) {
            match item_answer {
                Some(ItemAnswer {
                    status,
                    headers,
                    body,
                }) => {
                    let item = Response {
                        status,
                        headers,
                        body,
                    };
                    let mut item_signal = read_signal(item.status, &item.headers, now);
                    let item_said = self.read_body_rules(&budget_name, &item, &mut item_signal);
                    if !applied_quota {
                        item_signal.quota = answer.signal.quota.clone();
                    }
                    let item_answer = Answer {
                        signal: item_signal,
                        said_by_body: item_said,
                        started: answer.started,
                        credentials,
                    };
                    let retryable = classify(item.status, item_answer.signal.rate_limited)
                        == Verdict::Retryable
                        && !item_answer.signal.concurrency_limited
                        && !self.refuses_credentials(
                            &budget_name,
                            item.status,
                            &item_answer.signal,
                        );
                    if retryable {
                        let error = JobError {
                            status: Some(item.status),
                            message: server_message(item.status, &item.body),
                        };
                        failed.push((id.clone(), error));
                    } else {
                        let trip = (!applied_quota).then_some(trip);
                        applied_quota = true;
                        self.answer_job(id, &budget_name, item, &item_answer, trip, now);
                    }
                }
                None => {
                    let error = JobError {
                        status: None,
                        message: format!(
                            "the batch endpoint's answer (HTTP {}) said nothing of this item; \
                             sent again",
                            response.status
                        ),
                    };
                    failed.push((id.clone(), error));
                }
            }
        }
        self.retry_members(failed, &budget_name, None, now);
    }

    /// An answer that refused a batch as a whole (not 2xx, or a 2xx that says rate limited):
    /// the first member takes it as its own request's answer, which pauses the budget, lowers
    /// its concurrency or waits for credentials once; the others follow it back to their
    /// places, or (a failure of the batch) are retried or failed with it.
    fn answer_whole_batch(
        &mut self,
        batch: &InFlightBatch,
        budget_name: &str,
        response: Response,
        answer: &Answer,
        trip: Trip,
        now: Millis,
    ) {
        let Some((first, rest)) = batch.members.split_first() else {
            return;
        };
        let verdict = classify(response.status, answer.signal.rate_limited);
        if verdict == Verdict::Retryable
            && !answer.signal.concurrency_limited
            && !self.refuses_credentials(budget_name, response.status, &answer.signal)
        {
            let error = JobError {
                status: Some(response.status),
                message: format!(
                    "the batch was refused: {}",
                    server_message(response.status, &response.body)
                ),
            };
            let failed = batch
                .members
                .iter()
                .map(|id| (id.clone(), error.clone()))
                .collect();
            self.retry_members(failed, budget_name, None, now);
            return;
        }
        self.answer_job(
            first,
            budget_name,
            response.clone(),
            answer,
            Some(trip),
            now,
        );
        let first_waits = self
            .table
            .get(first)
            .is_some_and(|j| j.state == JobState::Queued);
        for id in rest {
            if first_waits {
                if let Some(not_before) = self.table.get(first).map(|j| j.not_before) {
                    if let Some(job) = self.table.get_mut(id) {
                        job.not_before = job.not_before.max(not_before);
                    }
                }
                self.requeue(id, now);
            } else {
                let echo = Answer {
                    signal: answer.signal.clone(),
                    ..*answer
                };
                self.answer_job(id, budget_name, response.clone(), &echo, None, now);
            }
        }
    }

    /// A batch's request got no answer. Offline: every member waits for the network. Given up
    /// early (most likely a lost answer, see `rto`) or at the timeout: the members go again
    /// together, with the same key, so an API that keeps batches by key does not apply it
    /// twice; one retry token for them all.
    pub(super) fn on_batch_transport_error(
        &mut self,
        carrier: &str,
        error: TransportError,
        now: Millis,
    ) {
        let Some((budget_name, _, given_ms, _)) = self.take_in_flight(carrier, now, None) else {
            return;
        };
        let Some(batch) = self.batches.remove(carrier) else {
            return;
        };
        let carrier: JobId = carrier.to_string();
        let configured = self.config.retry.timeout_ms;
        match error {
            TransportError::Offline => {
                // Never sent: the members may go with others.
                self.went_offline(now);
                for id in &batch.members {
                    if let Some(job) = self.table.get_mut(id) {
                        job.batch = None;
                    }
                    self.requeue(id, now);
                }
            }
            TransportError::Timeout | TransportError::Network(_) => {
                let early = matches!(error, TransportError::Timeout) && given_ms < configured;
                let (message, step) = match error {
                    TransportError::Network(m) => (format!("network error: {m}"), None),
                    _ if early => {
                        if let Some(b) = self.budgets.get_mut(&budget_name) {
                            b.gave_up_early(&carrier);
                        }
                        let step = self.given_up_in_a_row(&budget_name, &carrier) - 1;
                        let message = format!(
                            "no response within {} to the batch (2 to 4 times the usual round \
                             trip; tried again)",
                            human_duration(given_ms)
                        );
                        (message, Some(step))
                    }
                    _ => (
                        format!(
                            "no response within {} to the batch",
                            human_duration(given_ms)
                        ),
                        None,
                    ),
                };
                let error = JobError {
                    status: None,
                    message,
                };
                self.resend_batches.0.push(batch.members.clone());
                let failed = batch
                    .members
                    .iter()
                    .map(|id| (id.clone(), error.clone()))
                    .collect();
                self.retry_members(failed, &budget_name, step, now);
            }
        }
    }

    /// Members of one batch failed (the whole batch, or items of its answer): they are retried
    /// as one request would be, with one retry token for all (a batch of 100 failing once is one
    /// failure of the service, not 100) and one backoff, so that they are ready again together
    /// and go in one batch.
    /// `early_step`: given up early, the backoff step, no attempt spent; `None`: each member
    /// spends an attempt, and the backoff is that of the most tried.
    fn retry_members(
        &mut self,
        failed: Vec<(JobId, JobError)>,
        budget_name: &str,
        early_step: Option<u32>,
        now: Millis,
    ) {
        let Some((_, first_error)) = failed.first() else {
            return;
        };
        let has_token = self.take_retry_token(budget_name, &first_error.clone());
        let mut retried = Vec::with_capacity(failed.len());
        let mut step = early_step.unwrap_or(0);
        for (id, error) in failed {
            if early_step.is_none() {
                match self.count_attempt(&id, &error, now) {
                    Some(attempts) => step = step.max(attempts),
                    None => continue,
                }
            }
            retried.push((id, error));
        }
        let delay = self.backoff_delay(step);
        for (id, error) in retried {
            if has_token {
                self.schedule_retry(&id, error, delay, now);
            } else {
                self.fail_for_trouble(&id, error, now);
            }
        }
    }
}
