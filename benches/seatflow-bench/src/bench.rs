//! The benchmark's connections to the services, one whole run (seed, then
//! measure `--repeat` times), the drift put back between repetitions, and
//! cleanup.

use std::ops::Range;
use std::time::Duration;

use anyhow::{Context as _, Result};
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};

use seatflow_reconciler::config::redact_url;
use seatflow_reconciler::ops::demo::fixtures;
use seatflow_reconciler::store::mysql::MysqlStore;
use seatflow_reconciler::store::redis::Keys;

use crate::args::EstateArgs;
use crate::process::local_server_pid;
use crate::replica::ReplicaServer;

/// Both services, the throwaway names and the estate's size: what every phase
/// needs. Cheap to clone (pool and connection are shared handles), so the
/// floor can read Redis and MySQL on two tasks at once.
#[derive(Clone)]
pub struct Bench {
    pub pool: MySqlPool,
    pub redis: MultiplexedConnection,
    pub keys: Keys,
    pub db_url: String,
    pub redis_url: String,
    pub database: String,
    pub showtimes: usize,
    pub scan_chunk: usize,
    /// The MariaDB server's process, when it runs on this host.
    pub mariadb_pid: Option<u32>,
    /// `--replica-url`'s server, measured beside the primary (replica.rs).
    pub replica: Option<ReplicaServer>,
}

impl Bench {
    /// Connects, and starts from a clean slate: a new database with the
    /// reference schema (with `keep_database`, the database as it is, for
    /// `--reuse`), and no key under the prefix.
    pub async fn connect(
        args: &EstateArgs,
        database: &str,
        redis_url: &str,
        scan_chunk: usize,
        keep_database: bool,
    ) -> Result<Bench> {
        let db_url = fixtures::with_database(&args.mysql_url, database)?;
        match keep_database {
            true => fixtures::create_database(&db_url, database).await,
            false => fixtures::recreate_database(&db_url, database).await,
        }
        .with_context(|| format!("MariaDB at {}", redact_url(&args.mysql_url)))?;
        let pool = MySqlPoolOptions::new()
            .max_connections(SEED_IN_FLIGHT as u32)
            .connect(&db_url)
            .await?;
        let client = redis::Client::open(redis_url)?;
        // Seeding pipelines carry megabytes: far beyond the default 500 ms timeout.
        let config =
            AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(300)));
        let redis = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .with_context(|| format!("Redis at {}", redact_url(redis_url)))?;
        let mariadb_pid = local_server_pid(&pool).await;
        let bench = Bench {
            mariadb_pid,
            pool,
            redis,
            keys: Keys::new(args.prefix.clone()),
            db_url,
            redis_url: redis_url.to_string(),
            database: database.to_string(),
            showtimes: args.showtimes,
            scan_chunk,
            replica: None,
        };
        bench.migrate().await?;
        bench.delete_keys().await?;
        Ok(bench)
    }

    /// seatflow's reference schema and the reconciler's tables.
    pub async fn migrate(&self) -> Result<()> {
        MysqlStore::from_pool(self.pool.clone())
            .migrate(true)
            .await?;
        Ok(())
    }
    pub async fn teardown(&self) -> Result<()> {
        self.delete_keys().await?;
        self.drop_database().await?;
        eprintln!(
            "removed database {} and keys {}*",
            self.database,
            self.keys.prefix()
        );
        Ok(())
    }
    pub async fn drop_database(&self) -> Result<()> {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS `{}`",
            self.database
        )))
        .execute(&self.pool)
        .await?;
        Ok(())
    }
    async fn delete_keys(&self) -> Result<()> {
        fixtures::delete_prefix(&self.redis, self.keys.prefix()).await
    }
}

/// Showtime ids 1..=n in ranges of `chunk`.
pub fn id_chunks(n: usize, chunk: usize) -> impl Iterator<Item = Range<i64>> {
    (1..=n as i64)
        .step_by(chunk)
        .map(move |first| first..(first + chunk as i64).min(n as i64 + 1))
}

/// Seeding statements and pipelines in flight at once (and MySQL connections).
pub const SEED_IN_FLIGHT: usize = 4;

#[cfg(test)]
mod tests {
    use super::id_chunks;

    #[test]
    fn id_chunks_cover_one_to_n_once() {
        let chunks: Vec<_> = id_chunks(5, 2).collect();
        assert_eq!(chunks, vec![1..3, 3..5, 5..6]);
        assert_eq!(id_chunks(4, 4).collect::<Vec<_>>(), vec![1..5]);
        assert_eq!(id_chunks(3, 200).collect::<Vec<_>>(), vec![1..4]);
    }
}
