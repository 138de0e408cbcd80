//! The real binary: exit codes, JSON output, config errors, secrets (the demo: tests/demo.rs).

use std::process::{Command, Output};

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

#[test]
fn check_config_never_prints_secrets() {
    let (code, out, _) = run(bin()
        .args(["check-config"])
        .env(
            "SEATFLOW__MYSQL__URL",
            "mysql://app:hunter2@db.internal:3306/seatflow",
        )
        .env("SEATFLOW__HTTP__ADMIN_TOKEN", "tok-secret"));
    assert_eq!(code, 0);
    assert!(out.contains("app:***@db.internal"), "{out}");
    assert!(
        !out.contains("hunter2") && !out.contains("tok-secret"),
        "{out}"
    );
}

#[test]
fn unreachable_services_exit_3_without_leaking_the_password() {
    let (code, _, err) = run(bin()
        .args(["once", "--output", "json"])
        .env(
            "SEATFLOW__MYSQL__URL",
            "mysql://app:hunter2@127.0.0.1:1/seatflow",
        )
        .env("SEATFLOW__MYSQL__CONNECT_TIMEOUT", "2s"));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("mysql"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
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

/// Runs `once --job expired-orders` while a row lock makes it take ~1.5 s,
/// through `wrap` (e.g. a pseudo-terminal); returns stdout and stderr.
async fn slow_expired_run(env: &TestEnv, wrap: fn(Command) -> Command) -> (String, String) {
    let order = seatflow_test_support::seed_expired(env).await;
    let tx = seatflow_test_support::hold_order_lock(env, order).await;
    let mut cmd = against(env);
    cmd.args(["once", "--job", "expired-orders"]);
    let child = tokio::task::spawn_blocking(move || run(&mut wrap(cmd)));
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    tx.rollback().await.unwrap();
    let (code, out, err) = child.await.unwrap();
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
    (out, err)
}

#[tokio::test]
async fn progress_never_appears_when_stderr_is_not_a_terminal() {
    let env = TestEnv::new().await;
    let (_, err) = slow_expired_run(&env, |c| c).await;
    assert!(!err.contains("scanned"), "{err}");
    assert!(!err.contains('\r'), "{err:?}");
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
    assert!(
        out.contains("expired-orders: 1 orders scanned, 1 repairs"),
        "{out:?}"
    );
}
