//! The daemons under test: `seatflow-reconciler run` processes on their
//! default configuration but for where their stores, key prefix, HTTP port and
//! instance name are; their `/status` (is a seat pass in progress?), RSS, CPU
//! and log volume.

use std::fs::File;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use seatflow_reconciler::ops::demo::servers::free_port;

use crate::process::process_cpu_s;

/// How long a daemon may take to answer `/healthz` after it starts.
const READY_WITHIN: Duration = Duration::from_secs(60);
/// How long a daemon may take to exit after SIGTERM (its own
/// `daemon.shutdown_timeout` defaults to 30 s).
const STOP_WITHIN: Duration = Duration::from_secs(45);
/// The one job a seat pass never includes.
const NOT_A_SEAT_JOB: &str = "expired_orders";

/// The only settings the soak gives a daemon; everything else is the product's default.
pub struct DaemonEnv {
    pub mysql_url: String,
    pub redis_url: String,
    pub key_prefix: String,
    /// `--daemon-setting`s, as `SEATFLOW__…` variables.
    pub extra: Vec<(String, String)>,
}

impl DaemonEnv {
    /// `SEATFLOW__*` for replica `n`, listening on `port`.
    pub fn vars(&self, n: usize, port: u16) -> Vec<(String, String)> {
        [
            ("SEATFLOW__MYSQL__URL", self.mysql_url.clone()),
            ("SEATFLOW__REDIS__URL", self.redis_url.clone()),
            ("SEATFLOW__REDIS__KEY_PREFIX", self.key_prefix.clone()),
            ("SEATFLOW__HTTP__LISTEN", format!("127.0.0.1:{port}")),
            ("SEATFLOW__RECONCILE__INSTANCE", format!("replica-{n}")),
            ("SEATFLOW__LOG__LEVEL", "warn".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(self.extra.iter().cloned())
        .collect()
    }
}

/// RSS of a daemon at one moment.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RssSample {
    /// Seconds since the soak started.
    pub t_s: f64,
    pub rss_mb: f64,
}

pub struct Daemon {
    pub name: String,
    pub port: u16,
    child: Child,
    pub log_path: PathBuf,
    pub rss: Vec<RssSample>,
    /// Whether the last `/status` showed a seat pass in progress.
    pub in_pass: bool,
    pass_started: Option<Instant>,
    /// Durations of the passes seen start and end (to the poll's resolution).
    pub passes_s: Vec<f64>,
    pub status_errors: u64,
    pub exit: Option<String>,
    /// Its `seatflow_reconcile_change_*` and `_redis_events` series at the
    /// end (checks, repairs and misses by source), as exposed.
    pub changes: std::collections::BTreeMap<String, f64>,
}

impl Daemon {
    /// Starts replica `n` (1-based), its stdout and stderr in `dir/replica-n.log`.
    pub fn spawn(reconciler: &Path, env: &DaemonEnv, n: usize, dir: &Path) -> Result<Daemon> {
        let name = format!("replica-{n}");
        let port = free_port();
        let log_path = dir.join(format!("{name}.log"));
        let log = File::create(&log_path)?;
        let mut cmd = Command::new(reconciler);
        cmd.arg("run")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: a Ctrl-C reaches the soak only, which
            // then stops the daemons itself, in order.
            .process_group(0);
        // Only our settings: none leaks in from the caller's environment.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SEATFLOW__") {
                cmd.env_remove(key);
            }
        }
        cmd.envs(env.vars(n, port));
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", reconciler.display()))?;
        Ok(Daemon {
            name,
            port,
            child,
            log_path,
            rss: Vec::new(),
            in_pass: false,
            pass_started: None,
            passes_s: Vec::new(),
            status_errors: 0,
            exit: None,
            changes: Default::default(),
        })
    }

    /// Reads its change-driven checks' series from `/metrics`.
    pub async fn read_change_counters(&mut self) {
        let Ok((200, body)) = http_get(self.port, "/metrics").await else {
            return;
        };
        self.changes = body
            .lines()
            .filter(|l| {
                (l.starts_with("seatflow_reconcile_change_")
                    || l.starts_with("seatflow_reconcile_redis_events"))
                    // A histogram's buckets are many lines; its count and
                    // sum are kept.
                    && !l.contains("_bucket{")
            })
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                Some((series.to_string(), value.parse().ok()?))
            })
            // `missed` is kept at zero: that zero is the finding.
            .filter(|(s, v)| *v != 0.0 || s.starts_with("seatflow_reconcile_change_missed_total"))
            .collect();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `/healthz` answers 200.
    pub async fn wait_ready(&mut self) -> Result<()> {
        let started = Instant::now();
        loop {
            self.check_alive()?;
            if let Ok((200, _)) = http_get(self.port, "/healthz").await {
                return Ok(());
            }
            if started.elapsed() > READY_WITHIN {
                bail!(
                    "{} did not answer /healthz within {READY_WITHIN:?}; its log:\n{}",
                    self.name,
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// An error if the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            self.exit = Some(status.to_string());
            bail!(
                "{} exited during the soak ({status}); its log:\n{}",
                self.name,
                self.log_tail()
            );
        }
        Ok(())
    }

    /// Polls `/status` and notes whether a seat pass is in progress.
    pub async fn poll_status(&mut self) {
        let running = match http_get(self.port, "/status").await {
            Ok((200, body)) => serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .map(|v| pass_running(&v)),
            _ => None,
        };
        let Some(running) = running else {
            self.status_errors += 1;
            return;
        };
        match (self.in_pass, running) {
            (false, true) => self.pass_started = Some(Instant::now()),
            (true, false) => {
                if let Some(t) = self.pass_started.take() {
                    self.passes_s.push(t.elapsed().as_secs_f64());
                }
            }
            _ => {}
        }
        self.in_pass = running;
    }

    /// Seat hashes it has read so far, by its own counters: the pass's
    /// showtimes (`scanned_total` of a seat job: the four share each read)
    /// and its change-driven checks (one read each). Redis' HGETALL count
    /// also holds the suspect hashes read with them.
    pub async fn seat_hash_reads(&self) -> Option<f64> {
        let Ok((200, body)) = http_get(self.port, "/metrics").await else {
            return None;
        };
        let value = |l: &str| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok());
        let pass = body
            .lines()
            .filter(|l| l.starts_with("seatflow_reconcile_scanned_total{"))
            .filter(|l| !l.contains("expired_orders"))
            .filter_map(value)
            .fold(0.0, f64::max);
        let checks: f64 = body
            .lines()
            .filter(|l| l.starts_with("seatflow_reconcile_change_checks_total{"))
            .filter_map(value)
            .sum();
        Some(pass + checks)
    }

    /// `/status`'s verdict on Redis keyspace events (`on`, `standby`, ...).
    pub async fn redis_events(&self) -> Option<String> {
        let Ok((200, body)) = http_get(self.port, "/status").await else {
            return None;
        };
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        Some(v["changes"]["redis_events"].as_str()?.to_string())
    }

    pub fn sample_rss(&mut self, t_s: f64) {
        if let Some(rss_mb) = vm_rss_mb(self.pid()) {
            self.rss.push(RssSample { t_s, rss_mb });
        }
    }

    pub fn cpu_s(&self) -> Option<f64> {
        process_cpu_s(self.pid())
    }

    pub fn log_bytes(&self) -> u64 {
        std::fs::metadata(&self.log_path).map_or(0, |m| m.len())
    }

    /// The last lines of its log (read from its last 16 KiB only: the log
    /// may be large, which is what the soak measures).
    pub fn log_tail(&self) -> String {
        use std::io::{Read as _, Seek as _, SeekFrom};
        let mut bytes = Vec::new();
        if let Ok(mut f) = File::open(&self.log_path) {
            let len = f.metadata().map_or(0, |m| m.len());
            let _ = f.seek(SeekFrom::Start(len.saturating_sub(16 * 1024)));
            let _ = f.read_to_end(&mut bytes);
        }
        crate::launcher::tail(&String::from_utf8_lossy(&bytes), 30)
    }

    /// SIGTERM, then SIGKILL if it has not exited within STOP_WITHIN; reaped.
    /// Returns how it ended.
    pub async fn stop(&mut self) -> String {
        if let Ok(Some(status)) = self.child.try_wait() {
            return self.exit.get_or_insert(status.to_string()).clone();
        }
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGTERM) };
        let started = Instant::now();
        while started.elapsed() < STOP_WITHIN {
            if let Ok(Some(status)) = self.child.try_wait() {
                let how = format!("{status} after SIGTERM");
                return self.exit.insert(how).clone();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.exit
            .insert(format!("killed: no exit within {STOP_WITHIN:?} of SIGTERM"))
            .clone()
    }
}

