//! The five jobs and the runner that reports their outcomes.

pub mod audit_log;
pub mod deviations;
pub mod expired_orders;
pub mod pass_run;
pub mod report;
pub mod request;
pub mod seat_sweep;
pub mod strict;

use std::sync::Arc;
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::error::Stage;
use crate::model::{Kind, ShowtimeId};
use crate::run::context::Context;
use pass_run::{Claim, PassOutcome};
use report::{JobReport, Outcome, RunReport};
pub use request::{Finding, Outbox, Rebuild, RunRequest, RunResult, Trigger};

/// What one run is asked to do.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub dry_run: bool,
    /// Restrict to these showtimes (no cursor is read or moved).
    pub showtimes: Vec<ShowtimeId>,
    /// Cancelled on shutdown: the job stops after the chunk in hand.
    pub stop: CancellationToken,
    /// Draw progress on stderr (set when stderr is a terminal).
    pub progress: bool,
    /// The seat job that counts and logs bad data. None: the first seat job
    /// of the run. The daemon names the first enabled seat job for every
    /// run it starts (its passes, which serve every enabled seat job, and a
    /// seat job started alone from the admin endpoint), so that bad data is
    /// always counted under the same job.
    pub bad_data_reporter: Option<Kind>,
    /// Paces the seat hash reads (the daemon's passes); None: full speed.
    pub pacer: Option<Arc<crate::pace::Pacer>>,
    /// A sweep stops scanning here at the latest (the next fire); the rest
    /// continues in the next pass from the cursors.
    pub deadline: Option<tokio::time::Instant>,
    /// The pass's pace aims to finish by then: its deadline, or for a pass
    /// outside the schedule (at start, after a gap), one interval of the
    /// cadence in force from its start. Without it such a pass read at the
    /// budget's pace alone (120 s for 10 k showtimes a minute apart).
    pub pace_by: Option<tokio::time::Instant>,
    /// Writes stop as soon as this no longer holds (the pass lease was lost).
    pub fence: Option<Arc<crate::run::pass_lease::PassFence>>,
    /// The daemon's own shard's pass lease, kept between passes: a pass of
    /// that shard runs under it (claimed through it when not held), and
    /// keeps it when it ends. None: `once`, another shard, a dry run.
    pub kept_pass: Option<Arc<crate::run::pass_lease::KeptPass>>,
    /// The problems this run has reported, so each is counted once per run
    /// by the first job that meets it (shared by the run's jobs).
    pub reported: strict::Reported,
    /// A change-driven check, and what asked for it (an event, a commit, a
    /// deadline, a grace end, a retry): a few showtimes, so none of a run's
    /// housekeeping (abandoned runs, audit pruning and backlog). Its label is
    /// kept in the run's report (`reconcile_run.report`, `check`), so the
    /// audit tells which source found each repair; none: a pass.
    pub check: Option<seatflow_core::changes::queue::Source>,
    /// Where the run tells the daemon's change queue what it found (grace
    /// ends, reads, repairs), as it goes; None outside the daemon.
    pub outbox: Option<Outbox>,
    /// The sweep's bulk reads may go to `mysql.replica_url`'s replica (a
    /// pass over the estate; never a check: see `replica.rs`).
    pub replica_reads: bool,
    /// A pass after Redis lost its data: `missing-hashes` may rebuild up to
    /// its `scan_limit` hashes in it, not only its `batch_size`. Every seat
    /// map went at once and customers see empty halls until theirs is back;
    /// `batch_size` bounds what one run changes of drift, and a restore in
    /// passes of 200 took 50 passes at 10 k showtimes. Still bounded per run.
    pub rebuild: bool,
}

impl RunOptions {
    /// The most items this run of `kind` repairs (rule 7): the job's
    /// `batch_size`, or, for `missing-hashes` in a pass that rebuilds after
    /// a data loss ([`RunOptions::rebuild`]), its `scan_limit` if larger.
    pub fn budget(&self, settings: &crate::config::Settings, kind: Kind) -> usize {
        let job = settings.job(kind);
        if self.rebuild && kind == Kind::MissingHashes {
            job.batch_size.max(job.scan_limit)
        } else {
            job.batch_size
        }
    }

    /// False once the pass lease this run holds may be someone else's.
    pub fn fenced_out(&self) -> bool {
        self.fence.as_ref().is_some_and(|f| !f.holds())
    }

    /// Tells the change queue, if any, what the run found.
    pub fn tell(&self, finding: impl FnOnce() -> Finding) {
        if let Some(outbox) = &self.outbox {
            outbox.send(finding());
        }
    }
}

