//! The occupancy of a chunk of showtimes, read the way the tables are
//! stored. One join (`order_seat` by `uq_occupancy`, then each row's order
//! by primary key) costs a B-tree descent per held seat: at 30 M seats the
//! reads of a pass were most of MariaDB's CPU, and its orders came in the
//! scattered order of the seats. Instead, three range reads, no join:
//!
//! 1. the bounds and the count of the chunk's orders' ids
//!    (`(showtime_id, status)`, covering);
//! 2. the chunk's orders with what the strict reading needs of them: where
//!    their ids lie close together (`sql::dense_range`), the id range
//!    alone, read in the order the table is stored, the chunk's kept in
//!    memory; else by `(showtime_id, status)` (orders sold over weeks among
//!    other showtimes' are read one by one, still once per order and not
//!    once per seat). The choice is ours, not the optimizer's: on 30 M seats
//!    MariaDB took the index for tight bounds too, a B-tree descent per order;
//! 3. the rows of the chunk's showtimes (`uq_occupancy`, covering), each
//!    read with its order as the contract says, in memory.
//!
//! A row whose order is not one of the chunk's (its order in another
//! showtime, or no order) has its order read by id, a fourth statement
//! only then. What one row means is the same as the join's: the strict
//! reading of `contract::read_seat_row`.
//!
//! The statements read one snapshot (a read-only transaction with a
//! consistent snapshot, at REPEATABLE READ whatever the server's default),
//! as the join's one statement did: an order cancelled between two of them
//! would otherwise look like a row outside the contract (`active` NULL on a
//! PENDING order), a payment like a sale of a seat its row never had.

use super::sql::*;
use super::*;
use crate::error::Result;
use crate::model::contract::{self, OrderFacts, SeatRowFacts, UnknownRow};
use crate::model::{OccupancyBuilder, ShowtimeId};
use futures_util::TryStreamExt;
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, QueryBuilder};
use std::collections::{HashMap, HashSet};

/// An order's columns as the strict reading needs them, by position:
/// `ORDER_AT` names them.
const ORDER_COLUMNS: &str = "SELECT o.id, CAST(o.status AS BINARY) AS o_status, o.showtime_id, \
     o.expires_at, o.created_at, o.paid_at, o.cancelled_at FROM ticket_order o";

mod order_at {
    pub const ID: usize = 0;
    pub const STATUS: usize = 1;
    pub const SHOWTIME: usize = 2;
    /// The first of the four dates, in `order_dates_from`'s order.
    pub const DATES: usize = 3;
}

/// A row's own columns (`uq_occupancy` holds them all).
const ROW_COLUMNS: &str = "SELECT os.showtime_id, os.order_id, os.seat_no, \
     CAST(os.active AS SIGNED) AS active FROM order_seat os";

/// The orders a chunk's rows belong to, as the strict reading sees them
/// (each lent to its rows in turn: `None` only while one is read).
type Orders = HashMap<i64, Option<OrderFacts>>;

