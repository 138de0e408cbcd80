//! Private, throwaway servers: one binary started on 127.0.0.1 and a free
//! port, with its own temporary directory (its data and its log), waited on
//! until it answers, and killed (then its directory removed) when dropped.
//! The demo runs on a private `redis-server` and `mariadbd`; the tests start
//! theirs (Redis, a Redis Cluster, Prometheus, a Pushgateway) the same way.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// How many lines of a server's log an error shows.
const TAIL_LINES: usize = 30;

/// A fresh directory under the system temp dir, removed with all it holds
/// when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// `<temp>/seatflow-<tag>-<random>`.
    pub fn new(tag: &str) -> anyhow::Result<TempDir> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        Self::at(std::env::temp_dir().join(format!("seatflow-{tag}-{}", &id[..12])))
    }

    /// `<parent>/<name>`, which must not exist yet.
    pub fn new_in(parent: &Path, name: &str) -> anyhow::Result<TempDir> {
        Self::at(parent.join(name))
    }

    fn at(path: PathBuf) -> anyhow::Result<TempDir> {
        std::fs::create_dir(&path)
            .with_context(|| format!("creating the directory {}", path.display()))?;
        Ok(TempDir(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl TempDir {
    /// Keeps the directory: it is no longer removed when this is dropped.
    pub fn keep(self) -> PathBuf {
        let path = self.0.clone();
        std::mem::forget(self);
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A TCP port on 127.0.0.1 that nobody listens on right now.
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "the demo and tests cannot go on without a port"
)]
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding 127.0.0.1:0")
}

/// The path of an installed program: `PATH`, then the system directories a
/// non-root `PATH` often lacks (Debian installs `mariadbd` in /usr/sbin).
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(
            [
                "/usr/local/sbin",
                "/usr/local/bin",
                "/usr/sbin",
                "/usr/bin",
                "/sbin",
                "/bin",
            ]
            .map(PathBuf::from),
        )
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// [`find_binary`], or an error that names the Debian/Ubuntu package to install.
pub fn require_binary(name: &str, package: &str) -> anyhow::Result<PathBuf> {
    find_binary(name).with_context(|| {
        format!("`{name}` is not installed (Debian/Ubuntu: `apt-get install {package}`)")
    })
}

/// When a started server counts as up.
#[derive(Debug, Clone)]
pub enum Ready {
    /// It accepts TCP connections on its port.
    Tcp,
    /// It answers a Redis `PING` with `+PONG` (not `-LOADING`).
    RedisPing,
    /// `GET <path>` (HTTP/1.0) on its port answers 200.
    Http(String),
}

impl Ready {
    fn answers(&self, port: u16) -> bool {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let (request, expect) = match self {
            Ready::Tcp => return true,
            Ready::RedisPing => ("PING\r\n".to_string(), "+PONG"),
            Ready::Http(path) => (
                format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"),
                " 200 ",
            ),
        };
        let mut reply = [0u8; 64];
        let n = s
            .write_all(request.as_bytes())
            .and_then(|()| s.read(&mut reply))
            .unwrap_or(0);
        String::from_utf8_lossy(&reply[..n]).contains(expect)
    }
}

/// One server process of our own. Configure it (arguments may use
/// [`port`](Self::port) and [`dir`](Self::dir)), then [`start`](Self::start)
/// it; [`stop`](Self::stop) and `start` again restart it on the same port and
/// directory. Dropping it kills the process, reaps it and removes the
/// directory. Its stdout and stderr go to `<dir>/<name>.log`.
#[derive(Debug)]
pub struct PrivateServer {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    port: u16,
    ready: Ready,
    deadline: Duration,
    child: Option<Child>,
    // Declared last: the directory goes after the process is gone.
    dir: TempDir,
}

impl PrivateServer {
    /// A server named `name` (its log and temp-dir tag) running `program`,
    /// on a free port, not started yet. Ready on TCP within 30 s by default.
    pub fn new(name: &str, program: impl Into<PathBuf>) -> anyhow::Result<PrivateServer> {
        Ok(Self::with_dir(name, program.into(), TempDir::new(name)?))
    }

    /// Like [`new`](Self::new), its directory `<parent>/<name>`.
    pub fn new_in(
        parent: &Path,
        name: &str,
        program: impl Into<PathBuf>,
    ) -> anyhow::Result<PrivateServer> {
        Ok(Self::with_dir(
            name,
            program.into(),
            TempDir::new_in(parent, name)?,
        ))
    }

    fn with_dir(name: &str, program: PathBuf, dir: TempDir) -> PrivateServer {
        PrivateServer {
            name: name.to_string(),
            program,
            args: Vec::new(),
            port: free_port(),
            ready: Ready::Tcp,
            deadline: Duration::from_secs(30),
            child: None,
            dir,
        }
    }

    /// Listen on this port instead of the free one picked by `new`.
    pub fn with_port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    pub fn arg(&mut self, arg: impl Into<OsString>) -> &mut Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(&mut self, args: I) -> &mut Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn ready(&mut self, ready: Ready, deadline: Duration) -> &mut Self {
        self.ready = ready;
        self.deadline = deadline;
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's private directory (its data, config and log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir().join(format!("{}.log", self.name))
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The last lines of the server's log (and of every step run with
    /// [`run_step`](Self::run_step)).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
    }

    /// The log's error lines (`[ERROR]`, as mariadbd writes them), which a
    /// tool's closing advice can push out of the tail; "" when none.
    fn log_errors(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let errors: Vec<&str> = text.lines().filter(|l| l.contains("[ERROR]")).collect();
        if errors.is_empty() {
            String::new()
        } else {
            format!("errors:\n{}\n", errors.join("\n"))
        }
    }

    fn log_file(&self) -> anyhow::Result<File> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .with_context(|| format!("opening {}", self.log_path().display()))
    }

    /// Runs a preparation step to completion (e.g. initialising a data
    /// directory), its output appended to the server's log.
    pub fn run_step(&self, what: &str, mut cmd: Command) -> anyhow::Result<()> {
        let log = self.log_file()?;
        let status = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .status()
            .with_context(|| format!("{}: cannot run {what}", self.name))?;
        if !status.success() {
            bail!(
                "{}: {what} failed ({status}); {}its log:\n{}",
                self.name,
                self.log_errors(),
                self.log_tail()
            );
        }
        Ok(())
    }

    /// Spawns the process and waits until it is ready; on failure the
    /// process is killed and the error shows the log's tail.
    pub fn start(&mut self) -> anyhow::Result<()> {
        self.stop();
        let log = self.log_file()?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", self.program.display()))?;
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if self.ready.answers(self.port) {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                bail!(
                    "{} exited ({status}) before it answered on port {}; its log:\n{}",
                    self.name,
                    self.port,
                    self.log_tail()
                );
            }
            if started.elapsed() > self.deadline {
                self.stop();
                bail!(
                    "{} did not answer on port {} within {:?}; its log:\n{}",
                    self.name,
                    self.port,
                    self.deadline,
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Leaves the process running and its directory in place after this
    /// program exits; returns its pid (None if it was not running).
    pub fn keep(mut self) -> Option<u32> {
        // Dropping a `Child` neither kills nor waits for its process.
        let pid = self.child.take().map(|c| c.id());
        let dir = std::mem::replace(&mut self.dir, TempDir(PathBuf::new()));
        dir.keep();
        pid
    }

    /// Kills the process (if running) and reaps it; the directory stays.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A started private `redis-server` under `parent`: a free port on
/// 127.0.0.1, no persistence, its state in its own directory.
pub fn start_redis(parent: &Path, program: PathBuf) -> anyhow::Result<PrivateServer> {
    start_redis_with(parent, program, &[])
}

/// As [`start_redis`], with `extra` arguments for the server
/// (`--notify-keyspace-events Khgxe`).
pub fn start_redis_with(
    parent: &Path,
    program: PathBuf,
    extra: &[&str],
) -> anyhow::Result<PrivateServer> {
    let mut redis = PrivateServer::new_in(parent, "redis", program)?;
    let (port, dir) = (redis.port().to_string(), redis.dir().to_owned());
    redis
        .args([
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .ready(Ready::RedisPing, Duration::from_secs(20));
    redis.start()?;
    Ok(redis)
}