/// Closes a job of a run: writes what is left of its audit and sets its outcome.
async fn close_job(
    mut report: JobReport,
    mut audit: audit_log::AuditLog<'_>,
    started: Instant,
    opts: &RunOptions,
) -> JobReport {
    // A failed flush already logged every row as an event; count it below.
    let _ = audit.flush().await;
    for _ in 0..audit.failed_batches() {
        report.error_at(Stage::Audit);
    }
    report.duration_ms = started.elapsed().as_millis() as u64;
    report.dry_run = opts.dry_run;
    report.finish();
    report
}

/// One line per run: its outcome and totals, and each job's counts of its
/// final report (logged once the run has closed every job, audit errors
/// included). A run that found, changed and met nothing is logged at INFO
/// once a minute at most (DEBUG otherwise), so an idle daemon writes about
/// one line a minute.
fn log_run(ctx: &Context, report: &RunReport) {
    let quiet = report.outcome() == Outcome::Success
        && report.jobs.iter().all(|j| {
            j.drift == 0 && j.fixed == 0 && j.deferred == 0 && j.errors == 0 && j.invalid_data == 0
        });
    let jobs: Vec<String> = report.jobs.iter().map(JobReport::counts).collect();
    let jobs = jobs.join("; ");
    let total = |f: fn(&JobReport) -> u64| report.jobs.iter().map(f).sum::<u64>();
    macro_rules! line {
        ($level:expr) => {
            tracing::event!(
                $level,
                outcome = report.outcome().label(),
                dry_run = report.dry_run,
                duration_ms = report.duration_ms,
                scanned = total(|j| j.scanned),
                drift = total(|j| j.drift),
                fixed = total(|j| j.fixed),
                errors = total(|j| j.errors),
                invalid_data = total(|j| j.invalid_data),
                jobs = jobs.as_str(),
                "run finished"
            )
        };
    }
    if !quiet {
        line!(tracing::Level::INFO);
    } else if ctx
        .repeats
        .sighting("quiet run", crate::repeats::QUIET_RUN_EVERY)
        .is_some()
    {
        line!(tracing::Level::INFO);
    } else {
        line!(tracing::Level::DEBUG);
    }
}

/// Runs that never finished the last time this instance ran (or anyone's,
/// over this long ago) are closed as `abandoned`.
const STALE_RUN: std::time::Duration = std::time::Duration::from_secs(3600);

/// Pruning statements per table per run at most: a large backlog of old
/// rows goes over several runs.
const PRUNE_ROUNDS: u32 = 20;

/// Before a run writes anything: runs that will never finish are closed,
/// audit rows past their retention are deleted, and audit rows earlier runs
/// could not write are written. Failures are logged and left for the next
/// run; they never stop this one. Returns the audit backlog keys of the
/// wrong type moved aside (rule 13), for the run to count.
async fn close_earlier_runs(ctx: &Context) -> u64 {
    let instance = &ctx.settings.reconcile.instance;
    match ctx
        .mysql
        .close_abandoned_runs(instance, ctx.connected_at, STALE_RUN)
        .await
    {
        Ok(0) => {}
        Ok(closed) => tracing::warn!(closed, "runs that never finished closed as abandoned"),
        Err(e) => {
            ctx.denials.note(&e);
            tracing::warn!(error = %e, "could not close abandoned runs")
        }
    }
    let a = &ctx.settings.audit;
    if !a.retention.is_zero() {
        match ctx
            .mysql
            .prune_audit(a.retention, a.prune_batch, PRUNE_ROUNDS)
            .await
        {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "audit rows past audit.retention deleted"),
            Err(e) => {
                ctx.denials.note(&e);
                tracing::warn!(error = %e, "could not prune the audit; next run tries again")
            }
        }
    }
    match audit_log::drain_backlog(ctx).await {
        Ok(d) => {
            if d.written > 0 || d.dropped > 0 {
                tracing::info!(
                    written = d.written,
                    dropped = d.dropped,
                    "audit rows kept in Redis by earlier runs written to reconcile_fix"
                );
            }
            d.moved_aside
        }
        Err(e) => {
            tracing::warn!(error = %e, "audit backlog stays in Redis for a later run");
            0
        }
    }
}

/// A new run's id: the `run_id` of its `reconcile_run` row, its audit rows
/// and every line it logs.
pub fn new_run_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The span every line of a run is logged in (they carry its `run_id`).
pub fn run_span(run_id: &str) -> tracing::Span {
    tracing::info_span!("run", run_id)
}

