//! `--reuse`: a seeded estate kept in its database between runs. Seeding
//! 100 k showtimes takes minutes, and a sweep changes only Redis and the
//! reconciler's own tables, so a kept estate is as good as a new one once its
//! seat hashes are written anew and those tables emptied. A table of the
//! benchmark's own says which estate the database holds.

use anyhow::Result;
use sqlx::Row;

use crate::bench::Bench;
use crate::estate::Estate;
use crate::seeding::SeedStats;

/// The benchmark's own table: one row naming the estate the database holds.
const KEPT_TABLE: &str = "seatflow_bench_estate";

/// Everything that shapes the seeded rows: two estates with the same
/// description are the same rows.
pub fn describe(estate: &Estate) -> String {
    format!(
        "showtimes={} seats={} occupancy={} halls={} seed={} drift={}",
        estate.showtimes, estate.seats, estate.occupancy, estate.halls, estate.seed, estate.drift
    )
}

impl Bench {
    /// The kept estate's seeding figures, when the database holds exactly
    /// `estate` (seeded to the end: the row is written last).
    pub async fn kept_estate(&self, estate: &Estate) -> Result<Option<SeedStats>> {
        let exists: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name = ?",
        )
        .bind(KEPT_TABLE)
        .fetch_one(&self.pool)
        .await?;
        if exists == 0 {
            return Ok(None);
        }
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT seeding FROM {KEPT_TABLE} WHERE estate = ?"
        )))
        .bind(describe(estate))
        .fetch_optional(&self.pool)
        .await?;
        Ok(match row {
            Some(r) => Some(serde_json::from_str(&r.try_get::<String, _>(0)?)?),
            None => None,
        })
    }

    /// Records that the database now holds `estate`, seeded as `seeding` says.
    pub async fn keep_estate(&self, estate: &Estate, seeding: &SeedStats) -> Result<()> {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE IF NOT EXISTS {KEPT_TABLE} (estate VARCHAR(255) PRIMARY KEY, seeding TEXT NOT NULL); \
             DELETE FROM {KEPT_TABLE}"
        )))
        .execute(&self.pool)
        .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {KEPT_TABLE} (estate, seeding) VALUES (?, ?)"
        )))
        .bind(describe(estate))
        .bind(serde_json::to_string(seeding)?)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Every table of the database dropped, then the schema created anew:
    /// a kept database that holds another estate (or half of one).
    pub async fn recreate(&self) -> Result<()> {
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()",
        )
        .fetch_all(&self.pool)
        .await?;
        for table in tables {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP TABLE IF EXISTS `{}`",
                table.replace('`', "``")
            )))
            .execute(&self.pool)
            .await?;
        }
        self.migrate().await
    }

    /// The reconciler's audit of earlier runs removed: every run starts
    /// from the same tables.
    pub async fn empty_reconciler_tables(&self) -> Result<()> {
        sqlx::raw_sql("TRUNCATE TABLE reconcile_fix; TRUNCATE TABLE reconcile_run")
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[test]
    fn an_estate_is_described_by_everything_that_shapes_its_rows() {
        let estate = |args: &[&str]| {
            let argv = ["seatflow-bench"].iter().chain(args);
            let args = crate::args::Cli::parse_from(argv).sweep;
            describe(&Estate::new(&args.estate, args.drift))
        };
        let base = estate(&["--showtimes=10"]);
        assert_eq!(
            base,
            "showtimes=10 seats=300 occupancy=0.3 halls=10 seed=7 drift=0.01"
        );
        for other in [
            estate(&["--showtimes=11"]),
            estate(&["--showtimes=10", "--seed=8"]),
            estate(&["--showtimes=10", "--drift=0.02"]),
            estate(&["--showtimes=10", "--occupancy=0.2"]),
        ] {
            assert_ne!(base, other);
        }
    }
}
