//! Rule 17, "the schema is part of the contract": seatflow databases whose
//! tables drifted from the contract's shape. Each test alters the test's
//! own tables the way a legacy schema has them, and checks that no seat
//! MySQL holds is lowered or rebuilt free, that healthy showtimes and
//! orders are still repaired, and that the deviation is reported with its
//! fix. (Grace is 0 s here.)

use seatflow_reconciler::model::Kind;
use seatflow_reconciler::run::jobs::report::RunReport;
use seatflow_test_support::{TestEnv, ended_well, seat};

/// The deviation the run reported for `table.column`, as (kind, holds):
/// the column's own, not a warning about an index it leads.
fn deviation(report: &RunReport, table: &str, column: &str) -> Option<(String, bool)> {
    report
        .contract_deviations
        .iter()
        .find(|d| d.table == table && d.column == column && !d.warns)
        .map(|d| (d.kind.to_string(), d.holds))
}

/// Showtime `id` ON_SALE in hall `hall` (1 × 4 seats: A-1 … A-4), warmed
/// with `values` (the rest "0").
async fn showtime(env: &TestEnv, id: i64, hall: i64, values: &[(&str, &str)]) {
    let seats: Vec<String> = (1..=4).map(|c| format!("A-{c}")).collect();
    let exists: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM hall WHERE id = ?")
        .bind(hall)
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap();
    if exists == 0 {
        env.fx.hall(hall, 1, 4).await.unwrap();
    }
    env.fx.showtime(id, hall, 60 + id, "ON_SALE").await.unwrap();
    env.fx.warm_all(id, &seats, values).await.unwrap();
}

/// The user's case: `order_seat.showtime_id` made NULL-able, and a PAID
/// order's row with none. Its order says showtime 1: nothing is lowered
/// there (the seat shown "2" stays), while showtime 2's sold orphan is
/// released. A row whose order names no showtime either holds every
/// showtime. The deviation is reported, holding, with its fix.
#[tokio::test]
async fn a_seat_row_with_no_showtime_never_has_its_seat_lowered() {
    let env = TestEnv::new().await;
    env.sql("ALTER TABLE order_seat MODIFY showtime_id BIGINT NULL")
        .await;
    showtime(&env, 1, 1, &[("A-2", "2"), ("A-3", "2")]).await;
    showtime(&env, 2, 1, &[("A-3", "2")]).await;
    let order = env.fx.order(1, "PAID", &["A-2"], 900).await.unwrap();
    env.sql(&format!(
        "UPDATE order_seat SET showtime_id = NULL WHERE order_id = {order}"
    ))
    .await;

    let report = env.once(&Kind::ALL).await;
    ended_well(&report);
    assert_eq!(
        seat(&env, 1, "A-2").await.as_deref(),
        Some("2"),
        "{}",
        report.to_text()
    );
    assert_eq!(
        seat(&env, 1, "A-3").await.as_deref(),
        Some("2"),
        "nothing is lowered in the row's showtime"
    );
    assert_eq!(
        seat(&env, 2, "A-3").await.as_deref(),
        Some("0"),
        "another showtime is repaired: {}",
        report.to_text()
    );
    assert_eq!(
        deviation(&report, "order_seat", "showtime_id"),
        Some(("nullable".into(), true))
    );
    let text = report.to_text();
    assert!(
        text.contains("ALTER TABLE order_seat MODIFY showtime_id BIGINT NOT NULL"),
        "{text}"
    );
    let held: u64 = report.jobs.iter().map(|j| j.held_back).sum();
    assert_eq!(held, 2, "showtime 1: A-2 (its row unseen) and A-3: {text}");

    // The order's own showtime is unknown too: every showtime is held.
    env.sql("ALTER TABLE ticket_order MODIFY showtime_id BIGINT NULL")
        .await;
    env.sql(&format!(
        "UPDATE ticket_order SET showtime_id = NULL WHERE id = {order}"
    ))
    .await;
    env.fx.warm(2, &[("A-4", "2")]).await.unwrap();
    let report = env.once(&Kind::ALL).await;
    ended_well(&report);
    assert_eq!(
        seat(&env, 2, "A-4").await.as_deref(),
        Some("2"),
        "{}",
        report.to_text()
    );
    assert_eq!(seat(&env, 1, "A-2").await.as_deref(), Some("2"));
}

