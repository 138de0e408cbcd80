//! MySQL: keyset-paginated reads, the conditional cancel of expired orders
//! (safety rule 3), migrations and the audit trail (safety rule 10).
//! Every query is bounded by a LIMIT or by an IN list of one chunk.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::NaiveDateTime;
use futures_util::TryStreamExt;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlRow};
use sqlx::{MySql, QueryBuilder, Row};

use crate::contract::{self, Column, OrderFacts, SeatRow, SeatRowFacts, UnknownRow};
use crate::error::Result;
use crate::model::{FixAction, Kind, OccupancyBuilder, SeatNo, SeatTruth, Shard, ShowtimeId};

/// The cancel reason the reconciler writes, so seatflow can tell its cancels apart.
pub const CANCEL_REASON: &str = "RECONCILE_EXPIRED";

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredOrder {
    pub id: i64,
    pub showtime_id: ShowtimeId,
    pub expires_at: NaiveDateTime,
    /// Spelled exactly `PENDING`. The page also holds orders the collation
    /// calls PENDING (`pending`, `PENDING `): bad data, never cancelled.
    pub exact: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelledOrder {
    pub id: i64,
    pub showtime_id: ShowtimeId,
    /// The order's own `order_seat` rows: each seat in the row's showtime
    /// (which a row outside the contract may set apart from the order's).
    pub seats: Vec<(ShowtimeId, SeatNo)>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShowtimeInfo {
    pub id: ShowtimeId,
    pub hall_id: i64,
    /// None when the stored value does not decode (`starts_at_raw` shows it).
    pub starts_at: Option<NaiveDateTime>,
    pub starts_at_raw: String,
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutSeat {
    pub seat_no: SeatNo,
    pub row_label: Option<String>,
    pub col_no: Option<i32>,
    pub enabled: bool,
}

/// An `order_seat` row of a showtime that may hold its seat, for `inspect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupant {
    pub seat_no: SeatNo,
    pub order_id: i64,
    pub order_no: String,
    /// `Occupies` or `Unknown` (ended rows are not listed).
    pub reading: SeatRow,
    pub expires_at: Option<NaiveDateTime>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuditEntry {
    pub run_id: String,
    pub job: String,
    pub kind: String,
    pub order_id: Option<i64>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub fixed_at: NaiveDateTime,
    pub instance: String,
}

/// A seat as the re-check sees it, asked in MySQL's own terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeatHistory {
    /// The valid occupancy, and whether a row outside the contract may hold it.
    pub truth: SeatTruth,
    /// Latest created/paid/cancelled time of any order on the seat (UTC ms).
    pub last_activity_ms: Option<i64>,
}

/// A chunk's occupancy as read: every row that may hold a seat, and the
/// rows outside the contract among them (reported by the caller).
#[derive(Debug, Clone, Default)]
pub struct OccupancyRead {
    pub occupancy: Occupancy,
    pub unknown: Vec<UnknownRow>,
}

/// One audit row of `reconcile_fix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixRecord {
    /// Unique per repair, so a retried INSERT never writes a row twice.
    pub fix_id: String,
    pub job: Kind,
    pub action: FixAction,
    pub showtime_id: Option<ShowtimeId>,
    pub seat_no: Option<SeatNo>,
    pub order_id: Option<i64>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub at: NaiveDateTime,
}

/// Which run, of which reconciler, an audit row belongs to.
#[derive(Debug, Clone, Copy)]
pub struct RunIdentity<'a> {
    pub run_id: &'a str,
    pub instance: &'a str,
}

#[derive(Clone)]
pub struct MysqlStore {
    pool: MySqlPool,
    /// Only showtimes of this shard are read for sweeps.
    shard: Shard,
}

/// (showtime, seat) → status of the valid order occupying it.
pub use crate::model::Occupancy;

pub use sqlx::mysql::MySqlSslMode;

/// How to speak TLS to MySQL, as plain values (filled from the settings).
/// The files are read by each new connection, so a rotated file is used by
/// the connections made after it changed.
#[derive(Debug, Clone, Default)]
pub struct MysqlTls {
    /// `None`: as the URL says (`?ssl-mode=`; sqlx's default is `PREFERRED`).
    pub mode: Option<MySqlSslMode>,
    /// PEM CA bundle, trusted besides the built-in public roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM), for mutual TLS.
    pub client: Option<(PathBuf, PathBuf)>,
}

