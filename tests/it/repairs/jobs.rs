//! Each job against the real Redis and MariaDB: seeded drift is repaired to
//! the contract's expected state, audited, and a second run repairs nothing.

use seatflow_reconciler::error::Stage;
use seatflow_reconciler::model::Kind;
use seatflow_reconciler::run::jobs::report::Outcome;
use seatflow_test_support::{TestEnv, audit_row, seat as value};
use std::time::Duration;

#[tokio::test]
async fn expired_orders_are_cancelled_through_the_cancel_chain() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 6).await.unwrap();
    env.fx.showtime(10, 1, 60, "ON_SALE").await.unwrap();
    let expired = env
        .fx
        .order(10, "PENDING", &["A-1", "A-2"], -600)
        .await
        .unwrap();
    // Past its deadline, but inside the 60 s buffer: left alone.
    let in_buffer = env.fx.order(10, "PENDING", &["A-3"], -20).await.unwrap();
    let live = env.fx.order(10, "PENDING", &["A-4"], 600).await.unwrap();
    env.fx
        .warm_all(
            10,
            &seats,
            &[("A-1", "1"), ("A-2", "1"), ("A-3", "1"), ("A-4", "1")],
        )
        .await
        .unwrap();

    let r = env.job(Kind::ExpiredOrders).await;
    assert_eq!(
        (r.outcome, r.drift, r.fixed),
        (Outcome::Success, 1, 1),
        "{r:?}"
    );
    assert_eq!(env.fx.order_status(expired).await.unwrap(), "CANCELLED");
    let (reason, active): (Option<String>, i64) = sqlx::query_as(
        "SELECT o.cancel_reason, COUNT(os.active) FROM ticket_order o JOIN order_seat os ON os.order_id = o.id WHERE o.id = ? GROUP BY o.id",
    )
    .bind(expired)
    .fetch_one(env.ctx.mysql.pool())
    .await
    .unwrap();
    assert_eq!((reason.as_deref(), active), (Some("RECONCILE_EXPIRED"), 0));
    assert_eq!(value(&env, 10, "A-1").await.as_deref(), Some("0"));
    assert_eq!(value(&env, 10, "A-2").await.as_deref(), Some("0"));
    assert_eq!(value(&env, 10, "A-3").await.as_deref(), Some("1"));
    assert_eq!(env.fx.order_status(in_buffer).await.unwrap(), "PENDING");
    assert_eq!(env.fx.order_status(live).await.unwrap(), "PENDING");

    assert_eq!(
        env.audit().await,
        vec![
            audit_row(
                "expired_orders",
                "order_cancelled",
                10,
                None,
                Some(expired),
                "PENDING",
                "CANCELLED"
            ),
            audit_row(
                "expired_orders",
                "seat_released",
                10,
                Some("A-1"),
                Some(expired),
                "1",
                "0"
            ),
            audit_row(
                "expired_orders",
                "seat_released",
                10,
                Some("A-2"),
                Some(expired),
                "1",
                "0"
            ),
        ]
    );
    let again = env.job(Kind::ExpiredOrders).await;
    assert_eq!((again.drift, again.fixed), (0, 0));
}