/// The data check runs once a pass; the confirmation right before a lowering
/// reads the rows with no showtime itself: one written after the check
/// (a NULL-able column, no NULL yet) still holds its seat.
#[tokio::test]
async fn the_confirmation_reads_rows_with_no_showtime_written_after_the_schema_check() {
    let env = TestEnv::new().await;
    env.sql("ALTER TABLE order_seat MODIFY showtime_id BIGINT NULL")
        .await;
    showtime(&env, 1, 1, &[]).await;
    let state = env.ctx.mysql.judge_contract().await.unwrap();
    assert!(state.holds.is_empty(), "no NULL yet: harmless");
    let order = env.fx.order(1, "PAID", &["A-2"], 900).await.unwrap();
    env.sql(&format!(
        "UPDATE order_seat SET showtime_id = NULL WHERE order_id = {order}"
    ))
    .await;
    let (history, unknown) = env
        .ctx
        .mysql
        .confirm_seats(&[(1, "A-2".into(), true), (1, "A-3".into(), true)])
        .await
        .unwrap();
    assert!(history[0].truth.unknown, "{history:?}");
    assert!(!history[1].truth.unknown, "another seat: {history:?}");
    assert_eq!(unknown.len(), 1, "{unknown:?}");
}

/// Other key columns a legacy schema lets be NULL: a seat row with no
/// `seat_no` may hold any seat of its showtime, and one with no `order_id`
/// cannot be looked up by its key: neither lets a seat of the showtime be
/// lowered, and both are reported.
#[tokio::test]
async fn seat_rows_with_no_seat_or_no_order_hold_their_showtime() {
    for column in ["seat_no", "order_id"] {
        let env = TestEnv::new().await;
        env.sql(&format!(
            "ALTER TABLE order_seat DROP PRIMARY KEY, MODIFY {column} {} NULL",
            if column == "seat_no" {
                "VARCHAR(16)"
            } else {
                "BIGINT"
            }
        ))
        .await;
        showtime(&env, 1, 1, &[("A-1", "1"), ("A-3", "2")]).await;
        showtime(&env, 2, 1, &[("A-1", "1")]).await;
        let order = env.fx.order(1, "PAID", &["A-3"], 900).await.unwrap();
        env.sql(&format!(
            "UPDATE order_seat SET {column} = NULL WHERE order_id = {order}"
        ))
        .await;

        let report = env.once(&Kind::ALL).await;
        ended_well(&report);
        for s in ["A-1", "A-3"] {
            assert_ne!(
                seat(&env, 1, s).await.as_deref(),
                Some("0"),
                "{column}: showtime 1 {s} lowered: {}",
                report.to_text()
            );
        }
        assert_eq!(
            seat(&env, 2, "A-1").await.as_deref(),
            Some("0"),
            "{column}: another showtime is repaired"
        );
        assert!(
            report.jobs.iter().map(|j| j.invalid_data).sum::<u64>() >= 1,
            "{column}: reported: {}",
            report.to_text()
        );
        assert_eq!(
            deviation(&report, "order_seat", column).map(|d| d.0),
            Some("nullable".into())
        );
    }
}

