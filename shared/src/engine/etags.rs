//! The `ETag` of the last answer to a job of each key, for jobs that ask to be sent with it as
//! `If-Match` ([`crate::job::JobSpec::if_match_from_key`]): edits queued one after another (an
//! offline session's) each apply to the version the one before produced, and a change someone
//! else made in between is a conflict instead of being overwritten.
//!
//! Kept in memory and rebuilt from the done jobs a restore reads (their answers are saved with
//! them until they expire), rather than saved on its own: one record less for every answer.
//! At most [`MAX_KEYS`] keys are remembered; past that the least recently answered go.

use crate::headers::Headers;
use crate::id_map::IdMap;
use crate::job::{Job, JobState};

/// Keys remembered at most: a worker that runs for weeks over a large table would otherwise
/// keep one entry for every key it ever saw answered.
pub(super) const MAX_KEYS: usize = 10_000;

/// The latest known `ETag` per key.
#[derive(Debug, Default)]
pub(super) struct KeyEtags {
    by_key: IdMap<Seen>,
}

#[derive(Debug)]
struct Seen {
    /// The answered job's place in enqueue order: a later job's answer wins, whatever order
    /// the answers (or a restore) come in.
    seq: u64,
    etag: String,
}

impl KeyEtags {
    /// Learns from a job that ended done: its key's `ETag`, if its answer carried one.
    pub(super) fn learn(&mut self, job: &Job) {
        let (Some(key), Some(outcome), JobState::Done) = (&job.key, &job.outcome, job.state) else {
            return;
        };
        let Some(etag) = Headers(&outcome.headers)
            .values("etag")
            .find(|v| !v.is_empty())
        else {
            return;
        };
        let seen = self.by_key.get_or_insert_with(key, || Seen {
            seq: 0,
            etag: String::new(),
        });
        if job.seq >= seen.seq {
            seen.seq = job.seq;
            seen.etag = etag.to_string();
        }
        if self.by_key.len() > MAX_KEYS + MAX_KEYS / 10 {
            self.forget_oldest();
        }
    }

    /// Keeps the [`MAX_KEYS`] most recently answered keys: rarely (a tenth over the cap at a
    /// time), so each answer costs no scan.
    fn forget_oldest(&mut self) {
        let mut seqs: Vec<u64> = self.by_key.values().map(|seen| seen.seq).collect();
        seqs.sort_unstable();
        let Some(&oldest_kept) = seqs.get(seqs.len().saturating_sub(MAX_KEYS)) else {
            return;
        };
        self.by_key.retain(|_, seen| seen.seq >= oldest_kept);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_key.len()
    }

    /// The headers to send for `job`: its own, with `If-Match` added when it asks for its key's
    /// `ETag`, one is known, and it names no `If-Match` itself.
    pub(super) fn request_headers(&self, job: &Job) -> Vec<(String, String)> {
        let mut headers = job.request_headers();
        if !job.if_match_from_key || Headers(&headers).has("if-match") {
            return headers;
        }
        if let Some(seen) = job.key.as_deref().and_then(|k| self.by_key.get(k)) {
            headers.push(("If-Match".into(), seen.etag.clone()));
        }
        headers
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobKind, JobOutcome, Lane};

    fn answered(key: &str, seq: u64, etag: &str) -> Job {
        Job {
            id: format!("j{seq}"),
            budget: "api".into(),
            lane: Lane::Bulk,
            key: Some(key.into()),
            kind: JobKind::Custom,
            method: "GET".into(),
            url: "https://api.example/contacts/1".into(),
            headers: vec![],
            body: None,
            options: None,
            cost: Default::default(),
            idempotency_key: "k".into(),
            if_match_from_key: false,
            state: JobState::Done,
            attempts: 1,
            not_before: 0,
            enqueued_at: 0,
            coalesced: 0,
            group_id: None,
            last_error: None,
            outcome: Some(JobOutcome {
                status: 200,
                headers: vec![("etag".into(), etag.into())],
                body: String::new(),
            }),
            finished_at: Some(1),
            started_at: Some(0),
            seq,
            folded: Vec::new(),
            batch: None,
            after: Vec::new(),
            filled: false,
        }
    }

    #[test]
    fn a_later_answer_wins_and_the_oldest_keys_go_past_the_cap() {
        let mut etags = KeyEtags::default();
        etags.learn(&answered("k", 2, "\"v2\""));
        etags.learn(&answered("k", 1, "\"v1\""));
        let mut edit = answered("k", 3, "");
        edit.if_match_from_key = true;
        edit.outcome = None;
        assert!(etags
            .request_headers(&edit)
            .contains(&("If-Match".into(), "\"v2\"".into())));
        for i in 0..(MAX_KEYS + MAX_KEYS / 10 + 1) as u64 {
            etags.learn(&answered(&format!("key-{i}"), 10 + i, "\"v1\""));
        }
        assert!((MAX_KEYS..=MAX_KEYS + MAX_KEYS / 10).contains(&etags.len()));
        assert!(
            !etags
                .request_headers(&edit)
                .iter()
                .any(|(n, _)| n == "If-Match"),
            "the oldest key is forgotten"
        );
    }
}
