//! `--statement-log DIR`: every SQL statement of each measured phase in a
//! slow-query log of its own (`DIR/<showtimes>-run<N>-<phase>.log`), with
//! its wall time, rows examined and InnoDB pages read (MariaDB's
//! `log_slow_verbosity = innodb`), so that where a phase's time goes can be
//! told statement kind by statement kind (`benches/statement_kinds.py`).
//!
//! It sets the server's globals (`long_query_time` 0 and the log on for
//! every session opened after it, the log's file): for a private server
//! only. A session takes the log's on/off at connect, so the log stays on
//! and, between measured phases, goes to `DIR/between-phases.log`.

use std::path::{Path, PathBuf};

use anyhow::{Result, ensure};
use sqlx::mysql::MySqlPool;

/// Between phases, the statements go to this file of DIR.
const BETWEEN_PHASES: &str = "between-phases.log";

/// Makes every session opened from now on log all its statements with
/// their InnoDB figures, into DIR's file for the time between phases until
/// a phase names its own. Called before the benchmark's own connections
/// are opened.
pub async fn prepare(server: &MySqlPool, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    switch(server, dir, None).await?;
    sqlx::raw_sql(
        "SET GLOBAL long_query_time = 0; SET GLOBAL log_slow_verbosity = 'query_plan,innodb'; \
         SET GLOBAL slow_query_log = 1",
    )
    .execute(server)
    .await?;
    Ok(())
}

/// The server's logging as it was by default: off, slow meaning 10 s.
pub async fn finish(pool: &MySqlPool) -> Result<()> {
    sqlx::raw_sql("SET GLOBAL slow_query_log = 0; SET GLOBAL long_query_time = 10")
        .execute(pool)
        .await?;
    Ok(())
}

/// The file of one phase's statements.
pub fn file(dir: &Path, showtimes: usize, run: usize, phase: &str) -> PathBuf {
    let phase: String = phase
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    dir.join(format!("{showtimes}-run{run}-{phase}.log"))
}

/// Logs the statements from now on into `to` (None: DIR's file for the
/// time between phases).
pub async fn switch(pool: &MySqlPool, dir: &Path, to: Option<&Path>) -> Result<()> {
    let path = to.map_or_else(|| dir.join(BETWEEN_PHASES), Path::to_path_buf);
    let path = std::path::absolute(path)?.to_string_lossy().into_owned();
    ensure!(
        !path.contains('\''),
        "--statement-log: a path without quotes, please"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SET GLOBAL slow_query_log_file = '{path}'"
    )))
    .execute(pool)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_has_a_file_of_its_own() {
        let f = file(Path::new("/tmp/logs"), 100_000, 2, "sweep, drift");
        assert_eq!(f, Path::new("/tmp/logs/100000-run2-sweep--drift.log"));
    }
}