#[tokio::test]
async fn paid_seats_are_set_sold_and_lost_holds_restored() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 5).await.unwrap();
    env.fx.showtime(20, 1, 60, "ON_SALE").await.unwrap();
    let paid = env
        .fx
        .order(20, "PAID", &["A-1", "A-2", "A-3"], -600)
        .await
        .unwrap();
    let pending = env.fx.order(20, "PENDING", &["A-4"], 600).await.unwrap();
    // A-1 "1" (pay → "2" window crashed), A-2 "0", A-3 already "2", A-4 pending but "0".
    env.fx
        .warm_all(20, &seats, &[("A-1", "1"), ("A-3", "2")])
        .await
        .unwrap();

    let r = env.job(Kind::PaidSeats).await;
    assert_eq!(
        (r.outcome, r.drift, r.fixed),
        (Outcome::Success, 3, 3),
        "{r:?}"
    );
    let h = env.fx.hash(20).await.unwrap();
    assert_eq!(
        ["A-1", "A-2", "A-3", "A-4", "A-5"].map(|s| h[s].as_str()),
        ["2", "2", "2", "1", "0"]
    );
    assert_eq!(
        env.audit().await,
        vec![
            // Each names the order that explains it.
            audit_row(
                "paid_seats",
                "seat_set",
                20,
                Some("A-1"),
                Some(paid),
                "1",
                "2"
            ),
            audit_row(
                "paid_seats",
                "seat_set",
                20,
                Some("A-2"),
                Some(paid),
                "0",
                "2"
            ),
            audit_row(
                "paid_seats",
                "seat_set",
                20,
                Some("A-4"),
                Some(pending),
                "0",
                "1"
            ),
        ]
    );
    let again = env.job(Kind::PaidSeats).await;
    assert_eq!((again.drift, again.fixed), (0, 0));
}

/// A raise waits for no grace, whatever suspect record its seat has: a hold
/// seen before its order came (an orphan-lock suspect, `"1@…"`) whose order
/// is now paid is set sold at once. (Found by the soak: the payment's check
/// took the orphan lock's record for its own, saw the order as activity
/// since, and started a grace on the raise: paid seats a grace late.)
#[tokio::test]
async fn a_paid_seat_whose_hold_was_a_suspect_is_raised_at_once() {
    let env = TestEnv::with_grace_on(20, 2, &[("A-1", "1"), ("A-2", "1")]).await;
    // Seen as orphan locks by a check a moment ago (A-2: by a pass), then
    // ordered and paid.
    env.mark_suspect(20, "A-1", "1", Duration::from_secs(1))
        .await;
    env.age_suspect(20, "A-2", "1", Duration::from_secs(1))
        .await;
    env.fx
        .order(20, "PAID", &["A-1", "A-2"], -600)
        .await
        .unwrap();

    // With orphan-locks, as a check and a pass run them: the records are read.
    let report = env.once(&[Kind::PaidSeats, Kind::OrphanLocks]).await;
    let r = &report.jobs[0];
    assert_eq!(
        (r.kind, r.drift, r.fixed, r.deferred),
        (Kind::PaidSeats, 2, 2, 0),
        "{r:?}"
    );
    for seat in ["A-1", "A-2"] {
        assert_eq!(value(&env, 20, seat).await.as_deref(), Some("2"), "{seat}");
    }
}

#[tokio::test]
async fn missing_hashes_are_rebuilt_with_occupancy() {
    let env = TestEnv::new().await;
    env.fx.hall(1, 2, 3).await.unwrap();
    env.fx.showtime(30, 1, 60, "ON_SALE").await.unwrap();
    env.fx.showtime(31, 1, 60, "CLOSED").await.unwrap();
    env.fx.order(30, "PAID", &["A-1"], -600).await.unwrap();
    env.fx.order(30, "PENDING", &["B-2"], 600).await.unwrap();
    env.fx.order(30, "CANCELLED", &["B-3"], -600).await.unwrap();

    let r = env.job(Kind::MissingHashes).await;
    assert_eq!(
        (r.outcome, r.drift, r.fixed),
        (Outcome::Success, 1, 1),
        "{r:?}"
    );
    let h = env.fx.hash(30).await.unwrap();
    let mut got: Vec<_> = h.iter().map(|(k, v)| format!("{k}={v}")).collect();
    got.sort();
    assert_eq!(got, ["A-1=2", "A-2=0", "A-3=0", "B-1=0", "B-2=1", "B-3=0"]);
    assert!(
        env.fx.hash(31).await.unwrap().is_empty(),
        "CLOSED showtimes are not warmed"
    );
    assert_eq!(
        env.audit().await,
        vec![audit_row(
            "missing_hashes",
            "hash_rebuilt",
            30,
            None,
            None,
            "absent",
            "6 seats"
        )]
    );
    let again = env.job(Kind::MissingHashes).await;
    assert_eq!((again.drift, again.fixed), (0, 0));
}

