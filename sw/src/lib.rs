//! Sluice service worker (see issue: built on the engine in `sluice-shared`).

use wasm_bindgen::prelude::*;

/// Lets the page and build checks tell which build of the worker is running.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
