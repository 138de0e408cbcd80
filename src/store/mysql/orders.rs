//! Expired orders: keyset pages, those outside the contract, and the
//! conditional cancel (rule 3) with its audit rows in one transaction.

use super::sql::*;
use super::*;
use crate::error::Result;
use crate::model::contract::UnknownRow;
use crate::model::{FixAction, Kind, Scope, SeatNo, ShowtimeId};
use chrono::NaiveDateTime;
use sqlx::{MySql, QueryBuilder, Row};
use std::collections::HashMap;

/// The cancel's writes, as `access.rs` prepares them too (rule 18): the
/// order's update (the reason is bound after it) and its seats' release.
pub(super) const CANCEL_ORDERS: &str = "UPDATE ticket_order SET status = 'CANCELLED', cancelled_at = UTC_TIMESTAMP(3), cancel_reason = ";
pub(super) const END_ORDER_SEATS: &str = "UPDATE order_seat SET active = NULL WHERE active = 1";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredOrder {
    pub id: i64,
    pub showtime_id: ShowtimeId,
    pub expires_at: NaiveDateTime,
    /// Spelled exactly `PENDING`. The page also holds orders the collation
    /// calls PENDING (`pending`, `PENDING `): bad data, never cancelled.
    pub exact: bool,
}

/// A keyset page of due orders, read row by row (rule 16).
#[derive(Debug, Clone, Default)]
pub struct ExpiredPage {
    /// The orders the contract explains.
    pub orders: Vec<ExpiredOrder>,
    /// Those it does not (a `showtime_id` that does not decode): reported,
    /// never cancelled.
    pub unknown: Vec<UnknownRow>,
    /// Where the page ends: the next page starts after it.
    pub last: Option<Keyset>,
    /// How many rows the page held, known or not.
    pub read: usize,
}

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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelledOrder {
    pub id: i64,
    pub showtime_id: ShowtimeId,
    /// The order's own `order_seat` rows: each seat in the row's showtime
    /// (which a row outside the contract may set apart from the order's).
    pub seats: Vec<(ShowtimeId, SeatNo)>,
}

