//! The conditional cancel of expired orders (rules 3, 10, 16): their rows
//! locked, the status update repeating the condition, the seat rows ended
//! and the audit rows written in one transaction, and every write read back
//! before it commits. A write MySQL refuses (a trigger's error, a view that
//! cannot be updated, a CHECK constraint, a value it would truncate, a lock
//! wait) or rewrites (a trigger that sets another status) costs that one
//! order: the chunk's orders are cancelled together, and when MySQL refuses
//! or rewrites that, each alone, so every other order of the chunk is
//! cancelled in the same run.

use super::sql::*;
use super::*;
use crate::error::{Error, Result};
use crate::model::contract::UnknownRow;
use crate::model::{FixAction, Kind, SeatNo, ShowtimeId};
use chrono::NaiveDateTime;
use sqlx::{MySql, QueryBuilder};
use std::collections::HashMap;

use super::orders::{CANCEL_ORDERS, END_ORDER_SEATS};

/// What a cancel of expired orders did.
#[derive(Debug, Clone, Default)]
pub struct Cancels {
    /// Cancelled, with the seats their rows held (by this call, or by an
    /// earlier one of ours whose reply was lost).
    pub cancelled: Vec<CancelledOrder>,
    /// Not cancelled: outside the contract (an id on two rows).
    pub refused: Vec<UnknownRow>,
    /// Not cancelled: another transaction held the order's row or one of
    /// its seat rows (the application, paying or cancelling it). Skipped,
    /// not waited for; a later run takes them.
    pub locked: Vec<i64>,
    /// Not cancelled: MySQL refused the order's cancel, with its words
    /// (`1644: …`, a trigger's error; `1369: CHECK OPTION failed …`). Still
    /// due: the next run tries again.
    pub refused_by_mysql: Vec<(i64, String)>,
    /// Not cancelled: MySQL took the cancel but the order, or its seat
    /// rows, did not read back as cancelled (a trigger rewrote the write).
    /// Rolled back: its seats keep their rows.
    pub rewritten: Vec<(i64, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelledOrder {
    pub id: i64,
    pub showtime_id: ShowtimeId,
    /// The order's own `order_seat` rows: each seat in the row's showtime
    /// (which a row outside the contract may set apart from the order's).
    pub seats: Vec<(ShowtimeId, SeatNo)>,
}

/// The orders a cancel commits (id, showtime) and their seats by order.
type Committing = (Vec<(i64, i64)>, HashMap<i64, Vec<(ShowtimeId, SeatNo)>>);

/// One transaction's cancel: committed, or rolled back with nothing
/// cancelled when any order read back otherwise than cancelled.
#[derive(Debug, Default)]
struct Attempt {
    cancelled: Vec<CancelledOrder>,
    refused: Vec<UnknownRow>,
    locked: Vec<i64>,
    rewritten: Vec<(i64, String)>,
}

/// MySQL's words when it refused a statement of one order's cancel (its
/// error number and message); None for an error that is no order's (a
/// lost connection: the caller retries the chunk, and a retry recognises
/// cancels that committed; a permission the reconciler lacks: the job
/// names it, rule 18).
fn refusal(e: &Error) -> Option<String> {
    if crate::error::Denial::of(e).is_some() {
        return None;
    }
    match e {
        Error::Mysql(sqlx::Error::Database(db)) => Some(
            match db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                Some(m) => format!("{}: {}", m.number(), m.message()),
                None => db.message().to_string(),
            },
        ),
        _ => None,
    }
}

impl MysqlStore {
    /// Cancels those of `ids` that are still PENDING and expired before
    /// `deadline`, with their seats' `active = NULL`. Orders paid or
    /// cancelled meanwhile are skipped (rule 3): the rows are locked first,
    /// and the UPDATE repeats the condition.
    ///
    /// Each cancel's audit row (`order_cancelled`) is written in the same
    /// transaction (rule 10): a cancel without its audit row cannot commit.
    ///
    /// All together first, in one transaction; when MySQL refuses a write
    /// of it or rewrites one (rule 16), each order alone, in a transaction
    /// of its own: the refused or rewritten one is returned with why, the
    /// others are cancelled.
    ///
    /// Safe to retry: orders among `ids` that the reconciler cancelled at or
    /// after `since` (a commit whose reply was lost, audit row included) are
    /// returned as cancelled too. The caller holds the showtime leases, so
    /// those cancels are its own.
    ///
    /// Without a unique key on `ticket_order.id` (rule 17), an id found on
    /// two rows in the transaction is not cancelled (its rows' `active`
    /// would be set for both): it is returned as a row outside the contract.
    ///
    /// Nothing here waits on a row lock another transaction holds: an order
    /// whose row, or one of whose seat rows, is locked (the application is
    /// changing it) is skipped (`SKIP LOCKED`) and returned as `locked`.
    pub async fn cancel_expired(
        &self,
        ids: &[i64],
        deadline: NaiveDateTime,
        since: NaiveDateTime,
        audit: &RunIdentity<'_>,
    ) -> Result<Cancels> {
        let Some(all) = NonEmpty::of(ids) else {
            return Ok(Cancels::default());
        };
        let mut out = Cancels {
            cancelled: self.cancelled_by_us_since(all, since).await?,
            ..Cancels::default()
        };
        // One order: its cancel together is its cancel alone.
        let alone = match all.items() {
            [one] => Some(*one),
            _ => None,
        };
        match self.cancel_in_one(all, deadline, audit).await {
            Ok(a) if a.rewritten.is_empty() || alone.is_some() => {
                out.absorb(a);
                return Ok(out);
            }
            Ok(_) => {}
            Err(e) => match (refusal(&e), alone) {
                (None, _) => return Err(e),
                (Some(why), Some(id)) => {
                    out.refused_by_mysql.push((id, why));
                    return Ok(out);
                }
                (Some(_), None) => {}
            },
        }
        // MySQL refused or rewrote something: each order alone.
        for id in all.iter() {
            let one = [*id];
            let Some(one) = NonEmpty::of(&one) else {
                continue;
            };
            match self.cancel_in_one(one, deadline, audit).await {
                Ok(a) => out.absorb(a),
                Err(e) => match refusal(&e) {
                    Some(why) => out.refused_by_mysql.push((*id, why)),
                    None => return Err(e),
                },
            }
        }
        Ok(out)
    }

