//! The real binary: exit codes, JSON output, config errors, secrets (the demo: tests/it/operations/demo.rs).

use std::process::{Command, Output};
use std::time::Duration;

use seatflow_test_support::TestEnv;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_seatflow-reconciler"));
    // Only what a test sets reaches the binary's configuration.
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SEATFLOW__")) {
        c.env_remove(k);
    }
    c.env("RUST_LOG", "warn");
    c
}

fn run(c: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = c.output().expect("binary runs");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// The binary pointed at a test's database and prefix.
fn against(env: &TestEnv) -> Command {
    let mut c = bin();
    c.env("SEATFLOW__MYSQL__URL", &env.db_url)
        .env("SEATFLOW__REDIS__URL", seatflow_test_support::redis_url())
        .env("SEATFLOW__REDIS__KEY_PREFIX", &env.prefix)
        .env("SEATFLOW__RECONCILE__ORPHAN_GRACE", "0s");
    c
}

/// A key under its section's former name (`[sweep]`, now `[pass]`) is
/// read, said at start and by `check-config`, and takes effect.
#[test]
fn a_setting_under_its_former_name_is_read_and_named() {
    let (_, out, err) = run(bin()
        .args(["check-config"])
        .env("SEATFLOW__SWEEP__SCHEDULE", "0 */7 * * * *"));
    assert!(
        out.contains("# renamed: sweep.schedule is now pass.schedule"),
        "{out}"
    );
    assert!(out.contains("schedule = \"0 */7 * * * *\""), "{out}");
    assert!(err.contains("a setting under its former name"), "{err}");
}

#[test]
fn bad_configuration_exits_2_and_names_the_key() {
    let (code, _, err) = run(bin()
        .args(["check-config"])
        .env("SEATFLOW__RECONCILE__LOCK_TTL", "soon"));
    assert_eq!(code, 2);
    assert!(err.contains("reconcile.lock_ttl"), "{err}");

    let dir = std::env::temp_dir().join(format!("sf-cli-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&dir, "[jobs.paid_seats]\nbach_size = 3\n").unwrap();
    let (code, _, err) = run(bin().arg("--config").arg(&dir).args(["once", "--dry-run"]));
    std::fs::remove_file(&dir).unwrap();
    assert_eq!(code, 2);
    assert!(err.contains("jobs.paid_seats.bach_size"), "{err}");

    let (code, _, err) = run(bin().args(["once", "--job", "refunds"]));
    assert_eq!(code, 2);
    assert!(
        err.contains("orphan-locks"),
        "the message lists the jobs: {err}"
    );
}

/// Rule 17: `check-config` reads the schema too. As the contract has it:
/// exit 0, and it says so. A deviation proved harmless on the data: listed
/// with its fix, exit 0. One that holds repairs back: named with its fix
/// and what it holds, exit 0 as `run` starts over it (rule 19).
/// `migrate` says the same after applying its tables.
#[tokio::test]
async fn check_config_and_migrate_judge_the_schema() {
    let env = TestEnv::new().await;
    let (code, out, err) = run(against(&env).args(["check-config"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("# schema: as the contract has it"), "{out}");
    assert!(!out.contains("# mysql.replica_url:"), "{out}");
    // With a replica: where a pass's bulk reads would go, never an error
    // (here a server that replicates nothing).
    let (code, out, err) = run(against(&env)
        .args(["check-config"])
        .env("SEATFLOW__MYSQL__REPLICA_URL", &env.db_url));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "# mysql.replica_url: a pass's bulk reads would go to the primary (not_a_replica)"
        ),
        "{out}"
    );

    env.sql("ALTER TABLE order_seat MODIFY showtime_id BIGINT NULL")
        .await;
    let (code, out, err) = run(against(&env).args(["check-config"]));
    assert_eq!(code, 0, "no NULL yet: harmless: {err}");
    let fix = "ALTER TABLE order_seat MODIFY showtime_id BIGINT NOT NULL";
    assert!(out.contains("harmless") && out.contains(fix), "{out}");

    env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    let order = env.fx.order(1, "PAID", &["A-1"], 900).await.unwrap();
    env.sql(&format!(
        "UPDATE order_seat SET showtime_id = NULL WHERE order_id = {order}"
    ))
    .await;
    let (code, out, err) = run(against(&env).args(["check-config"]));
    assert_eq!(code, 0, "run starts over it: {out}\n{err}");
    assert!(err.contains("order_seat.showtime_id (nullable)"), "{err}");
    assert!(out.contains(fix) && out.contains("holds"), "{out}");

    let (code, out, err) = run(against(&env).args(["migrate"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("order_seat.showtime_id (nullable)"), "{out}");
}

/// Rule 11 for every URL `check-config` prints, on stdout and in its log:
/// a password in the credentials or in any parameter.
#[test]
fn check_config_never_prints_secrets() {
    let (code, out, err) = run(bin()
        .args(["check-config"])
        .env(
            "SEATFLOW__MYSQL__URL",
            "mysql://app:hunter2@db.internal:3306/seatflow?ssl-mode=DISABLED&password=open-sesame",
        )
        .env(
            "SEATFLOW__MYSQL__REPLICA_URL",
            "mysql://ro:swordfish@db-ro.internal:3306/seatflow",
        )
        .env(
            "SEATFLOW__REDIS__URL",
            "redis://cache.internal:6379/?pass=redis-secret",
        )
        .env("SEATFLOW__HTTP__ADMIN_TOKEN", "tok-secret"));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("app:***@db.internal"), "{out}");
    assert!(out.contains("ro:***@db-ro.internal"), "{out}");
    assert!(out.contains("ssl-mode=DISABLED&password=***"), "{out}");
    assert!(out.contains("?pass=***"), "{out}");
    assert!(
        err.contains("db.internal"),
        "the log names the server: {err}"
    );
    for secret in [
        "hunter2",
        "tok-secret",
        "swordfish",
        "open-sesame",
        "redis-secret",
    ] {
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "{secret}: {out}\n{err}"
        );
    }
}

#[test]
fn unreachable_services_exit_3_without_leaking_the_password() {
    let (code, _, err) = run(bin()
        .args(["once", "--output", "json"])
        .env(
            "SEATFLOW__MYSQL__URL",
            "mysql://app:hunter2@127.0.0.1:1/seatflow?password=open-sesame",
        )
        // Long: a refused connection must not wait for it (a pool would,
        // then say only "pool timed out").
        .env("SEATFLOW__MYSQL__CONNECT_TIMEOUT", "60s"));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("mysql"), "{err}");
    assert!(
        !err.contains("hunter2") && !err.contains("open-sesame"),
        "{err}"
    );
    assert!(err.to_lowercase().contains("connection refused"), "{err}");
    assert!(
        !err.contains("redis://"),
        "only the store that failed is named: {err}"
    );
}

/// A refused login is a configuration error (exit 2) naming the key the
/// credential came from: the password's own key when given apart from the
/// URL, else the URL; a Redis that needs a password and got none names
/// `redis.url` and says so.
#[test]
fn refused_logins_exit_2_naming_where_the_credential_came_from() {
    let redis = seatflow_test_support::servers::redis_with_password("s3cret");
    let redis_url = format!("redis://127.0.0.1:{}", redis.port());
    let mysql = seatflow_test_support::mysql_base_url();
    // (case, environment, the key named, the reason given)
    type Case<'a> = (&'a str, Vec<(&'a str, String)>, &'a str, &'a str);
    let cases: [Case; 5] = [
        (
            "Redis needs a password, none given",
            vec![("SEATFLOW__REDIS__URL", redis_url.clone())],
            "`redis.url`",
            "needs a password",
        ),
        (
            "wrong Redis password in the URL",
            vec![("SEATFLOW__REDIS__URL", redis_url.replace("//", "//:wrong@"))],
            "`redis.url`",
            "wrong user or password",
        ),
        (
            "wrong Redis password apart",
            vec![
                ("SEATFLOW__REDIS__URL", redis_url.clone()),
                ("SEATFLOW__REDIS__PASSWORD", "wrong".into()),
            ],
            "`redis.password`",
            "wrong user or password",
        ),
        (
            "wrong MySQL password apart",
            vec![("SEATFLOW__MYSQL__PASSWORD", "wrong".into())],
            "`mysql.password`",
            "access denied",
        ),
        (
            "wrong MySQL password in the URL",
            vec![(
                "SEATFLOW__MYSQL__URL",
                mysql.replacen("root@", "root:wrong@", 1),
            )],
            "`mysql.url`",
            "access denied",
        ),
    ];
    for (case, env, key, why) in cases {
        let mut c = bin();
        c.args(["once", "--dry-run"])
            .env("SEATFLOW__MYSQL__URL", format!("{mysql}/mysql"))
            .env("SEATFLOW__REDIS__URL", seatflow_test_support::redis_url());
        for (k, v) in &env {
            c.env(k, v);
        }
        let (code, _, err) = run(&mut c);
        assert_eq!(code, 2, "{case}: {err}");
        assert!(err.contains(key) && err.contains(why), "{case}: {err}");
        assert!(
            !err.contains("s3cret") && !err.contains("wrong@"),
            "{case}: {err}"
        );
    }
}

#[tokio::test]
async fn once_json_reports_the_run_and_exits_0() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.warm_all(1, &seats, &[("A-1", "1")]).await.unwrap();

    let (code, out, err) = run(against(&env).args([
        "once",
        "--output",
        "json",
        "--job",
        "orphan-locks",
        "--job",
        "paid-seats",
    ]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is one JSON object");
    assert_eq!(v["dry_run"], false);
    assert_eq!(v["fixed"]["orphan_locks_released"], 1);
    let kinds: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["paid_seats", "orphan_locks"], "contract order");
    assert!(v["run_id"].is_string() && v["duration_ms"].is_u64());
    assert_eq!(
        env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
        Some("0")
    );

    let (code, out, _) = run(against(&env).args(["once", "--dry-run"]));
    assert_eq!(code, 0);
    assert!(
        out.contains("dry run") && out.contains("orphan-locks"),
        "{out}"
    );
}

#[tokio::test]
async fn migrate_creates_the_tables() {
    let (db, url) = seatflow_test_support::fresh_database().await;
    let (code, _, err) = run(bin()
        .args(["migrate", "--reference-schema"])
        .env("SEATFLOW__MYSQL__URL", &url));
    assert_eq!(code, 0, "{err}");
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
    let mut tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name NOT LIKE '\\_sqlx%'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    tables.sort();
    assert_eq!(
        tables,
        [
            "hall",
            "hall_seat",
            "order_seat",
            "reconcile_fix",
            "reconcile_run",
            "showtime",
            "ticket_order"
        ]
    );
    // Applying again is a no-op.
    let (code, _, _) = run(bin()
        .args(["migrate", "--reference-schema"])
        .env("SEATFLOW__MYSQL__URL", &url));
    assert_eq!(code, 0);
    pool.close().await;
    seatflow_test_support::cleanup(db, url, "sf-none:".into());
}

/// `once` while another reconciler holds the pass: the seat jobs are listed
/// as skipped, with the holder and since when (JSON and text); the other
/// jobs run; nothing is repaired behind the holder's back.
#[tokio::test]
async fn once_reports_seat_jobs_skipped_while_another_holds_the_pass() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.warm_all(1, &seats, &[("A-1", "1")]).await.unwrap();
    let claimed_ms = chrono::Utc::now().timestamp_millis() - 5_000;
    let lease =
        seatflow_reconciler::store::redis::pass_lease_value("0f0f", claimed_ms, "replica-a");
    let _: () = env
        .redis(
            redis::cmd("SET")
                .arg(
                    env.ctx
                        .redis
                        .keys
                        .pass_lease(seatflow_reconciler::model::Shard::ALL),
                )
                .arg(&lease)
                .arg("PX")
                .arg(60_000),
        )
        .await;

    let (code, out, err) = run(against(&env).args(["once", "--output", "json"]));
    assert_eq!(code, 0, "standing by is not a failure: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("stdout is one JSON object");
    let ran: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["kind"].as_str().unwrap())
        .collect();
    assert_eq!(ran, ["expired_orders"], "{v}");
    let skipped = v["skipped"].as_array().expect("skipped jobs listed");
    let kinds: Vec<&str> = skipped
        .iter()
        .map(|j| j["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "paid_seats",
            "missing_hashes",
            "orphan_locks",
            "sold_orphans"
        ]
    );
    for j in skipped {
        assert_eq!(j["reason"], "pass_held", "{j}");
        assert_eq!(j["holder"], "replica-a", "{j}");
        assert_eq!(j["shard"], 0, "{j}");
        let since = chrono::DateTime::parse_from_rfc3339(j["since"].as_str().unwrap()).unwrap();
        assert_eq!(since.timestamp_millis(), claimed_ms, "{j}");
    }
    assert_eq!(
        env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
        Some("1"),
        "the holder's pass, not ours: nothing repaired"
    );

    let (code, out, _) = run(against(&env).args(["once"]));
    assert_eq!(code, 0);
    assert!(
        out.contains("orphan-locks: skipped, shard 0's pass is held by replica-a since "),
        "{out}"
    );
}

/// A Pushgateway that cannot be reached: the run's report still prints, and
/// the exit (1) says why the push failed.
#[tokio::test]
async fn an_unreachable_pushgateway_is_named_with_its_cause() {
    let env = TestEnv::new().await;
    let (code, out, err) = run(against(&env).args([
        "once",
        "--job",
        "expired-orders",
        "--pushgateway",
        "http://127.0.0.1:1",
    ]));
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("expired-orders"),
        "the report is printed: {out}"
    );
    assert!(
        err.contains("Pushgateway") && err.to_lowercase().contains("connection refused"),
        "{err}"
    );
}

/// Runs `once --job expired-orders` while a lock makes it slow, through
/// `wrap` (e.g. a pseudo-terminal); returns stdout and stderr.
///
/// "Slow" is an event, not a sleep: the lock (on the audit table, which the
/// cancel writes in its transaction) is held until the run's cancel has
/// waited on it for a second or more by the server's account (its
/// statement's age). The job started before that statement did, so once the
/// cancel gets the lock the job has run longer than the half second after
/// which it shows progress, however slow the machine. (Progress is drawn
/// after a chunk is done, so the lock has to go before the line can appear;
/// the run's whole output is read when it ends.)
async fn slow_expired_run(env: &TestEnv, wrap: fn(Command) -> Command) -> (String, String) {
    let order = seatflow_test_support::seed_expired(env).await;
    let tx = seatflow_test_support::hold_audit_lock(env).await;
    let mut cmd = against(env);
    cmd.args(["once", "--job", "expired-orders"]).env(
        "SEATFLOW__MYSQL__LOCK_WAIT_TIMEOUT",
        seatflow_test_support::LONG_LOCK_WAIT,
    );
    let child = tokio::task::spawn_blocking(move || run(&mut wrap(cmd)));
    // A hang guard only: the run waits on our lock until we let it go.
    seatflow_test_support::servers::wait_until(
        "the run's cancel has waited on the audit table's lock for a second",
        Duration::from_secs(120),
        || lock_waited(env),
    )
    .await;
    tx.rollback().await.unwrap();
    let (code, out, err) = tokio::time::timeout(Duration::from_secs(120), child)
        .await
        .expect("the run ends once the lock is released")
        .unwrap();
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
    (out, err)
}

/// A session of the test's database is waiting on a row lock in a statement
/// that has run for a second or more (`TIME`: whole seconds, no time zone).
async fn lock_waited(env: &TestEnv) -> bool {
    // The cancel's audit insert, running for a second or more by the
    // server's account. Read from the processlist, not from innodb_trx
    // (a lock met while the optimizer reads a const table is not listed as
    // a LOCK WAIT there).
    sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM information_schema.processlist \
         WHERE db = DATABASE() AND command IN ('Query', 'Execute') AND time >= 1 \
         AND info LIKE 'INSERT INTO reconcile_fix%'",
    )
    .fetch_one(env.ctx.mysql.pool())
    .await
    .unwrap()
        > 0
}

