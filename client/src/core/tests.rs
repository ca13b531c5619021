//! The bookkeeping's tests: requests, resends, keep-alives, waits and broadcasts, with a fake
//! clock.

use super::*;
use sluice_shared::job::Lane;
use sluice_shared::json::RawJson;
use sluice_shared::protocol::{decode_request, encode, Envelope, Request, WorkerMessage};
use sluice_shared::status::{StateCounts, Status};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

fn poll<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

fn ready<F: Future + Unpin>(f: &mut F) -> F::Output {
    match poll(f) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("not ready"),
    }
}

/// A request as the worker reads it.
fn sent(text: &str) -> Envelope {
    decode_request(text).unwrap()
}

fn id_of(text: &str) -> String {
    sent(text).request_id
}

fn type_of(text: &str) -> &'static str {
    sent(text).request.kind()
}

/// Enqueues a job at 0 and has the worker answer at 1 that it saved it as `id`, in `state`:
/// the job's `done`.
fn enqueued_done(core: &mut Core, id: &str, coalesced: bool, state: JobState) -> Done {
    let (text, mut p) = enqueue(core, 0.0);
    core.receive(
        &reply(
            &id_of(&text),
            ReplyBody::Enqueued {
                id: id.into(),
                coalesced,
                state,
            },
        ),
        1.0,
    );
    ready(&mut p).ok().unwrap().done.unwrap()
}

fn reply(request_id: &str, body: ReplyBody) -> String {
    encode(&WorkerMessage::Reply {
        request_id: request_id.into(),
        body,
    })
}

fn error(request_id: &str, error: ProtocolError) -> String {
    encode(&WorkerMessage::Error {
        request_id: Some(request_id.into()),
        error,
    })
}

/// A status broadcast with `queued` jobs pending.
fn status(queued: u64) -> String {
    encode(&WorkerMessage::Status {
        status: RawJson::of(&status_of(queued)),
    })
}

fn status_of(queued: u64) -> Status {
    Status {
        counts: StateCounts {
            queued,
            ..StateCounts::default()
        },
        now: 0,
        budgets: vec![],
        groups: vec![],
        lanes: vec![],
        eta_ms: None,
        attempts_per_job: 0.0,
        offline: false,
        warnings: vec![],
        notes: vec![],
    }
}

fn update(id: &str, state: JobState) -> JobUpdate {
    JobUpdate {
        id: id.into(),
        state,
        lane: Lane::Bulk,
        key: None,
        group_id: None,
        budget: "api".into(),
        attempts: 1,
        not_before: 0,
        coalesced: 0,
        last_error: None,
        outcome: None,
        withheld: false,
        waiting_for: Vec::new(),
    }
}

fn jobs_broadcast(updates: Vec<JobUpdate>) -> String {
    encode(&WorkerMessage::Jobs {
        updates,
        removed: vec![],
        discarded: vec![],
    })
}

fn enqueue(core: &mut Core, now: f64) -> (String, Pending) {
    let (text, _, pending) = enqueue_via(core, now);
    (text, pending)
}

fn enqueue_via(core: &mut Core, now: f64) -> (String, Via, Pending) {
    core.request(
        Request::Enqueue {
            job: Default::default(),
        },
        now,
    )
}

#[test]
fn a_reply_settles_its_request_once() {
    let mut core = Core::new("c", Timing::default());
    let (text, _, mut p) = core.request(Request::Snapshot, 0.0);
    assert_eq!(type_of(&text), "snapshot");
    assert!(poll(&mut p).is_pending());
    let r = reply(&id_of(&text), ReplyBody::Alive);
    assert_eq!(core.receive(&r, 1.0), Received::Settled);
    assert_eq!(ready(&mut p).ok().unwrap().body, ReplyBody::Alive);
    // The answer to a resent copy arrives too: ignored.
    assert!(matches!(core.receive(&r, 2.0), Received::Ignored(_)));
}

#[test]
fn request_ids_are_unique_and_prefixed() {
    let mut core = Core::new("tab7", Timing::default());
    let (a, _, _) = core.request(Request::Snapshot, 0.0);
    let (b, _, _) = core.request(Request::Snapshot, 0.0);
    assert!(id_of(&a).starts_with("tab7-"));
    assert_ne!(id_of(&a), id_of(&b));
}