/// The user's case: one expired PENDING order whose `showtime_id` is NULL
/// made `expired-orders` fail on every run. It is one row: reported, not
/// cancelled, and another showtime's expired order is cancelled and its
/// seat released in the same run.
#[tokio::test]
async fn one_expired_order_with_a_null_showtime_holds_back_no_other() {
    let env = TestEnv::new().await;
    env.sql("ALTER TABLE ticket_order MODIFY showtime_id BIGINT NULL")
        .await;
    showtime(&env, 1, 1, &[("A-1", "1")]).await;
    showtime(&env, 2, 1, &[("A-1", "1")]).await;
    // Expired first in (expires_at, id) order: the page meets it first.
    let bad = env.fx.order(1, "PENDING", &["A-1"], -900).await.unwrap();
    let good = env.fx.order(2, "PENDING", &["A-1"], -600).await.unwrap();
    env.sql(&format!(
        "UPDATE ticket_order SET showtime_id = NULL WHERE id = {bad}"
    ))
    .await;

    let report = env.once(&Kind::ALL).await;
    ended_well(&report);
    assert_eq!(env.fx.order_status(good).await.unwrap(), "CANCELLED");
    assert_eq!(seat(&env, 2, "A-1").await.as_deref(), Some("0"));
    assert_eq!(env.fx.order_status(bad).await.unwrap(), "PENDING");
    assert_eq!(
        seat(&env, 1, "A-1").await.as_deref(),
        Some("1"),
        "its seat is held by a row outside the contract"
    );
    let expired = &report.jobs[0];
    assert_eq!(expired.kind, Kind::ExpiredOrders);
    assert!(expired.invalid_data >= 1, "{}", report.to_text());
    // The deviation is harmless: the reads take the NULL row by row.
    assert_eq!(
        deviation(&report, "ticket_order", "showtime_id"),
        Some(("nullable".into(), false))
    );

    // The same with a showtime whose `hall_id` is NULL: one showtime.
    env.sql("ALTER TABLE showtime MODIFY hall_id BIGINT NULL")
        .await;
    env.sql("UPDATE showtime SET hall_id = NULL WHERE id = 1")
        .await;
    env.fx.warm(2, &[("A-2", "1")]).await.unwrap();
    let report = env.once(&Kind::ALL).await;
    ended_well(&report);
    assert_eq!(seat(&env, 2, "A-2").await.as_deref(), Some("0"));
    assert!(report.jobs[1].invalid_data >= 1, "{}", report.to_text());
}

/// The user's case: a template whose `seat_no` is case-sensitive
/// (`utf8mb4_bin`) holds both `A-01` and `a-01`, which `order_seat`'s
/// collation (and so `uq_occupancy`) takes for one seat. A PAID order on
/// `a-01` raises `a-01` and never lowers `A-01`; a rebuilt hash has `a-01`
/// sold and no free field for `A-01`. Two more members of the class: a
/// template that tells trailing spaces apart (NO PAD), and accents.
#[tokio::test]
async fn template_seats_one_seat_to_mysql_are_never_lowered_or_rebuilt_free() {
    for (collation, upper, lower) in [
        ("utf8mb4_bin", "A-01", "a-01"),
        ("utf8mb4_nopad_bin", "A-01", "A-01 "),
        ("utf8mb4_bin", "á-01", "a-01"),
    ] {
        let env = TestEnv::new().await;
        env.sql(&format!(
            "ALTER TABLE hall_seat MODIFY seat_no VARCHAR(16) COLLATE {collation} NOT NULL"
        ))
        .await;
        env.fx.hall(1, 1, 2).await.unwrap();
        for name in [upper, lower] {
            sqlx::query(
                "INSERT INTO hall_seat (hall_id, seat_no, row_label, col_no, enabled) VALUES (1, ?, 'B', 1, 1)",
            )
            .bind(name)
            .execute(env.ctx.mysql.pool())
            .await
            .unwrap();
        }
        env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
        env.fx
            .warm(1, &[("A-1", "1"), ("A-2", "0"), (upper, "2"), (lower, "0")])
            .await
            .unwrap();
        env.fx.order(1, "PAID", &[lower], 900).await.unwrap();

        let report = env.once(&Kind::ALL).await;
        ended_well(&report);
        let case = format!("{collation} {upper:?} {lower:?}: {}", report.to_text());
        assert_eq!(seat(&env, 1, lower).await.as_deref(), Some("2"), "{case}");
        assert_eq!(seat(&env, 1, upper).await.as_deref(), Some("2"), "{case}");
        assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("0"), "{case}");
        let (kind, holds) = deviation(&report, "hall_seat", "seat_no").expect("reported");
        assert_eq!((kind.as_str(), holds), ("collation", true), "{case}");
        assert!(
            report
                .contract_deviations
                .iter()
                .any(|d| d.detail.contains(upper) && d.detail.contains(lower)),
            "the group is named: {case}"
        );

        let _: i64 = env
            .redis(redis::cmd("DEL").arg(env.ctx.redis.keys.seat(1)))
            .await;
        let report = env.once(&Kind::ALL).await;
        ended_well(&report);
        let hash = env.fx.hash(1).await.unwrap();
        assert_eq!(hash.get(lower).map(String::as_str), Some("2"), "{hash:?}");
        assert_eq!(
            hash.get(upper),
            None,
            "no free field for the group: {hash:?}"
        );
        assert_eq!(hash.get("A-2").map(String::as_str), Some("0"), "{hash:?}");
    }
}

