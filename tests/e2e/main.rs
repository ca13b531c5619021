//! End-to-end tests: the real service worker and page client in headless Chromium, against
//! the demo API in-process. One test binary (fewer links); each test has its own server and
//! browser. See `support` for the harness.
//!
//! Run: `cargo test --test e2e` (add `-- --nocapture` for timings). Without Chromium they
//! skip, unless `CI` is set.

mod support;

mod basic;
mod lifecycle;
mod limits;
