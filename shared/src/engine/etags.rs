//! The `ETag` of the last answer to a job of each key, for jobs that ask to be sent with it as
//! `If-Match` ([`crate::job::JobSpec::if_match_from_key`]): edits queued one after another (an
//! offline session's) each apply to the version the one before produced, and a change someone
//! else made in between is a conflict instead of being overwritten.
//!
//! Kept in memory and rebuilt from the done jobs a restore reads (their answers are saved with
//! them until they expire), rather than saved on its own: one record less for every answer.

use crate::id_map::IdMap;
use crate::job::{Job, JobState};

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
        let Some(etag) = outcome
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("etag"))
            .map(|(_, value)| value.trim())
            .filter(|v| !v.is_empty())
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
    }

    /// The headers to send for `job`: its own, with `If-Match` added when it asks for its key's
    /// `ETag`, one is known, and it names no `If-Match` itself.
    pub(super) fn request_headers(&self, job: &Job) -> Vec<(String, String)> {
        let mut headers = job.request_headers();
        if !job.if_match_from_key
            || headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("if-match"))
        {
            return headers;
        }
        if let Some(seen) = job.key.as_deref().and_then(|k| self.by_key.get(k)) {
            headers.push(("If-Match".into(), seen.etag.clone()));
        }
        headers
    }
}