/// The user's case: the contract's seat names widened to 26 characters,
/// the audit's not (yet): a repair of a 26-character seat is not made (its
/// audit row would be cut), it is an audit error naming `migrate`; after
/// `migrate` it is made and audited whole. The run's own rows stay whole
/// too: the sessions are strict, and no insert ignores a value too long.
#[tokio::test]
async fn a_seat_name_longer_than_the_audit_is_never_cut() {
    let env = TestEnv::new().await;
    for table in ["hall_seat", "order_seat"] {
        env.sql(&format!(
            "ALTER TABLE {table} MODIFY seat_no VARCHAR(26) NOT NULL"
        ))
        .await;
    }
    let long = "BALCONY-LEFT-ROW-07-SEAT-9";
    assert_eq!(long.len(), 26);
    env.fx.hall(1, 1, 1).await.unwrap();
    env.sql(&format!(
        "INSERT INTO hall_seat (hall_id, seat_no, row_label, col_no, enabled) VALUES (1, '{long}', 'Z', 1, 1)"
    ))
    .await;
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    env.fx.warm(1, &[("A-1", "1"), (long, "1")]).await.unwrap();

    let report = env.once(&Kind::ALL).await;
    assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("0"));
    assert_eq!(
        seat(&env, 1, long).await.as_deref(),
        Some("1"),
        "{}",
        report.to_text()
    );
    let orphans = report
        .jobs
        .iter()
        .find(|j| j.kind == Kind::OrphanLocks)
        .unwrap();
    assert_eq!(
        orphans
            .errors_by_stage
            .get(&seatflow_reconciler::error::Stage::Audit),
        Some(&1),
        "{}",
        report.to_text()
    );
    assert!(
        orphans.error_messages.iter().any(|m| m.contains("migrate")),
        "{:?}",
        orphans.error_messages
    );
    assert_eq!(
        deviation(&report, "reconcile_fix", "seat_no"),
        Some(("length".into(), true))
    );

    assert_eq!(env.ctx.mysql.migrate(false).await.unwrap(), Some(26));
    let report = env.once(&Kind::ALL).await;
    ended_well(&report);
    assert_eq!(seat(&env, 1, long).await.as_deref(), Some("0"));
    let audited: Vec<Option<String>> = sqlx::query_scalar(
        "SELECT seat_no FROM reconcile_fix WHERE kind IN ('seat_set', 'seat_released')",
    )
    .fetch_all(env.ctx.mysql.pool())
    .await
    .unwrap();
    assert!(audited.contains(&Some(long.to_string())), "{audited:?}");
    assert_eq!(deviation(&report, "reconcile_fix", "seat_no"), None);

    // The audit write itself refuses what does not fit, whatever the
    // server's sql_mode: an error, never a row cut short.
    let too_long = "X".repeat(40);
    let fix = seatflow_reconciler::store::mysql::FixRecord {
        fix_id: uuid::Uuid::new_v4().simple().to_string(),
        job: Kind::OrphanLocks,
        action: seatflow_reconciler::model::FixAction::SeatSet,
        showtime_id: Some(1),
        seat_no: Some(too_long.clone()),
        order_id: None,
        before: Some("1".into()),
        after: Some("0".into()),
        at: chrono::Utc::now().naive_utc(),
    };
    let written = env.ctx.mysql.insert_fixes("run", "test", &[fix]).await;
    assert!(written.is_err(), "a 40-character seat was cut to fit");
    let mode: String = sqlx::query_scalar("SELECT @@SESSION.sql_mode")
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap();
    assert!(mode.contains("STRICT_ALL_TABLES"), "{mode}");
}

