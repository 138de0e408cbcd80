//! SQL pieces every query shares: the strict decoding of a seat row
//! (`contract`), dates that decode, keyset, shard and IN-list clauses.

use super::*;
use crate::model::contract::{Column, OrderFacts, SeatRowFacts};
use crate::model::schema::{Read, types};
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
    let expires = datetime(r, first)?;
    let created = datetime(r, first + 1)?;
    let (paid, cancelled) = (datetime(r, first + 2)?, datetime(r, first + 3)?);
    match (expires, created) {
        (Some(_), Some(created)) => Ok([paid, cancelled]
            .into_iter()
            .flatten()
            .fold(created, NaiveDateTime::max)),
        // NOT NULL columns: NULL is no date (`date_ok` is false too).
        _ => Err(NO_DATE.to_string()),
    }
}

/// Why a date-time value is no date. The same words whichever date it is:
/// they are part of the rows' mark (`RowsMark`), which replicas of another
/// build must compute alike.
const NO_DATE: &str = "a zero or out-of-range date";

/// A date-time column (`DATETIME` or `TIMESTAMP`, any precision: the
/// session's time zone is UTC, so both read as stored), `Ok(None)` for
/// NULL. `Err` for a zero date, a day 0, a month 0 or a day past its
/// month's end (stored under `ALLOW_INVALID_DATES`), a year before 1000,
/// and a column of a type the reads do not take (`model::schema::types`),
/// naming it. Never a panic (rule 16).
pub(super) fn datetime<I>(r: &MySqlRow, at: I) -> Column<Option<NaiveDateTime>>
where
    I: sqlx::ColumnIndex<MySqlRow> + Copy,
{
    let checked = |t: Option<NaiveDateTime>| match t {
        Some(t) if t.year() < 1000 => Err(NO_DATE.to_string()),
        t => Ok(t),
    };
    // DATETIME: the common case, decoded as sqlx checks it. sqlx reads a
    // zero date as NULL: a value that is there is a date or no date, never
    // an absent one (a PENDING order's zero `paid_at` is not a NULL one).
    if let Ok(t) = r.try_get::<Option<NaiveDateTime>, _>(at) {
        return match t {
            None if !is_null(r, at) => Err(NO_DATE.to_string()),
            t => checked(t),
        };
    }
    if is_null(r, at) {
        return Ok(None);
    }
    // TIMESTAMP has DATETIME's encoding on the wire; sqlx takes only
    // DATETIME for a `NaiveDateTime`, so the table decides, not sqlx.
    let (name, ty) = typed(r, at);
    if !types::decodes(Read::DateTime, &ty) {
        return Err(refused(&name, &ty, "a date-time"));
    }
    // Not NULL (above): None is a zero date sqlx took for NULL.
    match r.try_get_unchecked::<Option<NaiveDateTime>, _>(at) {
        Ok(Some(t)) => checked(Some(t)),
        Ok(None) | Err(_) => Err(NO_DATE.to_string()),
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

/// The column's name as selected, and its value's type as the wire gives
/// it (`BIGINT UNSIGNED`, `DATE`): what a decode error names.
fn typed<I: sqlx::ColumnIndex<MySqlRow>>(r: &MySqlRow, at: I) -> (String, String) {
    use sqlx::{Column as _, TypeInfo as _};
    match r.try_column(at) {
        Ok(c) => (c.name().to_string(), c.type_info().name().to_string()),
        Err(_) => ("a column".to_string(), "absent".to_string()),
    }
}

/// `o_expires_at is DATE, not read as a date-time`.
fn refused(name: &str, ty: &str, what: &str) -> String {
    format!("{name} is {ty}, not read as {what}")
}

/// True when the column is SQL NULL (or missing: nothing to read either).
/// Not sqlx's `is_null`, which also says so of a zero date: the raw bytes
/// are there for any value, zero dates included, and absent only for NULL.
pub(super) fn is_null<I: sqlx::ColumnIndex<MySqlRow>>(r: &MySqlRow, at: I) -> bool {
    r.try_get_unchecked::<&[u8], _>(at).is_err()
}

/// An integer column as BIGINT: any integer type, signed or not, of any
/// width, and a `DECIMAL` holding an integer (the types
/// `model::schema::types` takes for an integer). `Err` for NULL, for a
/// value beyond BIGINT (naming the column's type: an unsigned or a wide
/// decimal column) and for a column of another type. Never fails the read
/// (rule 16).
pub(super) fn int<I: sqlx::ColumnIndex<MySqlRow> + Copy>(r: &MySqlRow, at: I) -> Column<i64> {
    // The common case first, as sqlx checks it: a signed integer.
    if let Ok(v) = r.try_get::<Option<i64>, _>(at) {
        return v.ok_or_else(|| "NULL".to_string());
    }
    if is_null(r, at) {
        return Err("NULL".into());
    }
    let (name, ty) = typed(r, at);
    if !types::decodes(Read::Integer, &ty) {
        return Err(refused(&name, &ty, "an integer"));
    }
    let beyond = |v: &dyn std::fmt::Display| format!("{v} is beyond BIGINT ({name} is {ty})");
    if let Ok(Some(v)) = r.try_get::<Option<u64>, _>(at) {
        return i64::try_from(v).map_err(|_| beyond(&v));
    }
    // A DECIMAL comes as its digits.
    match r.try_get_unchecked::<&str, _>(at) {
        Ok(digits) => digits.parse::<i64>().map_err(|_| beyond(&digits)),
        Err(e) => Err(why(e)),
    }
}

/// A text column, exactly: `Err` for NULL, for bytes that are not UTF-8
/// (a utf8mb4 session gets every character set as UTF-8: only a binary
/// string can send other bytes, and a name read from them would not be
/// the one MySQL holds) and for a column that is no string.
pub(super) fn text<I: sqlx::ColumnIndex<MySqlRow> + Copy>(r: &MySqlRow, at: I) -> Column<String> {
    match r.try_get::<Option<&[u8]>, _>(at) {
        Ok(Some(b)) => match std::str::from_utf8(b) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => {
                let (name, ty) = typed(r, at);
                Err(format!(
                    "{name} ({ty}) holds bytes that are not UTF-8: {}",
                    String::from_utf8_lossy(b).escape_debug()
                ))
            }
        },
        Ok(None) => Err("NULL".into()),
        Err(_) if is_null(r, at) => Err("NULL".into()),
        Err(_) => {
            let (name, ty) = typed(r, at);
            Err(refused(&name, &ty, "text"))
        }
    }
}

/// A text column for display: bytes that are not UTF-8 become U+FFFD,
/// NULL and other types "".
pub(super) fn lossy<I: sqlx::ColumnIndex<MySqlRow> + Copy>(r: &MySqlRow, at: I) -> String {
    match r.try_get::<Option<&[u8]>, _>(at) {
        Ok(Some(b)) => String::from_utf8_lossy(b).into_owned(),
        _ => r
            .try_get::<Option<String>, _>(at)
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

/// ` AND <col> is in the scope`: its shard, and its ids when it names some
/// (a scope naming none is the whole shard).
pub(super) fn push_scope(q: &mut QueryBuilder<MySql>, col: &str, scope: Scope<'_>) {
    push_shard(q, col, scope.shard);
    if let Some(only) = NonEmpty::of(scope.only) {
        push_in(q, col, only);
    }
}

/// A list with at least one item: what every builder of `IN (…)`,
/// `FIELD(…)`, `CASE … END` and multi-row `INSERT` takes, so that no
/// statement is built with an empty list. MySQL refuses most of them
/// (`IN ()`, `FIELD(x)`: 1582, `VALUES` with no row), and a filter quietly
/// left out would read, or write, the whole table. The caller of a builder
/// decides what an empty list means (usually: no statement at all).
#[derive(Debug)]
pub struct NonEmpty<'a, T>(&'a [T]);

// Copy whatever T is: it is a borrowed slice.
impl<T> Clone for NonEmpty<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for NonEmpty<'_, T> {}

impl<'a, T> NonEmpty<'a, T> {
    /// The list, when it has an item.
    pub fn of(items: &'a [T]) -> Option<NonEmpty<'a, T>> {
        (!items.is_empty()).then_some(NonEmpty(items))
    }

    pub fn items(&self) -> &'a [T] {
        self.0
    }

    pub fn iter(&self) -> std::slice::Iter<'a, T> {
        self.0.iter()
    }
}

/// ` AND col IN (?, ?, …)`.
pub(super) fn push_in(q: &mut QueryBuilder<MySql>, col: &str, values: NonEmpty<'_, i64>) {
    q.push(format_args!(" AND {col} IN ("));
    push_list(q, values.iter().copied());
    q.push(")");
}

/// `VALUES (…), (…)`: one row per item, each pushed by `row` (sqlx's
/// `push_values`, given a list that cannot be empty).
pub(super) fn push_rows<'a, T>(
    q: &mut QueryBuilder<MySql>,
    rows: NonEmpty<'a, T>,
    row: impl FnMut(sqlx::query_builder::Separated<'_, MySql, &'static str>, &'a T),
) {
    q.push_values(rows.iter(), row);
}

/// `?, ?, …`: the binds of a list, comma-separated (the caller's list is
/// a [`NonEmpty`]'s items).
pub(super) fn push_list<'t, T>(q: &mut QueryBuilder<MySql>, values: impl Iterator<Item = T>)
where
    T: sqlx::Encode<'t, MySql> + sqlx::Type<MySql>,
{
    let mut sep = q.separated(", ");
    for v in values {
        sep.push_bind(v);
    }
}

/// The ids of a set of orders are dense when their range holds at most
/// this many ids per order: reading the range whole, in the order the table
/// is stored, then costs a few times the orders' own rows and no B-tree
/// descent per order (the occupancy's orders, the confirmation's rows in
/// other showtimes).
pub(super) const DENSE: i64 = 4;

/// The range to read a set of orders by, given the least and greatest of
/// their ids and how many they are: when their ids are dense (`DENSE`).
pub(super) fn dense_range(
    least: Option<i64>,
    greatest: Option<i64>,
    count: Option<i64>,
) -> Option<(i64, i64)> {
    let (least, greatest, count) = (least?, greatest?, count?);
    let span = greatest.checked_sub(least)?.checked_add(1)?;
    (count > 0 && span <= count.saturating_mul(DENSE)).then_some((least, greatest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list builder is given one item at least: the one-element list
    /// builds a statement MySQL takes; the empty one cannot be given.
    #[test]
    fn list_builders_take_one_element_and_never_none() {
        assert!(NonEmpty::<i64>::of(&[]).is_none());
        let one = [7_i64];
        let mut q = QueryBuilder::<MySql>::new("SELECT 1 FROM t WHERE TRUE");
        push_in(&mut q, "id", NonEmpty::of(&one).unwrap());
        assert_eq!(q.sql().as_str(), "SELECT 1 FROM t WHERE TRUE AND id IN (?)");
        let mut q = QueryBuilder::<MySql>::new("INSERT INTO t (a) ");
        push_rows(&mut q, NonEmpty::of(&one).unwrap(), |mut b, v| {
            b.push_bind(*v);
        });
        assert_eq!(q.sql().as_str(), "INSERT INTO t (a) VALUES (?)");
        // An empty scope is the whole shard, not `IN ()`.
        let mut q = QueryBuilder::<MySql>::new("SELECT 1 FROM t WHERE TRUE");
        push_scope(
            &mut q,
            "id",
            Scope {
                shard: Shard::ALL,
                only: &[],
            },
        );
        assert_eq!(q.sql().as_str(), "SELECT 1 FROM t WHERE TRUE");
    }

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
