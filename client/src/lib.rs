//! Sluice page client.

use wasm_bindgen::prelude::*;

/// Lets the page and build checks tell which build of the client is loaded.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