/// A column of another type than the contract's (a VARCHAR `hall_id`):
/// SQL would compare it in another type's terms, so every seat write is
/// held, the seat jobs say why, and `expired-orders` (which does not read
/// the showtime) goes on.
#[tokio::test]
async fn a_column_of_another_type_holds_what_reads_it_and_nothing_else() {
    let env = TestEnv::new().await;
    showtime(&env, 1, 1, &[("A-1", "1"), ("A-2", "1")]).await;
    let order = env.fx.order(1, "PENDING", &["A-2"], -900).await.unwrap();
    env.sql("ALTER TABLE showtime MODIFY hall_id VARCHAR(20) NOT NULL")
        .await;

    let report = env.once(&Kind::ALL).await;
    assert_eq!(
        seat(&env, 1, "A-1").await.as_deref(),
        Some("1"),
        "{}",
        report.to_text()
    );
    assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
    assert_eq!(
        seat(&env, 1, "A-2").await.as_deref(),
        Some("1"),
        "its release is a seat write, held too"
    );
    for j in report.jobs.iter().filter(|j| j.kind.is_seat_job()) {
        let why = j.fatal.as_deref().unwrap_or_default();
        assert!(
            why.contains("held back by the schema"),
            "{}",
            report.to_text()
        );
    }
    assert_eq!(
        deviation(&report, "showtime", "hall_id"),
        Some(("type".into(), true))
    );
}

/// Rule 17, "holds only the jobs that use that column": a missing
/// `ticket_order.cancel_reason` (written by the cancel alone) held all four
/// seat jobs for the whole estate; a missing `expires_at` failed with a raw
/// `1054`. Each is a deviation of kind `missing` whose fix is an `ADD`
/// (executed here): the first holds `expired-orders`' cancels (its orders
/// still read and counted) while the seat jobs repair; the second, read by
/// both, holds both, each saying so; a missing `row_label` (read only to
/// order a rebuilt hash) holds nothing.
#[tokio::test]
async fn a_missing_column_holds_only_the_jobs_that_use_it() {
    for column in ["cancel_reason", "expires_at", "row_label"] {
        let env = TestEnv::new().await;
        showtime(&env, 1, 1, &[("A-1", "1"), ("A-2", "1")]).await;
        let expired = env.fx.order(1, "PENDING", &["A-2"], -900).await.unwrap();
        let table = if column == "row_label" {
            "hall_seat"
        } else {
            "ticket_order"
        };
        env.sql(&format!("ALTER TABLE {table} DROP COLUMN {column}"))
            .await;

        let report = env.once(&Kind::ALL).await;
        let text = report.to_text();
        assert!(!text.contains("1054"), "{column}: {text}");
        let d = report
            .contract_deviations
            .iter()
            .find(|d| d.table == table && d.column == column)
            .unwrap_or_else(|| panic!("{column}: {text}"));
        assert_eq!(d.kind, "missing", "{column}");
        assert!(d.fix.contains(&format!("ADD COLUMN {column}")), "{}", d.fix);
        let orphans = seat(&env, 1, "A-1").await;
        let status = env.fx.order_status(expired).await.unwrap();
        match column {
            "cancel_reason" => {
                assert!(d.holds && d.detail.contains("expired-orders"), "{d:?}");
                assert_eq!(orphans.as_deref(), Some("0"), "the seat jobs run: {text}");
                assert_eq!(status, "PENDING", "{text}");
                assert_eq!(report.jobs[0].held_back, 1, "{text}");
            }
            "expires_at" => {
                assert!(d.holds, "{d:?}");
                assert_eq!(orphans.as_deref(), Some("1"), "{text}");
                for j in &report.jobs {
                    let why = j.fatal.as_deref().unwrap_or_default();
                    assert!(why.contains("held back by the schema"), "{text}");
                }
            }
            _ => {
                assert!(!d.holds, "{d:?}");
                ended_well(&report);
                assert_eq!(orphans.as_deref(), Some("0"), "{text}");
                assert_eq!(status, "CANCELLED", "{text}");
            }
        }

        env.sql(&d.fix).await;
        let report = env.once(&Kind::ALL).await;
        ended_well(&report);
        assert!(
            !report
                .contract_deviations
                .iter()
                .any(|d| d.table == table && d.column == column),
            "{column}: {}",
            report.to_text()
        );
    }
}

