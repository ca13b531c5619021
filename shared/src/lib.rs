//! Sluice's engine, sans-IO.
//!
//! Everything that decides *what* to send and *when* lives here, as pure Rust with no browser
//! types, no clock reads and no I/O. The service worker feeds it events (`enqueue`, responses,
//! cancels) with the current time and carries out what it asks for (`poll_transmit`), arming a
//! single timer for `poll_timeout` whose firing is an input of its own (`handle_timeout`). The same code runs natively under `cargo test` and in the
//! simulator, where a fake clock drives hours of traffic in milliseconds.

pub mod batch;
pub mod body_rules;
pub mod concurrency_cap;
pub mod config;
pub mod headers;
pub mod id_map;
pub mod job;
/// The JSON codec the worker and the page client read and write their records and messages
/// with: the `sluice-json` crate, named `json` here for the engine's types and their users.
pub use sluice_json as json;
pub mod limiter;
pub mod preflight;
pub mod random;
pub mod request_options;
pub mod resources;
pub mod result_ref;
pub mod scope;
pub mod substring;
pub mod time;
pub mod windows_text;

pub use config::{Algorithm, BudgetConfig, EngineConfig, Window};
pub use job::{Job, JobId, JobKind, JobSpec, JobState, Lane};
pub use time::Millis;
pub mod budget;
pub mod engine;
pub mod protocol;
pub mod pump;
pub mod retry;
pub mod round_trips;
pub mod rto;
pub mod status;

pub use engine::{
    Changes, Engine, Enqueued, QueueCounts, Response, SaveId, StorageMode, Transmit, TransportError,
};
#[cfg(any(test, feature = "sim"))]
pub mod sim;
#[cfg(any(test, feature = "sim"))]
pub mod sim_tokens;