#[tokio::test]
async fn progress_never_appears_when_stderr_is_not_a_terminal() {
    let env = TestEnv::new().await;
    let (out, err) = slow_expired_run(&env, |c| c).await;
    for text in [&out, &err] {
        assert!(!text.contains("orders ·"), "{text}");
        assert!(!text.contains('\r') && !text.contains('\x1b'), "{text:?}");
    }
}

#[tokio::test]
async fn progress_appears_on_a_terminal() {
    let env = TestEnv::new().await;
    // `script` runs the command on a pseudo-terminal and copies what it writes.
    let (out, _) = slow_expired_run(&env, |c| {
        let line = std::iter::once(c.get_program().to_string_lossy().into_owned())
            .chain(c.get_args().map(|a| a.to_string_lossy().into_owned()))
            .collect::<Vec<_>>()
            .join(" ");
        let mut s = Command::new("script");
        s.args(["-qefc", &line, "/dev/null"]);
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => s.env(k, v),
                None => s.env_remove(k),
            };
        }
        s
    })
    .await;
    // The bar while the job ran (the time left), then its final line of
    // its own: the count of the total, the repairs, the rate, the time taken.
    assert!(
        out.contains("expired-orders [") && out.contains(" left"),
        "{out:?}"
    );
    let done = out
        .lines()
        .find(|l| l.contains("expired-orders: "))
        .unwrap_or_else(|| panic!("no final line: {out:?}"));
    assert!(
        done.contains("expired-orders: 1/1 orders · 1 repairs · "),
        "{done:?}"
    );
    assert!(done.contains("/s · took "), "{done:?}");
}