/// The one door of every run, whatever asked for it (a schedule's fire, a
/// gap, an admin run, a change-driven check, `once`, the demo's tour, a
/// library caller): makes the run `request` describes (built once, by
/// [`RunRequest::new`]) once the process's guard allows, one
/// `expired-orders` at a time, so a deadline's check waits for a scheduled
/// run (and a fire's run for a check) rather than reading and cancelling
/// the same orders beside it. When the request says so, the pass lease is
/// claimed first (`pass_run::claim`), the jobs run, and the pass is
/// recorded or released (`pass_run::finish`); without it the seat jobs
/// stand by and only `expired-orders` runs. The run is recorded in
/// `reconcile_run` unless dry; every line logged on the way, the pass
/// claim's included, carries its `run_id`. Nothing else runs a job
/// (`scripts/check_deps.py` checks it); the daemon's runner records what
/// came of each run (`Runner::enter`).
pub async fn run(ctx: &Context, request: RunRequest) -> RunResult {
    let _turn = if request.kinds.contains(&Kind::ExpiredOrders) {
        Some(ctx.expired_orders_turn.lock().await)
    } else {
        None
    };
    let run_id = new_run_id();
    let span = run_span(&run_id);
    let RunRequest {
        kinds,
        opts,
        pass_slot_ms,
        ..
    } = request;
    let run = async move {
        let Some(slot_ms) = pass_slot_ms else {
            return RunResult {
                report: run_as(ctx, &kinds, &opts, run_id, Vec::new()).await,
                pass: PassOutcome::NotNeeded,
            };
        };
        // The seat jobs run only under their shard's pass lease.
        match pass_run::claim(ctx, &kinds, &opts, slot_ms).await {
            Claim::Ours { held, opts } => {
                let report = run_as(ctx, &kinds, &opts, run_id, Vec::new()).await;
                let pass = pass_run::finish(ctx, held, &opts, &report, slot_ms).await;
                RunResult { report, pass }
            }
            Claim::NotOurs {
                failed,
                skipped,
                outcome,
            } => {
                let others = pass_run::others(&kinds);
                // Nothing ran and nothing failed: no run to record.
                let mut report = if others.is_empty() && failed.is_empty() {
                    RunReport::new(run_id, opts.dry_run, Vec::new(), 0)
                } else {
                    run_as(ctx, &others, &opts, run_id, failed).await
                };
                report.skipped = skipped;
                RunResult {
                    report,
                    pass: outcome,
                }
            }
        }
    };
    // Boxed: a run is a deep future; its callers' futures stay small.
    Box::pin(run.instrument(span)).await
}

/// Runs `kinds` as run `run_id` (the caller's span carries it):
/// `expired-orders` first, then the seat jobs, which share one sweep (each
/// hash read once; `duration_ms` is then that sweep's for each of them).
/// `failed`: jobs of the run that failed before they could start (a pass
/// that could not be claimed); they are recorded with the run, in its row's
/// kinds and outcome, after the jobs that ran.
async fn run_as(
    ctx: &Context,
    kinds: &[Kind],
    opts: &RunOptions,
    run_id: String,
    failed: Vec<JobReport>,
) -> RunReport {
    let run = OpenRun::open(ctx, kinds, &failed, opts, run_id).await;
    let mut jobs = Vec::with_capacity(kinds.len() + failed.len());
    // Rule 17: the schema as MySQL has it, judged before the jobs read.
    let deviations = match deviations::judged(ctx, opts.check.is_some()).await {
        Ok(state) => deviations::DeviationReport::all(&state),
        Err(e) => {
            tracing::error!(error = %e, "could not read the schema; no job ran");
            jobs.extend(kinds.iter().map(|kind| {
                let mut report = JobReport::new(*kind);
                report.fail(&e);
                report.finish();
                report
            }));
            return run.close(ctx, opts, jobs, failed, Vec::new()).await;
        }
    };
    let repaired = audit_log::RepairedShowtimes::default();
    let (expired, seats): (Vec<Kind>, Vec<Kind>) =
        kinds.iter().partition(|k| **k == Kind::ExpiredOrders);
    if !expired.is_empty() {
        // Every line of the job carries its `kind` (and the run's `run_id`).
        let span = tracing::info_span!("job", kind = Kind::ExpiredOrders.label());
        let started = Instant::now();
        let mut audit = run.audit(ctx, Kind::ExpiredOrders, &repaired);
        let report = expired_orders::run(ctx, opts, &mut audit)
            .instrument(span.clone())
            .await;
        let closed = close_job(report, audit, started, opts);
        jobs.push(closed.instrument(span).await);
    }
    if let Some(&first) = seats.first() {
        // The seat jobs share one sweep: its lines carry `kinds`, and a line
        // about one job's seat its own `kind`.
        let labels: Vec<&str> = seats.iter().map(|k| k.label()).collect();
        let span = tracing::info_span!("sweep", kinds = labels.join(","));
        let started = Instant::now();
        let audits = seats
            .iter()
            .map(|k| run.audit(ctx, *k, &repaired))
            .collect();
        let reporter = opts.bad_data_reporter.unwrap_or(first);
        let sweep = seat_sweep::run(ctx, &seats, opts, audits, reporter, true);
        for (report, audit) in sweep.instrument(span.clone()).await {
            let closed = close_job(report, audit, started, opts);
            jobs.push(closed.instrument(span.clone()).await);
        }
    }
    // One line per repaired showtime, naming every job that touched it.
    repaired.log();
    run.close(ctx, opts, jobs, failed, deviations).await
}

