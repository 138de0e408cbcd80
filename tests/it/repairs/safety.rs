//! The races and bad data the safety rules exist for, against the real
//! services. Each test fails if its rule is removed.

use std::time::Duration;

use seatflow_reconciler::error::Stage;
use seatflow_reconciler::model::SeatRepair;
use seatflow_reconciler::model::{Kind, SeatState, Shard};
use seatflow_reconciler::run::jobs::report::Outcome;
use seatflow_reconciler::store::mysql::RunIdentity;
use seatflow_reconciler::store::redis::{Fenced, LeaseTake, SeatBatch, SuspectOp};
use seatflow_test_support::TestEnv;
use seatflow_test_support::own_keys::key_type;
use seatflow_test_support::servers::wait_until;

const RUN: RunIdentity<'static> = RunIdentity {
    run_id: "00000000-0000-0000-0000-000000000000",
    instance: "test",
};

fn release(seat: &str, observed: Option<SeatState>) -> SeatRepair {
    SeatRepair {
        kind: Kind::OrphanLocks,
        seat: seat.into(),
        observed,
        target: SeatState::Free,
    }
}

/// Rule 1: a repair names the value it saw; a changed seat is left alone.
#[tokio::test]
async fn a_seat_changed_between_scan_and_repair_is_not_overwritten() {
    let env = TestEnv::new().await;
    let redis = &env.ctx.redis;
    env.fx.warm(1, &[("A-1", "1"), ("A-2", "1")]).await.unwrap();
    assert_eq!(
        redis.acquire_leases("me", &[1], 10_000).await.unwrap(),
        vec![LeaseTake::Taken]
    );
    // The customer pays A-1 after our scan saw "1".
    env.fx.warm(1, &[("A-1", "2")]).await.unwrap();
    let out = redis
        .repair_seats(
            "me",
            &[SeatBatch::new(
                1,
                vec![
                    release("A-1", Some(SeatState::Locked)),
                    release("A-2", Some(SeatState::Locked)),
                ],
            )],
        )
        .await
        .unwrap();
    assert_eq!(
        out[0].reply.as_ref().unwrap(),
        &Fenced::Done(vec![false, true])
    );
    assert_eq!(
        env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
        Some("2")
    );
    assert_eq!(
        env.fx.seat_value(1, "A-2").await.unwrap().as_deref(),
        Some("0")
    );

    // Filling an absent field never creates a hash that vanished meanwhile.
    assert_eq!(
        redis.acquire_leases("me", &[2], 10_000).await.unwrap(),
        vec![LeaseTake::Taken]
    );
    let out = redis
        .repair_seats("me", &[SeatBatch::new(2, vec![release("A-1", None)])])
        .await
        .unwrap();
    assert_eq!(out[0].reply.as_ref().unwrap(), &Fenced::Done(vec![false]));
    assert!(env.fx.hash(2).await.unwrap().is_empty());
}

/// Rule 2: a busy showtime is skipped and counted, and its holder's lock is untouched.
#[tokio::test]
async fn a_showtime_locked_by_another_token_is_skipped_and_counted() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(5, 1, 60, "ON_SALE").await.unwrap();
    env.fx.warm_all(5, &seats, &[("A-1", "1")]).await.unwrap();
    let lock = env.ctx.redis.keys.showtime_lease(5);
    let _: () = env
        .redis(
            redis::cmd("SET")
                .arg(&lock)
                .arg("someone-else")
                .arg("PX")
                .arg(30_000),
        )
        .await;

    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!(
        (r.outcome, r.drift, r.fixed, r.skipped_busy, r.backlog),
        (Outcome::Success, 1, 0, 1, 1)
    );
    assert_eq!(
        env.fx.seat_value(5, "A-1").await.unwrap().as_deref(),
        Some("1")
    );
    let holder: Option<String> = env.redis(redis::cmd("GET").arg(&lock)).await;
    assert_eq!(holder.as_deref(), Some("someone-else"));

    let _: () = env.redis(redis::cmd("DEL").arg(&lock)).await;
    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!((r.fixed, r.skipped_busy), (1, 0));
    let left: Option<String> = env.redis(redis::cmd("GET").arg(&lock)).await;
    assert_eq!(left, None, "our lock is released after the run");
}

