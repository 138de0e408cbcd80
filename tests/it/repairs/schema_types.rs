//! Rule 17, "which types a column may have is one table that the judge and
//! the decoders share" (`model::schema::types`): a type the decoders read
//! losslessly is no deviation and is read; any other is a deviation that
//! holds what the column touches and says how to fix it, never a decode
//! failure at run time. The user's cases (TIMESTAMP dates, ids beyond
//! BIGINT, VARBINARY seat names), then every contract column through a list
//! of MySQL types (`types_of_every_column_are_judged_as_they_are_read`).
//! (Grace is 0 s here.)

use seatflow_reconciler::config::SecretUrl;
use seatflow_reconciler::inspect;
use seatflow_reconciler::jobs::report::RunReport;
use seatflow_reconciler::model::Kind;
use seatflow_test_support::{TestEnv, ended_well, seat};

/// The deviation the run reported for `table.column` of `kind`.
fn deviation<'r>(
    report: &'r RunReport,
    table: &str,
    column: &str,
    kind: &str,
) -> Option<&'r seatflow_reconciler::jobs::contract::DeviationReport> {
    report
        .contract_deviations
        .iter()
        .find(|d| d.table == table && d.column == column && d.kind == kind)
}

/// The user's case: dates stored as TIMESTAMP (any precision) were judged
/// harmless, then every read of them failed: no seat repaired anywhere,
/// expired orders never cancelled, a rebuilt hash without its PAID seat.
/// They read as UTC datetimes, whatever time zone the URL asks for
/// (`?timezone=+08:00`: the session's is pinned to UTC, as the TIMESTAMPs
/// are stored).
#[tokio::test]
async fn timestamp_dates_are_read_and_compared_in_utc() {
    let env = TestEnv::with(|s| {
        s.mysql.url = SecretUrl::new(format!("{}?timezone=%2B08:00", s.mysql.url.expose()))
    })
    .await;
    env.sql(
        "ALTER TABLE showtime MODIFY starts_at TIMESTAMP(3) NOT NULL; \
         ALTER TABLE ticket_order MODIFY expires_at TIMESTAMP NOT NULL, \
           MODIFY created_at TIMESTAMP(6) NOT NULL, MODIFY paid_at TIMESTAMP(3) NULL, \
           MODIFY cancelled_at TIMESTAMP(3) NULL",
    )
    .await;
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    // seatflow writes in UTC, on a connection of its own.
    env.permissive(&[
        "INSERT INTO ticket_order (id, order_no, user_id, showtime_id, status, expires_at, created_at, paid_at) VALUES \
         (1, 'PAID-1', 1, 1, 'PAID', UTC_TIMESTAMP() + INTERVAL 900 SECOND, UTC_TIMESTAMP() - INTERVAL 1 MINUTE, UTC_TIMESTAMP()), \
         (2, 'EXPIRED-2', 1, 1, 'PENDING', UTC_TIMESTAMP() - INTERVAL 600 SECOND, UTC_TIMESTAMP() - INTERVAL 20 MINUTE, NULL)",
        "INSERT INTO order_seat (order_id, showtime_id, seat_no, active) VALUES (1, 1, 'A-1', 1), (2, 1, 'A-2', 1)",
    ])
    .await
    .unwrap();
    let (paid, expired) = (1, 2);
    env.fx
        .warm_all(1, &seats, &[("A-2", "1"), ("A-3", "1")])
        .await
        .unwrap();

    let report = env.once(&Kind::ALL).await;
    ended_well(&report);
    let text = report.to_text();
    assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("2"), "{text}");
    assert_eq!(env.fx.order_status(expired).await.unwrap(), "CANCELLED");
    assert_eq!(seat(&env, 1, "A-2").await.as_deref(), Some("0"), "{text}");
    assert_eq!(seat(&env, 1, "A-3").await.as_deref(), Some("0"), "{text}");
    assert!(
        !report.contract_deviations.iter().any(|d| d.kind == "type"),
        "{text}"
    );
    // Cancelled at the database's UTC time, stored as it.
    let lag: i64 = sqlx::query_scalar(
        "SELECT ABS(TIMESTAMPDIFF(SECOND, cancelled_at, UTC_TIMESTAMP())) FROM ticket_order WHERE id = ?",
    )
    .bind(expired)
    .fetch_one(env.ctx.mysql.pool())
    .await
    .unwrap();
    assert!(lag < 600, "cancelled_at {lag} s from now");

    // The hash lost: rebuilt with the PAID seat sold.
    let _: i64 = env
        .redis(redis::cmd("DEL").arg(env.ctx.redis.keys.seat(1)))
        .await;
    let report = env.once(&Kind::ALL).await;
    ended_well(&report);
    let hash = env.fx.hash(1).await.unwrap();
    assert_eq!(
        hash.get("A-1").map(String::as_str),
        Some("2"),
        "{paid}: {hash:?}"
    );
    assert_eq!(hash.get("A-3").map(String::as_str), Some("0"), "{hash:?}");
}

