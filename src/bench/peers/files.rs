//! Finding the peers' install (`npm ci --prefix bench/peers`) at the pinned versions, and the
//! directory their page is served from.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{PeerOptions, MODULES_URL_DIR, PEERS_PAGE, PEERS_PATH, PINNED};
use crate::api::ApiConfig;
use crate::bench::{BenchError, BenchOptions};
use crate::browser::RigOptions;

/// The installed peers, and the directory the peer runs serve their page from.
pub struct PeerFiles {
    pub(super) node_modules: PathBuf,
    /// `peers.html` and a link to `node_modules`; removed when dropped.
    www: tempfile::TempDir,
}

#[derive(Deserialize)]
struct PackageJson {
    version: String,
}

impl PeerFiles {
    /// Finds `node_modules` with every pinned package at its version and lays out the page's
    /// directory; a missing or different install is [`BenchError::PeersNotInstalled`].
    pub fn find(options: &PeerOptions) -> Result<PeerFiles, BenchError> {
        let dir = match &options.dir {
            Some(dir) => dir.clone(),
            None => default_dir(),
        };
        let node_modules = dir.join("node_modules");
        for (name, version) in PINNED {
            let manifest = node_modules.join(name).join("package.json");
            let found = std::fs::read(&manifest)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<PackageJson>(&bytes).ok());
            match found {
                Some(p) if p.version == version => {}
                Some(p) => {
                    return Err(BenchError::PeersNotInstalled {
                        missing: format!(
                            "{} is {}, the lockfile pins {version}",
                            manifest.display(),
                            p.version
                        ),
                    })
                }
                None => {
                    return Err(BenchError::PeersNotInstalled {
                        missing: format!("no readable {}", manifest.display()),
                    })
                }
            }
        }
        let node_modules = node_modules
            .canonicalize()
            .map_err(|e| BenchError::Io(format!("{}: {e}", node_modules.display())))?;
        let www = tempfile::Builder::new()
            .prefix("sluice-bench-peers-")
            .tempdir()
            .map_err(|e| BenchError::Io(format!("a directory for the peers' page: {e}")))?;
        let page = www.path().join(PEERS_PATH.trim_start_matches('/'));
        std::fs::write(&page, PEERS_PAGE)
            .map_err(|e| BenchError::Io(format!("{}: {e}", page.display())))?;
        // A link, not a copy: the server reads under its directory and follows it.
        let link = www.path().join(MODULES_URL_DIR);
        std::os::unix::fs::symlink(&node_modules, &link).map_err(|e| {
            BenchError::Io(format!(
                "linking {} to {}: {e}",
                link.display(),
                node_modules.display()
            ))
        })?;
        Ok(PeerFiles { node_modules, www })
    }

    pub fn node_modules(&self) -> &Path {
        &self.node_modules
    }

    /// A fresh server and browser serving the peers' page, with `api` as its API.
    pub(crate) fn rig_options(&self, options: &BenchOptions, api: ApiConfig) -> RigOptions {
        RigOptions {
            api,
            www: crate::server::WwwSource::Dir(self.www.path().to_path_buf()),
            chromium: options.chromium.clone(),
            cross_origin: true,
            ..RigOptions::default()
        }
    }
}

/// `bench/peers` under the current directory if there is one, else in the source tree.
fn default_dir() -> PathBuf {
    let here = PathBuf::from("bench/peers");
    if here.join("package.json").is_file() {
        here
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/peers")
    }
}
