//! Why the engine refused an input, in its own type: the engine knows nothing of the wire.
//!
//! The worker turns it into the wire's `ProtocolError` at its edge (`From<EngineError>`, in
//! `protocol`), and the words are the wire's: `Display` goes through that conversion, so a
//! page, a test and the simulator read one text for one refusal, written in one place.

use std::fmt;

use crate::request_options::InvalidOption;

/// An input the engine refused; nothing of it changed the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EngineError {
    /// The job's URL is no absolute http(s) URL the engine can send to.
    InvalidUrl { url: String, message: String },
    /// The job's method, headers or options are not ones a browser can send.
    InvalidRequest { message: String },
    /// The job's body is larger than the configuration's `maxBodyBytes`.
    BodyTooLarge { bytes: usize, max_bytes: usize },
    /// The job names a budget the configuration does not have.
    UnknownBudget { budget: String, known: Vec<String> },
    /// The job names no budget and none covers its URL.
    NoBudgetForUrl { url: String },
    /// The job's URL lies outside what the worker script allows jobs to go to.
    UrlNotAllowed { url: String, allowed: String },
    /// One job of an `enqueue_many` (1-based `position` of `total`) was refused, so none was
    /// enqueued.
    InGroup {
        position: usize,
        total: usize,
        error: Box<EngineError>,
    },
    /// The job waits for a job that will not answer, or refers to an answer in a form that
    /// cannot be read (see `result_ref`).
    InvalidDependency { message: String },
    /// No job or group has this id.
    NotFound { id: String },
    /// The job is in a state that does not allow the action.
    IllegalTransition { message: String },
}

impl From<InvalidOption> for EngineError {
    fn from(e: InvalidOption) -> Self {
        EngineError::InvalidRequest { message: e.message }
    }
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::protocol::ProtocolError::from(self.clone()).fmt(f)
    }
}

impl std::error::Error for EngineError {}