/// The binary with JSON logs at debug level (every repair line included),
/// none of the test harness's RUST_LOG.
fn json_logs(mut c: Command) -> Command {
    c.env_remove("RUST_LOG")
        .env("SEATFLOW__LOG__FORMAT", "json")
        .env("SEATFLOW__LOG__LEVEL", "debug");
    c
}

/// Every stderr line of a JSON-logging run as a JSON object.
fn json_lines(stderr: &str) -> Vec<serde_json::Map<String, serde_json::Value>> {
    stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match serde_json::from_str::<serde_json::Value>(l) {
            Ok(serde_json::Value::Object(o)) => o,
            _ => panic!("not a JSON object: {l:?}\nstderr:\n{stderr}"),
        })
        .collect()
}

#[tokio::test]
async fn every_log_line_of_a_once_run_is_json_tied_to_its_run_and_job() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.order(1, "PAID", &["A-2"], -600).await.unwrap();
    env.fx.order(1, "PENDING", &["A-3"], -600).await.unwrap();
    env.fx
        .warm_all(1, &seats, &[("A-1", "1"), ("A-2", "0"), ("A-3", "1")])
        .await
        .unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();

    let (code, out, err) = run(json_logs(against(&env)).args(["once", "--output", "json"]));
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("stdout is the report");
    let run_id = report["run_id"].as_str().unwrap();
    let lines = json_lines(&err);
    assert!(lines.len() >= 5, "{err}");
    let jobs = [
        "expired_orders",
        "paid_seats",
        "missing_hashes",
        "orphan_locks",
        "sold_orphans",
    ];
    for l in &lines {
        for key in ["timestamp", "level", "message"] {
            assert!(l.get(key).is_some_and(|v| v.is_string()), "{key} in {l:?}");
        }
        // Tied to the run, and to a job (or to the shared seat sweep).
        assert_eq!(
            l.get("run_id").and_then(|v| v.as_str()),
            Some(run_id),
            "{l:?}"
        );
        // (The run's own lines, its summary and the repaired showtimes',
        // name their jobs in `jobs`.)
        assert!(
            l.contains_key("kind") || l.contains_key("kinds") || l.contains_key("jobs"),
            "{l:?}"
        );
        if let Some(k) = l.get("kind") {
            assert!(
                jobs.contains(&k.as_str().unwrap_or("?")),
                "kind is a job: {l:?}"
            );
        }
        // No Rust Debug renderings of structures in any field.
        for (k, v) in l.iter() {
            if let Some(s) = v.as_str() {
                assert!(
                    !s.starts_with('[') && !s.contains("Some(") && !s.starts_with('{'),
                    "field {k} looks like Rust Debug: {s:?}"
                );
            }
        }
    }
    // Every repair applied is on a line of its own (debug) and each
    // repaired showtime has its summary line (info).
    let repairs = lines
        .iter()
        .filter(|l| l["message"] == "repair applied")
        .count();
    assert!(repairs >= 3, "{err}");
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "showtime repaired" && l["showtime_id"] == 1),
        "{err}"
    );
    // One line for the run, carrying exactly the report's counts per job.
    let run_lines: Vec<&serde_json::Map<String, serde_json::Value>> = lines
        .iter()
        .filter(|l| l["message"] == "run finished")
        .collect();
    assert_eq!(run_lines.len(), 1, "{err}");
    let logged =
        seatflow_test_support::run_line_jobs(&serde_json::Value::Object(run_lines[0].clone()));
    let reported = report["jobs"].as_array().unwrap();
    assert_eq!(logged.len(), reported.len(), "{err}");
    for (line, job) in logged.iter().zip(reported) {
        assert_eq!(line["kind"], job["kind"].as_str().unwrap());
        assert_eq!(line["outcome"], job["outcome"].as_str().unwrap());
        for (key, logged_as) in [
            ("scanned", "scanned"),
            ("drift", "drift"),
            ("fixed", "fixed"),
            ("deferred", "deferred"),
            ("skipped_busy", "busy"),
            ("errors", "errors"),
            ("backlog", "backlog"),
        ] {
            assert_eq!(
                line[logged_as],
                job[key].to_string(),
                "{key} of {}",
                job["kind"]
            );
        }
    }
}

