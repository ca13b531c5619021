//! Real rate limiters run as child processes on loopback, in front of a counting backend: nginx's
//! `limit_req` (with and without `burst`) and `tests/limiters/server.js` (express-rate-limit and
//! rate-limiter-flexible). Shared by the browser tests (`tests/e2e/limiters.rs`) and
//! `sluice bench --limiters`.
//!
//! The backend is the demo API with a limit nothing reaches and no rate-limit headers of its
//! own ([`counting_backend`]): it counts what the limiter let through and records each create.
//! A limiter's 429s never reach it; they are read from the limiter's own log
//! ([`LimiterProcess::answers`]: nginx's access log, server.js's lines).
//!
//! Each limiter is a child process on a free loopback port, killed when its
//! [`LimiterProcess`] is dropped (also on a panic). Nothing under `/etc` or `/var` is touched.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::api::{self, ApiConfig, ApiHandle, HeaderMode};

/// Which limiter runs in front of the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limiter {
    /// nginx `limit_req` at the rate given, with `burst=N nodelay` when `burst > 0`.
    Nginx { burst: u32 },
    /// `tests/limiters/server.js` with this limiter argument (`erl-draft-8`, `rlf`, ...).
    Node(&'static str),
}

/// Why a limiter cannot run here, and how to make it run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what}; {install}")]
pub struct Missing {
    pub what: String,
    pub install: String,
}

/// Why a limiter did not start.
#[derive(Debug, thiserror::Error)]
pub enum LimiterError {
    #[error(transparent)]
    Missing(#[from] Missing),
    /// Asked for by a name no configuration has (`sluice bench --limiter NAME`).
    #[error("no limiter named {name:?}; there are {known}")]
    Unknown { name: String, known: String },
    #[error("{0}")]
    Io(String),
    /// It started but never became ready; `errors` is what it wrote.
    #[error("{what}:\n{errors}")]
    NotReady { what: String, errors: String },
}

impl Limiter {
    /// The limiter and its figures, for reports.
    pub fn describe(&self, rate: u32) -> String {
        match self {
            Limiter::Nginx { burst: 0 } => format!("nginx limit_req rate={rate}r/s"),
            Limiter::Nginx { burst } => {
                format!("nginx limit_req rate={rate}r/s burst={burst} nodelay")
            }
            Limiter::Node(kind) => format!("server.js {kind}, {rate} per 1,000 ms"),
        }
    }

    /// What this limiter lacks here, if anything: nginx; or node and the packages of
    /// `npm ci --prefix tests/limiters` (in `dir`, see [`limiters_dir`]).
    pub fn missing(&self, dir: &Path) -> Option<Missing> {
        match self {
            Limiter::Nginx { .. } => find_nginx().is_none().then(|| Missing {
                what: "nginx not found (set SLUICE_NGINX or put nginx on PATH)".into(),
                install: "install it (apt-get install -y nginx-light)".into(),
            }),
            Limiter::Node(_) => {
                let node = Command::new("node")
                    .arg("--version")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if !node {
                    return Some(Missing {
                        what: "node not found".into(),
                        install: "install Node.js 20 (apt-get install -y nodejs)".into(),
                    });
                }
                let missing: Vec<&str> = NODE_PACKAGES
                    .iter()
                    .copied()
                    .filter(|p| !dir.join("node_modules").join(p).is_dir())
                    .collect();
                (!missing.is_empty()).then(|| Missing {
                    what: format!("tests/limiters/node_modules lacks {missing:?}"),
                    install: "install them (npm ci --prefix tests/limiters)".into(),
                })
            }
        }
    }
}

/// What `tests/limiters/server.js` needs from `npm ci --prefix tests/limiters`.
pub const NODE_PACKAGES: [&str; 4] = [
    "express",
    "express-rate-limit",
    "rate-limiter-flexible",
    "cors",
];

/// `tests/limiters` in the source tree this crate was built from.
pub fn limiters_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/limiters")
}

/// `SLUICE_NGINX`, else `nginx` on PATH, else Debian's `/usr/sbin/nginx` (not on a user's PATH).
pub fn find_nginx() -> Option<PathBuf> {
    let mut candidates = std::env::var_os("SLUICE_NGINX")
        .map(PathBuf::from)
        .into_iter()
        .chain(std::env::var_os("PATH").into_iter().flat_map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("nginx"))
                .collect::<Vec<_>>()
        }))
        .chain([PathBuf::from("/usr/sbin/nginx")]);
    candidates.find(|c| c.is_file())
}