    /// One transaction: lock the due orders of `ids` and their seat rows,
    /// cancel them, end their rows, write their audit rows, read them back;
    /// commit when every order reads exactly `CANCELLED` and every row it
    /// ended reads NULL, else roll back and say which did not.
    async fn cancel_in_one(
        &self,
        ids: NonEmpty<'_, i64>,
        deadline: NaiveDateTime,
        audit: &RunIdentity<'_>,
    ) -> Result<Attempt> {
        let mut tx = self.pool.begin().await?;
        let (mut out, commit) = match self.cancel_steps(&mut tx, ids, deadline, audit).await {
            Ok(done) => done,
            Err(e) => {
                // Rolled back now, not when the dropped transaction's
                // connection is next used: the cancel of each order alone
                // that may follow must not find these rows still locked.
                let _ = tx.rollback().await;
                return Err(e);
            }
        };
        let Some((won, mut seats)) = commit else {
            tx.rollback().await?;
            return Ok(out);
        };
        tx.commit().await?;
        #[cfg(feature = "failpoints")]
        fail::fail_point!(crate::race_window::CANCEL_REPLY_LOST, |_| {
            Err(Error::Mysql(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "the commit's reply was lost (failpoint)",
            ))))
        });
        out.cancelled = won
            .into_iter()
            .map(|(id, showtime_id)| CancelledOrder {
                id,
                showtime_id,
                seats: seats.remove(&id).unwrap_or_default(),
            })
            .collect();
        Ok(out)
    }

    /// [`MysqlStore::cancel_in_one`]'s statements in `tx`: what it found,
    /// and, when it is to commit, the orders it cancelled (id, showtime)
    /// with their seats.
    async fn cancel_steps(
        &self,
        tx: &mut sqlx::Transaction<'static, MySql>,
        ids: NonEmpty<'_, i64>,
        deadline: NaiveDateTime,
        audit: &RunIdentity<'_>,
    ) -> Result<(Attempt, Option<Committing>)> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT id, showtime_id FROM ticket_order WHERE status = 'PENDING' AND BINARY status = 'PENDING' AND expires_at < ",
        );
        q.push_bind(deadline);
        push_in(&mut q, "id", ids);
        q.push(" ORDER BY id FOR UPDATE SKIP LOCKED");
        // A row whose showtime does not decode (any more) is not cancelled.
        let mut won: Vec<(i64, i64)> = q
            .build()
            .fetch_all(&mut **tx)
            .await?
            .iter()
            .filter_map(|r| Some((int(r, "id").ok()?, int(r, "showtime_id").ok()?)))
            .collect();
        let mut out = Attempt::default();
        let won_ids: Vec<i64> = won.iter().map(|(id, _)| *id).collect();
        if !self.contract().shape.order_ids_unique
            && let Some(won_ids) = NonEmpty::of(&won_ids)
        {
            let twice = ids_on_two_rows(tx, won_ids).await?;
            won.retain(|(id, _)| !twice.contains(id));
            out.refused.extend(twice.iter().map(|id| {
                UnknownRow::new(
                    "ticket_order",
                    id.to_string(),
                    "the id is on more than one row (no unique key on ticket_order.id); not cancelled",
                )
            }));
        }
        won.sort_unstable();
        won.dedup();
        // Still due but not locked by us: another transaction holds the row.
        out.locked = still_due(tx, ids, deadline).await?;
        out.locked.retain(|id| !won.iter().any(|(w, _)| w == id));
        let won_ids: Vec<i64> = won.iter().map(|(id, _)| *id).collect();

        // Every row of the orders, each in its own showtime (rule 15: the
        // release goes where the row is, not where the order says), locked
        // too; an order one of whose rows another transaction holds is
        // left for a later run, not waited for.
        let rows = match NonEmpty::of(&won_ids) {
            Some(won_ids) => OrderRows::lock(tx, won_ids).await?,
            None => OrderRows::default(),
        };
        for (order, all) in row_counts(tx, &won_ids).await? {
            if rows.locked_of(order) < all {
                out.locked.push(order);
            }
        }
        won.retain(|(id, _)| !out.locked.contains(id));
        out.locked.sort_unstable();
        let won_ids: Vec<i64> = won.iter().map(|(id, _)| *id).collect();
        let (Some(won_ids), Some(won_rows)) = (NonEmpty::of(&won_ids), NonEmpty::of(&won)) else {
            return Ok((out, None));
        };
        race_window!(crate::race_window::EXPIRED_CANCEL_ROWS_LOCKED);

        let mut q = QueryBuilder::<MySql>::new(CANCEL_ORDERS);
        q.push_bind(CANCEL_REASON)
            .push(" WHERE status = 'PENDING' AND BINARY status = 'PENDING' AND expires_at < ")
            .push_bind(deadline);
        push_in(&mut q, "id", won_ids);
        q.build().execute(&mut **tx).await?;
        let mut q = QueryBuilder::<MySql>::new(END_ORDER_SEATS);
        push_in(&mut q, "order_id", won_ids);
        q.build().execute(&mut **tx).await?;
        // Rule 16: a write is trusted only once it reads back as asked.
        out.rewritten = read_back(tx, won_ids, &rows).await?;
        if !out.rewritten.is_empty() {
            out.locked.clear();
            return Ok((out, None));
        }
        let mut q = QueryBuilder::<MySql>::new(super::audit::INSERT_FIXES);
        push_rows(&mut q, won_rows, |mut b, (id, showtime_id)| {
            b.push_bind(uuid::Uuid::new_v4().simple().to_string())
                .push_bind(audit.run_id)
                .push_bind(Kind::ExpiredOrders.label())
                .push_bind(FixAction::OrderCancelled.label())
                .push_bind(*showtime_id)
                .push_bind(None::<&str>)
                .push_bind(*id)
                .push_bind("PENDING")
                .push_bind("CANCELLED")
                .push("UTC_TIMESTAMP(3)")
                .push_bind(audit.instance);
        });
        q.push(super::audit::FIX_ONCE);
        q.build().execute(&mut **tx).await?;
        Ok((out, Some((won, rows.seats))))
    }

    /// Orders among `ids` cancelled by the reconciler at or after `since`,
    /// with the seats they held.
    async fn cancelled_by_us_since(
        &self,
        ids: NonEmpty<'_, i64>,
        since: NaiveDateTime,
    ) -> Result<Vec<CancelledOrder>> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT o.id, o.showtime_id, os.showtime_id AS seat_showtime, os.seat_no \
             FROM ticket_order o JOIN order_seat os ON os.order_id = o.id \
             WHERE o.status = 'CANCELLED' AND o.cancel_reason = ",
        );
        q.push_bind(CANCEL_REASON)
            .push(" AND o.cancelled_at >= ")
            .push_bind(since);
        push_in(&mut q, "o.id", ids);
        q.push(" ORDER BY o.id, os.seat_no");
        let mut out: Vec<CancelledOrder> = Vec::new();
        for r in q.build().fetch_all(&self.pool).await? {
            let (Ok(id), Ok(showtime_id)) = (int(&r, "id"), int(&r, "showtime_id")) else {
                continue;
            };
            let seat = match (int(&r, "seat_showtime"), text(&r, "seat_no")) {
                (Ok(showtime), Ok(seat)) => Some((showtime, seat)),
                _ => None,
            };
            match out.last_mut() {
                Some(o) if o.id == id => o.seats.extend(seat),
                _ => out.push(CancelledOrder {
                    id,
                    showtime_id,
                    seats: seat.into_iter().collect(),
                }),
            }
        }
        Ok(out)
    }
}

