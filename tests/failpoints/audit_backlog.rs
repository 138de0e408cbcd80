//! Rule 10 under faults: audit rows kept in Redis (MySQL refused them) are
//! never lost on their way to `reconcile_fix`, whichever reply a dropped
//! connection takes with it while the backlog drains; and every audit row
//! has its run, MySQL down when the run began or not.

use seatflow_reconciler::model::Kind;
use seatflow_reconciler::race_window::{
    AUDIT_BACKLOG_ACK_LOST, AUDIT_BACKLOG_READ_LOST, SEAT_BEFORE_CONFIRM,
};
use seatflow_test_support::TestEnv;
use seatflow_test_support::races::Races;

async fn fix_rows(env: &TestEnv, run_id: &str) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT fix_id, COUNT(*) FROM reconcile_fix WHERE run_id = ? GROUP BY fix_id ORDER BY fix_id",
    )
    .bind(run_id)
    .fetch_all(env.ctx.mysql.pool())
    .await
    .unwrap()
}

async fn backlog_len(env: &TestEnv) -> i64 {
    env.redis(redis::cmd("LLEN").arg(env.ctx.redis.keys.audit_backlog()))
        .await
}

/// Three orphan locks released while MySQL refused their audit rows: the
/// rows wait in the backlog. Returns the releasing run's id.
async fn three_rows_in_the_backlog(env: &TestEnv) -> String {
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx
        .warm_all(1, &seats, &[("A-1", "1"), ("A-2", "1"), ("A-3", "1")])
        .await
        .unwrap();
    env.sql("RENAME TABLE reconcile_fix TO reconcile_fix_away")
        .await;
    let first = env.once(&[Kind::OrphanLocks]).await;
    env.sql("RENAME TABLE reconcile_fix_away TO reconcile_fix")
        .await;
    assert_eq!(first.jobs[0].fixed, 3, "{}", first.to_text());
    assert_eq!(backlog_len(env).await, 3, "the rows wait in Redis");
    first.run_id
}

/// The reply to the backlog's read is lost after Redis ran it. The run that
/// met the fault wrote nothing (the fault fired), and the next one writes
/// every row, once.
#[tokio::test]
async fn audit_rows_survive_a_lost_reply_to_the_backlog_read() {
    let env = TestEnv::new().await;
    // Held for the whole test: failpoints are global to the process.
    let races = Races::new();
    let first = three_rows_in_the_backlog(&env).await;

    races.fail_once(AUDIT_BACKLOG_READ_LOST);
    env.once(&[Kind::OrphanLocks]).await;
    assert!(
        fix_rows(&env, &first).await.is_empty(),
        "the fault fired: the drain wrote nothing"
    );

    env.once(&[Kind::OrphanLocks]).await;
    let rows = fix_rows(&env, &first).await;
    assert_eq!(rows.len(), 3, "every row written: {rows:?}");
    assert!(rows.iter().all(|(_, n)| *n == 1), "once each: {rows:?}");
    assert_eq!(backlog_len(&env).await, 0);
}

/// The rows are written, and the request that removes them from Redis is
/// lost. They stay in the backlog (the fault fired) and the next run writes
/// them again: still once each in `reconcile_fix`, and the backlog empties.
#[tokio::test]
async fn audit_rows_written_but_not_removed_are_written_once() {
    let env = TestEnv::new().await;
    // Held for the whole test: failpoints are global to the process.
    let races = Races::new();
    let first = three_rows_in_the_backlog(&env).await;

    races.fail_once(AUDIT_BACKLOG_ACK_LOST);
    env.once(&[Kind::OrphanLocks]).await;
    assert_eq!(fix_rows(&env, &first).await.len(), 3, "written");
    assert_eq!(
        backlog_len(&env).await,
        3,
        "the fault fired: still in Redis"
    );

    env.once(&[Kind::OrphanLocks]).await;
    let rows = fix_rows(&env, &first).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.iter().all(|(_, n)| *n == 1), "once each: {rows:?}");
    assert_eq!(backlog_len(&env).await, 0);
}

/// docs/change-detection.md's audit query, as an operator runs it: every repair with its
/// run (and what found it).
async fn audited_with_their_run(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM reconcile_fix f JOIN reconcile_run r USING (run_id)")
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap()
}

async fn fixes(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM reconcile_fix")
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap()
}

/// MySQL refuses the run's row as the run begins (the table away), and
/// takes it again before the run's repairs (the run paused before its
/// confirmation): the run records itself before its first repair, and the
/// audit query finds every repair with its run. Refused for good: no
/// repair is made at all (the seats stay as they were), an audit error.
#[tokio::test]
async fn every_audit_row_has_its_run() {
    let env = TestEnv::new().await;
    // Held for the whole test: failpoints are global to the process.
    let races = Races::new();
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx
        .warm_all(1, &seats, &[("A-1", "1"), ("A-2", "1")])
        .await
        .unwrap();
    env.sql("RENAME TABLE reconcile_run TO reconcile_run_away")
        .await;
    let report = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_CONFIRM,
            &[Kind::OrphanLocks],
            async || {
                env.sql("RENAME TABLE reconcile_run_away TO reconcile_run")
                    .await;
            },
        )
        .await;
    assert_eq!(report.jobs[0].fixed, 2, "{}", report.to_text());
    assert_eq!(fixes(&env).await, 2);
    assert_eq!(
        audited_with_their_run(&env).await,
        2,
        "no repair without its run"
    );

    env.fx.warm(1, &[("A-3", "1")]).await.unwrap();
    env.sql("RENAME TABLE reconcile_run TO reconcile_run_away")
        .await;
    let report = env.once(&[Kind::OrphanLocks]).await;
    env.sql("RENAME TABLE reconcile_run_away TO reconcile_run")
        .await;
    assert_eq!(report.jobs[0].fixed, 0, "{}", report.to_text());
    assert_eq!(
        env.fx.seat_value(1, "A-3").await.unwrap().as_deref(),
        Some("1"),
        "no repair without a run to audit it under"
    );
    assert!(
        report.jobs[0]
            .errors_by_stage
            .get(&seatflow_reconciler::error::Stage::Audit)
            .is_some_and(|n| *n >= 1),
        "{}",
        report.to_text()
    );
    assert_eq!(fixes(&env).await, 2);
}
