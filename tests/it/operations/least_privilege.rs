//! Rule 18, least privilege proven: the daemon under exactly the documented
//! Redis ACL and MySQL grants, with both change sources; a permission that
//! is missing at start is named (exit 2, the rule or GRANT to run), and one
//! lost while the daemon runs is named by `/status` and the metric.

use std::process::Command;
use std::time::Duration;

use seatflow_reconciler::config::{RedisEvents, SecretUrl, Settings};
use seatflow_reconciler::ops::access::{self, probe, redis_acl::RedisAccess};
use seatflow_reconciler::run::context::Context;
use seatflow_reconciler::store::mysql::grants as mysql_grants;
use seatflow_test_support::daemon::{
    InProcessDaemon, binary, metric_reaches_at_least, metrics, sample,
};
use seatflow_test_support::estate::{estate_on, events_on, found, post, seat_becomes};
use seatflow_test_support::servers::{self, PrivateServer, binlog_dumps_become};
use seatflow_test_support::{DbUser, TestEnv};

/// A Redis user of the test's own server with exactly `access`'s rule.
async fn redis_user(env: &TestEnv, name: &str, access: &RedisAccess) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(name).arg("on").arg(">pw");
    for token in access.tokens() {
        cmd.arg(token);
    }
    let _: () = env.redis(&cmd).await;
}

/// `showtimes` on the shared MariaDB and a Redis of the test's own (its
/// ACL is changed), with a user `name` under the daemon's whole rule.
async fn estate_with_redis_user(
    showtimes: i64,
    name: &str,
) -> (PrivateServer, TestEnv, RedisAccess) {
    let redis = servers::redis();
    let env = estate_on(
        &seatflow_test_support::mysql_base_url(),
        Some(&redis),
        showtimes,
        |_| {},
    )
    .await;
    let access = access::redis_access(&env.ctx.settings, true);
    redis_user(&env, name, &access).await;
    (redis, env, access)
}

/// `ACL SETUSER user rule` on the test's Redis.
async fn acl(env: &TestEnv, user: &str, rule: &str) {
    let _: () = env
        .redis(redis::cmd("ACL").arg("SETUSER").arg(user).arg(rule))
        .await;
}

fn with_user(url: &str, user: &str) -> String {
    let mut u = url::Url::parse(url).unwrap();
    u.set_username(user).unwrap();
    u.set_password(Some("pw")).unwrap();
    u.to_string()
}

/// `env`'s settings with both stores reached as `mysql_user` and `redis_user`.
fn as_users(env: &TestEnv, mysql: &DbUser, redis_user: &str) -> Settings {
    let mut s = (*env.ctx.settings).clone();
    s.mysql.url = SecretUrl::new(mysql.url(env));
    s.redis.url = SecretUrl::new(with_user(s.redis.url.expose(), redis_user));
    s
}

/// The documented grants (`deploy/README.md`, "MySQL grants") for `user`,
/// with the audit's retention on (the default).
fn documented_grants(env: &TestEnv, user: &str, binlog: bool) -> Vec<String> {
    mysql_grants::grant_statements(&env.db, &format!("'{user}'@'%'"), true, binlog)
}