#[tokio::test]
async fn orphan_locks_are_released_and_real_holds_kept() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(40, 1, 60, "ON_SALE").await.unwrap();
    env.fx.order(40, "PENDING", &["A-2"], 600).await.unwrap();
    env.fx.order(40, "CANCELLED", &["A-3"], -600).await.unwrap();
    env.fx
        .warm_all(40, &seats, &[("A-1", "1"), ("A-2", "1"), ("A-3", "1")])
        .await
        .unwrap();

    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!(
        (r.outcome, r.drift, r.fixed),
        (Outcome::Success, 2, 2),
        "{r:?}"
    );
    let h = env.fx.hash(40).await.unwrap();
    assert_eq!(
        ["A-1", "A-2", "A-3", "A-4"].map(|s| h[s].as_str()),
        ["0", "1", "0", "0"]
    );
    assert_eq!(
        env.audit().await,
        vec![
            audit_row(
                "orphan_locks",
                "seat_released",
                40,
                Some("A-1"),
                None,
                "1",
                "0"
            ),
            audit_row(
                "orphan_locks",
                "seat_released",
                40,
                Some("A-3"),
                None,
                "1",
                "0"
            ),
        ]
    );
    let again = env.job(Kind::OrphanLocks).await;
    assert_eq!((again.drift, again.fixed), (0, 0));
}

#[tokio::test]
async fn sold_orphans_go_to_the_expected_value() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(50, 1, 60, "ON_SALE").await.unwrap();
    env.fx.order(50, "REFUNDED", &["A-1"], -600).await.unwrap();
    let pending = env.fx.order(50, "PENDING", &["A-2"], 600).await.unwrap();
    env.fx.order(50, "PAID", &["A-3"], -600).await.unwrap();
    env.fx
        .warm_all(50, &seats, &[("A-1", "2"), ("A-2", "2"), ("A-3", "2")])
        .await
        .unwrap();

    let r = env.job(Kind::SoldOrphans).await;
    assert_eq!(
        (r.outcome, r.drift, r.fixed),
        (Outcome::Success, 2, 2),
        "{r:?}"
    );
    let h = env.fx.hash(50).await.unwrap();
    assert_eq!(
        ["A-1", "A-2", "A-3", "A-4"].map(|s| h[s].as_str()),
        ["0", "1", "2", "0"]
    );
    assert_eq!(
        env.audit().await,
        vec![
            audit_row(
                "sold_orphans",
                "seat_released",
                50,
                Some("A-1"),
                None,
                "2",
                "0"
            ),
            // Lowered to the pending order's hold: named. (A-1's refunded
            // order holds nothing: none.)
            audit_row(
                "sold_orphans",
                "seat_set",
                50,
                Some("A-2"),
                Some(pending),
                "2",
                "1"
            ),
        ]
    );
    let again = env.job(Kind::SoldOrphans).await;
    assert_eq!((again.drift, again.fixed), (0, 0));
}

