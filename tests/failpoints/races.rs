//! The race windows, made deterministic. A run is paused in one of the
//! product's race windows (`seatflow_reconciler::race_window`, failpoints
//! compiled in for tests), the application makes its move there (an order
//! commits, a payment completes, a refund, a hold, a second reconciler runs)
//! and the run goes on. Each test fails when the rule that guards its window
//! is removed; the rule is named on each test.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seatflow_reconciler::error::Stage;
use seatflow_reconciler::model::Kind;
use seatflow_reconciler::race_window::{
    CANCEL_REPLY_LOST, EXPIRED_AFTER_CANCEL, EXPIRED_BEFORE_CANCEL, EXPIRED_CANCEL_ROWS_LOCKED,
    OCCUPANCY_BETWEEN_READS, SEAT_BEFORE_CONFIRM, SEAT_BEFORE_REBUILD, SEAT_BEFORE_REPAIR,
};
use seatflow_reconciler::run::jobs::report::RunReport;
use seatflow_test_support::races::{BackgroundRun, Races};
use seatflow_test_support::{TestEnv, seat, seed_expired};

/// Showtime 5 of a 1×2 hall, warmed with `values` (the rest "0").
async fn showtime_with(env: &TestEnv, values: &[(&str, &str)]) {
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(5, 1, 60, "ON_SALE").await.unwrap();
    env.fx.warm_all(5, &seats, values).await.unwrap();
}

/// The run saw the one drifted item and left it alone: no repair, no error,
/// `seat` of `showtime` still shows `value`, no audit row.
async fn assert_left_alone(
    env: &TestEnv,
    report: &RunReport,
    showtime: i64,
    seat_no: &str,
    value: &str,
) {
    let job = &report.jobs[0];
    assert_eq!((job.drift, job.fixed, job.errors), (1, 0, 0), "{job:?}");
    assert_eq!(seat(env, showtime, seat_no).await.as_deref(), Some(value));
    assert!(env.audit().await.is_empty());
}

/// The first step of seatflow's hold: `"0"` → `"1"` in one script. False
/// when the seat was not free (the hold is refused).
async fn hold_in_redis(env: &TestEnv, showtime: i64, seat: &str) -> bool {
    let held: i64 = env
        .redis(
            redis::cmd("EVAL")
                .arg("if redis.call('HGET', KEYS[1], ARGV[1]) == '0' then redis.call('HSET', KEYS[1], ARGV[1], '1') return 1 end return 0")
                .arg(1)
                .arg(env.ctx.redis.keys.seat(showtime))
                .arg(seat),
        )
        .await;
    held == 1
}

/// seatflow's hold of one seat: `"0"` → `"1"` in one script, then the
/// PENDING order. None when the seat was not free (the hold is refused).
async fn hold(env: &TestEnv, showtime: i64, seat: &str) -> Option<i64> {
    if !hold_in_redis(env, showtime, seat).await {
        return None;
    }
    Some(
        env.fx
            .order(showtime, "PENDING", &[seat], 900)
            .await
            .unwrap(),
    )
}

/// No customer harmed: every seat of a PENDING or PAID order still shows
/// held or sold. A straight query, not the product's planner.
async fn assert_every_valid_order_keeps_its_seats(env: &TestEnv) {
    let rows: Vec<(i64, i64, String, String)> = sqlx::query_as(
        "SELECT o.id, os.showtime_id, os.seat_no, o.status FROM order_seat os \
         JOIN ticket_order o ON o.id = os.order_id \
         WHERE os.active = 1 AND o.status IN ('PENDING', 'PAID')",
    )
    .fetch_all(env.ctx.mysql.pool())
    .await
    .unwrap();
    for (order, showtime, seat_no, status) in rows {
        let value = seat(env, showtime, &seat_no).await;
        let want = if status == "PAID" { "2" } else { "1" };
        assert_eq!(
            value.as_deref(),
            Some(want),
            "order {order} ({status}) lost seat {seat_no} of showtime {showtime}"
        );
    }
}

/// Rule 4's confirmation. An orphan lock is scanned (no order; zero grace), and
/// the customer's order commits before the write: the seat stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_committed_after_the_scan_keeps_its_held_seat() {
    let races = Races::new();
    let env = TestEnv::new().await;
    showtime_with(&env, &[("A-1", "1")]).await;
    let report = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_CONFIRM,
            &[Kind::OrphanLocks],
            async || {
                env.fx.order(5, "PENDING", &["A-1"], 900).await.unwrap();
            },
        )
        .await;

    assert_left_alone(&env, &report, 5, "A-1", "1").await;
    assert_every_valid_order_keeps_its_seats(&env).await;
}

