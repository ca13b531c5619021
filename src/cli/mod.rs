//! The subcommands, one file each with its arguments and its run (`main.rs` parses and
//! dispatches), and what they share: the error `main` reports and the writing of a JSON file.

use std::net::SocketAddr;
use std::path::PathBuf;

use sluice::api;

pub(crate) mod bench;
pub(crate) mod build;
pub(crate) mod serve;
pub(crate) mod simulate;

#[derive(Debug, thiserror::Error)]
pub(crate) enum MainError {
    #[error("invalid API settings: {0}")]
    Config(#[from] api::ApiConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("server failed: {0}")]
    Serve(std::io::Error),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("simulation: {0}")]
    Simulate(String),
    #[error("build: {0}")]
    Package(String),
    #[error("bench: {0}")]
    Bench(sluice::bench::BenchError),
    #[error("{0}")]
    Proxy(#[from] sluice::proxy::ProxyConfigError),
    #[error(transparent)]
    ProxyRun(sluice::proxy::RunError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub(crate) fn write_json(path: &std::path::Path, json: &str) -> Result<(), MainError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| MainError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(path, json).map_err(|source| MainError::Write {
        path: path.to_path_buf(),
        source,
    })
}
