//! The MySQL binlog position kept in Redis per shard
//! (`{prefix}reconcile:binlog:{<shard>}`), with the server it belongs to.

use seatflow_reconciler::model::Shard;
use seatflow_reconciler::store::mysql::binlog::{BinlogPosition, Checkpoint, ServerIdentity};
use seatflow_reconciler::store::redis::{PositionSave, SavedPosition, parse_saved, saved_value};
use seatflow_test_support::TestEnv;

fn key(env: &TestEnv) -> String {
    env.ctx.redis.keys.binlog_position(env.ctx.settings.shard())
}

/// The saved position, if the key holds one.
async fn saved(env: &TestEnv) -> Option<Checkpoint> {
    let raw: Option<String> = env.redis(redis::cmd("GET").arg(key(env))).await;
    raw.as_deref().and_then(parse_saved)
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
    assert_eq!(save(None, b2).await, PositionSave::Saved);
    assert_eq!(saved(&env).await, Some(at(400)));
}
