//! The MySQL binlog position kept in Redis per shard
//! (`{prefix}reconcile:binlog:{<shard>}`): the daemon's binlog reader saves
//! where it is, with the server it belongs to; a daemon that becomes the
//! shard's active one resumes from there, so commits made while nobody read
//! are still checked. A position the server cannot send from (purged) or of
//! another server is a gap (`binlog_position_lost`), and the reader reads on
//! from the server's current position; a key in the wrong shape is reported
//! and replaced (rule 13).

use std::time::Duration;

use seatflow_reconciler::model::Shard;
use seatflow_reconciler::store::mysql::binlog::{BinlogPosition, Checkpoint, ServerIdentity};
use seatflow_reconciler::store::redis::{PositionSave, SavedPosition, parse_saved, saved_value};
use seatflow_test_support::TestEnv;
use seatflow_test_support::daemon::{
    InProcessDaemon, metric_reaches_at_least, metrics, pass_runs, sample,
};
use seatflow_test_support::estate::daemon_on_binlog;
use seatflow_test_support::own_keys::key_type;
use seatflow_test_support::servers::{self, binlog_dumps_become, purge_to, wait_until};

const WAIT: Duration = Duration::from_secs(60);
const BINLOG_CHECKS: &str = r#"seatflow_reconcile_change_checks_total{source="binlog"}"#;
const POSITION_LOST: &str =
    r#"seatflow_reconcile_change_gaps_total{reason="binlog_position_lost"}"#;

fn key(env: &TestEnv) -> String {
    env.ctx.redis.keys.binlog_position(env.ctx.settings.shard())
}

/// The saved position, if the key holds one.
async fn saved(env: &TestEnv) -> Option<Checkpoint> {
    let raw: Option<String> = env.redis(redis::cmd("GET").arg(key(env))).await;
    raw.as_deref().and_then(parse_saved)
}

/// The server's current binlog position.
async fn server_position(env: &TestEnv) -> BinlogPosition {
    use sqlx::Row as _;
    let row = sqlx::query("SHOW MASTER STATUS")
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap();
    BinlogPosition {
        file: row.try_get(0).unwrap(),
        offset: row.try_get(1).unwrap(),
    }
}

/// Waits until the saved position is the server's current one.
async fn saved_is_current(env: &TestEnv) -> Checkpoint {
    wait_until("the saved position is the server's", WAIT, || async {
        saved(env).await.map(|c| c.position) == Some(server_position(env).await)
    })
    .await;
    saved(env).await.unwrap()
}

/// A daemon started on `env` once no other runs, after its first pass (it
/// comes by itself, as after any start).
async fn restarted(env: &TestEnv) -> InProcessDaemon {
    let daemon = InProcessDaemon::start(env.ctx.clone()).await;
    daemon
        .status_when("the first pass ran", |s| {
            s["pass"]["shards"]["0"]["last_fire"] == "ran"
        })
        .await;
    daemon
}

/// The gap's pass: one more than the start's.
async fn a_pass_covers_the_gap(daemon: &InProcessDaemon) {
    wait_until("a pass after the gap", WAIT, || async {
        pass_runs(&metrics(daemon).await) >= 2.0
    })
    .await;
}

/// The reader reads from the server's current position: a commit made now
/// gets its showtime checked.
async fn reads_on(env: &TestEnv, daemon: &InProcessDaemon, order: i64) {
    binlog_dumps_become(env, 1).await;
    let before = sample(&metrics(daemon).await, BINLOG_CHECKS);
    assert!(env.fx.pay(order).await.unwrap());
    metric_reaches_at_least(daemon, BINLOG_CHECKS, before + 1.0).await;
}

