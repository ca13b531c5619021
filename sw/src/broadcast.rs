//! Telling every tab what changed: job updates, batched, and status snapshots, throttled.
//!
//! Only changes that are already saved reach [`Batcher::push`] (the worker pushes after each
//! committed transaction), so a page never sees a state that a restart could take back.
//!
//! - Job updates are coalesced per job (the latest state wins, first-change order is kept) and
//!   sent at most every [`JOBS_EVERY_MS`], except that a change to an interactive job is sent
//!   at once (a person is looking at it), or [`URGENT_EVERY_MS`] after the last batch. That
//!   spacing is below what a person notices, and it matters: with a burst of interactive jobs,
//!   sending each change on its own took a tenth of the worker's thread (finding the tabs,
//!   encoding, posting), and every page had to read each one.
//! - A status snapshot follows changes at most every [`STATUS_EVERY_MS`], and one more is
//!   always sent when the queue goes idle, so every tab ends on the final numbers.
//! - The list of tabs is asked of the browser (`clients.matchAll`) at most every
//!   [`RECIPIENTS_FRESH_MS`], and again after any message event from a page. Asking for every
//!   batch cost a round trip through the browser process each time (up to 60 a second while
//!   a person enqueues one job after another), and the IndexedDB commits that overlapped one
//!   took twice as long (median 4.6 ms against 1.9 ms). A new page's first request
//!   is always a message event (its port comes with one), so it is on the list before it is
//!   answered; only a page that never says anything can miss up to that long of job news,
//!   and the next status snapshot brings it up to date. A closed tab stays on the list as
//!   long, and a message to it goes nowhere.
//!
//! The batcher is plain data (tested natively); the worker's single timer calls
//! [`Batcher::next_due`] to know when to flush, and [`post_to_all`] delivers.

use rustc_hash::FxHashMap;

use sluice_shared::protocol::{self, JobUpdate, WorkerMessage};
use sluice_shared::{JobId, Millis};

pub const JOBS_EVERY_MS: u64 = 150;
pub const URGENT_EVERY_MS: u64 = 16;
pub const STATUS_EVERY_MS: u64 = 250;
pub const RECIPIENTS_FRESH_MS: u64 = 1_000;

/// The tabs last found, reused while fresh (see the module docs).
#[derive(Debug)]
pub struct Recipients<T> {
    found: Option<(Millis, T)>,
}

impl<T: Clone> Default for Recipients<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone> Recipients<T> {
    pub const fn new() -> Self {
        Self { found: None }
    }

    /// The tabs found at most [`RECIPIENTS_FRESH_MS`] ago, if nothing made them stale.
    pub fn fresh(&self, now: Millis) -> Option<T> {
        self.found
            .as_ref()
            .filter(|(at, _)| now < at.saturating_add(RECIPIENTS_FRESH_MS) && *at <= now)
            .map(|(_, tabs)| tabs.clone())
    }

    pub fn found(&mut self, now: Millis, tabs: T) {
        self.found = Some((now, tabs));
    }

    /// A page spoke up: it may be one the list does not have yet.
    pub fn forget(&mut self) {
        self.found = None;
    }
}

#[derive(Debug, Default)]
pub struct Batcher {
    pending: Vec<JobUpdate>,
    index: FxHashMap<JobId, usize>,
    /// Jobs forgotten since the last flush.
    removed: Vec<JobId>,
    /// Jobs a page dismissed since the last flush (see [`WorkerMessage::Jobs`]).
    discarded: Vec<JobId>,
    urgent: bool,
    status_dirty: bool,
    /// No status goes out while set (the engine holds only part of the queue yet).
    status_held: bool,
    last_jobs: Option<Millis>,
    last_status: Option<Millis>,
}

/// What to send now.
#[derive(Debug, Default, PartialEq)]
pub struct Flush {
    pub jobs: Vec<JobUpdate>,
    pub removed: Vec<JobId>,
    pub discarded: Vec<JobId>,
    pub status: bool,
}

impl Flush {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.removed.is_empty() && self.discarded.is_empty() && !self.status
    }
}

