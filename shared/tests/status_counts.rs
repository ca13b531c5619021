//! The status's counts (per state, budget, lane and group) are kept as jobs change rather than
//! counted at each snapshot: over any sequence of enqueues, starts, answers of every kind,
//! transport failures, cancels, retries, dismissals, expiry and restores, every snapshot must
//! say what a count of the jobs says. A restore in two steps (the head of the queue, then the
//! rest) must say it from the saved counts before the rest is in.

use std::collections::BTreeMap;

use proptest::prelude::*;

use sluice_shared::config::{BudgetConfig, EngineConfig, RetryConfig, Window};
use sluice_shared::engine::{Engine, QueueCounts, Response, Transmit, TransportError};
use sluice_shared::job::{Job, JobKind, JobSpec, JobState, Lane, RetryWith};
use sluice_shared::random::Rng;
use sluice_shared::status::Status;

const BUDGETS: [&str; 2] = ["api", "other"];

fn config() -> EngineConfig {
    let budget = |name: &str, limit| BudgetConfig {
        name: name.into(),
        windows: vec![Window {
            limit,
            length_ms: 1_000,
        }],
        concurrency: 3,
        ..BudgetConfig::default()
    };
    EngineConfig {
        budgets: vec![budget(BUDGETS[0], 5), budget(BUDGETS[1], 50)],
        retry: RetryConfig {
            max_attempts: 3,
            ..RetryConfig::default()
        },
        // Finished jobs are forgotten within the runs below, so forgetting is counted too.
        retention_ms: 3_000,
        ..EngineConfig::default()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Enqueue {
        kind: u8,
        lane: u8,
        budget: u8,
        key: Option<u8>,
        group: Option<u8>,
    },
    Start,
    Answer {
        pick: u8,
        status: u16,
    },
    Fail {
        pick: u8,
        how: u8,
    },
    Cancel(u8),
    CancelGroup(u8),
    Retry(u8),
    Dismiss(u8),
    Advance(u16),
    Restore,
    RestoreInTwoSteps {
        head: u8,
        sending_saved_as_queued: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, 0u8..3, 0u8..2, prop::option::of(0u8..4), prop::option::of(0u8..3))
            .prop_map(|(kind, lane, budget, key, group)| Op::Enqueue { kind, lane, budget, key, group }),
        3 => Just(Op::Start),
        3 => (any::<u8>(), prop::sample::select(vec![200u16, 201, 204, 400, 404, 409, 412, 429, 500, 503]))
            .prop_map(|(pick, status)| Op::Answer { pick, status }),
        1 => (any::<u8>(), 0u8..3).prop_map(|(pick, how)| Op::Fail { pick, how }),
        1 => any::<u8>().prop_map(Op::Cancel),
        1 => (0u8..3).prop_map(Op::CancelGroup),
        1 => any::<u8>().prop_map(Op::Retry),
        1 => any::<u8>().prop_map(Op::Dismiss),
        2 => (1u16..2_000).prop_map(Op::Advance),
        1 => Just(Op::Restore),
        1 => (0u8..6, any::<bool>()).prop_map(|(head, sending_saved_as_queued)| {
            Op::RestoreInTwoSteps { head, sending_saved_as_queued }
        }),
    ]
}

fn spec(kind: u8, lane: u8, budget: u8, key: Option<u8>, group: Option<u8>, n: usize) -> JobSpec {
    let (kind, method) = match kind {
        0 => (JobKind::Create, "POST"),
        1 => (JobKind::Patch, "PATCH"),
        2 => (JobKind::Delete, "DELETE"),
        _ => (JobKind::Custom, "PUT"),
    };
    JobSpec {
        budget: BUDGETS[budget as usize].into(),
        lane: Lane::ALL[lane as usize % 3],
        key: key.map(|k| format!("record:{k}")),
        kind,
        method: method.into(),
        url: format!("https://api.example/records/{}", key.unwrap_or(9)),
        body: (method != "DELETE").then(|| format!("{{\"v\":{n}}}")),
        group_id: group.map(|g| format!("group-{g}")),
        ..JobSpec::default()
    }
}

/// Jobs per state name, per group (total, done, failed, cancelled, not finished, conflicts,
/// waiting to be sent), and waiting
/// per lane.
type Counted = (
    BTreeMap<&'static str, u64>,
    BTreeMap<String, [u64; 7]>,
    [u64; 3],
);

/// The status's counts as a count of `jobs` gives them.
fn counted(jobs: &[&Job]) -> Counted {
    let mut states = BTreeMap::new();
    let mut groups: BTreeMap<String, [u64; 7]> = BTreeMap::new();
    let mut waiting = [0; 3];
    for job in jobs {
        *states.entry(job.state.name()).or_insert(0) += 1;
        if job.state.is_waiting() {
            waiting[job.lane.index()] += 1;
        }
        if let Some(g) = &job.group_id {
            let entry = groups.entry(g.clone()).or_default();
            entry[0] += 1;
            entry[match job.state {
                JobState::Done => 1,
                JobState::Failed => 2,
                JobState::Cancelled => 3,
                JobState::Conflict => 5,
                JobState::Queued | JobState::Sending | JobState::RetryWait => 4,
            }] += 1;
            if job.state.is_waiting() {
                entry[6] += 1;
            }
        }
    }
    (states, groups, waiting)
}