/// Exactly the documented ACL and grants, both change sources on: the start's
/// check finds nothing missing; a pass repairs every kind of drift (leases,
/// the audit with its runs, retention); a hold is checked from its keyspace
/// event and a payment from the binlog; the position is saved; nothing was
/// refused.
#[tokio::test]
async fn a_daemon_under_exactly_the_documented_acl_and_grants_does_all_its_work() {
    let mysql = servers::mariadb_with_binlog();
    let redis = servers::redis_with_keyspace_events();
    let base = servers::root_url(&mysql);
    let env = estate_on(&base, Some(&redis), 4, |s| {
        s.changes.mysql_binlog = true;
        s.changes.redis_events = RedisEvents::Auto;
        s.changes.mysql_settle = Duration::from_secs(1);
        s.audit.retention = Duration::from_secs(3600);
    })
    .await;
    let access = access::redis_access(&env.ctx.settings, true);
    redis_user(&env, "sf-least", &access).await;
    let db_user =
        DbUser::create(&env, "sf_least", &documented_grants(&env, "sf_least", true)).await;
    let settings = as_users(&env, &db_user, "sf-least");
    let ctx = Context::connect(settings.clone()).await.unwrap();
    let missing = probe::missing(
        &ctx.mysql,
        &ctx.redis,
        &access,
        access.setuser("sf-least"),
        true,
    )
    .await
    .unwrap();
    assert!(missing.is_empty(), "{missing:?}");

    // Drift of every kind, and audit rows past the retention.
    env.fx.warm(1, &[("A-1", "1")]).await.unwrap();
    env.fx.order(1, "PAID", &["A-3"], 600).await.unwrap();
    env.fx.order(1, "PENDING", &["A-4"], -600).await.unwrap();
    env.fx.warm(1, &[("A-4", "1")]).await.unwrap();
    env.fx.warm(4, &[("A-1", "2")]).await.unwrap();
    let _: i64 = env
        .redis(redis::cmd("DEL").arg(env.ctx.redis.keys.seat(3)))
        .await;
    let paying = env.fx.order(2, "PENDING", &["A-2"], 600).await.unwrap();
    env.fx.warm(2, &[("A-2", "1")]).await.unwrap();
    env.sql(
        "INSERT INTO reconcile_run (run_id, instance, kinds, dry_run, started_at, finished_at, outcome) \
         VALUES ('old-run', 'old', 'paid_seats', 0, UTC_TIMESTAMP(3) - INTERVAL 2 HOUR, \
                 UTC_TIMESTAMP(3) - INTERVAL 2 HOUR, 'success'); \
         INSERT INTO reconcile_fix (fix_id, run_id, job, kind, fixed_at, instance) \
         VALUES ('old-fix', 'old-run', 'paid_seats', 'seat_set', UTC_TIMESTAMP(3) - INTERVAL 2 HOUR, 'old')",
    )
    .await;

    let daemon = InProcessDaemon::start(ctx.clone()).await;
    for job in [
        "expired_orders",
        "orphan_locks",
        "paid_seats",
        "sold_orphans",
        "missing_hashes",
    ] {
        assert_eq!(
            post(&daemon, &format!("/jobs/{job}/run")).await.0,
            202,
            "{job}"
        );
        daemon
            .status_when(&format!("{job} ran"), |s| {
                s["jobs"][job]["last_run"]["outcome"] == "success"
            })
            .await;
    }
    for (showtime, seat, value, what) in [
        (1, "A-1", "0", "the orphan lock is released"),
        (1, "A-3", "2", "the paid seat is sold"),
        (4, "A-1", "0", "the sold orphan is released"),
        (3, "A-1", "0", "the lost hash is rebuilt"),
        (1, "A-4", "0", "the expired order's seat is released"),
    ] {
        seat_becomes(&env, showtime, seat, value, what).await;
    }
    events_on(&daemon).await;
    binlog_dumps_become(&env, 1).await;

    // A customer's hold nobody ordered: its keyspace event. A payment that
    // Redis never heard of: the binlog.
    env.fx.warm(4, &[("A-3", "1")]).await.unwrap();
    seat_becomes(&env, 4, "A-3", "0", "the hold is released on its event").await;
    // Counted from here: the admin runs' own writes are binlog commits too,
    // and on a slow machine their checks may repair a seat before the
    // admin run that owns it does (then this series is 1 already).
    let sold_by_binlog =
        r#"seatflow_reconcile_change_fixes_total{kind="paid_seats",source="binlog"}"#;
    let before = sample(&metrics(&daemon).await, sold_by_binlog);
    assert!(env.fx.pay(paying).await.unwrap());
    seat_becomes(&env, 2, "A-2", "2", "the payment is sold via the binlog").await;
    let m = metric_reaches_at_least(&daemon, sold_by_binlog, before + 1.0).await;
    assert_eq!(
        sample(
            &m,
            r#"seatflow_reconcile_change_fixes_total{kind="orphan_locks",source="event"}"#
        ),
        1.0
    );
    let mut found_by = env.found_by().await;
    found_by.sort();
    assert!(
        found_by.contains(&found("seat_set", "binlog")),
        "{found_by:?}"
    );
    assert!(
        found_by.contains(&found("seat_released", "event")),
        "{found_by:?}"
    );

    // The position and the pass's record were written by this user.
    let keys = &env.ctx.redis.keys;
    servers::wait_until(
        "the binlog position is saved",
        Duration::from_secs(30),
        || async {
            env.redis::<Option<String>>(redis::cmd("GET").arg(keys.binlog_position(env.ctx.shard)))
                .await
                .is_some()
        },
    )
    .await;
    let record: i64 = env
        .redis(redis::cmd("EXISTS").arg(keys.pass_record(env.ctx.shard)))
        .await;
    assert_eq!(record, 1, "the pass left its record");
    // Every repair has its run; the old rows are gone.
    let orphans: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM reconcile_fix f LEFT JOIN reconcile_run r USING (run_id) WHERE r.run_id IS NULL",
    )
    .fetch_one(env.ctx.mysql.pool())
    .await
    .unwrap();
    assert_eq!(orphans, 0);
    let old: i64 = sqlx::query_scalar(
        "SELECT (SELECT COUNT(*) FROM reconcile_run WHERE run_id = 'old-run') + \
                (SELECT COUNT(*) FROM reconcile_fix WHERE fix_id = 'old-fix')",
    )
    .fetch_one(env.ctx.mysql.pool())
    .await
    .unwrap();
    assert_eq!(old, 0, "audit retention deleted the old rows");
    assert!(env.audit().await.len() >= 6, "{:?}", env.audit().await);

    let m = metrics(&daemon).await;
    assert!(
        !m.contains("seatflow_reconcile_permission_denied_total{"),
        "{m}"
    );
    for stage in ["mysql", "redis", "audit", "lock"] {
        let errors: f64 = m
            .lines()
            .filter(|l| {
                l.starts_with("seatflow_reconcile_errors_total{")
                    && l.contains(&format!("stage=\"{stage}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert_eq!(errors, 0.0, "{stage} errors:\n{m}");
    }
    let status = daemon.status_when("no permission refused", |_| true).await;
    assert_eq!(
        status["permissions"]["denied"],
        serde_json::json!([]),
        "{status}"
    );
    daemon.stop().await;
    drop((mysql, redis));
}

/// A grant and an ACL command taken away while the daemon runs: the runs
/// that need them fail, and `/status` and the metric name each.
#[tokio::test]
async fn a_permission_lost_while_running_is_named_by_status_and_the_metric() {
    let (_redis, env, _) = estate_with_redis_user(2, "sf-lose").await;
    let name = format!("sfl_{}", &env.db["sf_test_".len()..]);
    let db_user = DbUser::create(&env, &name, &documented_grants(&env, &name, false)).await;
    let ctx = Context::connect(as_users(&env, &db_user, "sf-lose"))
        .await
        .unwrap();
    env.fx.order(1, "PENDING", &["A-1"], -600).await.unwrap();
    let daemon = InProcessDaemon::start(ctx).await;

    env.sql(&format!(
        "REVOKE UPDATE ON `{}`.`ticket_order` FROM '{name}'@'%'",
        env.db
    ))
    .await;
    acl(&env, "sf-lose", "-hgetall").await;
    assert_eq!(post(&daemon, "/jobs/expired_orders/run").await.0, 202);
    assert_eq!(post(&daemon, "/jobs/paid_seats/run").await.0, 202);
    let status = daemon
        .status_when("both refusals are named", |s| {
            let needs: Vec<&str> = s["permissions"]["denied"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d["need"].as_str())
                .collect();
            needs.contains(&"UPDATE on ticket_order") && needs.contains(&"+hgetall")
        })
        .await;
    let denied = status["permissions"]["denied"].as_array().unwrap();
    assert!(
        denied.iter().all(|d| d["count"].as_u64() >= Some(1)),
        "{status}"
    );
    let m = metrics(&daemon).await;
    assert!(
        sample(
            &m,
            r#"seatflow_reconcile_permission_denied_total{need="UPDATE on ticket_order",store="mysql"}"#
        ) >= 1.0,
        "{m}"
    );
    assert!(
        sample(
            &m,
            r#"seatflow_reconcile_permission_denied_total{need="+hgetall",store="redis"}"#
        ) >= 1.0,
        "{m}"
    );
    daemon.stop().await;
}

fn run_cli(args: &[&str], settings: &Settings) -> (i32, String) {
    let out = Command::new(binary())
        .args(args)
        .env("SEATFLOW__MYSQL__URL", settings.mysql.url.expose())
        .env("SEATFLOW__REDIS__URL", settings.redis.url.expose())
        .env("SEATFLOW__REDIS__KEY_PREFIX", &settings.redis.key_prefix)
        .env("SEATFLOW__HTTP__LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A grant and an ACL command missing at start: `once`, `check-config` and
/// `run` stop with exit 2 before doing anything, naming the GRANT and the
/// ACL rule to run; with them given, the same commands go on.
#[tokio::test]
async fn a_permission_missing_at_start_is_named_with_what_to_run() {
    let (_redis, env, access) = estate_with_redis_user(1, "sf-short").await;
    acl(&env, "sf-short", "-hset").await;
    let name = format!("sfs_{}", &env.db["sf_test_".len()..]);
    let grants: Vec<String> = documented_grants(&env, &name, false)
        .into_iter()
        .map(|g| g.replace("GRANT SELECT, UPDATE ON `", "GRANT SELECT ON `"))
        .collect();
    let db_user = DbUser::create(&env, &name, &grants).await;
    let settings = as_users(&env, &db_user, "sf-short");
    let runs_before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM reconcile_run")
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap();

    for args in [&["once"][..], &["check-config"], &["run"]] {
        let (code, err) = run_cli(args, &settings);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "GRANT UPDATE ON `{}`.`ticket_order` TO '{name}'@'%';",
                env.db
            )),
            "{args:?}: {err}"
        );
        assert!(
            err.contains(&format!(
                "GRANT UPDATE ON `{}`.`order_seat` TO '{name}'@'%';",
                env.db
            )),
            "{args:?}: {err}"
        );
        assert!(err.contains("the ACL lacks +hset"), "{args:?}: {err}");
        assert!(err.contains(&access.setuser("sf-short")), "{args:?}: {err}");
    }
    let runs_after: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM reconcile_run")
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap();
    assert_eq!(runs_after, runs_before, "no run started");

    // Given what they named, the same commands go on.
    env.sql(&format!(
        "GRANT UPDATE ON `{0}`.`ticket_order` TO '{name}'@'%'; GRANT UPDATE ON `{0}`.`order_seat` TO '{name}'@'%'",
        env.db
    ))
    .await;
    acl(&env, "sf-short", "+hset").await;
    let (code, err) = run_cli(&["once"], &settings);
    assert_eq!(code, 0, "{err}");
    let (code, err) = run_cli(&["check-config"], &settings);
    assert_eq!(code, 0, "{err}");
}

/// Settings as the binary takes them: `SEATFLOW__…` variables.
type Vars = Vec<(&'static str, String)>;

/// How `command` ends under `vars`: its exit code and stdout and stderr.
/// `run` that serves `/healthz` has started: it is stopped (SIGTERM), and
/// its code is the graceful stop's, 0.
async fn ends(command: &str, vars: &[(&str, String)]) -> (i32, String, String) {
    let port = servers::free_port();
    let mut c = Command::new(binary());
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SEATFLOW__")) {
        c.env_remove(k);
    }
    c.arg(command)
        .envs(vars.iter().map(|(k, v)| (*k, v)))
        .env("SEATFLOW__HTTP__LISTEN", format!("127.0.0.1:{port}"))
        .env("SEATFLOW__LOG__LEVEL", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let healthz = format!("http://127.0.0.1:{port}/healthz");
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if reqwest::get(&healthz)
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            let mut term = Command::new("kill");
            term.arg("-TERM").arg(child.id().to_string());
            assert!(term.status().unwrap().success());
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "hang guard: {command}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = child.wait_with_output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(out.stdout),
        text(out.stderr),
    )
}

/// Rule 19: `check-config` and `run` share the start's check, so over
/// configurations of every kind `check-config` exits 2 exactly when `run`
/// does: the binlog source without `REPLICATION SLAVE`, a replica whose
/// user may not ask its lag and a refused login are exit 2 with what to
/// give or fix; what
/// it could not check (MySQL down, a replica out of reach, a source off)
/// it says it did not check, and that is no error for it, while `run`
/// cannot start without MySQL (3) and reads the primary without the replica.
/// A schema deviation that holds repairs back is said with its fix, exit 0:
/// `run` starts and holds the jobs it touches.
#[tokio::test]
async fn check_config_exits_2_exactly_when_run_does() {
    let mysql = servers::mariadb_with_binlog();
    let (redis, env, _) = {
        let redis = servers::redis();
        let env = estate_on(&servers::root_url(&mysql), Some(&redis), 1, |_| {}).await;
        let access = access::redis_access(&env.ctx.settings, true);
        redis_user(&env, "sf-same", &access).await;
        (redis, env, access)
    };
    let suffix = &env.db["sf_test_".len()..];
    let (full, no_slave, reader) = (
        format!("sfe_{suffix}"),
        format!("sfn_{suffix}"),
        format!("sfr_{suffix}"),
    );
    let full = DbUser::create(&env, &full, &documented_grants(&env, &full, true)).await;
    let mut short = documented_grants(&env, &no_slave, false);
    short.push(format!(
        "GRANT REPLICATION CLIENT ON *.* TO '{no_slave}'@'%'"
    ));
    let no_slave = DbUser::create(&env, &no_slave, &short).await;
    let select = format!("GRANT SELECT ON `{}`.* TO '{reader}'@'%'", env.db);
    let reader = DbUser::create(&env, &reader, &[select]).await;
    let closed = format!("mysql://root@127.0.0.1:{}/none", servers::free_port());
    let redis_url = with_user(&format!("redis://127.0.0.1:{}", redis.port()), "sf-same");
    let nobody = with_user(&format!("redis://127.0.0.1:{}", redis.port()), "sf-nobody");
    let base = |db_user: &DbUser| {
        vec![
            ("SEATFLOW__MYSQL__URL", db_user.url(&env)),
            ("SEATFLOW__REDIS__URL", redis_url.clone()),
            ("SEATFLOW__REDIS__KEY_PREFIX", env.prefix.clone()),
        ]
    };
    let with = |mut vars: Vars, key: &'static str, value: &str| {
        vars.push((key, value.to_string()));
        vars
    };
    let binlog = "SEATFLOW__CHANGES__MYSQL_BINLOG";
    let replica = "SEATFLOW__MYSQL__REPLICA_URL";
    let no_slave_grant = format!("GRANT REPLICATION SLAVE ON *.* TO '{}'@'%'", no_slave.name);
    let monitor_grant = format!("GRANT SLAVE MONITOR ON *.* TO '{}'@'%';", reader.name);
    let cases: Vec<(&str, Vars, i32, &str)> = vec![
        // (what, settings, run's exit, what check-config prints)
        (
            "everything given, binlog on",
            with(base(&full), binlog, "true"),
            0,
            "# permissions: MySQL binlog: every one the reconciler needs",
        ),
        (
            "binlog on without REPLICATION SLAVE",
            with(base(&no_slave), binlog, "true"),
            2,
            &no_slave_grant,
        ),
        (
            "a replica whose user may not ask its lag",
            with(base(&full), replica, &reader.url(&env)),
            2,
            &monitor_grant,
        ),
        (
            "a replica out of reach",
            with(base(&full), replica, &closed),
            0,
            "# permissions: MySQL replica: not checked (cannot reach it",
        ),
        (
            "a Redis login refused",
            with(base(&full), "SEATFLOW__REDIS__URL", &nobody),
            2,
            "configuration key `redis.url`",
        ),
        (
            "MySQL out of reach",
            with(base(&full), "SEATFLOW__MYSQL__URL", &closed),
            3,
            "# permissions: MySQL: not checked (unreachable)",
        ),
    ];
    for (what, vars, run_code, said) in cases {
        let (run, _, run_err) = ends("run", &vars).await;
        assert_eq!(run, run_code, "{what}: run: {run_err}");
        let (check, out, err) = ends("check-config", &vars).await;
        assert_eq!(
            check == 2,
            run == 2,
            "{what}: check-config {check}:\n{out}\n{err}"
        );
        assert!(
            out.contains(said) || err.contains(said),
            "{what}: {out}\n{err}"
        );
        // Nothing said to be allowed that was not asked.
        assert_eq!(
            out.contains("MySQL grants: every one"),
            run != 3,
            "{what}: {out}"
        );
    }
    // A schema deviation that holds repairs back: `run` starts and holds
    // the jobs it touches (rule 17), so `check-config` names it with its
    // fix and which jobs it holds, and exits 0 as `run` starts.
    env.sql("ALTER TABLE order_seat MODIFY showtime_id BIGINT NULL")
        .await;
    let order = env.fx.order(1, "PAID", &["A-1"], 900).await.unwrap();
    env.sql(&format!(
        "UPDATE order_seat SET showtime_id = NULL WHERE order_id = {order}"
    ))
    .await;
    let vars = base(&full);
    let (run, _, run_err) = ends("run", &vars).await;
    assert_eq!(run, 0, "a holding deviation: run: {run_err}");
    let (check, out, err) = ends("check-config", &vars).await;
    assert_eq!(check, 0, "a holding deviation: check-config:\n{out}\n{err}");
    assert!(
        out.contains("ALTER TABLE order_seat MODIFY showtime_id BIGINT NOT NULL")
            && out.contains("holds"),
        "{out}"
    );
    assert!(err.contains("order_seat.showtime_id (nullable)"), "{err}");
    drop((env, mysql, redis));
}

/// `migrate` with exactly the grants deploy/README.md gives it, on a fresh
/// database (seatflow's tables, none of the reconciler's): it makes them,
/// again idempotently, and `check-config` then finds every permission. A
/// user without them is exit 2 with the block to run; a `SELECT` refused on
/// a seatflow table is named as a refusal, never as a missing table.
#[tokio::test]
async fn migrate_works_with_exactly_the_documented_grants_on_a_fresh_database() {
    let env = TestEnv::new().await;
    env.sql("DROP TABLE reconcile_fix, reconcile_run, _sqlx_migrations")
        .await;
    let suffix = &env.db["sf_test_".len()..];
    let (name, bare, blind) = (
        format!("sfm_{suffix}"),
        format!("sfb_{suffix}"),
        format!("sfh_{suffix}"),
    );
    let migrating = |user: &str| {
        mysql_grants::migrate_statements(&env.db, &format!("'{user}'@'%'"), true, false)
    };
    let user = DbUser::create(&env, &name, &migrating(&name)).await;
    let vars = |u: &DbUser| {
        vec![
            ("SEATFLOW__MYSQL__URL", u.url(&env)),
            (
                "SEATFLOW__REDIS__URL",
                env.ctx.settings.redis.url.expose().to_string(),
            ),
            ("SEATFLOW__REDIS__KEY_PREFIX", env.prefix.clone()),
        ]
    };
    for round in ["first", "again"] {
        let (code, out, err) = ends("migrate", &vars(&user)).await;
        assert_eq!(code, 0, "{round}: {out}\n{err}");
        assert!(out.contains("# schema: as the contract has it"), "{out}");
    }
    let tables: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
         AND TABLE_NAME IN ('reconcile_run', 'reconcile_fix', '_sqlx_migrations')",
    )
    .fetch_one(env.ctx.mysql.pool())
    .await
    .unwrap();
    assert_eq!(tables, 3);
    let (code, out, err) = ends("check-config", &vars(&user)).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("# permissions: MySQL grants: every one"),
        "{out}"
    );

    // Only seatflow's reads: exit 2, every GRANT migrate needs.
    let reads = |user: &str| -> Vec<String> {
        migrating(user)
            .into_iter()
            .filter(|g| !g.contains("reconcile_") && !g.contains("_sqlx_"))
            .collect()
    };
    let bare = DbUser::create(&env, &bare, &reads(&bare)).await;
    let (code, _, err) = ends("migrate", &vars(&bare)).await;
    assert_eq!(code, 2, "{err}");
    for grant in migrating(&bare.name) {
        assert!(err.contains(&grant), "{grant}: {err}");
    }

    // All of migrate's grants but SELECT on hall_seat: refused, not missing.
    let sees_no_templates: Vec<String> = migrating(&blind)
        .into_iter()
        .filter(|g| !g.contains("`hall_seat`"))
        .collect();
    let blind = DbUser::create(&env, &blind, &sees_no_templates).await;
    for command in ["migrate", "check-config"] {
        let (code, out, err) = ends(command, &vars(&blind)).await;
        assert_eq!(code, 2, "{command}: {out}\n{err}");
        assert!(err.contains("SELECT on hall_seat"), "{command}: {err}");
        assert!(
            !out.contains("missing_table") && !err.contains("missing_table"),
            "{command}: {out}\n{err}"
        );
    }
}