/// Rule 2: fencing. A holder that paused past its lease writes nothing.
#[tokio::test]
async fn a_holder_whose_lease_expired_cannot_write() {
    let env = TestEnv::new().await;
    let redis = &env.ctx.redis;
    env.fx.warm(7, &[("A-1", "1")]).await.unwrap();
    assert_eq!(
        redis.acquire_leases("old", &[7], 50).await.unwrap(),
        vec![LeaseTake::Taken]
    );
    // The old holder pauses past its lease: Redis lets it expire.
    wait_until("the old lease expires", Duration::from_secs(60), || async {
        let left: i64 = env
            .redis(redis::cmd("EXISTS").arg(redis.keys.showtime_lease(7)))
            .await;
        left == 0
    })
    .await;
    assert_eq!(
        redis.acquire_leases("new", &[7], 10_000).await.unwrap(),
        vec![LeaseTake::Taken]
    );

    let out = redis
        .repair_seats(
            "old",
            &[SeatBatch::new(
                7,
                vec![release("A-1", Some(SeatState::Locked))],
            )],
        )
        .await
        .unwrap();
    assert_eq!(out[0].reply.as_ref().unwrap(), &Fenced::LeaseLost);
    assert_eq!(
        env.fx.seat_value(7, "A-1").await.unwrap().as_deref(),
        Some("1")
    );
    let rebuilt = redis
        .rebuild_hash("old", "op-1", 8, &[("A-1".into(), SeatState::Free)])
        .await
        .unwrap();
    assert_eq!(rebuilt.reply, Fenced::LeaseLost);
    assert!(env.fx.hash(8).await.unwrap().is_empty());
    // Neither renewal nor release by the old holder touches the new lease.
    assert_eq!(
        redis.renew_leases("old", &[7], 10_000).await.unwrap(),
        vec![false]
    );
    assert_eq!(
        redis.release_leases("old", &[7]).await.unwrap(),
        vec![false]
    );
    let holder: Option<String> = env
        .redis(redis::cmd("GET").arg(redis.keys.showtime_lease(7)))
        .await;
    assert_eq!(holder.as_deref(), Some("new"));
}

/// Rule 13 in `lease_release.lua`: a lease key of another type than a
/// string is nobody's lease, ours included, so the script checks the type
/// before it reads the key. Releasing our showtime lease, or our pass lease
/// (the same script), where a hash holding our token now stands answers
/// "not ours" and deletes nothing, where a GET on it would fail the release
/// (and with it the sweep that releases its chunk's leases, see
/// `tests/failpoints/own_keys.rs`).
#[tokio::test]
async fn a_release_meeting_a_lease_key_of_another_type_deletes_nothing() {
    let env = TestEnv::new().await;
    let redis = &env.ctx.redis;
    let leases = [
        redis.keys.showtime_lease(7),
        redis.keys.pass_lease(Shard::ALL),
    ];
    for key in &leases {
        let _: () = env
            .redis(redis::cmd("HSET").arg(key).arg("token").arg("me"))
            .await;
    }

    assert_eq!(redis.release_leases("me", &[7]).await.unwrap(), vec![false]);
    assert!(!redis.release_pass(Shard::ALL, "me").await.unwrap());
    for key in &leases {
        let kept: Vec<String> = env.redis(redis::cmd("HGETALL").arg(key)).await;
        assert_eq!(kept, ["token", "me"], "{key} left alone");
    }
}