/// Rule 4's confirmation, of several showtimes in one statement (one chunk):
/// orphan locks on two seats of two showtimes, and an order commits on a
/// different seat of each before the write. Each showtime's ordered seat
/// stays held and only its other seat is released: the confirmation finds each
/// showtime's rows by its own seats, whichever showtime of the chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_committed_after_the_scan_keep_their_seats_in_every_showtime_of_the_chunk() {
    let races = Races::new();
    let env = TestEnv::new().await;
    let locks = [("A-1", "1"), ("A-2", "1")];
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    for id in [5, 6] {
        env.fx.showtime(id, 1, 60, "ON_SALE").await.unwrap();
        env.fx.warm_all(id, &seats, &locks).await.unwrap();
    }
    let report = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_CONFIRM,
            &[Kind::OrphanLocks],
            async || {
                env.fx.order(5, "PENDING", &["A-2"], 900).await.unwrap();
                env.fx.order(6, "PENDING", &["A-1"], 900).await.unwrap();
            },
        )
        .await;

    let values = [
        seat(&env, 5, "A-1").await,
        seat(&env, 5, "A-2").await,
        seat(&env, 6, "A-1").await,
        seat(&env, 6, "A-2").await,
    ];
    let want = ["0", "1", "1", "0"].map(|v| Some(v.to_string()));
    assert_eq!(values, want, "{report:?}");
    assert_eq!(report.jobs[0].fixed, 2, "{report:?}");
    assert_every_valid_order_keeps_its_seats(&env).await;
}

/// Rules 4 and 15 at the confirmation, for rows the contract cannot read: an
/// order of this showtime whose seat row sits in another showtime, or a
/// seat row whose order does not exist, written after the scan. MySQL does
/// not show the seat free in terms the contract explains, so the orphan
/// lock stays (and the row is reported).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_the_contract_cannot_read_written_after_the_scan_keeps_the_seat() {
    for row in ["in another showtime", "without its order"] {
        let races = Races::new();
        let env = TestEnv::new().await;
        showtime_with(&env, &[("A-1", "1")]).await;
        let report = races
            .run_with_move(
                &env.ctx.settings,
                SEAT_BEFORE_CONFIRM,
                &[Kind::OrphanLocks],
                async || {
                    let pool = env.ctx.mysql.pool();
                    if row == "in another showtime" {
                        let order = env.fx.order(5, "PENDING", &["A-1"], 900).await.unwrap();
                        sqlx::query("UPDATE order_seat SET showtime_id = 6 WHERE order_id = ?")
                            .bind(order)
                            .execute(pool)
                            .await
                            .unwrap();
                    } else {
                        sqlx::query(
                            "INSERT INTO order_seat (order_id, showtime_id, seat_no, active) \
                             VALUES (987654, 5, 'A-1', 1)",
                        )
                        .execute(pool)
                        .await
                        .unwrap();
                    }
                },
            )
            .await;
        assert_eq!(
            seat(&env, 5, "A-1").await.as_deref(),
            Some("1"),
            "a row {row}: {report:?}"
        );
        assert_left_alone(&env, &report, 5, "A-1", "1").await;
        assert_eq!(report.jobs[0].invalid_data, 1, "reported: a row {row}");
    }
}

/// Rules 12 and 15 read in one snapshot: a chunk's occupancy is read in
/// two statements (its orders, then its rows) inside one consistent
/// snapshot, as the one statement of a join would. seatflow cancels a
/// PENDING order (or refunds a PAID one) between them: status and `active`
/// NULL in one transaction. Read in two snapshots, the row would be
/// `active` NULL on a PENDING (PAID) order, a row outside the contract,
/// reported; read in one, the order still holds its seat as it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_ended_between_the_occupancy_reads_is_read_as_it_was() {
    for (the_move, status, value) in [("cancel", "PENDING", "1"), ("refund", "PAID", "2")] {
        let races = Races::new();
        let env = TestEnv::new().await;
        showtime_with(&env, &[("A-1", value)]).await;
        let order = env.fx.order(5, status, &["A-1"], 900).await.unwrap();
        let report = races
            .run_with_move(
                &env.ctx.settings,
                OCCUPANCY_BETWEEN_READS,
                &[Kind::PaidSeats, Kind::OrphanLocks, Kind::SoldOrphans],
                async || {
                    let ended = match the_move {
                        "cancel" => env.fx.cancel(order).await.unwrap(),
                        _ => env.fx.refund(order).await.unwrap(),
                    };
                    assert!(ended);
                },
            )
            .await;
        for job in &report.jobs {
            assert_eq!(
                (job.drift, job.invalid_data, job.fixed, job.errors),
                (0, 0, 0, 0),
                "a {the_move} between the reads: {job:?}"
            );
        }
        assert_eq!(seat(&env, 5, "A-1").await.as_deref(), Some(value));
    }
}

/// Rule 4's confirmation, for the paid-seats job: a PAID order's seat shown free
/// is scanned; the order is refunded before the write. The seat stays free
/// rather than showing sold with no paid order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seat_refunded_after_the_scan_is_not_marked_sold() {
    let races = Races::new();
    let env = TestEnv::new().await;
    showtime_with(&env, &[]).await;
    let order = env.fx.order(5, "PAID", &["A-1"], 900).await.unwrap();
    let report = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_CONFIRM,
            &[Kind::PaidSeats],
            async || {
                // seatflow's refund: PAID → REFUNDED and the occupancy ends, in one transaction.
                assert!(env.fx.refund(order).await.unwrap());
            },
        )
        .await;

    assert_left_alone(&env, &report, 5, "A-1", "0").await;
}

