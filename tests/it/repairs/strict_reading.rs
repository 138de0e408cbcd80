//! Rules 15 and 16, "a seat is lowered only when MySQL, in its own terms,
//! shows it free" and "no value read from a store can abort a run", one
//! test per class of data nobody cleaned: seat numbers the collation folds,
//! an order whose seat rows sit in another showtime, `active` other than 1
//! or NULL, zero dates, statuses the contract does not spell, a field
//! missing from a present hash, one problem met by two jobs. Each test
//! fails without its part of the strict reading. (Grace is 0 s here.)

use seatflow_reconciler::model::Kind;
use seatflow_reconciler::ops::inspect;
use seatflow_reconciler::run::jobs::report::{JobReport, Outcome, RunReport};
use seatflow_test_support::{TestEnv, audit_row, ended_well, seat};

fn invalid(report: &RunReport) -> u64 {
    report.jobs.iter().map(|j| j.invalid_data).sum()
}

/// One showtime (id 1) of a 1 x 4 hall, warmed with `values` (the rest "0").
async fn showtime(env: &TestEnv, values: &[(&str, &str)]) {
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.warm_all(1, &seats, values).await.unwrap();
}

/// The user's case and its class: an order's seat spelled so that only the
/// collation matches it to the template seat (`a-1`, `A-1 `, `á-1` are
/// `A-1` to `uq_occupancy`), or only a person's reading does (rule 17:
/// fullwidth letters, a no-break space, a zero-width space, a word joiner,
/// a space inside: Unicode NFKC, case folding,
/// no white space or invisible characters). MySQL, or the customer who
/// reads it, holds the seat with it: a sold seat is not released, a held
/// one not freed, and a rebuilt hash gets no free field for it. The row is
/// reported.
#[tokio::test]
async fn a_seat_named_only_by_the_collation_is_never_lowered() {
    for spelling in [
        "a-1",
        "A-1 ",
        "á-1",
        "A-1  ",
        "Ａ-1",
        "A\u{a0}-1",
        "A\u{200b}-1",
        "ａ\u{2060}-1",
        "A -1",
    ] {
        for (status, value) in [("PAID", "2"), ("PENDING", "1")] {
            let env = TestEnv::new().await;
            showtime(&env, &[("A-1", value), ("A-2", value), ("A-4", value)]).await;
            // The order holds A-2 too, spelled as the template spells it (the
            // respelled rows are named by their own keys, not by their
            // order), and A-4 respelled the same way (two rows named at once).
            let order = env
                .fx
                .order(1, status, &["A-1", "A-2", "A-4"], 900)
                .await
                .unwrap();
            // And a row of the order that names no seat of the hall at all:
            // reported, and it holds nothing.
            sqlx::query(
                "INSERT INTO order_seat (order_id, showtime_id, seat_no, active) VALUES (?, 1, 'Z-9', 1)",
            )
            .bind(order)
            .execute(env.ctx.mysql.pool())
            .await
            .unwrap();
            for seat_no in ["A-1", "A-4"] {
                sqlx::query("UPDATE order_seat SET seat_no = ? WHERE order_id = ? AND seat_no = ?")
                    .bind(spelling.replace('1', &seat_no[2..]))
                    .bind(order)
                    .bind(seat_no)
                    .execute(env.ctx.mysql.pool())
                    .await
                    .unwrap();
            }

            let report = env.once(&Kind::ALL).await;
            ended_well(&report);
            for seat_no in ["A-1", "A-4"] {
                assert_eq!(
                    seat(&env, 1, seat_no).await.as_deref(),
                    Some(value),
                    "{seat_no} {status} {spelling:?}: {}",
                    report.to_text()
                );
            }
            assert!(invalid(&report) >= 1, "{}", report.to_text());
            // The sweep's own read names the row's seat (no repair is even
            // planned): the confirmation is the second line, not the only one.
            let planned: u64 = report.jobs.iter().map(|j| j.drift).sum();
            assert_eq!(planned, 0, "{status} {spelling:?}: {}", report.to_text());

            // The hash lost: rebuilt without a free A-1.
            let _: i64 = env
                .redis(redis::cmd("DEL").arg(env.ctx.redis.keys.seat(1)))
                .await;
            env.once(&Kind::ALL).await;
            let hash = env.fx.hash(1).await.unwrap();
            assert_eq!(hash.get("A-3").map(String::as_str), Some("0"), "rebuilt");
            assert_eq!(hash.get("A-2").map(String::as_str), Some(value), "rebuilt");
            assert_eq!(hash.get("A-1"), None, "{status} {spelling:?}: {hash:?}");
            assert_eq!(hash.get("A-4"), None, "{status} {spelling:?}: {hash:?}");
        }
    }
}

