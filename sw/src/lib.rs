//! Sluice service worker (see issue: built on the engine in `sluice-shared`).