/// Rule 1: compare-and-set. The confirmation passed; then the customer's order
/// commits and is paid, and seatflow marks the seat sold, before the
/// script runs. The script sees "2", not the "1" it was told, and leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_between_confirmation_and_write_keeps_the_seat_sold() {
    let races = Races::new();
    let env = TestEnv::new().await;
    showtime_with(&env, &[("A-1", "1")]).await;
    let report = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_REPAIR,
            &[Kind::OrphanLocks],
            async || {
                env.fx.order(5, "PAID", &["A-1"], 900).await.unwrap();
                env.fx.warm(5, &[("A-1", "2")]).await.unwrap();
            },
        )
        .await;

    assert_left_alone(&env, &report, 5, "A-1", "2").await;
    assert_every_valid_order_keeps_its_seats(&env).await;
}

/// Rule 2: fencing. Between the confirmation and the script the run's lock
/// passes to another reconciler (it expired while the run was stalled, and
/// the other one took it). The script checks the token and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_lock_passed_to_another_reconciler_writes_nothing() {
    let races = Races::new();
    let env = TestEnv::new().await;
    showtime_with(&env, &[("A-1", "1")]).await;
    let lock = env.ctx.redis.keys.showtime_lease(5);
    let report = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_REPAIR,
            &[Kind::OrphanLocks],
            async || {
                let _: () = env
                    .redis(
                        redis::cmd("SET")
                            .arg(&lock)
                            .arg("another-reconciler")
                            .arg("PX")
                            .arg(60_000),
                    )
                    .await;
            },
        )
        .await;

    let job = &report.jobs[0];
    assert_eq!(job.fixed, 0, "{job:?}");
    assert_eq!(job.errors_by_stage.get(&Stage::Lock), Some(&1), "{job:?}");
    assert_eq!(seat(&env, 5, "A-1").await.as_deref(), Some("1"));
    assert!(env.audit().await.is_empty());
    let holder: Option<String> = env.redis(redis::cmd("GET").arg(&lock)).await;
    assert_eq!(
        holder.as_deref(),
        Some("another-reconciler"),
        "the other reconciler's lock is left alone"
    );
}

/// Rule 2: the showtime lease. Run A holds the locks of three showtimes
/// and is paused before its confirmation; run B (another process's connections)
/// runs from start to end inside that pause, on the same showtimes. B sees
/// the same drift, skips every showtime as busy and writes nothing; A then
/// repairs every seat, each audited once, all by A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reconcilers_overlap_on_the_same_showtimes_and_only_the_lock_holder_repairs() {
    let races = Races::new();
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 2, 5).await.unwrap();
    let all_locked: Vec<(&str, &str)> = seats.iter().map(|s| (s.as_str(), "1")).collect();
    for id in 1..=3 {
        env.fx.showtime(id, 1, 10 * id, "ON_SALE").await.unwrap();
        env.fx.warm(id, &all_locked).await.unwrap();
    }
    let a = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_CONFIRM,
            &[Kind::OrphanLocks],
            async || {
                let locked: Vec<Option<String>> = env
                    .redis(
                        redis::cmd("MGET").arg(
                            (1..=3)
                                .map(|id| env.ctx.redis.keys.showtime_lease(id))
                                .collect::<Vec<_>>(),
                        ),
                    )
                    .await;
                assert!(
                    locked.iter().all(Option::is_some),
                    "A holds all three showtimes' locks in its window: {locked:?}"
                );

                let b = env.job(Kind::OrphanLocks).await;
                assert_eq!(
                    (b.drift, b.fixed, b.skipped_busy, b.backlog),
                    (30, 0, 3, 30),
                    "B saw the drift, skipped every showtime as busy, wrote nothing: {b:?}"
                );
                for id in 1..=3 {
                    for s in &seats {
                        assert_eq!(seat(&env, id, s).await.as_deref(), Some("1"));
                    }
                }
                assert!(env.audit().await.is_empty());
            },
        )
        .await;
    assert_eq!((a.jobs[0].fixed, a.jobs[0].skipped_busy), (30, 0));
    let per_seat: Vec<(i64, String, i64, String)> = sqlx::query_as(
        "SELECT showtime_id, seat_no, COUNT(*), MIN(run_id) FROM reconcile_fix GROUP BY showtime_id, seat_no",
    )
    .fetch_all(env.ctx.mysql.pool())
    .await
    .unwrap();
    assert_eq!(per_seat.len(), 30);
    assert!(
        per_seat.iter().all(|r| r.2 == 1 && r.3 == a.run_id),
        "each seat audited once, by A: {per_seat:?}"
    );
}