impl MysqlStore {
    /// A pool of at most `max_connections`, each acquired within
    /// `acquire_timeout`, speaking TLS as `tls` says.
    pub async fn connect(
        url: &str,
        tls: &MysqlTls,
        max_connections: u32,
        acquire_timeout: Duration,
        shard: Shard,
    ) -> Result<MysqlStore> {
        let mut options: MySqlConnectOptions = url.parse()?;
        if let Some(mode) = tls.mode {
            options = options.ssl_mode(mode);
        }
        if let Some(ca) = &tls.ca_file {
            options = options.ssl_ca(ca);
        }
        if let Some((cert, key)) = &tls.client {
            options = options.ssl_client_cert(cert).ssl_client_key(key);
        }
        let pool = MySqlPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(acquire_timeout)
            .connect_with(options)
            .await?;
        Ok(MysqlStore { pool, shard })
    }

    pub fn from_pool(pool: MySqlPool) -> MysqlStore {
        MysqlStore {
            pool,
            shard: Shard::ALL,
        }
    }

    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The showtimes this store's sweeps read.
    pub fn shard(&self) -> Shard {
        self.shard
    }

    /// The same pool, reading another shard (a replica taking over a pass).
    pub fn with_shard(&self, shard: Shard) -> MysqlStore {
        MysqlStore {
            pool: self.pool.clone(),
            shard,
        }
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// The reconciler's own tables; with `reference`, seatflow's too.
    pub async fn migrate(&self, reference: bool) -> Result<()> {
        if reference {
            sqlx::raw_sql(include_str!(
                "../../migrations/reference/seatflow_schema.sql"
            ))
            .execute(&self.pool)
            .await?;
        }
        let mut migrator = sqlx::migrate!("migrations/reconciler");
        migrator.set_ignore_missing(true);
        migrator.run(&self.pool).await?;
        Ok(())
    }

    /// The database's clock, in UTC: the one clock `expires_at` is compared to.
    pub async fn now_utc(&self) -> Result<NaiveDateTime> {
        Ok(sqlx::query_scalar("SELECT UTC_TIMESTAMP(3)")
            .fetch_one(&self.pool)
            .await?)
    }

    /// ON_SALE showtimes after `after` in (starts_at, id) order, soonest first.
    /// `only`, when not empty, restricts to those ids. A showtime whose
    /// status is not spelled `ON_SALE` exactly, or whose `starts_at` does not
    /// decode, is not on this page: [`MysqlStore::unknown_showtimes`] reports it.
    pub async fn on_sale_page(
        &self,
        after: Option<Keyset>,
        before: Option<NaiveDateTime>,
        limit: usize,
        only: &[ShowtimeId],
    ) -> Result<Vec<ShowtimeRow>> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT id, hall_id, starts_at FROM showtime WHERE status = 'ON_SALE' AND BINARY status = 'ON_SALE' AND ",
        );
        q.push(date_ok("starts_at"));
        push_shard(&mut q, "id", self.shard);
        push_after(&mut q, "starts_at", "id", after);
        if let Some(before) = before {
            q.push(" AND starts_at < ").push_bind(before);
        }
        push_in(&mut q, "id", only);
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

