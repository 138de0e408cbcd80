//! SQL pieces every query shares: the strict decoding of a seat row
//! (`contract`), dates that decode, keyset, shard and IN-list clauses.

use super::*;
use crate::model::contract::{Column, OrderFacts, SeatRowFacts};
use crate::model::{Scope, Shard};
use chrono::{Datelike, NaiveDateTime};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, QueryBuilder, Row};

/// The columns `seat_row_facts` reads: an `order_seat` row `os` with its
/// order `o` (LEFT JOINed: NULLs when there is none). Statuses come as
/// bytes, compared exactly in `contract`; `active` as a number; the order's
/// dates as stored, checked here (`order_dates`) rather than by `date_ok` in
/// SQL: the sweep reads every held seat, and four date tests a row were
/// about a fifth of MariaDB's time for its statement.
pub(super) const SEAT_ROW_COLUMNS: &str = "SELECT os.showtime_id, os.order_id, os.seat_no, \
     CAST(os.active AS SIGNED) AS active, o.id AS o_id, CAST(o.status AS BINARY) AS o_status, \
     o.showtime_id AS o_showtime, o.expires_at AS o_expires_at, o.created_at AS o_created_at, \
     o.paid_at AS o_paid_at, o.cancelled_at AS o_cancelled_at";

/// Positions in `SEAT_ROW_COLUMNS`: this runs for every held seat of every
/// sweep, and a lookup by name compares the names of every column.
mod at {
    pub const SHOWTIME_ID: usize = 0;
    pub const ORDER_ID: usize = 1;
    pub const SEAT_NO: usize = 2;
    pub const ACTIVE: usize = 3;
    pub const O_ID: usize = 4;
    pub const O_STATUS: usize = 5;
    pub const O_SHOWTIME: usize = 6;
    pub const O_EXPIRES_AT: usize = 7;
    pub const O_CREATED_AT: usize = 8;
    pub const O_PAID_AT: usize = 9;
    pub const O_CANCELLED_AT: usize = 10;
}

/// One `order_seat` row as read, every column decoded without panicking
/// and without failing the read (rule 16): a column that does not decode
/// (a NULL the contract forbids, a value beyond BIGINT) is an `Err` the
/// contract reads as unknown.
pub(super) fn seat_row_facts(r: &MySqlRow) -> SeatRowFacts {
    // Whether the LEFT JOIN found an order, whatever its id decodes to.
    let has_order = !is_null(r, at::O_ID);
    SeatRowFacts {
        showtime_id: int(r, at::SHOWTIME_ID),
        order_id: int(r, at::ORDER_ID),
        seat_no: text(r, at::SEAT_NO),
        active: column(r, at::ACTIVE),
        order: has_order.then(|| OrderFacts {
            status: column::<&[u8], _>(r, at::O_STATUS)
                .map(|b| String::from_utf8_lossy(b).into_owned()),
            showtime_id: int(r, at::O_SHOWTIME),
            dates: order_dates(r).map(|_| ()),
        }),
    }
}

/// The latest of the order's created, paid and cancelled times, when every
/// date of the order decodes (rule 16): `expires_at` and `created_at`, and
/// `paid_at` and `cancelled_at` when set, each a real day of a year MySQL
/// supports (>= 1000), as `date_ok` tests in SQL. A zero date, a day 0, a
/// month 0 or a day past its month's end (stored under
/// `ALLOW_INVALID_DATES`) does not decode into a `NaiveDateTime`: an `Err`
/// here, never a panic. Meaningless for a row with no order.
pub(super) fn order_dates(r: &MySqlRow) -> Column<NaiveDateTime> {
    order_dates_from(r, at::O_EXPIRES_AT)
}

// `order_dates_from` reads the four dates side by side.
const _: () = assert!(
    at::O_CREATED_AT == at::O_EXPIRES_AT + 1
        && at::O_PAID_AT == at::O_EXPIRES_AT + 2
        && at::O_CANCELLED_AT == at::O_EXPIRES_AT + 3
);

/// As [`order_dates`], of a row whose `expires_at`, `created_at`,
/// `paid_at` and `cancelled_at` are the columns from `first` on, in that order.
pub(super) fn order_dates_from(r: &MySqlRow, first: usize) -> Column<NaiveDateTime> {
    // The same words whichever date it is: they are part of the rows' mark
    // (`RowsMark`), which replicas of another build must compute alike.
    const WHY: &str = "a zero or out-of-range date";
    let date = |at: usize| match r.try_get::<Option<NaiveDateTime>, _>(at) {
        Ok(Some(t)) if t.year() >= 1000 => Ok(Some(t)),
        Ok(None) => Ok(None),
        _ => Err(WHY.to_string()),
    };
    let expires = date(first)?;
    let created = date(first + 1)?;
    let (paid, cancelled) = (date(first + 2)?, date(first + 3)?);
    match (expires, created) {
        (Some(_), Some(created)) => Ok([paid, cancelled]
            .into_iter()
            .flatten()
            .fold(created, NaiveDateTime::max)),
        // NOT NULL columns: NULL is no date (`date_ok` is false too).
        _ => Err(WHY.to_string()),
    }
}