/// The user's case: the template spells the seat composed (`É-1`), the
/// PAID order's row decomposed (`E` + U+0301); to the default collation
/// they differ, to a person they are one seat. `sold-orphans` lowered it
/// `2 -> 0`. It is raised only, never lowered, never rebuilt free; the row
/// is reported (and `inspect` shows it). The cancel chain's release asks
/// the same: an expired order's seat that another order holds under a
/// look-alike name is not released.
#[tokio::test]
async fn a_seat_a_person_reads_as_the_template_seat_is_never_lowered() {
    for (template, row) in [
        ("É-1", "E\u{301}-1"),
        ("Ｂ-1", "B-1"),
        ("C-1", "c\u{200d}-1"),
    ] {
        let env = TestEnv::new().await;
        env.fx.hall(1, 1, 2).await.unwrap();
        sqlx::query(
            "INSERT INTO hall_seat (hall_id, seat_no, row_label, col_no, enabled) VALUES (1, ?, 'Z', 1, 1)",
        )
        .bind(template)
        .execute(env.ctx.mysql.pool())
        .await
        .unwrap();
        env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
        env.fx
            .warm(1, &[("A-1", "1"), ("A-2", "1"), (template, "2")])
            .await
            .unwrap();
        env.fx.order(1, "PAID", &[row], 900).await.unwrap();
        // An expired order on A-2, and a PAID one reading as A-2.
        let expired = env.fx.order(1, "PENDING", &["A-2"], -600).await.unwrap();
        env.fx.order(1, "PAID", &["Ａ-2"], 900).await.unwrap();

        let report = env.once(&Kind::ALL).await;
        ended_well(&report);
        let case = format!("{template:?} {row:?}: {}", report.to_text());
        assert_eq!(
            seat(&env, 1, template).await.as_deref(),
            Some("2"),
            "{case}"
        );
        assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("0"), "{case}");
        assert_eq!(env.fx.order_status(expired).await.unwrap(), "CANCELLED");
        assert_eq!(seat(&env, 1, "A-2").await.as_deref(), Some("1"), "{case}");
        assert!(invalid(&report) >= 1, "{case}");
        let map = inspect::load(&env.ctx, 1).await.unwrap().unwrap();
        assert!(
            map.unknown_rows.iter().any(|r| r.contains("reads as")),
            "{:?}",
            map.unknown_rows
        );

        let _: i64 = env
            .redis(redis::cmd("DEL").arg(env.ctx.redis.keys.seat(1)))
            .await;
        let report = env.once(&Kind::ALL).await;
        ended_well(&report);
        let hash = env.fx.hash(1).await.unwrap();
        assert_eq!(hash.get(template), None, "{case}: {hash:?}");
        assert_eq!(hash.get("A-2"), None, "{case}: {hash:?}");
        assert_eq!(hash.get("A-1").map(String::as_str), Some("0"), "{hash:?}");
    }
}

