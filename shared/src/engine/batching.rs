//! Batching (see `crate::batch`): which ready jobs go together in one request of a budget's
//! batch rule (`batch_members`, `lingers_until`), the request (`start_batch`), and each member's
//! outcome from the batch's answer (`batch_answers`: `on_batch_response`,
//! `on_batch_transport_error`).
//!
//! A batch is one attempt of its budget: the limiter, the concurrency, the round trips and the
//! timeouts see one request, identified by the batch's id (`batch-` and a hash of its members'
//! ids, also its `Idempotency-Key`, so the same members sent again carry the same key). Its
//! members are each `Sending` meanwhile and end, or are tried again, each with its own
//! attempts, as the answer for it says. Only ready jobs are gathered, and of a key only its
//! chain's head is ready, so per-key order holds across batches, and coalescing works on the
//! jobs still waiting as it always does.

use super::*;
use crate::batch::shapes::{batch_body, unfit, BatchItem};
use crate::batch::BatchRule;
use crate::headers::Headers;
use crate::job::Lane;
use crate::resources::Costs;

/// How many ready jobs of each lane a batch is gathered from, per item it may hold: enough to
/// fill it when other jobs are mixed in, few enough that a poll stays cheap.
const GATHER_SCAN_PER_ITEM: usize = 2;

/// A batch's request in flight.
pub(super) struct InFlightBatch {
    pub(super) budget: String,
    /// Which of the budget's `batches` rules.
    pub(super) rule: usize,
    /// Its members, in the order the request carries them.
    pub(super) members: Vec<JobId>,
}

/// Batches whose answer was lost: the same members go again together, with the same key.
#[derive(Default)]
pub(super) struct ResendGroups(pub(super) Vec<Vec<JobId>>);