/// Rule 3: the cancel is conditional. The expired order is scanned and its
/// showtime locked; the customer pays before the cancel. The order stays
/// PAID and its seat sold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_before_the_cancel_keeps_the_order_paid() {
    let races = Races::new();
    let env = TestEnv::new().await;
    let order = seed_expired(&env).await;
    let report = races
        .run_with_move(
            &env.ctx.settings,
            EXPIRED_BEFORE_CANCEL,
            &[Kind::ExpiredOrders],
            async || {
                assert!(env.fx.pay(order).await.unwrap(), "seatflow's payment wins");
                env.fx.warm(1, &[("A-1", "2")]).await.unwrap();
            },
        )
        .await;

    assert_left_alone(&env, &report, 1, "A-1", "2").await;
    assert_eq!(env.fx.order_status(order).await.unwrap(), "PAID");
    assert_every_valid_order_keeps_its_seats(&env).await;
}

/// Rules 3 and 10: seatflow cancels the expired order itself (its expiry
/// message arrived after all, or the customer cancelled) after the scan,
/// before the reconciler's cancel, and releases the seat. The conditional
/// cancel finds nothing to do, and the reconciler does not take seatflow's
/// cancel for one of its own (as it does for its own commit whose reply
/// was lost): nothing counted, nothing audited, the order keeps
/// seatflow's reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_by_seatflow_before_the_reconcilers_is_not_taken_for_its_own() {
    let races = Races::new();
    let env = TestEnv::new().await;
    let order = seed_expired(&env).await;
    let report = races
        .run_with_move(
            &env.ctx.settings,
            EXPIRED_BEFORE_CANCEL,
            &[Kind::ExpiredOrders],
            async || {
                assert!(env.fx.cancel(order).await.unwrap(), "seatflow's cancel");
                env.fx.warm(1, &[("A-1", "0")]).await.unwrap();
            },
        )
        .await;

    assert_left_alone(&env, &report, 1, "A-1", "0").await;
    let reason: Option<String> =
        sqlx::query_scalar("SELECT cancel_reason FROM ticket_order WHERE id = ?")
            .bind(order)
            .fetch_one(env.ctx.mysql.pool())
            .await
            .unwrap();
    assert_eq!(reason.as_deref(), Some("USER_CANCEL"));
}

/// Rule 3 in the contract's own terms: between the scan and the cancel the
/// order's status is rewritten in a spelling outside the contract
/// (`pending`, which the column's collation calls PENDING). Only PENDING,
/// byte for byte, is cancelled: the order is left as it is, with no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_respelled_before_the_cancel_is_not_cancelled() {
    let races = Races::new();
    let env = TestEnv::new().await;
    let order = seed_expired(&env).await;
    let report = races
        .run_with_move(
            &env.ctx.settings,
            EXPIRED_BEFORE_CANCEL,
            &[Kind::ExpiredOrders],
            async || {
                sqlx::query("UPDATE ticket_order SET status = 'pending' WHERE id = ?")
                    .bind(order)
                    .execute(env.ctx.mysql.pool())
                    .await
                    .unwrap();
            },
        )
        .await;

    assert_left_alone(&env, &report, 1, "A-1", "1").await;
    let status: Vec<u8> =
        sqlx::query_scalar("SELECT CAST(status AS BINARY) FROM ticket_order WHERE id = ?")
            .bind(order)
            .fetch_one(env.ctx.mysql.pool())
            .await
            .unwrap();
    assert_eq!(status, b"pending");
}

/// Rule 3's lock: inside the cancel's transaction the expired order is
/// row-locked before its UPDATE, so seatflow's payment of it waits for the
/// commit (here it gives up after its lock wait), instead of committing in
/// between; then the cancel commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_waits_for_the_cancel_that_locked_the_order() {
    let races = Races::new();
    let env = TestEnv::new().await;
    let order = seed_expired(&env).await;
    let report = races
        .run_with_move(
            &env.ctx.settings,
            EXPIRED_CANCEL_ROWS_LOCKED,
            &[Kind::ExpiredOrders],
            async || {
                let mut c = env.ctx.mysql.pool().acquire().await.unwrap();
                sqlx::query("SET SESSION innodb_lock_wait_timeout = 1")
                    .execute(&mut *c)
                    .await
                    .unwrap();
                let paid = sqlx::query(
                    "UPDATE ticket_order SET status = 'PAID', paid_at = UTC_TIMESTAMP(3) \
                     WHERE id = ? AND status = 'PENDING'",
                )
                .bind(order)
                .execute(&mut *c)
                .await;
                let err = paid
                    .expect_err("the payment waited for the row lock")
                    .to_string();
                assert!(err.contains("Lock wait timeout"), "{err}");
            },
        )
        .await;

    let job = &report.jobs[0];
    assert_eq!((job.fixed, job.errors), (1, 0), "{job:?}");
    assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
}

