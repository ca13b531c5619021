//! A `redis-server` of one's own, for the proxy's tests and benchmark: on a free port, in a
//! temporary directory, without persistence (so a restart is an empty Redis), stopped when
//! dropped. Debian's package `redis-server` provides the binary.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum RedisServerError {
    #[error("cannot run redis-server (apt-get install -y redis-server): {0}")]
    Spawn(std::io::Error),
    #[error("cannot find a free port or a temporary directory: {0}")]
    Setup(std::io::Error),
    #[error("redis-server did not answer PING on port {0} within 10 s")]
    NoAnswer(u16),
}

pub struct RedisServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

/// Whether `redis-server` can be run here.
pub fn installed() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl RedisServer {
    pub fn start() -> Result<Self, RedisServerError> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(RedisServerError::Setup)?;
        let dir = tempfile::tempdir().map_err(RedisServerError::Setup)?;
        let mut r = RedisServer {
            port,
            dir,
            child: None,
        };
        r.launch()?;
        Ok(r)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn launch(&mut self) -> Result<(), RedisServerError> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(RedisServerError::Spawn)?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                let mut pong = [0u8; 7];
                if s.write_all(b"PING\r\n").is_ok()
                    && s.read_exact(&mut pong).is_ok()
                    && &pong == b"+PONG\r\n"
                {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(RedisServerError::NoAnswer(self.port))
    }

    fn pid(&self) -> Option<libc::pid_t> {
        self.child
            .as_ref()
            .and_then(|c| libc::pid_t::try_from(c.id()).ok())
    }

    /// Kills it outright (SIGKILL): all its data is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A new, empty Redis on the same port.
    pub fn restart_empty(&mut self) -> Result<(), RedisServerError> {
        self.kill();
        self.launch()
    }

    /// Freezes it (SIGSTOP): connections stay open and nothing is answered, as a Redis that
    /// is overloaded or cut off.
    pub fn freeze(&self) {
        if let Some(pid) = self.pid() {
            // SAFETY: kill(2) with a pid of our own child and a valid signal number.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
        }
    }

    pub fn thaw(&self) {
        if let Some(pid) = self.pid() {
            // SAFETY: as in `freeze`.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.thaw();
        self.kill();
    }
}