    /// Showtimes of this shard (within `only`) that the contract does not
    /// explain, at most `limit`: a status not spelled as one of its four
    /// (`on_sale`, `ONSALE`), or an ON_SALE one whose `starts_at` does not
    /// decode. Index ranges only: the ON_SALE range the sweep reads anyway,
    /// and the statuses outside the four under the collation. (A status the
    /// collation takes for SCHEDULED, CLOSED or CANCELLED is ON_SALE in no
    /// reading, so nothing would be repaired for it either way.)
    pub async fn unknown_showtimes(
        &self,
        only: &[ShowtimeId],
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
            push_shard(&mut q, "id", self.shard);
            push_in(&mut q, "id", only);
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

    /// How many ON_SALE showtimes there are (within `only`, when given).
    pub async fn count_on_sale(&self, only: &[ShowtimeId]) -> Result<u64> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT COUNT(*) FROM showtime WHERE status = 'ON_SALE' AND BINARY status = 'ON_SALE' AND ",
        );
        q.push(date_ok("starts_at"));
        push_shard(&mut q, "id", self.shard);
        push_in(&mut q, "id", only);
        let n: i64 = q.build_query_scalar().fetch_one(&self.pool).await?;
        Ok(n as u64)
    }

    /// How many ON_SALE showtimes lie after `after` (the unscanned backlog).
    pub async fn count_on_sale_after(&self, after: Keyset, only: &[ShowtimeId]) -> Result<u64> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT COUNT(*) FROM showtime WHERE status = 'ON_SALE' AND BINARY status = 'ON_SALE' AND ",
        );
        q.push(date_ok("starts_at"));
        push_shard(&mut q, "id", self.shard);
        push_after(&mut q, "starts_at", "id", Some(after));
        push_in(&mut q, "id", only);
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
        q.push(", ")
            .push(order_dates_ok("o"))
            .push(
                " AS dates_ok FROM order_seat os LEFT JOIN ticket_order o ON o.id = os.order_id \
                 WHERE NOT (os.active IS NULL AND (o.id IS NULL OR (BINARY o.status IN ('CANCELLED', 'REFUNDED') AND ",
            )
            .push(order_dates_ok("o"))
            .push(")))");
        push_in(&mut q, "os.showtime_id", showtimes);
        let mut rows = q.build().fetch(&self.pool);
        while let Some(r) = rows.try_next().await? {
            let facts = seat_row_facts(&r)?;
            let reading = contract::read_seat_row(&facts);
            if let SeatRow::Unknown(why) = &reading {
                unknown.push(UnknownRow::new(
                    "order_seat",
                    contract::seat_row_id(facts.order_id, &facts.seat_no),
                    why.clone(),
                ));
            }
            if let Some(holding) = reading.holding(facts.order_id) {
                out.push_row(facts.showtime_id, &facts.seat_no, holding, facts.order_id);
            }
        }
        Ok(OccupancyRead {
            occupancy: out.finish(),
            unknown,
        })
    }

    /// Which of `candidates` each row's seat number names under MySQL's own
    /// comparison of `order_seat.seat_no` (the column's collation, as
    /// `uq_occupancy` compares): `a-01` and `A-01 ` name `A-01`. One row per
    /// ask, found by its key (`order_id`, `seat_no`); `FIELD` compares the
    /// column with the candidates in the column's collation.
    pub async fn seats_named(&self, asks: &[SeatNameAsk<'_>]) -> Result<Vec<Option<SeatNo>>> {
        let mut out = vec![None; asks.len()];
        let mut from = 0;
        while from < asks.len() {
            // Stay well inside the 65,535 placeholders of one statement.
            let mut to = from;
            let mut binds = 0;
            while to < asks.len() && (to == from || binds + asks[to].candidates.len() + 3 < 30_000)
            {
                binds += asks[to].candidates.len() + 3;
                to += 1;
            }
            let mut q = QueryBuilder::<MySql>::new("");
            for (i, ask) in asks[from..to].iter().enumerate() {
                if i > 0 {
                    q.push(" UNION ALL ");
                }
                q.push("SELECT ")
                    .push_bind((from + i) as i64)
                    .push(" AS i, FIELD(os.seat_no");
                for c in ask.candidates {
                    q.push(", ").push_bind(c.as_str());
                }
                q.push(") AS pos FROM order_seat os WHERE os.order_id = ")
                    .push_bind(ask.order_id)
                    .push(" AND os.seat_no = ")
                    .push_bind(ask.seat_no);
            }
            for r in q.build().fetch_all(&self.pool).await? {
                let i: i64 = r.try_get("i")?;
                let pos: i64 = r.try_get("pos")?;
                let ask = &asks[i as usize];
                if pos > 0 {
                    out[i as usize] = ask.candidates.get(pos as usize - 1).cloned();
                }
            }
            from = to;
        }
        Ok(out)
    }

    /// Exactly these seats, read now and asked in MySQL's own terms (the
    /// re-check right before a write, rules 4 and 15): every row whose seat
    /// number the column's collation takes for the seat, in the seat's
    /// showtime, and, where `lowering`, the rows of the showtime's orders
    /// that sit in another showtime. Returns one entry per seat, in order,
    /// and the rows outside the contract among them.
    pub async fn seat_history(
        &self,
        seats: &[(ShowtimeId, SeatNo, bool)],
    ) -> Result<(Vec<SeatHistory>, Vec<UnknownRow>)> {
        let mut out = vec![SeatHistory::default(); seats.len()];
        let mut unknown = Vec::new();
        // (showtime → its asked seats' indexes), per statement of at most
        // `PER_STATEMENT` seats.
        const PER_STATEMENT: usize = 2_000;
        for part in (0..seats.len()).collect::<Vec<_>>().chunks(PER_STATEMENT) {
            let mut by_showtime: Vec<(ShowtimeId, Vec<usize>)> = Vec::new();
            for &i in part {
                match by_showtime.iter_mut().find(|(s, _)| *s == seats[i].0) {
                    Some((_, v)) => v.push(i),
                    None => by_showtime.push((seats[i].0, vec![i])),
                }
            }
            for other_showtimes in [false, true] {
                let asked: Vec<&(ShowtimeId, Vec<usize>)> = by_showtime
                    .iter()
                    .filter(|(_, v)| !other_showtimes || v.iter().any(|&i| seats[i].2))
                    .collect();
                if asked.is_empty() {
                    continue;
                }
                let owner = if other_showtimes {
                    "o.showtime_id"
                } else {
                    "os.showtime_id"
                };
                let mut q = QueryBuilder::<MySql>::new(SEAT_ROW_COLUMNS);
                q.push(", ")
                    .push(order_dates_ok("o"))
                    .push(" AS dates_ok, CASE WHEN ")
                    .push(order_dates_ok("o"))
                    .push(
                        " THEN GREATEST(o.created_at, COALESCE(o.paid_at, o.created_at), \
                         COALESCE(o.cancelled_at, o.created_at)) END AS touched, ",
                    )
                    .push(owner)
                    .push(" AS asked_showtime, ");
                push_position(&mut q, owner, &asked, seats);
                if other_showtimes {
                    q.push(
                        " AS pos FROM ticket_order o JOIN order_seat os ON os.order_id = o.id \
                         WHERE os.showtime_id <> o.showtime_id",
                    );
                    push_in(
                        &mut q,
                        "o.showtime_id",
                        &asked.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
                    );
                    q.push(" AND ");
                    push_position(&mut q, owner, &asked, seats);
                    q.push(" > 0");
                } else {
                    q.push(
                        " AS pos FROM order_seat os LEFT JOIN ticket_order o ON o.id = os.order_id \
                         WHERE (os.showtime_id, os.seat_no) IN (",
                    );
                    let mut sep = q.separated(", ");
                    for (s, idx) in &asked {
                        for &i in idx {
                            sep.push("(")
                                .push_bind_unseparated(*s)
                                .push_unseparated(", ")
                                .push_bind_unseparated(seats[i].1.as_str())
                                .push_unseparated(")");
                        }
                    }
                    q.push(")");
                }
                for r in q.build().fetch_all(&self.pool).await? {
                    let asked_showtime: i64 = r.try_get("asked_showtime")?;
                    let pos: Option<i64> = r.try_get("pos")?;
                    let Some(i) = asked
                        .iter()
                        .find(|(s, _)| *s == asked_showtime)
                        .and_then(|(_, idx)| idx.get(pos.unwrap_or(0).max(1) as usize - 1))
                        .filter(|_| pos.unwrap_or(0) > 0)
                        .copied()
                    else {
                        continue;
                    };
                    let facts = seat_row_facts(&r)?;
                    let mut reading = contract::read_seat_row(&facts);
                    if matches!(reading, SeatRow::Occupies(_)) && facts.seat_no != seats[i].1 {
                        // A valid occupancy is spelled as the template spells
                        // the seat; MySQL's comparison only found this one.
                        reading = SeatRow::Unknown(format!(
                            "seat_no {:?} is the template's {:?} only under the collation",
                            facts.seat_no, seats[i].1
                        ));
                    }
                    let entry = &mut out[i];
                    if let SeatRow::Unknown(why) = &reading {
                        unknown.push(UnknownRow::new(
                            "order_seat",
                            contract::seat_row_id(facts.order_id, &facts.seat_no),
                            why.clone(),
                        ));
                    }
                    if let Some(holding) = reading.holding(facts.order_id) {
                        entry.truth.add(holding);
                    }
                    // An order's time that does not decode counts as "just
                    // now": the grace period can only start later (rule 4).
                    let ms = match r.try_get::<Option<NaiveDateTime>, _>("touched") {
                        Ok(Some(t)) => Some(t.and_utc().timestamp_millis()),
                        Ok(None) if facts.order.is_none() => None,
                        _ => Some(i64::MAX),
                    };
                    if let Some(ms) = ms {
                        entry.last_activity_ms =
                            Some(entry.last_activity_ms.map_or(ms, |m: i64| m.max(ms)));
                    }
                }
            }
        }
        Ok((out, unknown))
    }

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
        only: &[ShowtimeId],
    ) -> Result<Vec<ExpiredOrder>> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT id, showtime_id, expires_at, BINARY status = 'PENDING' AS exact \
             FROM ticket_order WHERE status = 'PENDING' AND ",
        );
        q.push(date_ok("expires_at")).push(" AND expires_at < ");
        q.push_bind(deadline);
        push_shard(&mut q, "showtime_id", self.shard);
        push_after(&mut q, "expires_at", "id", after);
        push_in(&mut q, "showtime_id", only);
        q.push(" ORDER BY expires_at, id LIMIT ")
            .push_bind(limit as u64);
        let rows = q.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
                Ok(ExpiredOrder {
                    id: r.try_get("id")?,
                    showtime_id: r.try_get("showtime_id")?,
                    expires_at: r.try_get("expires_at")?,
                    exact: r.try_get::<i64, _>("exact")? == 1,
                })
            })
            .collect()
    }

    /// Orders the collation takes for PENDING whose `expires_at` does not
    /// decode (a zero date under a permissive `sql_mode`), at most `limit`:
    /// never cancelled (nobody knows their deadline), reported.
    pub async fn unknown_expired(
        &self,
        only: &[ShowtimeId],
        limit: usize,
    ) -> Result<Vec<UnknownRow>> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT id, CAST(expires_at AS CHAR) AS raw FROM ticket_order \
             WHERE status = 'PENDING' AND NOT ",
        );
        q.push(date_ok("expires_at"));
        push_shard(&mut q, "showtime_id", self.shard);
        push_in(&mut q, "showtime_id", only);
        q.push(" ORDER BY id LIMIT ").push_bind(limit as u64);
        let rows = q.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
                let id: i64 = r.try_get("id")?;
                Ok(UnknownRow::new(
                    "ticket_order",
                    id.to_string(),
                    format!(
                        "expires_at {} does not decode; not cancelled",
                        r.try_get::<Option<String>, _>("raw")
                            .ok()
                            .flatten()
                            .unwrap_or_else(|| "NULL".into())
                    ),
                ))
            })
            .collect()
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
    /// returned as cancelled too. The caller holds the showtimes' leases, so
    /// those cancels are its own.
    pub async fn cancel_expired(
        &self,
        ids: &[i64],
        deadline: NaiveDateTime,
        since: NaiveDateTime,
        audit: &RunIdentity<'_>,
    ) -> Result<Vec<CancelledOrder>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut earlier = self.cancelled_by_us_since(ids, since).await?;
        let mut tx = self.pool.begin().await?;
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT id, showtime_id FROM ticket_order WHERE status = 'PENDING' AND BINARY status = 'PENDING' AND expires_at < ",
        );
        q.push_bind(deadline);
        push_in(&mut q, "id", ids);
        q.push(" ORDER BY id FOR UPDATE");
        let won: Vec<(i64, i64)> = q
            .build()
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("showtime_id")?)))
            .collect::<Result<_>>()?;
        if won.is_empty() {
            tx.rollback().await?;
            return Ok(earlier);
        }
        let won_ids: Vec<i64> = won.iter().map(|(id, _)| *id).collect();

        // The order's own rows, each in its own showtime (rule 15: the
        // release goes where the row is, not where the order says).
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT order_id, showtime_id, seat_no FROM order_seat WHERE active = 1",
        );
        push_in(&mut q, "order_id", &won_ids);
        q.push(" ORDER BY order_id, seat_no");
        let mut seats: HashMap<i64, Vec<(ShowtimeId, SeatNo)>> = HashMap::new();
        for r in q.build().fetch_all(&mut *tx).await? {
            seats
                .entry(r.try_get("order_id")?)
                .or_default()
                .push((r.try_get("showtime_id")?, lossy(&r, "seat_no")));
        }

        let mut q = QueryBuilder::<MySql>::new(
            "UPDATE ticket_order SET status = 'CANCELLED', cancelled_at = UTC_TIMESTAMP(3), cancel_reason = ",
        );
        q.push_bind(CANCEL_REASON)
            .push(" WHERE status = 'PENDING' AND BINARY status = 'PENDING' AND expires_at < ")
            .push_bind(deadline);
        push_in(&mut q, "id", &won_ids);
        let updated = q.build().execute(&mut *tx).await?.rows_affected();
        if updated != won_ids.len() as u64 {
            // Impossible while we hold the row locks; refuse rather than guess.
            tx.rollback().await?;
            return Err(crate::error::Error::Protocol(format!(
                "cancel updated {updated} of {} locked orders",
                won_ids.len()
            )));
        }
        let mut q =
            QueryBuilder::<MySql>::new("UPDATE order_seat SET active = NULL WHERE active = 1");
        push_in(&mut q, "order_id", &won_ids);
        q.build().execute(&mut *tx).await?;
        let mut q = QueryBuilder::<MySql>::new(
            "INSERT IGNORE INTO reconcile_fix (fix_id, run_id, job, kind, showtime_id, seat_no, \
             order_id, before_value, after_value, fixed_at, instance) ",
        );
        q.push_values(&won, |mut b, (id, showtime_id)| {
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
        Ok(earlier)
    }

    /// Orders among `ids` cancelled by the reconciler at or after `since`,
    /// with the seats they held.
    async fn cancelled_by_us_since(
        &self,
        ids: &[i64],
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
            let id: i64 = r.try_get("id")?;
            let seat = (r.try_get("seat_showtime")?, lossy(&r, "seat_no"));
            match out.last_mut() {
                Some(o) if o.id == id => o.seats.push(seat),
                _ => out.push(CancelledOrder {
                    id,
                    showtime_id: r.try_get("showtime_id")?,
                    seats: vec![seat],
                }),
            }
        }
        Ok(out)
    }

    /// One showtime, whatever its status (for `inspect`).
    pub async fn showtime(&self, id: ShowtimeId) -> Result<Option<ShowtimeInfo>> {
        let row = sqlx::query(
            "SELECT id, hall_id, starts_at, CAST(starts_at AS CHAR) AS starts_raw, \
             CAST(status AS BINARY) AS status FROM showtime WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(ShowtimeInfo {
                id: r.try_get("id")?,
                hall_id: r.try_get("hall_id")?,
                starts_at: r.try_get("starts_at").ok().flatten(),
                starts_at_raw: lossy(&r, "starts_raw"),
                status: lossy(&r, "status"),
            })
        })
        .transpose()
    }

    /// Every template seat of a hall with its position, enabled or not
    /// (`enabled` other than 0 or 1 reads as not enabled).
    pub async fn layout(&self, hall_id: i64) -> Result<Vec<LayoutSeat>> {
        let rows = sqlx::query(
            "SELECT seat_no, row_label, col_no, CAST(enabled AS SIGNED) AS enabled FROM hall_seat \
             WHERE hall_id = ? ORDER BY row_label, col_no, seat_no",
        )
        .bind(hall_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| LayoutSeat {
                seat_no: lossy(r, "seat_no"),
                row_label: r.try_get("row_label").ok().flatten(),
                col_no: r.try_get("col_no").ok().flatten(),
                enabled: contract::read_enabled(&column(r, "enabled")) == Ok(true),
            })
            .collect())
    }

    /// The rows of a showtime that may hold its seats, with their orders'
    /// details, read strictly: valid occupancies and rows outside the
    /// contract (ended rows are left out).
    pub async fn occupants(&self, showtime: ShowtimeId) -> Result<Vec<Occupant>> {
        let mut q = QueryBuilder::<MySql>::new(SEAT_ROW_COLUMNS);
        q.push(", ")
            .push(order_dates_ok("o"))
            .push(
                " AS dates_ok, o.order_no, o.expires_at FROM order_seat os \
                 LEFT JOIN ticket_order o ON o.id = os.order_id WHERE os.showtime_id = ",
            )
            .push_bind(showtime)
            .push(" ORDER BY os.seat_no, os.order_id");
        let rows = q.build().fetch_all(&self.pool).await?;
        let mut out = Vec::new();
        for r in &rows {
            let facts = seat_row_facts(r)?;
            let reading = contract::read_seat_row(&facts);
            if reading == SeatRow::Ended {
                continue;
            }
            out.push(Occupant {
                order_no: lossy(r, "order_no"),
                expires_at: r.try_get("expires_at").ok().flatten(),
                seat_no: facts.seat_no,
                order_id: facts.order_id,
                reading,
            });
        }
        Ok(out)
    }

    /// The latest audit rows of one seat, newest first.
    pub async fn recent_fixes(
        &self,
        showtime: ShowtimeId,
        seat: &str,
        limit: u32,
    ) -> Result<Vec<AuditEntry>> {
        let rows = sqlx::query(
            "SELECT run_id, job, kind, order_id, before_value, after_value, fixed_at, instance \
             FROM reconcile_fix WHERE showtime_id = ? AND seat_no = ? ORDER BY fixed_at DESC, id DESC LIMIT ?",
        )
        .bind(showtime)
        .bind(seat)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(AuditEntry {
                    run_id: r.try_get("run_id")?,
                    job: r.try_get("job")?,
                    kind: r.try_get("kind")?,
                    order_id: r.try_get("order_id")?,
                    before: r.try_get("before_value")?,
                    after: r.try_get("after_value")?,
                    fixed_at: r.try_get("fixed_at")?,
                    instance: r.try_get("instance")?,
                })
            })
            .collect()
    }

    pub async fn insert_run(
        &self,
        run_id: &str,
        instance: &str,
        kinds: &str,
        dry_run: bool,
    ) -> Result<()> {
        // The database's clock, like finished_at, so durations are consistent.
        sqlx::query(
            "INSERT IGNORE INTO reconcile_run (run_id, instance, kinds, dry_run, started_at) \
             VALUES (?, ?, ?, ?, UTC_TIMESTAMP(3))",
        )
        .bind(run_id)
        .bind(instance)
        .bind(kinds)
        .bind(dry_run)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Closes as `abandoned` the runs that will never finish: those this
    /// instance started before `process_started` (the database's clock when
    /// this process connected: an earlier process, killed mid-run), and
    /// anyone's that started over `stale_after` ago. Returns how many.
    pub async fn close_abandoned_runs(
        &self,
        instance: &str,
        process_started: NaiveDateTime,
        stale_after: Duration,
    ) -> Result<u64> {
        let closed = sqlx::query(
            "UPDATE reconcile_run SET outcome = 'abandoned', finished_at = UTC_TIMESTAMP(3) \
             WHERE outcome IS NULL AND ((instance = ? AND started_at < ?) \
             OR started_at < UTC_TIMESTAMP(3) - INTERVAL ? SECOND)",
        )
        .bind(instance)
        .bind(process_started)
        .bind(stale_after.as_secs())
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(closed)
    }

    /// Deletes `reconcile_fix` and finished `reconcile_run` rows older than
    /// `retention`, `batch` rows per statement (short transactions, short
    /// locks), at most `rounds` statements per table. Returns rows deleted.
    pub async fn prune_audit(&self, retention: Duration, batch: u64, rounds: u32) -> Result<u64> {
        let mut deleted = 0;
        for sql in [
            "DELETE FROM reconcile_fix WHERE fixed_at < UTC_TIMESTAMP(3) - INTERVAL ? SECOND \
             ORDER BY fixed_at LIMIT ?",
            "DELETE FROM reconcile_run WHERE started_at < UTC_TIMESTAMP(3) - INTERVAL ? SECOND \
             AND outcome IS NOT NULL ORDER BY started_at LIMIT ?",
        ] {
            for _ in 0..rounds {
                let n = sqlx::query(sql)
                    .bind(retention.as_secs())
                    .bind(batch)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                deleted += n;
                if n < batch {
                    break;
                }
            }
        }
        Ok(deleted)
    }

    pub async fn finish_run(
        &self,
        run_id: &str,
        outcome: &str,
        fixed: u64,
        report: &str,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE reconcile_run SET finished_at = UTC_TIMESTAMP(3), outcome = ?, fixed = ?, report = ? \
             WHERE run_id = ?",
        )
        .bind(outcome)
        .bind(fixed)
        .bind(report)
        .bind(run_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// One multi-row INSERT per call; retries are idempotent (`fix_id`).
    pub async fn insert_fixes(
        &self,
        run_id: &str,
        instance: &str,
        fixes: &[FixRecord],
    ) -> Result<()> {
        if fixes.is_empty() {
            return Ok(());
        }
        let mut q = QueryBuilder::<MySql>::new(
            "INSERT IGNORE INTO reconcile_fix (fix_id, run_id, job, kind, showtime_id, seat_no, order_id, \
             before_value, after_value, fixed_at, instance) ",
        );
        q.push_values(fixes, |mut b, f| {
            b.push_bind(&f.fix_id)
                .push_bind(run_id)
                .push_bind(f.job.label())
                .push_bind(f.action.label())
                .push_bind(f.showtime_id)
                .push_bind(f.seat_no.as_deref())
                .push_bind(f.order_id)
                .push_bind(f.before.as_deref())
                .push_bind(f.after.as_deref())
                .push_bind(f.at)
                .push_bind(instance);
        });
        q.build().execute(&self.pool).await?;
        Ok(())
    }
}

/// The columns `seat_row_facts` reads: an `order_seat` row `os` with its
/// order `o` (LEFT JOINed: NULLs when there is none). Statuses come as
/// bytes, compared exactly in `contract`; `active` as a number.
const SEAT_ROW_COLUMNS: &str = "SELECT os.showtime_id, os.order_id, os.seat_no, \
     CAST(os.active AS SIGNED) AS active, o.id AS o_id, CAST(o.status AS BINARY) AS o_status, \
     o.showtime_id AS o_showtime";

/// One `order_seat` row as read, every column decoded without panicking:
/// a column that does not decode is an `Err` the contract reads as unknown.
fn seat_row_facts(r: &MySqlRow) -> Result<SeatRowFacts> {
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
fn column<'r, T>(r: &'r MySqlRow, name: &str) -> Column<T>
where
    T: sqlx::Decode<'r, MySql> + sqlx::Type<MySql>,
{
    r.try_get(name).map_err(|e| match e {
        sqlx::Error::ColumnDecode { source, .. } => source.to_string(),
        other => other.to_string(),
    })
}

/// A text column as UTF-8 (bytes that are not become U+FFFD), "" when NULL.
fn lossy(r: &MySqlRow, name: &str) -> String {
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
fn date_ok(col: &str) -> String {
    format!(
        "COALESCE({col} >= '1000-01-01' AND DAYOFMONTH({col}) BETWEEN 1 AND DAYOFMONTH(LAST_DAY({col})), FALSE)"
    )
}

/// SQL, true when every date of order `o` decodes (the nullable ones when set).
fn order_dates_ok(o: &str) -> String {
    format!(
        "({} AND {} AND ({o}.paid_at IS NULL OR {}) AND ({o}.cancelled_at IS NULL OR {}))",
        date_ok(&format!("{o}.expires_at")),
        date_ok(&format!("{o}.created_at")),
        date_ok(&format!("{o}.paid_at")),
        date_ok(&format!("{o}.cancelled_at")),
    )
}

/// `CASE <owner> WHEN S THEN FIELD(os.seat_no, <S's asked seats>) … END`:
/// the 1-based place, among its showtime's asked seats, of the seat that
/// MySQL's comparison of `os.seat_no` takes for the row's (0: none).
fn push_position(
    q: &mut QueryBuilder<MySql>,
    owner: &str,
    asked: &[&(ShowtimeId, Vec<usize>)],
    seats: &[(ShowtimeId, SeatNo, bool)],
) {
    q.push(format_args!("CASE {owner}"));
    for (s, idx) in asked {
        q.push(" WHEN ")
            .push_bind(*s)
            .push(" THEN FIELD(os.seat_no");
        for &i in idx {
            q.push(", ").push_bind(seats[i].1.as_str());
        }
        q.push(")");
    }
    q.push(" ELSE 0 END");
}

/// One row whose seat number is not a template seat byte for byte, with
/// the enabled template seats of its showtime's hall.
#[derive(Debug, Clone, Copy)]
pub struct SeatNameAsk<'a> {
    pub order_id: i64,
    pub seat_no: &'a str,
    pub candidates: &'a [SeatNo],
}

/// ` AND (col_at > ? OR (col_at = ? AND col_id > ?))`
fn push_after(q: &mut QueryBuilder<MySql>, col_at: &str, col_id: &str, after: Option<Keyset>) {
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
fn push_shard(q: &mut QueryBuilder<MySql>, col: &str, shard: Shard) {
    if shard.total > 1 {
        let n = i64::from(shard.total);
        q.push(format_args!(" AND MOD(MOD({col}, {n}) + {n}, {n}) = "))
            .push_bind(shard.index);
    }
}

/// ` AND col IN (?, ?, …)` unless `values` is empty.
fn push_in(q: &mut QueryBuilder<MySql>, col: &str, values: &[i64]) {
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
