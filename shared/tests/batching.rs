//! Batching (issue 38): ready jobs of a rule go together to the API's batch endpoint, each
//! keeping its own outcome; the budget's windows count a batch once and its items resource
//! counts every item; a failed item is retried alone, a sub-request's 429 pauses as a 429 does,
//! a whole-batch 429 or 5xx goes through the usual pause and retry, a lost batch goes again
//! with the same members and key.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use serde_json::{json, Value};
use sluice_shared::batch::{BatchRule, BatchShape};
mod common;

use common::{budget, config_with, drain, engine_with, API};
use sluice_shared::config::{BudgetConfig, ResourceConfig, Window};
use sluice_shared::engine::{Engine, Response, Transmit, TransportError};
use sluice_shared::job::{JobSpec, JobState, Lane};
use sluice_shared::random::Rng;

fn update_rule() -> BatchRule {
    BatchRule {
        method: "PATCH".into(),
        url: "/crm/contacts/:id".into(),
        endpoint: "/crm/contacts/batch/update".into(),
        shape: BatchShape::Inputs,
        max_items: 100,
        ..BatchRule::default()
    }
}

fn graph_rule() -> BatchRule {
    BatchRule {
        method: "POST".into(),
        url: "/v1/contacts".into(),
        endpoint: "/v1/$batch".into(),
        shape: BatchShape::Requests,
        max_items: 20,
        ..BatchRule::default()
    }
}

/// The tests' budget (10 a second, 4 at once) with these batch `rules` and `resources`.
fn batching_budget(rules: Vec<BatchRule>, resources: Vec<ResourceConfig>) -> BudgetConfig {
    BudgetConfig {
        batches: rules,
        resources,
        ..budget(10, 1_000, 4)
    }
}

fn batching_engine(rules: Vec<BatchRule>, resources: Vec<ResourceConfig>) -> Engine {
    engine_with(batching_budget(rules, resources), 11)
}

fn edit(id: u32, lane: Lane, key: Option<&str>) -> JobSpec {
    JobSpec {
        method: "PATCH".into(),
        url: format!("{API}/crm/contacts/{id}"),
        lane,
        key: key.map(str::to_owned),
        headers: vec![("Authorization".into(), "Bearer t".into())],
        body: Some(json!({"properties": {"n": id}}).to_string()),
        ..JobSpec::default()
    }
}

fn enqueue_all(e: &mut Engine, specs: Vec<JobSpec>, now: u64) -> Vec<String> {
    let (enqueued, _) = e.enqueue_many(specs, None, now).unwrap();
    enqueued.into_iter().map(|q| q.id).collect()
}

/// The first requests that start after `from`, following the engine's one timer (within a
/// minute), and when.
fn next_sends(e: &mut Engine, from: u64) -> (u64, Vec<Transmit>) {
    let mut now = from;
    while now < from + 60_000 {
        let sent = drain(e, now);
        if !sent.is_empty() {
            return (now, sent);
        }
        now = e.poll_timeout(now).map_or(now + 10, |t| t.max(now + 1));
    }
    (now, vec![])
}

fn body_of(t: &Transmit) -> Value {
    serde_json::from_str(t.body.as_deref().unwrap_or("null")).unwrap()
}

