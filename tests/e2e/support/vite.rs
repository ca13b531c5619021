//! `vite dev` for an app, started by a test and killed when it ends (`js/vite-dev.mjs`): the
//! app's own config and plugins, on a port the system picks, with the test API's origin let
//! into its worker script.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use tokio::sync::oneshot;

/// How long `vite dev` may take to listen: it bundles the app's config first.
const START_LIMIT: Duration = Duration::from_secs(60);
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/js/vite-dev.mjs");

/// A running `vite dev`; killed with its process group when dropped.
pub struct ViteDev {
    child: Child,
    /// Held open: the script stops when its stdin closes, should the kill below ever miss.
    _stdin: Option<ChildStdin>,
    /// `http://127.0.0.1:PORT/`
    pub url: String,
}

/// Why `vite dev` cannot run here, or `None` when node and the app's packages are installed.
pub fn missing(app: &Path) -> Option<String> {
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !node.is_ok_and(|s| s.success()) {
        return Some("node not found on PATH (apt-get install -y nodejs)".into());
    }
    for package in ["vite", "sluice"] {
        if !app
            .join("node_modules")
            .join(package)
            .join("package.json")
            .is_file()
        {
            return Some(format!(
                "{} has no node_modules/{package}: `cargo run --release -- build`, then \
                 `npm ci --prefix {}`",
                app.display(),
                app.display()
            ));
        }
    }
    None
}

impl ViteDev {
    /// Starts `vite dev` in `app`, its worker script allowing `api_origin`, with its output in
    /// `log`; returns once it listens.
    pub async fn start(app: &Path, api_origin: &str, log: &Path) -> Result<ViteDev, String> {
        // Both of its streams go to the log: stderr directly, stdout through the reader below,
        // so both append.
        let opened = std::fs::File::create(log)
            .and_then(|_| std::fs::OpenOptions::new().append(true).open(log));
        let log_file = opened.map_err(|e| format!("{}: {e}", log.display()))?;
        let mut cmd = Command::new("node");
        cmd.arg(SCRIPT)
            .arg(app)
            .arg(api_origin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file);
        // Its own process group, so that nothing it starts outlives the test.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting node {SCRIPT}: {e}"))?;
        let stdin = child.stdin.take();
        let Some(stdout) = child.stdout.take() else {
            return Err("no pipe from vite-dev.mjs".into());
        };
        let (tx, rx) = oneshot::channel();
        let log = log.to_path_buf();
        // A thread: the reads block. It copies Vite's output into the log after `ready`.
        std::thread::spawn(move || copy_output(BufReader::new(stdout), tx, &log));
        let mut vite = ViteDev {
            child,
            _stdin: stdin,
            url: String::new(),
        };
        vite.url = tokio::time::timeout(START_LIMIT, rx)
            .await
            .map_err(|_| format!("vite dev did not listen within {START_LIMIT:?}"))?
            .map_err(|_| "vite dev exited before it listened (its log says why)".to_string())?;
        Ok(vite)
    }
}

fn copy_output(out: impl BufRead, ready: oneshot::Sender<String>, log: &PathBuf) {
    use std::io::Write as _;
    let mut ready = Some(ready);
    let mut file = std::fs::OpenOptions::new().append(true).open(log).ok();
    for line in out.lines().map_while(Result::ok) {
        if let Some(url) = line.strip_prefix("ready ") {
            if let Some(tx) = ready.take() {
                let _ = tx.send(url.trim().to_string());
            }
        }
        if let Some(f) = file.as_mut() {
            let _ = writeln!(f, "{line}");
        }
    }
}

impl Drop for ViteDev {
    fn drop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: sends a signal to the process group we created; touches no memory.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
