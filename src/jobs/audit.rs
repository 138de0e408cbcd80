//! Buffered audit rows (safety rule 10): written in batches; when a batch
//! cannot be written, each row is still logged as a structured event and
//! the failure is counted under `stage="audit"`.
//!
//! A full batch is written in the background while the sweep goes on (at
//! most one batch in flight per job); `flush` waits for it and writes the
//! rest, so a settled job's audit is complete or its failures are counted.

use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::model::{FixAction, Kind, SeatNo, SeatState, ShowtimeId};
use crate::store::mysql::FixRecord;

use crate::context::Context;

/// Rows per INSERT.
const BATCH: usize = 500;

pub struct AuditLog<'a> {
    ctx: &'a Context,
    run_id: &'a str,
    job: Kind,
    pending: Vec<FixRecord>,
    in_flight: Option<JoinHandle<Result<()>>>,
    failed_batches: u64,
}

impl<'a> AuditLog<'a> {
    pub fn new(ctx: &'a Context, run_id: &'a str, job: Kind) -> AuditLog<'a> {
        AuditLog {
            ctx,
            run_id,
            job,
            pending: Vec::new(),
            in_flight: None,
            failed_batches: 0,
        }
    }

    pub fn failed_batches(&self) -> u64 {
        self.failed_batches
    }

    /// Records an applied seat repair.
    pub async fn seat(
        &mut self,
        showtime: ShowtimeId,
        seat: &SeatNo,
        order_id: Option<i64>,
        before: Option<SeatState>,
        after: SeatState,
    ) {
        let action = if after == SeatState::Free {
            FixAction::SeatReleased
        } else {
            FixAction::SeatSet
        };
        self.push(FixRecord {
            fix_id: uuid::Uuid::new_v4().simple().to_string(),
            job: self.job,
            action,
            showtime_id: Some(showtime),
            seat_no: Some(seat.clone()),
            order_id,
            before: Some(
                before
                    .map(SeatState::as_redis)
                    .unwrap_or("absent")
                    .to_string(),
            ),
            after: Some(after.as_redis().to_string()),
            at: chrono::Utc::now().naive_utc(),
        })
        .await
    }

    pub async fn push(&mut self, fix: FixRecord) {
        tracing::debug!(
            run_id = self.run_id,
            job = fix.job.label(),
            kind = fix.action.label(),
            showtime_id = fix.showtime_id,
            seat_no = fix.seat_no.as_deref(),
            order_id = fix.order_id,
            before = fix.before.as_deref(),
            after = fix.after.as_deref(),
            "repair applied"
        );
        self.pending.push(fix);
        if self.pending.len() >= BATCH {
            let _ = self.wait_in_flight().await;
            let rows = std::mem::take(&mut self.pending);
            let batch = write_batch(self.ctx.clone(), self.run_id.to_string(), rows);
            self.in_flight = Some(tokio::spawn(batch));
        }
    }

    /// Waits for the batch in flight, if any, and writes what is buffered.
    pub async fn flush(&mut self) -> Result<()> {
        let earlier = self.wait_in_flight().await;
        let rows = std::mem::take(&mut self.pending);
        let now = if rows.is_empty() {
            Ok(())
        } else {
            let written = write_batch(self.ctx.clone(), self.run_id.to_string(), rows).await;
            if written.is_err() {
                self.failed_batches += 1;
            }
            written
        };
        earlier.and(now)
    }

    async fn wait_in_flight(&mut self) -> Result<()> {
        let Some(handle) = self.in_flight.take() else {
            return Ok(());
        };
        // The writer only fails to finish if it panicked or the runtime is
        // going down: its rows are then unaccounted for, a failed batch.
        let written = handle.await.unwrap_or_else(|e| {
            tracing::error!(run_id = self.run_id, error = %e, "audit writer stopped");
            Err(Error::Mysql(sqlx::Error::WorkerCrashed))
        });
        if written.is_err() {
            self.failed_batches += 1;
        }
        written
    }
}

/// Inserts one batch; when it cannot, logs every row it could not write.
async fn write_batch(ctx: Context, run_id: String, rows: Vec<FixRecord>) -> Result<()> {
    let instance = &ctx.settings.reconcile.instance;
    let written = ctx
        .retry("audit insert", || {
            ctx.mysql.insert_fixes(&run_id, instance, &rows)
        })
        .await;
    if let Err(e) = &written {
        for fix in &rows {
            tracing::error!(
                run_id,
                job = fix.job.label(),
                kind = fix.action.label(),
                showtime_id = fix.showtime_id,
                seat_no = fix.seat_no.as_deref(),
                order_id = fix.order_id,
                before = fix.before.as_deref(),
                after = fix.after.as_deref(),
                error = %e,
                "repair applied but its audit row could not be written"
            );
        }
    }
    written
}
