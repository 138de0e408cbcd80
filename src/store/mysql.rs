//! MySQL: keyset-paginated reads, the conditional cancel of expired orders
//! (safety rule 3), migrations and the audit trail (safety rule 10).
//! Every query is bounded by a LIMIT or by an IN list of one chunk.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::NaiveDateTime;
use futures_util::TryStreamExt;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{MySql, QueryBuilder, Row};

use crate::error::Result;
use crate::model::{FixAction, Kind, OccupancyBuilder, OrderStatus, SeatNo, Shard, ShowtimeId};

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
    pub seats: Vec<SeatNo>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShowtimeInfo {
    pub id: ShowtimeId,
    pub hall_id: i64,
    pub starts_at: NaiveDateTime,
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutSeat {
    pub seat_no: SeatNo,
    pub row_label: Option<String>,
    pub col_no: Option<i32>,
    pub enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupant {
    pub seat_no: SeatNo,
    pub order_id: i64,
    pub order_no: String,
    pub status: OrderStatus,
    pub expires_at: NaiveDateTime,
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

/// A seat as the re-check sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeatHistory {
    /// The valid order occupying it, if any.
    pub occupant: Option<OrderStatus>,
    /// Latest created/paid/cancelled time of any order on the seat (UTC ms).
    pub last_activity_ms: Option<i64>,
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
    /// `only`, when not empty, restricts to those ids.
    pub async fn on_sale_page(
        &self,
        after: Option<Keyset>,
        before: Option<NaiveDateTime>,
        limit: usize,
        only: &[ShowtimeId],
    ) -> Result<Vec<ShowtimeRow>> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT id, hall_id, starts_at FROM showtime WHERE status = 'ON_SALE' AND BINARY status = 'ON_SALE'",
        );
        push_shard(&mut q, "id", self.shard);
        push_after(&mut q, "starts_at", "id", after);
        if let Some(before) = before {
            q.push(" AND starts_at < ").push_bind(before);
        }
        push_in(&mut q, "id", only);
        q.push(" ORDER BY starts_at, id LIMIT ")
            .push_bind(limit as u64);
        let rows = q.build().fetch_all(&self.pool).await?;
        Ok(rows
            .into_iter()
            .map(|r| ShowtimeRow {
                id: r.get("id"),
                hall_id: r.get("hall_id"),
                starts_at: r.get("starts_at"),
            })
            .collect())
    }

    /// How many ON_SALE showtimes there are (within `only`, when given).
    pub async fn count_on_sale(&self, only: &[ShowtimeId]) -> Result<u64> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT COUNT(*) FROM showtime WHERE status = 'ON_SALE' AND BINARY status = 'ON_SALE'",
        );
        push_shard(&mut q, "id", self.shard);
        push_in(&mut q, "id", only);
        let n: i64 = q.build_query_scalar().fetch_one(&self.pool).await?;
        Ok(n as u64)
    }

    /// How many ON_SALE showtimes lie after `after` (the unscanned backlog).
    pub async fn count_on_sale_after(&self, after: Keyset, only: &[ShowtimeId]) -> Result<u64> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT COUNT(*) FROM showtime WHERE status = 'ON_SALE' AND BINARY status = 'ON_SALE'",
        );
        push_shard(&mut q, "id", self.shard);
        push_after(&mut q, "starts_at", "id", Some(after));
        push_in(&mut q, "id", only);
        let n: i64 = q.build_query_scalar().fetch_one(&self.pool).await?;
        Ok(n as u64)
    }

    /// Enabled template seats of each hall, in seat-map order.
    pub async fn templates(&self, hall_ids: &[i64]) -> Result<HashMap<i64, Vec<SeatNo>>> {
        let mut out: HashMap<i64, Vec<SeatNo>> =
            hall_ids.iter().map(|&h| (h, Vec::new())).collect();
        if hall_ids.is_empty() {
            return Ok(out);
        }
        let mut q =
            QueryBuilder::<MySql>::new("SELECT hall_id, seat_no FROM hall_seat WHERE enabled = 1");
        push_in(&mut q, "hall_id", hall_ids);
        q.push(" ORDER BY hall_id, row_label, col_no, seat_no");
        let rows = q.build().fetch_all(&self.pool).await?;
        for r in rows {
            out.entry(r.get("hall_id"))
                .or_default()
                .push(r.get("seat_no"));
        }
        Ok(out)
    }

    /// Occupancy of whole showtimes: `active = 1` rows of every order but
    /// those spelled exactly `CANCELLED` or `REFUNDED`, so that a status
    /// outside the contract arrives as `OrderStatus::Unknown` instead of
    /// vanishing (statuses are compared in binary: the default collation
    /// would match `paid` to `PAID`). Rows are streamed and decoded by
    /// position into one buffer: this reads every held seat of every sweep.
    pub async fn occupancy(&self, showtimes: &[ShowtimeId]) -> Result<Occupancy> {
        let mut out = OccupancyBuilder::default();
        if showtimes.is_empty() {
            return Ok(out.finish());
        }
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT os.showtime_id, os.seat_no, o.status, o.id FROM order_seat os \
             JOIN ticket_order o ON o.id = os.order_id \
             WHERE os.active = 1 AND NOT (BINARY o.status IN ('CANCELLED', 'REFUNDED'))",
        );
        push_in(&mut q, "os.showtime_id", showtimes);
        let mut rows = q.build().fetch(&self.pool);
        while let Some(r) = rows.try_next().await? {
            let status: &str = r.try_get(2)?;
            if let Some(status) = OrderStatus::of_active_seat(status, r.try_get(3)?) {
                out.push(r.try_get(0)?, r.try_get(1)?, status);
            }
        }
        Ok(out.finish())
    }

    /// Exactly these seats, read now (the re-check right before a repair):
    /// who occupies each, and when any order on it last came or went.
    pub async fn seat_history(
        &self,
        seats: &[(ShowtimeId, SeatNo)],
    ) -> Result<HashMap<(ShowtimeId, SeatNo), SeatHistory>> {
        let mut out: HashMap<(ShowtimeId, SeatNo), SeatHistory> = HashMap::new();
        if seats.is_empty() {
            return Ok(out);
        }
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT os.showtime_id, os.seat_no, os.active, o.status, o.id AS order_id, \
             GREATEST(o.created_at, COALESCE(o.paid_at, o.created_at), COALESCE(o.cancelled_at, o.created_at)) AS touched \
             FROM order_seat os JOIN ticket_order o ON o.id = os.order_id \
             WHERE (os.showtime_id, os.seat_no) IN (",
        );
        let mut sep = q.separated(", ");
        for (s, seat) in seats {
            sep.push("(")
                .push_bind_unseparated(*s)
                .push_unseparated(", ")
                .push_bind_unseparated(seat.as_str())
                .push_unseparated(")");
        }
        q.push(")");
        for r in q.build().fetch_all(&self.pool).await? {
            let key = (r.get("showtime_id"), r.get("seat_no"));
            let entry = out.entry(key).or_default();
            let active: Option<bool> = r.get("active");
            let status: String = r.get("status");
            if active == Some(true)
                && let Some(st) = OrderStatus::of_active_seat(&status, r.get("order_id"))
            {
                entry.occupant = Some(st);
            }
            let touched: NaiveDateTime = r.get("touched");
            let ms = touched.and_utc().timestamp_millis();
            entry.last_activity_ms = Some(entry.last_activity_ms.map_or(ms, |m: i64| m.max(ms)));
        }
        Ok(out)
    }

    /// Orders whose status the collation takes for PENDING and whose
    /// `expires_at` is before `deadline`, after `after` in (expires_at, id)
    /// order; `exact` tells the real PENDING ones.
    pub async fn expired_page(
        &self,
        deadline: NaiveDateTime,
        after: Option<Keyset>,
        limit: usize,
        only: &[ShowtimeId],
    ) -> Result<Vec<ExpiredOrder>> {
        let mut q = QueryBuilder::<MySql>::new(
            "SELECT id, showtime_id, expires_at, BINARY status = 'PENDING' AS exact \
             FROM ticket_order WHERE status = 'PENDING' AND expires_at < ",
        );
        q.push_bind(deadline);
        push_shard(&mut q, "showtime_id", self.shard);
        push_after(&mut q, "expires_at", "id", after);
        push_in(&mut q, "showtime_id", only);
        q.push(" ORDER BY expires_at, id LIMIT ")
            .push_bind(limit as u64);
        let rows = q.build().fetch_all(&self.pool).await?;
        Ok(rows
            .into_iter()
            .map(|r| ExpiredOrder {
                id: r.get("id"),
                showtime_id: r.get("showtime_id"),
                expires_at: r.get("expires_at"),
                exact: r.get::<i64, _>("exact") == 1,
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
            .into_iter()
            .map(|r| (r.get("id"), r.get("showtime_id")))
            .collect();
        if won.is_empty() {
            tx.rollback().await?;
            return Ok(earlier);
        }
        let won_ids: Vec<i64> = won.iter().map(|(id, _)| *id).collect();

        let mut q =
            QueryBuilder::<MySql>::new("SELECT order_id, seat_no FROM order_seat WHERE active = 1");
        push_in(&mut q, "order_id", &won_ids);
        q.push(" ORDER BY order_id, seat_no");
        let mut seats: HashMap<i64, Vec<SeatNo>> = HashMap::new();
        for r in q.build().fetch_all(&mut *tx).await? {
            seats
                .entry(r.get("order_id"))
                .or_default()
                .push(r.get("seat_no"));
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
            "SELECT o.id, o.showtime_id, os.seat_no FROM ticket_order o \
             JOIN order_seat os ON os.order_id = o.id \
             WHERE o.status = 'CANCELLED' AND o.cancel_reason = ",
        );
        q.push_bind(CANCEL_REASON)
            .push(" AND o.cancelled_at >= ")
            .push_bind(since);
        push_in(&mut q, "o.id", ids);
        q.push(" ORDER BY o.id, os.seat_no");
        let mut out: Vec<CancelledOrder> = Vec::new();
        for r in q.build().fetch_all(&self.pool).await? {
            let id: i64 = r.get("id");
            if out.last().is_none_or(|o| o.id != id) {
                out.push(CancelledOrder {
                    id,
                    showtime_id: r.get("showtime_id"),
                    seats: Vec::new(),
                });
            }
            out.last_mut().expect("pushed").seats.push(r.get("seat_no"));
        }
        Ok(out)
    }

    /// One showtime, whatever its status (for `inspect`).
    pub async fn showtime(&self, id: ShowtimeId) -> Result<Option<ShowtimeInfo>> {
        let row = sqlx::query("SELECT id, hall_id, starts_at, status FROM showtime WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| ShowtimeInfo {
            id: r.get("id"),
            hall_id: r.get("hall_id"),
            starts_at: r.get("starts_at"),
            status: r.get("status"),
        }))
    }

    /// Every template seat of a hall with its position, enabled or not.
    pub async fn layout(&self, hall_id: i64) -> Result<Vec<LayoutSeat>> {
        let rows = sqlx::query(
            "SELECT seat_no, row_label, col_no, enabled FROM hall_seat WHERE hall_id = ? \
             ORDER BY row_label, col_no, seat_no",
        )
        .bind(hall_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| LayoutSeat {
                seat_no: r.get("seat_no"),
                row_label: r.get("row_label"),
                col_no: r.get("col_no"),
                enabled: r.get("enabled"),
            })
            .collect())
    }

    /// The valid orders occupying seats of a showtime, with their details.
    pub async fn occupants(&self, showtime: ShowtimeId) -> Result<Vec<Occupant>> {
        let rows = sqlx::query(
            "SELECT os.seat_no, o.id, o.order_no, o.status, o.expires_at FROM order_seat os \
             JOIN ticket_order o ON o.id = os.order_id \
             WHERE os.showtime_id = ? AND os.active = 1 \
             AND NOT (BINARY o.status IN ('CANCELLED', 'REFUNDED')) \
             ORDER BY os.seat_no",
        )
        .bind(showtime)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                let status: String = r.get("status");
                Some(Occupant {
                    seat_no: r.get("seat_no"),
                    order_id: r.get("id"),
                    order_no: r.get("order_no"),
                    status: OrderStatus::of_active_seat(&status, r.get("id"))?,
                    expires_at: r.get("expires_at"),
                })
            })
            .collect())
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
        Ok(rows
            .into_iter()
            .map(|r| AuditEntry {
                run_id: r.get("run_id"),
                job: r.get("job"),
                kind: r.get("kind"),
                order_id: r.get("order_id"),
                before: r.get("before_value"),
                after: r.get("after_value"),
                fixed_at: r.get("fixed_at"),
                instance: r.get("instance"),
            })
            .collect())
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