/// Rule 13 in `rebuild_hash.lua`: the showtime lease key's type is checked
/// before the script reads it. Our lease became a set (another tool wrote
/// the key in another shape) between taking it and the rebuild: the script
/// answers "not our lease" and writes nothing, no hash and no done record,
/// where a GET on the set would have failed the script.
#[tokio::test]
async fn a_rebuild_meeting_a_lease_key_of_another_type_writes_nothing() {
    let env = TestEnv::new().await;
    let redis = &env.ctx.redis;
    let lease = redis.keys.showtime_lease(8);
    assert_eq!(
        redis.acquire_leases("me", &[8], 10_000).await.unwrap(),
        vec![LeaseTake::Taken]
    );
    let _: () = env.redis(redis::cmd("DEL").arg(&lease)).await;
    let _: () = env.redis(redis::cmd("SADD").arg(&lease).arg("me")).await;

    let rebuilt = redis
        .rebuild_hash(
            "me",
            "op-1",
            8,
            &[
                ("A-1".into(), SeatState::Free),
                ("A-2".into(), SeatState::Free),
            ],
        )
        .await
        .unwrap();
    assert_eq!(rebuilt.reply, Fenced::LeaseLost);
    assert!(rebuilt.replaced.is_empty());
    assert_eq!(key_type(&env, &redis.keys.seat(8)).await, "none", "no hash");
    assert_eq!(
        key_type(&env, &redis.keys.done(8)).await,
        "none",
        "no done record"
    );
    let members: Vec<String> = env.redis(redis::cmd("SMEMBERS").arg(&lease)).await;
    assert_eq!(members, ["me"]);
}

/// Rule 3: the cancel is conditional; an order paid meanwhile stays paid.
#[tokio::test]
async fn an_expired_order_paid_just_before_the_cancel_is_not_cancelled() {
    let env = TestEnv::new().await;
    env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(3, 1, 60, "ON_SALE").await.unwrap();
    let order = env.fx.order(3, "PENDING", &["A-1"], -600).await.unwrap();
    let other = env.fx.order(3, "PENDING", &["A-2"], -600).await.unwrap();
    let deadline = env.ctx.mysql.now_utc().await.unwrap() - chrono::Duration::seconds(60);
    let found = env
        .ctx
        .mysql
        .expired_page(deadline, None, 10, env.ctx.scope(&[]))
        .await
        .unwrap();
    assert_eq!(found.orders.len(), 2);

    assert!(
        env.fx.pay(order).await.unwrap(),
        "the customer pays after our scan"
    );
    let cancelled = env
        .ctx
        .mysql
        .cancel_expired(&[order, other], deadline, deadline, &RUN)
        .await
        .unwrap()
        .cancelled;
    assert_eq!(
        cancelled.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![other]
    );
    assert_eq!(env.fx.order_status(order).await.unwrap(), "PAID");
    let active: Option<i8> = sqlx::query_scalar("SELECT active FROM order_seat WHERE order_id = ?")
        .bind(order)
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap();
    assert_eq!(active, Some(1));

    // A retry after a lost commit reply reports the cancel it already made.
    let since = deadline;
    let again = env
        .ctx
        .mysql
        .cancel_expired(&[order, other], deadline, since, &RUN)
        .await
        .unwrap()
        .cancelled;
    assert_eq!(
        again
            .iter()
            .map(|c| (c.id, c.seats.clone()))
            .collect::<Vec<_>>(),
        vec![(other, vec![(3, "A-2".to_string())])]
    );
    assert_eq!(env.fx.order_status(order).await.unwrap(), "PAID");
}

