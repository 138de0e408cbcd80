//! Expired orders: keyset pages and those outside the contract. The cancel
//! is `cancel.rs`.

use super::sql::*;
use super::*;
use crate::error::Result;
use crate::model::contract::UnknownRow;
use crate::model::{Scope, ShowtimeId};
use chrono::NaiveDateTime;
use sqlx::{MySql, QueryBuilder, Row};

/// The cancel's writes, as `grants_held.rs` prepares them too (rule 18): the
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
             FROM ticket_order WHERE ",
        );
        self.push_expired(&mut q, deadline, scope);
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
            let (Ok(id), Ok(Some(expires_at))) = (int(r, 0), datetime(r, 2)) else {
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

    /// How many orders [`MysqlStore::expired_page`] would read in all
    /// (for the progress of a long run: one index range count).
    pub async fn count_expired(&self, deadline: NaiveDateTime, scope: Scope<'_>) -> Result<u64> {
        let mut q = QueryBuilder::<MySql>::new("SELECT COUNT(*) FROM ticket_order WHERE ");
        self.push_expired(&mut q, deadline, scope);
        let n: i64 = q.build_query_scalar().fetch_one(&self.pool).await?;
        Ok(n as u64)
    }

    /// The orders of an expired page: PENDING by the collation, a deadline
    /// that decodes and is before `deadline`, an id within BIGINT.
    fn push_expired(&self, q: &mut QueryBuilder<MySql>, deadline: NaiveDateTime, scope: Scope<'_>) {
        q.push("status = 'PENDING' AND id IS NOT NULL AND ");
        q.push(date_ok("expires_at")).push(" AND expires_at < ");
        q.push_bind(deadline);
        if self.contract().shape.order_id_unsigned {
            q.push(" AND id <= 9223372036854775807");
        }
        push_scope(q, "showtime_id", scope);
    }

    /// Deadlines of PENDING orders of the scope in `[from, to)`, soonest
    /// first, at most `limit`: (showtime, expires_at), for the checks queued
    /// at each deadline (src/daemon/change_state.rs). An index range of
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
                let at = datetime(r, "expires_at").ok()??;
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
}
