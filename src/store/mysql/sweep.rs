//! What a sweep reads: keyset pages of ON_SALE showtimes, hall templates,
//! the occupancy of whole showtimes, and the showtimes outside the contract.

use super::sql::*;
use super::*;
use crate::error::Result;
use crate::model::contract::{self, UnknownRow};
use crate::model::{OccupancyBuilder, Scope, SeatNo, ShowtimeId};
use chrono::NaiveDateTime;
use futures_util::TryStreamExt;
use sqlx::{MySql, QueryBuilder, Row};
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShowtimeRow {
    pub id: ShowtimeId,
    pub hall_id: i64,
    pub starts_at: NaiveDateTime,
}

/// Keyset position: the last (sort key, id) read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Keyset {
    pub at: NaiveDateTime,
    pub id: i64,
}

impl Keyset {
    /// `"<unix ms>:<id>"`, as kept in the Redis cursor key.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.at.and_utc().timestamp_millis(), self.id)
    }

    pub fn decode(raw: &str) -> Option<Keyset> {
        let (ms, id) = raw.split_once(':')?;
        let at = chrono::DateTime::from_timestamp_millis(ms.parse().ok()?)?.naive_utc();
        Some(Keyset {
            at,
            id: id.parse().ok()?,
        })
    }
}

/// A chunk's occupancy as read: every row that may hold a seat, and the
/// rows outside the contract among them (reported by the caller).
#[derive(Debug, Clone, Default)]
pub struct OccupancyRead {
    pub occupancy: Occupancy,
    pub unknown: Vec<UnknownRow>,
}