/// Seeds one showtime with drift of every kind.
async fn seed_every_drift(env: &TestEnv) {
    let seats = env.fx.hall(1, 2, 4).await.unwrap();
    env.fx.showtime(60, 1, 60, "ON_SALE").await.unwrap();
    env.fx.showtime(61, 1, 90, "ON_SALE").await.unwrap(); // hash missing
    env.fx.order(60, "PAID", &["A-1"], -600).await.unwrap();
    env.fx.order(60, "PENDING", &["A-2"], -600).await.unwrap(); // expired
    env.fx.order(60, "REFUNDED", &["A-4"], -600).await.unwrap();
    env.fx.order(61, "PAID", &["B-1"], -600).await.unwrap();
    env.fx
        .warm_all(
            60,
            &seats,
            &[("A-1", "1"), ("A-2", "1"), ("A-3", "1"), ("A-4", "2")],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn dry_run_writes_nothing_but_reports_every_drift() {
    let env =
        TestEnv::with(|s| s.reconcile.orphan_grace = std::time::Duration::from_secs(120)).await;
    seed_every_drift(&env).await;
    let redis_before = env.redis_snapshot().await;
    let mysql_before = env.mysql_snapshot().await;

    let report = env.dry(&Kind::ALL).await;

    assert_eq!(
        env.redis_snapshot().await,
        redis_before,
        "dry run wrote to Redis"
    );
    assert_eq!(
        env.mysql_snapshot().await,
        mysql_before,
        "dry run wrote to MySQL"
    );
    assert!(report.dry_run);
    for job in &report.jobs {
        assert!(job.drift > 0, "{:?} found no drift", job.kind);
        assert_eq!(job.fixed, 0);
        assert_eq!(job.outcome, Outcome::Success);
    }
    assert_eq!(report.total_fixed(), 0);
}

#[tokio::test]
async fn a_full_run_converges_and_a_second_fixes_nothing() {
    let env = TestEnv::new().await;
    seed_every_drift(&env).await;
    let first = env.once(&Kind::ALL).await;
    assert_eq!(first.exit_code(), 0, "{}", first.to_text());
    for job in &first.jobs {
        assert!(job.fixed > 0, "{:?} fixed nothing", job.kind);
    }
    let h = env.fx.hash(60).await.unwrap();
    let mut got: Vec<_> = h.iter().map(|(k, v)| format!("{k}={v}")).collect();
    got.sort();
    assert_eq!(
        got,
        [
            "A-1=2", "A-2=0", "A-3=0", "A-4=0", "B-1=0", "B-2=0", "B-3=0", "B-4=0"
        ]
    );
    assert_eq!(env.fx.hash(61).await.unwrap()["B-1"], "2");
    let second = env.once(&Kind::ALL).await;
    assert_eq!(second.total_fixed(), 0, "{}", second.to_text());
    assert!(second.jobs.iter().all(|j| j.drift == 0));
    let runs: Vec<(String, i64)> =
        sqlx::query_as("SELECT outcome, fixed FROM reconcile_run ORDER BY started_at")
            .fetch_all(env.ctx.mysql.pool())
            .await
            .unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0], ("success".into(), first.total_fixed() as i64));
}

#[tokio::test]
async fn batch_size_bounds_repairs_and_reports_backlog() {
    let env = TestEnv::with(|s| s.job_mut(Kind::OrphanLocks).batch_size = 2).await;
    let seats = env.fx.hall(1, 1, 5).await.unwrap();
    env.fx.showtime(70, 1, 60, "ON_SALE").await.unwrap();
    let all: Vec<(&str, &str)> = seats.iter().map(|s| (s.as_str(), "1")).collect();
    env.fx.warm(70, &all).await.unwrap();

    let mut fixed = Vec::new();
    for _ in 0..3 {
        let r = env.job(Kind::OrphanLocks).await;
        fixed.push((r.fixed, r.backlog));
    }
    assert_eq!(fixed, vec![(2, 3), (2, 1), (1, 0)]);
}

#[tokio::test]
async fn scan_limit_spreads_the_sweep_over_runs_with_a_cursor() {
    let env = TestEnv::with(|s| {
        s.reconcile.scan_chunk = 1;
        s.job_mut(Kind::OrphanLocks).scan_limit = 2;
    })
    .await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    for i in 0..5 {
        env.fx
            .showtime(80 + i, 1, 10 * (i + 1), "ON_SALE")
            .await
            .unwrap();
        env.fx
            .warm_all(80 + i, &seats, &[("A-1", "1")])
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = env.job(Kind::OrphanLocks).await;
        seen.push((r.scanned, r.fixed, r.backlog));
    }
    // Soonest first: 80, 81 | 82, 83 | 84, then back to the start.
    assert_eq!(seen, vec![(2, 2, 3), (2, 2, 1), (1, 1, 0)]);
    for i in 0..5 {
        assert_eq!(value(&env, 80 + i, "A-1").await.as_deref(), Some("0"));
    }
    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!(
        (r.scanned, r.fixed),
        (2, 0),
        "the cursor wrapped to the soonest showtimes"
    );
}

