//! Rule 17, "which types a column may have is one table that the judge and
//! the decoders share" (`model::schema::types`): a type the decoders read
//! losslessly is no deviation and is read; any other is a deviation that
//! holds what the column touches and says how to fix it, never a decode
//! failure at run time. The user's cases (TIMESTAMP dates, ids beyond
//! BIGINT, VARBINARY seat names), then every contract column through a list
//! of MySQL types (`types_of_every_column_are_judged_as_they_are_read`).
//! (Grace is 0 s here.)

use seatflow_reconciler::config::SecretUrl;
use seatflow_reconciler::model::Kind;
use seatflow_reconciler::ops::inspect;
use seatflow_reconciler::run::jobs::report::RunReport;
use seatflow_test_support::{TestEnv, ended_well, seat};

/// The deviation the run reported for `table.column` of `kind`.
fn deviation<'r>(
    report: &'r RunReport,
    table: &str,
    column: &str,
    kind: &str,
) -> Option<&'r seatflow_reconciler::run::jobs::deviations::DeviationReport> {
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

/// The generative test of the one table (CI): every contract column
/// through a list of MySQL types (integers of every width, signed and
/// not, DECIMAL, DATETIME and TIMESTAMP of several precisions, CHAR,
/// VARCHAR in other character sets, TEXT, ENUMs with and without the
/// contract's values, DATE, TIME, BIT, SET, BINARY, VARBINARY, BLOB,
/// FLOAT, JSON (a CHECK in MariaDB); and the column missing). Each time:
/// alter the column,
/// write the fixture's values, judge. The judge and the decoders agree:
/// a type the judge takes is read back equal by the very reads a run makes
/// (the page of showtimes, templates, occupancy, expired orders, the
/// confirmation, the cancel and its read-back); a type it refuses is a
/// named deviation whose printed fix, run as an operator would on MariaDB,
/// makes the column one it takes (and read back equal). A type MySQL
/// itself refuses on the column (a BLOB in a key) is no schema a database
/// can have, and is skipped. One database on a private MariaDB in memory,
/// many ALTERs: a few seconds.
#[tokio::test]
async fn types_of_every_column_are_judged_as_they_are_read() {
    use seatflow_reconciler::model::schema::COLUMNS;
    let server = seatflow_test_support::servers::mariadb_in_memory();
    let url = seatflow_test_support::servers::root_url(&server);
    // Two databases of the server, half the columns each, side by side.
    let (even, odd): (Vec<_>, Vec<_>) = COLUMNS.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let (a, b) = tokio::join!(
        judge_columns(&url, even.into_iter().map(|(_, c)| c).collect()),
        judge_columns(&url, odd.into_iter().map(|(_, c)| c).collect()),
    );
    let verdicts: std::collections::BTreeMap<String, Verdict> = a.into_iter().chain(b).collect();
    let count = |v: Verdict| verdicts.values().filter(|x| **x == v).count();
    // Both verdicts met often; MySQL itself refused few.
    assert!(
        count(Verdict::Read) > 150
            && count(Verdict::Refused) > 250
            && count(Verdict::NotASchema) < 60,
        "{verdicts:?}"
    );
    // The families, as the table says.
    for (case, verdict) in [
        ("showtime.starts_at TIMESTAMP(3)", Verdict::Read),
        ("ticket_order.expires_at DATETIME", Verdict::Read),
        ("ticket_order.created_at DATE", Verdict::Refused),
        ("ticket_order.id BIGINT UNSIGNED", Verdict::Read),
        ("order_seat.order_id DECIMAL(18,0)", Verdict::Read),
        ("order_seat.order_id DECIMAL(20,0)", Verdict::Refused),
        ("hall_seat.enabled TINYINT UNSIGNED", Verdict::Read),
        ("order_seat.active BIT(8)", Verdict::Refused),
        (
            "order_seat.seat_no VARCHAR(40) CHARACTER SET ucs2",
            Verdict::Read,
        ),
        ("order_seat.seat_no VARBINARY(40)", Verdict::Refused),
        (
            "showtime.status VARCHAR(40) CHARACTER SET latin1",
            Verdict::Read,
        ),
        (
            "showtime.status VARCHAR(40) CHARACTER SET ucs2",
            Verdict::Refused,
        ),
        (
            "ticket_order.status ENUM('CANCELLED','PAID','PENDING','REFUNDED')",
            Verdict::Read,
        ),
        (
            "ticket_order.status ENUM('PAID','PENDING','REFUNDED')",
            Verdict::Refused,
        ),
        ("ticket_order.cancel_reason JSON", Verdict::Refused),
        ("ticket_order.cancel_reason missing", Verdict::Refused),
        ("showtime.movie_id JSON", Verdict::Read),
    ] {
        assert_eq!(verdicts.get(case), Some(&verdict), "{case}");
    }
}