/// The cancel chain releases the seats of the order's own rows, in their
/// showtime: an expired order whose `order_seat` rows say showtime 2 while
/// the order says showtime 1 frees showtime 2's seat, and never the seat of
/// the same number in showtime 1, where another customer holds it.
#[tokio::test]
async fn the_cancel_chain_releases_the_seat_where_the_order_row_is() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    for id in [1, 2] {
        env.fx.showtime(id, 1, 60, "ON_SALE").await.unwrap();
    }
    // Showtime 1: another customer's hold in flight (its order not yet in).
    env.fx.warm_all(1, &seats, &[("A-1", "1")]).await.unwrap();
    env.fx.warm_all(2, &seats, &[("A-1", "1")]).await.unwrap();
    let order = env.fx.order(1, "PENDING", &["A-1"], -3600).await.unwrap();
    sqlx::query("UPDATE order_seat SET showtime_id = 2 WHERE order_id = ?")
        .bind(order)
        .execute(env.ctx.mysql.pool())
        .await
        .unwrap();

    let r = env.job(Kind::ExpiredOrders).await;
    assert_eq!((r.outcome, r.fixed), (Outcome::Success, 1), "{r:?}");
    assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
    assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("1"), "harmed");
    assert_eq!(seat(&env, 2, "A-1").await.as_deref(), Some("0"));
    let seat_rows: Vec<_> = env
        .audit()
        .await
        .into_iter()
        .filter(|a| a.1 == "seat_released")
        .collect();
    assert_eq!(
        seat_rows,
        vec![audit_row(
            "expired_orders",
            "seat_released",
            2,
            Some("A-1"),
            Some(order),
            "1",
            "0"
        )]
    );
}

/// A chunk's occupancy is read by its orders' ids where they lie close,
/// and by its showtimes' index where they do not; each row is then read
/// with its own order wherever that order is: a showtime's orders at both
/// ends of the order table, another showtime's between them, a row whose
/// order is a showtime's outside the chunk (read by id: its order's
/// showtime differs, a row outside the contract), and a row with no order
/// at all, in a showtime with no order (no ids to bound: read by id too).
/// The confirmation reads the rows of a showtime's orders that sit in
/// another showtime the same way: a lock whose order's row sits elsewhere
/// is not released, though the showtime's orders are far apart.
#[tokio::test]
async fn a_chunks_rows_are_read_with_their_orders_wherever_the_orders_are() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    for (id, status) in [
        (1, "ON_SALE"),
        (2, "ON_SALE"),
        (3, "CLOSED"),
        (4, "ON_SALE"),
    ] {
        env.fx.showtime(id, 1, 60 + id, status).await.unwrap();
    }
    let pool = env.ctx.mysql.pool();
    let early = env.fx.order(1, "PENDING", &["A-1"], 900).await.unwrap();
    let between = env.fx.order(2, "PAID", &["A-3"], 900).await.unwrap();
    let elsewhere = env.fx.order(3, "PAID", &["A-4"], 900).await.unwrap();
    let away = env.fx.order(1, "PENDING", &["A-3"], 900).await.unwrap();
    for (order, to) in [(elsewhere, 1), (away, 4)] {
        sqlx::query("UPDATE order_seat SET showtime_id = ? WHERE order_id = ?")
            .bind(to)
            .bind(order)
            .execute(pool)
            .await
            .unwrap();
    }
    sqlx::query("ALTER TABLE ticket_order AUTO_INCREMENT = 9000000")
        .execute(pool)
        .await
        .unwrap();
    let late = env.fx.order(1, "PAID", &["A-2"], 900).await.unwrap();
    assert!(early < between && between < late && late >= 9_000_000);
    sqlx::query(
        "INSERT INTO order_seat (order_id, showtime_id, seat_no, active) VALUES (987654, 4, 'A-1', 1)",
    )
    .execute(pool)
    .await
    .unwrap();
    env.fx
        .warm_all(1, &seats, &[("A-3", "1"), ("A-4", "1")])
        .await
        .unwrap();
    env.fx.warm_all(2, &seats, &[]).await.unwrap();
    env.fx.warm_all(4, &seats, &[("A-1", "1")]).await.unwrap();

    // What the store reads, row by row.
    let read = env.ctx.mysql.occupancy(&[1, 2, 4]).await.unwrap();
    let mut why: Vec<String> = read.unknown.iter().map(|u| u.to_string()).collect();
    let mut want = [
        "order_seat order 987654 seat A-1: active = 1 but no ticket_order row".to_string(),
        format!(
            "order_seat order {elsewhere} seat A-4: order_seat.showtime_id 1 differs from its order's 3"
        ),
        format!(
            "order_seat order {away} seat A-3: order_seat.showtime_id 4 differs from its order's 1"
        ),
    ];
    why.sort();
    want.sort();
    assert_eq!(why, want);
    let alone = env.ctx.mysql.occupancy(&[4]).await.unwrap();
    assert_eq!(alone.unknown.len(), 2, "{:?}", alone.unknown);

    // And what a run makes of it: every valid order raises its seat, the
    // rows outside the contract hold theirs, in their showtime and in
    // their order's (showtime 1's A-3 looks like an orphan lock to the
    // sweep's read; the confirmation finds its order's row in showtime 4).
    let report = env.once(&Kind::ALL).await;
    ended_well(&report);
    let values = [
        seat(&env, 1, "A-1").await,
        seat(&env, 1, "A-2").await,
        seat(&env, 1, "A-3").await,
        seat(&env, 1, "A-4").await,
        seat(&env, 2, "A-3").await,
        seat(&env, 4, "A-1").await,
    ];
    let want = ["1", "2", "1", "1", "2", "1"].map(|v| Some(v.to_string()));
    assert_eq!(values, want, "{}", report.to_text());
    assert_eq!(invalid(&report), 3, "{}", report.to_text());
}