/// `n` ON_SALE showtimes from id `first` on, starting 10, 20, … minutes
/// from now, in one two-seat hall, their hashes warm and consistent.
async fn showtimes_ten_minutes_apart(env: &TestEnv, first: i64, n: i64) {
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    for i in 0..n {
        let id = first + i;
        env.fx
            .showtime(id, 1, 10 * (i + 1), "ON_SALE")
            .await
            .unwrap();
        env.fx.warm_all(id, &seats, &[]).await.unwrap();
    }
}

/// A pass on a schedule walks the estate as a ring: begun mid-estate (a
/// previous pass stopped there), it goes on from the start once it reaches
/// the end, back to where it began, reading each showtime once, and the
/// next pass begins where it did. The scan limit still stops it, and
/// `once` still ends at the estate's end.
#[tokio::test]
async fn a_pass_goes_on_from_the_start_back_to_where_it_began() {
    use seatflow_reconciler::run::context::Context;
    use seatflow_reconciler::run::jobs::RunOptions;
    let env = TestEnv::with(|s| {
        s.reconcile.scan_chunk = 2;
        s.pass.soonest_window = Duration::ZERO;
    })
    .await;
    // The same stores, each seat job scanning at most `limit` a run.
    let limited = |limit: usize| {
        let mut s = (*env.ctx.settings).clone();
        for kind in Kind::SEAT_JOBS {
            s.job_mut(kind).scan_limit = limit;
        }
        Context::connect(s)
    };
    showtimes_ten_minutes_apart(&env, 300, 6).await;
    let pass = |ctx: Context| async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
        let opts = RunOptions {
            deadline: Some(deadline),
            ..RunOptions::default()
        };
        let report = seatflow_test_support::run(&ctx, &Kind::SEAT_JOBS, opts).await;
        let job = |kind| report.jobs.iter().find(|j| j.kind == kind).unwrap();
        let orphans = job(Kind::OrphanLocks);
        let paid = job(Kind::PaidSeats).scanned;
        (orphans.scanned, orphans.fixed, orphans.backlog, paid)
    };
    let key = env
        .ctx
        .redis
        .keys
        .shard_cursor(Kind::OrphanLocks.label(), env.ctx.shard);
    let get = redis::cmd("GET").arg(&key).clone();
    let cursor = || env.redis::<Option<String>>(&get);
    // A pass that stopped after 302.
    let three = limited(3).await.unwrap();
    assert_eq!(pass(three).await, (3, 0, 3, 3));
    let began = cursor().await;
    // Orphan locks before and after where the next pass begins.
    env.fx.warm(300, &[("A-1", "1")]).await.unwrap();
    env.fx.warm(304, &[("A-1", "1")]).await.unwrap();
    assert_eq!(
        pass(env.ctx.clone()).await,
        (6, 2, 0, 6),
        "303..305, then 300..302"
    );
    assert_eq!(value(&env, 300, "A-1").await.as_deref(), Some("0"));
    assert_eq!(
        cursor().await,
        began,
        "the next pass begins where this one did"
    );

    // The scan limit stops the ring: 303..305 and 300; 301 and 302 are left.
    let four = limited(4).await.unwrap();
    assert_eq!(pass(four).await, (4, 0, 2, 4));
    // `once` from there ends at the estate's end: 301..305.
    assert_eq!(env.job(Kind::OrphanLocks).await.scanned, 5);
    // Now orphan-locks begins at the start, the others after 300: jobs
    // apart sweep one by one to the estate's end, never round it (the
    // first would take all of a pass that cannot fit and leave the others
    // none).
    assert_eq!(pass(env.ctx.clone()).await, (6, 0, 0, 5));
}

