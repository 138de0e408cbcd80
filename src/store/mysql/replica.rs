//! A replica of the primary for a pass's bulk reads: its connections, and
//! what it reports of itself (`SHOW REPLICA STATUS`), read as plain values.
//! Whether a chunk may read it is decided above the store (`replica.rs`).

use super::*;
use sqlx::Row as _;
use sqlx::mysql::MySqlRow;

// The plain value the judgement reads (seatflow-core's `replica`).
pub use seatflow_core::replica_lag::ReplicaReport;

impl MysqlStore {
    /// The same store's pool for a replica of its database: the primary's
    /// verdict on the schema (rule 17) is the replica's too, since the
    /// replica applies the primary's DDL. Connections are made when first
    /// needed, so a replica that is down at start is a fallback, not a
    /// failed start.
    pub fn replica(
        &self,
        url: &str,
        tls: &MysqlTls,
        max_connections: u32,
        acquire_timeout: Duration,
    ) -> Result<MysqlStore> {
        let options = connect_options(url, tls)?;
        // The primary's session (it only reads: no lock wait to bound).
        let pool = session_pool(max_connections, acquire_timeout, None).connect_lazy_with(options);
        Ok(MysqlStore {
            pool,
            contract: self.contract.clone(),
        })
    }

    /// One connection made and closed outside the pool: its error says why
    /// the server cannot be reached (the pool, retrying, says only that it
    /// timed out).
    pub async fn connect_once(&self) -> Result<()> {
        let conn = self.pool.connect_options().connect().await?;
        let _ = conn.close().await;
        Ok(())
    }

    /// What this server reports of its replication. `SHOW REPLICA STATUS`
    /// (MariaDB 10.5+, MySQL 8.0.22+), else the older `SHOW SLAVE STATUS`
    /// (MySQL 8.4 has only the first). Sent as plain text: not every
    /// server prepares `SHOW` statements.
    pub async fn replica_report(&self) -> Result<ReplicaReport> {
        let rows = match sqlx::raw_sql("SHOW REPLICA STATUS")
            .fetch_all(&self.pool)
            .await
        {
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(SYNTAX_ERROR) => {
                sqlx::raw_sql("SHOW SLAVE STATUS")
                    .fetch_all(&self.pool)
                    .await?
            }
            other => other?,
        };
        Ok(match rows.first() {
            None => ReplicaReport::NotAReplica,
            Some(row) => ReplicaReport::Replicating {
                io_running: running(row, &["Replica_IO_Running", "Slave_IO_Running"]),
                sql_running: running(row, &["Replica_SQL_Running", "Slave_SQL_Running"]),
                lag_seconds: number(row, &["Seconds_Behind_Source", "Seconds_Behind_Master"]),
            },
        })
    }
}

/// SQLSTATE of a statement the server does not know.
const SYNTAX_ERROR: &str = "42000";

/// The first of `names` the row has, as text (the columns' names changed
/// with MySQL 8.0.22; MariaDB keeps the old ones).
fn text(row: &MySqlRow, names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| {
        row.try_get::<Option<String>, _>(*n)
            .ok()
            .flatten()
            .or_else(|| {
                row.try_get::<Option<Vec<u8>>, _>(*n)
                    .ok()
                    .flatten()
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
            })
    })
}

fn running(row: &MySqlRow, names: &[&str]) -> bool {
    text(row, names).is_some_and(|v| v.eq_ignore_ascii_case("yes"))
}

fn number(row: &MySqlRow, names: &[&str]) -> Option<u64> {
    names.iter().find_map(|n| {
        row.try_get::<Option<u64>, _>(*n)
            .ok()
            .flatten()
            .or_else(|| {
                row.try_get::<Option<i64>, _>(*n)
                    .ok()
                    .flatten()
                    .map(|v| v.max(0) as u64)
            })
            .or_else(|| text(row, &[n]).and_then(|t| t.trim().parse().ok()))
    })
}
