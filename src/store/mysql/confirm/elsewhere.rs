//! The confirmation's rows of a showtime's orders that sit in another
//! showtime (rule 15: "in its showtime or its order's"), read as the tables
//! are stored. Asked by joining each order to its rows, MySQL descends
//! `order_seat`'s primary key once per order of every showtime with a
//! lowering: at 1 % drift, once per order of the estate each pass, most of
//! MariaDB's work in a pass. Orders are written in id order, and their rows
//! with them, so the orders of a chunk's showtimes mostly lie close together:
//! then one range of `order_seat`'s primary key holds all their rows. In
//! one snapshot:
//!
//! 1. the showtimes' orders, ids and showtimes (`(showtime_id, status)`, covering);
//! 2. where their ids are dense, the showtime of every row in their id
//!    range (the primary key's range, in the order it is stored): the
//!    orders with a row outside their showtime are the only ones the
//!    confirmation's own statement has to read, and usually there are none;
//! 3. the confirmation's statement for those orders, as it was (`confirm.rs`).
//!
//! Where the ids are sparse (orders sold over weeks among other showtimes'),
//! the confirmation's statement reads every order as it did.

use crate::model::{SeatNo, ShowtimeId};
use futures_util::TryStreamExt;
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, QueryBuilder};
use std::collections::HashMap;

use super::super::occupancy_read::consistent_snapshot;
use super::super::sql::{NonEmpty, dense_range, int, is_null, push_in};
use super::{Asked, confirm_query};

