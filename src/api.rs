//! A strict, rate-limited demo API that records every arrival.
//!
//! It stands in for the real APIs that Sluice's worker talks to, strict in the ways that make
//! client-side limiting hard: it counts requests when they *arrive* (after the network has
//! bunched them up), with an exact sliding-window log, answers everything over the limit with
//! 429, and can add latency, jitter, server errors and "applied, but the response never came"
//! faults. Everything is recorded so tests can assert on what the server saw.
//!
//! # Semantics
//! - **Limit**: at most `limit` admitted arrivals in any half-open window `(t - window, t]`.
//!   An arrival is stamped when it arrives: after the arrival hold below, before the answer's
//!   latency. The limit check, the 429 decision, the rate-limit headers and the recorded
//!   `atMs`/`atNs` (and so "most arrivals in any window") all use that instant.
//! - **Arrival jitter** (`arrivalJitterMs`): each `/api/` request is held a uniform 0..=J ms
//!   (from the seeded generator) after the server receives it and before it arrives, as if the
//!   network had delayed the way there. Requests sent in order can therefore arrive reordered,
//!   and are counted and applied in arrival order. A held request arrives, is counted and is
//!   applied even if the client gives up meanwhile: the server saw it. With 0 (the default)
//!   requests arrive the instant they are received, as before, and no random number is drawn.
//! - **Rejected arrivals do not count** against the limit (unless `countRejected`), so a client
//!   that retries too early is refused but not punished further. Real servers differ; this
//!   choice makes "arrivals admitted per window" the one number a client can be judged on.
//! - **Order of decisions** for an arrival under `/api/`: a scripted response, if one is queued
//!   for it, decides; otherwise the limiter (429, not applied), then the fault roll (500/503,
//!   counted, not applied), then the hang roll (applied, response held back for `hangMs`).
//! - **Latency** (`latencyMs ± jitterMs`, uniform) delays every `/api/` response, 429s included,
//!   as a network round trip would. It starts at the arrival, so it comes on top of any hold.
//! - **Headers** on every `/api/` response: `Date`, and per `headers` mode `X-RateLimit-Limit`,
//!   `X-RateLimit-Remaining`, `X-RateLimit-Reset` and/or IETF `RateLimit-Policy` / `RateLimit`.
//!   Reset is the delta in seconds (rounded up) until Remaining is back to Limit. A 429 carries
//!   `Retry-After`: the time until a slot frees, as delta seconds (rounded up) or an HTTP-date.
//! - **Idempotency-Key**: a successful non-GET request's response is stored under its key; a
//!   repeat with the same method and path is not applied again and gets the stored response
//!   (a create's 201 becomes 200) with `Idempotent-Replayed: true`; the same key on a different
//!   method or path gets 422. 429s, faults and 4xx answers are not stored, so they may be retried.
//! - **CORS**: any origin; preflights are answered at once (never held) and never counted.
//!
//! # Resources
//! `POST /api/contacts` creates (201 + `Location`), `GET /api/contacts` lists,
//! `GET/PATCH/PUT/DELETE /api/contacts/{id}` (PATCH is a JSON merge patch, DELETE answers 204).
//! `GET /api/large?bytes=N` answers N bytes of text, streamed in 16 KiB chunks; how many the
//! server handed to the connection is in the stats (`largeBytesSent`), so a test can tell a
//! client that stops reading from one that reads everything.
//! `POST /api/contacts/batch` (an array of contact bodies), `POST /api/contacts/batch/update`
//! (HubSpot's `{"inputs": [{"id", "properties"}]}`, 200 or 207) and `POST /api/$batch`
//! (Microsoft Graph's `{"requests": [...]}`) carry up to 100 items each: a batch is one arrival
//! (limited, faulted, recorded and keyed as a whole), its items carried out one by one as the
//! single requests they stand for, with per-item faults `batchItemFailRate` and
//! `batchSubRateLimited` (`batch.rs` and `graph_batch.rs` give the shapes).
//! Any other method and path under `/api/` is answered 200 with a JSON echo, which says
//! whether the request carried cookies (`cookie`).
//!
//! # Control API (JSON, never rate-limited or recorded)
//! `GET|POST /__sluice/config`, `GET /__sluice/stats[?windowMs=]`,
//! `GET /__sluice/arrivals[?since=seq]`, `POST /__sluice/reset`,
//! `GET|POST|DELETE /__sluice/script`, `GET /__sluice/contacts`, `POST /__sluice/seed`
//! (`{"count": 2000, "fields": {...}}`: creates contacts until the store holds `count`, at
//! once, so a demo page has its data without spending the rate limit or the visitor's time).

mod arrival;
mod batch;
#[cfg(test)]
mod batch_tests;
mod config;
mod graph_batch;
mod hold;
mod http;
mod limiter;
mod records;
mod resources;
mod state;
mod store;
#[cfg(test)]
mod tests;

pub use batch::MAX_BATCH_ITEMS;
pub use config::*;
pub use http::*;
pub use records::*;
pub use state::*;

use batch::*;
use hold::Holds;
use resources::*;
use store::*;
