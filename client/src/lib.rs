//! Sluice page client: registers the service worker and talks to it.
//!
//! Every tab of an origin hands its HTTP actions to the worker, which alone sends them within
//! the configured rate limits. This crate is what a page loads (as wasm, through
//! `/pkg/sluice_client.js`): a `Sluice` class for JavaScript and the same type for Rust code.
//!
//! - [`core`]: the request table, resends, keep-alives and `done` tracking, sans-IO.
//! - [`job`]: turning a page's job object into the wire [`JobSpec`](sluice_shared::JobSpec).
//! - [`input`]: reading the page's other input (register options, a configuration).
//! - `web` (wasm only): the browser glue and the exported JS API.

pub mod core;
pub mod input;
pub mod job;
pub mod oneshot;

#[cfg(target_arch = "wasm32")]
mod web;
#[cfg(target_arch = "wasm32")]
pub use web::{Sluice, Subscription};

pub use crate::core::{ClientError, Done, DoneResult, JobEnd, Timing};
pub use crate::input::RegisterOptions;
pub use sluice_shared::protocol::{JobUpdate, WorkerMessage};
pub use sluice_shared::status::Status;

use wasm_bindgen::prelude::*;

/// Lets the page and build checks tell which build of the client is loaded.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// The default allocator (dlmalloc) is several times Talc's size in the wasm; a page's wasm
/// is single-threaded, which is what `WasmDynamicTalc` assumes.
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();