/// Rule 2 across the cancel chain: the expired order is cancelled
/// (committed), its seat still "1" in Redis. In that window a second
/// reconciler runs the seat jobs (zero grace: the seat is an orphan lock now)
/// and a new customer tries to hold the seat. The second reconciler skips the
/// locked showtime, so the seat cannot be released and held by someone whose
/// hold the cancel's own release would then wipe out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_releases_its_seats_before_anyone_else_touches_them() {
    let races = Races::new();
    let env = TestEnv::new().await;
    let order = seed_expired(&env).await;
    let report = races
        .run_with_move(
            &env.ctx.settings,
            EXPIRED_AFTER_CANCEL,
            &[Kind::ExpiredOrders],
            async || {
                assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");

                let other = env.once(&Kind::SEAT_JOBS).await;
                let busy: u64 = other.jobs.iter().map(|j| j.skipped_busy).sum();
                let fixed: u64 = other.jobs.iter().map(|j| j.fixed).sum();
                assert_eq!((fixed, busy > 0), (0, true), "{other:?}");
                let newcomer = hold(&env, 1, "A-1").await;
                assert_eq!(
                    newcomer, None,
                    "the seat stays held until the cancel's release"
                );
            },
        )
        .await;

    assert_eq!(report.jobs[0].fixed, 1, "{report:?}");
    assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("0"));
    assert_every_valid_order_keeps_its_seats(&env).await;
    let releases: Vec<(String, Option<i64>)> =
        sqlx::query_as("SELECT job, order_id FROM reconcile_fix WHERE seat_no = 'A-1'")
            .fetch_all(env.ctx.mysql.pool())
            .await
            .unwrap();
    assert_eq!(
        releases,
        vec![("expired_orders".to_string(), Some(order))],
        "released once, by the cancel chain"
    );
}

/// Rule 2: a lease is renewed before the write once a third of its TTL is
/// used, so a slow batch keeps its showtimes. The run stalls before its
/// confirmation until the renewal is due; there the test takes the lock's
/// expiry away (`PERSIST`, token kept). At the run's next window, just
/// before the script, the lock has an expiry again: only the run's renewal
/// (`PEXPIRE` in `lease_renew.lua`) sets one. Judged by that event, not by
/// how much TTL is left at some moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_stalls_renews_its_locks_before_writing() {
    const TTL: Duration = Duration::from_secs(3);
    let races = Races::new();
    let env = TestEnv::with(|s| s.reconcile.lock_ttl = TTL).await;
    showtime_with(&env, &[("A-1", "1")]).await;
    let lock = env.ctx.redis.keys.showtime_lease(5);
    // The lock's token and PTTL, read together.
    let token_and_pttl = async || -> (Option<String>, i64) {
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(&lock).cmd("PTTL").arg(&lock);
        let mut c = env.ctx.redis.connection();
        pipe.query_async(&mut c).await.unwrap()
    };
    let mut before_confirm = races.pause_once(SEAT_BEFORE_CONFIRM);
    let mut before_repair = races.pause_once(SEAT_BEFORE_REPAIR);
    let mut run = BackgroundRun::start((*env.ctx.settings).clone(), &[Kind::OrphanLocks]);

    run.paused_in(&mut before_confirm).await;
    // The run took the lock before this window; once a third of its TTL
    // has passed since (the run is paused meanwhile), the renewal is due.
    // This wait makes it due; nothing is judged by it.
    tokio::time::sleep(TTL / 3).await;
    let persisted: i64 = env.redis(redis::cmd("PERSIST").arg(&lock)).await;
    assert_eq!(persisted, 1, "the run holds the lock, with an expiry");
    let (token, pttl) = token_and_pttl().await;
    assert!(token.is_some());
    assert_eq!(pttl, -1, "no expiry until someone sets one");
    before_confirm.resume();

    run.paused_in(&mut before_repair).await;
    let (token_now, pttl) = token_and_pttl().await;
    assert_eq!(token_now, token, "still the run's own lock");
    // Only the renewal gives the lock an expiry again; it is at most the
    // TTL the run renews to (and gone only if this test stalled past it).
    assert!(
        pttl > 0 && pttl <= TTL.as_millis() as i64,
        "the run renewed its lock before writing: PTTL {pttl}"
    );
    before_repair.resume();
    let report = run.finish().await;

    assert_eq!(report.jobs[0].fixed, 1, "{report:?}");
    assert_eq!(seat(&env, 5, "A-1").await.as_deref(), Some("0"));
}

/// Rule 2 for expired-orders: run A has locked the showtime and is about
/// to cancel; run B, from start to end inside that pause, finds the same
/// expired order, skips its busy showtime and leaves the order to A (counted
/// as backlog). The order is cancelled once, by A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reconcilers_cancel_an_expired_order_once() {
    let races = Races::new();
    let env = TestEnv::new().await;
    let order = seed_expired(&env).await;
    let a = races
        .run_with_move(
            &env.ctx.settings,
            EXPIRED_BEFORE_CANCEL,
            &[Kind::ExpiredOrders],
            async || {
                let b = env.job(Kind::ExpiredOrders).await;
                assert_eq!(
                    (b.drift, b.fixed, b.skipped_busy, b.backlog),
                    (1, 0, 1, 1),
                    "B saw the order, skipped the busy showtime: {b:?}"
                );
                assert_eq!(env.fx.order_status(order).await.unwrap(), "PENDING");
            },
        )
        .await;

    assert_eq!(a.jobs[0].fixed, 1, "{a:?}");
    assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
    assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("0"));
    let runs: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT run_id FROM reconcile_fix WHERE order_id = ?")
            .bind(order)
            .fetch_all(env.ctx.mysql.pool())
            .await
            .unwrap();
    assert_eq!(runs, vec![a.run_id.clone()], "audited by A only");
}