#[tokio::test]
async fn showtime_filter_limits_the_run() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    for id in [90, 91] {
        env.fx.showtime(id, 1, 60, "ON_SALE").await.unwrap();
        env.fx.warm_all(id, &seats, &[("A-1", "1")]).await.unwrap();
    }
    let r = seatflow_test_support::run(
        &env.ctx,
        &[Kind::OrphanLocks],
        seatflow_reconciler::run::jobs::RunOptions {
            dry_run: false,
            showtimes: vec![91],
            ..Default::default()
        },
    )
    .await;
    assert_eq!((r.jobs[0].scanned, r.jobs[0].fixed), (1, 1));
    assert_eq!(value(&env, 90, "A-1").await.as_deref(), Some("1"));
    assert_eq!(value(&env, 91, "A-1").await.as_deref(), Some("0"));
}

#[tokio::test]
async fn shards_cover_every_showtime_exactly_once() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    let ids: Vec<i64> = (100..123).collect();
    for &id in &ids {
        env.fx.showtime(id, 1, id, "ON_SALE").await.unwrap();
        env.fx.order(id, "PENDING", &["A-2"], -600).await.unwrap();
    }
    for total in [1u32, 2, 3, 5] {
        for &id in &ids {
            env.fx.warm_all(id, &seats, &[("A-1", "1")]).await.unwrap();
        }
        sqlx::query("DELETE FROM reconcile_fix")
            .execute(env.ctx.mysql.pool())
            .await
            .unwrap();
        let mut scanned = 0;
        for index in 0..total {
            let mut settings = (*env.ctx.settings).clone();
            settings.sharding.total = total;
            settings.sharding.index = i64::from(index);
            let shard = seatflow_reconciler::run::context::Context::connect(settings)
                .await
                .unwrap();
            let r = seatflow_test_support::run(
                &shard,
                &[Kind::ExpiredOrders, Kind::OrphanLocks],
                Default::default(),
            )
            .await;
            assert_eq!(r.exit_code(), 0, "{}", r.to_text());
            scanned += r.jobs[1].scanned;
        }
        assert_eq!(
            scanned,
            ids.len() as u64,
            "{total} shards scan every showtime once"
        );
        let per_showtime: Vec<(i64, i64, i64)> = sqlx::query_as(
            "SELECT showtime_id, CAST(SUM(job = 'orphan_locks') AS SIGNED), CAST(SUM(kind = 'order_cancelled') AS SIGNED) \
             FROM reconcile_fix GROUP BY showtime_id ORDER BY showtime_id",
        )
        .fetch_all(env.ctx.mysql.pool())
        .await
        .unwrap();
        let covered: Vec<i64> = per_showtime.iter().map(|r| r.0).collect();
        assert_eq!(covered, ids, "{total} shards");
        // The expired orders were cancelled in the first round (one shard each).
        let expected_cancels = if total == 1 { 1 } else { 0 };
        assert!(
            per_showtime
                .iter()
                .all(|r| r.1 == 1 && r.2 == expected_cancels),
            "{total}: {per_showtime:?}"
        );
    }
}

#[tokio::test]
async fn seat_jobs_run_together_read_each_hash_once() {
    let env = TestEnv::with(|s| s.reconcile.scan_chunk = 5).await;
    let seats = env.fx.hall(1, 2, 5).await.unwrap();
    for id in 1..=30 {
        env.fx.showtime(id, 1, id, "ON_SALE").await.unwrap();
        env.fx.warm_all(id, &seats, &[]).await.unwrap();
    }
    env.fx.warm(7, &[("A-1", "1")]).await.unwrap();
    env.fx.warm(9, &[("B-2", "2")]).await.unwrap();
    let seat_jobs = [
        Kind::PaidSeats,
        Kind::MissingHashes,
        Kind::OrphanLocks,
        Kind::SoldOrphans,
    ];
    let together = env.once(&seat_jobs).await;
    assert_eq!(together.exit_code(), 0, "{}", together.to_text());
    let fixed: Vec<u64> = together.jobs.iter().map(|j| j.fixed).collect();
    assert_eq!(fixed, vec![0, 0, 1, 1]);
    assert!(together.jobs.iter().all(|j| j.scanned == 30));
    // Converged now: compare a shared sweep with a single job's. 6 chunks
    // each: one pipeline per chunk in both cases; four jobs add only their
    // cursor reads and writes (6), where four sweeps would add 18 more.
    let together = env.once(&seat_jobs).await;
    let one = env.once(&[Kind::OrphanLocks]).await;
    assert!(
        together.redis_round_trips <= one.redis_round_trips + 6,
        "together {} vs one job {}",
        together.redis_round_trips,
        one.redis_round_trips
    );
}

