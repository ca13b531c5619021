//! `sluice`: the demo server around Sluice's service worker, usable in-process by tests.
//!
//! - [`api`]: a strict, rate-limited demo API that records every arrival, with a control API
//!   for tests and the demo page.
//! - [`assets`]: the wasm bundles and `www/` files embedded at build time.
//! - [`package`]: the npm package an app installs (`sluice build`), also served under `/pkg/`.
//! - [`server`]: the whole same-origin site (static files, `/pkg/`, API) as one router.
//! - [`listen`]: starting any of these servers in the background.
//! - [`simulate`]: the engine against the simulated strict server (`sluice simulate`).
//! - [`browser`]: headless Chromium driven over CDP against this server (tests and bench).
//! - [`bench`]: the real worker in headless Chromium against the strict API (`sluice bench`).
//! - [`real_limiters`]: nginx, express-rate-limit and rate-limiter-flexible as child processes
//!   in front of a counting backend (the browser tests' limiters, `sluice bench --limiters`).
//! - [`proxy`]: `sluice proxy`, one upstream budget shared by many browsers and instances (the
//!   `sluice-proxy` crate, re-exported).

pub mod api;
pub mod assets;
pub mod bench;
pub mod browser;
pub mod listen;
pub mod package;
pub mod real_limiters;
pub mod server;
pub mod simulate;

pub use sluice_proxy as proxy;
