//! One run: the simulated worker (its engine, its pump, its storage) against the strict server,
//! on a fake clock that jumps from one event to the next.
//!
//! Each pass of the loop ([`Simulation::step`]) is what the worker does when it wakes: the
//! pump's turn, the requests it hands out, the save it begins; then the clock moves to the next
//! instant anything is due, and that event is delivered by a method of its own. Every random
//! number comes from one generator, in the order these methods draw it: that order is what
//! makes a seed replay the same run, so a draw moved or added changes every figure after it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::disk::{Disk, Saver};
use super::server::StrictServer;
use super::{Report, Scenario};
use crate::engine::{Changes, Engine, Response, Transmit, TransportError};
use crate::headers::Headers;
use crate::job::{Job, JobId};
use crate::pump::Pump;
use crate::random::Rng;
use crate::sim_tokens::tokens_of;
use crate::time::Millis;

enum Event {
    Enqueue(usize),
    Arrive(u64),
    Respond(u64),
    Timeout(u64),
    Rebuild,
    OtherCaller,
    /// The oldest save in flight of this engine generation landed.
    Saved(u64),
}

/// The events to come. Those due at one instant come out in the order they were scheduled, so
/// that a seed replays the same run.
#[derive(Default)]
struct Agenda {
    events: BinaryHeap<Reverse<(Millis, u64, usize)>>,
    payloads: Vec<Option<Event>>,
    seq: u64,
}

impl Agenda {
    fn push(&mut self, at: Millis, event: Event) {
        self.payloads.push(Some(event));
        self.events
            .push(Reverse((at, self.seq, self.payloads.len() - 1)));
        self.seq += 1;
    }

    fn next_at(&self) -> Option<Millis> {
        self.events.peek().map(|Reverse((t, _, _))| *t)
    }

    fn pop(&mut self) -> Due {
        let Some(Reverse((_, _, idx))) = self.events.pop() else {
            return Due::End;
        };
        match self.payloads.get_mut(idx).and_then(Option::take) {
            Some(event) => Due::Event(event),
            None => Due::Turn,
        }
    }
}

/// What the clock found when it moved on.
enum Due {
    Event(Event),
    /// Nothing to deliver, only the pump's timer: its next turn handles it.
    Turn,
    /// Nothing more before the horizon.
    End,
}

/// A request we sent, from its start to its answer or timeout.
pub(super) struct SentRequest {
    job_id: JobId,
    /// Which incarnation of the engine sent it: responses to a dead one are lost.
    generation: u64,
    pub(super) idempotency_key: Option<String>,
    pub(super) key: Option<String>,
    pub(super) seq_tag: u64,
    /// Its real cost in tokens, from its body (see `sim_tokens`).
    pub(super) tokens: u64,
    /// The server's answer, on its way back.
    response: Option<Response>,
    /// Answered or timed out: whichever comes second finds it settled and is dropped.
    settled: bool,
}

/// Everything one run keeps between events.
pub(super) struct Simulation<'a> {
    scenario: &'a Scenario,
    /// The one random source (see the top of this file on its order).
    rng: Rng,
    now: Millis,
    agenda: Agenda,
    engine: Engine,
    /// The worker's pump, the same code the service worker runs (see `crate::pump`); the
    /// simulation only carries out what it asks for against the fake clock, server and storage.
    pump: Pump,
    /// Which incarnation of the engine runs: a rebuild starts a new one, and what was meant for
    /// an older one (answers, saves) is dropped.
    generation: u64,
    disk: Disk,
    /// Every request sent, at the index its events name.
    requests: Vec<SentRequest>,
    server: StrictServer<'a>,
    report: Report,
    /// Arrivals not delivered yet: the run cannot end while some are to come.
    enqueues_left: usize,
    /// Jobs whose enqueue the page was told is kept: each must be found at the end.
    enqueued_ids: Vec<JobId>,
    first_start: HashMap<JobId, Millis>,
    /// Our first start, from which the run counts as busy.
    busy_from: Option<Millis>,
}

impl<'a> Simulation<'a> {
    /// The engine draws its seed first, then the scenario's arrivals, rebuilds and other
    /// callers are scheduled in that order.
    pub(super) fn new(scenario: &'a Scenario) -> Self {
        let mut rng = Rng::seeded(scenario.seed);
        let engine = Engine::new(scenario.engine.clone(), Rng::seeded(rng.next_u64()))
            .expect("scenario configuration must be valid");
        let mut agenda = Agenda::default();
        for (i, a) in scenario.arrivals.iter().enumerate() {
            agenda.push(a.at, Event::Enqueue(i));
        }
        for &at in &scenario.rebuilds {
            agenda.push(at, Event::Rebuild);
        }
        if scenario.server.other_callers_per_s > 0.0 {
            agenda.push(0, Event::OtherCaller);
        }
        Self {
            scenario,
            rng,
            now: 0,
            agenda,
            engine,
            pump: Pump::default(),
            generation: 0,
            disk: Disk::default(),
            requests: Vec::new(),
            server: StrictServer::new(&scenario.server),
            report: Report::default(),
            enqueues_left: scenario.arrivals.len(),
            enqueued_ids: Vec::new(),
            first_start: HashMap::new(),
            busy_from: None,
        }
    }