fn check(engine: &Engine, status: &Status) -> Result<(), TestCaseError> {
    let jobs: Vec<&Job> = engine.jobs().collect();
    let (states, groups, waiting) = counted(&jobs);
    let c = &status.counts;
    let shown: BTreeMap<&'static str, u64> = [
        ("queued", c.queued),
        ("sending", c.sending),
        ("retry_wait", c.retry_wait),
        ("done", c.done),
        ("failed", c.failed),
        ("cancelled", c.cancelled),
        ("conflict", c.conflict),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .collect();
    let states: BTreeMap<&'static str, u64> = states
        .into_iter()
        .map(|(name, n)| {
            (
                if name == "retry-wait" {
                    "retry_wait"
                } else {
                    name
                },
                n,
            )
        })
        .collect();
    prop_assert_eq!(shown, states);
    let shown_groups: BTreeMap<String, [u64; 7]> = status
        .groups
        .iter()
        .map(|g| {
            (
                g.id.clone(),
                [
                    g.total,
                    g.done,
                    g.failed,
                    g.cancelled,
                    g.pending,
                    g.conflicts,
                    g.waiting,
                ],
            )
        })
        .collect();
    prop_assert_eq!(shown_groups, groups);
    // Groups in id order, as before.
    prop_assert!(status.groups.windows(2).all(|p| p[0].id < p[1].id));
    let shown_waiting: Vec<u64> = status.lanes.iter().map(|l| l.waiting).collect();
    prop_assert_eq!(shown_waiting, waiting.to_vec());
    for b in &status.budgets {
        let pending = jobs
            .iter()
            .filter(|j| j.budget == b.name && !j.state.is_terminal())
            .count() as u64;
        prop_assert_eq!(b.pending, pending, "budget {}", b.name);
    }
    Ok(())
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut engine = Engine::new(config(), Rng::seeded(7)).expect("the configuration is valid");
    let mut now = 1_000;
    let mut out: Vec<Transmit> = Vec::new();
    let mut ids = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        match op {
            &Op::Enqueue {
                kind,
                lane,
                budget,
                key,
                group,
            } => {
                if let Ok(e) = engine.enqueue(spec(kind, lane, budget, key, group, n), now) {
                    ids.push(e.id);
                }
            }
            Op::Start => {
                engine.handle_timeout(now);
                while let Some(t) = engine.poll_transmit(now) {
                    engine.on_sent(&t.job_id, now);
                    out.push(t);
                }
            }
            &Op::Answer { pick, status } => {
                if !out.is_empty() {
                    let t = out.remove(pick as usize % out.len());
                    let headers = if status == 429 {
                        vec![("Retry-After".to_string(), "1".to_string())]
                    } else {
                        Vec::new()
                    };
                    let response = Response {
                        status,
                        headers,
                        body: "{}".into(),
                    };
                    engine.on_response(&t.job_id, response, now);
                }
            }
            &Op::Fail { pick, how } => {
                if !out.is_empty() {
                    let t = out.remove(pick as usize % out.len());
                    let error = match how {
                        0 => TransportError::Offline,
                        1 => TransportError::Timeout,
                        _ => TransportError::Network("reset".into()),
                    };
                    engine.on_transport_error(&t.job_id, error, now);
                }
            }
            &Op::Cancel(pick) => {
                if !ids.is_empty() {
                    let _ = engine.cancel(&ids[pick as usize % ids.len()], now);
                }
            }
            &Op::CancelGroup(g) => {
                let _ = engine.cancel(&format!("group-{g}"), now);
            }
            &Op::Retry(pick) => {
                if !ids.is_empty() {
                    let _ =
                        engine.retry(&ids[pick as usize % ids.len()], RetryWith::default(), now);
                }
            }
            &Op::Dismiss(pick) => {
                if !ids.is_empty() {
                    let _ = engine.dismiss(&ids[pick as usize % ids.len()], now);
                }
            }
            &Op::Advance(ms) => {
                now += u64::from(ms);
                engine.handle_timeout(now);
            }
            Op::Restore => {
                // As if every change was saved and the worker restarted: what was out is lost.
                let jobs = engine.jobs().cloned().collect();
                let budgets = engine.budget_states().cloned().collect();
                engine = Engine::restore(config(), Rng::seeded(n as u64), jobs, budgets, now)
                    .expect("a restore of a valid configuration");
                out.clear();
            }
            &Op::RestoreInTwoSteps {
                head,
                sending_saved_as_queued,
            } => {
                engine = restore_in_two_steps(&mut engine, head, sending_saved_as_queued, now)?;
                out.clear();
            }
        }
        let status = engine.snapshot(now);
        check(&engine, &status)?;
    }
    Ok(())
}