impl MysqlStore {
    /// Orders whose status the collation takes for PENDING and whose
    /// `expires_at` is before `deadline`, after `after` in (expires_at, id)
    /// order; `exact` tells the real PENDING ones. Orders whose
    /// `expires_at` does not decode are not on this page:
    /// [`MysqlStore::unknown_expired`] reports them.
    pub async fn expired_page(
        &self,
        deadline: NaiveDateTime,
        after: Option<Keyset>,
        limit: usize,
        scope: Scope<'_>,
    ) -> Result<ExpiredPage> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT id, showtime_id, expires_at, BINARY status = 'PENDING' AS exact \
             FROM ticket_order WHERE status = 'PENDING' AND id IS NOT NULL AND ",
        );
        q.push(date_ok("expires_at")).push(" AND expires_at < ");
        q.push_bind(deadline);
        if self.contract().shape.order_id_unsigned {
            q.push(" AND id <= 9223372036854775807");
        }
        push_scope(&mut q, "showtime_id", scope);
        push_after(&mut q, "expires_at", "id", after);
        q.push(" ORDER BY expires_at, id LIMIT ")
            .push_bind(limit as u64);
        let rows = q.build().fetch_all(&self.pool).await?;
        let mut page = ExpiredPage {
            read: rows.len(),
            last: after,
            ..ExpiredPage::default()
        };
        for r in &rows {
            // The SQL keeps ids within BIGINT and deadlines that decode.
            let (Ok(id), Ok(Some(expires_at))) =
                (int(r, 0), column::<Option<NaiveDateTime>, _>(r, 2))
            else {
                continue;
            };
            page.last = Some(Keyset { at: expires_at, id });
            match int(r, 1) {
                Ok(showtime_id) => page.orders.push(ExpiredOrder {
                    id,
                    showtime_id,
                    expires_at,
                    exact: int(r, 3) == Ok(1),
                }),
                Err(e) => page.unknown.push(UnknownRow::new(
                    "ticket_order",
                    id.to_string(),
                    format!("showtime_id does not decode ({e}); not cancelled"),
                )),
            }
        }
        if page.read > 0 && page.last == after {
            return Err(crate::error::Error::MysqlInvariant(
                "no order of a page has an id and expires_at that decode".into(),
            ));
        }
        Ok(page)
    }

    /// Deadlines of PENDING orders of the scope in `[from, to)`, soonest
    /// first, at most `limit`: (showtime, expires_at), for the checks queued
    /// at each deadline (src/changes/). An index range of
    /// `(status, expires_at)`; deadlines that do not decode are the job's
    /// to report.
    pub async fn deadlines_between(
        &self,
        from: NaiveDateTime,
        to: NaiveDateTime,
        scope: Scope<'_>,
        limit: usize,
    ) -> Result<Vec<(ShowtimeId, NaiveDateTime)>> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT showtime_id, expires_at FROM ticket_order WHERE status = 'PENDING' AND ",
        );
        q.push(date_ok("expires_at"))
            .push(" AND expires_at >= ")
            .push_bind(from)
            .push(" AND expires_at < ")
            .push_bind(to);
        push_scope(&mut q, "showtime_id", scope);
        q.push(" ORDER BY expires_at LIMIT ")
            .push_bind(limit as u64);
        let rows = q.build().fetch_all(&self.pool).await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let showtime = int(r, "showtime_id").ok()?;
                let at = column::<Option<NaiveDateTime>, _>(r, "expires_at").ok()??;
                Some((showtime, at))
            })
            .collect())
    }

    /// Orders the collation takes for PENDING whose `expires_at` does not
    /// decode (a zero date under a permissive `sql_mode`, a day past the
    /// month's end) and that MySQL orders before `deadline`, at most
    /// `limit`: never cancelled (nobody knows their deadline), reported.
    /// Only those that are due, as the job's own page: an index range of
    /// `(status, expires_at)` that is short once expired orders are
    /// cancelled, instead of every PENDING order each run (seconds at
    /// 100 k showtimes). A zero date is due at once; `2027-02-30` once the
    /// deadline passes where MySQL sorts it.
    pub async fn unknown_expired(
        &self,
        deadline: NaiveDateTime,
        scope: Scope<'_>,
        limit: usize,
    ) -> Result<Vec<UnknownRow>> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT id, CAST(expires_at AS CHAR) AS raw FROM ticket_order \
             WHERE status = 'PENDING' AND (expires_at IS NULL OR expires_at < ",
        );
        q.push_bind(deadline).push(") AND (id IS NULL OR NOT ");
        q.push(date_ok("expires_at")).push(")");
        push_scope(&mut q, "showtime_id", scope);
        q.push(" ORDER BY id LIMIT ").push_bind(limit as u64);
        let rows = q.build().fetch_all(&self.pool).await?;
        Ok(rows
            .iter()
            .map(|r| {
                let raw = || {
                    r.try_get::<Option<String>, _>("raw")
                        .ok()
                        .flatten()
                        .unwrap_or_else(|| "NULL".into())
                };
                match int(r, "id") {
                    Ok(id) => UnknownRow::new(
                        "ticket_order",
                        id.to_string(),
                        format!("expires_at {} does not decode; not cancelled", raw()),
                    ),
                    Err(e) => UnknownRow::new(
                        "ticket_order",
                        format!("id {e} expiring {}", raw()),
                        "no id to cancel it by; not cancelled",
                    ),
                }
            })
            .collect())
    }

    /// Cancels those of `ids` that are still PENDING and expired before
    /// `deadline`, with their seats' `active = NULL`, in one transaction.
    /// Orders paid or cancelled meanwhile are skipped (rule 3): the rows are
    /// locked first, and the UPDATE repeats the condition.
    ///
    /// Each cancel's audit row (`order_cancelled`) is written in the same
    /// transaction (rule 10): a cancel without its audit row cannot commit.
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
        let Some(ids) = NonEmpty::of(ids) else {
            return Ok(Cancels::default());
        };
        let mut earlier = self.cancelled_by_us_since(ids, since).await?;
        let mut tx = self.pool.begin().await?;
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT id, showtime_id FROM ticket_order WHERE status = 'PENDING' AND BINARY status = 'PENDING' AND expires_at < ",
        );
        q.push_bind(deadline);
        push_in(&mut q, "id", ids);
        q.push(" ORDER BY id FOR UPDATE SKIP LOCKED");
        // A row whose showtime does not decode (any more) is not cancelled.
        let mut won: Vec<(i64, i64)> = q
            .build()
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .filter_map(|r| Some((int(r, "id").ok()?, int(r, "showtime_id").ok()?)))
            .collect();
        let mut refused = Vec::new();
        let won_ids: Vec<i64> = won.iter().map(|(id, _)| *id).collect();
        if !self.contract().shape.order_ids_unique
            && let Some(won_ids) = NonEmpty::of(&won_ids)
        {
            let mut q = QueryBuilder::<MySql>::new("SELECT id FROM ticket_order WHERE TRUE");
            push_in(&mut q, "id", won_ids);
            q.push(" GROUP BY id HAVING COUNT(*) > 1");
            let twice: Vec<i64> = q
                .build()
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .filter_map(|r| int(r, "id").ok())
                .collect();
            won.retain(|(id, _)| !twice.contains(id));
            refused.extend(twice.iter().map(|id| {
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
        let mut locked = still_due(&mut tx, ids, deadline).await?;
        locked.retain(|id| !won.iter().any(|(w, _)| w == id));
        let won_ids: Vec<i64> = won.iter().map(|(id, _)| *id).collect();

        // The order's own rows, each in its own showtime (rule 15: the
        // release goes where the row is, not where the order says), locked
        // too; an order one of whose rows another transaction holds is
        // left for a later run, not waited for.
        let mut seats: HashMap<i64, Vec<(ShowtimeId, SeatNo)>> = HashMap::new();
        let mut held: HashMap<i64, i64> = HashMap::new();
        if let Some(won_ids) = NonEmpty::of(&won_ids) {
            let mut q = QueryBuilder::<MySql>::new(
                "SELECT order_id, showtime_id, seat_no FROM order_seat WHERE active = 1",
            );
            push_in(&mut q, "order_id", won_ids);
            q.push(" ORDER BY order_id, seat_no FOR UPDATE SKIP LOCKED");
            for r in q.build().fetch_all(&mut *tx).await? {
                let Ok(order) = int(&r, "order_id") else {
                    continue;
                };
                *held.entry(order).or_default() += 1;
                // A row with no showtime or seat to release it in is ended
                // by the cancel all the same; its seat is orphan-locks'.
                if let (Ok(showtime), Ok(seat)) = (int(&r, "showtime_id"), text(&r, "seat_no")) {
                    seats.entry(order).or_default().push((showtime, seat));
                }
            }
        }
        for (order, all) in active_rows(&mut tx, &won_ids).await? {
            if held.get(&order).copied().unwrap_or(0) < all {
                locked.push(order);
            }
        }
        won.retain(|(id, _)| !locked.contains(id));
        locked.sort_unstable();
        let won_ids: Vec<i64> = won.iter().map(|(id, _)| *id).collect();
        let (Some(won_ids), Some(won_rows)) = (NonEmpty::of(&won_ids), NonEmpty::of(&won)) else {
            tx.rollback().await?;
            return Ok(Cancels {
                cancelled: earlier,
                refused,
                locked,
            });
        };
        race_window!(crate::race_window::EXPIRED_CANCEL_ROWS_LOCKED);

        let mut q = QueryBuilder::<MySql>::new(CANCEL_ORDERS);
        q.push_bind(CANCEL_REASON)
            .push(" WHERE status = 'PENDING' AND BINARY status = 'PENDING' AND expires_at < ")
            .push_bind(deadline);
        push_in(&mut q, "id", won_ids);
        let updated = q.build().execute(&mut *tx).await?.rows_affected();
        if updated != won_ids.items().len() as u64 {
            // Impossible while we hold the row locks; refuse rather than guess.
            tx.rollback().await?;
            return Err(crate::error::Error::MysqlInvariant(format!(
                "cancel updated {updated} of {} locked orders",
                won_ids.items().len()
            )));
        }
        let mut q = QueryBuilder::<MySql>::new(END_ORDER_SEATS);
        push_in(&mut q, "order_id", won_ids);
        q.build().execute(&mut *tx).await?;
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
        q.build().execute(&mut *tx).await?;
        tx.commit().await?;
        #[cfg(feature = "failpoints")]
        fail::fail_point!(crate::race_window::CANCEL_REPLY_LOST, |_| {
            Err(crate::error::Error::Mysql(sqlx::Error::Io(
                std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "the commit's reply was lost (failpoint)",
                ),
            )))
        });

        earlier.extend(won.into_iter().map(|(id, showtime_id)| CancelledOrder {
            id,
            showtime_id,
            seats: seats.remove(&id).unwrap_or_default(),
        }));
        Ok(Cancels {
            cancelled: earlier,
            refused,
            locked,
        })
    }

    /// Orders among `ids` cancelled by the reconciler at or after `since`,
    /// with the seats they held.
    pub(super) async fn cancelled_by_us_since(
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
    Ok(q.build()
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .filter_map(|r| int(r, "id").ok())
        .collect())
}

/// How many `active = 1` rows each of `orders` has, as committed (a
/// consistent read: it waits for no lock).
async fn active_rows(
    tx: &mut sqlx::Transaction<'_, MySql>,
    orders: &[i64],
) -> Result<Vec<(i64, i64)>> {
    let Some(orders) = NonEmpty::of(orders) else {
        return Ok(Vec::new());
    };
    let mut q = QueryBuilder::<MySql>::new(
        "SELECT order_id, COUNT(*) AS n FROM order_seat WHERE active = 1",
    );
    push_in(&mut q, "order_id", orders);
    q.push(" GROUP BY order_id");
    Ok(q.build()
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .filter_map(|r| Some((int(r, "order_id").ok()?, int(r, "n").ok()?)))
        .collect())
}
