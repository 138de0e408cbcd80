//! Rule 10, eventually complete: a repair whose audit row MySQL did not take
//! is recorded by a later run; a cancel commits with its audit row or not at
//! all; runs that never finished are closed as `abandoned`.

use seatflow_reconciler::model::Kind;
use seatflow_test_support::TestEnv;

async fn fix_rows(env: &TestEnv, run_id: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM reconcile_fix WHERE run_id = ?")
        .bind(run_id)
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn audit_rows_mysql_refused_are_written_by_the_next_run() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx
        .warm_all(1, &seats, &[("A-1", "1"), ("A-2", "1"), ("A-3", "1")])
        .await
        .unwrap();

    env.sql("RENAME TABLE reconcile_fix TO reconcile_fix_away")
        .await;
    let first = env.once(&[Kind::OrphanLocks]).await;
    assert_eq!(first.jobs[0].fixed, 3, "{}", first.to_text());
    env.sql("RENAME TABLE reconcile_fix_away TO reconcile_fix")
        .await;
    assert_eq!(fix_rows(&env, &first.run_id).await, 0);
    let kept: i64 = env
        .redis(redis::cmd("LLEN").arg(env.ctx.redis.keys.audit_backlog()))
        .await;
    assert_eq!(kept, 3, "the rows wait in Redis");

    let second = env.once(&[Kind::OrphanLocks]).await;
    assert_eq!(second.jobs[0].fixed, 0);
    assert_eq!(
        fix_rows(&env, &first.run_id).await,
        3,
        "the next run wrote the first run's rows"
    );
    let kept: i64 = env
        .redis(redis::cmd("LLEN").arg(env.ctx.redis.keys.audit_backlog()))
        .await;
    assert_eq!(kept, 0);
}

#[tokio::test]
async fn a_cancel_commits_with_its_audit_row_or_not_at_all() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    let order = env.fx.order(1, "PENDING", &["A-1"], -3600).await.unwrap();
    env.fx.warm_all(1, &seats, &[("A-1", "1")]).await.unwrap();

    env.sql("RENAME TABLE reconcile_fix TO reconcile_fix_away")
        .await;
    let refused = env.once(&[Kind::ExpiredOrders]).await;
    env.sql("RENAME TABLE reconcile_fix_away TO reconcile_fix")
        .await;
    assert_eq!(refused.jobs[0].fixed, 0, "{}", refused.to_text());
    assert_eq!(env.fx.order_status(order).await.unwrap(), "PENDING");

    let done = env.once(&[Kind::ExpiredOrders]).await;
    assert_eq!(done.jobs[0].fixed, 1, "{}", done.to_text());
    assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
    let audited: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM reconcile_fix WHERE order_id = ? AND kind = 'order_cancelled' AND run_id = ?",
    )
    .bind(order)
    .bind(&done.run_id)
    .fetch_one(env.ctx.mysql.pool())
    .await
    .unwrap();
    assert_eq!(audited, 1);
}

#[tokio::test]
async fn runs_that_never_finished_are_closed_as_abandoned() {
    let env = TestEnv::new().await;
    env.sql(
        "INSERT INTO reconcile_run (run_id, instance, kinds, dry_run, started_at) VALUES \
         ('mine-earlier', 'test', 'paid_seats', 0, UTC_TIMESTAMP(3) - INTERVAL 10 MINUTE), \
         ('theirs-stale', 'other', 'paid_seats', 0, UTC_TIMESTAMP(3) - INTERVAL 2 HOUR), \
         ('theirs-running', 'other', 'paid_seats', 0, UTC_TIMESTAMP(3))",
    )
    .await;
    let report = env.once(&[Kind::PaidSeats]).await;
    let outcomes: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT run_id, outcome FROM reconcile_run ORDER BY run_id")
            .fetch_all(env.ctx.mysql.pool())
            .await
            .unwrap();
    let outcome = |id: &str| {
        outcomes
            .iter()
            .find(|(r, _)| r == id)
            .and_then(|(_, o)| o.clone())
    };
    assert_eq!(outcome("mine-earlier").as_deref(), Some("abandoned"));
    assert_eq!(outcome("theirs-stale").as_deref(), Some("abandoned"));
    assert_eq!(
        outcome("theirs-running"),
        None,
        "another reconciler's live run"
    );
    assert_eq!(outcome(&report.run_id).as_deref(), Some("success"));
}

#[tokio::test]
async fn audit_rows_past_their_retention_are_pruned_in_batches() {
    let env = TestEnv::with(|s| s.audit.prune_batch = 1000).await;
    // 2,500 rows of 40 days ago (three batches), 3 of yesterday.
    env.sql(
        "INSERT INTO reconcile_fix (fix_id, run_id, job, kind, fixed_at, instance) \
         SELECT MD5(seq), 'old-run', 'paid_seats', 'seat_set', \
                UTC_TIMESTAMP(3) - INTERVAL 40 DAY, 'test' FROM seq_1_to_2500",
    )
    .await;
    env.sql(
        "INSERT INTO reconcile_fix (fix_id, run_id, job, kind, fixed_at, instance) \
         SELECT MD5(CONCAT('new', seq)), 'new-run', 'paid_seats', 'seat_set', \
                UTC_TIMESTAMP(3) - INTERVAL 1 DAY, 'test' FROM seq_1_to_3",
    )
    .await;
    env.sql(
        "INSERT INTO reconcile_run (run_id, instance, kinds, dry_run, started_at, outcome) VALUES \
         ('old-run', 'test', 'paid_seats', 0, UTC_TIMESTAMP(3) - INTERVAL 40 DAY, 'success'), \
         ('new-run', 'test', 'paid_seats', 0, UTC_TIMESTAMP(3) - INTERVAL 1 DAY, 'success')",
    )
    .await;
    env.once(&[Kind::PaidSeats]).await;
    assert_eq!(fix_rows(&env, "old-run").await, 0);
    assert_eq!(fix_rows(&env, "new-run").await, 3);
    let runs: Vec<String> = sqlx::query_scalar(
        "SELECT run_id FROM reconcile_run WHERE run_id LIKE '%-run' ORDER BY run_id",
    )
    .fetch_all(env.ctx.mysql.pool())
    .await
    .unwrap();
    assert_eq!(runs, vec!["new-run".to_string()]);
}

/// A seat repair that an order explains names that order in its audit row
/// (a paid seat raised to sold, a held seat of a pending order filled in);
/// a release of a seat no order holds has none.
#[tokio::test]
async fn seat_repairs_name_the_order_that_explains_them() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    let paid = env.fx.order(1, "PAID", &["A-1"], 900).await.unwrap();
    env.fx.warm_all(1, &seats, &[("A-3", "1")]).await.unwrap();
    let run = env.once(&[Kind::PaidSeats, Kind::OrphanLocks]).await;
    assert_eq!(run.total_fixed(), 2, "{}", run.to_text());
    let rows: Vec<(String, String, Option<i64>)> = sqlx::query_as(
        "SELECT job, seat_no, order_id FROM reconcile_fix WHERE run_id = ? ORDER BY seat_no",
    )
    .bind(&run.run_id)
    .fetch_all(env.ctx.mysql.pool())
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            ("paid_seats".to_string(), "A-1".to_string(), Some(paid)),
            ("orphan_locks".to_string(), "A-3".to_string(), None),
        ]
    );
}