impl Engine {
    /// The rule of budget `b` that takes `job`, and the job's id from its URL (`inputs`).
    fn batch_rule_of<'b>(
        &self,
        b: &'b Budget,
        job: &Job,
    ) -> Option<(usize, &'b BatchRule, Option<String>)> {
        b.config.batches.iter().enumerate().find_map(|(i, rule)| {
            let captures = rule.captures(&job.method, &job.url)?;
            let endpoint = rule.endpoint_for(&job.url)?;
            let item_id = captures
                .into_iter()
                .find(|(name, _)| *name == rule.id_param)
                .map(|(_, value)| value);
            let item = BatchItem {
                method: &job.method,
                url: &job.url,
                headers: &job.headers,
                body: job.body.as_deref(),
                id: item_id.as_deref(),
            };
            // A conditional change needs its own `If-Match`, which only a sub-request carries.
            let conditional = job.if_match_from_key
                || job
                    .headers
                    .iter()
                    .any(|(n, _)| n.eq_ignore_ascii_case("if-match"));
            if conditional && rule.shape != crate::batch::BatchShape::Requests {
                return None;
            }
            // A batch goes only where the worker script allows, as any job does.
            let allowed = Target::parse(&endpoint).is_ok_and(|t| {
                self.allowed.is_empty() || self.allowed.iter().any(|s| s.covers(&t))
            });
            (allowed && unfit(rule, &endpoint, &item).is_none()).then_some((i, rule, item_id))
        })
    }

    /// The jobs that go with `head`, the job budget `b` would start next, in one batch: `None`
    /// when no rule takes it or no other ready job may go with it (it then goes alone). Its
    /// companions are the ready jobs of the same rule with the same headers (a batch has one
    /// set), in lane order, as many as the rule's `maxItems` and the budget's resources allow;
    /// an `inputs` batch never holds two items of one id (their results could not be told
    /// apart). A batch whose answer was lost goes again with the same members, as far as they
    /// are still ready.
    pub(super) fn batch_members(
        &self,
        b: &Budget,
        head: &JobId,
        now: Millis,
    ) -> Option<(usize, Vec<JobId>)> {
        let head_job = self.table.get(head)?;
        let (rule_index, rule, head_item) = self.batch_rule_of(b, head_job)?;
        let scan = (rule.max_items as usize).saturating_mul(GATHER_SCAN_PER_ITEM);
        let resend = self
            .resend_batches
            .0
            .iter()
            .find(|group| group.contains(head));
        let mut members = vec![head.clone()];
        let mut item_ids: Vec<String> = head_item.into_iter().collect();
        let mut cost = self.costs_of(b, &members);
        for (id, _) in b.ready.in_lane_order(scan) {
            if members.len() >= rule.max_items as usize {
                break;
            }
            // A batch to send again keeps its members, and takes no others.
            let elsewhere = match resend {
                Some(group) => !group.contains(id),
                None => self.resend_batches.0.iter().any(|group| group.contains(id)),
            };
            if id == head || elsewhere {
                continue;
            }
            let Some(job) = self.table.get(id) else {
                continue;
            };
            if !same_batch_headers(&job.headers, &head_job.headers) {
                continue;
            }
            let Some((i, _, item_id)) = self.batch_rule_of(b, job) else {
                continue;
            };
            if i != rule_index {
                continue;
            }
            if let Some(item_id) = item_id {
                if item_ids.contains(&item_id) {
                    continue;
                }
                item_ids.push(item_id);
            }
            if !b.config.resources.is_empty() {
                let with = add_costs(&b.config.resources, &cost, &job.cost);
                let margin = b.state.limiter.margin();
                if b.state
                    .resources
                    .room_at(&b.config.resources, &with, margin, now)
                    > now
                {
                    continue;
                }
                cost = with;
            }
            members.push(id.clone());
        }
        (members.len() > 1).then_some((rule_index, members))
    }

    /// Until when `head`, the job budget `b` would start next, waits for companions: a job
    /// that is not interactive, taken by a batch rule, waits up to the rule's `lingerMs` from
    /// when it became ready while fewer than `maxItems` could go with it. `None`: it need not.
    pub(super) fn lingers_until(&self, b: &Budget, head: &JobId, now: Millis) -> Option<Millis> {
        let job = self.table.get(head)?;
        if job.lane == Lane::Interactive || self.resend_batches.0.iter().any(|g| g.contains(head)) {
            return None;
        }
        let (_, rule, _) = self.batch_rule_of(b, job)?;
        let since = b
            .ready
            .in_lane_order(usize::MAX)
            .find(|(id, _)| *id == head)
            .map_or(now, |(_, since)| since);
        let until = since.saturating_add(rule.linger_ms);
        if until <= now {
            return None;
        }
        let gathered = self.batch_members(b, head, now).map_or(1, |(_, m)| m.len());
        (gathered < rule.max_items as usize).then_some(until)
    }

    /// What `members` together cost of budget `b`'s resources.
    pub(super) fn costs_of(&self, b: &Budget, members: &[JobId]) -> Costs {
        let mut total = Costs::default();
        for id in members {
            if let Some(job) = self.table.get(id) {
                total = add_costs(&b.config.resources, &total, &job.cost);
            }
        }
        total
    }

    /// Starts `members` of budget `budget_name` as one request of its rule `rule`.
    pub(super) fn start_batch(
        &mut self,
        budget_name: String,
        rule_index: usize,
        members: Vec<JobId>,
        now: Millis,
        saved_first: bool,
    ) -> Option<Transmit> {
        let b = self.budgets.get(&budget_name)?;
        let rule = b.config.batches.get(rule_index)?.clone();
        let cost = self.costs_of(b, &members);
        let carrier = batch_id(&members);
        let head = self.table.get(members.first()?)?;
        let endpoint = rule.endpoint_for(&head.url)?;
        let mut headers = self.headers_to_send(head);
        // What is each member's own goes per item (`requests`) or not at all: a batch that
        // carried the head's would speak for every member.
        headers.retain(|(name, _)| {
            !name.eq_ignore_ascii_case("idempotency-key") && !name.eq_ignore_ascii_case("if-match")
        });
        headers.push(("Idempotency-Key".into(), carrier.clone()));
        if !Headers(&headers).has("content-type") {
            headers.push(("Content-Type".into(), "application/json".into()));
        }
        let options = head.options.clone();
        let body = {
            let carried = self.items_of(&rule, &members);
            let items: Vec<BatchItem> = carried.iter().map(CarriedItem::item).collect();
            batch_body(&rule, &endpoint, &items)
        };
        let Ok(body) = body else {
            // `batch_members` took only jobs a batch can carry: this cannot happen, and the
            // head then goes alone rather than not at all.
            let head = members.first()?.clone();
            return self.start_job(budget_name, head, now, saved_first);
        };
        let resend_is_safe = members
            .iter()
            .all(|id| self.table.get(id).is_some_and(may_resend_early));
        let timeout_ms = self.attempt_timeout_of(&budget_name, &carrier, resend_is_safe);
        let mut is_retry = self.was_given_up(&budget_name, &carrier);
        for id in &members {
            is_retry |= self.mark_sending(id, now)?;
            if let Some(job) = self.table.get_mut(id) {
                job.batch = Some(carrier.clone());
            }
        }
        self.resend_batches
            .0
            .retain(|group| !group.iter().any(|id| members.contains(id)));
        let transmit = Transmit {
            job_id: carrier.clone(),
            budget: budget_name.clone(),
            method: rule.endpoint_method.trim().to_ascii_uppercase(),
            url: endpoint,
            headers,
            body: Some(body),
            options,
            timeout_ms,
            save_first: false,
        };
        // An `array` batch carries no key per item: it is saved first, with every member's
        // `batch`, so that a restart sends the same members under the same key, which an API
        // that keeps batches by key answers from what it kept (one save per batch; saving
        // every batch first cost the 2,000-edit run 0.4 s of its 2.5). The other shapes carry
        // each item's own key (`requests`) or the same change by id again (`inputs`): they
        // go at once (their membership is saved if they go back to wait after a lost answer).
        let save_first = saved_first || rule.shape == crate::batch::BatchShape::Array;
        let started = self.count_start(
            budget_name.clone(),
            transmit,
            &cost,
            is_retry,
            &members,
            save_first,
            now,
        )?;
        self.batches.insert(
            carrier,
            InFlightBatch {
                budget: budget_name,
                rule: rule_index,
                members,
            },
        );
        Some(started)
    }

    /// Each member as the batch carries it.
    pub(super) fn items_of(&self, rule: &BatchRule, members: &[JobId]) -> Vec<CarriedItem> {
        members
            .iter()
            .filter_map(|id| self.table.get(id))
            .map(|job| CarriedItem {
                method: job.method.clone(),
                url: job.url.clone(),
                headers: self.etags.request_headers(job),
                body: job.body.clone(),
                id: rule
                    .captures(&job.method, &job.url)
                    .and_then(|c| c.into_iter().find(|(name, _)| *name == rule.id_param))
                    .map(|(_, value)| value),
            })
            .collect()
    }
}

