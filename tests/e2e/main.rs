//! End-to-end tests: the real service worker and page client in headless Chromium, against
//! the demo API in-process. One test binary (fewer links); each test has its own server and
//! browser. See `support` for the harness (a thin layer over `sluice::browser`, which `sluice
//! bench` drives too).
//!
//! Issue 4's scenarios, by file: `limits` (bulk at the limit, 429 pauses in both
//! `Retry-After` forms, the server's remaining count, low-rate limits), `ordering`
//! (idempotency of a create whose answer is lost, coalescing, per-key order, lanes and aging),
//! `resilience` (reload, three tabs, a worker killed five times, offline with and without
//! Background Sync, every tab closed, a new worker version), `input` (bad input, intercepted
//! `fetch`), `bench` (`sluice bench --quick` and `--peers` end to end). Issue 5's demo page, as
//! a visitor meets it (screenshots, the live region, keyboard use, axe-core), in `demo`. The
//! example app an app developer would make (`examples/vite-app`, the installed package), in
//! `package`. The core scenarios again in Firefox ESR (no Background Sync: the next visit
//! resumes), over WebDriver BiDi, in `firefox`. Issue 41's real rate limiters (nginx `limit_req`,
//! express-rate-limit, rate-limiter-flexible) in front of a counting backend, in `limiters`.
//! Issue 39's `<sluice-inspector>` element (axe-core, the keyboard, a conflict resolved), in
//! `inspector`; its dependent jobs (an offline create, edit and delete of one record), in
//! `dependencies`.
//!
//! Run: `cargo test --test e2e` (timings and measured figures are printed); `cargo test --test
//! e2e firefox` runs the Firefox ones. Without Chromium (for those: Firefox, node and `npm ci
//! --prefix tests/firefox`) they skip, unless `CI` is set. Tests that measure time run alone
//! (`Options::exclusive`).

mod support;

mod basic;
mod batching;
mod bench;
mod conflicts;
mod credentials;
mod demo;
mod dependencies;
mod dialects;
mod firefox;
mod first_hour;
mod groups;
mod input;
mod inspector;
mod lifecycle;
mod limiters;
mod limits;
mod ordering;
mod package;
mod resilience;
mod security;
