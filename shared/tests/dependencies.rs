//! Dependent jobs (issue 39, part 1): a job that waits for earlier jobs (`after`) and refers to
//! their answers (`{{job:<id>.body.id}}`) is never sent before they are done, never with a
//! reference left in it, and its filled request is saved before it leaves, across kills and
//! restores; a dependency that fails, is cancelled or dismissed takes its dependents with it.

mod common;

use std::collections::BTreeMap;

use common::{budget, burst, config_with, API};
use proptest::prelude::*;
use sluice_shared::config::EngineConfig;
use sluice_shared::engine::{Engine, Response, Transmit, TransportError};
use sluice_shared::job::{Job, JobKind, JobSpec, JobState, RetryWith};
use sluice_shared::random::Rng;

fn config() -> EngineConfig {
    config_with(burst(budget(100, 1_000, 4)))
}

fn engine() -> Engine {
    Engine::new(config(), Rng::seeded(7)).unwrap()
}

fn create(name: &str) -> JobSpec {
    JobSpec {
        kind: JobKind::Create,
        method: "POST".into(),
        url: format!("{API}/contacts"),
        body: Some(format!(r#"{{"name":"{name}"}}"#)),
        ..JobSpec::default()
    }
}

/// A PATCH of the contact job `of` creates, naming its id in the URL and the body.
fn edit_of(of: &str) -> JobSpec {
    JobSpec {
        kind: JobKind::Patch,
        method: "PATCH".into(),
        url: format!("{API}/contacts/{{{{job:{of}.body.id}}}}"),
        headers: vec![(
            "X-Created-At".into(),
            format!("{{{{job:{of}.header.location}}}}"),
        )],
        body: Some(format!(
            r#"{{"id":"{{{{job:{of}.body.id}}}}","city":"Paris"}}"#
        )),
        ..JobSpec::default()
    }
}

/// Starts what may go at `now`, saving first where asked, as the worker does.
fn drain(e: &mut Engine, now: u64) -> Vec<Transmit> {
    e.handle_timeout(now);
    let mut sent = Vec::new();
    while let Some(t) = e.poll_transmit(now) {
        if t.save_first {
            let changes = e.persistence().take_changes();
            e.persistence().on_saved(changes.save);
            e.on_sent(&t.job_id, now);
        }
        sent.push(t);
    }
    sent
}

fn created(id: u64) -> Response {
    Response {
        status: 201,
        headers: vec![("Location".into(), format!("/contacts/{id}"))],
        body: format!(r#"{{"id":{id},"name":"Ada"}}"#),
    }
}

fn status(code: u16) -> Response {
    Response {
        status: code,
        ..Response::default()
    }
}

#[test]
fn a_dependent_waits_for_its_dependency_and_goes_to_the_id_the_server_assigned() {
    let mut e = engine();
    let c = e.enqueue(create("Ada"), 0).unwrap().id;
    let edit = e.enqueue(edit_of(&c), 0).unwrap().id;
    let other = e.enqueue(create("Bob"), 0).unwrap().id;
    assert_eq!(
        e.job(&edit).unwrap().after,
        vec![c.clone()],
        "a job referred to is waited for without being named in `after`"
    );
    let sent = drain(&mut e, 0);
    let ids: Vec<&str> = sent.iter().map(|t| t.job_id.as_str()).collect();
    assert_eq!(
        ids,
        [c.as_str(), other.as_str()],
        "the dependent holds up nothing else"
    );
    let counts = e.snapshot(0).counts;
    assert_eq!(counts.queued, 1, "it counts as pending");
    e.on_response(&c, created(42), 10);
    let sent = drain(&mut e, 10);
    assert_eq!(sent.len(), 1);
    let t = &sent[0];
    assert_eq!(t.job_id, edit);
    assert_eq!(t.url, format!("{API}/contacts/42"));
    // A filled JSON body is written again as a merged patch's is (members in key order).
    assert_eq!(t.body.as_deref(), Some(r#"{"city":"Paris","id":42}"#));
    assert!(t
        .headers
        .contains(&("X-Created-At".into(), "/contacts/42".into())));
    assert!(t.save_first, "a filled request is saved before it leaves");
    assert!(e.job(&edit).unwrap().after.is_empty());
}

#[test]
fn a_browser_encoded_reference_in_the_path_is_read() {
    let mut e = engine();
    let c = e.enqueue(create("Ada"), 0).unwrap().id;
    let mut spec = edit_of(&c);
    spec.url = format!("{API}/contacts/%7B%7Bjob:{c}.body.id%7D%7D");
    let edit = e.enqueue(spec, 0).unwrap().id;
    drain(&mut e, 0);
    e.on_response(&c, created(5), 1);
    let sent = drain(&mut e, 1);
    assert_eq!(sent[0].job_id, edit);
    assert_eq!(sent[0].url, format!("{API}/contacts/5"));
}

/// What storage holds: the jobs and budgets of every save that landed.
#[derive(Default, Clone)]
struct Store {
    jobs: BTreeMap<String, Job>,
    budgets: Vec<sluice_shared::budget::BudgetState>,
}

impl Store {
    fn save(&mut self, e: &mut Engine) {
        let changes = e.persistence().take_changes();
        for job in changes.jobs {
            self.jobs.insert(job.id.clone(), job);
        }
        for id in &changes.removed {
            self.jobs.remove(id);
        }
        for b in changes.budgets {
            self.budgets.retain(|s| s.name != b.name);
            self.budgets.push(b);
        }
        e.persistence().on_saved(changes.save);
    }

    fn restore(&self, now: u64) -> Engine {
        let jobs = self.jobs.values().cloned().collect();
        Engine::restore(config(), Rng::seeded(8), jobs, self.budgets.clone(), now).unwrap()
    }
}

#[test]
fn the_filled_request_is_saved_before_it_is_sent_and_a_restore_sends_it_as_saved() {
    let mut e = engine();
    let mut store = Store::default();
    let c = e.enqueue(create("Ada"), 0).unwrap().id;
    let edit = e.enqueue(edit_of(&c), 0).unwrap().id;
    store.save(&mut e);
    assert_eq!(drain(&mut e, 0).len(), 1);
    e.on_response(&c, created(42), 10);
    // The fill is made at once, in memory; the worker saves before the dependent leaves.
    e.handle_timeout(10);
    let t = e.poll_transmit(10).unwrap();
    assert_eq!(t.job_id, edit);
    assert!(t.save_first);
    store.save(&mut e);
    let saved = &store.jobs[&edit];
    assert_eq!(saved.url, t.url, "the request that leaves is the one saved");
    assert!(saved.after.is_empty() && saved.filled);
    // Killed before the fetch started: the restored job is the filled one.
    let mut restored = store.restore(1_000);
    let again = drain(&mut restored, 1_000);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].job_id, edit);
    assert_eq!(again[0].url, format!("{API}/contacts/42"));
    assert!(again[0].save_first);
}

#[test]
fn a_restore_with_the_dependency_done_but_the_dependent_unfilled_fills_it() {
    let mut e = engine();
    let c = e.enqueue(create("Ada"), 0).unwrap().id;
    let edit = e.enqueue(edit_of(&c), 0).unwrap().id;
    drain(&mut e, 0);
    e.on_response(&c, created(9), 10);
    // Storage holding the dependency done and the dependent as it was enqueued: however that
    // came about, the dependent is not lost.
    let mut jobs: Vec<Job> = e.jobs().cloned().collect();
    for job in &mut jobs {
        if job.id == edit {
            *job = {
                let mut unfilled = job.clone();
                unfilled.url = format!("{API}/contacts/{{{{job:{c}.body.id}}}}");
                unfilled.after = vec![c.clone()];
                unfilled.filled = false;
                unfilled
            };
        }
    }
    let mut restored = Engine::restore(config(), Rng::seeded(3), jobs, vec![], 100).unwrap();
    let sent = drain(&mut restored, 100);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].url, format!("{API}/contacts/9"));
    assert!(sent[0].save_first);
}

#[test]
fn a_dependency_that_fails_fails_its_dependents_naming_it_transitively() {
    let mut e = engine();
    let c = e.enqueue(create("Ada"), 0).unwrap().id;
    let edit = e.enqueue(edit_of(&c), 0).unwrap().id;
    let then = JobSpec {
        method: "DELETE".into(),
        url: format!("{API}/contacts/1"),
        after: vec![edit.clone()],
        ..JobSpec::default()
    };
    let last = e.enqueue(then, 0).unwrap().id;
    drain(&mut e, 0);
    e.on_response(&c, status(422), 5);
    let job = e.job(&edit).unwrap();
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(
        job.last_error.as_ref().unwrap().message,
        format!("job {c}, which this job waits for, failed")
    );
    let job = e.job(&last).unwrap();
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(
        job.last_error.as_ref().unwrap().message,
        format!("job {edit}, which this job waits for, failed")
    );
    assert!(drain(&mut e, 10).is_empty());
}

#[test]
fn cancelling_a_dependency_or_its_group_cancels_the_dependents() {
    let mut e = engine();
    let c = e.enqueue(create("Ada"), 0).unwrap().id;
    let edit = e.enqueue(edit_of(&c), 0).unwrap().id;
    e.cancel(&c, 1).unwrap();
    let job = e.job(&edit).unwrap();
    assert_eq!(job.state, JobState::Cancelled);
    assert!(job
        .last_error
        .as_ref()
        .unwrap()
        .message
        .contains("was cancelled"));

    let (group, _) = e
        .enqueue_many(vec![create("A"), create("B")], Some("g".into()), 2)
        .unwrap();
    let outside = e.enqueue(edit_of(&group[1].id), 2).unwrap().id;
    e.cancel("g", 3).unwrap();
    assert_eq!(e.job(&outside).unwrap().state, JobState::Cancelled);
    assert!(drain(&mut e, 4).is_empty());
}

#[test]
fn an_answer_without_the_value_fails_the_dependent_naming_the_reference() {
    let mut e = engine();
    let c = e.enqueue(create("Ada"), 0).unwrap().id;
    let edit = e.enqueue(edit_of(&c), 0).unwrap().id;
    drain(&mut e, 0);
    let no_id = Response {
        status: 201,
        headers: vec![],
        body: r#"{"name":"Ada"}"#.into(),
    };
    e.on_response(&c, no_id, 5);
    let job = e.job(&edit).unwrap();
    assert_eq!(job.state, JobState::Failed);
    let message = &job.last_error.as_ref().unwrap().message;
    assert!(
        message.contains(&format!("{{{{job:{c}.body.id}}}}")),
        "{message}"
    );
    assert!(message.contains("has nothing at 'body.id'"), "{message}");
    assert!(
        drain(&mut e, 6).is_empty(),
        "nothing is sent with a reference in it"
    );
}

#[test]
fn enqueue_refuses_what_cannot_be_waited_for_and_says_what_to_write() {
    let mut e = engine();
    let message = |e: &mut Engine, spec: JobSpec| e.enqueue(spec, 0).unwrap_err().to_string();
    let m = message(&mut e, edit_of("nobody"));
    assert!(
        m.contains("job nobody") && m.contains("not in the queue"),
        "{m}"
    );
    let c = e.enqueue(create("Ada"), 0).unwrap().id;
    let mut bad = edit_of(&c);
    bad.url = format!("{API}/contacts/{{{{job:{c}.id}}}}");
    let m = message(&mut e, bad);
    assert!(
        m.contains("names no part of the answer") && m.contains("{{job:<id>.body.<path>}}"),
        "{m}"
    );
    let mut unclosed = edit_of(&c);
    unclosed.body = Some(format!("{{{{job:{c}.body.id"));
    assert!(message(&mut e, unclosed).contains("no closing"));
    let mut in_origin = edit_of(&c);
    in_origin.url = format!("https://{{{{job:{c}.body.user}}}}@api.example/x");
    // The origin decides the budget: a reference there is refused with the URL.
    let m = e.enqueue(in_origin, 0).unwrap_err().to_string();
    assert!(m.starts_with("invalid URL"), "{m}");
    drain(&mut e, 0);
    e.on_response(&c, status(400), 1);
    let m = message(&mut e, edit_of(&c));
    assert!(
        m.contains("is failed") && m.contains("retry it first"),
        "{m}"
    );
    let mut own = create("x");
    own.id = Some("me".into());
    own.after = vec!["me".into()];
    assert!(message(&mut e, own).contains("cannot wait for itself"));
}

#[test]
fn a_conflict_on_the_dependency_keeps_dependents_waiting_until_resolved() {
    let mut e = engine();
    let c = e.enqueue(create("Ada"), 0).unwrap().id;
    let edit = e.enqueue(edit_of(&c), 0).unwrap().id;
    drain(&mut e, 0);
    e.on_response(&c, status(409), 5);
    assert_eq!(e.job(&edit).unwrap().state, JobState::Queued);
    assert!(drain(&mut e, 6).is_empty());
    e.retry(&c, RetryWith::default(), 7).unwrap();
    assert_eq!(drain(&mut e, 7)[0].job_id, c);
    e.on_response(&c, created(3), 8);
    assert_eq!(drain(&mut e, 8)[0].url, format!("{API}/contacts/3"));

    let d = e.enqueue(create("Bob"), 10).unwrap().id;
    let edit = e.enqueue(edit_of(&d), 10).unwrap().id;
    drain(&mut e, 10);
    e.on_response(&d, status(412), 11);
    e.dismiss(&d, 12).unwrap();
    let job = e.job(&edit).unwrap();
    assert_eq!(job.state, JobState::Failed);
    assert!(job
        .last_error
        .as_ref()
        .unwrap()
        .message
        .contains("was dismissed"));
}

#[test]
fn one_key_keeps_its_order_and_a_waiting_edit_is_never_merged() {
    let mut e = engine();
    let mut spec = create("Ada");
    spec.key = Some("contact-1".into());
    let c = e.enqueue(spec, 0).unwrap().id;
    let mut first = edit_of(&c);
    first.key = Some("contact-1".into());
    let first = e.enqueue(first, 0).unwrap();
    let mut second = edit_of(&c);
    second.key = Some("contact-1".into());
    second.body = Some(r#"{"phone":"555"}"#.into());
    let second = e.enqueue(second, 0).unwrap();
    assert!(
        !second.coalesced,
        "a waiting edit's request is not known yet"
    );
    // The create conflicts and is retried: it goes ahead of the edits that wait for it.
    assert_eq!(drain(&mut e, 0).len(), 1);
    e.on_response(&c, status(409), 1);
    e.retry(&c, RetryWith::default(), 2).unwrap();
    let sent = drain(&mut e, 2);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].job_id, c);
    e.on_response(&c, created(8), 3);
    let sent = drain(&mut e, 3);
    assert_eq!(sent.len(), 1, "one job of a key at a time");
    assert_eq!(sent[0].job_id, first.id);
    e.on_response(&first.id, status(200), 4);
    let sent = drain(&mut e, 4);
    assert_eq!(sent[0].job_id, second.id);
    assert_eq!(sent[0].url, format!("{API}/contacts/8"));
}