#[test]
fn fatal_errors_are_json_under_log_format_json() {
    let (code, _, err) = run(bin()
        .args(["once"])
        .env("SEATFLOW__LOG__FORMAT", "json")
        .env("SEATFLOW__RECONCILE__LOCK_TTL", "soon"));
    assert_eq!(code, 2);
    let lines = json_lines(&err);
    assert_eq!(lines.len(), 1, "{err}");
    assert_eq!(lines[0]["level"], "ERROR");
    assert_eq!(lines[0]["fatal"], true);
    assert!(
        lines[0]["message"]
            .as_str()
            .unwrap()
            .contains("reconcile.lock_ttl"),
        "{err}"
    );

    // Unreachable at start (after the settings loaded): JSON too.
    let (code, _, err) = run(bin()
        .args(["once"])
        .env("SEATFLOW__LOG__FORMAT", "json")
        .env(
            "SEATFLOW__MYSQL__URL",
            "mysql://app:hunter2@127.0.0.1:1/seatflow",
        )
        .env("SEATFLOW__MYSQL__CONNECT_TIMEOUT", "2s"));
    assert_eq!(code, 3, "{err}");
    let lines = json_lines(&err);
    assert!(
        lines.iter().any(|l| l["fatal"] == true
            && l["message"]
                .as_str()
                .unwrap()
                .contains("cannot reach mysql")),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

/// `mysql.password_file` and `redis.password`: real users whose passwords
/// need URL-encoding, a run that logs in with them, and a wrong password
/// that exits 2 naming the key, never printing the password.
#[tokio::test]
async fn passwords_apart_from_the_url_log_in_and_never_print() {
    let env = TestEnv::new().await;
    let user = format!("sfpw{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let password = "p@ss:w/rd%?#&x";
    for host in ["%", "localhost"] {
        // Test-made names and a fixed password: nothing to inject.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE USER '{user}'@'{host}' IDENTIFIED BY '{}'",
            password.replace('\'', "''")
        )))
        .execute(env.ctx.mysql.pool())
        .await
        .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "GRANT ALL ON `{}`.* TO '{user}'@'{host}'",
            env.db
        )))
        .execute(env.ctx.mysql.pool())
        .await
        .unwrap();
    }
    let _: () = env
        .redis(
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg(&user)
                .arg("on")
                .arg(format!(">{password}"))
                .arg("~*")
                .arg("&*")
                .arg("+@all"),
        )
        .await;
    let file = std::env::temp_dir().join(format!("sf-cli-pw-{}", uuid::Uuid::new_v4()));
    std::fs::write(&file, format!("{password}\n")).unwrap();
    let mysql_url = format!("mysql://{user}@127.0.0.1:3306/{}", env.db);
    let redis_url = format!("redis://{user}@127.0.0.1:6379");

    let mut ok = against(&env);
    ok.env("SEATFLOW__MYSQL__URL", &mysql_url)
        .env("SEATFLOW__MYSQL__PASSWORD_FILE", &file)
        .env("SEATFLOW__REDIS__URL", &redis_url)
        .env("SEATFLOW__REDIS__PASSWORD", password)
        .args(["once", "--dry-run", "--output", "json"]);
    let (code, out, err) = run(&mut ok);

    let mut wrong = against(&env);
    wrong
        .env("SEATFLOW__MYSQL__URL", &mysql_url)
        .env("SEATFLOW__MYSQL__PASSWORD", "not-it")
        .env("SEATFLOW__REDIS__URL", &redis_url)
        .env("SEATFLOW__REDIS__PASSWORD", password)
        .args(["once", "--dry-run"]);
    let (wrong_code, _, wrong_err) = run(&mut wrong);

    let mut shown = against(&env);
    shown
        .env("SEATFLOW__MYSQL__PASSWORD_FILE", &file)
        .env("SEATFLOW__MYSQL__URL", &mysql_url)
        .env("SEATFLOW__REDIS__URL", &redis_url)
        .env("SEATFLOW__REDIS__PASSWORD", password)
        .args(["check-config"]);
    let (shown_code, shown_out, shown_err) = run(&mut shown);

    // Clean up before asserting.
    std::fs::remove_file(&file).unwrap();
    for host in ["%", "localhost"] {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP USER '{user}'@'{host}'")))
            .execute(env.ctx.mysql.pool())
            .await;
    }
    let _: i64 = env.redis(redis::cmd("ACL").arg("DELUSER").arg(&user)).await;

    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"run_id\""), "{out}");
    assert_eq!(wrong_code, 2, "{wrong_err}");
    assert!(
        wrong_err.contains("`mysql.password`"),
        "the password given apart is the one named: {wrong_err}"
    );
    assert_eq!(shown_code, 0, "{shown_out}\n{shown_err}");
    assert!(shown_out.contains("password = \"***\""), "{shown_out}");
    for text in [&out, &err, &wrong_err, &shown_out] {
        assert!(
            !text.contains("p@ss") && !text.contains("p%40ss"),
            "password printed: {text}"
        );
    }
}

