//! Starts the real binary as a daemon on a free port, and talks HTTP to it.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::TestEnv;
pub use crate::servers::free_port;
use crate::servers::wait_until;

/// The `seatflow-reconciler` binary cargo built beside the running test
/// (`target/<profile>/`; the test itself runs from its `deps/`).
pub fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let mut dir = exe.parent().expect("a directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join("seatflow-reconciler");
    assert!(
        bin.is_file(),
        "{} is missing: run the tests with `cargo test`",
        bin.display()
    );
    bin
}

pub struct Daemon {
    pub child: Child,
    pub base: String,
    pub client: reqwest::Client,
}

/// The pass and expired-orders every second, zero grace, the test's
/// database and prefix.
pub fn daemon_command(env: &TestEnv, port: u16) -> Command {
    let mut c = Command::new(binary());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SEATFLOW__")) {
        c.env_remove(k);
    }
    c.arg("run")
        .env("SEATFLOW__MYSQL__URL", &env.db_url)
        .env("SEATFLOW__REDIS__URL", env.ctx.settings.redis.url.expose())
        .env("SEATFLOW__REDIS__KEY_PREFIX", &env.prefix)
        .env("SEATFLOW__RECONCILE__ORPHAN_GRACE", "0s")
        .env("SEATFLOW__HTTP__LISTEN", format!("127.0.0.1:{port}"))
        .env("SEATFLOW__LOG__LEVEL", "warn,seatflow_reconciler=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    c.env("SEATFLOW__SWEEP__SCHEDULE", "* * * * * *")
        .env("SEATFLOW__JOBS__EXPIRED_ORDERS__SCHEDULE", "* * * * * *");
    c
}

impl Daemon {
    pub async fn start(mut cmd: Command, port: u16) -> Daemon {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let child = cmd.spawn().expect("daemon starts");
        let mut d = Daemon {
            child,
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::new(),
        };
        // A daemon that exits at once (a config error) fails the test at
        // once, with its status, rather than after the whole wait.
        let limit = Duration::from_secs(60);
        let start = Instant::now();
        loop {
            if let Some(status) = d.child.try_wait().expect("the daemon's status") {
                let mut err = String::new();
                if let Some(mut stderr) = d.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut stderr, &mut err);
                }
                panic!("the daemon exited ({status}) before /healthz answered: {err}");
            }
            if d.get("/healthz").await.is_ok_and(|(s, _)| s == 200) {
                return d;
            }
            assert!(
                start.elapsed() < limit,
                "timed out after {limit:?} waiting until healthz answers"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A daemon with the default test command, once its first run is recorded.
    pub async fn with_a_run(env: &TestEnv) -> Daemon {
        let port = free_port();
        let d = Daemon::start(daemon_command(env, port), port).await;
        wait_until("a run is recorded", Duration::from_secs(60), || async {
            sample(
                &d.metrics().await,
                r#"seatflow_reconcile_runs_total{kind="paid_seats",outcome="success"}"#,
            ) >= 1.0
        })
        .await;
        d
    }

    pub async fn get(&self, path: &str) -> reqwest::Result<(u16, String)> {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await?;
        Ok((r.status().as_u16(), r.text().await?))
    }

    pub async fn post(&self, path: &str, token: Option<&str>) -> (u16, String) {
        let mut req = self.client.post(format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    pub async fn metrics(&self) -> String {
        self.get("/metrics").await.unwrap().1
    }

    pub async fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.get("/status").await.unwrap().1).unwrap()
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig}");
    }

    /// Waits for the process to exit; None if it is still running after `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            if start.elapsed() > limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of one series in a Prometheus exposition (0 if absent).
pub fn sample(exposition: &str, series: &str) -> f64 {
    exposition
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The daemon as a library call (`daemon::run_on`) on a free port, until
/// `stop` completes its shutdown future.
pub struct InProcessDaemon {
    pub addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl InProcessDaemon {
    pub async fn start(ctx: seatflow_reconciler::run::context::Context) -> InProcessDaemon {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(seatflow_reconciler::daemon::run_on(ctx, listener, async {
            let _ = stopped.await;
        }));
        InProcessDaemon { addr, stop, handle }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Polls `/status` until `ready` holds for it (a 60 s hang guard) and returns it.
    pub async fn status_when(
        &self,
        what: &str,
        ready: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let body = http
                .get(self.url("/status"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let status: serde_json::Value = serde_json::from_str(&body).unwrap();
            if ready(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "{what}: {status}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Completes the shutdown future; the daemon must return (Ok) within a 60 s hang guard.
    pub async fn stop(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(60), self.handle)
            .await
            .expect("the daemon returns once its shutdown future completes")
            .unwrap()
            .unwrap();
    }
}

/// Waits until `series` reads `value` (a check's metrics are recorded once
/// its run has settled, just after its writes).
pub async fn metric_reaches(daemon: &InProcessDaemon, series: &str, value: f64) -> String {
    metric_when(daemon, series, &format!("= {value}"), |v| v == value).await
}

/// Waits until `series` reads at least `value`.
pub async fn metric_reaches_at_least(daemon: &InProcessDaemon, series: &str, value: f64) -> String {
    metric_when(daemon, series, &format!(">= {value}"), |v| v >= value).await
}

/// `/metrics` once `series` reads a value that `wanted` (said: `what`) takes.
async fn metric_when(
    daemon: &InProcessDaemon,
    series: &str,
    what: &str,
    wanted: impl Fn(f64) -> bool,
) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let m = metrics(daemon).await;
        if wanted(sample(&m, series)) {
            return m;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{series} did not reach {what}: {m}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs of the pass so far, whatever their outcome.
pub fn pass_runs(exposition: &str) -> f64 {
    ["success", "partial", "failure"]
        .iter()
        .map(|o| {
            sample(
                exposition,
                &format!(r#"seatflow_reconcile_runs_total{{kind="paid_seats",outcome="{o}"}}"#),
            )
        })
        .sum()
}

/// The exposition `/metrics` of an in-process daemon serves.
pub async fn metrics(daemon: &InProcessDaemon) -> String {
    reqwest::get(daemon.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}
