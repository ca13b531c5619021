//! Credentials that expire while jobs wait (issue 39): a 401 does not fail the job, the budget
//! waits for new credentials from a page, and each job is sent once with them.

mod common;

use common::{budget, drain, engine_with};
use sluice_shared::engine::{Engine, Response, Transmit};
use sluice_shared::job::{JobSpec, JobState};

fn engine() -> Engine {
    engine_with(budget(10, 1_000, 4), 7)
}

fn create(n: usize, token: &str) -> JobSpec {
    JobSpec {
        headers: vec![("Authorization".into(), format!("Bearer {token}"))],
        ..common::create(n)
    }
}

fn authorization(t: &Transmit) -> String {
    t.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.clone())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// A server that accepts one token: the jobs enqueued with an older one are refused with 401,
/// the budget then sends nothing (no loop of refusals, no attempt spent, no job failed) and
/// says why in its status, until a page gives the new token; then every job is sent once more,
/// with it alone, and is done. A wrong new token is refused once per job in flight, not more.
#[test]
fn a_refused_token_holds_the_budget_until_a_page_gives_a_new_one() {
    let mut e = engine();
    let ids: Vec<String> = (0..8)
        .map(|n| e.enqueue(create(n, "t1"), 0).unwrap().id)
        .collect();
    let answer = |e: &mut Engine, t: &Transmit, valid: &str, now: u64| {
        let status = if authorization(t) == format!("Bearer {valid}") {
            201
        } else {
            401
        };
        e.on_response(
            &t.job_id,
            Response {
                status,
                headers: vec![],
                body: String::new(),
            },
            now,
        );
        status
    };
    // The token expired before anything was sent: the first requests are refused.
    let mut refused = 0;
    let mut now = 0;
    while now < 5_000 {
        for t in drain(&mut e, now) {
            if answer(&mut e, &t, "t2", now + 20) == 401 {
                refused += 1;
            }
        }
        now += 10;
    }
    assert!(
        (1..=4).contains(&refused),
        "{refused} refusals: at most the requests in flight when the first came"
    );
    let status = e.snapshot(now);
    let needed = status.budgets[0].credentials_needed.clone();
    assert!(
        needed.as_deref().is_some_and(|s| s.contains("401")),
        "{needed:?}"
    );
    for id in &ids {
        let job = e.job(id).unwrap();
        assert_eq!(job.state, JobState::Queued, "{id}");
        assert_eq!(job.attempts, 0, "a refusal of credentials is no attempt");
    }
    // A wrong new token: refused again, and again the budget waits.
    e.set_credentials("api", vec![("authorization".into(), "Bearer t3".into())])
        .unwrap();
    let mut wrong = 0;
    for _ in 0..500 {
        for t in drain(&mut e, now) {
            assert_eq!(
                authorization(&t),
                "Bearer t3",
                "the page's, in place of the job's"
            );
            if answer(&mut e, &t, "t2", now + 20) == 401 {
                wrong += 1;
            }
        }
        now += 10;
    }
    assert!((1..=4).contains(&wrong), "{wrong}");
    assert!(e.snapshot(now).budgets[0].credentials_needed.is_some());
    // The right one: everything goes, once each, and is done.
    e.set_credentials("api", vec![("Authorization".into(), "Bearer t2".into())])
        .unwrap();
    assert!(e.snapshot(now).budgets[0].credentials_needed.is_none());
    let mut sent = 0;
    for _ in 0..500 {
        for t in drain(&mut e, now) {
            sent += 1;
            assert_eq!(answer(&mut e, &t, "t2", now + 20), 201);
        }
        now += 10;
    }
    assert_eq!(sent, ids.len());
    for id in &ids {
        assert_eq!(e.job(id).unwrap().state, JobState::Done, "{id}");
    }
}

/// Credentials for a budget that does not exist, or headers `fetch` would refuse, are refused
/// with the reason.
#[test]
fn credentials_for_no_budget_or_with_a_bad_header_are_refused() {
    let mut e = engine();
    let err = e
        .set_credentials("nope", vec![("Authorization".into(), "x".into())])
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown budget 'nope'"), "{err}");
    let err = e
        .set_credentials("api", vec![("Authorization".into(), "a\nb".into())])
        .unwrap_err()
        .to_string();
    assert!(err.contains("line break"), "{err}");
}