#[test]
fn an_error_reply_rejects_with_the_workers_error() {
    let mut core = Core::new("c", Timing::default());
    let (text, _, mut p) = core.request(Request::Dismiss { id: "x".into() }, 0.0);
    let err = error(&id_of(&text), ProtocolError::NotFound { id: "x".into() });
    core.receive(&err, 1.0);
    let e = ready(&mut p).err().unwrap();
    assert_eq!(e.code(), "not-found");
    assert_eq!(e.to_string(), "no job or group 'x'");
}

#[test]
fn an_unavailable_worker_gets_the_request_again_instead_of_failing_it() {
    let t = Timing::default();
    let mut core = Core::new("c", t.clone());
    let (text, _, mut p) = core.request(Request::Cancel { target: "g".into() }, 0.0);
    let unavailable = error(
        &id_of(&text),
        ProtocolError::Unavailable {
            message: "a newer version of the worker is taking over the queue".into(),
        },
    );
    assert!(matches!(
        core.receive(&unavailable, 10.0),
        Received::Ignored(_)
    ));
    assert!(poll(&mut p).is_pending());
    // A new controller gets it at once; otherwise the usual wait applies.
    assert_eq!(core.resend_all(20.0), vec![text.clone()]);
    assert!(core.tick(20.0 + t.resend_after_ms - 1.0).is_empty());
    assert_eq!(core.tick(20.0 + t.resend_after_ms), vec![text.clone()]);
    let r = reply(&id_of(&text), ReplyBody::Cancelled { ids: vec![] });
    assert_eq!(core.receive(&r, 30.0), Received::Settled);
    assert_eq!(
        ready(&mut p).ok().unwrap().body,
        ReplyBody::Cancelled { ids: vec![] }
    );
}

/// A core whose port the worker took (and spoke over), after an event at `now`.
fn with_open_port(t: &Timing, now: f64) -> Core {
    let mut core = Core::new("c", t.clone());
    assert!(core.posting_event(now));
    core.port_answered();
    heard(&mut core, now);
    assert_eq!(core.port_state(), PortState::Open);
    core
}

fn heard(core: &mut Core, now: f64) {
    core.receive(&jobs_broadcast(vec![]), now);
}

#[test]
fn requests_take_the_port_once_the_worker_answered_over_it_and_while_it_is_awake() {
    let t = Timing::default();
    let mut core = Core::new("c", t.clone());
    let (_, via, _) = core.request(Request::Snapshot, 0.0);
    assert_eq!(via, Via::Event);
    // The first event offers a port, later ones do not while it is pending or open.
    assert!(core.posting_event(0.0));
    assert!(!core.posting_event(1.0));
    assert_eq!(core.port_state(), PortState::Offered);
    let (_, via, _) = core.request(Request::Snapshot, 2.0);
    assert_eq!(via, Via::Event, "not before the worker answered over it");
    core.port_answered();
    let (_, via, _) = core.request(Request::Snapshot, 2.5);
    assert_eq!(via, Via::Event, "not before the worker said something");
    heard(&mut core, 2.5);
    let (_, via, _) = core.request(Request::Snapshot, 3.0);
    assert_eq!(via, Via::Port);
    // Long after the last event the worker may have stopped: a port message would not
    // start it, an event does, and it brings a new port for the worker it may start.
    let late = 1.0 + t.port_fresh_ms;
    heard(&mut core, late);
    let (_, via, _) = core.request(Request::Snapshot, late);
    assert_eq!(via, Via::Event);
    assert!(core.posting_event(late));
    let (_, via, _) = core.request(Request::Snapshot, late + 1.0);
    assert_eq!(via, Via::Event);
    core.port_answered();
    let (_, via, _) = core.request(Request::Snapshot, late + 2.0);
    assert_eq!(via, Via::Port);
    // Events while it is open keep it.
    assert!(!core.posting_event(late + 3.0));
}

