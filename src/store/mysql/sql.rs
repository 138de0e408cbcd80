//! SQL pieces every query shares: the strict decoding of a seat row
//! (`contract`), dates that decode, keyset, shard and IN-list clauses.

use super::*;
use crate::error::Result;
use crate::model::contract::{Column, OrderFacts, SeatRowFacts};
use crate::model::{Scope, Shard};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, QueryBuilder, Row};

/// The columns `seat_row_facts` reads: an `order_seat` row `os` with its
/// order `o` (LEFT JOINed: NULLs when there is none). Statuses come as
/// bytes, compared exactly in `contract`; `active` as a number.
pub(super) const SEAT_ROW_COLUMNS: &str = "SELECT os.showtime_id, os.order_id, os.seat_no, \
     CAST(os.active AS SIGNED) AS active, o.id AS o_id, CAST(o.status AS BINARY) AS o_status, \
     o.showtime_id AS o_showtime";

/// One `order_seat` row as read, every column decoded without panicking:
/// a column that does not decode is an `Err` the contract reads as unknown.
pub(super) fn seat_row_facts(r: &MySqlRow) -> Result<SeatRowFacts> {
    let order_id: i64 = r.try_get("order_id")?;
    let has_order = matches!(r.try_get::<Option<i64>, _>("o_id"), Ok(Some(_)));
    Ok(SeatRowFacts {
        showtime_id: r.try_get("showtime_id")?,
        order_id,
        seat_no: lossy(r, "seat_no"),
        active: column(r, "active"),
        order: has_order.then(|| OrderFacts {
            status: column::<Vec<u8>>(r, "o_status")
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
            showtime_id: column(r, "o_showtime"),
            dates: match column::<i64>(r, "dates_ok") {
                Ok(1) => Ok(()),
                Ok(_) => Err("a zero or out-of-range date".into()),
                Err(e) => Err(e),
            },
        }),
    })
}

/// A column decoded, or why it did not (never a panic, rule 16).
pub(super) fn column<'r, T>(r: &'r MySqlRow, name: &str) -> Column<T>
where
    T: sqlx::Decode<'r, MySql> + sqlx::Type<MySql>,
{
    r.try_get(name).map_err(|e| match e {
        sqlx::Error::ColumnDecode { source, .. } => source.to_string(),
        other => other.to_string(),
    })
}

/// A text column as UTF-8 (bytes that are not become U+FFFD), "" when NULL.
pub(super) fn lossy(r: &MySqlRow, name: &str) -> String {
    match r.try_get::<Option<Vec<u8>>, _>(name) {
        Ok(Some(b)) => String::from_utf8_lossy(&b).into_owned(),
        _ => r
            .try_get::<Option<String>, _>(name)
            .ok()
            .flatten()
            .unwrap_or_default(),
    }
}

/// SQL, true when `col` holds a date that decodes: no zero date, no zero or
/// out-of-range day or month, a year MySQL supports (>= 1000). NULL is false.
pub(super) fn date_ok(col: &str) -> String {
    format!(
        "COALESCE({col} >= '1000-01-01' AND DAYOFMONTH({col}) BETWEEN 1 AND DAYOFMONTH(LAST_DAY({col})), FALSE)"
    )
}

/// SQL, true when every date of order `o` decodes (the nullable ones when set).
pub(super) fn order_dates_ok(o: &str) -> String {
    format!(
        "({} AND {} AND ({o}.paid_at IS NULL OR {}) AND ({o}.cancelled_at IS NULL OR {}))",
        date_ok(&format!("{o}.expires_at")),
        date_ok(&format!("{o}.created_at")),
        date_ok(&format!("{o}.paid_at")),
        date_ok(&format!("{o}.cancelled_at")),
    )
}

/// ` AND (col_at > ? OR (col_at = ? AND col_id > ?))`
pub(super) fn push_after(
    q: &mut QueryBuilder<MySql>,
    col_at: &str,
    col_id: &str,
    after: Option<Keyset>,
) {
    if let Some(k) = after {
        q.push(format_args!(" AND ({col_at} > "))
            .push_bind(k.at)
            .push(format_args!(" OR ({col_at} = "))
            .push_bind(k.at)
            .push(format_args!(" AND {col_id} > "))
            .push_bind(k.id)
            .push("))");
    }
}

/// ` AND MOD(col, total) = index` unless there is one shard.
/// ` AND <col> is in this shard`: the SQL twin of `Shard::covers`, with the
/// same Euclidean remainder (SQL's `MOD(-5, 2)` is -1; `MOD(MOD(x, n) + n, n)`
/// is 1, as `rem_euclid` says), so every id, negative ones too, belongs to
/// exactly one shard.
pub(super) fn push_shard(q: &mut QueryBuilder<MySql>, col: &str, shard: Shard) {
    if shard.total > 1 {
        let n = i64::from(shard.total);
        q.push(format_args!(" AND MOD(MOD({col}, {n}) + {n}, {n}) = "))
            .push_bind(shard.index);
    }
}

/// ` AND <col> is in the scope`: its shard, and its ids when it names some.
pub(super) fn push_scope(q: &mut QueryBuilder<MySql>, col: &str, scope: Scope<'_>) {
    push_shard(q, col, scope.shard);
    push_in(q, col, scope.only);
}

/// ` AND col IN (?, ?, …)` unless `values` is empty.
pub(super) fn push_in(q: &mut QueryBuilder<MySql>, col: &str, values: &[i64]) {
    if values.is_empty() {
        return;
    }
    q.push(format_args!(" AND {col} IN ("));
    let mut sep = q.separated(", ");
    for v in values {
        sep.push_bind(*v);
    }
    q.push(")");
}