/// Creates the counting backend has seen (each one the limiter let through).
pub fn backend_creates(backend: &ApiHandle) -> usize {
    backend
        .arrivals()
        .iter()
        .filter(|a| a.method == "POST")
        .count()
}

/// The counting backend: the demo API, answering at once (10 ms), with no limit a run reaches
/// and no rate-limit headers of its own: only the limiter in front speaks of limits.
pub async fn counting_backend() -> std::io::Result<(SocketAddr, ApiHandle)> {
    api::spawn(ApiConfig {
        limit: 1_000_000,
        window_ms: 1000,
        latency_ms: 10,
        headers: HeaderMode::None,
        seed: Some(41),
        ..ApiConfig::default()
    })
    .await
}

/// Arrivals (ms) per second, first to last: intervals over the time they took.
pub fn rate_of(arrivals_ms: &[f64]) -> f64 {
    match (arrivals_ms.first(), arrivals_ms.last()) {
        (Some(first), Some(last)) if last > first => {
            (arrivals_ms.len() - 1) as f64 * 1000.0 / (last - first)
        }
        _ => 0.0,
    }
}

/// One answer the limiter logged.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub method: String,
    /// When it was logged, Unix seconds (to the millisecond) on the limiter's clock.
    pub at_s: f64,
}

/// `answered STATUS METHOD PATH SECONDS`, as both limiters log it.
pub fn parse_answer(line: &str) -> Option<Answer> {
    let mut words = line.strip_prefix("answered ")?.split_whitespace();
    let status = words.next()?.parse().ok()?;
    let method = words.next()?.to_string();
    let at_s = words.nth(1)?.parse().ok()?;
    Some(Answer {
        status,
        method,
        at_s,
    })
}

/// A limiter running as a child process on a free loopback port, killed when dropped.
pub struct LimiterProcess {
    /// `http://127.0.0.1:PORT`
    pub origin: String,
    child: Option<Child>,
    /// nginx's prefix (config, logs, pid, temp files), or where node's stderr goes.
    dir: tempfile::TempDir,
    log: AnswerLog,
}

enum AnswerLog {
    /// nginx's access log, in `dir`.
    File(PathBuf),
    /// server.js's stdout, read by a thread.
    Lines(Arc<Mutex<Vec<String>>>),
}

fn io_error(what: &str) -> impl Fn(std::io::Error) -> LimiterError + '_ {
    move |e| LimiterError::Io(format!("{what}: {e}"))
}

impl LimiterProcess {
    /// Starts `limiter` at `rate` per second in front of `backend` and waits (blocking, up to
    /// 10 s) until it is ready; server.js is taken from `dir` (see [`limiters_dir`]).
    pub fn start(
        limiter: Limiter,
        backend: SocketAddr,
        rate: u32,
        dir: &Path,
    ) -> Result<Self, LimiterError> {
        if let Some(missing) = limiter.missing(dir) {
            return Err(missing.into());
        }
        match limiter {
            Limiter::Nginx { burst } => Self::nginx(burst, backend, rate),
            Limiter::Node(kind) => Self::node(kind, backend, rate, dir),
        }
    }

