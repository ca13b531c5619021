//! The store's record codecs, journals and meta records, on the host.
use super::*;
use sluice_shared::{JobKind, JobState, Lane};

fn job() -> Job {
    Job {
        id: "j1".into(),
        budget: "demo".into(),
        lane: Lane::Interactive,
        key: None,
        kind: JobKind::Create,
        method: "POST".into(),
        url: "http://h/api/contacts".into(),
        headers: vec![("content-type".into(), "application/json".into())],
        body: Some("{}".into()),
        options: None,
        cost: Default::default(),
        idempotency_key: "k".into(),
        if_match_from_key: false,
        state: JobState::RetryWait,
        attempts: 1,
        not_before: 1_700_000_000_123,
        enqueued_at: 1_700_000_000_000,
        coalesced: 0,
        group_id: Some("g".into()),
        last_error: None,
        outcome: None,
        finished_at: None,
        started_at: Some(1_700_000_000_050),
        seq: 42,
        folded: Vec::new(),
        batch: None,
        after: Vec::new(),
        filled: false,
    }
}

#[test]
fn job_records_carry_the_indexed_fields_at_top_level() {
    let text = encode_all(&[job()]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let rec = &v[0];
    assert_eq!(rec["id"], "j1");
    assert_eq!(rec["state"], "retry-wait");
    assert_eq!(rec["seq"], 42);
    assert_eq!(rec["budget"], "demo");
    assert!(rec["key"].is_null(), "no key: null, not absent");
    assert_eq!(decode_job(&rec.to_string()).unwrap(), job());
}

#[test]
fn older_records_without_new_fields_still_decode() {
    let mut v: serde_json::Value = serde_json::to_value(job()).unwrap();
    let obj = v.as_object_mut().unwrap();
    for f in ["outcome", "finishedAt", "startedAt", "seq"] {
        obj.remove(f);
    }
    let j = decode_job(&v.to_string()).unwrap();
    assert_eq!(j.seq, 0);
    assert_eq!(j.started_at, None);
}

#[test]
fn unreadable_records_are_counted_not_fatal() {
    let mut l = Loaded::default();
    if let Err(e) = decode_job(r#"{"id":"x"}"#) {
        l.note_unreadable("job", e);
    }
    assert_eq!(l.unreadable, 1);
    assert!(l.first_problem.unwrap().starts_with("job: missing field"));
}

#[test]
fn journals_fill_in_missing_jobs_only() {
    let mut stored = job();
    stored.state = JobState::Done;
    let mut jobs = vec![stored.clone()];
    let mut other = job();
    other.id = "j2".into();
    let added = merge_journals(&mut jobs, vec![vec![job(), other.clone()], vec![other]]);
    assert_eq!(added, vec!["j2".to_string()]);
    assert_eq!(jobs.len(), 2);
    assert_eq!(
        jobs[0], stored,
        "a per-job record wins over the journal's copy"
    );
}

#[test]
fn only_large_fresh_batches_are_journaled() {
    let many: Vec<Job> = (0..JOURNAL_MIN_JOBS + 1)
        .map(|i| {
            let mut j = job();
            j.id = format!("j{i}");
            j
        })
        .collect();
    let fresh: Vec<JobId> = many[1..].iter().map(|j| j.id.clone()).collect();
    let (journaled, direct) = split_fresh(&many, &fresh);
    assert_eq!(journaled.len(), JOURNAL_MIN_JOBS);
    assert_eq!(direct.len(), 1, "a job saved before is put one per record");
    assert_eq!(direct[0].id, "j0");
    let (journaled, direct) = split_fresh(&many, &fresh[..10]);
    assert!(journaled.is_empty());
    assert_eq!(direct.len(), many.len());
    let text = encode_all(&journaled_ids(&many));
    assert_eq!(decode_journal(&text).unwrap().len(), many.len());
}

fn journaled_ids(jobs: &[Job]) -> Vec<&Job> {
    jobs.iter().collect()
}

#[test]
fn meta_records_round_trip() {
    let saved = SavedConfig {
        config: crate::config::ScriptConfig::default().engine,
        script_fingerprint: "abc".into(),
    };
    let text = encode_meta(&MetaOp::PutConfig(saved.clone())).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["k"], "config");
    assert_eq!(v["scriptFingerprint"], "abc");
    assert_eq!(decode_config(&text).unwrap(), saved);
    let text = encode_meta(&MetaOp::PutSchema).unwrap();
    assert_eq!(decode_schema(&text).unwrap(), SchemaRecord::current());
    assert!(encode_meta(&MetaOp::DeleteConfig).is_none());
}