/// `active` is 1 or NULL by the contract; any other value (and NULL on an
/// order still PENDING or PAID) is a row nobody can read: the seat is not
/// lowered, and the row is reported.
#[tokio::test]
async fn active_other_than_1_or_null_never_lowers_a_seat() {
    for (status, value, active) in [
        ("PAID", "2", Some(0)),
        ("PAID", "2", Some(2)),
        ("PENDING", "1", Some(0)),
        ("PAID", "2", None),
        ("PENDING", "1", None),
    ] {
        let env = TestEnv::new().await;
        showtime(&env, &[("A-1", value)]).await;
        let order = env.fx.order(1, status, &["A-1"], 900).await.unwrap();
        sqlx::query("UPDATE order_seat SET active = ? WHERE order_id = ?")
            .bind(active)
            .bind(order)
            .execute(env.ctx.mysql.pool())
            .await
            .unwrap();
        let report = env.once(&Kind::ALL).await;
        ended_well(&report);
        assert_eq!(
            seat(&env, 1, "A-1").await.as_deref(),
            Some(value),
            "{status} active {active:?}: {}",
            report.to_text()
        );
        assert_eq!(invalid(&report), 1, "{}", report.to_text());
        // Reported once per run, every run: never resolved on a guess.
        let again = env.once(&Kind::ALL).await;
        assert_eq!(invalid(&again), 1, "{}", again.to_text());
    }
}