/// What the judge said of a column's type, as the test saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// No deviation that keeps the column from being read, or holds
    /// anything: read back equal.
    Read,
    /// A named deviation that keeps it from being read or holds something,
    /// whose fix ran and made the column read back equal.
    Refused,
    /// MySQL refused the type on the column: no database can have it.
    NotASchema,
}

/// [`types_of_every_column_are_judged_as_they_are_read`] for `columns`, in
/// a database of its own on the server at `url`: each case's verdict.
async fn judge_columns(
    url: &str,
    columns: Vec<&seatflow_reconciler::model::schema::ColumnSpec>,
) -> Vec<(String, Verdict)> {
    let env = TestEnv::on(url, |_| {}).await;
    let mut admin = operator(&env).await;
    seed(&mut admin).await;
    env.ctx.mysql.judge_contract().await.unwrap();
    let expected = observe(&env).await;
    let mut out = Vec::new();
    for spec in columns {
        for ty in types_for(spec) {
            let case = format!("{}.{} {ty}", spec.table, spec.column);
            let altered = match ty.as_str() {
                "missing" => format!("ALTER TABLE {} DROP COLUMN {}", spec.table, spec.column),
                // The contract's type, the other nullability.
                "NULL" | "NOT NULL" => format!(
                    "ALTER TABLE {} MODIFY {} {} {ty}",
                    spec.table, spec.column, spec.sql_type
                ),
                _ => format!(
                    "ALTER TABLE {} MODIFY {} {ty} {}",
                    spec.table,
                    spec.column,
                    if spec.nullable { "NULL" } else { "NOT NULL" }
                ),
            };
            if run(&mut admin, &altered).await.is_err() {
                // MySQL cannot hold these rows so: try the schema alone.
                run(&mut admin, &format!("DELETE FROM {}", spec.table))
                    .await
                    .ok();
                if run(&mut admin, &altered).await.is_err() {
                    out.push((case, Verdict::NotASchema));
                    restore(&mut admin, spec.table).await;
                    continue;
                }
            }
            let seeded = seed(&mut admin).await;
            let state = env.ctx.mysql.judge_contract().await.unwrap();
            let unreadable = |state: &seatflow_reconciler::model::holds::ContractState| {
                state
                    .judged
                    .iter()
                    .find(|j| {
                        j.deviation.table == spec.table
                            && j.deviation.column == spec.column
                            && (["type", "charset", "missing"].contains(&j.deviation.kind.label())
                                || j.holds)
                    })
                    .map(|j| j.deviation.clone())
            };
            let latest = match unreadable(&state) {
                None => {
                    if seeded {
                        assert_eq!(observe(&env).await, expected, "{case}: read back");
                    }
                    out.push((case.clone(), Verdict::Read));
                    state
                }
                Some(d) => {
                    assert!(!d.fix.is_empty(), "{case}: {d:?}");
                    if fix(&mut admin, &d.fix).await.is_err() {
                        run(&mut admin, &format!("DELETE FROM {}", spec.table))
                            .await
                            .ok();
                        if let Err(e) = fix(&mut admin, &d.fix).await {
                            panic!("{case}: the printed fix does not run: {}: {e}", d.fix);
                        }
                    }
                    let state = env.ctx.mysql.judge_contract().await.unwrap();
                    assert_eq!(unreadable(&state), None, "{case}: after {}", d.fix);
                    assert!(seed(&mut admin).await, "{case}: after {}", d.fix);
                    assert_eq!(observe(&env).await, expected, "{case}: after {}", d.fix);
                    out.push((case.clone(), Verdict::Refused));
                    state
                }
            };
            fix_the_rest(&env, &mut admin, spec, &latest, &case).await;
            restore(&mut admin, spec.table).await;
        }
    }
    out
}

