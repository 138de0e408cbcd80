//! The services: Redis `INFO` (commandstats, CPU, memory), MariaDB's
//! `SHOW GLOBAL STATUS` and server process, and this process's CPU time
//! (the machine facts: machine.rs; a replica's counters: replica.rs).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use crate::bench::Bench;
use crate::counters::{ServerLoad, ServerSnapshot, sql_counters, sql_deltas};
use crate::launcher::timeval_s;
use crate::numbers::thousands;
use crate::process::process_cpu_s;

/// How long the idle probe watches the services for other clients' traffic.
const IDLE_PROBE: Duration = Duration::from_secs(1);

/// One command's `INFO commandstats` numbers.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct CmdStat {
    pub calls: u64,
    /// Redis CPU time spent in it, in microseconds.
    pub usec: u64,
}

/// Counters of both services at one instant.
pub struct Snapshot {
    pub redis: BTreeMap<String, CmdStat>,
    pub sql: BTreeMap<String, u64>,
    /// CPU seconds used so far by the Redis server, the MariaDB server (when
    /// it runs on this host and we may read its /proc entry) and this process.
    pub redis_cpu_s: f64,
    pub mariadb_cpu_s: Option<f64>,
    pub own_cpu_s: f64,
    /// `--replica-url`'s server, read once it caught up with the primary.
    pub replica: Option<ServerSnapshot>,
}

/// What the services did between two snapshots (other clients included).
#[derive(Debug, Default, Clone, Serialize)]
pub struct Load {
    /// Every Redis command, including those run inside Lua scripts, minus our INFO.
    pub redis_commands: u64,
    pub redis_by_command: BTreeMap<String, CmdStat>,
    /// `SHOW GLOBAL STATUS` deltas: server-wide (our own SHOW is taken out).
    pub sql: BTreeMap<String, u64>,
    /// CPU seconds the servers and this process spent meanwhile.
    pub redis_cpu_s: f64,
    pub mariadb_cpu_s: Option<f64>,
    pub bench_cpu_s: f64,
    /// `--replica-url`'s server: its counters and CPU over the same phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<ServerLoad>,
}

impl Load {
    pub fn sql_questions(&self) -> u64 {
        self.sql("Questions")
    }

    pub fn sql(&self, counter: &str) -> u64 {
        self.sql.get(counter).copied().unwrap_or(0)
    }

