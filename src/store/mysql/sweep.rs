//! What a sweep reads: keyset pages of ON_SALE showtimes, hall templates,
//! and the showtimes outside the contract (the occupancy: `occupancy_read.rs`).

use super::sql::*;
use super::*;
use crate::error::Result;
use crate::model::contract::{self, UnknownRow};
use crate::model::{Scope, SeatNo, ShowtimeId, Template};
use chrono::NaiveDateTime;
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

/// Where a sweep's segment of the keyset order ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageEnd {
    /// Before the showtimes starting at this time (the soonest window's end).
    Before(NaiveDateTime),
    /// At this position, itself included (a pass's ring come round to
    /// where it began).
    Through(Keyset),
}

/// ` AND` the rows before `end` (none: to the estate's end).
fn push_end(q: &mut QueryBuilder<MySql>, end: Option<PageEnd>) {
    match end {
        None => {}
        Some(PageEnd::Before(at)) => {
            q.push(" AND starts_at < ").push_bind(at);
        }
        Some(PageEnd::Through(k)) => {
            q.push(" AND (starts_at < ")
                .push_bind(k.at)
                .push(" OR (starts_at = ")
                .push_bind(k.at)
                .push(" AND id <= ")
                .push_bind(k.id)
                .push("))");
        }
    }
}

/// A keyset page of ON_SALE showtimes, read row by row (rule 16).
#[derive(Debug, Clone, Default)]
pub struct ShowtimePage {
    /// The showtimes the contract explains.
    pub rows: Vec<ShowtimeRow>,
    /// Those it does not (a `hall_id` that does not decode): reported,
    /// never swept.
    pub unknown: Vec<UnknownRow>,
    /// Where the page ends: the next page starts after it.
    pub last: Option<Keyset>,
    /// How many rows the page held, known or not.
    pub read: usize,
}