#[tokio::test]
async fn a_run_that_ends_exactly_at_the_scan_limit_starts_over_next_time() {
    let env = TestEnv::with(|s| s.job_mut(Kind::OrphanLocks).scan_limit = 2).await;
    showtimes_ten_minutes_apart(&env, 200, 4).await;
    let scanned: Vec<u64> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(env.job(Kind::OrphanLocks).await.scanned);
        }
        v
    };
    // 200, 201 | 202, 203 (the end) | 200, 201: no empty run in between.
    assert_eq!(scanned, vec![2, 2, 2]);
}

#[tokio::test]
async fn reading_the_next_chunk_ahead_needs_no_second_mysql_connection() {
    // The sweep reads chunk k + 1 while it confirms, repairs and audits
    // chunk k. With a single pooled connection that must queue, never wait on
    // itself: a chunk holding a connection while it awaits the read-ahead
    // would time out here.
    let env = TestEnv::with(|s| {
        s.mysql.max_connections = 1;
        s.mysql.connect_timeout = Duration::from_secs(3);
        s.reconcile.scan_chunk = 2;
    })
    .await;
    let seats = env.fx.hall(1, 2, 3).await.unwrap();
    for id in 1..=9 {
        env.fx.showtime(id, 1, id, "ON_SALE").await.unwrap();
        if id % 3 != 0 {
            env.fx.warm_all(id, &seats, &[]).await.unwrap();
            env.fx
                .warm(id, &[("A-1", "1"), ("B-2", "2")])
                .await
                .unwrap();
        }
    }
    let report = env
        .once(&[
            Kind::PaidSeats,
            Kind::MissingHashes,
            Kind::OrphanLocks,
            Kind::SoldOrphans,
        ])
        .await;
    assert_eq!(report.exit_code(), 0, "{}", report.to_text());
    let fixed: Vec<u64> = report.jobs.iter().map(|j| j.fixed).collect();
    assert_eq!(fixed, vec![0, 3, 6, 6]);
    assert!(report.jobs.iter().all(|j| j.scanned == 9));
    assert_eq!(env.audit().await.len(), 15);
}

/// Eight showtimes of 80 seats, every seat held with no order: 640 orphan
/// locks, more than one audit batch (500), so one batch is written in the
/// background while the sweep goes on.
async fn many_orphan_locks(env: &TestEnv) -> u64 {
    let seats = env.fx.hall(1, 8, 10).await.unwrap();
    for id in 1..=8 {
        env.fx.showtime(id, 1, id, "ON_SALE").await.unwrap();
        let held: Vec<(&str, &str)> = seats.iter().map(|s| (s.as_str(), "1")).collect();
        env.fx.warm(id, &held).await.unwrap();
    }
    8 * 80
}

#[tokio::test]
async fn every_repair_of_a_run_larger_than_an_audit_batch_is_audited() {
    let env = TestEnv::with(|s| s.job_mut(Kind::OrphanLocks).batch_size = 1000).await;
    let locks = many_orphan_locks(&env).await;
    let report = env.job(Kind::OrphanLocks).await;
    assert_eq!(report.fixed, locks);
    assert_eq!(report.errors, 0);
    assert_eq!(env.audit().await.len() as u64, locks);
}