impl MysqlStore {
    /// The rows of whole showtimes that may hold a seat, read strictly
    /// (`contract::read_seat_row`): valid occupancies, and rows outside the
    /// contract (reported, and held against lowering their seat). Rows the
    /// contract's own cancel or refund ended hold nothing. See the module
    /// comment for how it reads.
    pub async fn occupancy(&self, showtimes: &[ShowtimeId]) -> Result<OccupancyRead> {
        let mut out = OccupancyBuilder::default();
        let mut unknown = Vec::new();
        let Some(showtimes) = NonEmpty::of(showtimes) else {
            return Ok(OccupancyRead {
                occupancy: out.finish(),
                unknown,
            });
        };
        let mut conn = self.pool.acquire().await?;
        let mut snapshot = consistent_snapshot(&mut conn).await?;
        let ids_keyed = self.contract().shape.order_ids_unique;
        let mut orders = orders_of(&mut snapshot, showtimes, ids_keyed).await?;
        race_window!(crate::race_window::OCCUPANCY_BETWEEN_READS);
        // Rows whose order is not among the chunk's: read once all are in.
        let mut strays: Vec<SeatRowFacts> = Vec::new();
        let mut q = QueryBuilder::<MySql>::new(ROW_COLUMNS);
        q.push(" WHERE TRUE");
        push_in(&mut q, "os.showtime_id", showtimes);
        let mut rows = q.build().fetch(&mut *snapshot);
        while let Some(r) = rows.try_next().await? {
            let mut facts = row_facts(&r);
            let Ok(id) = facts.order_id else {
                // No order to look up: read as an orderless row.
                fold(&mut out, &mut unknown, &facts);
                continue;
            };
            match orders.get_mut(&id) {
                // The order lent to the row while it is read (a row a
                // seat: no copy of its order per seat).
                Some(order) => {
                    facts.order = order.take();
                    fold(&mut out, &mut unknown, &facts);
                    *order = facts.order.take();
                }
                None => strays.push(facts),
            }
        }
        drop(rows);
        if !strays.is_empty() {
            let mut ids: Vec<i64> = strays
                .iter()
                .filter_map(|f| f.order_id.clone().ok())
                .collect();
            ids.sort_unstable();
            ids.dedup();
            let found = orders_by_id(&mut snapshot, &ids).await?;
            for mut facts in strays {
                facts.order = facts
                    .order_id
                    .as_ref()
                    .ok()
                    .and_then(|id| found.get(id))
                    .and_then(Option::clone);
                fold(&mut out, &mut unknown, &facts);
            }
        }
        snapshot.commit().await?;
        Ok(OccupancyRead {
            occupancy: out.finish(),
            unknown,
        })
    }
}

/// One connection inside one consistent snapshot.
type Snapshot<'c> = sqlx::Transaction<'c, MySql>;

/// A read-only transaction on `conn` whose statements all read the
/// snapshot taken at its start: REPEATABLE READ whatever the server's
/// default, for this transaction only (the session keeps its own).
pub(super) async fn consistent_snapshot(
    conn: &mut sqlx::pool::PoolConnection<MySql>,
) -> sqlx::Result<Snapshot<'_>> {
    sqlx::raw_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut **conn)
        .await?;
    conn.begin_with("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        .await
}

/// The orders of `showtimes`: by their id range when their ids lie close
/// together (`sql::dense_range`; orders are written in id order, a showtime's
/// mostly near each other), keeping the chunk's; else by the
/// `(showtime_id, status)` index. `ids_keyed`: `ticket_order.id` has a key
/// to read a range by.
async fn orders_of(
    snapshot: &mut Snapshot<'_>,
    showtimes: NonEmpty<'_, ShowtimeId>,
    ids_keyed: bool,
) -> Result<Orders> {
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT MIN(o.id), MAX(o.id), COUNT(*) FROM ticket_order o WHERE TRUE",
    );
    push_in(&mut q, "o.showtime_id", showtimes);
    let bounds = q.build().fetch_one(&mut **snapshot).await?;
    let range = dense_range(
        int(&bounds, 0).ok(),
        int(&bounds, 1).ok(),
        int(&bounds, 2).ok(),
    )
    .filter(|_| ids_keyed);
    let mut q = QueryBuilder::<MySql>::new(ORDER_COLUMNS);
    q.push(" WHERE TRUE");
    match range {
        Some((least, greatest)) => {
            q.push(" AND o.id BETWEEN ")
                .push_bind(least)
                .push(" AND ")
                .push_bind(greatest);
            let chunk: HashSet<ShowtimeId> = showtimes.iter().copied().collect();
            read_orders(snapshot, q, |r| {
                int(r, order_at::SHOWTIME).is_ok_and(|s| chunk.contains(&s))
            })
            .await
        }
        // No order at all (NULLs), ids beyond BIGINT, or spread out.
        None => {
            push_in(&mut q, "o.showtime_id", showtimes);
            read_orders(snapshot, q, |_| true).await
        }
    }
}

