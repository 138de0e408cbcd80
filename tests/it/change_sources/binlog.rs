//! The MySQL binlog source (`store::mysql::binlog`) on a private MariaDB with
//! the row binlog on: a committed change to the contract's tables names its
//! showtimes, with the position after it; other databases, other tables and
//! rolled-back changes name none; what the server does not allow is one
//! configuration error naming each statement to run.

use std::time::Duration;

use seatflow_reconciler::error::Error;
use seatflow_reconciler::store::mysql::MysqlTls;
use seatflow_reconciler::store::mysql::binlog::{
    BinlogOptions, BinlogSource, Checkpoint, Committed, ServerIdentity, StartedFrom,
};
use seatflow_test_support::TestEnv;
use seatflow_test_support::servers::{mariadb_with_binlog, purge_to, root_url};

const WAIT: Duration = Duration::from_secs(30);

fn options(server_id: u32) -> BinlogOptions {
    BinlogOptions {
        server_id,
        ..BinlogOptions::default()
    }
}

async fn start(url: &str, server_id: u32) -> Result<BinlogSource, Error> {
    BinlogSource::start(url, &MysqlTls::default(), &options(server_id), None).await
}

async fn next(source: &mut BinlogSource) -> Committed {
    tokio::time::timeout(WAIT, source.next())
        .await
        .expect("a committed change within 30 s")
        .expect("the binlog stream")
}

#[tokio::test]
async fn committed_changes_to_the_contract_tables_name_their_showtimes() {
    let server = mariadb_with_binlog();
    let env = TestEnv::on(&root_url(&server), |_| {}).await;
    let pool = env.ctx.mysql.pool();
    env.fx.hall(1, 1, 4).await.unwrap();
    for id in [10, 20, 30] {
        env.fx.showtime(id, 1, 60, "ON_SALE").await.unwrap();
    }
    let order = env.fx.order(10, "PENDING", &["A-1"], 900).await.unwrap();
    let other = env.fx.order(20, "PENDING", &["A-2"], 900).await.unwrap();

    let mut source = start(&env.db_url, 4242).await.unwrap();
    let start_at = source.checkpoint();
    // The private server: server id 1, no uuid (MariaDB has none).
    assert_eq!(
        start_at.server,
        ServerIdentity {
            server_id: 1,
            server_uuid: None
        }
    );
    assert_eq!(source.started_from(), &StartedFrom::Current);
    let start_at = start_at.position;

    // The contract's pay step, committed (its Redis step not taken).
    sqlx::query(
        "UPDATE ticket_order SET status = 'PAID', paid_at = UTC_TIMESTAMP(3) \
         WHERE id = ? AND status = 'PENDING'",
    )
    .bind(order)
    .execute(pool)
    .await
    .unwrap();
    let paid = next(&mut source).await;
    assert_eq!(paid.showtimes, vec![10]);
    assert_eq!(paid.position.file, start_at.file);
    assert!(
        paid.position.offset > start_at.offset,
        "{paid:?} {start_at}"
    );
    assert_eq!(source.position(), &paid.position);

    // A seat row inserted: its showtime.
    sqlx::query(
        "INSERT INTO order_seat (order_id, showtime_id, seat_no, active) VALUES (?, 20, 'A-3', 1)",
    )
    .bind(other)
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(next(&mut source).await.showtimes, vec![20]);

    // Another database's `ticket_order`, another table of ours, a change
    // rolled back, a showtime closed (nothing of it is repaired): none
    // named. The next named is an ON_SALE showtime moved after.
    let elsewhere = format!("{}_elsewhere", env.db);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE `{elsewhere}`; \
         CREATE TABLE `{elsewhere}`.ticket_order LIKE ticket_order; \
         INSERT INTO `{elsewhere}`.ticket_order \
           (order_no, user_id, showtime_id, status, expires_at, created_at) \
           VALUES ('X-1', 1, 99, 'PAID', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3)); \
         UPDATE `{elsewhere}`.ticket_order SET status = 'REFUNDED'; \
         UPDATE hall SET name = 'Hall one' WHERE id = 1"
    )))
    .execute(pool)
    .await
    .unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("UPDATE ticket_order SET showtime_id = 98 WHERE id = ?")
        .bind(other)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    for change in [
        "UPDATE showtime SET status = 'CLOSED' WHERE id = 30",
        "UPDATE showtime SET starts_at = starts_at + INTERVAL 1 MINUTE WHERE id = 20",
    ] {
        sqlx::query(change).execute(pool).await.unwrap();
    }
    assert_eq!(next(&mut source).await.showtimes, vec![20]);

    // One transaction, the contract's cancel and a seat of another
    // showtime: each showtime once, when it commits.
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(
        "UPDATE ticket_order SET status = 'CANCELLED', cancelled_at = UTC_TIMESTAMP(3) WHERE id = ?",
    )
    .bind(order)
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query("UPDATE order_seat SET active = NULL WHERE order_id = ?")
        .bind(order)
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("DELETE FROM order_seat WHERE order_id = ? AND seat_no = 'A-3'")
        .bind(other)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let cancel = next(&mut source).await;
    assert_eq!(cancel.showtimes, vec![10, 20]);

    // A source started again from a position it gave reads on from there:
    // the payment first. (Its server id is its own: a second dump with
    // the same id would end the first.)
    let mut again = BinlogSource::start(
        &env.db_url,
        &MysqlTls::default(),
        &options(4243),
        Some(Checkpoint {
            server: source.server().clone(),
            position: start_at.clone(),
        }),
    )
    .await
    .unwrap();
    assert_eq!(again.started_from(), &StartedFrom::Given);
    assert!(!again.proven(), "nothing read from the given position yet");
    assert_eq!(next(&mut again).await, paid);
    assert!(again.proven());
    let _ = next(&mut again).await;
    assert_eq!(next(&mut again).await.showtimes, vec![20]);
    assert_eq!(next(&mut again).await, cancel);

    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE `{elsewhere}`")))
        .execute(pool)
        .await
        .unwrap();
}

