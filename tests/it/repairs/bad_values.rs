//! Rule 16, "a bad value is one row", generatively, over the schema as
//! legacy seatflows have it (rule 17): for each column of each contract
//! table, a value the contract forbids (NULL, a number beyond BIGINT, a
//! zero or impossible date, a text longer than the contract's), let in by
//! the schema change a real database would need for it, in one row of one
//! showtime or order. Beside it, healthy showtimes and orders with drift of
//! every job, in random sweep order and page sizes (the bad row at a page's
//! start, middle or end). One run of all five jobs (grace 0 s) must:
//! - end, with no job failed;
//! - repair every healthy drift: orphan lock, paid seat, sold orphan,
//!   expired order (and its seat), missing hash;
//! - never lower a seat that MySQL shows may be held: by any row on it, in
//!   its showtime or with none, that the contract's own cancel or refund
//!   did not end.
//!
//! The oracle is written here, in SQL and HGETALL, not with the planner.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use seatflow_reconciler::model::Kind;
use seatflow_test_support::TestEnv;

/// A value the contract forbids, and the schema change that lets it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bad {
    Null,
    /// 18446744073709551615 in a column made BIGINT UNSIGNED.
    BeyondBigint,
    ZeroDate,
    /// `2027-02-30` (a permissive server's `ALLOW_INVALID_DATES`).
    NoSuchDay,
    /// 200 characters in a column made VARCHAR(255).
    Long,
    /// 255 in a flag made TINYINT UNSIGNED.
    Flag255,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Integer,
    Flag,
    Text,
    Date,
}

/// Every column of the contract's tables (`hall` is never read).
const COLUMNS: [(&str, &str, Family); 24] = [
    ("hall_seat", "hall_id", Family::Integer),
    ("hall_seat", "seat_no", Family::Text),
    ("hall_seat", "row_label", Family::Text),
    ("hall_seat", "col_no", Family::Integer),
    ("hall_seat", "enabled", Family::Flag),
    ("showtime", "id", Family::Integer),
    ("showtime", "movie_id", Family::Integer),
    ("showtime", "hall_id", Family::Integer),
    ("showtime", "starts_at", Family::Date),
    ("showtime", "status", Family::Text),
    ("ticket_order", "id", Family::Integer),
    ("ticket_order", "order_no", Family::Text),
    ("ticket_order", "user_id", Family::Integer),
    ("ticket_order", "showtime_id", Family::Integer),
    ("ticket_order", "status", Family::Text),
    ("ticket_order", "expires_at", Family::Date),
    ("ticket_order", "created_at", Family::Date),
    ("ticket_order", "paid_at", Family::Date),
    ("ticket_order", "cancelled_at", Family::Date),
    ("ticket_order", "cancel_reason", Family::Text),
    ("order_seat", "order_id", Family::Integer),
    ("order_seat", "showtime_id", Family::Integer),
    ("order_seat", "seat_no", Family::Text),
    ("order_seat", "active", Family::Flag),
];

fn bad_values(family: Family) -> Vec<Bad> {
    match family {
        Family::Integer => vec![Bad::Null, Bad::BeyondBigint],
        Family::Flag => vec![Bad::Null, Bad::Flag255],
        Family::Text => vec![Bad::Null, Bad::Long],
        Family::Date => vec![Bad::Null, Bad::ZeroDate, Bad::NoSuchDay],
    }
}

/// Which row of the bad showtime holds the value.
#[derive(Debug, Clone, Copy)]
enum Row {
    /// The PAID order holding A-1 (shown "2").
    Paid,
    /// The expired PENDING order holding A-3 (shown "1").
    Expired,
}

#[derive(Debug, Clone)]
struct Case {
    table: &'static str,
    column: &'static str,
    family: Family,
    bad: Bad,
    row: Row,
    /// Healthy showtimes with drift (ids 11, 12, …) and one whose hash is
    /// lost (id 20).
    healthy: usize,
    /// Minutes from now each showtime starts: the sweep's order.
    starts: Vec<i64>,
    scan_chunk: usize,
}