/// Rules 9 and 10: the cancel of an expired order with two seats commits,
/// and its reply is lost (a transient error). The retry recognises the
/// commit as its own: two orders cancelled, their three seats released,
/// each audited once. That the fault fired and was retried is read from the
/// retry's own WARN: without it, a fault point that never fired would pass
/// this test as an ordinary cancel.
///
/// One thread (the default runtime): the run is this test's own future, so
/// the thread-local log capture sees every event it logs.
#[tokio::test]
async fn a_cancel_whose_reply_was_lost_counts_and_audits_once() {
    let races = Races::new();
    let retries = RetryWarnings::default();
    let _capture = retries.capture_on_this_thread();
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    let order = env
        .fx
        .order(1, "PENDING", &["A-1", "A-2"], -600)
        .await
        .unwrap();
    // A second expired order in the same cancel: each order recognised
    // with its own seats.
    let second = env.fx.order(1, "PENDING", &["A-3"], -600).await.unwrap();
    env.fx
        .warm_all(1, &seats, &[("A-1", "1"), ("A-2", "1"), ("A-3", "1")])
        .await
        .unwrap();
    races.fail_once(CANCEL_REPLY_LOST);
    let report = env.job(Kind::ExpiredOrders).await;

    assert_eq!(
        retries.taken(),
        vec![RetryWarning {
            operation: "cancel expired orders".into(),
            attempt: "1".into(),
            error: "the commit's reply was lost (failpoint)".into(),
        }],
        "the fault fired once, after the commit, and the cancel was tried again"
    );
    assert_eq!((report.fixed, report.errors), (2, 0), "{report:?}");
    assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
    assert_eq!(env.fx.order_status(second).await.unwrap(), "CANCELLED");
    for s in ["A-1", "A-2", "A-3"] {
        assert_eq!(seat(&env, 1, s).await.as_deref(), Some("0"));
    }
    let audit: Vec<(Option<String>, i64)> = sqlx::query_as(
        "SELECT seat_no, COUNT(*) FROM reconcile_fix WHERE order_id = ? GROUP BY seat_no ORDER BY seat_no",
    )
    .bind(order)
    .fetch_all(env.ctx.mysql.pool())
    .await
    .unwrap();
    assert_eq!(
        audit,
        vec![(None, 1), (Some("A-1".into()), 1), (Some("A-2".into()), 1)],
        "the cancel and each seat's release, once"
    );
}

/// Rule 15's confirmation asks MySQL in its own terms. An orphan lock is
/// scanned; before the write, an order commits on the seat spelled `a-1`,
/// which `uq_occupancy` takes for `A-1`. A confirmation keyed by bytes would
/// miss it and free the seat; the seat stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_the_collation_matches_after_the_scan_keeps_the_seat() {
    let races = Races::new();
    let env = TestEnv::new().await;
    showtime_with(&env, &[("A-1", "1")]).await;
    let report = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_CONFIRM,
            &[Kind::OrphanLocks],
            async || {
                env.fx.order(5, "PENDING", &["a-1"], 900).await.unwrap();
            },
        )
        .await;

    assert_left_alone(&env, &report, 5, "A-1", "1").await;
}

/// Rule 15 for the cancel chain: its release confirms the seat. The
/// expired order is cancelled; before its seat is released, another order
/// takes the seat in MySQL (the cancelled row no longer holds it). The
/// release leaves the seat held instead of freeing the new order's seat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seat_taken_again_after_the_cancel_commits_is_not_released() {
    let races = Races::new();
    let env = TestEnv::new().await;
    let order = seed_expired(&env).await;
    let report = races
        .run_with_move(
            &env.ctx.settings,
            EXPIRED_AFTER_CANCEL,
            &[Kind::ExpiredOrders],
            async || {
                assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
                env.fx.order(1, "PENDING", &["A-1"], 900).await.unwrap();
            },
        )
        .await;

    assert_eq!(report.jobs[0].fixed, 1, "{report:?}");
    assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("1"));
    assert_every_valid_order_keeps_its_seats(&env).await;
    assert!(
        env.audit().await.iter().all(|a| a.1 != "seat_released"),
        "no release audited"
    );
}

