//! One MariaDB server's `SHOW GLOBAL STATUS` counters and process CPU, and
//! what a server did between two readings (the primary's in services.rs,
//! the replica's beside it: replica.rs).

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;
use sqlx::Row;
use sqlx::mysql::MySqlPool;

/// Server counters sampled around each phase: statements, then why they cost.
const SQL_COUNTERS: [&str; 7] = [
    "Questions",
    "Com_select",
    "Com_insert",
    "Com_update",
    "Com_stmt_execute",
    "Rows_read",
    "Innodb_buffer_pool_reads",
];

/// The server's [`SQL_COUNTERS`] (`SHOW GLOBAL STATUS`, one statement).
pub async fn sql_counters(pool: &MySqlPool) -> Result<BTreeMap<String, u64>> {
    let names = SQL_COUNTERS.map(|n| format!("'{n}'")).join(", ");
    let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SHOW GLOBAL STATUS WHERE Variable_name IN ({names})"
    )))
    .fetch_all(pool)
    .await?;
    let mut sql = BTreeMap::new();
    for r in rows {
        let (name, value): (String, String) = (r.try_get(0)?, r.try_get(1)?);
        sql.insert(name, value.parse().unwrap_or(0));
    }
    Ok(sql)
}

/// A server's counters at one instant, and how many statements the wait
/// before them ran there (taken out of the next delta).
pub struct ServerSnapshot {
    pub sql: BTreeMap<String, u64>,
    pub cpu_s: Option<f64>,
    pub waits: u64,
}

/// What a replica did between two snapshots (other clients and its
/// replication threads included; our waits and SHOWs taken out).
#[derive(Debug, Default, Clone, Serialize)]
pub struct ServerLoad {
    pub sql: BTreeMap<String, u64>,
    pub cpu_s: Option<f64>,
}

impl ServerLoad {
    pub fn sql(&self, counter: &str) -> u64 {
        self.sql.get(counter).copied().unwrap_or(0)
    }
}

/// `SHOW GLOBAL STATUS` counters from `before` to `after`, less the
/// benchmark's own statements (`ours`, by counter).
pub fn sql_deltas(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    ours: impl Fn(&str) -> u64,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| {
            let delta = v.saturating_sub(before.get(k).copied().unwrap_or(0));
            (k.clone(), delta.saturating_sub(ours(k)))
        })
        .collect()
}

impl ServerSnapshot {
    pub fn load_until(&self, later: &ServerSnapshot) -> ServerLoad {
        let ours = |name: &str| match name {
            // The later snapshot's waits (SELECTs) and its SHOW (counted in itself).
            "Questions" => later.waits + 1,
            "Com_select" => later.waits,
            _ => 0,
        };
        let sql = sql_deltas(&self.sql, &later.sql, ours);
        ServerLoad {
            sql,
            cpu_s: later.cpu_s.zip(self.cpu_s).map(|(a, b)| a - b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_waits_and_shows_are_not_the_replicas_load() {
        let at = |questions, selects, rows, cpu, waits| ServerSnapshot {
            sql: BTreeMap::from([
                ("Questions".to_string(), questions),
                ("Com_select".to_string(), selects),
                ("Rows_read".to_string(), rows),
            ]),
            cpu_s: Some(cpu),
            waits,
        };
        let load = at(100, 40, 1000, 2.0, 1).load_until(&at(160, 90, 5000, 3.5, 3));
        assert_eq!(load.sql("Questions"), 60 - 3 - 1);
        assert_eq!(load.sql("Com_select"), 50 - 3);
        assert_eq!(load.sql("Rows_read"), 4000);
        assert_eq!(load.cpu_s, Some(1.5));
    }
}