fn case() -> impl Strategy<Value = Case> {
    let column_and_bad = prop::sample::select(COLUMNS.to_vec()).prop_flat_map(|(t, c, f)| {
        prop::sample::select(bad_values(f)).prop_map(move |b| (t, c, f, b))
    });
    (
        column_and_bad,
        prop::bool::ANY,
        1..=3usize,
        prop::collection::vec(1..500i64, 5),
        prop::sample::select(vec![1usize, 2, 3, 200]),
    )
        .prop_map(
            |((table, column, family, bad), paid, healthy, starts, scan_chunk)| Case {
                table,
                column,
                family,
                bad,
                row: if paid { Row::Paid } else { Row::Expired },
                healthy,
                starts,
                scan_chunk,
            },
        )
}

const BAD_SHOWTIME: i64 = 1;
const BAD_HALL: i64 = 2;
const LOST_HASH: i64 = 20;

/// The schema change the value needs: NULL-able (a key column leaves its
/// primary key), unsigned, or wider.
fn schema_change(c: &Case) -> Vec<String> {
    let (t, col) = (c.table, c.column);
    let definition = match (c.family, c.bad) {
        (_, Bad::Long) => "VARCHAR(255)".to_string(),
        (Family::Text, _) if col == "seat_no" => "VARCHAR(16)".into(),
        (Family::Text, _) if col == "order_no" => "VARCHAR(40)".into(),
        (Family::Text, _) => "VARCHAR(32)".into(),
        (Family::Date, _) => "DATETIME(3)".into(),
        (Family::Flag, Bad::Flag255) => "TINYINT UNSIGNED".into(),
        (Family::Flag, _) => "TINYINT(1)".into(),
        (Family::Integer, Bad::BeyondBigint) => "BIGINT UNSIGNED".into(),
        (Family::Integer, _) => "BIGINT".into(),
    };
    let in_primary_key = matches!(
        (t, col),
        ("hall_seat", "hall_id" | "seat_no")
            | ("showtime", "id")
            | ("ticket_order", "id")
            | ("order_seat", "order_id" | "seat_no")
    );
    // NULL where the value needs it or the contract allows it.
    let nullable_by_contract = matches!(
        col,
        "row_label" | "col_no" | "paid_at" | "cancelled_at" | "cancel_reason" | "active"
    );
    let null = if c.bad == Bad::Null || nullable_by_contract {
        "NULL"
    } else {
        "NOT NULL"
    };
    if c.bad == Bad::Null && in_primary_key {
        // Out of its primary key, still indexed (the cancel looks orders up
        // by id; a template or order's rows by their first column).
        vec![format!(
            "ALTER TABLE {t} DROP PRIMARY KEY, MODIFY {col} {definition} NULL, ADD KEY idx_was_primary ({col})"
        )]
    } else {
        vec![format!("ALTER TABLE {t} MODIFY {col} {definition} {null}")]
    }
}

fn value(bad: Bad) -> String {
    match bad {
        Bad::Null => "NULL".into(),
        Bad::BeyondBigint => "18446744073709551615".into(),
        Bad::ZeroDate => "'0000-00-00 00:00:00'".into(),
        Bad::NoSuchDay => "'2027-02-30 10:00:00'".into(),
        Bad::Long => format!("'{}'", "W".repeat(200)),
        Bad::Flag255 => "255".into(),
    }
}

/// Seats A-1 … A-4 of a 1 × 4 hall.
fn seats() -> Vec<String> {
    (1..=4).map(|c| format!("A-{c}")).collect()
}