/// The user's case: an id above 2^63 in a BIGINT UNSIGNED column was
/// reported as "order NULL … no ticket_order row". Its row is unknown (no
/// seat of its showtime is lowered: its order cannot be named), reported by
/// its id, with the column's type; another showtime is repaired.
#[tokio::test]
async fn an_id_beyond_bigint_names_its_column_type() {
    let env = TestEnv::new().await;
    env.sql(
        "ALTER TABLE order_seat MODIFY order_id BIGINT UNSIGNED NOT NULL; \
         ALTER TABLE ticket_order MODIFY id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT",
    )
    .await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.showtime(2, 1, 61, "ON_SALE").await.unwrap();
    env.fx.warm_all(1, &seats, &[("A-1", "2")]).await.unwrap();
    env.fx.warm_all(2, &seats, &[("A-2", "1")]).await.unwrap();
    let big = "9223372036854775813";
    env.sql(&format!(
        "INSERT INTO ticket_order (id, order_no, user_id, showtime_id, status, expires_at, created_at, paid_at) \
         VALUES ({big}, 'BIG', 1, 1, 'PAID', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3)); \
         INSERT INTO order_seat (order_id, showtime_id, seat_no, active) VALUES ({big}, 1, 'A-1', 1)"
    ))
    .await;

    let report = env.once(&Kind::ALL).await;
    ended_well(&report);
    assert_eq!(
        seat(&env, 1, "A-1").await.as_deref(),
        Some("2"),
        "{}",
        report.to_text()
    );
    assert_eq!(
        seat(&env, 2, "A-2").await.as_deref(),
        Some("0"),
        "another showtime is repaired"
    );
    let map = inspect::load(&env.ctx, 1).await.unwrap().unwrap();
    let row = map
        .unknown_rows
        .iter()
        .find(|r| r.contains(big))
        .unwrap_or_else(|| panic!("{:?}", map.unknown_rows));
    assert!(row.contains("BIGINT UNSIGNED"), "{row}");
    assert!(!row.contains("no ticket_order row"), "{row}");
}

/// The user's case: a VARBINARY `order_seat.seat_no` broke the
/// reconciler's own data check (a syntax error near `binary HAVING`) and so
/// every seat chunk. Bytes are not text: the type is a deviation that
/// holds what reads the column (the seat jobs and expired-orders), with
/// its fix; the run fails nowhere, and after the fix it repairs. The same
/// for a VARBINARY template (`hall_seat.seat_no`, which only the seat jobs
/// read: expired-orders goes on).
#[tokio::test]
async fn varbinary_seat_names_hold_what_reads_them_and_break_nothing() {
    for table in ["order_seat", "hall_seat"] {
        let env = TestEnv::new().await;
        env.sql(&format!(
            "ALTER TABLE {table} MODIFY seat_no VARBINARY(16) NOT NULL"
        ))
        .await;
        let seats = env.fx.hall(1, 1, 3).await.unwrap();
        env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
        env.fx.order(1, "PAID", &["A-1"], 900).await.unwrap();
        let expired = env.fx.order(1, "PENDING", &["A-2"], -600).await.unwrap();
        env.fx
            .warm_all(1, &seats, &[("A-1", "2"), ("A-2", "1"), ("A-3", "1")])
            .await
            .unwrap();

        let report = env.once(&Kind::ALL).await;
        let text = report.to_text();
        assert!(
            report
                .jobs
                .iter()
                .all(|j| j.error_messages.is_empty() && j.errors == 0),
            "{table}: {text}"
        );
        assert_eq!(seat(&env, 1, "A-3").await.as_deref(), Some("1"), "{text}");
        let d = deviation(&report, table, "seat_no", "type").expect(&text);
        assert!(d.holds, "{text}");
        assert_eq!(
            env.fx.order_status(expired).await.unwrap(),
            if table == "order_seat" {
                "PENDING"
            } else {
                "CANCELLED"
            },
            "{table}: {text}"
        );

        env.sql(&d.fix).await;
        let report = env.once(&Kind::ALL).await;
        ended_well(&report);
        assert_eq!(deviation(&report, table, "seat_no", "type"), None);
        assert_eq!(seat(&env, 1, "A-3").await.as_deref(), Some("0"));
        assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("2"));
        assert_eq!(env.fx.order_status(expired).await.unwrap(), "CANCELLED");
    }
}