/// A page that gives new credentials at the first 401, while other requests with the old ones
/// are still on their way: their 401s, which come after, refuse the old credentials, not the
/// new ones, so the budget does not wait again; each job goes once more with the new ones.
#[test]
fn refusals_of_the_old_credentials_after_new_ones_hold_nothing() {
    let mut e = engine();
    for n in 0..4 {
        e.enqueue(create(n, "t1"), 0).unwrap();
    }
    let mut now = 0;
    let mut first = Vec::new();
    while first.len() < 4 && now < 2_000 {
        first.extend(drain(&mut e, now));
        now += 10;
    }
    assert_eq!(first.len(), 4, "four in flight");
    let refused = |e: &mut Engine, t: &Transmit, now: u64| {
        e.on_response(
            &t.job_id,
            Response {
                status: 401,
                headers: vec![],
                body: String::new(),
            },
            now,
        );
    };
    refused(&mut e, &first[0], now);
    assert!(e.snapshot(now).budgets[0].credentials_needed.is_some());
    e.set_credentials("api", vec![("Authorization".into(), "Bearer t2".into())])
        .unwrap();
    for t in &first[1..] {
        refused(&mut e, t, now + 5);
    }
    assert!(
        e.snapshot(now + 5).budgets[0].credentials_needed.is_none(),
        "the late 401s were of the old token"
    );
    let mut again = 0;
    for _ in 0..300 {
        for t in drain(&mut e, now) {
            assert_eq!(authorization(&t), "Bearer t2");
            again += 1;
            e.on_response(
                &t.job_id,
                Response {
                    status: 201,
                    headers: vec![],
                    body: String::new(),
                },
                now + 20,
            );
        }
        now += 10;
    }
    assert_eq!(again, 4);
}

/// The worker script's `credentials` function, as the worker runs it: asked before each
/// request (`on_credentials_supplied`, its headers set over the job's own), and while the
/// budget waits, asked again on the worker's wake-ups (`offer_credentials`). Jobs carry no
/// `Authorization` of their own. The server's token changes mid-bulk while the function still
/// returns the old one: the budget waits, and however often the function is asked, the old
/// token is never sent again (no loop of 401s); once the function returns the new token the
/// wait ends and every job left is sent once, with it.
#[test]
fn the_worker_scripts_function_never_resends_a_refused_token() {
    let mut e = engine();
    let jobs: Vec<JobSpec> = (0..20)
        .map(|n| JobSpec {
            headers: vec![],
            ..create(n, "")
        })
        .collect();
    let ids: Vec<String> = jobs
        .into_iter()
        .map(|spec| e.enqueue(spec, 0).unwrap().id)
        .collect();
    let (mut function_gives, mut server_takes) = ("t1", "t1");
    let mut sent_with: Vec<(String, String)> = Vec::new();
    let mut refused = 0;
    let mut now = 0;
    while sent_with.len() < 6 {
        supplied_turn(
            &mut e,
            function_gives,
            server_takes,
            now,
            &mut sent_with,
            &mut refused,
        );
        now += 10;
    }
    server_takes = "t2";
    // Thirty seconds of wake-ups, each asking the function again: it still gives t1.
    for _ in 0..3_000 {
        supplied_turn(
            &mut e,
            function_gives,
            server_takes,
            now,
            &mut sent_with,
            &mut refused,
        );
        if now % 1_000 == 0 && !e.budgets_waiting_for_credentials().is_empty() {
            assert!(!e.offer_credentials("api", bearer(function_gives)).unwrap());
        }
        now += 10;
    }
    let needed = e.snapshot(now).budgets[0].credentials_needed.clone();
    assert!(
        needed
            .as_deref()
            .is_some_and(|s| s.contains("worker script's function")),
        "{needed:?}"
    );
    assert!(
        (1..=4).contains(&refused),
        "{refused} refusals: at most the requests in flight when the token changed"
    );
    assert_eq!(e.budgets_waiting_for_credentials(), vec!["api".to_string()]);
    // The function now gives the new token: the wait ends, the rest go once each with it.
    function_gives = "t2";
    assert!(e.offer_credentials("api", bearer(function_gives)).unwrap());
    for _ in 0..1_000 {
        supplied_turn(
            &mut e,
            function_gives,
            server_takes,
            now,
            &mut sent_with,
            &mut refused,
        );
        now += 10;
    }
    for id in &ids {
        let job = e.job(id).unwrap();
        assert_eq!(job.state, JobState::Done, "{id}");
        assert_eq!(
            job.attempts, 1,
            "{id}: a refusal of credentials is no attempt"
        );
        let with_t2 = sent_with
            .iter()
            .filter(|(j, token)| j == id && token == "Bearer t2")
            .count();
        let with_t1 = sent_with
            .iter()
            .filter(|(j, token)| j == id && token == "Bearer t1")
            .count();
        assert!(
            with_t1 <= 1,
            "{id} sent {with_t1} times with the refused token"
        );
        assert!(with_t2 <= 1, "{id} sent {with_t2} times with the new token");
    }
}