    /// One wake-up of the worker and the event that follows it; false once the run is over.
    pub(super) fn step(&mut self) -> bool {
        self.pump.turn(&mut self.engine, self.now);
        self.send_requests();
        self.begin_pump_save();
        let event = match self.advance_clock() {
            Due::Event(event) => event,
            Due::Turn => return true,
            Due::End => return false,
        };
        if !self.deliver(event) {
            // A stale event goes straight on to the next turn, as the loop always has: checking
            // for the end here too could end a run at another instant and change its figures.
            return true;
        }
        !(self.enqueues_left == 0 && self.engine.jobs().all(|j| j.state.is_terminal()))
    }

    /// Hands the requests the pump lets go to the network.
    fn send_requests(&mut self) {
        for t in self.pump.poll_sends() {
            self.note_start(&t);
            self.send(t);
        }
    }

    /// What the report keeps of a start: its instant, and how long its job waited for its
    /// first.
    fn note_start(&mut self, t: &Transmit) {
        let now = self.now;
        self.report.requests += 1;
        self.report.starts.push(now);
        let (engine, report) = (&self.engine, &mut self.report);
        self.first_start.entry(t.job_id.clone()).or_insert_with(|| {
            if let Some(j) = engine.job(&t.job_id) {
                report.waits.push((j.enqueued_at, now, j.lane));
            }
            now
        });
        self.busy_from.get_or_insert(now);
    }

    /// Puts a request on its way to the server, with its attempt timeout: the shorter of the
    /// engine's and the request's own, as the worker's `fetch` is aborted.
    fn send(&mut self, t: Transmit) {
        let scenario = self.scenario;
        let model = &scenario.server;
        let job = self.engine.job(&t.job_id);
        let idempotency_key = Headers(&t.headers)
            .values("idempotency-key")
            .next()
            .map(str::to_owned);
        let id = self.requests.len() as u64;
        self.requests.push(SentRequest {
            job_id: t.job_id.clone(),
            generation: self.generation,
            idempotency_key,
            key: job.and_then(|j| j.key.clone()),
            seq_tag: job.map_or(0, |j| j.seq),
            tokens: tokens_of(t.body.as_deref()),
            response: None,
            settled: false,
        });
        // The first request's CORS preflight goes before it.
        let first = if self.report.requests == 1 {
            model.first_extra_ms
        } else {
            0
        };
        let up = model.one_way_ms
            + first
            + self
                .rng
                .below_or_equal(model.arrival_jitter_ms.unwrap_or(model.jitter_ms));
        self.agenda.push(self.now + up, Event::Arrive(id));
        let timeout_ms = t.timeout_ms.min(scenario.engine.retry.timeout_ms);
        self.agenda.push(self.now + timeout_ms, Event::Timeout(id));
    }

    /// Begins the pump's own save when it asks for one.
    fn begin_pump_save(&mut self) {
        if self.pump.poll_save() {
            let changes = self.engine.persistence().take_changes();
            self.begin_save(changes, Saver::Pump);
        }
    }

    /// Queues a save behind those in flight; it lands as an event of this engine's generation,
    /// so a kill before then drops it.
    fn begin_save(&mut self, changes: Changes, by: Saver) {
        let lands_at = self
            .disk
            .begin(changes, by, self.now, self.scenario.save_ms);
        self.agenda.push(lands_at, Event::Saved(self.generation));
    }