/// A user of the private server, password `pw`, from 127.0.0.1, granted
/// `grants` (`{user}` stands for the grantee); the database's URL as them.
async fn user(env: &TestEnv, name: &str, grants: &[&str]) -> String {
    let pool = env.ctx.mysql.pool();
    let grantee = format!("'{name}'@'127.0.0.1'");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE USER {grantee} IDENTIFIED BY 'pw'; GRANT SELECT ON `{}`.* TO {grantee}",
        env.db
    )))
    .execute(pool)
    .await
    .unwrap();
    for grant in grants {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "GRANT {grant} ON *.* TO {grantee}"
        )))
        .execute(pool)
        .await
        .unwrap();
    }
    let mut url = url::Url::parse(&env.db_url).unwrap();
    url.set_username(name).unwrap();
    url.set_password(Some("pw")).unwrap();
    url.to_string()
}

#[tokio::test]
async fn what_the_server_does_not_allow_is_named_as_the_statement_to_run() {
    let server = mariadb_with_binlog();
    let env = TestEnv::on(&root_url(&server), |_| {}).await;

    // May read the position, not the binlog.
    let url = user(&env, "sf_no_slave", &["REPLICATION CLIENT"]).await;
    let err = start(&url, 4250).await.err().expect("refused");
    let text = err.to_string();
    assert!(matches!(err, Error::BinlogSetup(_)), "{err:?}");
    assert!(
        text.contains("GRANT REPLICATION SLAVE ON *.* TO 'sf_no_slave'@'127.0.0.1'"),
        "{text}"
    );
    assert!(!text.contains("REPLICATION CLIENT"), "{text}");

    // Neither: both named at once.
    let url = user(&env, "sf_neither", &[]).await;
    let text = start(&url, 4251).await.err().expect("refused").to_string();
    assert!(
        text.contains("GRANT REPLICATION SLAVE ON *.* TO 'sf_neither'@'127.0.0.1'"),
        "{text}"
    );
    assert!(
        text.contains("GRANT REPLICATION CLIENT ON *.* TO 'sf_neither'@'127.0.0.1'"),
        "{text}"
    );

    // Both: it starts.
    let url = user(
        &env,
        "sf_both",
        &["REPLICATION CLIENT", "REPLICATION SLAVE"],
    )
    .await;
    start(&url, 4252)
        .await
        .expect("the least privilege it needs");

    // A binlog that is not row-based: named with the SET that makes it so.
    let pool = env.ctx.mysql.pool();
    sqlx::query("SET GLOBAL binlog_format = 'MIXED'")
        .execute(pool)
        .await
        .unwrap();
    let text = start(&env.db_url, 4253)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(text.contains("SET GLOBAL binlog_format = 'ROW'"), "{text}");
    sqlx::query("SET GLOBAL binlog_format = 'ROW'")
        .execute(pool)
        .await
        .unwrap();
}

