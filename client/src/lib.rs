//! Sluice page client.