    /// nginx from a config of our own in a temporary prefix (nothing under /etc or /var is
    /// touched), in the foreground as our child.
    fn nginx(burst: u32, backend: SocketAddr, rate: u32) -> Result<Self, LimiterError> {
        let nginx = find_nginx().ok_or_else(|| LimiterError::Io("nginx not found".into()))?;
        let dir = tempfile::Builder::new()
            .prefix("sluice-nginx-")
            .tempdir()
            .map_err(io_error("a temporary directory for nginx"))?;
        // nginx takes no port 0: take a free one and hand it over.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(io_error("a free loopback port"))?
            .port();
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, nginx_conf(dir.path(), port, backend, burst, rate))
            .map_err(io_error("writing nginx.conf"))?;
        let errors =
            std::fs::File::create(dir.path().join("stderr.log")).map_err(io_error("stderr.log"))?;
        let child = Command::new(&nginx)
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir.path())
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(errors)
            .spawn()
            .map_err(|e| LimiterError::Io(format!("starting {}: {e}", nginx.display())))?;
        let mut running = LimiterProcess {
            origin: format!("http://127.0.0.1:{port}"),
            child: Some(child),
            log: AnswerLog::File(dir.path().join("access.log")),
            dir,
        };
        running.wait_for_nginx(port)?;
        Ok(running)
    }

    /// Readiness: nginx answers its `/__ready` location (or has exited: then its errors).
    fn wait_for_nginx(&mut self, port: u16) -> Result<(), LimiterError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(LimiterError::NotReady {
                    what: format!("nginx exited ({status}) before it was ready"),
                    errors: self.errors(),
                });
            }
            if ready_probe(port) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(LimiterError::NotReady {
                    what: format!("nginx did not answer on port {port} within 10 s"),
                    errors: self.errors(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `node DIR/server.js KIND BACKEND RATE 1000`, which listens on a free port of its own
    /// and says which on its first line.
    fn node(
        kind: &str,
        backend: SocketAddr,
        rate: u32,
        limiters_dir: &Path,
    ) -> Result<Self, LimiterError> {
        let dir = tempfile::Builder::new()
            .prefix("sluice-limiter-")
            .tempdir()
            .map_err(io_error("a temporary directory for the limiter's log"))?;
        let errors =
            std::fs::File::create(dir.path().join("stderr.log")).map_err(io_error("stderr.log"))?;
        let mut child = Command::new("node")
            .arg(limiters_dir.join("server.js"))
            .arg(kind)
            .arg(format!("http://{backend}"))
            .arg(rate.to_string())
            .arg("1000")
            .current_dir(limiters_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(errors)
            .spawn()
            .map_err(|e| LimiterError::Io(format!("starting node server.js {kind}: {e}")))?;
        let stdout = child.stdout.take();
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let mut running = LimiterProcess {
            origin: String::new(),
            child: Some(child),
            dir,
            log: AnswerLog::Lines(lines.clone()),
        };
        let stdout = stdout.ok_or_else(|| LimiterError::NotReady {
            what: format!("server.js {kind}: no stdout to read"),
            errors: running.errors(),
        })?;
        let (first_tx, first_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout).lines();
            let first = reader.next().and_then(Result::ok);
            let _ = first_tx.send(first);
            for line in reader.map_while(Result::ok) {
                // A poisoned lock only means a reader panicked: the lines are still whole.
                lines.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            }
        });
        let first = first_rx
            .recv_timeout(Duration::from_secs(10))
            .ok()
            .flatten();
        running.origin = match first.as_deref().and_then(|l| l.strip_prefix("listening ")) {
            Some(origin) => origin.trim().to_string(),
            None => {
                return Err(LimiterError::NotReady {
                    what: format!(
                        "server.js {kind} did not say where it listens (first line {first:?})"
                    ),
                    errors: running.errors(),
                })
            }
        };
        Ok(running)
    }

    /// Every answer logged so far (preflights included).
    pub fn answers(&self) -> Vec<Answer> {
        let lines = match &self.log {
            AnswerLog::File(path) => std::fs::read_to_string(path)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect(),
            AnswerLog::Lines(lines) => lines.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        };
        lines.iter().filter_map(|l| parse_answer(l)).collect()
    }

    /// Creates the limiter logged as let through.
    pub fn logged_creates(&self) -> usize {
        self.answers()
            .iter()
            .filter(|a| a.method == "POST" && a.status != 429)
            .count()
    }

    /// The limiter's own error output (nginx's error log too), for a failure's message.
    pub fn errors(&self) -> String {
        ["stderr.log", "error.log"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(self.dir.path().join(f)).ok())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for LimiterProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- the limiter at {}: its errors ----\n{}",
                self.origin,
                self.errors()
            );
        }
    }
}