    /// Moves the clock to the next instant anything is due: the earliest event, or the pump's
    /// timer when that comes first (or alone).
    fn advance_clock(&mut self) -> Due {
        let next_event = self.agenda.next_at();
        let next_timer = self.pump.poll_timeout(&self.engine, self.now);
        let next = match (next_event, next_timer) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => return Due::End,
        };
        if next > self.scenario.horizon_ms {
            return Due::End;
        }
        self.now = next;
        if next_event != Some(self.now) {
            return Due::Turn;
        }
        self.agenda.pop()
    }

    /// Carries out an event; false when it was stale: meant for a killed engine, or for a
    /// request already answered or timed out.
    fn deliver(&mut self, event: Event) -> bool {
        match event {
            Event::Saved(of) => return self.save_landed(of),
            Event::Enqueue(i) => self.enqueue(i),
            Event::OtherCaller => self.other_caller_arrives(),
            Event::Arrive(id) => self.arrive(id),
            Event::Respond(id) => return self.respond(id),
            Event::Timeout(id) => return self.time_out(id),
            Event::Rebuild => self.rebuild(),
        }
        true
    }

    /// The oldest save in flight landed: the engine learns it, and whoever began it goes on.
    fn save_landed(&mut self, of: u64) -> bool {
        if of != self.generation {
            return false;
        }
        let Some(by) = self.disk.land_oldest(&mut self.engine) else {
            return false;
        };
        match by {
            Saver::Pump => self.pump.on_saved(true),
            Saver::Request { starts, enqueued } => {
                // `enqueue` resolves now: the page knows its jobs are kept.
                self.enqueued_ids.extend(enqueued);
                self.pump.request_save_ended(starts, true);
            }
        }
        true
    }

    /// A page's batch comes in. As the worker handles a page's request: its own save, with the
    /// starts it makes possible, and the page is answered only once that save landed.
    fn enqueue(&mut self, i: usize) {
        self.enqueues_left -= 1;
        let specs = self.scenario.arrivals[i].specs.clone();
        let mut enqueued = Vec::new();
        for spec in specs {
            if let Ok(e) = self.engine.enqueue(spec, self.now) {
                if !e.coalesced {
                    enqueued.push(e.id);
                }
            }
        }
        let starts = self.pump.request_save_begins(&mut self.engine, self.now);
        let changes = self.engine.persistence().take_changes();
        if changes.is_empty() {
            self.pump.request_save_ended(starts, true);
        } else {
            self.pump.save_taken(self.now);
            self.begin_save(changes, Saver::Request { starts, enqueued });
        }
    }

    /// Another caller spends from the same quota; the next one comes after a random gap.
    fn other_caller_arrives(&mut self) {
        self.report.other_arrivals += 1;
        self.server.count_other_caller(self.now);
        // Half the mean gap plus up to a whole one: the gaps average `gap`, so others spend
        // `other_callers_per_s`.
        let gap = (1000.0 / self.scenario.server.other_callers_per_s).max(1.0) as u64;
        let jitter = self.rng.below_or_equal(gap);
        self.agenda
            .push(self.now + gap / 2 + jitter, Event::OtherCaller);
    }

    /// A request reaches the server. Its answer travels back unless it is lost, in which case
    /// only the attempt's timeout will end it.
    fn arrive(&mut self, id: u64) {
        let model = &self.scenario.server;
        let req = &mut self.requests[id as usize];
        let Some(response) = self
            .server
            .answer(self.now, req, &mut self.rng, &mut self.report)
        else {
            return;
        };
        req.response = Some(response);
        // Drawn only when asked for, so that the other runs keep their sequences.
        let slow = if model.slow_rate > 0.0 && self.rng.unit() < model.slow_rate {
            model.slow_ms
        } else {
            0
        };
        let down =
            model.service_ms + slow + model.one_way_ms + self.rng.below_or_equal(model.jitter_ms);
        self.agenda.push(self.now + down, Event::Respond(id));
    }

    /// An answer reaches the worker.
    fn respond(&mut self, id: u64) -> bool {
        let req = &mut self.requests[id as usize];
        if req.settled || req.generation != self.generation {
            return false;
        }
        req.settled = true;
        if let Some(r) = req.response.take() {
            self.pump
                .on_response(&mut self.engine, &req.job_id, r, self.now);
        }
        true
    }

    /// A request's attempt timed out: its answer was lost, or is slower than the timeout.
    fn time_out(&mut self, id: u64) -> bool {
        let req = &mut self.requests[id as usize];
        if req.settled || req.generation != self.generation {
            return false;
        }
        req.settled = true;
        self.pump.on_transport_error(
            &mut self.engine,
            &req.job_id,
            TransportError::Timeout,
            self.now,
        );
        true
    }

    /// The browser killed the worker: memory is gone, the storage remains. The saves in flight
    /// and the starts waiting for one are lost with it; the new instance restores its engine
    /// from what landed and runs a new pump.
    fn rebuild(&mut self) {
        self.report.rebuilds += 1;
        self.generation += 1;
        self.disk.lose_saves_in_flight(self.now);
        self.pump = Pump::default();
        let (jobs, budgets) = self.disk.saved();
        self.engine = Engine::restore(
            self.scenario.engine.clone(),
            Rng::seeded(self.rng.next_u64()),
            jobs,
            budgets,
            self.now,
        )
        .expect("saved state must restore");
    }

    /// The report: what became of every job enqueued, and how the run went against the limit.
    pub(super) fn finish(self) -> Report {
        let mut report = self.report;
        let jobs: Vec<Job> = self.engine.jobs().cloned().collect();
        report.count_jobs(&jobs, self.disk.forgotten(), &self.enqueued_ids, self.now);
        report.measure(&self.server, self.busy_from);
        report.final_jobs = jobs;
        report
    }
}