/// Zero dates under a permissive `sql_mode`, in a showtime's `starts_at`, a
/// PENDING order's `expires_at` and a PAID order's `created_at`: every run
/// ends, the rest of the estate is repaired, those rows are reported and
/// left alone, and `inspect` shows them.
#[tokio::test]
async fn a_zero_date_is_a_row_to_report_never_a_panic() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.showtime(2, 1, 60, "ON_SALE").await.unwrap();
    // Showtime 1 (zero starts_at): an orphan lock nobody may touch.
    env.fx.warm_all(1, &seats, &[("A-1", "1")]).await.unwrap();
    // Showtime 2: an orphan lock, a held seat whose order has a zero
    // deadline, a sold seat whose order has a zero created_at,
    // and an ordinary expired order.
    env.fx
        .warm_all(
            2,
            &seats,
            &[("A-1", "1"), ("A-2", "1"), ("A-3", "2"), ("A-4", "1")],
        )
        .await
        .unwrap();
    let zero_deadline = env.fx.order(2, "PENDING", &["A-2"], -3600).await.unwrap();
    let zero_created = env.fx.order(2, "PAID", &["A-3"], 900).await.unwrap();
    let expired = env.fx.order(2, "PENDING", &["A-4"], -3600).await.unwrap();
    env.permissive_all(&[
        "UPDATE showtime SET starts_at = '0000-00-00 00:00:00' WHERE id = 1".into(),
        format!(
            "UPDATE ticket_order SET expires_at = '0000-00-00 00:00:00' WHERE id = {zero_deadline}"
        ),
        format!(
            "UPDATE ticket_order SET created_at = '2026-11-00 10:00:00' WHERE id = {zero_created}"
        ),
    ])
    .await;

    let report = env.once(&Kind::ALL).await;
    ended_well(&report);
    assert_eq!(seat(&env, 2, "A-1").await.as_deref(), Some("0"), "repaired");
    assert_eq!(env.fx.order_status(expired).await.unwrap(), "CANCELLED");
    assert_eq!(seat(&env, 2, "A-4").await.as_deref(), Some("0"));
    assert_eq!(
        env.fx.order_status(zero_deadline).await.unwrap(),
        "PENDING",
        "nobody knows its deadline"
    );
    assert_eq!(seat(&env, 2, "A-2").await.as_deref(), Some("1"));
    assert_eq!(seat(&env, 2, "A-3").await.as_deref(), Some("2"));
    assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("1"));
    // The showtime, the order with no deadline, and each order's seat row
    // (its dates do not decode), each counted once.
    assert_eq!(invalid(&report), 4, "{}", report.to_text());

    let map = inspect::load(&env.ctx, 1).await.unwrap().unwrap();
    let text = map.render(false);
    assert!(text.contains("does not decode"), "{text}");
    let map = inspect::load(&env.ctx, 2).await.unwrap().unwrap();
    let text = map.render(false);
    assert!(
        text.contains(&format!("order {zero_created} seat A-3")),
        "{text}"
    );
    assert_eq!(
        map.seats
            .iter()
            .find(|s| s.seat == "A-3")
            .map(|s| s.expected),
        Some("?")
    );
}

/// Dates at both edges of what decodes: a paid order's `paid_at` on a day
/// past its month's end, or in month 0 (where MySQL finds no last day: its
/// test is NULL, which is not "decodes"), is a row nobody can read, so its
/// seat is not raised to sold, and reported; one created on the first day
/// MySQL supports (1000-01-01 00:00) is an ordinary order, and its seat is
/// raised; one created the moment before (0999-12-31 23:59:59, which
/// MariaDB stores without a warning, and which is a real day to chrono) is
/// not.
#[tokio::test]
async fn dates_that_decode_are_read_and_the_others_reported() {
    let env = TestEnv::new().await;
    showtime(
        &env,
        &[("A-1", "1"), ("A-2", "1"), ("A-3", "1"), ("A-4", "1")],
    )
    .await;
    let past_month_end = env.fx.order(1, "PAID", &["A-1"], 900).await.unwrap();
    let oldest = env.fx.order(1, "PAID", &["A-2"], 900).await.unwrap();
    let month_zero = env.fx.order(1, "PAID", &["A-3"], 900).await.unwrap();
    let before_oldest = env.fx.order(1, "PAID", &["A-4"], 900).await.unwrap();
    env.permissive_all(&[
        format!(
            "UPDATE ticket_order SET paid_at = '2026-02-30 10:00:00' WHERE id = {past_month_end}"
        ),
        format!("UPDATE ticket_order SET created_at = '1000-01-01 00:00:00' WHERE id = {oldest}"),
        format!("UPDATE ticket_order SET paid_at = '2026-00-10 10:00:00' WHERE id = {month_zero}"),
        format!(
            "UPDATE ticket_order SET created_at = '0999-12-31 23:59:59' WHERE id = {before_oldest}"
        ),
    ])
    .await;

    let report = env.once(&[Kind::PaidSeats]).await;
    ended_well(&report);
    assert_eq!(
        seat(&env, 1, "A-1").await.as_deref(),
        Some("1"),
        "{}",
        report.to_text()
    );
    assert_eq!(
        seat(&env, 1, "A-2").await.as_deref(),
        Some("2"),
        "{}",
        report.to_text()
    );
    assert_eq!(
        seat(&env, 1, "A-3").await.as_deref(),
        Some("1"),
        "{}",
        report.to_text()
    );
    assert_eq!(
        seat(&env, 1, "A-4").await.as_deref(),
        Some("1"),
        "{}",
        report.to_text()
    );
    assert_eq!(invalid(&report), 3, "{}", report.to_text());
}

