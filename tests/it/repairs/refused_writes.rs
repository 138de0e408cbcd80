//! Rule 16, "a write MySQL refuses or rewrites costs that one order, and a
//! write is trusted only after it reads back as asked": expired orders
//! whose cancel MySQL refuses (a trigger's error, a CHECK constraint, a
//! value too long for its column, a lock wait) or rewrites (a trigger that
//! sets another status, or keeps a seat row active). Each such order is
//! left as it was, its seat kept, and reported with MySQL's words; every
//! other order of the chunk is cancelled and released in the same run; the
//! next run tries again. The triggers are listed as deviations (warn).
//! (Grace is 0 s here.)

use std::time::Duration;

use seatflow_reconciler::model::Kind;
use seatflow_test_support::{TestEnv, seat};

/// Showtime 1 of a 1 × 8 hall, every seat `"1"`; one expired PENDING order
/// per seat, returned in seat order (A-1 … A-8).
async fn expired_orders(env: &TestEnv) -> Vec<i64> {
    let seats = env.fx.hall(1, 1, 8).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    let values: Vec<(&str, &str)> = seats.iter().map(|s| (s.as_str(), "1")).collect();
    env.fx.warm_all(1, &seats, &values).await.unwrap();
    let mut out = Vec::new();
    for s in &seats {
        out.push(env.fx.order(1, "PENDING", &[s], -600).await.unwrap());
    }
    out
}

async fn active(env: &TestEnv, order: i64) -> Option<i64> {
    sqlx::query_scalar("SELECT CAST(active AS SIGNED) FROM order_seat WHERE order_id = ?")
        .bind(order)
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap()
}

/// The user's cases and their class, all in one chunk: orders 1 and 8 are
/// plain; MySQL refuses the cancel of 2 (a trigger's SIGNAL), 3 (a CHECK
/// constraint), 4 (a trigger writing a value too long for its column) and
/// 5 (a trigger waiting on a row lock another transaction holds), and
/// rewrites that of 6 (a trigger turning it PAID) and 7 (a trigger keeping
/// its seat row active). 1 and 8 are cancelled and their seats released;
/// 2 … 7 stay PENDING with their seat held, each reported with why. Once
/// MySQL takes them, the next run cancels them.
#[tokio::test]
async fn a_cancel_mysql_refuses_or_rewrites_costs_that_order_alone() {
    let env = TestEnv::with(|s| s.mysql.lock_wait_timeout = Duration::from_secs(1)).await;
    let o = expired_orders(&env).await;
    env.sql(&format!(
        "CREATE TABLE side (id INT PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB; \
         INSERT INTO side VALUES (1, 0); \
         UPDATE ticket_order SET user_id = 13 WHERE id = {o3}; \
         ALTER TABLE ticket_order ADD CONSTRAINT no_cancel_3 CHECK (status <> 'CANCELLED' OR user_id <> 13); \
         CREATE TRIGGER guard BEFORE UPDATE ON ticket_order FOR EACH ROW BEGIN \
           IF NEW.status = 'CANCELLED' AND OLD.id = {o2} THEN \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'order {o2} may not be cancelled'; END IF; \
           IF NEW.status = 'CANCELLED' AND OLD.id = {o4} THEN \
             SET NEW.order_no = CONCAT(OLD.order_no, REPEAT('x', 40)); END IF; \
           IF NEW.status = 'CANCELLED' AND OLD.id = {o5} THEN \
             UPDATE side SET n = n + 1 WHERE id = 1; END IF; \
           IF NEW.status = 'CANCELLED' AND OLD.id = {o6} THEN SET NEW.status = 'PAID'; END IF; \
         END; \
         CREATE TRIGGER keep_seat BEFORE UPDATE ON order_seat FOR EACH ROW BEGIN \
           IF OLD.order_id = {o7} THEN SET NEW.active = 1; END IF; \
         END",
        o2 = o[1],
        o3 = o[2],
        o4 = o[3],
        o5 = o[4],
        o6 = o[5],
        o7 = o[6],
    ))
    .await;
    // Another transaction holds the row the trigger of order 5 updates.
    let mut holder = env.ctx.mysql.pool().begin().await.unwrap();
    sqlx::query("SELECT n FROM side WHERE id = 1 FOR UPDATE")
        .fetch_one(&mut *holder)
        .await
        .unwrap();

    let report = env.once(&[Kind::ExpiredOrders]).await;
    let job = &report.jobs[0];
    let text = report.to_text();
    for (i, order) in o.iter().enumerate() {
        let name = format!("A-{}", i + 1);
        let cancelled = i == 0 || i == 7;
        assert_eq!(
            env.fx.order_status(*order).await.unwrap(),
            if cancelled { "CANCELLED" } else { "PENDING" },
            "order {} ({name}): {text}",
            i + 1
        );
        assert_eq!(
            seat(&env, 1, &name).await.as_deref(),
            Some(if cancelled { "0" } else { "1" }),
            "{name}: {text}"
        );
        assert_eq!(
            active(&env, *order).await,
            if cancelled { None } else { Some(1) },
            "{name}: rolled back whole"
        );
    }
    assert_eq!(job.fixed, 2, "{text}");
    assert_eq!(job.errors, 6, "{text}");
    assert!(job.backlog >= 6, "{text}");
    let messages = job.error_messages.join("\n");
    for words in [
        "may not be cancelled",
        "no_cancel_3",
        "too long",
        "Lock wait timeout",
        "reads \"PAID\"",
    ] {
        assert!(messages.contains(words), "{words:?} in:\n{messages}");
    }
    // Each trigger on a contract table is listed, warns, holds nothing.
    let triggers: Vec<_> = report
        .contract_deviations
        .iter()
        .filter(|d| d.kind == "trigger")
        .collect();
    assert_eq!(triggers.len(), 2, "{text}");
    assert!(triggers.iter().all(|d| d.warns && !d.holds), "{triggers:?}");
    assert!(
        triggers.iter().any(|d| d.fix == "DROP TRIGGER `guard`"),
        "{triggers:?}"
    );

    // MySQL takes them now: the next run cancels them.
    holder.rollback().await.unwrap();
    env.sql(
        "DROP TRIGGER guard; DROP TRIGGER keep_seat; \
         ALTER TABLE ticket_order DROP CONSTRAINT no_cancel_3",
    )
    .await;
    let report = env.once(&[Kind::ExpiredOrders]).await;
    assert_eq!(report.jobs[0].fixed, 6, "{}", report.to_text());
    for (i, order) in o.iter().enumerate() {
        assert_eq!(env.fx.order_status(*order).await.unwrap(), "CANCELLED");
        assert_eq!(
            seat(&env, 1, &format!("A-{}", i + 1)).await.as_deref(),
            Some("0")
        );
    }
}