impl Batcher {
    /// Saved changes to tell pages about. `urgent`: send without waiting for the batch.
    pub fn push(&mut self, updates: Vec<JobUpdate>, urgent: bool) {
        for u in updates {
            match self.index.get(&u.id) {
                Some(&i) => self.pending[i] = u,
                None => {
                    self.index.insert(u.id.clone(), self.pending.len());
                    self.pending.push(u);
                }
            }
        }
        self.urgent |= urgent;
        self.status_dirty = true;
    }

    /// Saved removals to tell pages about (sent with the next batch of updates). An update of
    /// the same job still waiting to be sent is dropped: the job is gone.
    pub fn push_removed(&mut self, ids: &[JobId]) {
        if ids.is_empty() {
            return;
        }
        for id in ids {
            if let Some(i) = self.index.remove(id) {
                self.pending.remove(i);
                for at in self.index.values_mut() {
                    if *at > i {
                        *at -= 1;
                    }
                }
            }
            self.removed.push(id.clone());
        }
        self.status_dirty = true;
    }

    /// A page dismissed this job: told with the next batch, at the latest with its removal
    /// (which waits for the save), so that a wait on it ends as `discarded`.
    pub fn push_discarded(&mut self, id: JobId) {
        self.discarded.push(id);
    }

    /// Asks for one status snapshot (at the throttled rate).
    pub fn mark_status(&mut self) {
        self.status_dirty = true;
    }

    /// Holds status snapshots back (job updates still go out), or lets them go again.
    pub fn hold_status(&mut self, held: bool) {
        self.status_held = held;
    }

    fn has_jobs(&self) -> bool {
        !self.pending.is_empty() || !self.removed.is_empty() || !self.discarded.is_empty()
    }

    fn status_waiting(&self) -> bool {
        self.status_dirty && !self.status_held
    }

    pub fn has_pending(&self) -> bool {
        self.has_jobs() || self.status_waiting()
    }

    /// The spacing of job batches: shorter while an interactive job's change waits.
    fn jobs_every(&self) -> Millis {
        if self.urgent {
            URGENT_EVERY_MS
        } else {
            JOBS_EVERY_MS
        }
    }

    /// When the next flush is due, if anything waits.
    pub fn next_due(&self) -> Option<Millis> {
        let jobs = self
            .has_jobs()
            .then(|| self.last_jobs.map_or(0, |t| t + self.jobs_every()));
        let status = self
            .status_waiting()
            .then(|| self.last_status.map_or(0, |t| t + STATUS_EVERY_MS));
        match (jobs, status) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes what is due at `now`. `idle`: the queue just went idle, send everything now.
    pub fn take_due(&mut self, now: Millis, idle: bool) -> Flush {
        let mut flush = Flush::default();
        let every = self.jobs_every();
        let jobs_due = idle || self.last_jobs.is_none_or(|t| now >= t + every);
        if self.has_jobs() && jobs_due {
            flush.jobs = std::mem::take(&mut self.pending);
            flush.removed = std::mem::take(&mut self.removed);
            flush.discarded = std::mem::take(&mut self.discarded);
            self.index.clear();
            self.urgent = false;
            self.last_jobs = Some(now);
        }
        let status_due = idle || self.last_status.is_none_or(|t| now >= t + STATUS_EVERY_MS);
        if self.status_waiting() && status_due {
            flush.status = true;
            self.status_dirty = false;
            self.last_status = Some(now);
        }
        flush
    }
}

/// One flush's job news as the tabs receive it: every tab gets each job's state, and only the
/// tab that enqueued a job gets its outcome and the server's words (see
/// [`JobUpdate::state_only`]). Encoded once for all, and once more for each tab that gets
/// something of its own.
#[derive(Debug, Default, PartialEq)]
pub struct JobNews {
    pub for_all: String,
    /// Tab (client id) and the message it gets instead of `for_all`.
    pub for_tab: Vec<(String, String)>,
}

impl JobNews {
    /// `requester` names the tab that enqueued a job, if this worker knows it.
    pub fn new<'a>(
        updates: &[JobUpdate],
        removed: Vec<JobId>,
        discarded: Vec<JobId>,
        requester: impl Fn(&JobId) -> Option<&'a str>,
    ) -> Self {
        let mut shared = Vec::with_capacity(updates.len());
        // Per tab, the positions of the updates it gets in full.
        let mut full_for: Vec<(&str, Vec<usize>)> = Vec::new();
        for (i, u) in updates.iter().enumerate() {
            match u.state_only() {
                None => shared.push(u.clone()),
                Some(state) => {
                    shared.push(state);
                    if let Some(tab) = requester(&u.id) {
                        match full_for.iter_mut().find(|(t, _)| *t == tab) {
                            Some((_, at)) => at.push(i),
                            None => full_for.push((tab, vec![i])),
                        }
                    }
                }
            }
        }
        let encode = |updates: Vec<JobUpdate>| {
            protocol::encode(&WorkerMessage::Jobs {
                updates,
                removed: removed.clone(),
                discarded: discarded.clone(),
            })
        };
        let mut for_tab = Vec::with_capacity(full_for.len());
        for (tab, at) in full_for {
            let mut own = shared.clone();
            for i in at {
                own[i] = updates[i].clone();
            }
            for_tab.push((tab.to_string(), encode(own)));
        }
        Self {
            for_all: encode(shared),
            for_tab,
        }
    }