impl Cancels {
    fn absorb(&mut self, a: Attempt) {
        self.cancelled.extend(a.cancelled);
        self.refused.extend(a.refused);
        self.locked.extend(a.locked);
        self.rewritten.extend(a.rewritten);
    }
}

/// The locked `order_seat` rows of the orders being cancelled.
#[derive(Debug, Default)]
struct OrderRows {
    /// Each order's `active = 1` rows: the seats its cancel releases.
    seats: HashMap<i64, Vec<(ShowtimeId, SeatNo)>>,
    /// Each order's rows locked, whatever their `active`.
    locked: HashMap<i64, i64>,
    /// Each order's rows whose `active` is neither 1 nor NULL: the cancel
    /// leaves them as they are (outside the contract).
    other: HashMap<i64, i64>,
}

impl OrderRows {
    /// Locks every row of `orders` that no other transaction holds.
    async fn lock(
        tx: &mut sqlx::Transaction<'_, MySql>,
        orders: NonEmpty<'_, i64>,
    ) -> Result<OrderRows> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT order_id, showtime_id, seat_no, CAST(active AS SIGNED) AS active \
             FROM order_seat WHERE TRUE",
        );
        push_in(&mut q, "order_id", orders);
        q.push(" ORDER BY order_id, seat_no FOR UPDATE SKIP LOCKED");
        let mut out = OrderRows::default();
        for r in q.build().fetch_all(&mut **tx).await? {
            let Ok(order) = int(&r, "order_id") else {
                continue;
            };
            *out.locked.entry(order).or_default() += 1;
            match int(&r, "active") {
                // A row with no showtime or seat to release it in is ended
                // by the cancel all the same; its seat is orphan-locks'.
                Ok(1) => {
                    if let (Ok(showtime), Ok(seat)) = (int(&r, "showtime_id"), text(&r, "seat_no"))
                    {
                        out.seats.entry(order).or_default().push((showtime, seat));
                    }
                }
                Err(e) if e == "NULL" => {}
                _ => *out.other.entry(order).or_default() += 1,
            }
        }
        Ok(out)
    }

    fn locked_of(&self, order: i64) -> i64 {
        self.locked.get(&order).copied().unwrap_or(0)
    }
}