/// missing-hashes never clobbers a hash that appeared after detection.
#[tokio::test]
async fn a_hash_created_between_detection_and_rebuild_is_not_replaced() {
    let env = TestEnv::new().await;
    let redis = &env.ctx.redis;
    assert_eq!(
        redis.acquire_leases("me", &[4], 10_000).await.unwrap(),
        vec![LeaseTake::Taken]
    );
    // seatflow warms the hash and sells A-1 after our scan saw it missing.
    env.fx.warm(4, &[("A-1", "1"), ("A-2", "0")]).await.unwrap();
    let out = redis
        .rebuild_hash(
            "me",
            "op-2",
            4,
            &[
                ("A-1".into(), SeatState::Free),
                ("A-2".into(), SeatState::Free),
            ],
        )
        .await
        .unwrap();
    assert_eq!(out.reply, Fenced::Done(false));
    assert_eq!(
        env.fx.seat_value(4, "A-1").await.unwrap().as_deref(),
        Some("1")
    );
}

/// Rule 8: bad data is counted, logged and left alone; the run goes on.
#[tokio::test]
async fn bad_data_is_reported_and_the_run_goes_on() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.hall(2, 0, 0).await.unwrap(); // a hall with no seats
    env.fx.showtime(11, 1, 10, "ON_SALE").await.unwrap();
    env.fx.showtime(12, 1, 20, "ON_SALE").await.unwrap();
    env.fx.showtime(13, 2, 30, "ON_SALE").await.unwrap();
    env.fx.showtime(14, 1, 40, "ON_SALE").await.unwrap();
    env.fx
        .warm_all(11, &seats, &[("A-1", "x"), ("Z-9", "1")])
        .await
        .unwrap();
    let _: () = env
        .redis(
            redis::cmd("SET")
                .arg(env.ctx.redis.keys.seat(12))
                .arg("not a hash"),
        )
        .await;
    env.fx.warm_all(14, &seats, &[("A-2", "1")]).await.unwrap(); // real drift

    let report = env.once(&Kind::ALL).await;
    assert_eq!(report.exit_code(), 0, "{}", report.to_text());
    let orphan = report
        .jobs
        .iter()
        .find(|j| j.kind == Kind::OrphanLocks)
        .unwrap();
    // "x", Z-9, the string key and the empty hall: counted once, by one job.
    let counted: Vec<(Kind, u64)> = report
        .jobs
        .iter()
        .filter(|j| j.invalid_data > 0)
        .map(|j| (j.kind, j.invalid_data))
        .collect();
    assert_eq!(counted, vec![(Kind::PaidSeats, 4)], "{report:?}");
    assert_eq!(orphan.fixed, 1);
    assert_eq!(
        env.fx.seat_value(11, "A-1").await.unwrap().as_deref(),
        Some("x")
    );
    assert_eq!(
        env.fx.seat_value(11, "Z-9").await.unwrap().as_deref(),
        Some("1")
    );
    assert_eq!(
        env.fx.seat_value(14, "A-2").await.unwrap().as_deref(),
        Some("0")
    );
    let kind: String = env
        .redis(redis::cmd("TYPE").arg(env.ctx.redis.keys.seat(12)))
        .await;
    assert_eq!(kind, "string");
    assert!(
        env.fx.hash(13).await.unwrap().is_empty(),
        "no hash for a hall without seats"
    );
}

/// Rule 4: orphans are suspects first; an in-flight hold whose order
/// commits within the grace period is never released.
#[tokio::test]
async fn orphans_wait_out_the_grace_period_and_in_flight_holds_survive() {
    // a real orphan. A-2: a customer's hold whose order is being written.
    let env = TestEnv::with_grace_on(9, 3, &[("A-1", "1"), ("A-2", "1")]).await;

    for _ in 0..2 {
        let r = env.job(Kind::OrphanLocks).await;
        assert_eq!((r.drift, r.deferred, r.fixed), (2, 2, 0), "{r:?}");
    }
    let suspects: std::collections::HashMap<String, String> = env
        .redis(redis::cmd("HGETALL").arg(env.ctx.redis.keys.suspect(9)))
        .await;
    assert_eq!(suspects.len(), 2);
    assert!(suspects["A-1"].starts_with("1@"));

    // The customer's order commits; then the grace period passes for both.
    env.fx.order(9, "PENDING", &["A-2"], 900).await.unwrap();
    env.age_suspect(9, "A-1", "1", Duration::from_secs(121))
        .await;
    env.age_suspect(9, "A-2", "1", Duration::from_secs(121))
        .await;

    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!((r.drift, r.deferred, r.fixed), (1, 0, 1), "{r:?}");
    assert_eq!(
        env.fx.seat_value(9, "A-1").await.unwrap().as_deref(),
        Some("0")
    );
    assert_eq!(
        env.fx.seat_value(9, "A-2").await.unwrap().as_deref(),
        Some("1")
    );
    let suspects: std::collections::HashMap<String, String> = env
        .redis(redis::cmd("HGETALL").arg(env.ctx.redis.keys.suspect(9)))
        .await;
    assert!(
        suspects.is_empty(),
        "records are cleared once repaired or no longer orphaned: {suspects:?}"
    );
}