fn input_ids(t: &Transmit) -> Vec<String> {
    body_of(t)["inputs"]
        .as_array()
        .map(|inputs| {
            inputs
                .iter()
                .map(|i| i["id"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The answer HubSpot gives a batch update: results for the ids that went through, an error
/// entry naming the others in `context.ids`, 207 when any failed.
fn hubspot_answer(ids: &[String], fails: &BTreeMap<String, (&str, u16)>) -> Response {
    let mut results = vec![];
    let mut errors = vec![];
    for id in ids {
        match fails.get(id) {
            None => results.push(json!({"id": id, "properties": {}})),
            Some((category, _)) => errors.push(json!({
                "status": "error", "category": category,
                "message": format!("contact {id}: {category}"), "context": {"ids": [id]},
            })),
        }
    }
    Response {
        status: if errors.is_empty() { 200 } else { 207 },
        headers: vec![],
        body: json!({"status": "COMPLETE", "results": results, "errors": errors}).to_string(),
    }
}

fn ok(t: &Transmit, e: &mut Engine, now: u64) {
    let ids = input_ids(t);
    e.on_response(&t.job_id, hubspot_answer(&ids, &BTreeMap::new()), now);
}

/// 250 edits enqueued at once go as batches of 100, 100 and 50 to the batch endpoint, one
/// request each against the budget's windows, every job done with its own result.
#[test]
fn a_bulk_edit_goes_as_full_batches_and_every_job_ends_with_its_own_outcome() {
    let mut e = batching_engine(vec![update_rule()], vec![]);
    let specs: Vec<JobSpec> = (0..250).map(|n| edit(n, Lane::Bulk, None)).collect();
    let ids = enqueue_all(&mut e, specs, 0);
    // Paced over the second (10 a second): one batch every 100 ms.
    let (first_at, first) = next_sends(&mut e, 0);
    // The ETA counts requests: 250 jobs in batches of 100 at 10 a second is well under a
    // second, not 25 s.
    let eta = e.snapshot(1).eta_ms.unwrap();
    assert!(eta < 1_000, "ETA {eta} ms");
    let (second_at, second) = next_sends(&mut e, first_at + 1);
    let (third_at, third) = next_sends(&mut e, second_at + 1);
    let sizes: Vec<usize> = [&first, &second, &third]
        .iter()
        .flat_map(|sent| sent.iter().map(|t| input_ids(t).len()))
        .collect();
    assert_eq!(sizes, vec![100, 100, 50]);
    assert_eq!(first_at, 0);
    for gap in [second_at - first_at, third_at - second_at] {
        assert!(
            (100..150).contains(&gap),
            "{first_at} {second_at} {third_at}"
        );
    }
    let sent: Vec<Transmit> = [first, second, third].concat();
    for t in &sent {
        assert_eq!(t.method, "POST");
        assert_eq!(t.url, format!("{API}/crm/contacts/batch/update"));
        assert!(t.job_id.starts_with("batch-"));
        assert!(t
            .headers
            .contains(&("Idempotency-Key".into(), t.job_id.clone())));
        assert!(t
            .headers
            .contains(&("Authorization".into(), "Bearer t".into())));
    }
    assert_eq!(e.snapshot(200).counts.sending, 250);
    for t in &sent {
        ok(t, &mut e, 260);
    }
    for id in &ids {
        let job = e.job(id).unwrap();
        assert_eq!(job.state, JobState::Done, "{id}");
        let outcome = job.outcome.as_ref().unwrap();
        assert_eq!(outcome.status, 200);
        assert!(outcome.body.contains("\"id\""), "{}", outcome.body);
    }
    let budget = e.budget_state("api").unwrap();
    assert_eq!(budget.counters.requests, 3, "three requests for 250 jobs");
}

/// Items that fail alone are retried alone (in a later batch), each with its own attempts;
/// an item refused for good fails with its own reason while the others succeed.
#[test]
fn a_failed_item_is_retried_alone_and_a_refused_one_fails_with_its_reason() {
    let mut e = batching_engine(vec![update_rule()], vec![]);
    let ids = enqueue_all(
        &mut e,
        (0..10).map(|n| edit(n, Lane::Bulk, None)).collect(),
        0,
    );
    let sent = drain(&mut e, 25);
    assert_eq!(sent.len(), 1);
    let fails = BTreeMap::from([
        ("3".to_string(), ("SERVICE_UNAVAILABLE", 503)),
        ("4".to_string(), ("SERVICE_UNAVAILABLE", 503)),
        ("7".to_string(), ("OBJECT_NOT_FOUND", 404)),
    ]);
    e.on_response(
        &sent[0].job_id,
        hubspot_answer(&input_ids(&sent[0]), &fails),
        50,
    );
    let state = |e: &Engine, n: usize| e.job(&ids[n]).unwrap().state;
    assert_eq!(state(&e, 0), JobState::Done);
    assert_eq!(state(&e, 3), JobState::RetryWait);
    assert_eq!(state(&e, 7), JobState::Failed);
    let failed = e.job(&ids[7]).unwrap().last_error.clone().unwrap();
    assert_eq!(failed.status, Some(404));
    assert!(
        failed.message.contains("contact 7: OBJECT_NOT_FOUND"),
        "{}",
        failed.message
    );
    assert_eq!(e.job(&ids[3]).unwrap().attempts, 1);
    // The two retried go alone or together (each waits out its own backoff), with nothing
    // else, and are done on their second attempt.
    let mut now = 50;
    let mut retried = vec![];
    while retried.len() < 2 {
        let (at, sent) = next_sends(&mut e, now + 1);
        assert!(!sent.is_empty(), "the failed items were not retried");
        for t in &sent {
            if t.job_id.starts_with("batch-") {
                retried.extend(input_ids(t));
                ok(t, &mut e, at + 10);
            } else {
                retried.push(t.url.rsplit('/').next().unwrap().to_string());
                e.on_response(
                    &t.job_id,
                    Response {
                        status: 200,
                        headers: vec![],
                        body: "{}".into(),
                    },
                    at + 10,
                );
            }
        }
        now = at + 10;
    }
    retried.sort();
    assert_eq!(retried, vec!["3".to_string(), "4".to_string()]);
    assert_eq!(state(&e, 3), JobState::Done);
    assert_eq!(e.job(&ids[3]).unwrap().attempts, 2);
    assert_eq!(e.budget_state("api").unwrap().trouble, None);
}

/// A batch refused whole with 429 pauses the budget once and every member goes back to its
/// place without spending an attempt; one answered 503 spends one retry token for all and an
/// attempt of each, not a failed job.
#[test]
fn a_whole_batch_429_pauses_once_and_a_whole_batch_503_retries_every_member() {
    let mut e = batching_engine(vec![update_rule()], vec![]);
    let ids = enqueue_all(
        &mut e,
        (0..100).map(|n| edit(n, Lane::Bulk, None)).collect(),
        0,
    );
    let sent = drain(&mut e, 0);
    let refused = Response {
        status: 429,
        headers: vec![("Retry-After".into(), "2".into())],
        body: "{}".into(),
    };
    e.on_response(&sent[0].job_id, refused, 30);
    assert!(ids.iter().all(|id| {
        let job = e.job(id).unwrap();
        job.state == JobState::Queued && job.attempts == 0
    }));
    let budget = e.budget_state("api").unwrap();
    assert_eq!(budget.counters.rate_limited, 1);
    assert!(budget.paused_until.is_some_and(|t| t >= 2_030));
    assert!(drain(&mut e, 1_000).is_empty(), "paused");
    let (at, again) = next_sends(&mut e, 1_000);
    assert!(at >= 2_030, "sent at {at}, during the pause");
    assert_eq!(again.len(), 1);
    assert_eq!(
        again[0].job_id, sent[0].job_id,
        "the same members, the same key"
    );
    let busy = Response {
        status: 503,
        headers: vec![],
        body: r#"{"message":"down for a moment"}"#.into(),
    };
    e.on_response(&again[0].job_id, busy, at + 100);
    for id in &ids {
        let job = e.job(id).unwrap();
        assert_eq!((job.state, job.attempts), (JobState::RetryWait, 1), "{id}");
        assert!(job
            .last_error
            .as_ref()
            .unwrap()
            .message
            .contains("down for a moment"));
    }
    assert_eq!(e.budget_state("api").unwrap().trouble, None);
}

/// A batch whose answer is lost goes again with the same members, so with the same key.
#[test]
fn a_lost_batch_goes_again_with_the_same_members_and_key() {
    let mut e = batching_engine(vec![update_rule()], vec![]);
    enqueue_all(
        &mut e,
        (0..30).map(|n| edit(n, Lane::Bulk, None)).collect(),
        0,
    );
    let first = drain(&mut e, 25);
    assert_eq!(first.len(), 1);
    // More jobs arrive meanwhile, and wait for their turn when the lost batch goes again:
    // they do not join it.
    e.enqueue(edit(30, Lane::Bulk, None), 50).unwrap();
    let (_, later) = next_sends(&mut e, 50);
    assert_eq!(later[0].url, format!("{API}/crm/contacts/30"));
    enqueue_all(
        &mut e,
        (31..40).map(|n| edit(n, Lane::Bulk, None)).collect(),
        14_000,
    );
    e.on_transport_error(&first[0].job_id, TransportError::Timeout, 15_025);
    let mut now = 15_025;
    let again = loop {
        let (at, sent) = next_sends(&mut e, now);
        assert!(!sent.is_empty(), "the lost batch was not sent again");
        if let Some(t) = sent.iter().find(|t| input_ids(t).len() == 30) {
            break t.clone();
        }
        assert!(
            sent.iter().all(|t| input_ids(t)
                .iter()
                .all(|id| id.parse::<u32>().unwrap() >= 31)),
            "a lost member went without the others"
        );
        now = at + 1;
    };
    assert_eq!(again.job_id, first[0].job_id);
    assert_eq!(again.body, first[0].body);
}

/// Of a key only the head of its chain is ready: two edits of one record go in two batches,
/// in order, never in one.
#[test]
fn per_key_order_holds_across_batches() {
    let mut e = batching_engine(vec![update_rule()], vec![]);
    let mut specs: Vec<JobSpec> = (0..5).map(|n| edit(n, Lane::Bulk, None)).collect();
    let mut second = edit(2, Lane::Bulk, Some("contact-2"));
    second.body = Some(json!({"properties": {"n": "later"}}).to_string());
    specs[2].key = Some("contact-2".into());
    specs.push(second);
    let ids = enqueue_all(&mut e, specs, 0);
    let first = drain(&mut e, 25);
    assert_eq!(input_ids(&first[0]), vec!["0", "1", "2", "3", "4"]);
    assert!(body_of(&first[0]).to_string().contains("\"n\":2"));
    assert_eq!(e.job(&ids[5]).unwrap().state, JobState::Queued);
    ok(&first[0], &mut e, 40);
    let (_, later) = next_sends(&mut e, 40);
    assert_eq!(later.len(), 1, "the later edit goes alone, to its own URL");
    assert_eq!(later[0].url, format!("{API}/crm/contacts/2"));
    assert!(later[0].body.as_deref().unwrap().contains("later"));
}

/// An interactive job never waits for companions; a bulk job waits `lingerMs` at most.
#[test]
fn interactive_jobs_never_linger_and_bulk_jobs_wait_briefly_for_companions() {
    let mut e = batching_engine(vec![update_rule()], vec![]);
    e.enqueue(edit(1, Lane::Interactive, None), 0).unwrap();
    let sent = drain(&mut e, 0);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].url,
        format!("{API}/crm/contacts/1"),
        "alone: no companion"
    );
    e.enqueue(edit(2, Lane::Bulk, None), 100).unwrap();
    assert!(drain(&mut e, 100).is_empty());
    assert_eq!(e.poll_timeout(100), Some(120));
    e.enqueue(edit(3, Lane::Bulk, None), 110).unwrap();
    let sent = drain(&mut e, 120);
    assert_eq!(sent.len(), 1);
    assert_eq!(input_ids(&sent[0]), vec!["2", "3"]);
}

/// An API that counts every item: the budget's `items` resource holds 150 a window, so no
/// window of 10 s sees more than 150 items started, however few requests that is.
#[test]
fn an_items_resource_keeps_the_items_per_window_while_the_windows_count_requests() {
    let items = ResourceConfig {
        name: "items".into(),
        windows: vec![Window {
            limit: 150,
            length_ms: 10_000,
        }],
        default_cost: 1,
        ..ResourceConfig::default()
    };
    let mut e = batching_engine(vec![update_rule()], vec![items]);
    enqueue_all(
        &mut e,
        (0..400).map(|n| edit(n, Lane::Bulk, None)).collect(),
        0,
    );
    let mut starts: Vec<(u64, usize)> = vec![];
    let mut now = 0;
    while now < 40_000 {
        for t in drain(&mut e, now) {
            starts.push((now, input_ids(&t).len()));
            ok(&t, &mut e, now + 5);
        }
        now += 50;
    }
    let total: usize = starts.iter().map(|s| s.1).sum();
    assert_eq!(total, 400, "{starts:?}");
    for &(t, _) in &starts {
        let in_window: usize = starts
            .iter()
            .filter(|&&(s, _)| s >= t && s < t + 10_000)
            .map(|s| s.1)
            .sum();
        assert!(
            in_window <= 150,
            "{in_window} items in the window from {t}: {starts:?}"
        );
    }
    assert!(starts.len() <= 6, "{starts:?}");
}

fn graph_post(n: u32) -> JobSpec {
    JobSpec {
        kind: sluice_shared::job::JobKind::Create,
        method: "POST".into(),
        url: format!("{API}/v1/contacts"),
        lane: Lane::Bulk,
        // As the page client sends a create: its own key among its headers.
        headers: vec![("Idempotency-Key".into(), format!("key-{n}"))],
        body: Some(json!({"name": format!("c{n}")}).to_string()),
        ..JobSpec::default()
    }
}

/// A sub-request of a `$batch` answered 429 inside the 200 pauses the budget as any 429 and
/// that job alone waits its turn again; each sub-request carried its own idempotency key.
#[test]
fn a_sub_request_429_pauses_the_budget_and_only_that_job_goes_again() {
    let mut e = batching_engine(vec![graph_rule()], vec![]);
    let ids = enqueue_all(&mut e, (0..5).map(graph_post).collect(), 0);
    let sent = drain(&mut e, 25);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].url, format!("{API}/v1/$batch"));
    let requests = body_of(&sent[0])["requests"].as_array().unwrap().clone();
    assert_eq!(requests.len(), 5);
    let keys: BTreeSet<&str> = requests
        .iter()
        .map(|r| r["headers"]["Idempotency-Key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 5, "each create carries its own key");
    assert_eq!(requests[0]["url"], "/contacts");
    let responses: Vec<Value> = requests
        .iter()
        .map(|r| {
            if r["id"] == "2" {
                json!({"id": "2", "status": 429, "headers": {"Retry-After": "3"}, "body": {"error": "slow"}})
            } else {
                json!({"id": r["id"], "status": 201, "body": {"id": 1}})
            }
        })
        .collect();
    let answer = Response {
        status: 200,
        headers: vec![],
        body: json!({ "responses": responses }).to_string(),
    };
    e.on_response(&sent[0].job_id, answer, 60);
    let states: Vec<JobState> = ids.iter().map(|id| e.job(id).unwrap().state).collect();
    assert_eq!(
        states,
        vec![
            JobState::Done,
            JobState::Queued,
            JobState::Done,
            JobState::Done,
            JobState::Done
        ]
    );
    let budget = e.budget_state("api").unwrap();
    assert!(
        budget.paused_until.is_some_and(|t| t >= 3_060),
        "{:?}",
        budget.paused_until
    );
    assert!(drain(&mut e, 2_000).is_empty());
    let again = drain(&mut e, 3_500);
    assert_eq!(again.len(), 1);
    assert_eq!(
        again[0].url,
        format!("{API}/v1/contacts"),
        "alone, to its own URL"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever each item's answers, every job ends with its own outcome (done with a 200 of
    /// its own, or failed), no item is applied twice, edits of one key are applied in order,
    /// and no window sees more than the limit of requests.
    #[test]
    fn every_item_ends_once_in_order(
        jobs in 1usize..160,
        keyed in 0usize..8,
        outcomes in proptest::collection::vec(0u8..10, 64),
        lost in proptest::collection::vec(any::<bool>(), 16),
    ) {
        let mut e = batching_engine(vec![update_rule()], vec![]);
        let mut specs = vec![];
        for n in 0..jobs {
            // The first `keyed` records get two edits each, in order.
            let record = if n < keyed * 2 { (n / 2) as u32 } else { n as u32 };
            let mut spec = edit(record, Lane::Bulk, (n < keyed * 2).then_some("k").map(|_| ""));
            spec.key = (n < keyed * 2).then(|| format!("r{record}"));
            spec.body = Some(json!({"properties": {"seq": n}}).to_string());
            specs.push(spec);
        }
        let ids = enqueue_all(&mut e, specs, 0);
        let mut applied: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut roll = 0usize;
        let mut starts = vec![];
        let mut now = 0;
        let mut in_flight: Vec<(Transmit, u64)> = vec![];
        while now < 600_000
            && e.budget_state("api").unwrap().trouble.is_none()
            && ids.iter().any(|id| !e.job(id).unwrap().state.is_terminal())
        {
            for t in drain(&mut e, now) {
                starts.push(now);
                in_flight.push((t, now + 30));
            }
            let due: Vec<(Transmit, u64)> = in_flight.iter().filter(|(_, at)| *at <= now).cloned().collect();
            in_flight.retain(|(_, at)| *at > now);
            for (t, _) in due {
                roll += 1;
                if lost[roll % lost.len()] && roll.is_multiple_of(3) {
                    e.on_transport_error(&t.job_id, TransportError::Timeout, now);
                    continue;
                }
                let body = body_of(&t);
                let items: Vec<(String, u64)> = if t.job_id.starts_with("batch-") {
                    body["inputs"].as_array().unwrap().iter()
                        .map(|i| (i["id"].as_str().unwrap().to_string(), i["properties"]["seq"].as_u64().unwrap()))
                        .collect()
                } else {
                    let id = t.url.rsplit('/').next().unwrap().to_string();
                    vec![(id, body["properties"]["seq"].as_u64().unwrap())]
                };
                let mut fails = BTreeMap::new();
                for (i, (id, seq)) in items.iter().enumerate() {
                    match outcomes[(roll + i) % outcomes.len()] {
                        0 => { fails.insert(id.clone(), ("SERVICE_UNAVAILABLE", 503)); }
                        1 => { fails.insert(id.clone(), ("VALIDATION_ERROR", 400)); }
                        _ => applied.entry(id.clone()).or_default().push(*seq),
                    }
                }
                if t.job_id.starts_with("batch-") {
                    let ids: Vec<String> = items.iter().map(|i| i.0.clone()).collect();
                    e.on_response(&t.job_id, hubspot_answer(&ids, &fails), now);
                } else {
                    let status = fails.values().next().map_or(200, |f| f.1);
                    e.on_response(&t.job_id, Response { status, headers: vec![], body: "{}".into() }, now);
                }
            }
            now += 10;
        }
        // A lost answer may have been applied: each edit is applied at most once more than
        // it was lost, and an edit applied is never applied again once its job is done.
        for (n, id) in ids.iter().enumerate() {
            let job = e.job(id).unwrap();
            // Retries run out when most answers fail: the budget then waits for the user
            // (`trouble`), and so do the jobs still to retry.
            let in_trouble = e.budget_state("api").unwrap().trouble.is_some();
            prop_assert!(job.state.is_terminal() || in_trouble, "job {} is {:?}", n, job.state);
            let record = if n < keyed * 2 { n / 2 } else { n };
            let times = applied.get(&record.to_string()).map_or(0, |v| v.iter().filter(|&&s| s == n as u64).count());
            if job.state == JobState::Done {
                prop_assert_eq!(times, 1, "job {} applied {} times", n, times);
            } else {
                prop_assert_eq!(times, 0, "failed job {} applied", n);
            }
        }
        for seqs in applied.values() {
            let mut sorted = seqs.clone();
            sorted.sort();
            prop_assert_eq!(seqs, &sorted, "edits of one record applied out of order");
        }
        for &t in &starts {
            let in_window = starts.iter().filter(|&&s| s >= t && s < t + 1_000).count();
            prop_assert!(in_window <= 10, "{} requests in the second from {}", in_window, t);
        }
    }
}

/// The worker is killed while a batch of creates is out: its members were saved with the
/// batch before it left, and the restarted engine sends the same members again, under the
/// same key, even though other jobs came first in the queue meanwhile.
#[test]
fn a_restart_sends_a_batch_in_flight_again_with_the_same_members_and_key() {
    let rule = BatchRule {
        method: "POST".into(),
        url: "/v1/contacts".into(),
        endpoint: "/v1/contacts/batch".into(),
        shape: BatchShape::Array,
        max_items: 10,
        ..BatchRule::default()
    };
    let mut e = batching_engine(vec![rule.clone()], vec![]);
    let first_ids = enqueue_all(&mut e, (0..10).map(graph_post).collect(), 0);
    let (_, sent) = next_sends(&mut e, 0);
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].save_first,
        "the membership is saved before the batch leaves"
    );
    for id in &first_ids {
        assert_eq!(
            e.job(id).unwrap().batch.as_deref(),
            Some(sent[0].job_id.as_str())
        );
    }
    // Jobs enqueued before the stop, saved as waiting.
    let mut jobs: Vec<_> = e.jobs().cloned().collect();
    let budgets: Vec<_> = e.budget_states().cloned().collect();
    let later = enqueue_all(&mut e, (10..15).map(graph_post).collect(), 5);
    jobs.extend(later.iter().map(|id| e.job(id).unwrap().clone()));
    let config = config_with(batching_budget(vec![rule], vec![]));
    let mut restarted = Engine::restore(config, Rng::seeded(12), jobs, budgets, 10_000).unwrap();
    // An interactive create comes first after the restart: left free, the stopped batch's
    // members would be its companions, under another key.
    let mut first = graph_post(99);
    first.lane = Lane::Interactive;
    restarted.enqueue(first, 10_000).unwrap();
    let mut sends = vec![];
    let mut now = 10_000;
    while sends.len() < 2 {
        let (at, sent) = next_sends(&mut restarted, now);
        assert!(!sent.is_empty());
        sends.extend(sent);
        now = at + 1;
    }
    let again = sends
        .iter()
        .find(|t| t.job_id == sent[0].job_id)
        .unwrap_or_else(|| {
            panic!(
                "the stopped batch was regrouped: {:?}",
                sends.iter().map(|t| &t.body).collect::<Vec<_>>()
            )
        });
    assert_eq!(again.body, sent[0].body);
    assert!(again
        .headers
        .contains(&("Idempotency-Key".into(), sent[0].job_id.clone())));
    let again = [again.clone()];
    let answer = Response {
        status: 200,
        headers: vec![],
        body: serde_json::to_string(&vec![json!({"status": 201, "body": {}}); 10]).unwrap(),
    };
    restarted.on_response(&again[0].job_id, answer, 10_100);
    for id in &first_ids {
        let job = restarted.job(id).unwrap();
        assert_eq!((job.state, job.batch.as_deref()), (JobState::Done, None));
    }
}