/// As the worker restarts a large queue: the counts its last save kept, then the head of the
/// queue (every job saved as sending, the first `head` saved as queued and as waiting for a
/// retry, in enqueue order) restored and the status taken, then the rest. That status must say
/// what the whole queue restored at once says: the jobs not read yet counted as queued, as a
/// restart reads a job saved as sending. Returns the engine with the whole queue.
fn restore_in_two_steps(
    engine: &mut Engine,
    head: u8,
    sending_saved_as_queued: bool,
    now: u64,
) -> Result<Engine, TestCaseError> {
    // What has expired is forgotten first, as the worker's timer does, so that the rest
    // restored later holds nothing a restore would drop.
    engine.handle_timeout(now);
    let saved = sluice_shared::json::to_string(&engine.tally_to_save());
    let saved: QueueCounts = sluice_shared::json::from_str(&saved).expect("counts read back");
    // A job's record may say queued while it sends: a start is not written.
    let mut records: Vec<Job> = engine.jobs().cloned().collect();
    records.sort_by_key(|j| j.seq);
    if sending_saved_as_queued {
        for job in &mut records {
            if job.state == JobState::Sending {
                job.state = JobState::Queued;
            }
        }
    }
    let budgets: Vec<_> = engine.budget_states().cloned().collect();
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    let (mut queued, mut retrying) = (0, 0);
    for job in records {
        let read_first = match job.state {
            JobState::Sending => true,
            JobState::Queued => {
                queued += 1;
                queued <= head
            }
            JobState::RetryWait => {
                retrying += 1;
                retrying <= head
            }
            _ => false,
        };
        if read_first {
            first.push(job);
        } else {
            rest.push(job);
        }
    }
    let whole = {
        let all = first.iter().chain(&rest).cloned().collect();
        Engine::restore(config(), Rng::seeded(3), all, budgets.clone(), now)
            .expect("a restore of a valid configuration")
            .snapshot(now)
    };
    let read = QueueCounts::of(first.iter());
    let mut two_steps = Engine::restore(config(), Rng::seeded(3), first, budgets, now)
        .expect("a restore of a valid configuration");
    prop_assert!(
        two_steps.expect_unread(&saved, &read),
        "saved {saved:?}, read {read:?}"
    );
    let before_the_rest = two_steps.snapshot(now);
    let waiting = |s: &Status| {
        let c = &s.counts;
        (
            c.queued + c.retry_wait,
            c.sending,
            c.done,
            c.failed,
            c.cancelled,
            c.conflict,
        )
    };
    prop_assert_eq!(waiting(&before_the_rest), waiting(&whole));
    // A group's ETA and warning follow the budget of the first of its jobs counted, which the
    // order of reading decides where a group's jobs go to several budgets.
    let groups = |s: &Status| {
        let mut groups = s.groups.clone();
        for g in &mut groups {
            (g.eta_ms, g.warning) = (None, None);
        }
        groups
    };
    prop_assert_eq!(groups(&before_the_rest), groups(&whole));
    let lanes = |s: &Status| s.lanes.iter().map(|l| l.waiting).collect::<Vec<_>>();
    prop_assert_eq!(lanes(&before_the_rest), lanes(&whole));
    let pending = |s: &Status| s.budgets.iter().map(|b| b.pending).collect::<Vec<_>>();
    prop_assert_eq!(pending(&before_the_rest), pending(&whole));
    two_steps.restore_more(rest, now);
    prop_assert!(!two_steps.counts_unread_jobs());
    Ok(two_steps)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_snapshot_counts_what_the_jobs_say(ops in prop::collection::vec(op(), 1..120)) {
        run(&ops)?;
    }
}

#[test]
fn a_group_cancelled_whole_is_counted_as_cancelled_and_then_forgotten() {
    let ops = [
        Op::Enqueue {
            kind: 0,
            lane: 2,
            budget: 0,
            key: None,
            group: Some(1),
        },
        Op::Enqueue {
            kind: 1,
            lane: 2,
            budget: 0,
            key: Some(1),
            group: Some(1),
        },
        Op::Start,
        Op::CancelGroup(1),
        Op::Advance(1_999),
        Op::Advance(1_999),
    ];
    run(&ops).expect("counts agree");
    let mut engine = Engine::new(config(), Rng::seeded(1)).expect("valid");
    engine
        .enqueue(spec(0, 2, 0, None, Some(1), 0), 0)
        .expect("enqueued");
    assert_eq!(engine.snapshot(0).groups[0].pending, 1);
    engine.cancel("group-1", 0).expect("cancelled");
    let status = engine.snapshot(0);
    assert_eq!((status.groups[0].total, status.groups[0].cancelled), (1, 1));
    engine.handle_timeout(10_000);
    assert!(engine.snapshot(10_000).groups.is_empty());
}