/// Rule 4: a suspect whose value changed restarts its clock.
#[tokio::test]
async fn a_suspect_seen_non_orphan_starts_over() {
    let env = TestEnv::with_grace_on(6, 2, &[("A-1", "2")]).await;
    env.age_suspect(6, "A-1", "1", Duration::from_secs(600))
        .await; // an old orphan-lock record
    let r = env.job(Kind::SoldOrphans).await;
    assert_eq!(
        (r.deferred, r.fixed),
        (1, 0),
        "an orphan-lock record does not count for a sold orphan"
    );
    assert_eq!(
        env.fx.seat_value(6, "A-1").await.unwrap().as_deref(),
        Some("2")
    );
}

/// Rule 4: a suspect seen again keeps its first-seen time. A run records
/// only seats its scan found without a record, so a second record of the
/// same seat comes from a run that scanned before the first record was
/// written (another replica, or an overlapping `once`): `record_suspects.lua`
/// keeps the record of the same value, so the grace clock does not restart.
/// A record of another value is replaced: the seat was not orphaned the same
/// way throughout.
#[tokio::test]
async fn a_suspect_recorded_again_keeps_its_first_seen_time() {
    let env = TestEnv::new().await;
    let redis = &env.ctx.redis;
    let record = |seat: &str, encoded: &str| SuspectOp::Record {
        seat: seat.into(),
        encoded: encoded.into(),
    };
    redis
        .update_suspects(
            &[(9, vec![record("A-1", "1@1000"), record("A-2", "2@1000")])],
            60_000,
        )
        .await
        .unwrap();

    redis
        .update_suspects(
            &[(9, vec![record("A-1", "1@5000"), record("A-2", "1@5000")])],
            60_000,
        )
        .await
        .unwrap();
    let mut records: Vec<(String, String)> = env
        .redis(redis::cmd("HGETALL").arg(redis.keys.suspect(9)))
        .await;
    records.sort();
    assert_eq!(
        records,
        [
            ("A-1".to_string(), "1@1000".to_string()),
            ("A-2".to_string(), "1@5000".to_string())
        ],
        "A-1 keeps its first sighting; A-2, seen with another value, starts over"
    );
}

/// Rule 5 and 8 together: dry run over bad data writes nothing either.
#[tokio::test]
async fn dry_run_records_no_suspects() {
    let env = TestEnv::with_grace_on(2, 2, &[("A-1", "1")]).await;
    let r = env.dry(&[Kind::OrphanLocks]).await;
    assert_eq!((r.jobs[0].drift, r.jobs[0].deferred), (1, 1));
    let exists: i64 = env
        .redis(redis::cmd("EXISTS").arg(env.ctx.redis.keys.suspect(2)))
        .await;
    assert_eq!(exists, 0);
}