/// The indexes the reads rely on are judged: without one that leads with
/// `order_seat.showtime_id` (uq_occupancy dropped), `ticket_order (status,
/// expires_at)` or `(showtime_id, status)`, each read is slow, not wrong:
/// a deviation of kind `index` that warns and holds nothing, with the
/// `CREATE INDEX` to run and what it costs; run, it clears the deviation.
#[tokio::test]
async fn a_missing_index_warns_with_its_cost_and_holds_nothing() {
    let env = TestEnv::new().await;
    showtime(&env, 1, 1, &[("A-1", "1"), ("A-3", "2")]).await;
    env.fx.order(1, "PAID", &["A-2"], 900).await.unwrap();
    env.sql(
        "ALTER TABLE order_seat DROP INDEX uq_occupancy; \
         ALTER TABLE ticket_order DROP INDEX idx_order_status_expires, DROP INDEX idx_order_showtime_status",
    )
    .await;
    let report = env.once(&Kind::ALL).await;
    ended_well(&report);
    assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("0"));
    assert_eq!(seat(&env, 1, "A-2").await.as_deref(), Some("2"));
    let indexes: Vec<_> = report
        .contract_deviations
        .iter()
        .filter(|d| d.kind == "index")
        .collect();
    assert_eq!(
        indexes
            .iter()
            .map(|d| (d.table, d.column))
            .collect::<Vec<_>>(),
        [
            ("order_seat", "showtime_id"),
            ("ticket_order", "status"),
            ("ticket_order", "showtime_id"),
        ],
        "{}",
        report.to_text()
    );
    for d in &indexes {
        assert!(d.warns && !d.holds, "{d:?}");
        assert!(d.fix.starts_with("CREATE INDEX"), "{d:?}");
        assert!(d.detail.contains("scan"), "what it costs: {d:?}");
        env.sql(&d.fix).await;
    }
    let state = env.ctx.mysql.judge_contract().await.unwrap();
    assert!(
        !state
            .judged
            .iter()
            .any(|j| j.deviation.kind.label() == "index"),
        "{:?}",
        state.judged
    );
}

/// `showtime` with no unique id (a legacy table keyed by an ordinary
/// index): one id on two rows, one of them CANCELLED in another hall. The
/// id's showtime is on a page once, as the one ON_SALE row says; the
/// CANCELLED row is not read as ON_SALE; a page holds no more rows than
/// it asked for (a sweep's limit counts showtimes, not joined rows); no
/// seat of the id is written, and the other showtime is repaired.
#[tokio::test]
async fn a_showtime_id_on_two_rows_is_one_showtime_on_a_page() {
    let env = TestEnv::with(|s| s.job_mut(Kind::OrphanLocks).scan_limit = 2).await;
    env.sql("ALTER TABLE showtime DROP PRIMARY KEY, ADD KEY idx_was_primary (id)")
        .await;
    showtime(&env, 1, 1, &[("A-1", "1")]).await;
    showtime(&env, 2, 1, &[("A-1", "1")]).await;
    env.fx.hall(2, 1, 4).await.unwrap();
    env.fx.showtime(1, 2, 30, "CANCELLED").await.unwrap();
    let state = env.ctx.mysql.judge_contract().await.unwrap();
    assert!(!state.holds.is_empty(), "the id on two rows holds it");

    let page = env
        .ctx
        .mysql
        .on_sale_page(None, None, 10, env.ctx.scope(&[]))
        .await
        .unwrap();
    let read: Vec<(i64, i64)> = page.rows.iter().map(|s| (s.id, s.hall_id)).collect();
    assert_eq!(read, [(1, 1), (2, 1)], "{page:?}");
    assert_eq!(page.read, 2, "{page:?}");

    let report = env.once(&[Kind::OrphanLocks]).await;
    ended_well(&report);
    let text = report.to_text();
    assert_eq!(report.jobs[0].scanned, 2, "{text}");
    assert_eq!(seat(&env, 1, "A-1").await.as_deref(), Some("1"), "{text}");
    assert_eq!(seat(&env, 2, "A-1").await.as_deref(), Some("0"), "{text}");
}