/// The estate: the bad showtime (hall 2) and the healthy ones (hall 1),
/// with the drift each job repairs. Returns (the bad showtime's PAID and
/// expired orders, the healthy ones' PAID and expired orders).
async fn seed(env: &TestEnv, c: &Case) -> ((i64, i64), Vec<(i64, i64, i64)>) {
    let names = seats();
    env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.hall(BAD_HALL, 1, 4).await.unwrap();
    env.fx
        .showtime(BAD_SHOWTIME, BAD_HALL, c.starts[0], "ON_SALE")
        .await
        .unwrap();
    env.fx
        .warm_all(
            BAD_SHOWTIME,
            &names,
            &[("A-1", "2"), ("A-2", "1"), ("A-3", "1")],
        )
        .await
        .unwrap();
    let bad_paid = env
        .fx
        .order(BAD_SHOWTIME, "PAID", &["A-1"], 900)
        .await
        .unwrap();
    let bad_expired = env
        .fx
        .order(BAD_SHOWTIME, "PENDING", &["A-3"], -900)
        .await
        .unwrap();
    let mut healthy = Vec::new();
    for i in 0..c.healthy {
        let id = 11 + i as i64;
        env.fx
            .showtime(id, 1, c.starts[1 + i], "ON_SALE")
            .await
            .unwrap();
        // A-1 an orphan lock, A-2 a paid seat shown free, A-3 a sold
        // orphan, A-4 an expired order's seat.
        env.fx
            .warm_all(id, &names, &[("A-1", "1"), ("A-3", "2"), ("A-4", "1")])
            .await
            .unwrap();
        let paid = env.fx.order(id, "PAID", &["A-2"], 900).await.unwrap();
        let expired = env.fx.order(id, "PENDING", &["A-4"], -600).await.unwrap();
        healthy.push((id, paid, expired));
    }
    env.fx
        .showtime(LOST_HASH, 1, c.starts[4], "ON_SALE")
        .await
        .unwrap();
    let held = env
        .fx
        .order(LOST_HASH, "PAID", &["A-4"], 900)
        .await
        .unwrap();
    healthy.push((LOST_HASH, held, 0));

    // The value, where the case puts it.
    let order = match c.row {
        Row::Paid => bad_paid,
        Row::Expired => bad_expired,
    };
    let seat = match c.row {
        Row::Paid => "A-1",
        Row::Expired => "A-3",
    };
    let target = match c.table {
        "showtime" => format!("WHERE id = {BAD_SHOWTIME}"),
        "hall_seat" => format!("WHERE hall_id = {BAD_HALL} AND seat_no = '{seat}'"),
        "ticket_order" => format!("WHERE id = {order}"),
        _ => format!("WHERE order_id = {order}"),
    };
    let mut statements = schema_change(c);
    statements.push(format!(
        "UPDATE {} SET {} = {} {target}",
        c.table,
        c.column,
        value(c.bad)
    ));
    let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
    env.permissive(&statements)
        .await
        .unwrap_or_else(|e| panic!("{statements:?}: {e}"));
    ((bad_paid, bad_expired), healthy)
}

/// Every seat field of every showtime: (showtime, seat) → value.
async fn fields(env: &TestEnv, showtimes: &[i64]) -> BTreeMap<(i64, String), String> {
    let mut out = BTreeMap::new();
    for &s in showtimes {
        for (seat, v) in env.fx.hash(s).await.unwrap() {
            out.insert((s, seat), v);
        }
    }
    out
}

/// Rows MySQL shows may hold `seat` of `showtime`: in the showtime (or
/// with none, in its order's, or any when that is unknown too), its seat
/// number the seat's under the column's collation or none, and not ended
/// by the contract's own cancel or refund.
async fn may_hold(env: &TestEnv, showtime: i64, seat: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM order_seat os LEFT JOIN ticket_order o ON o.id = os.order_id \
         WHERE (os.showtime_id = ? \
                OR (os.showtime_id IS NULL AND (o.showtime_id = ? OR o.showtime_id IS NULL))) \
           AND (os.seat_no = ? OR os.seat_no IS NULL) \
           AND NOT (os.active <=> NULL AND (o.id IS NULL OR BINARY o.status IN ('CANCELLED', 'REFUNDED')))",
    )
    .bind(showtime)
    .bind(showtime)
    .bind(seat)
    .fetch_one(env.ctx.mysql.pool())
    .await
    .unwrap()
}