/// Rule 9: a retried repair whose first reply was lost is answered, not
/// redone, so each repair is applied and audited exactly once.
#[tokio::test]
async fn a_retried_repair_is_applied_once() {
    let env = TestEnv::new().await;
    let redis = &env.ctx.redis;
    env.fx.warm(3, &[("A-1", "1")]).await.unwrap();
    assert_eq!(
        redis.acquire_leases("me", &[3], 10_000).await.unwrap(),
        vec![LeaseTake::Taken]
    );
    let batch = [SeatBatch::new(
        3,
        vec![release("A-1", Some(SeatState::Locked))],
    )];
    let first = redis.repair_seats("me", &batch).await.unwrap();
    // The application takes the seat again before our retry arrives.
    env.fx.warm(3, &[("A-1", "1")]).await.unwrap();
    let retry = redis.repair_seats("me", &batch).await.unwrap();
    assert_eq!(first[0].reply.as_ref().unwrap(), &Fenced::Done(vec![true]));
    assert_eq!(
        retry[0].reply.as_ref().unwrap(),
        &Fenced::Done(vec![true]),
        "the first reply"
    );
    assert_eq!(
        env.fx.seat_value(3, "A-1").await.unwrap().as_deref(),
        Some("1"),
        "not redone"
    );
}

/// Showtime 4 (a 1×2 hall) with a 120 s grace, whose A-1 shows `"1"` and
/// was first seen orphaned ten minutes ago.
async fn orphan_seen_ten_minutes_ago() -> TestEnv {
    let env = TestEnv::with_grace_on(4, 2, &[("A-1", "1")]).await;
    env.age_suspect(4, "A-1", "1", Duration::from_secs(600))
        .await;
    env
}

/// Rule 4: "continuously". A seat first seen orphaned long ago, whose hold
/// was then taken by an order that came and went, is not released on the
/// old record: a new customer's in-flight hold may be what Redis shows now.
#[tokio::test]
async fn order_activity_since_first_seen_restarts_the_grace_period() {
    let env = orphan_seen_ten_minutes_ago().await;
    // Customer A's order for A-1 committed and was cancelled meanwhile; the
    // "1" now belongs to customer B, whose order is still being written.
    env.fx.order(4, "CANCELLED", &["A-1"], 600).await.unwrap();

    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!((r.fixed, r.deferred), (0, 1), "{r:?}");
    assert_eq!(
        env.fx.seat_value(4, "A-1").await.unwrap().as_deref(),
        Some("1")
    );
    let record = env.suspect(4, "A-1").await.unwrap();
    let now = env.ctx.redis.server_time_ms().await.unwrap();
    assert!(
        now - record.first_seen_ms < 60_000,
        "the clock restarted: {record:?}"
    );
    assert!(
        record.rows.is_some(),
        "marked with the rows it read: {record:?}"
    );
}

/// A CANCELLED order on `seat` whose times (`created_at`, `expires_at`,
/// `cancelled_at`) the application wrote these many seconds ago, as an
/// order of the past or a clock behind would.
async fn cancelled_order_dated(env: &TestEnv, showtime: i64, seat: &str, ago: [i64; 3]) {
    let order = env
        .fx
        .order(showtime, "CANCELLED", &[seat], 600)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE ticket_order SET created_at = UTC_TIMESTAMP(3) - INTERVAL ? SECOND, \
         expires_at = UTC_TIMESTAMP(3) - INTERVAL ? SECOND, \
         cancelled_at = UTC_TIMESTAMP(3) - INTERVAL ? SECOND WHERE id = ?",
    )
    .bind(ago[0])
    .bind(ago[1])
    .bind(ago[2])
    .bind(order)
    .execute(env.ctx.mysql.pool())
    .await
    .unwrap();
}