/// The rows of the `lowering` showtimes' orders that sit in another
/// showtime and name an asked seat: what `confirm_query(lowering, seats,
/// true, null_seats)` returns, read without a descent per order where the
/// orders' ids are dense.
pub(super) async fn rows_elsewhere(
    pool: &sqlx::MySqlPool,
    lowering: &[Asked<'_>],
    seats: &[(ShowtimeId, SeatNo, bool)],
    null_seats: bool,
) -> sqlx::Result<Vec<MySqlRow>> {
    let Some(lowering) = NonEmpty::of(lowering) else {
        return Ok(Vec::new());
    };
    let showtimes: Vec<ShowtimeId> = lowering.iter().map(|(s, _)| *s).collect();
    let Some(showtimes) = NonEmpty::of(&showtimes) else {
        return Ok(Vec::new());
    };
    let mut conn = pool.acquire().await?;
    let mut snapshot = consistent_snapshot(&mut conn).await?;
    let mut q =
        QueryBuilder::<MySql>::new("SELECT o.id, o.showtime_id FROM ticket_order o WHERE TRUE");
    push_in(&mut q, "o.showtime_id", showtimes);
    let mut showtime_of: HashMap<i64, i64> = HashMap::new();
    // An id or showtime that does not decode (beyond BIGINT) cannot be
    // matched here: the confirmation's statement reads every order then.
    let mut all_decode = true;
    for r in q.build().fetch_all(&mut *snapshot).await? {
        match (int(&r, 0), int(&r, 1)) {
            (Ok(id), Ok(showtime)) => _ = showtime_of.insert(id, showtime),
            _ => all_decode = false,
        }
    }
    let range = all_decode.then(|| id_range(&showtime_of)).flatten();
    let candidates = match range {
        Some((least, greatest)) => {
            let mut q = QueryBuilder::<MySql>::new(
                "SELECT os.order_id, os.showtime_id FROM order_seat os WHERE os.order_id BETWEEN ",
            );
            q.push_bind(least).push(" AND ").push_bind(greatest);
            push_not_own_showtime(&mut q, &runs(&showtime_of));
            let mut rows = q.build().fetch(&mut *snapshot);
            let mut away = Vec::new();
            while let Some(r) = rows.try_next().await? {
                let Ok(order) = int(&r, 0) else { continue };
                let Some(own) = showtime_of.get(&order) else {
                    continue;
                };
                // A row with no showtime is the no-showtime statement's
                // (`<>` is not true of NULL); one beyond BIGINT is another
                // showtime than any of ours.
                let elsewhere = match int(&r, 1) {
                    Ok(showtime) => showtime != *own,
                    Err(_) => !is_null(&r, 1),
                };
                if elsewhere {
                    away.push(order);
                }
            }
            away.sort_unstable();
            away.dedup();
            Some(away)
        }
        None => None,
    };
    let mut q = confirm_query(lowering, seats, true, null_seats);
    if let Some(away) = &candidates {
        let Some(away) = NonEmpty::of(away) else {
            snapshot.commit().await?;
            return Ok(Vec::new());
        };
        push_in(&mut q, "mine.id", away);
    }
    let rows = q.build().fetch_all(&mut *snapshot).await?;
    snapshot.commit().await?;
    Ok(rows)
}

/// Most runs of one showtime's ids (see `runs`) a statement filters by;
/// beyond them every row of the range is sent and judged here.
const MAX_RUNS: usize = 1_000;

/// The orders' ids in runs of one showtime: (first id, last id,
/// showtime), ascending. Orders are written in id order, so a chunk's
/// showtimes have a run or a few each.
fn runs(orders: &HashMap<i64, i64>) -> Vec<(i64, i64, i64)> {
    let mut ids: Vec<(i64, i64)> = orders.iter().map(|(id, s)| (*id, *s)).collect();
    ids.sort_unstable();
    let mut out: Vec<(i64, i64, i64)> = Vec::new();
    for (id, showtime) in ids {
        match out.last_mut() {
            Some(run) if run.2 == showtime => run.1 = id,
            _ => out.push((id, id, showtime)),
        }
    }
    out
}

/// ` AND os.showtime_id <> <the showtime of the run holding os.order_id>`:
/// only the rows that sit outside their own showtime are sent, where the
/// run of a row's order is its order's showtime or, for the ids of other
/// showtimes' orders between two runs, NULL (nothing is sent for them). A
/// run may also cover such ids between two of one showtime's orders: their
/// rows may be sent (when in another showtime) and are judged here by their
/// orders. MySQL's `INTERVAL` finds the run by binary search; `ELT` names its
/// showtime.
fn push_not_own_showtime(q: &mut QueryBuilder<MySql>, runs: &[(i64, i64, i64)]) {
    if runs.is_empty() || runs.len() > MAX_RUNS {
        return;
    }
    // Ascending breakpoints: a run's first id (its showtime), and the id
    // after it when the next run does not start there (NULL: no order of ours).
    let mut points: Vec<(i64, Option<i64>)> = Vec::new();
    for (i, (first, last, showtime)) in runs.iter().enumerate() {
        points.push((*first, Some(*showtime)));
        let after = last.saturating_add(1);
        if runs.get(i + 1).is_none_or(|next| next.0 != after) && after > *last {
            points.push((after, None));
        }
    }
    q.push(" AND os.showtime_id <> CAST(ELT(INTERVAL(os.order_id");
    for (at, _) in &points {
        q.push(", ").push_bind(*at);
    }
    q.push(")");
    for (_, showtime) in &points {
        q.push(", ").push_bind(*showtime);
    }
    q.push(") AS SIGNED)");
}

/// The least and greatest id of the orders, when they are dense
/// (`sql::dense_range`).
fn id_range(orders: &HashMap<i64, i64>) -> Option<(i64, i64)> {
    dense_range(
        orders.keys().min().copied(),
        orders.keys().max().copied(),
        i64::try_from(orders.len()).ok(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_fall_in_runs_of_one_showtime() {
        let orders: HashMap<i64, i64> = [(10, 1), (11, 1), (13, 1), (14, 2), (20, 1), (21, 3)]
            .into_iter()
            .collect();
        assert_eq!(
            runs(&orders),
            [(10, 13, 1), (14, 14, 2), (20, 20, 1), (21, 21, 3)]
        );
        assert!(runs(&HashMap::new()).is_empty());
    }

    #[test]
    fn a_rows_own_showtime_is_named_by_its_orders_run() {
        let sql = |runs: &[(i64, i64, i64)]| {
            let mut q = QueryBuilder::<MySql>::new("");
            push_not_own_showtime(&mut q, runs);
            q.into_sql().as_str().to_string()
        };
        // 10–13 showtime 1, 14 showtime 2 (adjacent: no gap between),
        // then a gap (15–19: NULL), 20 showtime 1, and after it NULL.
        assert_eq!(
            sql(&[(10, 13, 1), (14, 14, 2), (20, 20, 1)]),
            " AND os.showtime_id <> CAST(ELT(INTERVAL(os.order_id, ?, ?, ?, ?, ?), ?, ?, ?, ?, ?) AS SIGNED)"
        );
        assert_eq!(sql(&[]), "");
        let many: Vec<(i64, i64, i64)> = (0..=MAX_RUNS as i64).map(|i| (i, i, i)).collect();
        assert_eq!(sql(&many), "", "too many runs: every row is judged here");
        // The last id of all: no breakpoint after it.
        assert!(sql(&[(1, i64::MAX, 7)]).contains("INTERVAL(os.order_id, ?)"));
    }

    #[test]
    fn a_range_is_read_only_where_the_ids_are_dense() {
        let orders = |ids: &[i64]| ids.iter().map(|&id| (id, 7)).collect::<HashMap<_, _>>();
        assert_eq!(id_range(&orders(&[])), None);
        assert_eq!(id_range(&orders(&[42])), Some((42, 42)));
        assert_eq!(id_range(&orders(&[10, 11, 13, 18])), Some((10, 18)));
        assert_eq!(id_range(&orders(&[10, 11, 13, 26])), None, "17 ids for 4");
        assert_eq!(id_range(&orders(&[i64::MIN, i64::MAX])), None);
    }
}