/// Wrong credentials or an unknown database are configuration errors (exit
/// 2 naming the key), not "unreachable" (3): retrying cannot help.
#[tokio::test]
async fn refused_logins_and_unknown_databases_exit_2_naming_the_url_key() {
    let env = TestEnv::new().await;
    let cases = [
        (
            "SEATFLOW__MYSQL__URL",
            "mysql://root@127.0.0.1:3306/no_such_db_seatflow_cli".to_string(),
            "mysql.url",
        ),
        (
            "SEATFLOW__MYSQL__URL",
            "mysql://no_such_user_sf:wrong@127.0.0.1:3306/seatflow".to_string(),
            "mysql.url",
        ),
        (
            "SEATFLOW__REDIS__URL",
            "redis://no_such_user_sf:wrong@127.0.0.1:6379".to_string(),
            "redis.url",
        ),
    ];
    for (var, url, key) in cases {
        let mut c = bin();
        c.args(["once", "--dry-run"])
            .env("SEATFLOW__MYSQL__URL", &env.db_url)
            .env("SEATFLOW__REDIS__URL", seatflow_test_support::redis_url())
            .env(var, &url);
        let (code, _, err) = run(&mut c);
        assert_eq!(code, 2, "{url}: {err}");
        assert!(err.contains(key), "{url}: {err}");
        assert!(!err.contains("wrong@") && !err.contains(":wrong"), "{err}");
    }
}

/// Output piped to a reader that goes away (`once --output json | head`,
/// `check-config | head -1`) ends quietly: no panic on the closed pipe, the
/// command's own exit code.
#[tokio::test]
async fn a_reader_that_goes_away_ends_the_output_quietly() {
    let env = TestEnv::new().await;
    for args in [
        &["once", "--output", "json"][..],
        &["check-config"][..],
        &["inspect", "--showtime", "1"][..],
    ] {
        let mut child = against(&env)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("binary runs");
        // The reader is gone before the command writes a line.
        drop(child.stdout.take());
        let out = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.contains("Broken pipe"), "{args:?}: {err}");
        assert_ne!(out.status.code(), Some(101), "{args:?}: {err}");
    }
}