/// Rule 4's "continuously" in MySQL's own terms: a record marked with the
/// seat's rows (as a confirmation writes it) is continuous while the rows are
/// as marked, whatever the clocks say. A-1: an order came and went since,
/// written by an application whose clock is twenty minutes behind (every
/// time it wrote is older than the record): not continuous, the grace
/// restarts (by the times alone it would be released). A-2: its order
/// ended a second before the record's first sighting, and its rows are as
/// marked: released (by the times alone, within the clocks' slack, its
/// grace would start over).
#[tokio::test]
async fn a_record_marked_with_the_seats_rows_compares_rows_not_clocks() {
    let env = TestEnv::with_grace_on(4, 2, &[("A-1", "1"), ("A-2", "1")]).await;
    cancelled_order_dated(&env, 4, "A-2", [700, 650, 601]).await;
    for seat in ["A-1", "A-2"] {
        env.mark_suspect(4, seat, "1", Duration::from_secs(600))
            .await;
    }
    cancelled_order_dated(&env, 4, "A-1", [1200, 600, 1200]).await;

    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!((r.fixed, r.deferred), (1, 1), "{r:?}");
    assert_eq!(
        env.fx.seat_value(4, "A-1").await.unwrap().as_deref(),
        Some("1"),
        "its rows changed since the record: not released"
    );
    assert_eq!(
        env.fx.seat_value(4, "A-2").await.unwrap().as_deref(),
        Some("0"),
        "its rows as marked: released"
    );
}

/// Rule 4's "continuously", judged by an order's latest time: an order
/// created before the seat was first seen orphaned, and cancelled after it,
/// came and went since (its cancel is activity on the seat), so the grace
/// restarts; its creation alone would say it ended before the record. An
/// order that ended before the first sighting restarts nothing.
#[tokio::test]
async fn an_order_cancelled_after_first_seen_restarts_the_grace_period() {
    let env = orphan_seen_ten_minutes_ago().await;
    cancelled_order_dated(&env, 4, "A-1", [1200, 300, 0]).await;

    // the same, except that its order came and went before the first
    // sighting: nothing since, so the grace ran out and it is released.
    env.fx.warm(4, &[("A-2", "1")]).await.unwrap();
    env.age_suspect(4, "A-2", "1", Duration::from_secs(600))
        .await;
    cancelled_order_dated(&env, 4, "A-2", [1800, 900, 1200]).await;

    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!((r.fixed, r.deferred), (1, 1), "{r:?}");
    assert_eq!(
        env.fx.seat_value(4, "A-1").await.unwrap().as_deref(),
        Some("1")
    );
    assert_eq!(
        env.fx.seat_value(4, "A-2").await.unwrap().as_deref(),
        Some("0"),
        "released: no activity since it was first seen"
    );
}

/// Rule 9: an item that keeps failing is quarantined for the run, counted
/// and surfaced; the others are still repaired; the run is partial.
#[tokio::test]
async fn a_failing_showtime_is_quarantined_and_the_rest_repaired() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    for id in [1, 2] {
        env.fx.showtime(id, 1, 10 * id, "ON_SALE").await.unwrap();
        env.fx.warm_all(id, &seats, &[("A-1", "1")]).await.unwrap();
    }
    // The repair script of showtime 1 keeps failing: the reconciler's Redis
    // user may read its seat hash but not write it (NOPERM). (Our own keys
    // in a wrong shape no longer fail a repair: rule 13, tests/it/repairs/own_keys.rs.)
    let user = seatflow_test_support::AclUser::create(&env, &[1], &[2]).await;
    let mut settings = (*env.ctx.settings).clone();
    settings.redis.url = seatflow_reconciler::config::SecretUrl::new(user.url());
    let ctx = seatflow_reconciler::run::context::Context::connect(settings)
        .await
        .unwrap();
    let report = seatflow_test_support::run(&ctx, &[Kind::OrphanLocks], Default::default()).await;
    let r = &report.jobs[0];
    assert_eq!(
        (r.outcome, r.fixed, r.errors),
        (Outcome::Partial, 1, 1),
        "{r:?}"
    );
    assert_eq!(r.quarantined, vec![1]);
    assert_eq!(r.errors_by_stage.get(&Stage::Redis), Some(&1));
    assert_eq!(report.exit_code(), 1);
    assert!(report.to_text().contains("quarantined for this run"));
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["jobs"][0]["quarantined"], serde_json::json!([1]));
    assert_eq!(
        env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
        Some("1")
    );
    assert_eq!(
        env.fx.seat_value(2, "A-1").await.unwrap().as_deref(),
        Some("0")
    );
}