#[test]
fn a_port_request_left_unanswered_goes_again_as_an_event_and_gives_up_the_port() {
    // No `close` event tells a page that the worker behind its port stopped: the silence
    // does, soon (an enqueue sent as an event waits far longer for its resend).
    let t = Timing::default();
    assert!(t.port_answer_ms < t.resend_after_ms);
    let mut core = with_open_port(&t, 0.0);
    let (text, via, _p) = enqueue_via(&mut core, 1.0);
    assert_eq!(via, Via::Port);
    assert!(core.tick(t.port_answer_ms).is_empty());
    assert_eq!(core.port_state(), PortState::Open);
    let resent_at = 1.0 + t.port_answer_ms;
    assert_eq!(core.tick(resent_at), vec![text.clone()]);
    assert_eq!(core.port_state(), PortState::None);
    let (_, via, _) = core.request(Request::Snapshot, resent_at + 1.0);
    assert_eq!(via, Via::Event);
    // The copy sent as an event waits as long as any enqueue sent that way.
    assert!(!core
        .tick(resent_at + t.slow_resend_after_ms - 1.0)
        .contains(&text));
    assert!(core
        .tick(resent_at + t.slow_resend_after_ms)
        .contains(&text));
}

#[test]
fn a_quiet_worker_gets_events_not_port_messages() {
    // It may have been stopped since; an event starts it again, a port message would not.
    let t = Timing::default();
    let mut core = with_open_port(&t, 0.0);
    let (_, via, _) = core.request(Request::Snapshot, t.port_heard_ms - 1.0);
    assert_eq!(via, Via::Port);
    let (_, via, _) = core.request(Request::Snapshot, t.port_heard_ms);
    assert_eq!(via, Via::Event);
}

#[test]
fn large_batches_and_job_lists_never_take_the_port() {
    let t = Timing::default();
    let mut core = with_open_port(&t, 0.0);
    let large = [
        Request::EnqueueMany {
            jobs: vec![],
            group_id: None,
        },
        Request::Jobs {
            group_id: None,
            ids: None,
        },
    ];
    for request in large {
        let kind = request.kind();
        let (_, via, _) = core.request(request, 1.0);
        assert_eq!(via, Via::Event, "{kind}");
    }
}

#[test]
fn a_closed_client_offers_no_port() {
    let mut core = Core::new("c", Timing::default());
    core.close();
    assert!(!core.posting_event(0.0));
}

#[test]
fn unanswered_requests_are_resent_then_given_up() {
    let t = Timing::default();
    let mut core = Core::new("c", t.clone());
    let (snap, _, mut p) = core.request(Request::Snapshot, 0.0);
    let (enq, _e) = enqueue(&mut core, 0.0);
    assert!(core.tick(t.resend_after_ms - 1.0).is_empty());
    // The snapshot is resent after the short wait, the enqueue only after the long one.
    assert_eq!(core.tick(t.resend_after_ms), vec![snap.clone()]);
    assert_eq!(
        core.tick(t.slow_resend_after_ms),
        vec![snap.clone(), enq.clone()]
    );
    let mut now = t.slow_resend_after_ms;
    for _ in 0..t.max_sends {
        now += t.slow_resend_after_ms;
        core.tick(now);
    }
    assert_eq!(
        ready(&mut p).err(),
        Some(ClientError::NoAnswer {
            request: "snapshot",
            sends: t.max_sends
        })
    );
}

#[test]
fn an_enqueue_reply_gives_a_done_that_a_broadcast_resolves() {
    let mut core = Core::new("c", Timing::default());
    let mut done = enqueued_done(&mut core, "j1", false, JobState::Queued);
    assert!(poll(&mut done).is_pending());
    assert!(core.has_work());
    // Non-terminal news changes nothing.
    core.receive(&jobs_broadcast(vec![update("j1", JobState::Sending)]), 2.0);
    assert!(poll(&mut done).is_pending());
    let mut u = update("j1", JobState::Done);
    u.outcome = Some(JobOutcome {
        status: 201,
        headers: vec![("location".into(), "/api/contacts/1".into())],
        body: "{}".into(),
    });
    let b = jobs_broadcast(vec![u]);
    assert_eq!(core.receive(&b, 3.0), Received::Broadcast);
    assert_eq!(ready(&mut done).unwrap().status, 201);
    assert!(!core.has_work());
}

