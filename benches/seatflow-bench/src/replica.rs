//! `--replica-url`: a MariaDB replica of the primary (`--mysql-url`) for the
//! reconciler's bulk reads (`mysql.replica_url`), measured beside it.
//!
//! Every snapshot first waits until the replica has applied everything the
//! primary has written so far (MariaDB GTIDs: the primary's
//! `@@gtid_binlog_pos`, awaited on the replica with `MASTER_GTID_WAIT`, which
//! compares it with its `@@gtid_slave_pos`), then reads the replica's
//! `SHOW GLOBAL STATUS` counters and its process's CPU. So a phase starts on
//! a current replica (the seeding's replication is not counted), and ends
//! once the replica has applied the phase's own writes (the audit rows of a
//! sweep are part of what the pass costs it). Our own statements on either
//! server are taken out of the deltas.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use serde::Serialize;
use sqlx::Row;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions, MySqlRow};

use seatflow_reconciler::config::redact_url;
use seatflow_reconciler::ops::demo::fixtures;

use crate::counters::{ServerSnapshot, sql_counters};
use crate::process::{local_server_pid, process_cpu_s};

/// One `MASTER_GTID_WAIT` waits at most this long; a wait that long is
/// reported, and the wait goes on up to [`CATCH_UP_LIMIT`].
const WAIT_STEP: Duration = Duration::from_secs(10);
const CATCH_UP_LIMIT: Duration = Duration::from_secs(3600);

/// Where a run's reconciler reads its bulk reads: the primary only (the
/// `--compare` runs without the replica) or the replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reads {
    Primary,
    Replica,
}

impl Reads {
    pub fn label(self) -> &'static str {
        match self {
            Reads::Primary => "without the replica",
            Reads::Replica => "bulk reads on the replica",
        }
    }
}

/// The runs to measure, in order: `repeat` runs without a replica (None);
/// with one, each on the replica; with `compare`, each repetition twice,
/// without then with the replica, the other way round every second
/// repetition (so neither always comes first on a warming machine).
pub fn schedule(repeat: usize, replica: bool, compare: bool) -> Vec<Option<Reads>> {
    (0..repeat)
        .flat_map(|rep| match (replica, compare) {
            (false, _) => vec![None],
            (true, false) => vec![Some(Reads::Replica)],
            (true, true) if rep % 2 == 0 => vec![Some(Reads::Primary), Some(Reads::Replica)],
            (true, true) => vec![Some(Reads::Replica), Some(Reads::Primary)],
        })
        .collect()
}

/// The reconciler's setting for the replica: `--replica-url` with the
/// benchmark's database, as `--mysql-url` gets it.
pub fn replica_env(replica_url: &str, database: &str) -> Result<(String, String)> {
    Ok((
        "SEATFLOW__MYSQL__REPLICA_URL".into(),
        fixtures::with_database(replica_url, database)?,
    ))
}

/// The replica server: one connection without a database, and its process
/// when it runs on this host.
#[derive(Clone)]
pub struct ReplicaServer {
    pub url: String,
    pool: MySqlPool,
    pid: Option<u32>,
}

impl ReplicaServer {
    /// Connects to `url` (a server, no database) and checks it replicates
    /// with GTIDs.
    pub async fn connect(url: &str) -> Result<ReplicaServer> {
        let pool = MySqlPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .with_context(|| format!("the replica at {}", redact_url(url)))?;
        let status = sqlx::raw_sql("SHOW SLAVE STATUS").fetch_all(&pool).await?;
        ensure!(
            !status.is_empty(),
            "{} is not a replica (SHOW SLAVE STATUS is empty)",
            redact_url(url)
        );
        let pid = local_server_pid(&pool).await;
        if pid.is_none() {
            eprintln!(
                "warning: the replica's process is not on this host: its CPU is not measured"
            );
        }
        Ok(ReplicaServer {
            url: url.to_string(),
            pool,
            pid,
        })
    }

    /// Waits until the replica has applied everything the primary wrote so
    /// far; returns how many statements that took on the replica.
    pub async fn catch_up(&self, primary: &MySqlPool) -> Result<u64> {
        let row = sqlx::raw_sql("SELECT @@gtid_binlog_pos")
            .fetch_one(primary)
            .await?;
        let position = text(&row)?;
        ensure!(
            position
                .chars()
                .all(|c| c.is_ascii_digit() || c == '-' || c == ','),
            "unexpected GTID position {position:?}"
        );
        let started = Instant::now();
        let mut waits = 0;
        loop {
            let sql = format!(
                "SELECT MASTER_GTID_WAIT('{position}', {})",
                WAIT_STEP.as_secs()
            );
            let row = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .fetch_one(&self.pool)
                .await?;
            waits += 1;
            if row.try_get::<i64, _>(0)? == 0 {
                return Ok(waits);
            }
            if started.elapsed() > CATCH_UP_LIMIT {
                bail!("the replica did not reach the primary's GTID {position} within an hour");
            }
            eprintln!(
                "waiting for the replica to reach the primary's GTID {position} ({:.0} s) …",
                started.elapsed().as_secs_f64()
            );
        }
    }

    /// Before measuring: the replica applies the seeding (timed, printed).
    pub async fn await_seeding(&self, primary: &MySqlPool) -> Result<()> {
        let started = Instant::now();
        self.catch_up(primary).await?;
        eprintln!(
            "the replica applied the seeding {:.1} s after it ended",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Catches up, then reads the counters and the CPU.
    pub async fn snapshot(&self, primary: &MySqlPool) -> Result<ServerSnapshot> {
        let waits = self.catch_up(primary).await?;
        Ok(ServerSnapshot {
            sql: sql_counters(&self.pool).await?,
            cpu_s: self.pid.and_then(process_cpu_s),
            waits,
        })
    }
}

/// A text column (`@@gtid_binlog_pos` comes as text or as bytes).
fn text(row: &MySqlRow) -> Result<String> {
    match row.try_get::<String, _>(0) {
        Ok(s) => Ok(s),
        Err(_) => Ok(String::from_utf8_lossy(&row.try_get::<Vec<u8>, _>(0)?).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reconciler_reads_the_replica_of_the_same_database() {
        let (key, value) =
            replica_env("mysql://root@127.0.0.1:3492", "seatflow_bench_replica").unwrap();
        assert_eq!(key, "SEATFLOW__MYSQL__REPLICA_URL");
        assert_eq!(value, "mysql://root@127.0.0.1:3492/seatflow_bench_replica");
        let (_, value) = replica_env("mysql://u:p@db:3306/", "b").unwrap();
        assert_eq!(value, "mysql://u:p@db:3306/b");
    }

    #[test]
    fn compare_alternates_which_goes_first() {
        use Reads::{Primary, Replica};
        assert_eq!(schedule(2, false, false), [None, None]);
        assert_eq!(schedule(2, true, false), [Some(Replica), Some(Replica)]);
        assert_eq!(
            schedule(3, true, true),
            [Primary, Replica, Replica, Primary, Primary, Replica].map(Some)
        );
    }
}