/// A row lock costs one order, not the run: an expired order whose row the
/// application holds (its payment in flight) and one whose seat row it
/// holds are skipped, not waited for, counted and left as they are;
/// another showtime's expired order is cancelled and its seat released in
/// the same run. Once the locks go, the next run cancels them.
#[tokio::test]
async fn a_row_lock_costs_one_order_not_the_run() {
    let env = TestEnv::new().await;
    env.fx.hall(1, 1, 2).await.unwrap();
    let mut orders = Vec::new();
    for showtime in 1..=3 {
        env.fx.showtime(showtime, 1, 60, "ON_SALE").await.unwrap();
        env.fx
            .warm(showtime, &[("A-1", "1"), ("A-2", "0")])
            .await
            .unwrap();
        orders.push(
            env.fx
                .order(showtime, "PENDING", &["A-1"], -600)
                .await
                .unwrap(),
        );
    }
    let (order_held, seat_held, free) = (orders[0], orders[1], orders[2]);
    let held_order = seatflow_test_support::hold_order_lock(&env, order_held).await;
    let mut held_seat = env.ctx.mysql.pool().begin().await.unwrap();
    sqlx::query("SELECT seat_no FROM order_seat WHERE order_id = ? FOR UPDATE")
        .bind(seat_held)
        .execute(&mut *held_seat)
        .await
        .unwrap();

    let report = env.job(Kind::ExpiredOrders).await;
    assert_eq!(report.outcome, Outcome::Success, "{report:?}");
    assert_eq!(report.fixed, 1, "{report:?}");
    assert_eq!(report.skipped_locked, 2, "{report:?}");
    assert!(report.backlog >= 2, "{report:?}");
    assert_eq!(env.fx.order_status(free).await.unwrap(), "CANCELLED");
    assert_eq!(
        env.fx.seat_value(3, "A-1").await.unwrap().as_deref(),
        Some("0")
    );
    held_order.rollback().await.unwrap();
    held_seat.rollback().await.unwrap();
    for (order, showtime) in [(order_held, 1), (seat_held, 2)] {
        assert_eq!(env.fx.order_status(order).await.unwrap(), "PENDING");
        assert_eq!(
            env.fx.seat_value(showtime, "A-1").await.unwrap().as_deref(),
            Some("1")
        );
    }

    let report = env.job(Kind::ExpiredOrders).await;
    assert_eq!(report.fixed, 2, "{report:?}");
    assert_eq!(report.skipped_locked, 0);
    for order in [order_held, seat_held] {
        assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
    }
}

/// Rule 9: a MySQL lock wait timeout (1205) is transient and retried. sqlx's
/// `code()` is the SQLSTATE (`HY000`), not the server's error number, so a
/// check on `code()` never saw 1205 or 1213.
#[tokio::test]
async fn a_lock_wait_timeout_is_a_transient_error() {
    let env = TestEnv::new().await;
    let order = seatflow_test_support::seed_expired(&env).await;
    let _held = seatflow_test_support::hold_order_lock(&env, order).await;
    let mut conn = env.ctx.mysql.pool().acquire().await.unwrap();
    sqlx::query("SET SESSION innodb_lock_wait_timeout = 1")
        .execute(&mut *conn)
        .await
        .unwrap();
    let waited = sqlx::query("SELECT id FROM ticket_order WHERE id = ? FOR UPDATE")
        .bind(order)
        .execute(&mut *conn)
        .await
        .unwrap_err();
    let e = seatflow_reconciler::error::Error::from(waited);
    assert!(e.is_transient(), "{e}");
}