#[test]
fn failures_and_cancels_reject_with_a_reason() {
    let mut core = Core::new("c", Timing::default());
    let mut failed = core.wait_done("f", 0.0);
    let mut cancelled = core.wait_done("c", 0.0);
    let mut f = update("f", JobState::Failed);
    f.last_error = Some(JobError {
        status: Some(400),
        message: "HTTP 400: name is required".into(),
    });
    core.receive(
        &jobs_broadcast(vec![f, update("c", JobState::Cancelled)]),
        1.0,
    );
    let e = ready(&mut failed).unwrap_err();
    assert_eq!(e.reason, "HTTP 400: name is required");
    assert_eq!(e.status, Some(400));
    assert_eq!(e.state, Some(JobState::Failed));
    assert_eq!(ready(&mut cancelled).unwrap_err().reason, "cancelled");
}

#[test]
fn a_job_that_ended_before_anyone_waited_is_remembered() {
    let mut core = Core::new("c", Timing::default());
    core.receive(&jobs_broadcast(vec![update("early", JobState::Done)]), 0.0);
    let mut d = core.wait_done("early", 1.0);
    assert!(ready(&mut d).is_ok());
}

#[test]
fn a_retry_forgets_the_old_failure() {
    let mut core = Core::new("c", Timing::default());
    core.receive(&jobs_broadcast(vec![update("j", JobState::Failed)]), 0.0);
    let (text, _, mut p) = core.request(
        Request::Retry {
            id: "j".into(),
            body: None,
            headers: None,
        },
        1.0,
    );
    core.receive(
        &reply(&id_of(&text), ReplyBody::Retried { id: "j".into() }),
        2.0,
    );
    let mut done = ready(&mut p).ok().unwrap().done.unwrap();
    assert!(
        poll(&mut done).is_pending(),
        "must not resolve from the old failure"
    );
    core.receive(&jobs_broadcast(vec![update("j", JobState::Done)]), 3.0);
    assert!(ready(&mut done).is_ok());
}

#[test]
fn a_job_that_ended_at_once_resolves_at_once() {
    let mut core = Core::new("c", Timing::default());
    let mut done = enqueued_done(&mut core, "j", true, JobState::Cancelled);
    assert_eq!(ready(&mut done).unwrap_err().reason, "cancelled");
    assert!(!core.has_work());
}

#[test]
fn a_conflict_ends_done_with_the_servers_answer_for_the_page_to_resolve() {
    let mut core = Core::new("c", Timing::default());
    let mut done = enqueued_done(&mut core, "j", false, JobState::Queued);
    let answer = JobOutcome {
        status: 409,
        headers: vec![("etag".into(), "\"v7\"".into())],
        body: "{\"name\":\"Ada\"}".into(),
    };
    let conflict = JobUpdate {
        last_error: Some(JobError {
            status: Some(409),
            message: "conflict: HTTP 409".into(),
        }),
        outcome: Some(answer.clone()),
        ..update("j", JobState::Conflict)
    };
    core.receive(&jobs_broadcast(vec![conflict]), 2.0);
    let end = ready(&mut done).unwrap_err();
    assert_eq!(end.state, Some(JobState::Conflict));
    assert_eq!(end.status, Some(409));
    assert_eq!(end.outcome, Some(answer));
}

#[test]
fn ticks_are_frequent_enough_for_every_period() {
    assert_eq!(Timing::default().tick_ms(), 1_000.0);
    let t = Timing {
        keep_alive_ms: 300.0,
        ..Timing::default()
    };
    assert_eq!(t.tick_ms(), 150.0);
    let t = Timing {
        resend_after_ms: 30.0,
        ..Timing::default()
    };
    assert_eq!(t.tick_ms(), 50.0);
}