/// Every other deviation of the column (unsigned, NULL-able, a length, a
/// collation, …): its printed fix runs, as an operator would run it, and
/// the deviation is gone.
async fn fix_the_rest(
    env: &TestEnv,
    admin: &mut sqlx::MySqlConnection,
    spec: &seatflow_reconciler::model::schema::ColumnSpec,
    state: &seatflow_reconciler::model::holds::ContractState,
    case: &str,
) {
    let of_column = |state: &seatflow_reconciler::model::holds::ContractState| {
        state
            .judged
            .iter()
            .filter(|j| j.deviation.table == spec.table && j.deviation.column == spec.column)
            .map(|j| j.deviation.clone())
            .collect::<Vec<_>>()
    };
    let found = of_column(state);
    if found.is_empty() {
        return;
    }
    for d in &found {
        if fix(admin, &d.fix).await.is_err() {
            run(admin, &format!("DELETE FROM {}", spec.table))
                .await
                .ok();
            if let Err(e) = fix(admin, &d.fix).await {
                panic!("{case}: the printed fix of {d:?} does not run: {e}");
            }
        }
    }
    let left = of_column(&env.ctx.mysql.judge_contract().await.unwrap());
    for d in &found {
        assert!(
            !left.iter().any(|l| l.kind == d.kind),
            "{case}: {} left {:?}",
            d.fix,
            left
        );
    }
}

