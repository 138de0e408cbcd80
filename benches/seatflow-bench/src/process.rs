//! This machine's processes: a local server's pid, a process's CPU time.

use std::path::Path;

use sqlx::mysql::MySqlPool;

/// User + system CPU seconds of a process, from /proc/<pid>/stat.
pub fn process_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the line, in clock ticks.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / per_second)
}

/// The MariaDB server's pid, from its pid file, if that process is on this host.
pub async fn local_server_pid(pool: &MySqlPool) -> Option<u32> {
    let (pid_file, datadir): (String, String) = sqlx::query_as("SELECT @@pid_file, @@datadir")
        .fetch_one(pool)
        .await
        .ok()?;
    let path = Path::new(&datadir).join(pid_file); // an absolute pid_file wins
    let pid: u32 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    process_cpu_s(pid).map(|_| pid)
}