#[test]
fn keep_alives_flow_only_while_work_is_pending() {
    let t = Timing::default();
    let mut core = Core::new("c", t.clone());
    assert!(!core.needs_ticks());
    assert!(core.tick(0.0).is_empty());
    let _d = core.wait_done("j", 0.0);
    assert!(core.needs_ticks());
    let posts = core.tick(1.0);
    assert_eq!(
        posts.iter().map(|p| type_of(p)).collect::<Vec<_>>(),
        ["keepAlive"]
    );
    // Not again before the interval, and never two at once.
    assert!(core.tick(2.0).is_empty());
    let keep_alive_id = id_of(&posts[0]);
    core.receive(&reply(&keep_alive_id, ReplyBody::Alive), 3.0);
    let posts = core.tick(1.0 + t.keep_alive_ms);
    assert!(posts.iter().any(|p| type_of(p) == "keepAlive"));
}

#[test]
fn a_status_with_pending_jobs_keeps_the_worker_alive() {
    let mut core = Core::new("c", Timing::default());
    let status = r#"{"type":"status","status":{"now":0,"counts":{"queued":3,"sending":0,"retryWait":0,"done":0,"failed":0,"cancelled":0},"budgets":[],"groups":[],"lanes":[],"etaMs":null,"attemptsPerJob":1.0,"offline":false,"warnings":[]}}"#;
    assert_eq!(core.receive(status, 0.0), Received::Broadcast);
    assert!(core.has_work());
    assert_eq!(type_of(&core.tick(0.0)[0]), "keepAlive");
}

#[test]
fn an_old_status_is_refreshed() {
    let t = Timing::default();
    let mut core = Core::new("c", t.clone());
    let status = r#"{"type":"status","status":{"now":0,"counts":{"queued":3,"sending":0,"retryWait":0,"done":0,"failed":0,"cancelled":0},"budgets":[],"groups":[],"lanes":[],"etaMs":null,"attemptsPerJob":1.0,"offline":false,"warnings":[]}}"#;
    core.receive(status, 0.0);
    let mut now = 0.0;
    let mut asked = None;
    while now <= 3.0 * t.keep_alive_ms {
        for p in core.tick(now) {
            if type_of(&p) == "snapshot" {
                asked = Some(p);
            }
        }
        now += 1_000.0;
    }
    let asked = asked.expect("a snapshot after 3 keep-alive intervals");
    let idle = ReplyBody::Snapshot {
        status: RawJson::of(&status_of(0)),
    };
    assert_eq!(
        core.receive(&reply(&id_of(&asked), idle), now),
        Received::Settled
    );
    assert!(!core.has_work());
}

#[test]
fn a_job_whose_broadcast_withheld_its_outcome_is_asked_for_before_done_resolves() {
    let mut core = Core::new("c", Timing::default());
    let mut waiting = core.wait_done("theirs", 0.0);
    let withheld = JobUpdate {
        withheld: true,
        ..update("theirs", JobState::Done)
    };
    assert_eq!(
        core.receive(&jobs_broadcast(vec![withheld.clone()]), 1.0),
        Received::Broadcast
    );
    assert!(
        poll(&mut waiting).is_pending(),
        "not resolved without its outcome"
    );
    let posts = core.take_posts();
    assert_eq!(posts.len(), 1, "asked at once, not at the next tick");
    assert_eq!(
        sent(&posts[0]).request,
        Request::Jobs {
            group_id: None,
            ids: Some(vec!["theirs".into()])
        }
    );
    let full = JobUpdate {
        outcome: Some(JobOutcome {
            status: 201,
            headers: vec![],
            body: "{}".into(),
        }),
        ..update("theirs", JobState::Done)
    };
    core.receive(
        &reply(&id_of(&posts[0]), ReplyBody::Jobs { jobs: vec![full] }),
        2.0,
    );
    assert_eq!(ready(&mut waiting).map(|o| o.status), Ok(201));

    // Heard before anyone waited: a later `done` asks too.
    core.receive(
        &jobs_broadcast(vec![JobUpdate {
            id: "later".into(),
            ..withheld
        }]),
        3.0,
    );
    assert!(core.take_posts().is_empty(), "nobody waits yet");
    let mut later = core.wait_done("later", 4.0);
    let posts = core.take_posts();
    assert_eq!(posts.len(), 1);
    // The job is gone by then: whoever waits is told so, not left waiting.
    core.receive(
        &reply(&id_of(&posts[0]), ReplyBody::Jobs { jobs: vec![] }),
        5.0,
    );
    assert!(ready(&mut later).is_err());
}