/// A PENDING order's deadline on a day past its month's end is reported
/// once it is due where MySQL sorts it, and never cancelled; one not due yet
/// is not even read (the job reads due orders only: an index range, not
/// every PENDING order each run).
#[tokio::test]
async fn an_impossible_deadline_is_reported_once_due_and_never_cancelled() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx
        .warm_all(1, &seats, &[("A-1", "1"), ("A-2", "1")])
        .await
        .unwrap();
    let due = env.fx.order(1, "PENDING", &["A-1"], -3600).await.unwrap();
    let later = env.fx.order(1, "PENDING", &["A-2"], 900).await.unwrap();
    env.permissive_all(&[
        format!("UPDATE ticket_order SET expires_at = '2026-02-30 10:00:00' WHERE id = {due}"),
        format!("UPDATE ticket_order SET expires_at = '2099-02-30 10:00:00' WHERE id = {later}"),
    ])
    .await;
    let report = env.once(&[Kind::ExpiredOrders]).await;
    ended_well(&report);
    assert_eq!(invalid(&report), 1, "{}", report.to_text());
    for order in [due, later] {
        assert_eq!(env.fx.order_status(order).await.unwrap(), "PENDING");
    }
}

/// A showtime status the contract does not spell is reported, not only
/// skipped: `on_sale` (which the collation calls ON_SALE), `ONSALE`.
#[tokio::test]
async fn a_showtime_status_outside_the_contract_is_reported() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    for (id, status) in [(1, "on_sale"), (2, "ONSALE"), (3, "ON_SALE"), (4, "CLOSED")] {
        env.fx.showtime(id, 1, 60, status).await.unwrap();
        env.fx.warm_all(id, &seats, &[("A-1", "1")]).await.unwrap();
    }
    let report = env.once(&Kind::ALL).await;
    ended_well(&report);
    assert_eq!(invalid(&report), 2, "{}", report.to_text());
    assert_eq!(seat(&env, 3, "A-1").await.as_deref(), Some("0"));
    for id in [1, 2, 4] {
        assert_eq!(seat(&env, id, "A-1").await.as_deref(), Some("1"));
    }
}

