//! The in-memory rule (`proxy/src/rule.rs`) and the Redis scripts (`proxy/src/lua/`) are one
//! rule written twice: here both answer the same long sequences of asks, releases (with their
//! starts moved to when they left) and upstream 429s, and must agree on every answer. The scripts run in a real Redis, with one change: the
//! clock they read from `TIME` is handed in, so both sides see the same instants.

use redis::{Script, Value};
use sluice::proxy::rule::{
    Counting, Decision, Observation, RuleParams, RuleState, DEFAULT_PAUSE_MS, LEARNED_TTL_MS,
};
use sluice_shared::config::Window;

use crate::support::{one_at_a_time, redis_available, report, Redis};

/// The script with its clock read from the last two arguments (seconds, microseconds).
fn clocked(source: &str) -> Script {
    let from = "redis.call('TIME')";
    assert!(source.contains(from), "the script reads TIME");
    Script::new(&source.replacen(from, "{ ARGV[#ARGV - 1], ARGV[#ARGV] }", 1))
}

/// SplitMix64: a fixed sequence per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn decision_of(reply: &[Value]) -> (bool, u64, String, u64, u64, u64) {
    let int = |i: usize| match &reply[i] {
        Value::Int(n) => *n as u64,
        other => panic!("reply {i}: {other:?}"),
    };
    let text = match &reply[2] {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    };
    (int(0) == 1, int(1), text, int(3), int(4), int(5))
}

fn rust_of(d: &Decision) -> (bool, u64, String, u64, u64, u64) {
    match d {
        Decision::Granted(s) => (true, 0, "ok".into(), s.share, s.used, s.callers),
        Decision::Wait {
            wait_ms,
            reason,
            share,
        } => (
            false,
            *wait_ms,
            reason.as_str().into(),
            share.share,
            share.used,
            share.callers,
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_rule_matches_the_lua_script() {
    if !redis_available("memory_rule_matches_the_lua_script") {
        return;
    }
    let _turn = one_at_a_time().await;
    let server = Redis::start();
    let client = redis::Client::open(server.url()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let acquire = clocked(include_str!("../../proxy/src/lua/acquire.lua"));
    let observe = clocked(include_str!("../../proxy/src/lua/observe.lua"));
    let finish = clocked(include_str!("../../proxy/src/lua/finish.lua"));

    let mut compared = 0;
    for (seed, counting, windows) in [
        (1, Counting::Log, vec![(5, 1_000)]),
        (2, Counting::Log, vec![(8, 500), (20, 3_000)]),
        (3, Counting::Gcra, vec![(50, 1_000)]),
        (4, Counting::Gcra, vec![(10, 400), (30, 2_000)]),
        // Leases (900 ms) outlive the window: unanswered starts held past their place.
        (5, Counting::Log, vec![(4, 300)]),
    ] {
        let p = RuleParams {
            windows: windows
                .iter()
                .map(|&(limit, length_ms)| Window { limit, length_ms })
                .collect(),
            concurrency: 3,
            counting,
            margin_ms: 7,
            lease_ms: 900,
            reask_ms: 20,
        };
        let keys: Vec<String> = [
            "log", "gcra", "leases", "callers", "pause", "learned", "marker",
        ]
        .iter()
        .map(|k| format!("eq{seed}:{k}"))
        .collect();
        let mut rng = Rng(seed);
        let mut state = RuleState::default();
        let mut held: Vec<(String, String)> = Vec::new();
        // Microseconds since the epoch, stepping unevenly.
        let mut us: u64 = 1_764_000_000_000_000 + seed * 1_000;
        for n in 0..1_500 {
            us += rng.below(40_000) + 1;
            let now_ms = us as f64 / 1_000.0;
            let (secs, micros) = (us / 1_000_000, us % 1_000_000);
            let roll = rng.below(100);
            if roll < 25 && !held.is_empty() {
                let (lease, caller) = held.swap_remove(rng.below(held.len() as u64) as usize);
                // Some requests never left; the others left a while after their decision.
                let counted_ms_ago =
                    (!roll.is_multiple_of(5)).then(|| rng.below(30_000) as f64 / 1_000.0);
                state.release(now_ms, &lease, &caller, counted_ms_ago);
                let mut call = finish.prepare_invoke();
                call.key(&keys[0])
                    .key(&keys[2])
                    .arg(&lease)
                    .arg(format!("{:.3}", counted_ms_ago.unwrap_or(-1.0)))
                    .arg(&caller)
                    .arg(secs)
                    .arg(micros);
                let _: i64 = call.invoke_async(&mut conn).await.expect("finish");
                continue;
            }
            if roll == 99 {
                let seen = Observation {
                    rate_limited: true,
                    retry_after_ms: Some(rng.below(1_500)),
                    stated_limit: Some(u64::from(p.windows[0].limit) - 1),
                    stated_window_ms: Some(p.windows[0].length_ms),
                };
                let ours = state.observe(&p, now_ms, &seen);
                let mut call = observe.prepare_invoke();
                call.key(&keys[4]).key(&keys[5]);
                call.arg(1)
                    .arg(seen.retry_after_ms.map_or(-1, |v| v as i64))
                    .arg(DEFAULT_PAUSE_MS)
                    .arg(seen.stated_limit.map_or(-1, |v| v as i64))
                    .arg(seen.stated_window_ms.map_or(-1, |v| v as i64))
                    .arg(LEARNED_TTL_MS)
                    .arg(p.windows.len());
                for w in &p.windows {
                    call.arg(w.limit).arg(w.length_ms);
                }
                call.arg(secs).arg(micros);
                let theirs: u64 = call.invoke_async(&mut conn).await.expect("observe");
                assert!(
                    ours.abs_diff(theirs) <= 1,
                    "seed {seed} step {n}: pause {ours} vs {theirs}"
                );
                continue;
            }
            let caller = format!("c{}", rng.below(4));
            let lease = format!("s{seed}-{n}");
            let ours = rust_of(&state.acquire(&p, now_ms, &caller, &lease));
            let mut call = acquire.prepare_invoke();
            for k in &keys {
                call.key(k);
            }
            call.arg(&caller)
                .arg(&lease)
                .arg(p.lease_ms)
                .arg(p.concurrency)
                .arg(p.counting.script_name())
                .arg(p.margin_ms)
                .arg(p.reask_ms)
                .arg(p.windows.len());
            for w in &p.windows {
                call.arg(w.limit).arg(w.length_ms);
            }
            call.arg(secs).arg(micros);
            let reply: Vec<Value> = call.invoke_async(&mut conn).await.expect("acquire");
            let theirs = decision_of(&reply);
            // Waits are rounded up to whole ms from instants the two sides compute with
            // different float steps: one ms apart is the same answer.
            let same = ours.0 == theirs.0
                && ours.1.abs_diff(theirs.1) <= 1
                && (ours.2.as_str(), ours.3, ours.4, ours.5)
                    == (theirs.2.as_str(), theirs.3, theirs.4, theirs.5);
            assert!(
                same,
                "seed {seed} step {n} at {now_ms}: memory {ours:?}, Redis {theirs:?}"
            );
            if ours.0 {
                held.push((lease, caller));
            }
            compared += 1;
        }
    }
    report(&format!(
        "memory_rule_matches_the_lua_script: {compared} asks answered alike"
    ));
}
