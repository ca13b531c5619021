use super::*;

fn tokens(limit: u32, length_ms: DurationMs) -> ResourceConfig {
    ResourceConfig {
        name: "tokens".into(),
        windows: vec![Window { limit, length_ms }],
        ..ResourceConfig::default()
    }
}

fn costs(n: u64) -> Costs {
    Costs::new([("tokens".to_string(), n)])
}

fn fresh(configs: &[ResourceConfig]) -> Resources {
    let mut r = Resources::default();
    r.reconfigure(configs);
    r
}

#[test]
fn a_job_waits_until_every_resource_has_room_for_its_cost() {
    let configs = [tokens(1_000, 60_000)];
    let mut r = fresh(&configs);
    assert_eq!(r.room_at(&configs, &costs(600), 0, 0), 0);
    r.record(&configs, &costs(600), 0);
    assert_eq!(r.room_at(&configs, &costs(400), 0, 10), 10);
    assert_eq!(r.room_at(&configs, &costs(500), 0, 10), 60_000);
    // A job that names no cost spends the default (1).
    assert_eq!(r.room_at(&configs, &Costs::default(), 0, 10), 10);
}

#[test]
fn the_answer_body_corrects_the_estimate() {
    let mut config = tokens(1_000, 60_000);
    config.cost_path = Some("usage.total_tokens".into());
    let configs = [config];
    let mut r = fresh(&configs);
    r.record(&configs, &costs(900), 0);
    let body = r#"{"usage": {"prompt_tokens": 100, "total_tokens": 250}}"#;
    r.on_answer(&configs, &costs(900), 0, Some(body), &[], 500);
    assert_eq!(r.statuses(500)[0].used, 250);
    assert_eq!(r.room_at(&configs, &costs(750), 0, 500), 500);
}

#[test]
fn the_servers_remaining_count_is_taken_as_spent_until_its_reset() {
    let configs = [tokens(1_000, 60_000)];
    let mut r = fresh(&configs);
    let t0 = 100_000;
    r.record(&configs, &costs(100), t0);
    // The server has 300 left, resetting in 20 s: 700 spent there, 100 of them ours.
    let quota = Quota {
        limit: Some(1_000),
        remaining: Some(300),
        reset_after_ms: Some(20_000),
        window_ms: None,
        windows: vec![],
    };
    let now = t0 + 1_000;
    r.on_answer(
        &configs,
        &costs(100),
        t0,
        None,
        &[("Tokens".into(), quota)],
        now,
    );
    let status = &r.statuses(now)[0];
    assert_eq!(status.used, 700);
    assert_eq!(status.remaining, 300);
    // The 600 others spent leave when the server resets, 20 s from the answer; our own 100
    // stay their whole window.
    assert_eq!(r.room_at(&configs, &costs(300), 0, now), now);
    assert_eq!(r.room_at(&configs, &costs(500), 0, now), now + 20_000);
    assert_eq!(r.room_at(&configs, &costs(950), 0, now), t0 + 60_000);
}

#[test]
fn a_smaller_limit_the_server_reports_is_adopted_and_kept_by_a_reconfiguration() {
    let configs = [tokens(1_000, 60_000)];
    let mut r = fresh(&configs);
    let quota = Quota {
        limit: Some(400),
        remaining: Some(400),
        reset_after_ms: None,
        window_ms: Some(60_000),
        windows: vec![],
    };
    r.on_answer(
        &configs,
        &Costs::default(),
        0,
        None,
        &[("tokens".into(), quota)],
        0,
    );
    assert_eq!(r.statuses(0)[0].limit, 400);
    r.reconfigure(&configs);
    assert_eq!(r.statuses(0)[0].limit, 400);
    // A new resource starts empty; a dropped one goes.
    let points = ResourceConfig {
        name: "points".into(),
        ..tokens(50, 1_000)
    };
    r.reconfigure(std::slice::from_ref(&points));
    assert_eq!(r.0.len(), 1);
    assert_eq!(r.statuses(0)[0].name, "points");
}

#[test]
fn lost_records_count_the_largest_amount_each() {
    let configs = [tokens(1_000, 60_000)];
    let mut r = fresh(&configs);
    r.record(&configs, &costs(200), 0);
    r.count_unrecorded(&configs, 3, 10);
    assert_eq!(r.statuses(10)[0].used, 800);
}

#[test]
fn configurations_that_cannot_work_are_named() {
    let mut c = tokens(10, 1_000);
    assert_eq!(c.problem(), None);
    c.name = "Requests".into();
    assert!(c
        .problem()
        .unwrap_or_default()
        .contains("'requests' is what"));
    c.name = "tokens".into();
    c.windows.clear();
    assert!(c
        .problem()
        .unwrap_or_default()
        .contains("needs at least one window"));
    let mut c = tokens(10, 1_000);
    c.cost_path = Some("usage..total".into());
    assert!(c
        .problem()
        .unwrap_or_default()
        .starts_with("resource 'tokens': `costPath`"));
}

#[test]
fn costs_read_and_write_as_an_object() {
    let c: Costs = crate::json::from_str(r#"{"tokens": 1200, "points": 3}"#).expect("costs");
    assert_eq!(c.of(&tokens(1, 1)), 1_200);
    assert_eq!(crate::json::to_string(&c), r#"{"points":3,"tokens":1200}"#);
    crate::json::testing::same_as_serde(&c);
    assert!(crate::json::from_str::<Costs>(r#"{"tokens": -1}"#).is_err());
    assert!(crate::json::from_str::<Costs>(r#"[1]"#).is_err());
}

#[test]
fn costs_read_from_a_header_as_name_equals_amount() {
    let c = Costs::from_header("tokens=1200, points = 3,").expect("costs");
    assert_eq!(crate::json::to_string(&c), r#"{"points":3,"tokens":1200}"#);
    assert_eq!(Costs::from_header("").expect("none"), Costs::default());
    let e = Costs::from_header("tokens:5").expect_err("no =");
    assert!(e.contains("name=amount"), "{e}");
    let e = Costs::from_header("tokens=lots").expect_err("not a number");
    assert!(e.contains("whole number, not 'lots'"), "{e}");
}
