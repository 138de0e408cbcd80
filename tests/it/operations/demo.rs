//! `demo`: on its own private servers (which it removes afterwards), and on
//! the configured ones (Redis checked first; only its own database dropped).

use std::process::Command;

use seatflow_reconciler::ops::demo::{self, MARKER_TABLE};

fn demo_command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_seatflow-reconciler"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SEATFLOW__")) {
        c.env_remove(k);
    }
    c.arg("demo");
    c
}

fn run(c: &mut Command) -> (i32, String, String) {
    let out = c.output().expect("binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The number after `marker` in `line` (e.g. the port after "127.0.0.1:").
fn number_after(line: &str, marker: &str) -> u32 {
    let rest = &line[line
        .find(marker)
        .unwrap_or_else(|| panic!("{marker:?} in {line:?}"))
        + marker.len()..];
    rest.chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

/// Whether a process with this pid runs `program` (a reused pid does not count).
fn runs(pid: u32, program: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains(program))
}

#[test]
fn demo_on_private_servers_repairs_every_kind_of_drift_and_leaves_nothing_behind() {
    // The configured servers do not exist: the demo must not need them.
    let (code, out, err) = run(demo_command()
        .env("SEATFLOW__MYSQL__URL", "mysql://root@127.0.0.1:1")
        .env("SEATFLOW__REDIS__URL", "redis://127.0.0.1:1"));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("Converged"), "{out}");
    for job in [
        "expired-orders",
        "paid-seats",
        "missing-hashes",
        "orphan-locks",
        "sold-orphans",
    ] {
        assert!(out.contains(job), "{job} missing from the demo output");
    }
    let line = out
        .lines()
        .find(|l| l.starts_with("Private servers"))
        .unwrap_or_else(|| panic!("no line about the private servers:\n{out}"));
    let (redis, mariadb) = line.split_once(", mariadbd").unwrap();
    let redis_port = number_after(redis, "127.0.0.1:");
    let redis_pid = number_after(redis, "(pid ");
    let mariadb_port = number_after(mariadb, "127.0.0.1:");
    let mariadb_pid = number_after(mariadb, "(pid ");
    let dir = line.rsplit_once(", in ").unwrap().1;
    assert!(!std::path::Path::new(dir).exists(), "{dir} is still there");
    for port in [redis_port, mariadb_port] {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port as u16)).is_err(),
            "port {port} still answers"
        );
    }
    assert!(
        !runs(redis_pid, "redis-server"),
        "redis-server {redis_pid} is alive"
    );
    assert!(
        !runs(mariadb_pid, "mariadbd"),
        "mariadbd {mariadb_pid} is alive"
    );
    assert!(
        out.contains("The private servers are stopped and removed."),
        "{out}"
    );
}

/// Stops what `demo --keep` left running, whatever the test's outcome.
struct KeptDemo(std::path::PathBuf);

impl Drop for KeptDemo {
    fn drop(&mut self) {
        let stop = self.0.join("stop.sh");
        if stop.exists() {
            let _ = Command::new("sh").arg(stop).output();
        }
    }
}