/// The id of the server's binlog dump thread (ours: the only replica).
async fn dump_thread(pool: &sqlx::MySqlPool) -> Option<i64> {
    sqlx::query_scalar(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Binlog Dump'",
    )
    .fetch_optional(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_killed_replication_connection_and_a_purged_position_are_gaps() {
    let server = mariadb_with_binlog();
    let env = TestEnv::on(&root_url(&server), |_| {}).await;
    let pool = env.ctx.mysql.pool();
    env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(10, 1, 60, "ON_SALE").await.unwrap();

    // The server ends our dump: the stream says so, and it may be tried again.
    let mut source = start(&env.db_url, 4260).await.unwrap();
    let before = source.position().clone();
    let mut thread = None;
    for _ in 0..100 {
        thread = dump_thread(pool).await;
        if thread.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let thread = thread.expect("our dump thread in the process list");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL {thread}")))
        .execute(pool)
        .await
        .unwrap();
    let err = tokio::time::timeout(WAIT, source.next())
        .await
        .expect("the end within 30 s")
        .expect_err("a killed dump ends the stream");
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(source.position(), &before);

    // Started again from a position whose file is purged: a gap, named.
    sqlx::raw_sql("FLUSH BINARY LOGS")
        .execute(pool)
        .await
        .unwrap();
    let newest: String = {
        use sqlx::Row as _;
        sqlx::query("SHOW MASTER STATUS")
            .fetch_one(pool)
            .await
            .unwrap()
            .try_get(0)
            .unwrap()
    };
    purge_to(pool, &before.file, &newest).await;
    let mut stale = BinlogSource::start(
        &env.db_url,
        &MysqlTls::default(),
        &options(4261),
        Some(Checkpoint {
            server: source.server().clone(),
            position: before.clone(),
        }),
    )
    .await
    .unwrap();
    let err = tokio::time::timeout(WAIT, stale.next())
        .await
        .expect("an answer within 30 s")
        .expect_err("a purged position cannot be read");
    assert!(matches!(err, Error::BinlogGap(_)), "{err:?}");
    assert!(err.to_string().contains(&before.to_string()), "{err}");
    assert!(!stale.proven());
}

/// A position means nothing on another server: a checkpoint naming another
/// server id (or uuid) is not read; the source starts from the server's
/// current position and says whose the checkpoint was.
#[tokio::test]
async fn a_position_of_another_server_is_not_read() {
    let server = mariadb_with_binlog();
    let env = TestEnv::on(&root_url(&server), |_| {}).await;
    env.fx.hall(1, 1, 2).await.unwrap();
    let source = start(&env.db_url, 4280).await.unwrap();
    let here = source.checkpoint();
    drop(source);
    // A commit after `here`: a source that read from `here` would see it.
    env.fx.showtime(10, 1, 60, "ON_SALE").await.unwrap();
    let current = start(&env.db_url, 4281).await.unwrap().checkpoint();
    assert!(current.position > here.position);
    for other in [
        ServerIdentity {
            server_id: 2,
            ..here.server.clone()
        },
        ServerIdentity {
            server_uuid: Some("3e11fa47-71ca-11e1-9e33-c80aa9429562".into()),
            ..here.server.clone()
        },
    ] {
        let given = Checkpoint {
            server: other.clone(),
            position: here.position.clone(),
        };
        let source = BinlogSource::start(
            &env.db_url,
            &MysqlTls::default(),
            &options(4282),
            Some(given),
        )
        .await
        .unwrap();
        assert_eq!(source.started_from(), &StartedFrom::OtherServer(other));
        assert_eq!(source.position(), &current.position);
        assert!(source.proven());
    }
}

#[tokio::test]
async fn the_replication_connection_speaks_tls_as_configured_and_names_certificate_errors() {
    use seatflow_reconciler::error::TlsProblem;
    use seatflow_reconciler::store::mysql::MySqlSslMode;
    use seatflow_test_support::tls::{Pki, tls_mariadb};

    let _ = rustls::crypto::ring::default_provider().install_default();
    // A TLS-only MariaDB (require_secure_transport) without a binlog: a
    // source that gets as far as reading its settings spoke TLS.
    let pki = Pki::new();
    let server = tls_mariadb(&pki);
    let url = format!("{}/mysql", root_url(&server));
    let tls = |ca: &std::path::Path, mode| MysqlTls {
        mode: Some(mode),
        ca_file: Some(ca.to_owned()),
        client: None,
    };
    let start = |tls: MysqlTls| {
        let url = url.clone();
        async move { BinlogSource::start(&url, &tls, &options(4270), None).await }
    };

    // Verified against the private CA, the host name checked.
    let err = start(tls(&pki.ca, MySqlSslMode::VerifyIdentity))
        .await
        .err()
        .expect("no binlog on this server");
    assert!(matches!(err, Error::BinlogSetup(_)), "{err:?}");
    assert!(err.to_string().contains("the binlog is off"), "{err}");

    // A CA that did not sign the server's certificate.
    let err = start(tls(&pki.other_ca, MySqlSslMode::VerifyIdentity))
        .await
        .err()
        .expect("refused");
    assert_eq!(
        err.tls_problem(),
        Some(TlsProblem::UnknownIssuer),
        "{err:?}"
    );

    // Plain text to a server that takes TLS only: MariaDB refuses the login
    // (1045), which says to look at the TLS mode, as for the pool.
    let err = start(tls(&pki.ca, MySqlSslMode::Disabled))
        .await
        .err()
        .expect("refused");
    let why = err.login_refused().unwrap_or_default();
    assert!(why.contains("TLS connections only"), "{err:?}");
}

/// With `changes.mysql_binlog` on, a daemon whose MySQL user may not read
/// the binlog refuses to start: exit 2, a configuration error naming the
/// key and the GRANT to run, before it serves.
#[tokio::test]
async fn the_daemon_refuses_to_start_when_it_may_not_read_the_binlog() {
    let server = mariadb_with_binlog();
    let env = TestEnv::on(&root_url(&server), |_| {}).await;
    let url = user(&env, "sf_daemon", &["REPLICATION CLIENT"]).await;
    // Every grant of the runs (deploy/README.md), so that the binlog's is
    // the one missing.
    for grant in seatflow_reconciler::store::mysql::grants::grant_statements(
        &env.db,
        "'sf_daemon'@'127.0.0.1'",
        true,
        false,
    ) {
        env.sql(&grant).await;
    }
    let mut daemon = std::process::Command::new(env!("CARGO_BIN_EXE_seatflow-reconciler"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SEATFLOW__")) {
        daemon.env_remove(k);
    }
    let mut child = daemon
        .arg("run")
        .env("RUST_LOG", "warn")
        .env("SEATFLOW__MYSQL__URL", &url)
        .env("SEATFLOW__REDIS__URL", seatflow_test_support::redis_url())
        .env("SEATFLOW__REDIS__KEY_PREFIX", &env.prefix)
        .env("SEATFLOW__HTTP__LISTEN", "127.0.0.1:0")
        .env("SEATFLOW__CHANGES__MYSQL_BINLOG", "true")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the daemon started although it may not read the binlog");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("changes.mysql_binlog"), "{err}");
    assert!(
        err.contains("GRANT REPLICATION SLAVE ON *.* TO 'sf_daemon'@'127.0.0.1'"),
        "{err}"
    );
}