    /// The message of the tab with this client id, if it gets one of its own.
    pub fn own(&self, id: &str) -> Option<&str> {
        self.for_tab
            .iter()
            .find(|(tab, _)| tab == id)
            .map(|(_, m)| m.as_str())
    }
}

#[cfg(target_arch = "wasm32")]
pub use web::{forget_recipients, post_to_all};

#[cfg(target_arch = "wasm32")]
mod web {
    use std::cell::RefCell;

    use js_sys::{Array, Promise};
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_futures::JsFuture;
    use web_sys::{Client, ClientQueryOptions, ClientType, ServiceWorkerGlobalScope};

    use super::{JobNews, Recipients};
    use crate::error::SwError;
    use sluice_shared::Millis;

    thread_local! {
        static RECIPIENTS: RefCell<Recipients<Array>> = const { RefCell::new(Recipients::new()) };
    }

    /// A message event came from a page: the next broadcast asks the browser for the tabs.
    pub fn forget_recipients() {
        RECIPIENTS.with(|r| r.borrow_mut().forget());
    }

    /// Posts the job news (each tab its own version) and then each message (JSON text) to
    /// every window of the origin, controlled or not.
    pub async fn post_to_all(
        news: Option<&JobNews>,
        messages: &[String],
        now: Millis,
    ) -> Result<usize, SwError> {
        if news.is_none() && messages.is_empty() {
            return Ok(0);
        }
        let clients = match RECIPIENTS.with(|r| r.borrow().fresh(now)) {
            Some(tabs) => tabs,
            None => {
                let scope: ServiceWorkerGlobalScope = js_sys::global().unchecked_into();
                let options = ClientQueryOptions::new();
                options.set_include_uncontrolled(true);
                options.set_type(ClientType::Window);
                let found: Promise = scope.clients().match_all_with_options(&options);
                let tabs: Array = JsFuture::from(found).await?.unchecked_into();
                RECIPIENTS.with(|r| r.borrow_mut().found(now, tabs.clone()));
                tabs
            }
        };
        let mut values: Vec<JsValue> = Vec::with_capacity(messages.len());
        for m in messages {
            values.push(JsValue::from_str(m));
        }
        let for_all = news.map(|n| JsValue::from_str(&n.for_all));
        let mut reached = 0;
        for client in clients.iter() {
            let client: Client = client.unchecked_into();
            if let (Some(news), Some(for_all)) = (news, &for_all) {
                let own = news.own(&client.id()).map(JsValue::from_str);
                if client.post_message(own.as_ref().unwrap_or(for_all)).is_ok() {
                    reached += 1;
                }
            }
            for v in &values {
                // One closed tab must not keep the others from hearing.
                if client.post_message(v).is_ok() {
                    reached += 1;
                }
            }
        }
        Ok(reached)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_shared::{JobState, Lane};

    #[test]
    fn the_tabs_are_reused_while_fresh_and_asked_again_after_a_page_spoke() {
        let mut r = Recipients::new();
        assert_eq!(r.fresh(1_000), None);
        r.found(1_000, vec!["tab a"]);
        assert_eq!(r.fresh(1_000), Some(vec!["tab a"]));
        assert_eq!(
            r.fresh(1_000 + RECIPIENTS_FRESH_MS - 1),
            Some(vec!["tab a"])
        );
        assert_eq!(r.fresh(1_000 + RECIPIENTS_FRESH_MS), None);
        // A clock that went back (a restored worker's saved time) does not extend the list.
        assert_eq!(r.fresh(999), None);
        r.found(5_000, vec!["tab a"]);
        r.forget();
        assert_eq!(r.fresh(5_001), None);
    }

    fn update(id: &str, state: JobState) -> JobUpdate {
        JobUpdate {
            id: id.into(),
            state,
            lane: Lane::Bulk,
            key: None,
            group_id: None,
            budget: "b".into(),
            attempts: 0,
            not_before: 0,
            coalesced: 0,
            last_error: None,
            outcome: None,
            withheld: false,
            waiting_for: Vec::new(),
        }
    }

    #[test]
    fn only_the_tab_that_enqueued_a_job_hears_its_outcome() {
        use sluice_shared::job::{JobError, JobOutcome};
        let secret = JobOutcome {
            status: 201,
            headers: vec![("location".into(), "/api/contacts/7".into())],
            body: "{\"token\":\"s3cret\"}".into(),
        };
        let done = JobUpdate {
            outcome: Some(secret),
            ..update("mine", JobState::Done)
        };
        let refused = JobUpdate {
            last_error: Some(JobError {
                status: Some(400),
                message: "email s3cret@example.com is taken".into(),
            }),
            ..update("theirs", JobState::Failed)
        };
        let plain = update("queued", JobState::Queued);
        let updates = vec![done, refused, plain];
        let news = JobNews::new(&updates, vec!["gone".into()], vec![], |id| {
            match id.as_str() {
                "mine" => Some("tab a"),
                "theirs" => Some("tab b"),
                _ => None,
            }
        });
        assert!(!news.for_all.contains("s3cret"), "{}", news.for_all);
        assert!(news.for_all.contains("\"withheld\":true"));
        assert!(
            news.for_all.contains("\"status\":400"),
            "the status is state"
        );
        let a = news.own("tab a").expect("tab a gets its own");
        assert!(a.contains("token") && !a.contains("taken"), "{a}");
        let b = news.own("tab b").expect("tab b gets its own");
        assert!(b.contains("is taken") && !b.contains("token"), "{b}");
        assert_eq!(
            news.own("tab c"),
            None,
            "a tab that enqueued nothing gets the state"
        );
        for message in [&news.for_all, a, b] {
            assert!(message.contains("\"removed\":[\"gone\"]"), "{message}");
            assert!(message.contains("\"queued\""), "{message}");
        }
        // Nothing to hide: one message for all.
        let news = JobNews::new(&[update("q", JobState::Queued)], vec![], vec![], |_| {
            Some("tab a")
        });
        assert!(news.for_tab.is_empty());
    }

    #[test]
    fn coalesces_per_job_keeping_first_order() {
        let mut b = Batcher::default();
        b.push(
            vec![update("a", JobState::Queued), update("b", JobState::Queued)],
            false,
        );
        b.push(vec![update("a", JobState::Sending)], false);
        let f = b.take_due(0, false);
        assert_eq!(f.jobs.len(), 2);
        assert_eq!(f.jobs[0].id, "a");
        assert_eq!(f.jobs[0].state, JobState::Sending);
        assert!(f.status);
        assert!(!b.has_pending());
    }

    #[test]
    fn throttles_batches_and_status() {
        let mut b = Batcher::default();
        b.push(vec![update("a", JobState::Queued)], false);
        assert_eq!(b.next_due(), Some(0));
        assert!(!b.take_due(1_000, false).is_empty());
        b.push(vec![update("a", JobState::Sending)], false);
        assert_eq!(b.next_due(), Some(1_000 + JOBS_EVERY_MS));
        assert!(b.take_due(1_050, false).is_empty());
        let f = b.take_due(1_000 + JOBS_EVERY_MS, false);
        assert_eq!(f.jobs.len(), 1);
        assert!(!f.status, "status waits for its own, slower beat");
        assert_eq!(b.next_due(), Some(1_000 + STATUS_EVERY_MS));
        assert!(b.take_due(1_000 + STATUS_EVERY_MS, false).status);
        assert_eq!(b.next_due(), None);
    }

    #[test]
    fn a_dismissal_goes_with_the_next_batch_and_is_told_to_every_tab() {
        let mut b = Batcher::default();
        b.push_discarded("d".to_string());
        assert_eq!(b.next_due(), Some(0), "a dismissal alone is news");
        let f = b.take_due(0, false);
        assert_eq!(f.discarded, vec!["d".to_string()]);
        assert!(!b.has_pending());
        let news = JobNews::new(&[], vec![], f.discarded, |_| None);
        assert!(
            news.for_all.contains("\"discarded\":[\"d\"]"),
            "{}",
            news.for_all
        );
    }

    #[test]
    fn removals_go_with_the_next_batch_and_replace_a_pending_update() {
        let mut b = Batcher::default();
        b.push(
            vec![update("a", JobState::Done), update("b", JobState::Done)],
            false,
        );
        b.push_removed(&["a".to_string(), "z".to_string()]);
        b.push(vec![update("b", JobState::Done)], false);
        assert_eq!(b.next_due(), Some(0));
        let f = b.take_due(0, false);
        assert_eq!(f.jobs.len(), 1);
        assert_eq!(f.jobs[0].id, "b");
        assert_eq!(f.removed, vec!["a".to_string(), "z".to_string()]);
        b.push_removed(&["b".to_string()]);
        assert_eq!(b.next_due(), Some(JOBS_EVERY_MS), "batched like updates");
        assert!(b.take_due(1, false).removed.is_empty());
        assert_eq!(
            b.take_due(JOBS_EVERY_MS, false).removed,
            vec!["b".to_string()]
        );
        assert!(b.take_due(STATUS_EVERY_MS, false).status);
        assert!(!b.has_pending());
    }

    #[test]
    fn a_held_status_waits_until_released() {
        let mut b = Batcher::default();
        b.hold_status(true);
        b.push(vec![update("a", JobState::Done)], false);
        let f = b.take_due(0, true);
        assert_eq!(f.jobs.len(), 1, "job updates still go");
        assert!(!f.status);
        assert_eq!(b.next_due(), None);
        assert!(!b.has_pending());
        b.hold_status(false);
        assert_eq!(b.next_due(), Some(0));
        assert!(b.take_due(1, false).status);
    }

    #[test]
    fn interactive_changes_go_within_a_frame_and_idle_at_once() {
        let mut b = Batcher::default();
        b.push(vec![update("a", JobState::Queued)], false);
        assert_eq!(b.take_due(1_000, false).jobs.len(), 1);
        b.push(vec![update("b", JobState::Done)], true);
        assert_eq!(b.next_due(), Some(1_000 + URGENT_EVERY_MS));
        assert!(b
            .take_due(1_000 + URGENT_EVERY_MS - 1, false)
            .jobs
            .is_empty());
        assert_eq!(b.take_due(1_000 + URGENT_EVERY_MS, false).jobs.len(), 1);
        // After a quiet spell, at once.
        b.push(vec![update("c", JobState::Sending)], true);
        assert_eq!(b.take_due(2_000, false).jobs.len(), 1);
        b.push(vec![update("d", JobState::Done)], false);
        let f = b.take_due(2_001, true);
        assert_eq!(f.jobs.len(), 1);
        assert!(f.status);
    }
}