#[test]
fn demo_keep_leaves_servers_to_point_the_reconciler_at_and_a_script_that_stops_them() {
    let (code, out, err) = run(demo_command()
        .arg("--keep")
        .env("SEATFLOW__MYSQL__URL", "mysql://root@127.0.0.1:1")
        .env("SEATFLOW__REDIS__URL", "redis://127.0.0.1:1"));
    let line = out
        .lines()
        .find(|l| l.starts_with("Private servers"))
        .unwrap_or_else(|| panic!("no line about the private servers:\n{out}\n{err}"));
    let dir = std::path::PathBuf::from(line.rsplit_once(", in ").unwrap().1);
    let kept = KeptDemo(dir.clone());
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(line.contains("kept afterwards"), "{line}");
    let (redis, mariadb) = line.split_once(", mariadbd").unwrap();
    let pids = [
        (number_after(redis, "(pid "), "redis-server"),
        (number_after(mariadb, "(pid "), "mariadbd"),
    ];
    for (pid, program) in pids {
        assert!(runs(pid, program), "{program} {pid} was not kept");
    }
    assert!(
        out.contains(&format!(". {}/env.sh", dir.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!("sh {}/stop.sh", dir.display())),
        "{out}"
    );

    // The printed environment points the reconciler at the demo's data.
    let env_sh = std::fs::read_to_string(dir.join("env.sh")).unwrap();
    let mut once = Command::new(env!("CARGO_BIN_EXE_seatflow-reconciler"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SEATFLOW__")) {
        once.env_remove(k);
    }
    for line in env_sh.lines().filter_map(|l| l.strip_prefix("export ")) {
        let (k, v) = line.split_once('=').unwrap();
        once.env(k, v.trim_matches('\''));
    }
    let mut inspect = Command::new(once.get_program());
    inspect.envs(once.get_envs().filter_map(|(k, v)| Some((k, v?))));
    let (code, report, err) = run(once.args(["once", "--dry-run", "--output", "json"]));
    assert_eq!(code, 0, "{report}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    let drift: u64 = report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["drift"].as_u64().unwrap())
        .sum();
    assert_eq!(drift, 0, "the demo left a converged estate: {report}");
    let (code, map, err) = run(inspect.args(["inspect", "--showtime", "101"]));
    assert_eq!(code, 0, "{map}\n{err}");
    assert!(map.contains("no drift: Redis agrees with MySQL"), "{map}");

    // Its stop script stops both servers and removes their data.
    let stopped = Command::new("sh")
        .arg(dir.join("stop.sh"))
        .output()
        .unwrap();
    assert!(stopped.status.success(), "{stopped:?}");
    drop(kept);
    assert!(!dir.exists(), "{} is still there", dir.display());
    for (pid, program) in pids {
        assert!(!runs(pid, program), "{program} {pid} is alive");
    }
}

#[test]
fn configured_servers_mode_checks_redis_before_mysql() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (code, out, err) = run(demo_command()
        .arg("--use-configured-servers")
        .env("SEATFLOW__MYSQL__URL", "mysql://root@127.0.0.1:1")
        .env("SEATFLOW__REDIS__URL", format!("redis://127.0.0.1:{port}")));
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        err.contains("Redis is not reachable") && err.contains("nothing was changed"),
        "{err}"
    );
    assert!(!out.contains("MySQL database"), "{out}");
}

/// The configured-servers mode claims `seatflow_demo` with this function:
/// here on a fresh randomly named database, so tests never collide.
#[tokio::test]
async fn claim_database_drops_only_a_database_the_demo_created() {
    let (db, db_url) = seatflow_test_support::fresh_database().await;
    let server = seatflow_test_support::mysql_base_url();
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&db_url)
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE precious (id INT); INSERT INTO precious VALUES (7)")
        .execute(&pool)
        .await
        .unwrap();

    // Someone else's database: refused, nothing dropped.
    let err = demo::claim_database(&server, &db).await.unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("nothing was dropped") && msg.contains(MARKER_TABLE),
        "{msg}"
    );
    let kept: i64 = sqlx::query_scalar("SELECT id FROM precious")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(kept, 7);
    // An empty marker table is no marker either.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {MARKER_TABLE} (note VARCHAR(64) NOT NULL)"
    )))
    .execute(&pool)
    .await
    .unwrap();
    assert!(demo::claim_database(&server, &db).await.is_err());
    pool.close().await;

    // A database the demo created is dropped and created afresh, with its marker.
    let (own, own_url) = (
        format!("{db}_own"),
        fixtures_url(&server, &format!("{db}_own")),
    );
    demo::claim_database(&server, &own).await.unwrap();
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&own_url)
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE leftover (id INT)")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    demo::claim_database(&server, &own).await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = ?",
    )
    .bind(&own)
    .fetch_all(
        &sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(1)
            .connect(&server)
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(tables, vec![MARKER_TABLE.to_string()]);
    seatflow_test_support::cleanup(own, own_url, "sf-none:".into());
    seatflow_test_support::cleanup(db, db_url, "sf-none:".into());
}

fn fixtures_url(server: &str, db: &str) -> String {
    seatflow_reconciler::ops::demo::fixtures::with_database(server, db).unwrap()
}