/// A run between its opening (its `reconcile_run` row, earlier runs
/// closed) and its close (the summary logged and written).
struct OpenRun {
    run_id: String,
    row: audit_log::RunRow,
    /// Our audit backlog keys of the wrong type moved aside (rule 13).
    moved_aside: u64,
    started: Instant,
    trips_before: u64,
}

impl OpenRun {
    /// Records the run's row (unless dry) and, for a pass or `once`,
    /// closes earlier runs (`close_earlier_runs`).
    async fn open(
        ctx: &Context,
        kinds: &[Kind],
        failed: &[JobReport],
        opts: &RunOptions,
        run_id: String,
    ) -> OpenRun {
        let started = Instant::now();
        let trips_before = ctx.redis.round_trips();
        let labels: Vec<&str> = kinds
            .iter()
            .chain(failed.iter().map(|j| &j.kind))
            .map(|k| k.label())
            .collect();
        let row = audit_log::RunRow::new(labels.join(","), opts.dry_run);
        if !opts.dry_run
            && let Err(e) = row.record(ctx, &run_id).await
        {
            tracing::warn!(run_id, error = %e, "could not record the run in reconcile_run; tried again before its first repair");
        }
        let moved_aside = if opts.dry_run || opts.check.is_some() {
            0
        } else {
            close_earlier_runs(ctx).await
        };
        OpenRun {
            run_id,
            row,
            moved_aside,
            started,
            trips_before,
        }
    }

    /// The audit log of this run's job `kind`.
    fn audit<'a>(
        &'a self,
        ctx: &'a Context,
        kind: Kind,
        repaired: &'a audit_log::RepairedShowtimes,
    ) -> audit_log::AuditLog<'a> {
        audit_log::AuditLog::new(ctx, &self.run_id, &self.row, kind, repaired)
    }

    /// Closes the run with its jobs' reports (`failed` last): logged, and
    /// its row finished with the summary.
    async fn close(
        self,
        ctx: &Context,
        opts: &RunOptions,
        mut jobs: Vec<JobReport>,
        failed: Vec<JobReport>,
        deviations: Vec<deviations::DeviationReport>,
    ) -> RunReport {
        jobs.extend(failed);
        // Our own key of the wrong type (rule 13): invalid data of the run,
        // counted once, on its first job.
        if let Some(first) = jobs.first_mut() {
            (0..self.moved_aside).for_each(|_| first.invalid());
        }
        // A run that never got its row (and so made no repair) says so.
        let recorded = self.row.is_recorded().await;
        if !opts.dry_run && !recorded {
            for report in &mut jobs {
                report.error_at(Stage::Audit);
                report.finish();
            }
        }
        let run_id = self.run_id;
        let mut report = RunReport::new(
            run_id.clone(),
            opts.dry_run,
            jobs,
            self.started.elapsed().as_millis() as u64,
        );
        report.redis_round_trips = ctx.redis.round_trips() - self.trips_before;
        report.check = opts.check.map(|s| s.label());
        report.contract_deviations = deviations;
        log_run(ctx, &report);
        if !opts.dry_run && recorded {
            let summary = serde_json::to_string(&report).unwrap_or_default();
            if let Err(e) = ctx
                .mysql
                .finish_run(
                    &run_id,
                    report.outcome().label(),
                    report.total_fixed(),
                    &summary,
                )
                .await
            {
                tracing::warn!(run_id, error = %e, "could not finish the run in reconcile_run");
            }
        }
        report
    }
}
