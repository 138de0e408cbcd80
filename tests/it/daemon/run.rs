//! The daemon as users run it: the real binary on a free port with a
//! one-second schedule against the real services.

use std::process::{Command, Stdio};
use std::time::Duration;

use seatflow_test_support::TestEnv;
use seatflow_test_support::daemon::{Daemon, daemon_command, free_port, sample};
use seatflow_test_support::servers::{self, wait_until};

#[tokio::test]
async fn scheduled_runs_repair_drift_and_report_it() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.order(1, "PAID", &["A-2"], -600).await.unwrap();
    env.fx
        .warm_all(1, &seats, &[("A-1", "1"), ("A-2", "0")])
        .await
        .unwrap();
    let port = free_port();
    let d = Daemon::start(daemon_command(&env, port), port).await;

    // Wait for completed runs rather than reading the counters at start-up,
    // when a run may or may not have happened yet. Grace is zero and both
    // drifts were there before the daemon started, so once every job has
    // succeeded each drift was repaired exactly once, whichever run did it
    // and however many ran since.
    let succeeded = |m: &str, kind: &str| {
        sample(
            m,
            &format!(r#"seatflow_reconcile_runs_total{{kind="{kind}",outcome="success"}}"#),
        )
    };
    wait_until(
        "every job has a successful run",
        Duration::from_secs(60),
        || async {
            let m = d.metrics().await;
            seatflow_test_support::JOB_LABELS
                .iter()
                .all(|k| succeeded(&m, k) >= 1.0)
        },
    )
    .await;
    let m = d.metrics().await;
    for kind in seatflow_test_support::JOB_LABELS {
        let series = format!(r#"seatflow_reconcile_fixes_total{{kind="{kind}"}}"#);
        assert!(
            m.lines().any(|l| l.starts_with(&format!("{series} "))),
            "{series} is exported (as 0 until a repair)"
        );
        let expected = match kind {
            "orphan_locks" | "paid_seats" => 1.0,
            _ => 0.0,
        };
        assert_eq!(sample(&m, &series), expected, "{series}");
    }
    for kind in seatflow_test_support::JOB_LABELS {
        let ts = sample(
            &m,
            &format!(r#"seatflow_reconcile_last_success_timestamp_seconds{{kind="{kind}"}}"#),
        );
        assert!(ts > 1.7e9, "{kind} last success {ts}");
    }
    let h = env.fx.hash(1).await.unwrap();
    assert_eq!((h["A-1"].as_str(), h["A-2"].as_str()), ("0", "2"));

    wait_until(
        "a later run finds no drift",
        Duration::from_secs(60),
        || async { d.status().await["jobs"]["orphan_locks"]["current_drift"] == 0 },
    )
    .await;
    let status = d.status().await;
    let orphan = &status["jobs"]["orphan_locks"];
    assert_eq!(orphan["enabled"], true);
    assert!(orphan["last_run"]["outcome"] == "success", "{status}");
    assert!(orphan["last_run"]["run_id"].is_string());
    assert!(orphan["next_fire"].is_string());
}

#[tokio::test]
async fn the_admin_endpoint_needs_the_token() {
    let env = TestEnv::new().await;
    let port = free_port();
    let mut cmd = daemon_command(&env, port);
    cmd.env("SEATFLOW__HTTP__ADMIN_TOKEN", "s3cret-token");
    for kind in [
        "EXPIRED_ORDERS",
        "PAID_SEATS",
        "MISSING_HASHES",
        "ORPHAN_LOCKS",
        "SOLD_ORPHANS",
    ] {
        cmd.env(format!("SEATFLOW__JOBS__{kind}__ENABLED"), "false");
    }
    let d = Daemon::start(cmd, port).await;
    assert_eq!(d.post("/jobs/orphan-locks/run", None).await.0, 401);
    assert_eq!(d.post("/jobs/orphan-locks/run", Some("wrong")).await.0, 401);
    let m = d.metrics().await;
    assert_eq!(
        sample(
            &m,
            r#"seatflow_reconcile_runs_total{kind="orphan_locks",outcome="success"}"#
        ),
        0.0,
        "nothing ran"
    );
    // Nothing runs, so nothing is exported that would read as a state: no
    // job's series, no pass (a pass last completed at 0 would page).
    assert!(!m.contains("kind=\""), "a disabled job's series:\n{m}");
    assert!(!m.contains("seatflow_reconcile_pass_"), "{m}");
    assert!(m.contains("seatflow_reconciler_build_info"), "{m}");
    assert_eq!(
        d.post("/jobs/refunds/run", Some("s3cret-token")).await.0,
        404
    );
    let (code, body) = d.post("/jobs/orphan-locks/run", Some("s3cret-token")).await;
    assert_eq!(code, 202, "{body}");
    wait_until(
        "the triggered run is counted",
        Duration::from_secs(60),
        || async {
            sample(
                &d.metrics().await,
                r#"seatflow_reconcile_runs_total{kind="orphan_locks",outcome="success"}"#,
            ) == 1.0
        },
    )
    .await;
    let status = d.get("/status").await.unwrap().1;
    assert!(!status.contains("s3cret-token"), "{status}");

    // Without a token configured the endpoint does not exist.
    let port = free_port();
    let d = Daemon::start(daemon_command(&env, port), port).await;
    assert_eq!(d.post("/jobs/orphan-locks/run", Some("")).await.0, 404);
}

fn only_expired_orders(cmd: &mut Command) {
    for kind in [
        "PAID_SEATS",
        "MISSING_HASHES",
        "ORPHAN_LOCKS",
        "SOLD_ORPHANS",
    ] {
        cmd.env(format!("SEATFLOW__JOBS__{kind}__ENABLED"), "false");
    }
}

#[tokio::test]
async fn a_job_slower_than_its_schedule_is_skipped_not_overlapped() {
    let env = TestEnv::new().await;
    let order = seatflow_test_support::seed_expired(&env).await;
    let tx = seatflow_test_support::hold_audit_lock(&env).await;
    let port = free_port();
    let mut cmd = daemon_command(&env, port);
    only_expired_orders(&mut cmd);
    cmd.env(
        "SEATFLOW__MYSQL__LOCK_WAIT_TIMEOUT",
        seatflow_test_support::LONG_LOCK_WAIT,
    );
    let d = Daemon::start(cmd, port).await;

    let skipped =
        r#"seatflow_reconcile_runs_total{kind="expired_orders",outcome="skipped_overlap"}"#;
    wait_until("two fires are skipped", Duration::from_secs(60), || async {
        sample(&d.metrics().await, skipped) >= 2.0
    })
    .await;
    assert_eq!(d.status().await["jobs"]["expired_orders"]["running"], true);
    tx.rollback().await.unwrap();
    wait_until("the slow run finishes", Duration::from_secs(60), || async {
        sample(
            &d.metrics().await,
            r#"seatflow_reconcile_fixes_total{kind="expired_orders"}"#,
        ) == 1.0
    })
    .await;
    assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
    // Runs of one job never overlap: each started after the previous finished.
    let runs: Vec<(chrono::NaiveDateTime, Option<chrono::NaiveDateTime>)> =
        sqlx::query_as("SELECT started_at, finished_at FROM reconcile_run WHERE kinds = 'expired_orders' ORDER BY started_at")
            .fetch_all(env.ctx.mysql.pool())
            .await
            .unwrap();
    for w in runs.windows(2) {
        let prev_end = w[0].1.expect("finished");
        assert!(
            w[1].0 >= prev_end - chrono::Duration::milliseconds(5),
            "overlap: {w:?}"
        );
    }
}

async fn lock_keys(env: &TestEnv) -> Vec<String> {
    env.redis(redis::cmd("KEYS").arg(format!("{}reconcile:lock:*", env.prefix)))
        .await
}

#[tokio::test]
async fn sigterm_during_a_run_exits_0_and_releases_every_lock() {
    let env = TestEnv::new().await;
    let order = seatflow_test_support::seed_expired(&env).await;
    let tx = seatflow_test_support::hold_audit_lock(&env).await;
    let port = free_port();
    let mut cmd = daemon_command(&env, port);
    only_expired_orders(&mut cmd);
    cmd.env(
        "SEATFLOW__MYSQL__LOCK_WAIT_TIMEOUT",
        seatflow_test_support::LONG_LOCK_WAIT,
    );
    cmd.env("SEATFLOW__DAEMON__SHUTDOWN_TIMEOUT", "2s");
    let mut d = Daemon::start(cmd, port).await;
    wait_until(
        "a run holds the showtime's lock",
        Duration::from_secs(60),
        || async { !lock_keys(&env).await.is_empty() },
    )
    .await;

    // The run is stuck behind our lock for longer than the shutdown timeout.
    d.signal("TERM");
    // The shutdown timeout (2 s) is what ends the stuck run; 60 s only
    // stops a daemon that would never exit.
    let status = d
        .wait_exit(Duration::from_secs(60))
        .await
        .expect("exits once the shutdown timeout is over");
    assert_eq!(status.code(), Some(0));
    assert!(
        lock_keys(&env).await.is_empty(),
        "a reconcile:lock key was left behind"
    );
    tx.rollback().await.unwrap();

    // The next start converges.
    let report = env.once(&seatflow_reconciler::model::Kind::ALL).await;
    assert_eq!(report.exit_code(), 0, "{}", report.to_text());
    assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
    assert_eq!(
        env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
        Some("0")
    );
}

#[tokio::test]
async fn sigterm_when_idle_exits_0_promptly() {
    let env = TestEnv::new().await;
    let port = free_port();
    let mut d = Daemon::start(daemon_command(&env, port), port).await;
    d.signal("TERM");
    // "Promptly" is the benchmark's and the runbook's business; here 60 s
    // only stops a daemon that would never exit.
    let status = d.wait_exit(Duration::from_secs(60)).await.expect("exits");
    assert_eq!(status.code(), Some(0));
}

fn promtool() -> Command {
    Command::new(servers::tool("promtool", "prometheus"))
}

#[tokio::test]
async fn metrics_pass_promtool_check() {
    let env = TestEnv::new().await;
    let d = Daemon::with_a_run(&env).await;
    let exposition = d.metrics().await;
    let mut check = promtool()
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    check
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for name in [
        "seatflow_reconcile_fixes_total",
        "seatflow_reconcile_drift",
        "seatflow_reconcile_deferred",
        "seatflow_reconcile_runs_total",
        "seatflow_reconcile_run_duration_seconds_bucket",
        "seatflow_reconcile_last_success_timestamp_seconds",
        "seatflow_reconcile_errors_total",
        "seatflow_reconcile_mutex_busy_total",
        "seatflow_reconcile_backlog",
        "seatflow_reconcile_scanned_total",
        "seatflow_reconciler_build_info",
    ] {
        assert!(
            exposition.contains(&format!("\n{name}{{")),
            "{name} missing"
        );
    }
}

#[tokio::test]
async fn readyz_follows_redis_and_healthz_stays_up() {
    let env = TestEnv::new().await;
    // A Redis of the test's own, so it can be stopped without harming others.
    let mut redis = servers::redis();
    let port = free_port();
    let mut cmd = daemon_command(&env, port);
    cmd.env(
        "SEATFLOW__REDIS__URL",
        format!("redis://127.0.0.1:{}", redis.port()),
    )
    .env("SEATFLOW__REDIS__RESPONSE_TIMEOUT", "1s");
    let d = Daemon::start(cmd, port).await;
    assert_eq!(d.get("/readyz").await.unwrap().0, 200);

    redis.stop();
    wait_until("readyz reports Redis down", Duration::from_secs(60), || async {
        matches!(d.get("/readyz").await, Ok((503, body)) if body.contains("\"redis\":\"unreachable\""))
    })
    .await;
    assert_eq!(d.get("/healthz").await.unwrap().0, 200);
    assert_eq!(
        sample(
            &d.metrics().await,
            r#"seatflow_reconciler_dependency_up{dependency="redis"}"#
        ),
        0.0
    );

    redis.start().unwrap();
    wait_until("readyz is ready again", Duration::from_secs(60), || async {
        matches!(d.get("/readyz").await, Ok((200, _)))
    })
    .await;
}

/// Every job every second.
async fn every_second() -> TestEnv {
    TestEnv::with(|s| {
        for kind in seatflow_reconciler::model::Kind::ALL {
            s.set_schedule(kind, "* * * * * *");
        }
    })
    .await
}

/// The daemon as a library call: `run_on` serves and schedules until the
/// shutdown future completes, then returns (no signals, no process exit).
#[tokio::test]
async fn the_daemon_runs_in_process_until_its_shutdown_future_completes() {
    let env = every_second().await;
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.warm_all(1, &seats, &[("A-1", "1")]).await.unwrap();

    let daemon = seatflow_test_support::daemon::InProcessDaemon::start(env.ctx.clone()).await;
    let base = daemon.url("");

    daemon
        .status_when("an orphan_locks run repairs the seat", |s| {
            s["jobs"]["orphan_locks"]["last_run"]["fixed"] == 1
        })
        .await;
    assert_eq!(env.fx.hash(1).await.unwrap()["A-1"], "0");

    daemon.stop().await;
    assert!(
        reqwest::get(format!("{base}/healthz")).await.is_err(),
        "HTTP stops with the daemon"
    );
    assert!(env.ctx.leases.is_empty(), "every lease is released");
}

/// The daemon's pass serves the four seat jobs; one bad value is reported by
/// one job (the first enabled seat job), not by all four.
#[tokio::test]
async fn one_bad_value_is_reported_by_one_job_in_the_daemon() {
    let env = every_second().await;
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.warm_all(1, &seats, &[("A-1", "7")]).await.unwrap();
    let daemon = seatflow_test_support::daemon::InProcessDaemon::start(env.ctx.clone()).await;
    let seat_jobs = [
        "paid_seats",
        "missing_hashes",
        "orphan_locks",
        "sold_orphans",
    ];
    let status = daemon
        .status_when("every seat job ran", |s| {
            seat_jobs
                .iter()
                .all(|j| s["jobs"][j]["last_run"].is_object())
        })
        .await;
    daemon.stop().await;
    let invalid: Vec<(&str, u64)> = seat_jobs
        .iter()
        .map(|j| {
            (
                *j,
                status["jobs"][j]["last_run"]["invalid_data"]
                    .as_u64()
                    .unwrap(),
            )
        })
        .collect();
    assert_eq!(
        invalid,
        vec![
            ("paid_seats", 1),
            ("missing_hashes", 0),
            ("orphan_locks", 0),
            ("sold_orphans", 0)
        ]
    );
}

/// The daemon's JSON log lines, written to a file of the test's own.
struct LogFile(std::path::PathBuf);

impl LogFile {
    fn for_daemon(env: &TestEnv, cmd: &mut Command) -> LogFile {
        let path = std::env::temp_dir().join(format!("{}log.json", env.prefix.replace(':', "-")));
        cmd.env("SEATFLOW__LOG__FORMAT", "json")
            .stderr(std::fs::File::create(&path).unwrap());
        LogFile(path)
    }

    fn lines(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.0)
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for LogFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Log volume of an idle daemon: with nothing to repair, a run's summary is
/// an INFO line once a minute at most, whatever the schedule (here a pass
/// and an expired-orders run every second), and no other run line is INFO.
#[tokio::test]
async fn an_idle_daemon_logs_about_one_line_a_minute() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.warm_all(1, &seats, &[]).await.unwrap();
    let port = free_port();
    let mut cmd = daemon_command(&env, port);
    let log = LogFile::for_daemon(&env, &mut cmd);
    let d = Daemon::start(cmd, port).await;
    let runs = r#"seatflow_reconcile_runs_total{kind="paid_seats",outcome="success"}"#;
    wait_until("ten idle passes", Duration::from_secs(60), || async {
        sample(&d.metrics().await, runs) >= 10.0
    })
    .await;
    let lines = log.lines();
    let of_runs: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l.get("run_id").is_some()).collect();
    assert_eq!(
        of_runs.len(),
        1,
        "one INFO line for 10+ idle passes and as many expired-orders runs: {of_runs:#?}"
    );
    assert_eq!(of_runs[0]["message"], "run finished");
}

/// The same bad data met by every pass is counted every time and logged
/// once (an hour), with the sightings since.
#[tokio::test]
async fn bad_data_that_stays_is_logged_once_and_counted_every_pass() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.warm_all(1, &seats, &[("A-1", "9")]).await.unwrap();
    let port = free_port();
    let mut cmd = daemon_command(&env, port);
    let log = LogFile::for_daemon(&env, &mut cmd);
    let d = Daemon::start(cmd, port).await;
    let invalid = r#"seatflow_reconcile_errors_total{kind="paid_seats",stage="invalid_data"}"#;
    wait_until(
        "five passes met the bad value",
        Duration::from_secs(60),
        || async { sample(&d.metrics().await, invalid) >= 5.0 },
    )
    .await;
    let warned = log
        .lines()
        .into_iter()
        .filter(|l| l["message"] == "invalid data left alone")
        .count();
    assert_eq!(warned, 1, "logged once while it stays");
    assert_eq!(
        env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
        Some("9"),
        "left alone"
    );
}