/// `GET /__ready` answered 200.
fn ready_probe(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut head = [0u8; 12];
    s.write_all(b"GET /__ready HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_ok()
        && s.read_exact(&mut head).is_ok()
        && head.ends_with(b" 200")
}

/// nginx's config: `limit_req` at `rate` r/s (with `burst=N nodelay` when `burst > 0`)
/// answering 429, in front of `backend`, everything it writes under `prefix`.
pub fn nginx_conf(prefix: &Path, port: u16, backend: SocketAddr, burst: u32, rate: u32) -> String {
    let p = prefix.display();
    let burst = if burst > 0 {
        format!(" burst={burst} nodelay")
    } else {
        String::new()
    };
    format!(
        r#"# Written by sluice's real_limiters.rs for one run.
# One process, the caller's child: killing it on drop leaves nothing behind (a master's workers
# outlive a master that is killed outright). It serves as its own worker, as the user who ran
# it, so it needs no `user` to reach this private prefix.
master_process off;
pid {p}/nginx.pid;
error_log {p}/error.log warn;
events {{ worker_connections 256; }}
http {{
    # One line per answer, which the caller counts (a 429 never reaches the backend).
    log_format answered 'answered $status $request_method $request_uri $msec';
    access_log {p}/access.log answered;
    client_body_temp_path {p}/client_body;
    proxy_temp_path {p}/proxy;

    # As nginx's docs configure limit_req: per client address, here {rate} r/s.
    limit_req_zone $binary_remote_addr zone=api:1m rate={rate}r/s;
    limit_req_status 429;

    upstream backend {{
        server {backend};
        keepalive 8;
    }}

    server {{
        listen 127.0.0.1:{port};

        # The readiness probe.
        location = /__ready {{
            access_log off;
            return 200 "ready\n";
        }}

        location /api/ {{
            # CORS at nginx, as an API behind it that is called from other origins has it. A
            # preflight is answered here: `if` ... `return` runs in nginx's rewrite phase,
            # before limit_req's preaccess phase, so preflights are never counted against
            # the rate (and the browser keeps them for Access-Control-Max-Age).
            if ($request_method = OPTIONS) {{
                add_header Access-Control-Allow-Origin $http_origin always;
                add_header Access-Control-Allow-Methods "GET, POST, PUT, PATCH, DELETE, OPTIONS" always;
                add_header Access-Control-Allow-Headers $http_access_control_request_headers always;
                add_header Access-Control-Max-Age 7200 always;
                add_header Vary "Origin, Access-Control-Request-Headers" always;
                return 204;
            }}

            limit_req zone=api{burst};

            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # nginx owns CORS here: the backend's own headers would be a second, invalid value.
            proxy_hide_header Access-Control-Allow-Origin;
            proxy_hide_header Access-Control-Expose-Headers;
            # `always`: add_header otherwise applies only to 200, 201, 204, 206, 301, 302,
            # 303, 304, 307 and 308 (nginx's docs), and limit_req's 429 would carry no CORS
            # header: the browser would then report it to the worker as a network error, not
            # as a 429. A real deployment adds them to every answer, as here.
            add_header Access-Control-Allow-Origin $http_origin always;
            add_header Access-Control-Expose-Headers "Retry-After, RateLimit, RateLimit-Policy, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, Date" always;
            add_header Vary Origin always;
        }}
    }}
}}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_from_either_log() {
        assert_eq!(
            parse_answer("answered 429 POST /api/contacts 1764900000.123"),
            Some(Answer {
                status: 429,
                method: "POST".into(),
                at_s: 1764900000.123,
            })
        );
        assert_eq!(parse_answer("listening http://127.0.0.1:1"), None);
        assert_eq!(parse_answer("answered x POST /api 1"), None);
    }

    #[test]
    fn rate_is_intervals_over_their_span() {
        assert_eq!(rate_of(&[0.0, 50.0, 100.0]), 20.0);
        assert_eq!(rate_of(&[5.0]), 0.0);
        assert_eq!(rate_of(&[]), 0.0);
    }

    #[test]
    fn nginx_conf_has_the_rate_and_burst_asked_for() {
        let backend = SocketAddr::from(([127, 0, 0, 1], 9));
        let plain = nginx_conf(Path::new("/tmp/x"), 8080, backend, 0, 20);
        assert!(plain.contains("rate=20r/s;") && plain.contains("limit_req zone=api;"));
        let burst = nginx_conf(Path::new("/tmp/x"), 8080, backend, 5, 20);
        assert!(burst.contains("limit_req zone=api burst=5 nodelay;"));
    }
}
