//! Rule 12, hands off what is not understood: a status the contract does not
//! spell exactly is never read as "free", nor as PENDING, nor as ON_SALE; and
//! every showtime id, negative ones too, belongs to exactly one shard.

use seatflow_reconciler::model::{Kind, Shard};
use seatflow_test_support::TestEnv;

async fn set_status(env: &TestEnv, order: i64, status: &str) {
    sqlx::query("UPDATE ticket_order SET status = ? WHERE id = ?")
        .bind(status)
        .bind(order)
        .execute(env.ctx.mysql.pool())
        .await
        .unwrap();
}

#[tokio::test]
async fn seats_of_orders_with_misspelled_statuses_are_left_alone() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 6).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    // Each seat is held (active = 1) by an order whose status only the
    // collation (or nothing at all) takes for a valid one.
    let cases = [
        ("A-1", "paid", "0"),    // would be "paid-seats sets 2" or an orphan
        ("A-2", "Paid", "2"),    // would be a sold orphan → "0"
        ("A-3", "PAID ", "2"),   // trailing space: = 'PAID' under the collation
        ("A-4", "pending", "1"), // a live hold, spelled low
        ("A-5", "SOLD", "1"),    // any other word
    ];
    let mut warm: Vec<(&str, &str)> = Vec::new();
    for (seat, status, redis) in cases {
        let id = env.fx.order(1, "PAID", &[seat], 3600).await.unwrap();
        set_status(&env, id, status).await;
        warm.push((seat, redis));
    }
    env.fx.warm_all(1, &seats, &warm).await.unwrap();
    // An expired order spelled `pending`: never cancelled.
    let expired = env.fx.order(1, "PENDING", &["A-6"], -3600).await.unwrap();
    set_status(&env, expired, "pending").await;
    env.fx.warm(1, &[("A-6", "1")]).await.unwrap();

    let report = env.once(&Kind::ALL).await;
    assert_eq!(report.exit_code(), 0, "{}", report.to_text());
    for (seat, _, redis) in cases {
        assert_eq!(
            env.fx.seat_value(1, seat).await.unwrap().as_deref(),
            Some(redis),
            "{seat} was changed: {}",
            report.to_text()
        );
    }
    assert_eq!(env.fx.order_status(expired).await.unwrap(), "pending");
    assert_eq!(
        env.fx.seat_value(1, "A-6").await.unwrap().as_deref(),
        Some("1")
    );
    let fixed: u64 = report.jobs.iter().map(|j| j.fixed).sum();
    assert_eq!(fixed, 0, "{}", report.to_text());
    // Reported: five seats (by one seat job) and the order (by expired-orders).
    let invalid: u64 = report.jobs.iter().map(|j| j.invalid_data).sum();
    assert_eq!(invalid, 5 + 1 + 1, "{}", report.to_text());
}

#[tokio::test]
async fn a_missing_hash_is_rebuilt_without_the_seats_nobody_understands() {
    let env = TestEnv::new().await;
    env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    let odd = env.fx.order(1, "PAID", &["A-1"], 3600).await.unwrap();
    set_status(&env, odd, "paid").await;
    env.fx.order(1, "PAID", &["A-2"], 3600).await.unwrap();

    env.once(&[Kind::MissingHashes]).await;
    let h = env.fx.hash(1).await.unwrap();
    assert_eq!(h.get("A-1"), None, "no value is invented for A-1: {h:?}");
    assert_eq!(h["A-2"], "2");
    assert_eq!(h["A-3"], "0");
}

#[tokio::test]
async fn a_showtime_spelled_on_sale_in_lower_case_is_not_swept() {
    let env = TestEnv::new().await;
    env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "on_sale").await.unwrap();
    let report = env.once(&Kind::ALL).await;
    assert!(env.fx.hash(1).await.unwrap().is_empty(), "no hash built");
    assert_eq!(report.jobs.iter().map(|j| j.fixed).sum::<u64>(), 0);
}

#[tokio::test]
async fn every_showtime_id_belongs_to_exactly_one_shard() {
    let env = TestEnv::new().await;
    env.fx.hall(1, 1, 1).await.unwrap();
    let ids = [
        i64::MIN + 1,
        -1_000_001,
        -7,
        -5,
        -2,
        -1,
        0,
        1,
        2,
        5,
        7,
        1_000_001,
        i64::MAX,
    ];
    for (i, id) in ids.iter().enumerate() {
        env.fx
            .showtime(*id, 1, 10 + i as i64, "ON_SALE")
            .await
            .unwrap();
    }
    for total in [2u32, 3, 5] {
        let mut owners = std::collections::HashMap::<i64, Vec<u32>>::new();
        for index in 0..total {
            let shard = Shard { total, index };
            let scope = env.ctx.for_shard(shard).scope(&[]);
            for row in env
                .ctx
                .mysql
                .on_sale_page(None, None, 100, scope)
                .await
                .unwrap()
                .rows
            {
                assert!(shard.covers(row.id), "SQL and Rust disagree on {}", row.id);
                owners.entry(row.id).or_default().push(index);
            }
        }
        for id in ids {
            assert_eq!(
                owners.get(&id).map(Vec::len),
                Some(1),
                "showtime {id} with {total} shards: {:?}",
                owners.get(&id)
            );
        }
    }
}