/// What the function gives for a request no longer in flight is not sent, and an empty answer
/// (the function gave nothing) never ends a wait.
#[test]
fn supplied_credentials_for_a_request_not_in_flight_send_nothing() {
    let mut e = engine();
    assert!(!e.on_credentials_supplied("no-such-job", vec![], 0).unwrap());
    assert!(!e.offer_credentials("api", vec![]).unwrap());
    let err = e
        .offer_credentials("nope", vec![("Authorization".into(), "x".into())])
        .map(|ended| ended.to_string())
        .unwrap_or_else(|e| e.to_string());
    assert_eq!(
        err, "false",
        "a budget that does not wait is not waiting: {err}"
    );
}

fn bearer(token: &str) -> Vec<(String, String)> {
    vec![("Authorization".to_string(), format!("Bearer {token}"))]
}

/// One wake-up of a worker whose script's function gives `function_gives`, against a server
/// that takes `server_takes`: each request polled is supplied, sent and answered.
fn supplied_turn(
    e: &mut Engine,
    function_gives: &str,
    server_takes: &str,
    now: u64,
    sent_with: &mut Vec<(String, String)>,
    refused: &mut usize,
) {
    for t in drain(e, now) {
        let supplied = bearer(function_gives);
        assert!(e
            .on_credentials_supplied(&t.job_id, supplied.clone(), now)
            .unwrap());
        // What the worker sends: the function's headers set over the request's.
        let sent = Transmit {
            headers: sluice_shared::job::headers_set_over(&t.headers, &supplied),
            ..t
        };
        let token = authorization(&sent);
        sent_with.push((sent.job_id.clone(), token.clone()));
        let status = if token == format!("Bearer {server_takes}") {
            201
        } else {
            *refused += 1;
            401
        };
        e.on_response(
            &sent.job_id,
            Response {
                status,
                headers: vec![],
                body: String::new(),
            },
            now + 20,
        );
    }
}

/// The function gives a new token of its own accord (the app refreshed it) and the server
/// refuses that one too: the refusal is of the new token, which the requests went with, so the
/// budget waits at once; none is sent twice with it.
#[test]
fn a_refused_token_the_function_just_gave_holds_the_budget_at_once() {
    let mut e = engine();
    let ids: Vec<String> = (0..8)
        .map(|n| {
            let spec = JobSpec {
                headers: vec![],
                ..create(n, "")
            };
            e.enqueue(spec, 0).unwrap().id
        })
        .collect();
    let (mut sent_with, mut refused) = (Vec::new(), 0);
    let mut now = 0;
    while sent_with.len() < 2 {
        supplied_turn(&mut e, "t1", "t1", now, &mut sent_with, &mut refused);
        now += 10;
    }
    for _ in 0..1_000 {
        supplied_turn(&mut e, "t2", "t3", now, &mut sent_with, &mut refused);
        now += 10;
    }
    assert!((1..=4).contains(&refused), "{refused}");
    assert_eq!(e.budgets_waiting_for_credentials(), vec!["api".to_string()]);
    for id in &ids {
        let times = sent_with.iter().filter(|(j, _)| j == id).count();
        assert!(times <= 1, "{id} sent {times} times: {sent_with:?}");
    }
}
