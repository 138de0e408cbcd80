//! Buffered audit rows (safety rule 10): written in batches; when a batch
//! cannot be written, each row is still logged as a structured event and
//! the failure is counted under `stage="audit"`.
//!
//! A full batch is written in the background while the sweep goes on (at
//! most one batch in flight per job); `flush` waits for it and writes the
//! rest, so a closed job's audit is complete or its failures are counted.
//!
//! Eventually complete: a batch MySQL does not take is kept in Redis
//! (`{prefix}reconcile:audit-backlog`), and the next run writes it before
//! anything else (`drain_backlog`). A backlog key of another type than a
//! list is moved aside (rule 13: renamed, never deleted) by the push or read
//! that meets it, and the rows still go on. Cancels need none of this: their
//! rows are committed with them.

use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::model::{FixAction, Kind, SeatNo, SeatState, ShowtimeId};
use crate::store::mysql::FixRecord;

use crate::run::context::Context;

/// The showtimes a run repaired, over all its jobs, for its summary: the
/// first SUMMARY_LINES showtimes in full (every job that touched it,
/// repairs, first seats), one INFO line each, and the rest as two counts in
/// one more line. A fixed size whatever the run repairs; the run's audit
/// logs share it, so a listed showtime names every job.
#[derive(Debug, Default)]
pub struct RepairedShowtimes(std::sync::Mutex<Ledger>);

#[derive(Debug, Default)]
struct Ledger {
    listed: std::collections::BTreeMap<ShowtimeId, ShowtimeRepairs>,
    more_showtimes: u64,
    more_repairs: u64,
    /// The last showtime counted in `more_showtimes`: a showtime's repairs
    /// arrive together (one script per showtime), so it is counted once.
    last_more: Option<ShowtimeId>,
}

#[derive(Debug, Default)]
struct ShowtimeRepairs {
    jobs: Vec<Kind>,
    repairs: u64,
    seats: Vec<String>,
}

impl RepairedShowtimes {
    /// Counts one repair of `showtime` by `job`; `what` names the seat (or
    /// order) repaired, asked for only while the showtime's line has room.
    fn add(&self, showtime: ShowtimeId, job: Kind, what: impl FnOnce() -> String) {
        let mut l = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !l.listed.contains_key(&showtime) && l.listed.len() >= SUMMARY_LINES {
            l.more_repairs += 1;
            if l.last_more != Some(showtime) {
                l.last_more = Some(showtime);
                l.more_showtimes += 1;
            }
            return;
        }
        let entry = l.listed.entry(showtime).or_default();
        if !entry.jobs.contains(&job) {
            entry.jobs.push(job);
        }
        entry.repairs += 1;
        if entry.seats.len() < SUMMARY_SEATS {
            let seat = what();
            if !entry.seats.contains(&seat) {
                entry.seats.push(seat);
            }
        }
    }

    pub fn log(&self) {
        let l = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for (showtime, r) in &l.listed {
            let jobs: Vec<&str> = r.jobs.iter().map(|k| k.label()).collect();
            tracing::info!(
                showtime_id = *showtime,
                jobs = jobs.join(",").as_str(),
                repairs = r.repairs,
                first_seats = r.seats.join(",").as_str(),
                "showtime repaired"
            );
        }
        if l.more_showtimes > 0 {
            tracing::info!(
                showtimes = l.more_showtimes,
                repairs = l.more_repairs,
                "more showtimes repaired (not listed one by one)"
            );
        }
    }
}

/// Rows per INSERT.
const BATCH: usize = 500;
/// Seats named in a showtime's summary line.
const SUMMARY_SEATS: usize = 5;
/// Showtimes listed one by one per run; the rest are counted in one more line.
const SUMMARY_LINES: usize = 50;

/// The run's `reconcile_run` row (rule 10: every audit row has its run):
/// recorded as the run starts, or, when MySQL refused it then, before the
/// run's first repair; a run that cannot record it makes no repair.
#[derive(Debug)]
pub struct RunRow {
    /// The jobs, as the row's `kinds`.
    kinds: String,
    dry_run: bool,
    recorded: tokio::sync::Mutex<bool>,
}

impl RunRow {
    pub fn new(kinds: String, dry_run: bool) -> RunRow {
        RunRow {
            kinds,
            dry_run,
            recorded: tokio::sync::Mutex::new(false),
        }
    }

    /// Records run `run_id` unless it is recorded already (transient errors
    /// retried). One caller at a time: the jobs of a run share the row.
    pub async fn record(&self, ctx: &Context, run_id: &str) -> Result<()> {
        let mut recorded = self.recorded.lock().await;
        if !*recorded {
            let instance = &ctx.settings.reconcile.instance;
            ctx.retry("record the run", || {
                ctx.mysql
                    .insert_run(run_id, instance, &self.kinds, self.dry_run)
            })
            .await?;
            *recorded = true;
        }
        Ok(())
    }

    /// Whether the row is in `reconcile_run`.
    pub async fn is_recorded(&self) -> bool {
        *self.recorded.lock().await
    }
}

