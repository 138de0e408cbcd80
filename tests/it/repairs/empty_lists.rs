//! No statement is built with an empty list: every SQL builder that takes a
//! list (`IN`, `FIELD`, `CASE`, a multi-row `INSERT`) is given a
//! `NonEmpty` one, and its caller skips the statement for an empty list.
//! Each store read or write that takes a list, called with the empty and the
//! one-element list, against the real MariaDB; and the user's case: a hall
//! with no enabled seat and an active row on its showtime made every chunk
//! fail with `1582 Incorrect parameter count in the call to native function
//! 'FIELD'`. (Grace is 0 s here.)

use seatflow_reconciler::model::Kind;
use seatflow_reconciler::store::mysql::{FixRecord, NonEmpty, RunIdentity, SeatNameAsk};
use seatflow_test_support::{TestEnv, ended_well, seat};

/// The user's case, and its other spelling (a hall with no template row at
/// all): showtime 1's hall has no enabled seat, and an order holds a seat
/// of it. Its row names no seat (reported, left alone); showtime 2's orphan
/// lock is released in the same run, and the run ends well.
#[tokio::test]
async fn a_hall_with_no_enabled_seat_holds_back_no_other_showtime() {
    for disabled_rows in [true, false] {
        let env = TestEnv::new().await;
        if disabled_rows {
            env.fx.hall(1, 1, 2).await.unwrap();
            env.sql("UPDATE hall_seat SET enabled = 0 WHERE hall_id = 1")
                .await;
        } else {
            env.sql("INSERT INTO hall (id, name) VALUES (1, 'empty')")
                .await;
        }
        env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
        env.fx.order(1, "PAID", &["A-1"], 900).await.unwrap();
        let seats = env.fx.hall(2, 1, 2).await.unwrap();
        env.fx.showtime(2, 2, 61, "ON_SALE").await.unwrap();
        env.fx.warm_all(2, &seats, &[("A-1", "1")]).await.unwrap();

        let report = env.once(&Kind::ALL).await;
        ended_well(&report);
        assert_eq!(
            seat(&env, 2, "A-1").await.as_deref(),
            Some("0"),
            "disabled rows {disabled_rows}: {}",
            report.to_text()
        );
    }
}

/// Every store call that builds a statement from a list, with the empty
/// and the one-element list. The empty one builds no statement (or cannot
/// be made: `NonEmpty::of(&[])` is None); the one-element one reads or
/// writes that item. With a template compared otherwise than `order_seat`
/// (the seat groups are then read too, per hall and per showtime).
#[tokio::test]
async fn every_statement_with_a_list_takes_the_empty_and_the_one_element_list() {
    let env = TestEnv::new().await;
    env.sql("ALTER TABLE hall_seat MODIFY seat_no VARCHAR(16) COLLATE utf8mb4_bin NOT NULL")
        .await;
    env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    let paid = env.fx.order(1, "PAID", &["A-1"], 900).await.unwrap();
    let expired = env.fx.order(1, "PENDING", &["A-2"], -900).await.unwrap();
    env.ctx.mysql.judge_contract().await.unwrap();
    let db = &env.ctx.mysql;
    assert!(NonEmpty::<i64>::of(&[]).is_none());

    // Templates (IN, and the seat groups' IN).
    assert!(db.templates(&[]).await.unwrap().0.is_empty());
    let (templates, _) = db.templates(&[1]).await.unwrap();
    assert_eq!(templates[&1].seats(), ["A-1", "A-2"]);

    // Occupancy (IN).
    assert!(db.occupancy(&[]).await.unwrap().occupancy.is_empty());
    let read = db.occupancy(&[1]).await.unwrap();
    assert_eq!(read.occupancy.len(), 2, "{read:?}");

    // The confirmation (CASE, FIELD, IN; the seat groups per showtime).
    let (none, unknown) = db.confirm_seats(&[]).await.unwrap();
    assert!(none.is_empty() && unknown.is_empty());
    let (one, _) = db.confirm_seats(&[(1, "A-1".into(), true)]).await.unwrap();
    assert_eq!(one[0].order_id, Some(paid), "{one:?}");

    // Seat names (FIELD): no ask, an ask with no candidate, one candidate.
    assert!(db.seats_named(&[]).await.unwrap().is_empty());
    let ask = |candidates| SeatNameAsk {
        order_id: paid,
        seat_no: "a-1",
        candidates,
    };
    env.sql(&format!(
        "UPDATE order_seat SET seat_no = 'a-1' WHERE order_id = {paid}"
    ))
    .await;
    assert_eq!(db.seats_named(&[ask(&[])]).await.unwrap(), [None]);
    let candidates = ["A-1".to_string()];
    assert_eq!(
        db.seats_named(&[ask(&candidates)]).await.unwrap(),
        [Some("A-1".to_string())]
    );

    // The cancel (IN, and the multi-row INSERT of its audit rows).
    let now = db.now_utc().await.unwrap();
    let identity = RunIdentity {
        run_id: "empty-lists",
        instance: "test",
    };
    let cancels = db.cancel_expired(&[], now, now, &identity).await.unwrap();
    assert!(cancels.cancelled.is_empty() && cancels.locked.is_empty());
    let cancels = db
        .cancel_expired(&[expired], now, now, &identity)
        .await
        .unwrap();
    assert_eq!(cancels.cancelled.len(), 1, "{cancels:?}");
    assert_eq!(env.fx.order_status(expired).await.unwrap(), "CANCELLED");

    // The audit (multi-row INSERT).
    db.insert_fixes("empty-lists", "test", &[]).await.unwrap();
    let fix = FixRecord {
        fix_id: "one-element".into(),
        job: Kind::OrphanLocks,
        action: seatflow_reconciler::model::FixAction::SeatSet,
        showtime_id: Some(1),
        seat_no: Some("A-2".into()),
        order_id: None,
        before: Some("1".into()),
        after: Some("0".into()),
        at: now,
    };
    db.insert_fixes("empty-lists", "test", &[fix])
        .await
        .unwrap();
    let written: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM reconcile_fix WHERE fix_id = 'one-element'")
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert_eq!(written, 1);
}