#[test]
fn silence_while_waiting_asks_for_the_job_list() {
    let t = Timing::default();
    let mut core = Core::new("c", t.clone());
    let mut known = core.wait_done("known", 0.0);
    let mut gone = core.wait_done("gone", 0.0);
    let posts = core.tick(t.reconcile_after_ms);
    let list = posts
        .iter()
        .find(|p| type_of(p) == "jobs")
        .expect("a job list request");
    // Registered after the list was asked for: must not be judged by it.
    let mut late = core.wait_done("late", t.reconcile_after_ms + 1.0);
    core.receive(
        &reply(
            &id_of(list),
            ReplyBody::Jobs {
                jobs: vec![update("known", JobState::Done)],
            },
        ),
        t.reconcile_after_ms + 2.0,
    );
    assert!(ready(&mut known).is_ok());
    assert!(ready(&mut gone)
        .unwrap_err()
        .reason
        .contains("no longer knows"));
    assert!(poll(&mut late).is_pending());
}

#[test]
fn a_status_with_fewer_pending_jobs_than_waits_asks_for_the_list_once_the_ends_had_time() {
    let mut core = Core::new("c", Timing::default());
    let _a = core.wait_done("a", 0.0);
    let _b = core.wait_done("b", 0.0);
    let later = STATUS_MAY_LAG_MS;
    core.receive(&status(2), later + 1.0);
    assert!(!core.tick(later + 2.0).iter().any(|p| type_of(p) == "jobs"));
    core.receive(&status(1), later + 3.0);
    // An end counted by the status may still be on its way.
    assert!(!core.tick(later + 4.0).iter().any(|p| type_of(p) == "jobs"));
    // None came: it was missed.
    let judged = later + 3.0 + STATUS_MAY_LAG_MS;
    assert!(core.tick(judged).iter().any(|p| type_of(p) == "jobs"));
}

/// A page waiting on a bulk job's ids while the worker sends: every status counts a few
/// ends not yet saved, so not yet told, and each of them arrives soon after. None of that
/// is a missed end; asking for the whole job list at every status (once a second) cost
/// the worker a list of every job each time.
#[test]
fn ends_on_their_way_when_a_status_was_taken_are_no_missed_ends() {
    let mut core = Core::new("c", Timing::default());
    let ids: Vec<String> = (0..40).map(|i| format!("j{i}")).collect();
    let mut waits: Vec<_> = ids.iter().map(|id| core.wait_done(id, 0.0)).collect();
    let mut now = STATUS_MAY_LAG_MS;
    let mut lists = 0;
    // Each second, 10 jobs end; the status is taken once 2 of the 10 are counted as ended
    // and not yet told, whose news follows 50 ms later.
    for second in 0..4 {
        let ending = &ids[second * 10..second * 10 + 10];
        core.receive(
            &jobs_broadcast(
                ending[..8]
                    .iter()
                    .map(|id| update(id, JobState::Done))
                    .collect(),
            ),
            now,
        );
        let pending = 40 - (second as u64 * 10 + 10);
        core.receive(&status(pending), now + 1.0);
        core.receive(
            &jobs_broadcast(
                ending[8..]
                    .iter()
                    .map(|id| update(id, JobState::Done))
                    .collect(),
            ),
            now + 50.0,
        );
        for t in [now + 2.0, now + 500.0, now + STATUS_MAY_LAG_MS - 1.0] {
            lists += core.tick(t).iter().filter(|p| type_of(p) == "jobs").count();
        }
        now += STATUS_MAY_LAG_MS;
    }
    // The last status is judged once the queue is quiet: its 2 ends arrived.
    lists += core
        .tick(now + STATUS_MAY_LAG_MS)
        .iter()
        .filter(|p| type_of(p) == "jobs")
        .count();
    assert_eq!(lists, 0, "job lists asked for while every end arrived");
    assert!(waits.iter_mut().all(|w| ready(w).is_ok()));
}