impl Drop for Daemon {
    /// The last resort (an error or a panic before `stop`): nothing survives us.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether a `/status` document shows a seat pass in progress: any
/// `"running": true` outside `expired_orders`, wherever it sits (a job entry
/// today; a shared pass entry, or more fields, tomorrow).
pub fn pass_running(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(map) => {
            map.get("running") == Some(&serde_json::Value::Bool(true))
                || map
                    .iter()
                    .any(|(k, v)| k != NOT_A_SEAT_JOB && pass_running(v))
        }
        serde_json::Value::Array(items) => items.iter().any(pass_running),
        _ => false,
    }
}

/// `VmRSS` of a process, in MB.
fn vm_rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// `GET path` on 127.0.0.1:port over HTTP/1.0: the status code and body.
async fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    let exchange = async {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
        s.write_all(request.as_bytes()).await?;
        let mut reply = Vec::new();
        s.read_to_end(&mut reply).await?;
        anyhow::Ok(reply)
    };
    let reply = tokio::time::timeout(Duration::from_secs(5), exchange).await??;
    let text = String::from_utf8_lossy(&reply);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::pass_running;
    use serde_json::json;

    #[test]
    fn a_running_seat_job_or_pass_is_a_pass_in_progress() {
        let idle = json!({"instance": "a", "jobs": {
            "paid_seats": {"running": false, "enabled": true},
            "expired_orders": {"running": true}}});
        assert!(!pass_running(&idle));
        let job = json!({"jobs": {"orphan_locks": {"running": true, "new_field": [1]}}});
        assert!(pass_running(&job));
        let pass = json!({"jobs": {}, "pass": {"running": true, "paced": true}});
        assert!(pass_running(&pass));
    }
}