    /// `hgetall 10000, evalsha 300, …`, busiest first.
    pub fn redis_summary(&self) -> String {
        let mut cmds: Vec<(&String, &CmdStat)> = self.redis_by_command.iter().collect();
        cmds.sort_by(|a, b| b.1.calls.cmp(&a.1.calls).then(a.0.cmp(b.0)));
        cmds.iter()
            .map(|(name, s)| format!("{name} {}", thousands(s.calls)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Snapshot {
    pub fn load_until(&self, later: &Snapshot) -> Load {
        let mut by_command = BTreeMap::new();
        for (name, after) in &later.redis {
            let before = self.redis.get(name).copied().unwrap_or_default();
            let calls = after.calls.saturating_sub(before.calls);
            // Our own INFO between snapshots is not part of what was measured.
            if calls > 0 && name != "info" {
                let usec = after.usec.saturating_sub(before.usec);
                by_command.insert(name.clone(), CmdStat { calls, usec });
            }
        }
        // The later snapshot's own SHOW is counted in it, and with a replica
        // each snapshot asks the primary its GTID position (a SELECT) after
        // its SHOW: not measured work.
        let gtid_ask = u64::from(self.replica.is_some());
        let ours = |name: &str| match name {
            "Questions" => 1 + gtid_ask,
            "Com_select" => gtid_ask,
            _ => 0,
        };
        let sql = sql_deltas(&self.sql, &later.sql, ours);
        Load {
            redis_commands: by_command.values().map(|s| s.calls).sum(),
            redis_by_command: by_command,
            sql,
            redis_cpu_s: later.redis_cpu_s - self.redis_cpu_s,
            mariadb_cpu_s: later
                .mariadb_cpu_s
                .zip(self.mariadb_cpu_s)
                .map(|(a, b)| a - b),
            bench_cpu_s: later.own_cpu_s - self.own_cpu_s,
            replica: self
                .replica
                .as_ref()
                .zip(later.replica.as_ref())
                .map(|(a, b)| a.load_until(b)),
        }
    }
}

impl Bench {
    /// Other clients' traffic over an idle second: the noise in every delta.
    pub async fn idle_load(&self) -> Result<Load> {
        let before = self.snapshot().await?;
        tokio::time::sleep(IDLE_PROBE).await;
        Ok(before.load_until(&self.snapshot().await?))
    }

    pub async fn snapshot(&self) -> Result<Snapshot> {
        let mut conn = self.redis.clone();
        // "all" holds both sections we need, on every Redis version.
        let info: String = redis::cmd("INFO").arg("all").query_async(&mut conn).await?;
        let cpu = |field| info_field(&info, field).and_then(|v| v.parse::<f64>().ok());
        let sql = sql_counters(&self.pool).await?;
        let replica = match &self.replica {
            Some(replica) => Some(replica.snapshot(&self.pool).await?),
            None => None,
        };
        Ok(Snapshot {
            redis: parse_commandstats(&info),
            sql,
            redis_cpu_s: cpu("used_cpu_user").unwrap_or(0.0) + cpu("used_cpu_sys").unwrap_or(0.0),
            mariadb_cpu_s: self.mariadb_pid.and_then(process_cpu_s),
            own_cpu_s: own_cpu_s(),
            replica,
        })
    }

    pub async fn redis_used_memory_mb(&self) -> Result<f64> {
        let mut conn = self.redis.clone();
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await?;
        let bytes: f64 = info_field(&info, "used_memory").unwrap_or("0").parse()?;
        Ok(bytes / 1e6)
    }
}

/// `cmdstat_hgetall:calls=10,usec=52,…` lines → command → calls, usec.
fn parse_commandstats(info: &str) -> BTreeMap<String, CmdStat> {
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let mut stat = CmdStat::default();
            for (k, v) in rest.split(',').filter_map(|kv| kv.split_once('=')) {
                match k {
                    "calls" => stat.calls = v.parse().ok()?,
                    "usec" => stat.usec = v.parse().ok()?,
                    _ => {}
                }
            }
            Some((name.to_string(), stat))
        })
        .collect()
}

pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(field)?.strip_prefix(':'))
}

/// User + system CPU seconds of this process so far.
fn own_cpu_s() -> f64 {
    // SAFETY: `rusage` is plain old data; getrusage fills it in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is valid for the duration of the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    timeval_s(usage.ru_utime) + timeval_s(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_lines_become_calls_and_usec_per_command() {
        let info = "# Commandstats\r\n\
                    cmdstat_hgetall:calls=10,usec=52,usec_per_call=5.20,rejected_calls=0,failed_calls=0\r\n\
                    cmdstat_evalsha:calls=3,usec=900,usec_per_call=300.00\r\n\
                    used_cpu_sys:1.5\r\n\
                    cmdstat_broken:calls=x,usec=1\r\n";
        let stats = parse_commandstats(info);
        assert_eq!(stats.len(), 2, "{stats:?}");
        assert_eq!((stats["hgetall"].calls, stats["hgetall"].usec), (10, 52));
        assert_eq!((stats["evalsha"].calls, stats["evalsha"].usec), (3, 900));
    }

    #[test]
    fn info_field_reads_one_value() {
        let info =
            "# Server\r\nredis_version:7.0.15\r\nused_memory:1024\r\nused_memory_human:1K\r\n";
        assert_eq!(info_field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(info_field(info, "used_memory"), Some("1024"));
        assert_eq!(info_field(info, "maxmemory"), None);
    }

    #[test]
    fn a_load_leaves_out_our_own_info_and_show() {
        let stat = |calls, usec| CmdStat { calls, usec };
        let at = |hgetall, info, questions| Snapshot {
            redis: BTreeMap::from([
                ("hgetall".to_string(), stat(hgetall, hgetall * 5)),
                ("info".to_string(), stat(info, info)),
            ]),
            sql: BTreeMap::from([("Questions".to_string(), questions)]),
            redis_cpu_s: 1.0,
            mariadb_cpu_s: None,
            own_cpu_s: 0.5,
            replica: None,
        };
        let load = at(10, 4, 100).load_until(&at(25, 5, 103));
        assert_eq!(load.redis_commands, 15);
        assert_eq!(load.redis_summary(), "hgetall 15");
        assert_eq!(load.sql_questions(), 2);
        assert_eq!(load.mariadb_cpu_s, None);
    }
}