/// Read, taken, moved on by its reader, left to a reader that started
/// later; a key of the wrong type or a value that is no saved position is
/// told apart, and replaced by the next save.
#[tokio::test]
async fn the_saved_position_is_taken_moved_on_and_left_to_a_later_reader() {
    let env = TestEnv::new().await;
    let redis = &env.ctx.redis;
    let shard = Shard::ALL;
    let at = |offset| Checkpoint {
        server: ServerIdentity {
            server_id: 1,
            server_uuid: None,
        },
        position: BinlogPosition {
            file: "binlog.000001".into(),
            offset,
        },
    };
    let save = |last: Option<String>, value: String| async move {
        redis
            .save_binlog_position(shard, last.as_deref(), &value)
            .await
            .unwrap()
    };
    assert_eq!(
        redis.read_binlog_position(shard).await.unwrap(),
        SavedPosition::Absent
    );
    let (a1, a2) = (saved_value(&at(100), "a 1"), saved_value(&at(200), "a 1"));
    assert_eq!(save(None, a1.clone()).await, PositionSave::Saved);
    assert_eq!(save(Some(a1), a2.clone()).await, PositionSave::Saved);
    assert_eq!(
        redis.read_binlog_position(shard).await.unwrap(),
        SavedPosition::Found {
            checkpoint: at(200),
            raw: a2.clone()
        }
    );
    // Another reader starts: it takes the key; the first one's next save
    // leaves it alone.
    let b1 = saved_value(&at(200), "b 2");
    assert_eq!(save(None, b1.clone()).await, PositionSave::Saved);
    assert_eq!(
        save(Some(a2), saved_value(&at(300), "a 1")).await,
        PositionSave::Raced
    );
    assert_eq!(saved(&env).await, Some(at(200)));

    let _: () = env.redis(redis::cmd("DEL").arg(key(&env))).await;
    let _: () = env
        .redis(redis::cmd("HSET").arg(key(&env)).arg("a").arg("b"))
        .await;
    assert_eq!(
        redis.read_binlog_position(shard).await.unwrap(),
        SavedPosition::WrongType
    );
    let b2 = saved_value(&at(400), "b 2");
    assert_eq!(save(Some(b1), b2.clone()).await, PositionSave::Replaced);
    assert_eq!(saved(&env).await, Some(at(400)));

    let _: () = env
        .redis(redis::cmd("SET").arg(key(&env)).arg("binlog.000001:400"))
        .await;
    assert_eq!(
        redis.read_binlog_position(shard).await.unwrap(),
        SavedPosition::Unreadable("binlog.000001:400".into())
    );
    assert_eq!(save(None, b2.clone()).await, PositionSave::Saved);
    assert_eq!(saved(&env).await, Some(at(400)));

    // Redis loses the key (a restart without persistence, a flush, an
    // eviction): the reader that saved it last saves it again; only a
    // value of another reader's makes one yield.
    let _: () = env.redis(redis::cmd("DEL").arg(key(&env))).await;
    let b3 = saved_value(&at(500), "b 2");
    assert_eq!(save(Some(b2), b3.clone()).await, PositionSave::Restored);
    assert_eq!(saved(&env).await, Some(at(500)));
    let b4 = saved_value(&at(600), "b 2");
    assert_eq!(save(Some(b3), b4).await, PositionSave::Saved);
    assert_eq!(saved(&env).await, Some(at(600)));
}

/// After commits, the key holds the server's current position (and its
/// identity: MariaDB's server id, no uuid) within seconds; `/status` shows
/// where the reader is and that it started from the current position (no
/// position was saved before).
#[tokio::test]
async fn the_daemon_saves_its_binlog_position() {
    let server = servers::mariadb_with_binlog();
    let (env, daemon, [paid, _]) = daemon_on_binlog(&server, Duration::ZERO).await;
    assert!(env.fx.pay(paid).await.unwrap());
    metric_reaches_at_least(&daemon, BINLOG_CHECKS, 1.0).await;
    let saved = saved_is_current(&env).await;
    assert_eq!(
        saved.server,
        ServerIdentity {
            server_id: 1,
            server_uuid: None
        }
    );
    let position = saved.position.to_string();
    let status = daemon
        .status_when("/status shows the saved position", |s| {
            s["changes"]["binlog"]["position"] == position.as_str()
        })
        .await;
    assert_eq!(status["changes"]["binlog"]["started_from"], "current");
    daemon.stop().await;
}

/// Redis loses the saved position while the reader streams (a restart
/// without persistence, a flush, an eviction): the reader that holds the
/// stream saves it again when the stream moves (an absent key is nobody's
/// save, not another reader's), so a restarted daemon resumes from it and
/// checks a commit made while no daemon ran, with no gap.
/// A restarted daemon checks a commit it did not see via the binlog,
/// having started from the saved position, with no position lost.
async fn resumes_from_the_saved_position(env: &TestEnv) {
    let daemon = restarted(env).await;
    let m = metric_reaches_at_least(&daemon, BINLOG_CHECKS, 1.0).await;
    assert_eq!(sample(&m, POSITION_LOST), 0.0);
    let status = daemon
        .status_when("the reader reads", |s| !s["changes"]["binlog"].is_null())
        .await;
    assert_eq!(status["changes"]["binlog"]["started_from"], "saved");
    daemon.stop().await;
}

#[tokio::test]
async fn a_position_redis_lost_is_saved_again_by_the_reader_that_holds_the_stream() {
    let server = servers::mariadb_with_binlog();
    let (env, daemon, [paid, cancelled]) = daemon_on_binlog(&server, Duration::ZERO).await;
    saved_is_current(&env).await;
    let _: () = env.redis(redis::cmd("DEL").arg(key(&env))).await;
    assert!(env.fx.pay(paid).await.unwrap());
    saved_is_current(&env).await;
    daemon.stop().await;

    assert!(env.fx.cancel(cancelled).await.unwrap());
    resumes_from_the_saved_position(&env).await;
}

