//! MySQL: keyset-paginated reads, the conditional cancel of expired orders
//! (safety rule 3), migrations and the audit trail (safety rule 10).
//! Every query is bounded by a LIMIT or by an IN list of one chunk.
//! `binlog`: the row binlog, read as a replica, as the showtimes that
//! committed transactions touched. `replica`: a replica's pool for a pass's
//! bulk reads, and its own report of its lag.

use crate::error::Result;
use chrono::NaiveDateTime;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{ConnectOptions as _, Connection as _};
use std::path::PathBuf;
use std::time::Duration;

mod audit;
pub mod binlog;
mod cancel;
mod confirm;
mod grants_held;
// The grants' judgement is pure (seatflow-core).
pub use seatflow_core::grants;
mod migrations;
mod occupancy_read;
mod orders;
mod replica;
pub mod schema;
mod seat_map;
mod sql;
mod sweep;

pub use audit::{AuditEntry, FixRecord, RunIdentity};
pub use cancel::{CancelledOrder, Cancels};
pub use confirm::{SeatConfirmation, SeatNameAsk};
pub use orders::{ExpiredOrder, ExpiredPage};
pub use replica::ReplicaReport;
pub use seat_map::{LayoutSeat, Occupant, ShowtimeInfo};
pub use sql::NonEmpty;
pub use sweep::{Keyset, OccupancyRead, PageEnd, ShowtimeRow};

/// Every connection's `sql_mode`, whatever the server's (rule 17): strict,
/// so a value that does not fit its column is an error of that write and
/// never a silent truncation; and none of the modes that change how our
/// statements read (`ANSI_QUOTES`, `PAD_CHAR_TO_FULL_LENGTH`,
/// `NO_BACKSLASH_ESCAPES`, …). sqlx's own two are kept.
///
/// And the session's time zone pinned to UTC, whatever the server's or the
/// URL's (`?timezone=`): a `TIMESTAMP` column is then read as it is stored
/// (UTC), and compared with the UTC times the reconciler binds, as a
/// `DATETIME` is (`model::schema::types`).
pub const SESSION_SQL_MODE: &str = "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,PIPES_AS_CONCAT', time_zone = '+00:00'";

/// The widest `reconcile_fix.seat_no` `migrate` makes: its index
/// (`showtime_id, seat_no, fixed_at`) must stay within InnoDB's 3,072 bytes.
pub const AUDIT_SEAT_CHARS_MAX: u64 = 512;

/// The cancel reason the reconciler writes, so seatflow can tell its cancels apart.
pub const CANCEL_REASON: &str = "RECONCILE_EXPIRED";

#[derive(Clone)]
pub struct MysqlStore {
    pool: MySqlPool,
    /// The last verdict on the schema (rule 17), shared by every clone.
    contract: schema::ContractCell,
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

/// `url` speaking TLS as `tls` says.
fn connect_options(url: &str, tls: &MysqlTls) -> Result<MySqlConnectOptions> {
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
    Ok(options)
}

/// A pool of at most `max_connections`, each acquired within
/// `acquire_timeout`, each session with the strict `sql_mode` (rule 17)
/// and, when given, waiting on a row lock at most `lock_wait`. The primary's
/// and the replica's sessions are made here alike: what a read decodes must
/// not depend on the server it ran on.
fn session_pool(
    max_connections: u32,
    acquire_timeout: Duration,
    lock_wait: Option<Duration>,
) -> MySqlPoolOptions {
    MySqlPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .after_connect(move |conn, _| {
            Box::pin(async move {
                sqlx::query(SESSION_SQL_MODE).execute(&mut *conn).await?;
                if let Some(lock_wait) = lock_wait {
                    // Whole seconds, at least 1 (the configuration checks it).
                    let seconds = lock_wait.as_secs().max(1);
                    sqlx::query("SET SESSION innodb_lock_wait_timeout = ?")
                        .bind(seconds)
                        .execute(&mut *conn)
                        .await?;
                }
                Ok(())
            })
        })
}

impl MysqlStore {
    /// A pool of at most `max_connections`, each acquired within
    /// `acquire_timeout`, speaking TLS as `tls` says, each session with its
    /// strict `sql_mode` and waiting on a row lock at most `lock_wait`.
    pub async fn connect(
        url: &str,
        tls: &MysqlTls,
        max_connections: u32,
        acquire_timeout: Duration,
        lock_wait: Duration,
    ) -> Result<MysqlStore> {
        let options = connect_options(url, tls)?;
        // One connection first, outside the pool: the pool retries a
        // refused or failing connect until its acquire timeout and then says
        // only "pool timed out"; one attempt fails at once with the cause
        // ("connection refused", access denied, TLS).
        let first = tokio::time::timeout(acquire_timeout, options.connect())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)??;
        let _ = first.close().await;
        let pool = session_pool(max_connections, acquire_timeout, Some(lock_wait))
            .connect_with(options)
            .await?;
        Ok(MysqlStore::from_pool(pool))
    }

    pub fn from_pool(pool: MySqlPool) -> MysqlStore {
        MysqlStore {
            pool,
            contract: schema::ContractCell::default(),
        }
    }

    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// The reconciler's own tables; with `reference`, seatflow's too. The
    /// audit's `seat_no` is widened to the contract's widest `seat_no`
    /// (up to [`AUDIT_SEAT_CHARS_MAX`]), so that no repair's audit row is
    /// too long for it (rule 17): returns the new width when it widened.
    pub async fn migrate(&self, reference: bool) -> Result<Option<u64>> {
        if reference {
            sqlx::raw_sql(include_str!(
                "../../../migrations/reference/seatflow_schema.sql"
            ))
            .execute(&self.pool)
            .await?;
        }
        migrations::reconciler().await?.run(&self.pool).await?;
        let facts = self.schema_facts().await?;
        let width = |table: &str| facts.column(table, "seat_no").and_then(|c| c.max_chars);
        let widest = ["hall_seat", "order_seat"]
            .into_iter()
            .filter_map(width)
            .max()
            .unwrap_or(0)
            .min(AUDIT_SEAT_CHARS_MAX);
        match width(crate::model::schema::AUDIT_TABLE) {
            Some(audit) if audit < widest => {
                let sql =
                    format!("ALTER TABLE reconcile_fix MODIFY seat_no VARCHAR({widest}) NULL");
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .execute(&self.pool)
                    .await?;
                Ok(Some(widest))
            }
            _ => Ok(None),
        }
    }

    /// The database's clock, in UTC: the one clock `expires_at` is compared to.
    pub async fn now_utc(&self) -> Result<NaiveDateTime> {
        Ok(sqlx::query_scalar("SELECT UTC_TIMESTAMP(3)")
            .fetch_one(&self.pool)
            .await?)
    }
}