/// The orders and their rows as the cancel left them, in its transaction:
/// each order exactly `CANCELLED`, and each of its rows NULL but those it
/// left alone (neither 1 nor NULL before). What did not, and why.
async fn read_back(
    tx: &mut sqlx::Transaction<'_, MySql>,
    orders: NonEmpty<'_, i64>,
    rows: &OrderRows,
) -> Result<Vec<(i64, String)>> {
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT o.id, CAST(o.status AS BINARY) AS status, \
         (SELECT COUNT(*) FROM order_seat os WHERE os.order_id = o.id AND os.active IS NOT NULL) AS set_rows \
         FROM ticket_order o WHERE TRUE",
    );
    push_in(&mut q, "o.id", orders);
    let mut seen: HashMap<i64, (String, i64)> = HashMap::new();
    for r in q.build().fetch_all(&mut **tx).await? {
        if let Ok(id) = int(&r, "id") {
            seen.insert(id, (lossy(&r, "status"), int(&r, "set_rows").unwrap_or(-1)));
        }
    }
    let mut out = Vec::new();
    for id in orders.iter() {
        let left_alone = rows.other.get(id).copied().unwrap_or(0);
        match seen.get(id) {
            Some((status, _)) if status != "CANCELLED" => out.push((
                *id,
                format!("the order reads {status:?} after the cancel, not CANCELLED"),
            )),
            Some((_, set)) if *set != left_alone => out.push((
                *id,
                format!(
                    "{} of its order_seat rows read active other than NULL after the cancel",
                    set - left_alone
                ),
            )),
            Some(_) => {}
            None => out.push((*id, "the order is gone after the cancel".into())),
        }
    }
    Ok(out)
}