#[tokio::test]
async fn audit_batches_that_cannot_be_written_are_counted() {
    let env = TestEnv::with(|s| s.job_mut(Kind::OrphanLocks).batch_size = 1000).await;
    let locks = many_orphan_locks(&env).await;
    sqlx::query("RENAME TABLE reconcile_fix TO reconcile_fix_gone")
        .execute(env.ctx.mysql.pool())
        .await
        .unwrap();
    let report = env.job(Kind::OrphanLocks).await;
    // The repairs stand; both batches (the background one of 500 and the
    // last 140) are counted as audit errors.
    assert_eq!(report.fixed, locks);
    assert_eq!(
        report.errors_by_stage.get(&Stage::Audit),
        Some(&2),
        "{report:?}"
    );
}

/// Rule 14, soonest first under a bounded pass: showtimes starting within
/// `pass.soonest_window` are swept in every run, while the cursor works
/// through a far-future estate larger than one run may scan. Without the
/// window, the cursor would move on and the near showtime's drift would wait
/// for the whole estate to come round.
#[tokio::test]
async fn showtimes_starting_soon_are_swept_in_every_bounded_run() {
    let env = TestEnv::with(|s| {
        for kind in Kind::SEAT_JOBS {
            s.job_mut(kind).scan_limit = 5;
        }
    })
    .await;
    assert_eq!(
        env.ctx.settings.pass.soonest_window,
        std::time::Duration::from_secs(6 * 3600)
    );
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    // Two showtimes within the window, thirty days away.
    for (id, starts_in_min) in [(1, 30), (2, 90)]
        .into_iter()
        .chain((0..30).map(|i| (100 + i, 24 * 60 * 30 + i)))
    {
        env.fx
            .showtime(id, 1, starts_in_min, "ON_SALE")
            .await
            .unwrap();
        env.fx.warm_all(id, &seats, &[]).await.unwrap();
    }
    let first = env.once(&Kind::SEAT_JOBS).await;
    assert_eq!(first.jobs[0].scanned, 5);
    // Drift in a soon showtime after the cursor has moved past it.
    env.fx.warm(2, &[("A-1", "1")]).await.unwrap();
    let second = env.once(&Kind::SEAT_JOBS).await;
    let orphans = second
        .jobs
        .iter()
        .find(|j| j.kind == Kind::OrphanLocks)
        .unwrap();
    assert_eq!(
        (orphans.scanned, orphans.fixed),
        (5, 1),
        "the soon showtime was swept again"
    );
    assert_eq!(value(&env, 2, "A-1").await.as_deref(), Some("0"));
    // Meanwhile the cursor moved on through the far estate: 3 more of 30.
    assert_eq!(orphans.backlog, 30 - 6);
}

/// Drift age of an expired order: from its deadline to its cancel (here 10
/// minutes and a little), observed once per cancelled order and exported as
/// `seatflow_reconcile_drift_age_seconds{kind="expired_orders"}`.
#[tokio::test]
async fn an_expired_order_is_repaired_with_its_drift_age() {
    let env = TestEnv::new().await;
    seatflow_test_support::seed_expired(&env).await;
    let report = env.job(Kind::ExpiredOrders).await;
    assert_eq!(report.fixed, 1, "{report:?}");
    let ages: Vec<f64> = report.drift_ages.replay().collect();
    assert_eq!(ages.len(), 1, "{report:?}");
    assert!(
        (600.0..900.0).contains(&ages[0]),
        "10 minutes past the deadline: {} s",
        ages[0]
    );
    let metrics = seatflow_reconciler::metrics::Metrics::new();
    metrics.record(&report);
    let text = metrics.encode();
    assert!(
        text.contains(
            "seatflow_reconcile_drift_age_seconds_bucket{kind=\"expired_orders\",le=\"600\"} 0"
        ) && text.contains(
            "seatflow_reconcile_drift_age_seconds_bucket{kind=\"expired_orders\",le=\"1800\"} 1"
        ),
        "{text}"
    );

    // A dry run finds the drift and observes no age (nothing repaired).
    let env = TestEnv::new().await;
    seatflow_test_support::seed_expired(&env).await;
    let dry = env.dry(&[Kind::ExpiredOrders]).await;
    assert!(dry.jobs[0].drift_ages.count() == 0 && dry.jobs[0].dry_run);
}