/// A payment committed while no daemon runs is read by the next one, which
/// resumes from the saved position: its showtime is checked via the binlog
/// though nothing was committed after the new daemon started.
#[tokio::test]
async fn a_restarted_daemon_resumes_from_the_saved_position() {
    let server = servers::mariadb_with_binlog();
    let (env, daemon, [paid, _]) = daemon_on_binlog(&server, Duration::ZERO).await;
    saved_is_current(&env).await;
    daemon.stop().await;

    assert!(env.fx.pay(paid).await.unwrap());
    resumes_from_the_saved_position(&env).await;
}

/// The saved position's file was purged while no daemon ran: the next
/// daemon counts a gap, reads on from the current position (a later commit
/// is checked) and saves that one.
#[tokio::test]
async fn a_purged_saved_position_is_a_gap_and_the_reader_reads_on_from_the_current_one() {
    let server = servers::mariadb_with_binlog();
    let (env, daemon, [paid, _]) = daemon_on_binlog(&server, Duration::ZERO).await;
    let before = saved_is_current(&env).await;
    daemon.stop().await;

    let pool = env.ctx.mysql.pool();
    sqlx::raw_sql("FLUSH BINARY LOGS")
        .execute(pool)
        .await
        .unwrap();
    let newest = server_position(&env).await.file;
    purge_to(pool, &before.position.file, &newest).await;

    let daemon = restarted(&env).await;
    metric_reaches_at_least(&daemon, POSITION_LOST, 1.0).await;
    a_pass_covers_the_gap(&daemon).await;
    reads_on(&env, &daemon, paid).await;
    wait_until("the current position is saved", WAIT, || async {
        saved(&env).await.is_some_and(|c| c.position.file == newest)
    })
    .await;
    daemon.stop().await;
}

/// A saved position of another server (another server id: a failover, a
/// server rebuilt) is a gap; the reader reads on from the current position.
#[tokio::test]
async fn a_saved_position_of_another_server_is_a_gap_and_the_reader_reads_on() {
    let server = servers::mariadb_with_binlog();
    let (env, daemon, [paid, _]) = daemon_on_binlog(&server, Duration::ZERO).await;
    let before = saved_is_current(&env).await;
    daemon.stop().await;

    let elsewhere = Checkpoint {
        server: ServerIdentity {
            server_id: 2,
            server_uuid: None,
        },
        ..before
    };
    let _: () = env
        .redis(
            redis::cmd("SET")
                .arg(key(&env))
                .arg(saved_value(&elsewhere, "another 1")),
        )
        .await;
    let daemon = restarted(&env).await;
    metric_reaches_at_least(&daemon, POSITION_LOST, 1.0).await;
    a_pass_covers_the_gap(&daemon).await;
    reads_on(&env, &daemon, paid).await;
    wait_until("this server's position is saved", WAIT, || async {
        saved(&env).await.is_some_and(|c| c.server.server_id == 1)
    })
    .await;
    daemon.stop().await;
}

/// Rule 13: a position key of another type, or a string that is no saved
/// position, is counted (`invalid_data`), treated as absent (no gap: the
/// start's pass covers what came before) and replaced; the reader runs.
#[tokio::test]
async fn a_position_key_in_the_wrong_shape_is_reported_replaced_and_the_reader_runs() {
    let server = servers::mariadb_with_binlog();
    let (env, daemon, [paid, other]) = daemon_on_binlog(&server, Duration::ZERO).await;
    saved_is_current(&env).await;
    daemon.stop().await;
    let invalid = r#"seatflow_reconcile_errors_total{kind="paid_seats",stage="invalid_data"}"#;

    for (shape, order) in [("hash", paid), ("string", other)] {
        let _: () = env.redis(redis::cmd("DEL").arg(key(&env))).await;
        let corrupt = match shape {
            "hash" => redis::cmd("HSET").arg(key(&env)).arg("a").arg("b").clone(),
            _ => redis::cmd("SET").arg(key(&env)).arg("garbage").clone(),
        };
        let _: () = env.redis(&corrupt).await;
        let daemon = restarted(&env).await;
        let m = metric_reaches_at_least(&daemon, invalid, 1.0).await;
        assert_eq!(sample(&m, POSITION_LOST), 0.0, "{shape}");
        wait_until(format!("the {shape} replaced"), WAIT, || async {
            key_type(&env, &key(&env)).await == "string" && saved(&env).await.is_some()
        })
        .await;
        reads_on(&env, &daemon, order).await;
        daemon.stop().await;
    }
}