/// A field missing from a present hash is drift, not bad data: filled with
/// its expected value by a compare-and-set that wants it still absent, and
/// audited; `"0"` only where MySQL shows no row that may hold the seat.
#[tokio::test]
async fn an_absent_field_is_filled_with_its_expected_value() {
    let env = TestEnv::new().await;
    env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.warm(1, &[("A-4", "0")]).await.unwrap();
    env.fx.order(1, "PAID", &["A-2"], 900).await.unwrap();
    let odd = env.fx.order(1, "PAID", &["A-3"], 900).await.unwrap();
    env.sql(&format!(
        "UPDATE ticket_order SET status = 'paid' WHERE id = {odd}"
    ))
    .await;

    let r = env.job(Kind::PaidSeats).await;
    assert_eq!((r.outcome, r.fixed), (Outcome::Success, 2), "{r:?}");
    let hash = env.fx.hash(1).await.unwrap();
    assert_eq!(hash.get("A-1").map(String::as_str), Some("0"));
    assert_eq!(hash.get("A-2").map(String::as_str), Some("2"));
    assert_eq!(hash.get("A-3"), None, "a row outside the contract holds it");
    let mut audit = env.audit().await;
    audit.retain(|a| a.1 == "seat_set");
    assert_eq!(audit.len(), 2, "{audit:?}");
    for (seat_no, after) in [("A-1", "0"), ("A-2", "2")] {
        assert!(
            audit.iter().any(|a| a.3.as_deref() == Some(seat_no)
                && a.5.as_deref() == Some("absent")
                && a.6.as_deref() == Some(after)),
            "{audit:?}"
        );
    }
    // Converged: nothing more to do.
    let r: JobReport = env.job(Kind::PaidSeats).await;
    assert_eq!((r.drift, r.fixed), (0, 0), "{r:?}");
}

/// One problem, one count per run: a seat key of the wrong type met by
/// both expired-orders (releasing a cancelled order's seat) and the seat
/// sweep is counted once, by the first job that met it.
#[tokio::test]
async fn a_seat_key_of_the_wrong_type_is_counted_once_per_run() {
    let env = TestEnv::new().await;
    env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    let _: () = env
        .redis(redis::cmd("SET").arg(env.ctx.redis.keys.seat(1)).arg("x"))
        .await;
    env.fx.order(1, "PENDING", &["A-1"], -3600).await.unwrap();
    let report = env.once(&Kind::ALL).await;
    assert_eq!(invalid(&report), 1, "{}", report.to_text());
}

/// A template seat whose `enabled` is neither 0 nor 1 is no enabled seat:
/// its field is left alone (never lowered, never rebuilt free), and the row
/// is reported.
#[tokio::test]
async fn a_template_seat_enabled_neither_0_nor_1_is_left_alone_and_reported() {
    let env = TestEnv::new().await;
    showtime(&env, &[("A-1", "1"), ("A-2", "1")]).await;
    env.sql("UPDATE hall_seat SET enabled = 2 WHERE hall_id = 1 AND seat_no = 'A-1'")
        .await;
    let report = env.once(&Kind::ALL).await;
    ended_well(&report);
    assert_eq!(
        seat(&env, 1, "A-1").await.as_deref(),
        Some("1"),
        "left alone"
    );
    assert_eq!(seat(&env, 1, "A-2").await.as_deref(), Some("0"), "repaired");
    // The template row, and the field that is no enabled seat.
    assert_eq!(invalid(&report), 2, "{}", report.to_text());
}

/// A missing hash whose every seat a row outside the contract may hold:
/// no field can be written, so it stays absent; the run is not failed by it
/// (before: an empty rebuild, refused by the script, every run).
#[tokio::test]
async fn a_missing_hash_with_no_writable_seat_is_left_absent_not_failed() {
    let env = TestEnv::new().await;
    env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    let odd = env.fx.order(1, "PAID", &["A-1", "A-2"], 900).await.unwrap();
    env.sql(&format!(
        "UPDATE ticket_order SET status = 'paid' WHERE id = {odd}"
    ))
    .await;
    for _ in 0..2 {
        let report = env.once(&[Kind::MissingHashes]).await;
        ended_well(&report);
        assert_eq!(report.total_fixed(), 0, "{}", report.to_text());
        assert!(
            report
                .jobs
                .iter()
                .all(|j| j.errors == 0 && j.outcome == Outcome::Success),
            "{}",
            report.to_text()
        );
        assert!(env.fx.hash(1).await.unwrap().is_empty(), "still absent");
    }
}