/// Orders by id (those of rows that sit in another showtime than their
/// order's, or have none), in statements of a bounded size.
async fn orders_by_id(snapshot: &mut Snapshot<'_>, ids: &[i64]) -> Result<Orders> {
    let mut found = Orders::new();
    for part in ids.chunks(ORDERS_BY_ID_PER_STATEMENT) {
        let Some(part) = NonEmpty::of(part) else {
            continue;
        };
        let mut q = QueryBuilder::<MySql>::new(ORDER_COLUMNS);
        q.push(" WHERE TRUE");
        push_in(&mut q, "o.id", part);
        found.extend(read_orders(snapshot, q, |_| true).await?);
    }
    Ok(found)
}

/// Well inside the 65,535 placeholders of one statement.
const ORDERS_BY_ID_PER_STATEMENT: usize = 10_000;

/// The orders `q` reads that `keep` takes.
async fn read_orders(
    snapshot: &mut Snapshot<'_>,
    mut q: QueryBuilder<MySql>,
    keep: impl Fn(&MySqlRow) -> bool,
) -> Result<Orders> {
    let mut orders = Orders::new();
    let mut rows = q.build().fetch(&mut **snapshot);
    while let Some(r) = rows.try_next().await? {
        if !keep(&r) {
            continue;
        }
        // An id that does not decode cannot be a row's order (its
        // `order_id` does not decode either).
        if let Ok(id) = int(&r, order_at::ID) {
            orders.insert(id, Some(order_facts(&r)));
        }
    }
    Ok(orders)
}

/// An order as read, every column decoded without failing the read (rule 16).
fn order_facts(r: &MySqlRow) -> OrderFacts {
    OrderFacts {
        status: column::<&[u8], _>(r, order_at::STATUS)
            .map(|b| String::from_utf8_lossy(b).into_owned()),
        showtime_id: int(r, order_at::SHOWTIME),
        dates: order_dates_from(r, order_at::DATES).map(|_| ()),
    }
}

/// A row's own columns, its order still unknown.
fn row_facts(r: &MySqlRow) -> SeatRowFacts {
    SeatRowFacts {
        showtime_id: int(r, 0),
        order_id: int(r, 1),
        seat_no: text(r, 2),
        active: column(r, 3),
        order: None,
    }
}

/// One row read strictly into the chunk's occupancy, or into `unknown`.
fn fold(out: &mut OccupancyBuilder, unknown: &mut Vec<UnknownRow>, facts: &SeatRowFacts) {
    let reading = contract::read_seat_row(facts);
    unknown.extend(reading.unknown_row(facts));
    let order_id = facts.order_id.as_ref().copied().unwrap_or_default();
    let (Some(holding), Ok(showtime)) = (reading.holding(order_id), &facts.showtime_id) else {
        return;
    };
    match (&facts.seat_no, &facts.order_id) {
        // Its seat cannot be named (no seat_no), or looked up by its key
        // (no order_id): it may hold any seat of the showtime.
        (Err(_), _) | (_, Err(_)) => out.push_any_seat(*showtime),
        (Ok(seat), Ok(_)) => out.push_row(*showtime, seat, holding, order_id),
    }
}

#[cfg(test)]
mod tests {
    use super::super::sql::dense_range;

    #[test]
    fn a_chunks_orders_are_read_by_their_id_range_only_where_they_lie_close_together() {
        // 100 orders within 400 ids: the range; within 401: the index.
        assert_eq!(dense_range(Some(1), Some(400), Some(100)), Some((1, 400)));
        assert_eq!(dense_range(Some(1), Some(401), Some(100)), None);
        assert_eq!(dense_range(Some(7), Some(7), Some(1)), Some((7, 7)));
        // No order (MIN and MAX are NULL), ids that do not decode, no count.
        assert_eq!(dense_range(None, None, Some(0)), None);
        assert_eq!(dense_range(Some(1), None, Some(1)), None);
        assert_eq!(dense_range(Some(1), Some(2), None), None);
        // Bounds at BIGINT's ends do not overflow.
        assert_eq!(dense_range(Some(i64::MIN), Some(i64::MAX), Some(2)), None);
        assert_eq!(
            dense_range(Some(i64::MAX - 1), Some(i64::MAX), Some(2)),
            Some((i64::MAX - 1, i64::MAX))
        );
    }
}