/// A column decoded, or why it did not (never a panic, rule 16).
pub(super) fn column<'r, T, I>(r: &'r MySqlRow, at: I) -> Column<T>
where
    T: sqlx::Decode<'r, MySql> + sqlx::Type<MySql>,
    I: sqlx::ColumnIndex<MySqlRow>,
{
    r.try_get(at).map_err(why)
}

/// Why a column did not decode, in a few words.
fn why(e: sqlx::Error) -> String {
    match e {
        sqlx::Error::ColumnDecode { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// True when the column is SQL NULL (or missing: nothing to read either).
pub(super) fn is_null<I: sqlx::ColumnIndex<MySqlRow>>(r: &MySqlRow, at: I) -> bool {
    use sqlx::ValueRef as _;
    r.try_get_raw(at).map_or(true, |v| v.is_null())
}

/// An integer column of any integer type, signed or not, of any width, as
/// BIGINT: `Err` for NULL, for a value beyond BIGINT (an unsigned column)
/// and for a column of another type. Never fails the read (rule 16).
pub(super) fn int<I: sqlx::ColumnIndex<MySqlRow> + Copy>(r: &MySqlRow, at: I) -> Column<i64> {
    match r.try_get::<Option<i64>, _>(at) {
        Ok(Some(v)) => Ok(v),
        Ok(None) => Err("NULL".into()),
        Err(signed) => match r.try_get::<Option<u64>, _>(at) {
            Ok(Some(v)) => i64::try_from(v).map_err(|_| format!("{v} is beyond BIGINT")),
            Ok(None) => Err("NULL".into()),
            Err(_) => Err(why(signed)),
        },
    }
}

/// A text column as UTF-8 (bytes that are not become U+FFFD); `Err` for NULL.
pub(super) fn text<I: sqlx::ColumnIndex<MySqlRow> + Copy>(r: &MySqlRow, at: I) -> Column<String> {
    match r.try_get::<Option<&[u8]>, _>(at) {
        Ok(Some(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
        Ok(None) => Err("NULL".into()),
        Err(_) => match r.try_get::<Option<String>, _>(at) {
            Ok(Some(s)) => Ok(s),
            Ok(None) => Err("NULL".into()),
            Err(e) => Err(why(e)),
        },
    }
}

/// A text column as UTF-8 (bytes that are not become U+FFFD), "" when NULL.
pub(super) fn lossy<I: sqlx::ColumnIndex<MySqlRow> + Copy>(r: &MySqlRow, at: I) -> String {
    text(r, at).unwrap_or_default()
}

/// SQL, true when `col` holds a date that decodes: no zero date, no zero or
/// out-of-range day or month, a year MySQL supports (>= 1000). NULL is false.
pub(super) fn date_ok(col: &str) -> String {
    format!(
        "COALESCE({col} >= '1000-01-01' AND DAYOFMONTH({col}) BETWEEN 1 AND DAYOFMONTH(LAST_DAY({col})), FALSE)"
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `at`'s positions name the columns `SEAT_ROW_COLUMNS` selects (it is
    /// read by position; a column added in the middle must move them).
    #[test]
    fn positions_match_the_selected_columns() {
        let names: Vec<&str> = SEAT_ROW_COLUMNS
            .trim_start_matches("SELECT ")
            .split(", ")
            .map(|c| c.rsplit([' ', '.']).next().unwrap_or(c))
            .collect();
        let expected = [
            (at::SHOWTIME_ID, "showtime_id"),
            (at::ORDER_ID, "order_id"),
            (at::SEAT_NO, "seat_no"),
            (at::ACTIVE, "active"),
            (at::O_ID, "o_id"),
            (at::O_STATUS, "o_status"),
            (at::O_SHOWTIME, "o_showtime"),
            (at::O_EXPIRES_AT, "o_expires_at"),
            (at::O_CREATED_AT, "o_created_at"),
            (at::O_PAID_AT, "o_paid_at"),
            (at::O_CANCELLED_AT, "o_cancelled_at"),
        ];
        assert_eq!(names.len(), expected.len(), "{names:?}");
        for (at, name) in expected {
            assert_eq!(names[at], name, "{names:?}");
        }
    }
}