impl MysqlStore {
    /// ON_SALE showtimes after `after` in (starts_at, id) order, soonest first.
    /// Only showtimes of `scope`. A showtime whose
    /// status is not spelled `ON_SALE` exactly, or whose `starts_at` does not
    /// decode, is not on this page: [`MysqlStore::unknown_showtimes`] reports it.
    pub async fn on_sale_page(
        &self,
        after: Option<Keyset>,
        before: Option<NaiveDateTime>,
        limit: usize,
        scope: Scope<'_>,
    ) -> Result<Vec<ShowtimeRow>> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT id, hall_id, starts_at FROM showtime WHERE status = 'ON_SALE' AND BINARY status = 'ON_SALE' AND ",
        );
        q.push(date_ok("starts_at"));
        push_scope(&mut q, "id", scope);
        push_after(&mut q, "starts_at", "id", after);
        if let Some(before) = before {
            q.push(" AND starts_at < ").push_bind(before);
        }
        q.push(" ORDER BY starts_at, id LIMIT ")
            .push_bind(limit as u64);
        let rows = q.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
                Ok(ShowtimeRow {
                    id: r.try_get("id")?,
                    hall_id: r.try_get("hall_id")?,
                    starts_at: r.try_get("starts_at")?,
                })
            })
            .collect()
    }

    /// Showtimes of the scope that the contract does not
    /// explain, at most `limit`: a status not spelled as one of its four
    /// (`on_sale`, `ONSALE`), or an ON_SALE one whose `starts_at` does not
    /// decode. Index ranges only: the ON_SALE range the sweep reads anyway,
    /// and the statuses outside the four under the collation. (A status the
    /// collation takes for SCHEDULED, CLOSED or CANCELLED is ON_SALE in no
    /// reading, so nothing would be repaired for it either way.)
    pub async fn unknown_showtimes(
        &self,
        scope: Scope<'_>,
        limit: usize,
    ) -> Result<Vec<UnknownRow>> {
        let mut out = Vec::new();
        for on_sale_range in [true, false] {
            let mut q = QueryBuilder::<MySql>::new(
                "SELECT id, CAST(status AS BINARY) AS status, CAST(starts_at AS CHAR) AS starts_raw, ",
            );
            q.push(date_ok("starts_at"))
                .push(" AS starts_ok FROM showtime WHERE ");
            if on_sale_range {
                q.push("status = 'ON_SALE' AND NOT (BINARY status = 'ON_SALE' AND ")
                    .push(date_ok("starts_at"))
                    .push(")");
            } else {
                q.push("status NOT IN ('SCHEDULED', 'ON_SALE', 'CLOSED', 'CANCELLED')");
            }
            push_scope(&mut q, "id", scope);
            q.push(" ORDER BY id LIMIT ").push_bind(limit as u64);
            for r in q.build().fetch_all(&self.pool).await? {
                let id: i64 = r.try_get("id")?;
                let status = lossy(&r, "status");
                let why = if !contract::SHOWTIME_STATUSES.contains(&status.as_str()) {
                    format!("status {status:?} is not spelled as the contract spells it")
                } else {
                    format!(
                        "starts_at {} does not decode",
                        r.try_get::<Option<String>, _>("starts_raw")
                            .ok()
                            .flatten()
                            .unwrap_or_else(|| "NULL".into())
                    )
                };
                out.push(UnknownRow::new("showtime", id.to_string(), why));
            }
        }
        Ok(out)
    }

    /// How many ON_SALE showtimes the scope has.
    pub async fn count_on_sale(&self, scope: Scope<'_>) -> Result<u64> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT COUNT(*) FROM showtime WHERE status = 'ON_SALE' AND BINARY status = 'ON_SALE' AND ",
        );
        q.push(date_ok("starts_at"));
        push_scope(&mut q, "id", scope);
        let n: i64 = q.build_query_scalar().fetch_one(&self.pool).await?;
        Ok(n as u64)
    }

    /// How many ON_SALE showtimes lie after `after` (the unscanned backlog).
    pub async fn count_on_sale_after(&self, after: Keyset, scope: Scope<'_>) -> Result<u64> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT COUNT(*) FROM showtime WHERE status = 'ON_SALE' AND BINARY status = 'ON_SALE' AND ",
        );
        q.push(date_ok("starts_at"));
        push_scope(&mut q, "id", scope);
        push_after(&mut q, "starts_at", "id", Some(after));
        let n: i64 = q.build_query_scalar().fetch_one(&self.pool).await?;
        Ok(n as u64)
    }

    /// Enabled template seats of each hall, in seat-map order, and the
    /// template rows whose `enabled` is neither 0 nor 1 (no enabled seat:
    /// their fields and rows are left alone, and they are reported).
    pub async fn templates(
        &self,
        hall_ids: &[i64],
    ) -> Result<(HashMap<i64, Vec<SeatNo>>, Vec<UnknownRow>)> {
        let mut out: HashMap<i64, Vec<SeatNo>> =
            hall_ids.iter().map(|&h| (h, Vec::new())).collect();
        let mut unknown = Vec::new();
        if hall_ids.is_empty() {
            return Ok((out, unknown));
        }
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT hall_id, seat_no, CAST(enabled AS SIGNED) AS enabled FROM hall_seat \
             WHERE (enabled IS NULL OR enabled <> 0)",
        );
        push_in(&mut q, "hall_id", hall_ids);
        q.push(" ORDER BY hall_id, row_label, col_no, seat_no");
        let rows = q.build().fetch_all(&self.pool).await?;
        for r in rows {
            let hall: i64 = r.try_get("hall_id")?;
            let seat = lossy(&r, "seat_no");
            match contract::read_enabled(&column(&r, "enabled")) {
                Ok(true) => out.entry(hall).or_default().push(seat),
                Ok(false) => {}
                Err(why) => unknown.push(UnknownRow::new(
                    "hall_seat",
                    format!("hall {hall} seat {seat}"),
                    why,
                )),
            }
        }
        Ok((out, unknown))
    }

    /// The rows of whole showtimes that may hold a seat, read strictly
    /// (`contract::read_seat_row`): valid occupancies, and rows outside the
    /// contract (reported, and held against lowering their seat). Only rows
    /// the contract's own cancel or refund ended are left out. Streamed into
    /// one buffer: this reads every held seat of every sweep.
    pub async fn occupancy(&self, showtimes: &[ShowtimeId]) -> Result<OccupancyRead> {
        let mut out = OccupancyBuilder::default();
        let mut unknown = Vec::new();
        if showtimes.is_empty() {
            return Ok(OccupancyRead {
                occupancy: out.finish(),
                unknown,
            });
        }
        let mut q = QueryBuilder::<MySql>::new(SEAT_ROW_COLUMNS);
        q.push(
                " FROM order_seat os LEFT JOIN ticket_order o ON o.id = os.order_id \
                 WHERE NOT (os.active IS NULL AND (o.id IS NULL OR (BINARY o.status IN ('CANCELLED', 'REFUNDED') AND ",
            )
            .push(order_dates_ok("o"))
            .push(")))");
        push_in(&mut q, "os.showtime_id", showtimes);
        let mut rows = q.build().fetch(&self.pool);
        while let Some(r) = rows.try_next().await? {
            let facts = seat_row_facts(&r)?;
            let reading = contract::read_seat_row(&facts);
            unknown.extend(reading.unknown_row(facts.order_id, &facts.seat_no));
            if let Some(holding) = reading.holding(facts.order_id) {
                out.push_row(facts.showtime_id, &facts.seat_no, holding, facts.order_id);
            }
        }
        Ok(OccupancyRead {
            occupancy: out.finish(),
            unknown,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyset_round_trips() {
        let at = chrono::DateTime::from_timestamp_millis(1_767_000_000_123)
            .unwrap()
            .naive_utc();
        let k = Keyset { at, id: 42 };
        assert_eq!(Keyset::decode(&k.encode()), Some(k));
        assert_eq!(Keyset::decode("nope"), None);
    }
}
