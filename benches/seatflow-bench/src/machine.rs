//! The machine facts recorded with every result: CPUs, memory, load, the
//! servers' versions and the settings that shape the figures.

use anyhow::Result;
use serde::Serialize;

use crate::bench::Bench;
use crate::services::info_field;

#[derive(Debug, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub load_average: String,
    pub redis_version: String,
    /// How Redis stores a seeded seat hash: a listpack (compact, scanned
    /// linearly) below `hash-max-listpack-entries` fields, else a hash table.
    pub redis_hash_encoding: String,
    pub mariadb_version: String,
    pub innodb_buffer_pool_mb: u64,
}

pub async fn machine(bench: &Bench) -> Result<Machine> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let mut conn = bench.redis.clone();
    let server: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await?;
    let mariadb_version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&bench.pool)
        .await?;
    let buffer_pool: u64 = sqlx::query_scalar("SELECT @@innodb_buffer_pool_size")
        .fetch_one(&bench.pool)
        .await?;
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(bench.keys.seat(1))
        .query_async(&mut conn)
        .await?;
    // CONFIG may be disabled (managed Redis): the encoding alone still tells.
    let limit: Option<(String, String)> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("hash-max-listpack-entries")
        .query_async(&mut conn)
        .await
        .ok();
    Ok(Machine {
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model,
        memory_gib: mem_kib / (1024.0 * 1024.0),
        load_average: load_average(),
        redis_version: info_field(&server, "redis_version").unwrap_or("?").into(),
        redis_hash_encoding: match limit {
            Some((name, value)) => format!("{encoding} ({name} {value})"),
            None => encoding,
        },
        mariadb_version,
        innodb_buffer_pool_mb: buffer_pool / (1024 * 1024),
    })
}

/// The 1, 5 and 15 minute load averages, e.g. `0.42 1.64 2.26`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}
