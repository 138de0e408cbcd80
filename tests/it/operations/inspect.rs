//! `inspect`: the seat map of a showtime with every kind of drift, as an
//! operator sees it (snapshot) and as a script reads it (JSON).

use seatflow_reconciler::ops::inspect;
use seatflow_test_support::TestEnv;

async fn seeded() -> TestEnv {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 3, 5).await.unwrap();
    sqlx::query("UPDATE hall_seat SET enabled = 0 WHERE seat_no = 'C-5'")
        .execute(env.ctx.mysql.pool())
        .await
        .unwrap();
    env.fx.showtime(7, 1, 60, "ON_SALE").await.unwrap();
    env.fx.showtime(8, 1, 60, "ON_SALE").await.unwrap();
    sqlx::query("UPDATE showtime SET starts_at = '2026-12-24 20:15:00'")
        .execute(env.ctx.mysql.pool())
        .await
        .unwrap();
    env.fx
        .order(7, "PAID", &["A-1", "A-2"], -600)
        .await
        .unwrap(); // 1: ok / paid seat not sold
    env.fx.order(7, "PENDING", &["B-2"], 600).await.unwrap(); // 2: pending shown sold
    env.fx.order(7, "REFUNDED", &["B-3"], -600).await.unwrap(); // 3: sold orphan
    env.fx.order(8, "PAID", &["A-1"], -600).await.unwrap();
    env.fx
        .warm_all(
            7,
            &seats,
            &[
                ("A-1", "2"),
                ("A-2", "1"),
                ("A-4", "1"),
                ("B-2", "2"),
                ("B-3", "2"),
                ("C-1", "x"),
                ("Z-9", "0"),
            ],
        )
        .await
        .unwrap();
    env
}

#[tokio::test]
async fn the_seat_map_shows_every_drift() {
    let env = seeded().await;
    let map = inspect::load(&env.ctx, 7)
        .await
        .unwrap()
        .expect("showtime exists");
    let text = map.render(false).replace(&env.prefix, "{prefix}");
    insta::assert_snapshot!("seat_map_with_drift", text);
    assert!(
        !text.contains('\x1b'),
        "no colour codes when not a terminal"
    );
    assert!(
        map.render(true).contains("\x1b[31;1m"),
        "drift is red on a terminal"
    );

    let missing = inspect::load(&env.ctx, 8).await.unwrap().unwrap();
    let text = missing.render(false).replace(&env.prefix, "{prefix}");
    insta::assert_snapshot!("seat_map_missing_hash", text);
    assert!(inspect::load(&env.ctx, 999).await.unwrap().is_none());
}

#[tokio::test]
async fn json_names_each_seat_state() {
    let env = seeded().await;
    let map = inspect::load(&env.ctx, 7).await.unwrap().unwrap();
    let v: serde_json::Value = serde_json::from_str(&map.to_json()).unwrap();
    assert_eq!(v["hash"], "present");
    assert_eq!(v["drift"], 4);
    let seat = |name: &str| {
        v["seats"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["seat"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(seat("A-2")["drift"], "paid-seats");
    assert_eq!(seat("A-2")["order"]["status"], "PAID");
    assert_eq!(seat("A-4")["drift"], "orphan-locks");
    assert_eq!(seat("B-2")["drift"], "sold-orphans");
    assert_eq!(seat("B-2")["expected"], "1");
    assert_eq!(seat("B-3")["expected"], "0");
    assert_eq!(seat("C-1")["redis"], "x");
    assert!(seat("C-1")["problem"].as_str().unwrap().contains("invalid"));
    assert_eq!(seat("C-5")["enabled"], false);
    assert!(seat("A-3")["drift"].is_null());
    assert_eq!(
        v["other_problems"],
        serde_json::json!([
            "field C-5 is not a template seat",
            "field Z-9 is not a template seat"
        ]),
        "a disabled seat's field is not a template field"
    );
}

#[tokio::test]
async fn seat_detail_shows_the_order_and_last_repairs() {
    let env = seeded().await;
    env.once(&[seatflow_reconciler::model::Kind::PaidSeats])
        .await;
    let map = inspect::load(&env.ctx, 7).await.unwrap().unwrap();
    let fixes = env.ctx.mysql.recent_fixes(7, "A-2", 5).await.unwrap();
    let text = map.seat_detail("A-2", &fixes).unwrap();
    assert!(text.contains("occupied by order 1"), "{text}");
    assert!(text.contains("status PAID"), "{text}");
    assert!(
        text.contains("paid_seats     seat_set      1 -> 2"),
        "{text}"
    );
    assert!(map.seat_detail("Q-1", &[]).is_none());
}

/// A showtime whose hash is missing never reads "no drift", with or without
/// occupied seats, on sale or not.
#[tokio::test]
async fn a_missing_hash_is_never_called_no_drift() {
    let env = TestEnv::new().await;
    env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(5, 1, 60, "ON_SALE").await.unwrap(); // no orders, no hash
    env.fx.showtime(6, 1, 60, "DRAFT").await.unwrap(); // not swept, no hash
    for (id, says) in [
        (5, "rebuilt hash shows every seat free"),
        (6, "not ON_SALE"),
    ] {
        let map = inspect::load(&env.ctx, id).await.unwrap().unwrap();
        let text = map.render(false);
        assert!(!text.contains("no drift"), "{text}");
        assert!(text.contains(says), "{text}");
        assert_eq!(map.hash, "missing");
    }
    let map = inspect::load(&env.ctx, 5).await.unwrap().unwrap();
    assert_eq!(map.drift, 3, "every seat is rebuilt: {}", map.to_json());
}