/// ` AND id <= BIGINT's end` when the column is unsigned: ids beyond it
/// cannot be a page's keyset (reported by the schema's data check).
fn push_id_range(q: &mut QueryBuilder<MySql>, col: &str, unsigned: bool) {
    if unsigned {
        q.push(format_args!(" AND {col} <= 9223372036854775807"));
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
    /// ON_SALE showtimes after `after` and up to `end` in (starts_at, id)
    /// order, soonest first. Only showtimes of `scope`. A showtime whose
    /// status is not spelled `ON_SALE` exactly, or whose `starts_at` does not
    /// decode, is not on this page: [`MysqlStore::unknown_showtimes`] reports it.
    pub async fn on_sale_page(
        &self,
        after: Option<Keyset>,
        end: Option<PageEnd>,
        limit: usize,
        scope: Scope<'_>,
    ) -> Result<ShowtimePage> {
        // The keys come from `(status, starts_at)` alone (it holds `id`
        // too): a range read in index order from the keyset on, no filesort,
        // and the table is reached only for the page's own rows (their
        // `hall_id`), by id. The status is a range of one value (`>=` and
        // `<=`, the same rows as `=` under any collation) and the order names
        // it: an equality lets MariaDB prefer a `ref` on the status alone,
        // which reads the index from the first ON_SALE showtime up to the
        // keyset on every page (quadratic in the estate). The exact spelling
        // is still `BINARY status`'s to decide. Where `showtime.id` is not
        // unique (a deviation), a row is not found by its id (that would
        // bring its namesakes, whatever their status, and more rows than the
        // page asked for): the rows are read as they are.
        let by_id = self.contract().shape.showtime_ids_unique;
        let mut q = QueryBuilder::<MySql>::new(if by_id {
            "SELECT s.id, s.hall_id, s.starts_at FROM (SELECT id FROM showtime"
        } else {
            "SELECT id, hall_id, starts_at FROM showtime"
        });
        q.push(
            " WHERE status >= 'ON_SALE' AND status <= 'ON_SALE' AND BINARY status = 'ON_SALE' \
             AND id IS NOT NULL AND ",
        );
        q.push(date_ok("starts_at"));
        push_id_range(&mut q, "id", self.contract().shape.showtime_id_unsigned);
        push_scope(&mut q, "id", scope);
        push_after(&mut q, "starts_at", "id", after);
        push_end(&mut q, end);
        q.push(" ORDER BY status, starts_at, id LIMIT ")
            .push_bind(limit as u64);
        if by_id {
            q.push(") page JOIN showtime s ON s.id = page.id");
        }
        let rows = q.build().fetch_all(&self.pool).await?;
        let mut page = ShowtimePage {
            read: rows.len(),
            last: after,
            ..ShowtimePage::default()
        };
        // The join's rows come in no promised order: the page's is the keyset's.
        let mut keyed = Vec::with_capacity(rows.len());
        for r in &rows {
            // The SQL keeps ids within BIGINT and dates that decode: a key
            // that does not decode here is a type the schema check holds.
            let (Ok(id), Ok(Some(starts_at))) = (int(r, 0), datetime(r, 2)) else {
                continue;
            };
            keyed.push((Keyset { at: starts_at, id }, int(r, 1)));
        }
        keyed.sort_unstable_by_key(|(k, _)| *k);
        for (key, hall_id) in keyed {
            page.last = Some(key);
            let Keyset { at: starts_at, id } = key;
            match hall_id {
                Ok(hall_id) => page.rows.push(ShowtimeRow {
                    id,
                    hall_id,
                    starts_at,
                }),
                Err(e) => page.unknown.push(UnknownRow::new(
                    "showtime",
                    id.to_string(),
                    format!("hall_id does not decode ({e})"),
                )),
            }
        }
        if page.read > 0 && page.last == after {
            return Err(crate::error::Error::MysqlInvariant(
                "no showtime of a page has an id and starts_at that decode".into(),
            ));
        }
        Ok(page)
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
                q.push(
                    "(status IS NULL OR status NOT IN ('SCHEDULED', 'ON_SALE', 'CLOSED', 'CANCELLED') \
                     OR (id IS NULL AND status = 'ON_SALE'))",
                );
            }
            push_scope(&mut q, "id", scope);
            q.push(" ORDER BY id LIMIT ").push_bind(limit as u64);
            for r in q.build().fetch_all(&self.pool).await? {
                let id = int(&r, "id").map_or_else(|e| format!("id {e}"), |id| id.to_string());
                let status = text(&r, "status");
                let why = if is_null(&r, "id") {
                    "id is NULL: no seat hash can be its".to_string()
                } else if let Err(e) = &status {
                    format!("status does not decode ({e})")
                } else if let Ok(status) = &status
                    && !contract::SHOWTIME_STATUSES.contains(&status.as_str())
                {
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
                out.push(UnknownRow::new("showtime", id, why));
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
        push_id_range(&mut q, "id", self.contract().shape.showtime_id_unsigned);
        push_scope(&mut q, "id", scope);
        let n: i64 = q.build_query_scalar().fetch_one(&self.pool).await?;
        Ok(n as u64)
    }

    /// How many ON_SALE showtimes lie after `after` and up to `end` (the
    /// unscanned backlog).
    pub async fn count_on_sale_between(
        &self,
        after: Option<Keyset>,
        end: Option<PageEnd>,
        scope: Scope<'_>,
    ) -> Result<u64> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT COUNT(*) FROM showtime WHERE status = 'ON_SALE' AND BINARY status = 'ON_SALE' AND ",
        );
        q.push(date_ok("starts_at"));
        push_id_range(&mut q, "id", self.contract().shape.showtime_id_unsigned);
        push_scope(&mut q, "id", scope);
        push_after(&mut q, "starts_at", "id", after);
        push_end(&mut q, end);
        let n: i64 = q.build_query_scalar().fetch_one(&self.pool).await?;
        Ok(n as u64)
    }

    /// The template of each hall: its enabled seats in seat-map order,
    /// grouped where `order_seat`'s comparison takes two of them for one
    /// (rule 17); and the template rows the contract does not explain
    /// (`enabled` neither 0 nor 1, no `seat_no`): no enabled seat, their
    /// fields and rows are left alone, and they are reported.
    pub async fn templates(
        &self,
        hall_ids: &[i64],
    ) -> Result<(HashMap<i64, Template>, Vec<UnknownRow>)> {
        let mut seats: HashMap<i64, Vec<SeatNo>> =
            hall_ids.iter().map(|&h| (h, Vec::new())).collect();
        let mut unknown = Vec::new();
        let Some(halls) = NonEmpty::of(hall_ids) else {
            return Ok((HashMap::new(), unknown));
        };
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT hall_id, seat_no, CAST(enabled AS SIGNED) AS enabled FROM hall_seat \
             WHERE (enabled IS NULL OR enabled <> 0)",
        );
        push_in(&mut q, "hall_id", halls);
        // The seat-map order by the columns the schema has (rule 17: a
        // missing `row_label` or `col_no` holds no job).
        q.push(" ORDER BY hall_id, ")
            .push(self.contract().shape.seat_order(""));
        let rows = q.build().fetch_all(&self.pool).await?;
        for r in rows {
            let Ok(hall) = int(&r, "hall_id") else {
                continue;
            };
            let (seat, enabled) = match text(&r, "seat_no") {
                Ok(seat) => {
                    let enabled = contract::read_enabled(&column(&r, "enabled"));
                    (seat, enabled)
                }
                Err(e) => ("NULL".into(), Err(format!("seat_no does not decode ({e})"))),
            };
            match enabled {
                Ok(true) => seats.entry(hall).or_default().push(seat),
                Ok(false) => {}
                Err(why) => unknown.push(UnknownRow::new(
                    "hall_seat",
                    format!("hall {hall} seat {seat}"),
                    why,
                )),
            }
        }
        let groups = match &self.contract().shape.seat_groups {
            Some((charset, collation)) => {
                self.seat_groups(charset, collation, super::schema::GroupsOf::Halls(halls))
                    .await?
                    .0
            }
            None => Vec::new(),
        };
        let templates = seats
            .into_iter()
            .map(|(hall, seats)| {
                let of_hall: Vec<Vec<SeatNo>> = groups
                    .iter()
                    .filter(|(h, _)| *h == hall)
                    .map(|(_, g)| g.clone())
                    .collect();
                (hall, Template::new(seats).with_groups(&of_hall))
            })
            .collect();
        Ok((templates, unknown))
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