impl Engine {
    /// After a restore: the waiting jobs saved as members of a batch whose answer was not
    /// known go again together, as that batch (see [`Job::batch`]).
    pub(super) fn regroup_restored_batches(&mut self) {
        let mut groups: Vec<(String, Vec<JobId>)> = Vec::new();
        for job in self.table.iter().filter(|j| !j.state.is_terminal()) {
            let Some(key) = &job.batch else {
                continue;
            };
            match groups.iter_mut().find(|(k, _)| k == key) {
                Some((_, members)) => members.push(job.id.clone()),
                None => groups.push((key.clone(), vec![job.id.clone()])),
            }
        }
        for (_, members) in groups {
            if !self
                .resend_batches
                .0
                .iter()
                .any(|g| g.contains(&members[0]))
            {
                self.resend_batches.0.push(members);
            }
        }
    }
}

/// A member's parts a batch carries, owned while the batch is built or read.
pub(super) struct CarriedItem {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
    id: Option<String>,
}

impl CarriedItem {
    pub(super) fn item(&self) -> BatchItem<'_> {
        BatchItem {
            method: &self.method,
            url: &self.url,
            headers: &self.headers,
            body: self.body.as_deref(),
            id: self.id.as_deref(),
        }
    }
}

/// Whether two jobs' own headers let them share a batch's one set: the same apart from what
/// is each job's own (its `Idempotency-Key`, which a create's client sets per job, and an
/// `If-Match`), which the `requests` shape carries per item and the others cannot carry.
fn same_batch_headers(a: &[(String, String)], b: &[(String, String)]) -> bool {
    let shared = |headers: &'_ [(String, String)]| -> Vec<(String, String)> {
        headers
            .iter()
            .filter(|(name, _)| {
                !name.eq_ignore_ascii_case("idempotency-key")
                    && !name.eq_ignore_ascii_case("if-match")
            })
            .map(|(name, value)| (name.to_ascii_lowercase(), value.clone()))
            .collect()
    };
    shared(a) == shared(b)
}

/// `a` and `b` added, for each of `resources`.
fn add_costs(resources: &[crate::config::ResourceConfig], a: &Costs, b: &Costs) -> Costs {
    Costs::new(
        resources
            .iter()
            .map(|r| (r.name.clone(), a.of(r).saturating_add(b.of(r)))),
    )
}

/// A batch's id and `Idempotency-Key`: the same for the same members, whatever their order.
pub(super) fn batch_id(members: &[JobId]) -> JobId {
    // Each id's FNV-1a hash (64 bits: stable across builds and platforms, which `std`'s hasher
    // is not), added: the sum does not depend on the order, so no sort is needed.
    let mut sum: u64 = 0;
    for id in members {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in id.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        sum = sum.wrapping_add(hash);
    }
    format!("batch-{sum:016x}-{}", members.len())
}