/// The contract's rebuild: "never clobber a hash that appeared meanwhile"
/// (the rebuild script creates the hash only while it is missing; rules 1
/// and 13). The hash of an ON_SALE showtime is missing; the run has read
/// its seats in MySQL (all free) and is about to write them. In that
/// window seatflow warms the hash again and a customer holds A-2, their
/// order committing. The rebuild, from its older read, leaves the live
/// hash alone: the customer keeps the seat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hash_warmed_again_before_the_rebuild_keeps_a_new_hold() {
    let races = Races::new();
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(5, 1, 60, "ON_SALE").await.unwrap();
    let report = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_REBUILD,
            &[Kind::MissingHashes],
            async || {
                assert!(env.fx.hash(5).await.unwrap().is_empty(), "still missing");
                env.fx.warm_all(5, &seats, &[]).await.unwrap();
                assert!(hold(&env, 5, "A-2").await.is_some(), "the hold succeeds");
            },
        )
        .await;

    assert_left_alone(&env, &report, 5, "A-2", "1").await;
    assert_eq!(seat(&env, 5, "A-1").await.as_deref(), Some("0"));
    assert_every_valid_order_keeps_its_seats(&env).await;
}

/// A sold orphan: A-1 shows sold, its order was refunded, and seatflow's
/// refund has not yet set the seat `"0"` (the contract's refund window).
async fn refunded_sold_orphan(env: &TestEnv) {
    showtime_with(env, &[("A-1", "2")]).await;
    env.fx.order(5, "REFUNDED", &["A-1"], 900).await.unwrap();
}

/// Rule 4's confirmation, for sold orphans: the seat shows sold again by the
/// time of the write, but not for the same customer. A sold orphan (its
/// order refunded) is scanned; before the confirmation, seatflow's refund
/// frees the seat, and a new customer holds it, orders and pays, so it
/// shows `"2"` again, the value the scan saw. The confirmation finds the PAID
/// order and the new customer's seat stays sold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seat_sold_again_before_the_confirmation_is_not_released() {
    let races = Races::new();
    let env = TestEnv::new().await;
    refunded_sold_orphan(&env).await;
    let report = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_CONFIRM,
            &[Kind::SoldOrphans],
            async || {
                env.fx.warm(5, &[("A-1", "0")]).await.unwrap();
                let order = hold(&env, 5, "A-1").await.expect("the seat is free");
                assert!(env.fx.pay(order).await.unwrap());
                env.fx.warm(5, &[("A-1", "2")]).await.unwrap();
            },
        )
        .await;

    assert_left_alone(&env, &report, 5, "A-1", "2").await;
    assert_every_valid_order_keeps_its_seats(&env).await;
}

/// Rule 1: compare-and-set, for sold orphans. A sold orphan (its order
/// refunded) passed the confirmation; before the script, seatflow's refund
/// frees the seat and a new customer holds it, their order committing.
/// The script sees `"1"`, not the `"2"` it was told, and leaves the new
/// customer's hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sold_orphan_held_again_before_the_write_is_not_released() {
    let races = Races::new();
    let env = TestEnv::new().await;
    refunded_sold_orphan(&env).await;
    let report = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_REPAIR,
            &[Kind::SoldOrphans],
            async || {
                env.fx.warm(5, &[("A-1", "0")]).await.unwrap();
                assert!(hold(&env, 5, "A-1").await.is_some(), "the seat is free");
            },
        )
        .await;

    assert_left_alone(&env, &report, 5, "A-1", "1").await;
    assert_every_valid_order_keeps_its_seats(&env).await;
}

/// Rule 2's fencing across the cancel chain. The expired order is
/// cancelled (committed), its seat still `"1"`; then the run stalls past
/// its lease, which another reconciler takes: it releases the seat (an
/// orphan lock now: the order is cancelled) and lets the lease go, and a
/// new customer holds the seat, their order still being written. The run
/// goes on: its confirmation finds no order on the seat, and its `"1"` → `"0"`
/// would wipe out the new hold; the script finds the lease not the run's
/// and writes nothing. What the contract asks for after the cancel (the
/// seat released) was done once, by the other reconciler; the customer
/// keeps the seat.
///
/// The lease TTL is long, so the run's own renewal before the write is not
/// due (the lease is taken away by hand, as its expiry would): the token
/// check in the script is what stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_whose_lease_passed_on_leaves_the_seats_to_the_new_holder() {
    let races = Races::new();
    let env = TestEnv::with(|s| s.reconcile.lock_ttl = Duration::from_secs(600)).await;
    let order = seed_expired(&env).await;
    let lock = env.ctx.redis.keys.showtime_lease(1);
    let report = races
        .run_with_move(
            &env.ctx.settings,
            EXPIRED_AFTER_CANCEL,
            &[Kind::ExpiredOrders],
            async || {
                assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
                let expired: i64 = env.redis(redis::cmd("DEL").arg(&lock)).await;
                assert_eq!(expired, 1, "the run held the showtime's lease");

                let other = env.job(Kind::OrphanLocks).await;
                assert_eq!(
                    (other.fixed, other.skipped_busy),
                    (1, 0),
                    "the other reconciler released the seat: {other:?}"
                );
                assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("0"));
                // The new customer's hold; their order is still being written.
                assert!(hold_in_redis(&env, 1, "A-1").await, "the seat is free");
            },
        )
        .await;
    // The new customer's order commits.
    env.fx.order(1, "PENDING", &["A-1"], 900).await.unwrap();

    assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("1"));
    assert_every_valid_order_keeps_its_seats(&env).await;
    let job = &report.jobs[0];
    assert_eq!(job.fixed, 1, "the cancel: {job:?}");
    assert_eq!(job.errors_by_stage.get(&Stage::Lock), Some(&1), "{job:?}");
    let fixes: Vec<(String, String, Option<String>)> =
        sqlx::query_as("SELECT job, kind, seat_no FROM reconcile_fix ORDER BY job")
            .fetch_all(env.ctx.mysql.pool())
            .await
            .unwrap();
    assert_eq!(
        fixes,
        vec![
            ("expired_orders".into(), "order_cancelled".into(), None),
            (
                "orphan_locks".into(),
                "seat_released".into(),
                Some("A-1".into())
            ),
        ],
        "cancelled by the run, the seat released once, by the other reconciler"
    );
    let again = env.once(&Kind::ALL).await;
    assert!(
        again.jobs.iter().all(|j| (j.drift, j.fixed) == (0, 0)),
        "converged: {again:?}"
    );
}

