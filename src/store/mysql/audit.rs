//! The audit trail (rule 10): runs, repairs, pruning, and a seat's last repairs.

use super::*;
use crate::error::Result;
use crate::model::{FixAction, Kind, SeatNo, ShowtimeId};
use chrono::NaiveDateTime;
use sqlx::{MySql, QueryBuilder, Row};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuditEntry {
    pub run_id: String,
    pub job: String,
    pub kind: String,
    pub order_id: Option<i64>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub fixed_at: NaiveDateTime,
    pub instance: String,
}

/// One audit row of `reconcile_fix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixRecord {
    /// Unique per repair, so a retried INSERT never writes a row twice.
    pub fix_id: String,
    pub job: Kind,
    pub action: FixAction,
    pub showtime_id: Option<ShowtimeId>,
    pub seat_no: Option<SeatNo>,
    pub order_id: Option<i64>,
    pub before: Option<String>,
    pub after: Option<String>,
    pub at: NaiveDateTime,
}

/// Which run, of which reconciler, an audit row belongs to.
#[derive(Debug, Clone, Copy)]
pub struct RunIdentity<'a> {
    pub run_id: &'a str,
    pub instance: &'a str,
}

/// The statements of the audit, as `grants_held.rs` prepares them too (rule 18).
pub(super) const RECENT_FIXES: &str = "SELECT run_id, job, kind, order_id, before_value, after_value, fixed_at, instance \
     FROM reconcile_fix WHERE showtime_id = ? AND seat_no = ? ORDER BY fixed_at DESC, id DESC LIMIT ?";
pub(super) const INSERT_RUN: &str = "INSERT INTO reconcile_run (run_id, instance, kinds, dry_run, started_at) \
     VALUES (?, ?, ?, ?, UTC_TIMESTAMP(3)) ON DUPLICATE KEY UPDATE run_id = run_id";
pub(super) const CLOSE_ABANDONED_RUNS: &str = "UPDATE reconcile_run SET outcome = 'abandoned', finished_at = UTC_TIMESTAMP(3) \
     WHERE outcome IS NULL AND ((instance = ? AND started_at < ?) \
     OR started_at < UTC_TIMESTAMP(3) - INTERVAL ? SECOND)";
pub(super) const PRUNE_FIXES: &str = "DELETE FROM reconcile_fix WHERE fixed_at < UTC_TIMESTAMP(3) - INTERVAL ? SECOND \
     ORDER BY fixed_at LIMIT ?";
pub(super) const PRUNE_RUNS: &str = "DELETE FROM reconcile_run WHERE started_at < UTC_TIMESTAMP(3) - INTERVAL ? SECOND \
     AND outcome IS NOT NULL ORDER BY started_at LIMIT ?";
pub(super) const FINISH_RUN: &str = "UPDATE reconcile_run SET finished_at = UTC_TIMESTAMP(3), outcome = ?, fixed = ?, report = ? \
     WHERE run_id = ?";
/// The audit rows' insert, before its `VALUES` (the cancel's too); its 11
/// columns.
pub(super) const INSERT_FIXES: &str = "INSERT INTO reconcile_fix (fix_id, run_id, job, kind, showtime_id, seat_no, order_id, \
     before_value, after_value, fixed_at, instance) ";
pub(super) const FIX_COLUMNS: usize = 11;
/// After the `VALUES`: a retried insert writes no row twice. Not INSERT
/// IGNORE: that would truncate a value too long for its column with a
/// warning, strict mode or not (rule 17).
pub(super) const FIX_ONCE: &str = " ON DUPLICATE KEY UPDATE fix_id = fix_id";

impl MysqlStore {
    /// The latest audit rows of one seat, newest first.
    pub async fn recent_fixes(
        &self,
        showtime: ShowtimeId,
        seat: &str,
        limit: u32,
    ) -> Result<Vec<AuditEntry>> {
        let rows = sqlx::query(RECENT_FIXES)
            .bind(showtime)
            .bind(seat)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(AuditEntry {
                    run_id: r.try_get("run_id")?,
                    job: r.try_get("job")?,
                    kind: r.try_get("kind")?,
                    order_id: r.try_get("order_id")?,
                    before: r.try_get("before_value")?,
                    after: r.try_get("after_value")?,
                    fixed_at: r.try_get("fixed_at")?,
                    instance: r.try_get("instance")?,
                })
            })
            .collect()
    }

    pub async fn insert_run(
        &self,
        run_id: &str,
        instance: &str,
        kinds: &str,
        dry_run: bool,
    ) -> Result<()> {
        // The database's clock, like finished_at, so durations are consistent.
        sqlx::query(INSERT_RUN)
            .bind(run_id)
            .bind(instance)
            .bind(kinds)
            .bind(dry_run)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Closes as `abandoned` the runs that will never finish: those this
    /// instance started before `process_started` (the database's clock when
    /// this process connected: an earlier process, killed mid-run), and
    /// anyone's that started over `stale_after` ago. Returns how many.
    pub async fn close_abandoned_runs(
        &self,
        instance: &str,
        process_started: NaiveDateTime,
        stale_after: Duration,
    ) -> Result<u64> {
        let closed = sqlx::query(CLOSE_ABANDONED_RUNS)
            .bind(instance)
            .bind(process_started)
            .bind(stale_after.as_secs())
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(closed)
    }

    /// Deletes `reconcile_fix` and finished `reconcile_run` rows older than
    /// `retention`, `batch` rows per statement (short transactions, short
    /// locks), at most `rounds` statements per table. Returns rows deleted.
    pub async fn prune_audit(&self, retention: Duration, batch: u64, rounds: u32) -> Result<u64> {
        let mut deleted = 0;
        for sql in [PRUNE_FIXES, PRUNE_RUNS] {
            for _ in 0..rounds {
                let n = sqlx::query(sql)
                    .bind(retention.as_secs())
                    .bind(batch)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                deleted += n;
                if n < batch {
                    break;
                }
            }
        }
        Ok(deleted)
    }

    pub async fn finish_run(
        &self,
        run_id: &str,
        outcome: &str,
        fixed: u64,
        report: &str,
    ) -> Result<()> {
        sqlx::query(FINISH_RUN)
            .bind(outcome)
            .bind(fixed)
            .bind(report)
            .bind(run_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// One multi-row INSERT per call; retries are idempotent (`fix_id`).
    pub async fn insert_fixes(
        &self,
        run_id: &str,
        instance: &str,
        fixes: &[FixRecord],
    ) -> Result<()> {
        let Some(fixes) = super::NonEmpty::of(fixes) else {
            return Ok(());
        };
        let mut q = QueryBuilder::<MySql>::new(INSERT_FIXES);
        super::sql::push_rows(&mut q, fixes, |mut b, f| {
            b.push_bind(&f.fix_id)
                .push_bind(run_id)
                .push_bind(f.job.label())
                .push_bind(f.action.label())
                .push_bind(f.showtime_id)
                .push_bind(f.seat_no.as_deref())
                .push_bind(f.order_id)
                .push_bind(f.before.as_deref())
                .push_bind(f.after.as_deref())
                .push_bind(f.at)
                .push_bind(instance);
        });
        q.push(FIX_ONCE);
        q.build().execute(&self.pool).await?;
        Ok(())
    }
}