/// The types tried on `spec`'s column, ENUM and SET members made of its
/// fixture's values (and the contract's, where it spells some).
fn types_for(spec: &seatflow_reconciler::model::schema::ColumnSpec) -> Vec<String> {
    use seatflow_reconciler::model::schema::Read;
    let quoted = |values: &[&str]| {
        values
            .iter()
            .map(|v| format!("'{v}'"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let fixture = fixture_values(spec.table, spec.column);
    let mut every: Vec<&str> = fixture.clone();
    if let Read::Spelled(values) = spec.read {
        every.extend(values.iter().copied());
    }
    every.sort_unstable();
    every.dedup();
    // The fixture's values, one contract spelling fewer (for a status: the
    // first it does not use, CANCELLED for an order).
    let short: Vec<&str> = match spec.read {
        Read::Spelled(values) => match values.iter().find(|v| !fixture.contains(v)) {
            Some(gone) => every.iter().copied().filter(|v| v != gone).collect(),
            None => Vec::new(),
        },
        _ => Vec::new(),
    };
    let mut out: Vec<String> = [
        "TINYINT UNSIGNED",
        "SMALLINT",
        "MEDIUMINT UNSIGNED",
        "INT",
        "BIGINT UNSIGNED",
        "DECIMAL(18,0)",
        "DECIMAL(20,0)",
        "DECIMAL(10,2)",
        "DATETIME",
        "DATETIME(6)",
        "TIMESTAMP(3)",
        "DATE",
        "TIME",
        "CHAR(40)",
        "VARCHAR(40) CHARACTER SET latin1",
        "VARCHAR(40) CHARACTER SET ucs2",
        "TEXT",
        "BIT(8)",
        "BINARY(40)",
        "VARBINARY(40)",
        "BLOB",
        "FLOAT",
        "JSON",
        "missing",
    ]
    .map(String::from)
    .to_vec();
    // The contract's type with the other nullability: a NULL-able key; an
    // `active` that refuses the cancel's NULL.
    if !spec.nullable {
        out.push("NULL".into());
    } else if spec.column == "active" {
        out.push("NOT NULL".into());
    }
    if !every.is_empty() {
        out.push(format!("ENUM({})", quoted(&every)));
        out.push(format!("SET({})", quoted(&every)));
    }
    if !short.is_empty() {
        out.push(format!("ENUM({})", quoted(&short)));
    }
    out
}

/// The fixture's values of a column, as text (ENUM and SET members).
fn fixture_values(table: &str, column: &str) -> Vec<&'static str> {
    match (table, column) {
        ("hall_seat", "seat_no") | ("order_seat", "seat_no") => vec!["A-1", "A-2"],
        ("hall_seat", "row_label") => vec!["A", "B"],
        ("hall_seat", "col_no") => vec!["1", "2"],
        ("hall_seat" | "showtime", "hall_id") | ("hall_seat", "enabled") => vec!["1"],
        ("order_seat", "active") => vec!["1"],
        ("showtime", "id") | ("ticket_order" | "order_seat", "showtime_id") => vec!["7"],
        ("showtime", "movie_id") => vec!["3"],
        ("showtime", "starts_at") => vec!["2031-01-02 03:04:05"],
        ("showtime", "status") => vec!["ON_SALE"],
        ("ticket_order", "id") | ("order_seat", "order_id") => vec!["11", "12"],
        ("ticket_order", "order_no") => vec!["N-11", "N-12"],
        ("ticket_order", "user_id") => vec!["5"],
        ("ticket_order", "status") => vec!["PAID", "PENDING"],
        ("ticket_order", "expires_at") => vec!["2020-06-01 00:00:00", "2031-01-01 00:00:00"],
        ("ticket_order", "created_at") => vec!["2020-05-31 23:45:00", "2030-12-01 10:00:00"],
        ("ticket_order", "paid_at") => vec!["2030-12-01 10:05:00"],
        _ => Vec::new(),
    }
}

/// The fixture, written as seatflow would, every table anew: hall 1 (A-1,
/// A-2, ordered A-2 first by row and column), showtime 7 ON_SALE, order 11
/// PAID on A-1, order 12 PENDING on A-2 and long expired. False when MySQL
/// cannot hold it in the columns as they are (a type that cannot).
async fn seed(admin: &mut sqlx::MySqlConnection) -> bool {
    run(
        admin,
        "DELETE FROM order_seat; DELETE FROM ticket_order; DELETE FROM showtime; DELETE FROM hall_seat; \
         INSERT INTO hall_seat (hall_id, seat_no, row_label, col_no, enabled) VALUES (1, 'A-1', 'B', 2, 1), (1, 'A-2', 'A', 1, 1); \
         INSERT INTO showtime (id, movie_id, hall_id, starts_at, status) VALUES (7, 3, 1, '2031-01-02 03:04:05', 'ON_SALE'); \
         INSERT INTO ticket_order (id, order_no, user_id, showtime_id, status, expires_at, created_at, paid_at) VALUES \
         (11, 'N-11', 5, 7, 'PAID', '2031-01-01 00:00:00', '2030-12-01 10:00:00', '2030-12-01 10:05:00'), \
         (12, 'N-12', 5, 7, 'PENDING', '2020-06-01 00:00:00', '2020-05-31 23:45:00', NULL); \
         INSERT INTO order_seat (order_id, showtime_id, seat_no, active) VALUES (11, 7, 'A-1', 1), (12, 7, 'A-2', 1)",
    )
    .await
    .is_ok()
}

/// The operator's session on the test's database, apart from the
/// product's pool: permissive, as data nobody cleaned got in (values cut
/// to fit), for the ALTERs that put a type in place and the fixture; the
/// fixes run in the server's own `sql_mode` (strict), as an operator would.
async fn operator(env: &TestEnv) -> sqlx::MySqlConnection {
    use sqlx::Connection as _;
    let mut c = sqlx::MySqlConnection::connect(&env.db_url).await.unwrap();
    run(&mut c, "SET SESSION sql_mode = ''").await.unwrap();
    c
}

/// Runs `statements` (one round trip).
async fn run(admin: &mut sqlx::MySqlConnection, statements: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(statements.to_string()))
        .execute(&mut *admin)
        .await
        .map(|_| ())
}

/// Runs a printed fix as an operator would: in the server's own `sql_mode`.
async fn fix(admin: &mut sqlx::MySqlConnection, fix: &str) -> Result<(), sqlx::Error> {
    run(admin, "SET SESSION sql_mode = DEFAULT").await?;
    let done = run(admin, fix).await;
    run(admin, "SET SESSION sql_mode = ''").await?;
    done
}

/// `table` as the contract has it again, with the fixture.
async fn restore(admin: &mut sqlx::MySqlConnection, table: &str) {
    let reference = include_str!("../../../migrations/reference/seatflow_schema.sql");
    run(admin, &format!("DROP TABLE {table}; {reference}"))
        .await
        .unwrap();
    assert!(seed(admin).await, "the fixture in the contract's schema");
}

/// What the reads a run makes return for the fixture, as text: the page of
/// ON_SALE showtimes, hall 1's template, showtime 7's occupancy, the
/// expired orders, the confirmation of A-1 (its order and the last time an
/// order touched it), and the cancel of order 12 with what it reads back
/// (the write columns). Display-only columns (`order_no`) are not read.
async fn observe(env: &TestEnv) -> String {
    let db = &env.ctx.mysql;
    let scope = env.ctx.scope(&[]);
    let page = db.on_sale_page(None, None, 10, scope).await;
    let templates = db.templates(&[1]).await.map(|(t, unknown)| {
        let seats: Vec<Vec<String>> = t.values().map(|t| t.seats().to_vec()).collect();
        (seats, unknown)
    });
    let occupancy = db.occupancy(&[7]).await.map(|o| {
        let rows: Vec<String> = o
            .occupancy
            .iter()
            .map(|(s, seat, h, order)| format!("{s} {seat} {h:?} {order}"))
            .collect();
        (rows, o.unknown)
    });
    let now = db.now_utc().await.unwrap();
    let expired = db
        .expired_page(now, None, 10, scope)
        .await
        .map(|p| (p.orders, p.unknown));
    let confirmed = db
        .confirm_seats(&[(7, "A-1".into(), true)])
        .await
        .map(|(c, _)| {
            c.iter()
                .map(|c| (c.order_id, c.rows.last_activity_ms, c.truth.unknown))
                .collect::<Vec<_>>()
        });
    let identity = seatflow_reconciler::store::mysql::RunIdentity {
        run_id: "types",
        instance: "test",
    };
    let cancel = db
        .cancel_expired(&[12], now, now, &identity)
        .await
        .map(|c| (c.cancelled, c.locked, c.refused_by_mysql, c.rewritten));
    let written: Option<(Vec<u8>, Option<String>, i64, i64)> = sqlx::query_as(
        "SELECT CAST(o.status AS BINARY), CAST(o.cancel_reason AS CHAR), \
         CAST(o.cancelled_at IS NOT NULL AS SIGNED), \
         CAST((SELECT COUNT(*) FROM order_seat os WHERE os.order_id = o.id AND os.active IS NULL) AS SIGNED) \
         FROM ticket_order o WHERE o.id = 12",
    )
    .fetch_optional(db.pool())
    .await
    .ok()
    .flatten();
    format!(
        "page {page:?}\ntemplates {templates:?}\noccupancy {occupancy:?}\nexpired {expired:?}\n\
         confirmed {confirmed:?}\ncancel {cancel:?}\nwritten {written:?}"
    )
}
