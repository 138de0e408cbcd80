//! Buffered audit rows (safety rule 10): written in batches; when a batch
//! cannot be written, each row is still logged as a structured event and
//! the failure is counted under `stage="audit"`.

use crate::error::Result;
use crate::model::{Kind, SeatNo, SeatState, ShowtimeId};
use crate::store::mysql::FixRecord;

use super::Context;

/// Rows per INSERT.
const BATCH: usize = 500;

pub struct AuditLog<'a> {
    ctx: &'a Context,
    run_id: &'a str,
    job: Kind,
    pending: Vec<FixRecord>,
    failed_batches: u64,
}

impl<'a> AuditLog<'a> {
    pub fn new(ctx: &'a Context, run_id: &'a str, job: Kind) -> AuditLog<'a> {
        AuditLog {
            ctx,
            run_id,
            job,
            pending: Vec::new(),
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
        let kind = if after == SeatState::Free {
            "seat_released"
        } else {
            "seat_set"
        };
        self.push(FixRecord {
            fix_id: uuid::Uuid::new_v4().simple().to_string(),
            job: self.job,
            kind,
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
            kind = fix.kind,
            showtime_id = fix.showtime_id,
            seat_no = fix.seat_no.as_deref(),
            order_id = fix.order_id,
            before = fix.before.as_deref(),
            after = fix.after.as_deref(),
            "repair applied"
        );
        self.pending.push(fix);
        if self.pending.len() >= BATCH {
            let _ = self.flush().await;
        }
    }

    /// Writes what is buffered.
    pub async fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.pending);
        let instance = &self.ctx.settings.reconcile.instance;
        let written = self
            .ctx
            .retry("audit insert", || {
                self.ctx.mysql.insert_fixes(self.run_id, instance, &rows)
            })
            .await;
        if let Err(e) = &written {
            self.failed_batches += 1;
            for fix in &rows {
                tracing::error!(
                    run_id = self.run_id,
                    job = fix.job.label(),
                    kind = fix.kind,
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
}