/// Those of `ids` on more than one row (no unique key on `ticket_order.id`).
async fn ids_on_two_rows(
    tx: &mut sqlx::Transaction<'_, MySql>,
    ids: NonEmpty<'_, i64>,
) -> Result<Vec<i64>> {
    let mut q = QueryBuilder::<MySql>::new("SELECT id FROM ticket_order WHERE TRUE");
    push_in(&mut q, "id", ids);
    q.push(" GROUP BY id HAVING COUNT(*) > 1");
    fetch_ids(tx, q).await
}

/// The `id` of each row `q` returns (those that decode).
async fn fetch_ids(
    tx: &mut sqlx::Transaction<'_, MySql>,
    mut q: QueryBuilder<MySql>,
) -> Result<Vec<i64>> {
    Ok(q.build()
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .filter_map(|r| int(r, "id").ok())
        .collect())
}

/// Those of `ids` that are still PENDING and due, as committed (a
/// consistent read: it waits for no lock).
async fn still_due(
    tx: &mut sqlx::Transaction<'_, MySql>,
    ids: NonEmpty<'_, i64>,
    deadline: NaiveDateTime,
) -> Result<Vec<i64>> {
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT id FROM ticket_order WHERE status = 'PENDING' AND BINARY status = 'PENDING' AND expires_at < ",
    );
    q.push_bind(deadline);
    push_in(&mut q, "id", ids);
    fetch_ids(tx, q).await
}

/// How many rows each of `orders` has, as committed (a consistent read: it
/// waits for no lock).
async fn row_counts(
    tx: &mut sqlx::Transaction<'_, MySql>,
    orders: &[i64],
) -> Result<Vec<(i64, i64)>> {
    let Some(orders) = NonEmpty::of(orders) else {
        return Ok(Vec::new());
    };
    let mut q =
        QueryBuilder::<MySql>::new("SELECT order_id, COUNT(*) AS n FROM order_seat WHERE TRUE");
    push_in(&mut q, "order_id", orders);
    q.push(" GROUP BY order_id");
    Ok(q.build()
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .filter_map(|r| Some((int(r, "order_id").ok()?, int(r, "n").ok()?)))
        .collect())
}