fn rank(v: Option<&String>) -> Option<u8> {
    match v.map(String::as_str) {
        Some("0") => Some(0),
        Some("1") => Some(1),
        Some("2") => Some(2),
        _ => None,
    }
}

async fn check(c: Case) -> Result<(), TestCaseError> {
    let env = TestEnv::with(|s| s.reconcile.scan_chunk = c.scan_chunk).await;
    let (_, healthy) = seed(&env, &c).await;
    let mut showtimes = vec![BAD_SHOWTIME, LOST_HASH];
    showtimes.extend(healthy.iter().map(|(s, _, _)| *s));
    let before = fields(&env, &showtimes).await;

    let report = tokio::time::timeout(Duration::from_secs(120), env.once(&Kind::ALL))
        .await
        .map_err(|_| TestCaseError::fail("the run did not end"))?;
    let text = report.to_text();
    for j in &report.jobs {
        prop_assert!(j.fatal.is_none(), "{c:?}\n{text}");
        prop_assert_ne!(
            j.outcome,
            seatflow_reconciler::run::jobs::report::Outcome::Failure,
            "{:?}\n{}",
            c,
            text
        );
    }

    // Every healthy drift is repaired in this run.
    let after = fields(&env, &showtimes).await;
    for &(id, paid, expired) in &healthy {
        let got = |seat: &str| after.get(&(id, seat.to_string())).map(String::as_str);
        if id == LOST_HASH {
            prop_assert_eq!(got("A-4"), Some("2"), "{:?}\n{}", c, text);
            prop_assert_eq!(got("A-1"), Some("0"), "{:?}\n{}", c, text);
            continue;
        }
        for (seat, want) in [("A-1", "0"), ("A-2", "2"), ("A-3", "0"), ("A-4", "0")] {
            prop_assert_eq!(got(seat), Some(want), "{} {}: {:?}\n{}", id, seat, c, text);
        }
        prop_assert_eq!(env.fx.order_status(paid).await.unwrap(), "PAID");
        prop_assert_eq!(env.fx.order_status(expired).await.unwrap(), "CANCELLED");
    }

    // Nothing MySQL may hold is lowered, in any showtime (judged after the
    // run: an order it cancelled holds nothing any more).
    for ((showtime, seat), was) in &before {
        let now = after.get(&(*showtime, seat.clone()));
        let lowered = match (rank(Some(was)), rank(now)) {
            (Some(b), Some(a)) => a < b,
            _ => false,
        };
        if lowered {
            prop_assert_eq!(
                may_hold(&env, *showtime, seat).await,
                0,
                "{} {} lowered {:?} -> {:?} though MySQL may hold it: {:?}\n{}",
                showtime,
                seat,
                was,
                now,
                c,
                text
            );
        }
    }
    Ok(())
}

proptest! {
    // Each case makes a database and runs all five jobs: few, but varied.
    #![proptest_config(ProptestConfig {
        cases: seatflow_test_support::property_cases(48),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_bad_value_in_one_row_holds_back_no_other_repair(c in case()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(check(c))?;
    }
}

/// Every column and value of the table above, once each, in one fixed order:
/// the generative test samples them; this walks them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_column_with_every_bad_value() {
    for (table, column, family) in COLUMNS {
        for bad in bad_values(family) {
            // Where the value sits matters for the orders' tables only.
            let rows: &[Row] = match table {
                "ticket_order" | "order_seat" => &[Row::Paid, Row::Expired],
                _ => &[Row::Paid],
            };
            for &row in rows {
                let c = Case {
                    table,
                    column,
                    family,
                    bad,
                    row,
                    healthy: 1,
                    starts: vec![10, 20, 30, 40, 50],
                    scan_chunk: 1,
                };
                if let Err(e) = check(c.clone()).await {
                    panic!("{e}");
                }
            }
        }
    }
}