pub struct AuditLog<'a> {
    ctx: &'a Context,
    run_id: &'a str,
    /// The run's row, shared by its jobs.
    run: &'a RunRow,
    job: Kind,
    pending: Vec<FixRecord>,
    in_flight: Option<JoinHandle<Result<()>>>,
    failed_batches: u64,
    /// The run's summary of repaired showtimes, shared by its jobs.
    repaired: &'a RepairedShowtimes,
}

impl<'a> AuditLog<'a> {
    pub fn new(
        ctx: &'a Context,
        run_id: &'a str,
        run: &'a RunRow,
        job: Kind,
        repaired: &'a RepairedShowtimes,
    ) -> AuditLog<'a> {
        AuditLog {
            ctx,
            run_id,
            run,
            job,
            pending: Vec::new(),
            in_flight: None,
            failed_batches: 0,
            repaired,
        }
    }

    pub fn failed_batches(&self) -> u64 {
        self.failed_batches
    }

    pub fn run_id(&self) -> &'a str {
        self.run_id
    }

    /// Called right before a repair: the run's row is in `reconcile_run`
    /// (recorded now if MySQL refused it when the run began), or the repair
    /// must not be made (rule 10: no audit row without its run).
    pub async fn ensure_run(&self) -> Result<()> {
        self.run
            .record(self.ctx, self.run_id)
            .await
            .map_err(|e| Error::RunNotRecorded(e.to_string()))
    }

    pub fn job(&self) -> Kind {
        self.job
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
        // Filling an absent field, even with "0", sets it; only a held or
        // sold seat made free is a release.
        let action = if after == SeatState::Free && before.is_some() {
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
            kind = fix.job.label(),
            repair = fix.action.label(),
            showtime_id = fix.showtime_id,
            seat_no = fix.seat_no.as_deref(),
            order_id = fix.order_id,
            before = fix.before.as_deref(),
            after = fix.after.as_deref(),
            "repair applied"
        );
        if let Some(showtime) = fix.showtime_id {
            self.repaired
                .add(showtime, self.job, || match (&fix.seat_no, fix.order_id) {
                    (Some(seat), _) => seat.to_string(),
                    (None, Some(order)) => format!("order {order}"),
                    (None, None) => "hash".to_string(),
                });
        }
        self.pending.push(fix);
        if self.pending.len() >= BATCH {
            let _ = self.wait_in_flight().await;
            let rows = std::mem::take(&mut self.pending);
            let batch = write_batch(self.ctx.clone(), self.run_id.to_string(), rows);
            // The writer's lines keep the run's and the job's span fields.
            self.in_flight = Some(tokio::spawn(tracing::Instrument::in_current_span(batch)));
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

/// Inserts one batch; when it cannot, keeps it in the Redis backlog for a
/// later run and logs every row as an event.
async fn write_batch(ctx: Context, run_id: String, rows: Vec<FixRecord>) -> Result<()> {
    let instance = &ctx.settings.reconcile.instance;
    let written = ctx
        .retry("audit insert", || {
            ctx.mysql.insert_fixes(&run_id, instance, &rows)
        })
        .await;
    if let Err(e) = &written {
        let entries: Vec<String> = rows
            .iter()
            .map(|f| BacklogEntry::new(&run_id, instance, f).encode())
            .collect();
        let kept = ctx
            .retry("keep audit rows in Redis", || {
                ctx.redis.push_audit_backlog(&entries)
            })
            .await;
        match &kept {
            Err(kept) => {
                tracing::error!(run_id, rows = rows.len(), error = %kept, "audit rows could not be kept in Redis either");
            }
            Ok(Some(aside)) => moved_aside(&ctx, aside),
            Ok(None) => {}
        }
        for fix in &rows {
            tracing::error!(
                run_id,
                kind = fix.job.label(),
                repair = fix.action.label(),
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

/// Rule 13: the backlog key was of another type than a list and was moved
/// aside (renamed, kept for an operator: it may hold rows someone needs);
/// our rows go to a fresh backlog.
fn moved_aside(ctx: &Context, aside: &str) {
    tracing::warn!(
        key = ctx.redis.keys.audit_backlog(),
        moved_to = aside,
        what = "audit backlog",
        action = "moved aside",
        "reconciler key of the wrong type (rule 13)"
    );
}

/// One audit row waiting in the Redis backlog, with the run it belongs to.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct BacklogEntry {
    run_id: String,
    instance: String,
    fix_id: String,
    job: String,
    kind: String,
    showtime_id: Option<ShowtimeId>,
    seat_no: Option<String>,
    order_id: Option<i64>,
    before: Option<String>,
    after: Option<String>,
    /// `fixed_at`, milliseconds since the epoch (UTC).
    at_ms: i64,
}

impl BacklogEntry {
    fn new(run_id: &str, instance: &str, f: &FixRecord) -> BacklogEntry {
        BacklogEntry {
            run_id: run_id.into(),
            instance: instance.into(),
            fix_id: f.fix_id.clone(),
            job: f.job.label().into(),
            kind: f.action.label().into(),
            showtime_id: f.showtime_id,
            seat_no: f.seat_no.clone(),
            order_id: f.order_id,
            before: f.before.clone(),
            after: f.after.clone(),
            at_ms: f.at.and_utc().timestamp_millis(),
        }
    }

    #[allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "plain data of ours serializes"
    )]
    fn encode(&self) -> String {
        serde_json::to_string(self).expect("plain data")
    }

    /// The entry back as a row; `None` when it is not one of ours.
    fn decode(raw: &str) -> Option<(String, String, FixRecord)> {
        let e: BacklogEntry = serde_json::from_str(raw).ok()?;
        let fix = FixRecord {
            fix_id: e.fix_id,
            job: e.job.parse().ok()?,
            action: FixAction::from_label(&e.kind)?,
            showtime_id: e.showtime_id,
            seat_no: e.seat_no,
            order_id: e.order_id,
            before: e.before,
            after: e.after,
            at: chrono::DateTime::from_timestamp_millis(e.at_ms)?.naive_utc(),
        };
        Some((e.run_id, e.instance, fix))
    }
}

/// Entries read from the backlog per round, and rounds per run at most.
const BACKLOG_BATCH: usize = 500;
const BACKLOG_ROUNDS: usize = 20;

/// What `drain_backlog` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    /// Rows written to `reconcile_fix`.
    pub written: u64,
    /// Entries that were not ours: dropped.
    pub dropped: u64,
    /// Backlog keys of another type moved aside (rule 13), each reported
    /// with a WARN naming both keys.
    pub moved_aside: u64,
}

/// Writes audit rows that earlier runs kept in Redis because MySQL did not
/// take them. Rows are read, written (idempotent by `fix_id`: two
/// reconcilers draining at once write a row once), and only then removed
/// from the backlog: a lost reply or a crash anywhere in between leaves
/// them for the next run, never loses one. A backlog key of another type is
/// moved aside, and the drain goes on.
pub async fn drain_backlog(ctx: &Context) -> Result<Drained> {
    let mut drained = Drained::default();
    for _ in 0..BACKLOG_ROUNDS {
        let (raw, aside) = ctx.redis.read_audit_backlog(BACKLOG_BATCH).await?;
        #[cfg(feature = "failpoints")]
        fail::fail_point!(crate::race_window::AUDIT_BACKLOG_READ_LOST, |_| {
            Err(Error::Redis(redis::RedisError::from(
                crate::race_window::connection_reset("the reply was lost"),
            )))
        });
        if let Some(aside) = &aside {
            moved_aside(ctx, aside);
            drained.moved_aside += 1;
        }
        if raw.is_empty() {
            break;
        }
        let mut by_run: std::collections::BTreeMap<(String, String), Vec<FixRecord>> =
            Default::default();
        for entry in &raw {
            match BacklogEntry::decode(entry) {
                Some((run_id, instance, fix)) => {
                    by_run.entry((run_id, instance)).or_default().push(fix);
                }
                None => {
                    drained.dropped += 1;
                    tracing::warn!(
                        key = ctx.redis.keys.audit_backlog(),
                        entry = %entry.chars().take(80).collect::<String>(),
                        "audit backlog entry is not ours; dropped"
                    );
                }
            }
        }
        for ((run_id, instance), rows) in &by_run {
            // On an error the round stays in the backlog, rows already
            // written included (written again harmlessly).
            ctx.mysql.insert_fixes(run_id, instance, rows).await?;
            drained.written += rows.len() as u64;
        }
        #[cfg(feature = "failpoints")]
        fail::fail_point!(crate::race_window::AUDIT_BACKLOG_ACK_LOST, |_| {
            Err(Error::Redis(redis::RedisError::from(
                crate::race_window::connection_reset("the request was lost"),
            )))
        });
        ctx.redis.ack_audit_backlog(&raw).await?;
        if raw.len() < BACKLOG_BATCH {
            break;
        }
    }
    Ok(drained)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_of_repaired_showtimes_has_a_fixed_size() {
        let r = RepairedShowtimes::default();
        // Each showtime repaired by two jobs, three seats each, as a sweep's
        // scripts return them: one showtime at a time.
        for showtime in 1..=SUMMARY_LINES as i64 + 1_000 {
            for job in [Kind::OrphanLocks, Kind::PaidSeats] {
                for seat in ["A-1", "A-2", "A-3"] {
                    r.add(showtime, job, || seat.to_string());
                }
            }
        }
        let l = r.0.lock().unwrap();
        assert_eq!(l.listed.len(), SUMMARY_LINES);
        let first = &l.listed[&1];
        assert_eq!(first.jobs, [Kind::OrphanLocks, Kind::PaidSeats]);
        assert_eq!(first.repairs, 6);
        assert_eq!(first.seats, ["A-1", "A-2", "A-3"]);
        assert_eq!(l.more_showtimes, 1_000);
        assert_eq!(l.more_repairs, 6_000);
    }
}
