//! Rule 13 (see `tests/it/own_keys.rs`) where it meets a race window: the
//! audit backlog's key changes type while a run is paused before its repair.
//! Here, not with the other own-keys tests, because it arms a failpoint
//! (see `main.rs`).

use seatflow_reconciler::model::Kind;
use seatflow_reconciler::race_window::SEAT_BEFORE_REPAIR;
use seatflow_test_support::TestEnv;
use seatflow_test_support::own_keys::{backlog_aside, key_type, orphan_lock};
use seatflow_test_support::races::Races;

async fn sql(env: &TestEnv, statement: &'static str) {
    sqlx::raw_sql(statement)
        .execute(env.ctx.mysql.pool())
        .await
        .unwrap();
}

/// A backlog key of the wrong type while MySQL refuses the audit: the rows
/// of repairs already applied used to be lost (RPUSH failed) and every later
/// run warned. Now the key is moved aside, members intact, the rows go to a
/// fresh backlog and the next run writes them.
#[tokio::test]
async fn audit_rows_survive_a_backlog_key_of_the_wrong_type() {
    let env = TestEnv::new().await;
    orphan_lock(&env).await;
    let backlog = env.ctx.redis.keys.audit_backlog();
    sql(&env, "RENAME TABLE reconcile_fix TO reconcile_fix_away").await;
    // The set appears after the run drained the backlog, before the repair.
    let races = Races::new();
    let first = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_REPAIR,
            &[Kind::OrphanLocks],
            async || {
                let _: () = env
                    .redis(redis::cmd("SADD").arg(&backlog).arg("m1").arg("m2"))
                    .await;
            },
        )
        .await;
    sql(&env, "RENAME TABLE reconcile_fix_away TO reconcile_fix").await;
    assert_eq!(first.jobs[0].fixed, 1, "{}", first.to_text());
    assert_eq!(key_type(&env, &backlog).await, "list", "a fresh backlog");
    let kept: i64 = env.redis(redis::cmd("LLEN").arg(&backlog)).await;
    assert_eq!(kept, 1, "the repair's row waits in Redis");
    let aside = backlog_aside(&env).await;
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(key_type(&env, &aside[0]).await, "set");
    let mut members: Vec<String> = env.redis(redis::cmd("SMEMBERS").arg(&aside[0])).await;
    members.sort();
    assert_eq!(members, ["m1", "m2"]);

    let second = env.once(&[Kind::OrphanLocks]).await;
    assert_eq!(second.jobs[0].fixed, 0, "{}", second.to_text());
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM reconcile_fix WHERE run_id = ?")
        .bind(&first.run_id)
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap();
    assert_eq!(rows, 1, "the next run wrote the repair's audit row");
    assert_eq!(key_type(&env, &backlog).await, "none");
    assert_eq!(backlog_aside(&env).await, aside, "left for an operator");
}