/// The premise of the `1 → 0 → 1` argument (docs/safety-rules.md, "What a
/// compare-and-set cannot see"): between a run's confirmation and its script,
/// no reconciler can free the seat for a new customer to hold, so the
/// script cannot find "its" `"1"` put back by someone else's release. Run
/// A has confirmed an orphan lock and is about to write; in that
/// window another reconciler runs every job (it also finds an expired
/// order on A-2, of the same showtime): it skips the showtime as busy and
/// writes nothing, and a new customer's hold of A-1 is refused, the seat
/// still showing `"1"`. Then A releases A-1, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reconciler_frees_a_seat_between_the_confirmation_and_the_write() {
    let races = Races::new();
    let env = TestEnv::new().await;
    showtime_with(&env, &[("A-1", "1"), ("A-2", "1")]).await;
    let expired = env.fx.order(5, "PENDING", &["A-2"], -600).await.unwrap();
    let a = races
        .run_with_move(
            &env.ctx.settings,
            SEAT_BEFORE_REPAIR,
            &[Kind::OrphanLocks],
            async || {
                let b = env.once(&Kind::ALL).await;
                let drift: u64 = b.jobs.iter().map(|j| j.drift).sum();
                let fixed: u64 = b.jobs.iter().map(|j| j.fixed).sum();
                let busy: u64 = b.jobs.iter().map(|j| j.skipped_busy).sum();
                assert_eq!(
                    (drift, fixed, busy),
                    (2, 0, 2),
                    "B saw the orphan lock and the expired order, skipped both as busy: {b:?}"
                );
                assert_eq!(hold(&env, 5, "A-1").await, None, "the seat is not free");
                assert_eq!(env.fx.order_status(expired).await.unwrap(), "PENDING");
                assert!(env.audit().await.is_empty());
            },
        )
        .await;

    assert_eq!(a.jobs[0].fixed, 1, "{a:?}");
    assert_eq!(seat(&env, 5, "A-1").await.as_deref(), Some("0"));
    assert_eq!(seat(&env, 5, "A-2").await.as_deref(), Some("1"));
    let fixes: Vec<(String, Option<String>, String)> =
        sqlx::query_as("SELECT job, seat_no, run_id FROM reconcile_fix")
            .fetch_all(env.ctx.mysql.pool())
            .await
            .unwrap();
    assert_eq!(
        fixes,
        vec![("orphan_locks".into(), Some("A-1".into()), a.run_id.clone())],
        "released once, by A"
    );
}

/// One "transient error, retrying" WARN of `retry::with_retry`: the
/// operation retried, which attempt failed, and the error's text (its
/// innermost cause: the message the fault point gave it).
#[derive(Debug, Clone, PartialEq, Eq)]
struct RetryWarning {
    operation: String,
    attempt: String,
    error: String,
}

/// The retry WARNs logged on one thread while a capture is in place.
#[derive(Clone, Default)]
struct RetryWarnings(Arc<Mutex<Vec<RetryWarning>>>);

impl RetryWarnings {
    /// Captures on the current thread until the guard is dropped.
    fn capture_on_this_thread(&self) -> tracing::subscriber::DefaultGuard {
        use tracing_subscriber::layer::SubscriberExt;
        tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()))
    }

    fn taken(&self) -> Vec<RetryWarning> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for RetryWarnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut field = |name: &str| fields.0.remove(name).unwrap_or_default();
        if field("message") == "transient error, retrying" {
            let error = field("error");
            let innermost = error.rsplit(": ").next().unwrap_or_default().to_string();
            self.0.lock().unwrap().push(RetryWarning {
                operation: field("operation"),
                attempt: field("attempt"),
                error: innermost,
            });
        }
    }
}

/// An event's fields as text.
#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}"));
    }
}