#[test]
fn jobs_of_one_enqueue_many_may_wait_for_each_other() {
    let mut e = engine();
    let mut c = create("Ada");
    c.id = Some("c".into());
    let (ids, _) = e.enqueue_many(vec![c, edit_of("c")], None, 0).unwrap();
    assert_eq!(ids[1].state, JobState::Queued);
    assert_eq!(drain(&mut e, 0).len(), 1);
    e.on_response("c", created(4), 1);
    assert_eq!(drain(&mut e, 1)[0].url, format!("{API}/contacts/4"));
}

#[test]
fn a_job_waiting_for_one_folded_in_the_same_enqueue_many_waits_for_the_job_that_carries_it() {
    let mut e = engine();
    let patch = |id: &str, body: &str| JobSpec {
        id: Some(id.into()),
        kind: JobKind::Patch,
        method: "PATCH".into(),
        url: format!("{API}/contacts/1"),
        key: Some("contact-1".into()),
        body: Some(body.into()),
        ..JobSpec::default()
    };
    let audit = JobSpec {
        method: "POST".into(),
        url: format!("{API}/audit"),
        headers: vec![("X-Status".into(), "{{job:p2.status}}".into())],
        body: Some("{}".into()),
        ..JobSpec::default()
    };
    let specs = vec![patch("p1", r#"{"a":1}"#), patch("p2", r#"{"b":2}"#), audit];
    let (results, _) = e.enqueue_many(specs, None, 0).unwrap();
    assert!(results[1].coalesced && results[1].id == "p1");
    assert_eq!(e.job(&results[2].id).unwrap().after, vec!["p1".to_string()]);
    assert_eq!(drain(&mut e, 0).len(), 1);
    e.on_response("p1", status(200), 1);
    let sent = drain(&mut e, 1);
    assert_eq!(sent[0].job_id, results[2].id);
    assert!(sent[0].headers.contains(&("X-Status".into(), "200".into())));
}

#[derive(Clone, Debug)]
enum Op {
    /// Poll and start what may go (saving first when asked, as the worker does).
    Send,
    /// The oldest request out is answered (by the server, which names each create once per
    /// idempotency key), or lost.
    Answer(bool),
    Save,
    /// The worker stops; the next one restores from storage.
    Kill,
    Advance(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Send),
        3 => any::<bool>().prop_map(Op::Answer),
        2 => Just(Op::Save),
        1 => Just(Op::Kill),
        2 => (1u16..3_000).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Over random kills, restores, saves and lost answers, a dependent is never sent before its
    /// dependency is done, never with a reference in it, always saved as it is sent, and always
    /// to the id the server gave the create.
    #[test]
    fn a_dependent_is_never_sent_early_or_with_a_reference(ops in prop::collection::vec(op(), 1..60)) {
        let mut store = Store::default();
        let mut e = engine();
        let mut now = 0u64;
        let c = e.enqueue(create("Ada"), now).unwrap().id;
        let edit = e.enqueue(edit_of(&c), now).unwrap().id;
        store.save(&mut e);
        // Server side: the id each idempotency key created, and the requests out.
        let mut ids_by_key: BTreeMap<String, u64> = BTreeMap::new();
        let mut out: Vec<Transmit> = Vec::new();
        for op in ops {
            match op {
                Op::Send => {
                    e.handle_timeout(now);
                    while let Some(t) = e.poll_transmit(now) {
                        if t.save_first {
                            store.save(&mut e);
                            e.on_sent(&t.job_id, now);
                        }
                        if t.job_id == edit {
                            prop_assert!(!t.url.contains("{{") && !t.url.contains("%7B"), "{}", t.url);
                            prop_assert!(!t.body.as_deref().unwrap_or("").contains("{{job:"));
                            prop_assert!(t.save_first);
                            let saved = &store.jobs[&edit];
                            prop_assert_eq!(&saved.url, &t.url, "sent as saved");
                            let key = store.jobs[&c].idempotency_key.clone();
                            let id = ids_by_key.get(&key).copied();
                            prop_assert!(id.is_some(), "sent before the create was answered");
                            prop_assert_eq!(&t.url, &format!("{API}/contacts/{}", id.unwrap()));
                        }
                        out.push(t);
                    }
                }
                Op::Answer(arrives) if !out.is_empty() => {
                    let t = out.remove(0);
                    if t.job_id == c {
                        let key = t.headers.iter().find(|(n, _)| n == "Idempotency-Key").unwrap().1.clone();
                        let next = 100 + ids_by_key.len() as u64;
                        let id = *ids_by_key.entry(key).or_insert(next);
                        if arrives {
                            e.on_response(&t.job_id, created(id), now);
                        } else {
                            e.on_transport_error(&t.job_id, TransportError::Timeout, now);
                        }
                    } else if arrives {
                        e.on_response(&t.job_id, status(200), now);
                    } else {
                        e.on_transport_error(&t.job_id, TransportError::Timeout, now);
                    }
                }
                Op::Answer(_) => {}
                Op::Save => store.save(&mut e),
                Op::Kill => {
                    out.clear();
                    now += 1;
                    e = store.restore(now);
                }
                Op::Advance(ms) => now += u64::from(ms),
            }
        }
    }
}