/// A worker stopped between a job's end and its announcement: the page never hears of
/// `a`. The ends of `b` and `c` that follow would explain the first status's shortfall;
/// the status the quiet queue sends last still shows it, and the list is asked for.
#[test]
fn a_missed_end_is_asked_about_once_the_queue_is_quiet() {
    let mut core = Core::new("c", Timing::default());
    let mut a = core.wait_done("a", 0.0);
    let _b = core.wait_done("b", 0.0);
    let _c = core.wait_done("c", 0.0);
    let t = STATUS_MAY_LAG_MS;
    core.receive(&status(2), t);
    core.receive(
        &jobs_broadcast(vec![update("b", JobState::Done)]),
        t + 100.0,
    );
    core.receive(&status(1), t + 300.0);
    core.receive(
        &jobs_broadcast(vec![update("c", JobState::Done)]),
        t + 350.0,
    );
    core.receive(&status(0), t + 400.0);
    let mut lists = Vec::new();
    for at in [t + 1_000.0, t + 1_200.0, t + 1_400.0] {
        lists.extend(core.tick(at).into_iter().filter(|p| type_of(p) == "jobs"));
    }
    assert_eq!(lists.len(), 1, "the job list is asked for once");
    core.receive(
        &reply(
            &id_of(&lists[0]),
            ReplyBody::Jobs {
                jobs: vec![update("a", JobState::Done)],
            },
        ),
        t + 1_450.0,
    );
    assert!(ready(&mut a).is_ok());
}

#[test]
fn a_new_worker_gets_everything_unanswered() {
    let mut core = Core::new("c", Timing::default());
    let (a, _, _pa) = core.request(Request::Snapshot, 0.0);
    let (b, _pb) = enqueue(&mut core, 0.0);
    let mut again = core.resend_all(5.0);
    again.sort();
    let mut want = vec![a, b];
    want.sort();
    assert_eq!(again, want);
}

#[test]
fn close_fails_everything() {
    let mut core = Core::new("c", Timing::default());
    let (_, _, mut p) = core.request(Request::Snapshot, 0.0);
    let mut d = core.wait_done("j", 0.0);
    core.close();
    assert_eq!(ready(&mut p).err(), Some(ClientError::Closed));
    assert!(ready(&mut d).is_err());
    let (_, _, mut later) = core.request(Request::Snapshot, 1.0);
    assert_eq!(ready(&mut later).err(), Some(ClientError::Closed));
    assert!(!core.needs_ticks());
}

#[test]
fn typed_requests_and_replies_round_trip() {
    let mut core = Core::new("c", Timing::default());
    let (text, _, mut p) = core.request(Request::Cancel { target: "g".into() }, 0.0);
    assert_eq!(sent(&text).request, Request::Cancel { target: "g".into() });
    core.receive(
        &reply(
            &id_of(&text),
            ReplyBody::Cancelled {
                ids: vec!["a".into()],
            },
        ),
        1.0,
    );
    let answer = ready(&mut p).ok().unwrap();
    assert_eq!(
        answer.body,
        ReplyBody::Cancelled {
            ids: vec!["a".into()]
        }
    );
    assert_eq!(
        unexpected_reply("snapshot", &answer.body).to_string(),
        "unreadable message from the worker: expected a 'snapshot' reply, got 'cancelled'"
    );
}

#[test]
fn an_unreadable_reply_settles_its_request_with_a_decode_error() {
    let mut core = Core::new("c", Timing::default());
    let (text, _, mut p) = core.request(
        Request::Retry {
            id: "j".into(),
            body: None,
            headers: None,
        },
        0.0,
    );
    let r = format!(
        r#"{{"type":"reply","requestId":"{}","body":{{"type":"retried","id":5}}}}"#,
        id_of(&text)
    );
    assert_eq!(core.receive(&r, 1.0), Received::Settled);
    let e = ready(&mut p).err().unwrap();
    assert_eq!(e.code(), "decode");
    assert_eq!(
        e.to_string(),
        "unreadable message from the worker: reply: invalid type: integer `5`, expected a string"
    );
}

