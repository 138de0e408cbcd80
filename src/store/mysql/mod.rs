//! MySQL: keyset-paginated reads, the conditional cancel of expired orders
//! (safety rule 3), migrations and the audit trail (safety rule 10).
//! Every query is bounded by a LIMIT or by an IN list of one chunk.
//! `binlog`: the row binlog, read as a replica, as the showtimes that
//! committed transactions touched.

use crate::error::Result;
use chrono::NaiveDateTime;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::{ConnectOptions as _, Connection as _};
use std::path::PathBuf;
use std::time::Duration;

mod audit;
pub mod binlog;
mod inspect;
mod migrations;
mod orders;
mod recheck;
mod sql;
mod sweep;

pub use audit::{AuditEntry, FixRecord, RunIdentity};
pub use inspect::{LayoutSeat, Occupant, ShowtimeInfo};
pub use orders::{CancelledOrder, ExpiredOrder};
pub use recheck::{SeatHistory, SeatNameAsk};
pub use sweep::{Keyset, OccupancyRead, ShowtimeRow};

/// The cancel reason the reconciler writes, so seatflow can tell its cancels apart.
pub const CANCEL_REASON: &str = "RECONCILE_EXPIRED";

#[derive(Clone)]
pub struct MysqlStore {
    pool: MySqlPool,
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
        // One connection first, outside the pool: the pool retries a
        // refused or failing connect until its acquire timeout and then says
        // only "pool timed out"; one attempt fails at once with the cause
        // ("connection refused", access denied, TLS).
        let first = tokio::time::timeout(acquire_timeout, options.connect())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)??;
        let _ = first.close().await;
        let pool = MySqlPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(acquire_timeout)
            .connect_with(options)
            .await?;
        Ok(MysqlStore { pool })
    }

    pub fn from_pool(pool: MySqlPool) -> MysqlStore {
        MysqlStore { pool }
    }

    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// The reconciler's own tables; with `reference`, seatflow's too.
    pub async fn migrate(&self, reference: bool) -> Result<()> {
        if reference {
            sqlx::raw_sql(include_str!(
                "../../../migrations/reference/seatflow_schema.sql"
            ))
            .execute(&self.pool)
            .await?;
        }
        migrations::reconciler().await?.run(&self.pool).await?;
        Ok(())
    }

    /// The database's clock, in UTC: the one clock `expires_at` is compared to.
    pub async fn now_utc(&self) -> Result<NaiveDateTime> {
        Ok(sqlx::query_scalar("SELECT UTC_TIMESTAMP(3)")
            .fetch_one(&self.pool)
            .await?)
    }
}