#[test]
fn an_unreadable_broadcast_still_goes_to_subscribers() {
    let mut core = Core::new("c", Timing::default());
    let mut done = core.wait_done("j", 0.0);
    let odd = r#"{"type":"jobs","updates":[{"id":"j","state":"done"}]}"#;
    assert_eq!(core.receive(odd, 1.0), Received::Broadcast);
    assert!(poll(&mut done).is_pending());
    assert_eq!(core.receive(&status(1), 2.0), Received::Broadcast);
    assert!(core.has_work());
}

#[test]
fn an_unknown_worker_error_keeps_its_code() {
    let mut core = Core::new("c", Timing::default());
    let (text, _, mut p) = core.request(Request::Snapshot, 0.0);
    let e = format!(
        r#"{{"type":"error","requestId":"{}","error":{{"code":"quota-exceeded","why":"x"}}}}"#,
        id_of(&text)
    );
    core.receive(&e, 1.0);
    let e = ready(&mut p).err().unwrap();
    assert_eq!(e.code(), "worker");
    assert!(e.to_string().contains("quota-exceeded"), "{e}");
}

#[test]
fn garbage_and_foreign_errors_are_ignored() {
    let mut core = Core::new("c", Timing::default());
    assert!(matches!(core.receive("{nope", 0.0), Received::Ignored(_)));
    let e = r#"{"type":"error","requestId":null,"error":{"code":"malformed","message":"x"}}"#;
    assert!(matches!(core.receive(e, 0.0), Received::Ignored(_)));
    assert!(core.take_worker_fault().is_none());
}

#[test]
fn a_worker_that_cannot_start_is_heard_by_every_page() {
    let mut core = Core::new("c", Timing::default());
    let e = r#"{"type":"error","requestId":null,"error":{"code":"cannot-start","message":"/sluice/x.wasm was not found (HTTP 404)"}}"#;
    assert_eq!(core.receive(e, 0.0), Received::Broadcast);
    let fault = core.take_worker_fault().expect("kept for register()");
    assert_eq!(fault.code(), "cannot-start");
    assert!(
        fault.to_string().contains("was not found (HTTP 404)"),
        "{fault}"
    );
    assert!(core.take_worker_fault().is_none(), "taken once");
}

#[test]
fn a_removed_job_ends_its_waits_as_gone() {
    let mut core = Core::new("c", Timing::default());
    let mut done = core.wait_done("j", 0.0);
    let removed = encode(&WorkerMessage::Jobs {
        updates: vec![],
        removed: vec!["j".into()],
        discarded: vec![],
    });
    assert_eq!(core.receive(&removed, 1.0), Received::Broadcast);
    let end = ready(&mut done).err().unwrap();
    assert_eq!(end.state, None);
    assert!(end.reason.contains("no longer knows"), "{end}");
    assert_eq!(core.waiting_jobs(), 0);
}

#[test]
fn a_dismissed_job_ends_its_waits_as_discarded_now_and_later() {
    let mut core = Core::new("c", Timing::default());
    let mut before = core.wait_done("j", 0.0);
    let dismissed = encode(&WorkerMessage::Jobs {
        updates: vec![],
        removed: vec!["j".into()],
        discarded: vec!["j".into()],
    });
    assert_eq!(core.receive(&dismissed, 1.0), Received::Broadcast);
    let end = ready(&mut before).err().unwrap();
    assert_eq!(end.code(), "discarded", "{end}");
    assert!(end.reason.contains("discarded"), "{end}");
    assert_eq!(core.waiting_jobs(), 0);
    // Asked after the dismissal, when the worker no longer knows the job.
    let mut after = core.wait_done("j", 2.0);
    assert_eq!(ready(&mut after).err().unwrap().code(), "discarded");
    assert_eq!(core.waiting_jobs(), 0);
    // A new job under the same id is not the one dismissed.
    let queued = jobs_broadcast(vec![update("j", JobState::Queued)]);
    assert_eq!(core.receive(&queued, 3.0), Received::Broadcast);
    let _again = core.wait_done("j", 3.0);
    assert_eq!(core.waiting_jobs(), 1);
}
