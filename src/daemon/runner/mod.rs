//! What runs jobs for the daemon: the seat jobs' shared pass and
//! `expired-orders`, each one at a time (a fire while the previous run goes
//! is skipped and counted), the pass of each shard (its own first), and the
//! graceful stop. The scheduler (`daemon`), the admin endpoint (`http`) and
//! the change watch (`change_watch`) all start runs through it, as a
//! `Trigger` it turns into a `RunRequest` (`Runner::request`), once per run
//! (a pass: once per shard), made through the one door (`jobs::run`) and
//! recorded. `status.rs`: what it shows of them (`/status`, metrics).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::Rng;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::daemon::change_state::Changes;
use crate::metrics::{Metrics, PassMetrics};
use crate::model::{Kind, Shard};
use crate::run::context::Context;
use crate::run::jobs::pass_run::PassOutcome;
use crate::run::jobs::{self, Rebuild, RunRequest, Trigger};
use crate::run::pass_lease::{Holding, KeptPass};
use crate::schedule::Schedule;
use seatflow_core::changes::queue::{Due, Source};

mod status;
pub use status::{Fallback, JobStatus, LastRun, ShardStatus};

/// How long a dependency probe waits for each store.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What a schedule fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fire {
    /// The enabled seat jobs' shared pass, on `pass.schedule`.
    Pass,
    /// `expired-orders`, on its own schedule.
    ExpiredOrders,
}

impl Fire {
    /// What asks for the run: the pass for `slot`, or `expired-orders`.
    pub fn trigger(self, slot: DateTime<Utc>) -> Trigger {
        match self {
            Fire::Pass => Trigger::Pass {
                slot: Some(slot),
                rebuild: Rebuild::No,
                cadence: None,
            },
            Fire::ExpiredOrders => Trigger::ExpiredOrders,
        }
    }
}

/// Runs jobs on request (schedule or admin endpoint).
pub struct Runner {
    pub ctx: Context,
    pub metrics: Metrics,
    pass_metrics: PassMetrics,
    /// `expired-orders`' own schedule, parsed once, for `/status`'s next
    /// fire (the seat jobs' is the pass's, the context's).
    expired_orders_schedule: Option<Schedule>,
    stop: CancellationToken,
    tracker: TaskTracker,
    /// One pass at a time; one `expired-orders` fire's run at a time. Each
    /// guard belongs to one schedule's job and is held (`try_lock_owned`)
    /// by its run: the scheduler fires whether or not the previous run is
    /// still going, and such a fire is skipped and counted
    /// (`skipped_overlap`). A check that runs `expired-orders` waits for
    /// its turn at the door instead (`jobs::run`).
    pass_guard: Arc<tokio::sync::Mutex<()>>,
    expired_guard: Arc<tokio::sync::Mutex<()>>,
    status: Mutex<BTreeMap<Kind, JobStatus>>,
    shards: Mutex<BTreeMap<u32, ShardStatus>>,
    /// Change-driven checks between passes (src/daemon/change_state.rs); None without a pass.
    changes: Option<Arc<Changes>>,
    /// The passes' cadence while a change source is down (`change_watch`'s
    /// `while_uncovered`): None, the schedule's.
    fallback: Mutex<Option<Fallback>>,
    /// The pass lease of this process's own shard, kept between passes
    /// (None: no pass, or a dry run, which takes no lease).
    kept: Option<Arc<KeptPass>>,
    /// The stop of the pass under way: cancelled to start another at once
    /// (Redis lost its data: the pass's cursors went with it).
    pass_stop: Mutex<CancellationToken>,
    /// A pass was started since the daemon started (whatever came of it).
    passes_started: AtomicBool,
    /// Redis lost its data and the passes since have not rebuilt every
    /// missing hash yet (`missing_hashes.batch_size` a pass): another pass
    /// follows each at once until one leaves none.
    rebuilding: AtomicBool,
}

/// Why a trigger did not start a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStarted {
    AlreadyRunning,
    ShuttingDown,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Runner {
    pub fn new(ctx: Context, metrics: Metrics) -> Arc<Runner> {
        let settings = &ctx.settings;
        // Checked with the settings: a schedule that does not parse has no
        // fire, so no next fire.
        let expired_orders_schedule = Schedule::new(settings.schedule(Kind::ExpiredOrders)).ok();
        let status = Kind::ALL
            .into_iter()
            .map(|k| {
                let enabled = settings.job(k).enabled;
                let schedule = settings.schedule(k).to_string();
                (
                    k,
                    JobStatus {
                        enabled,
                        // Said when read (`Runner::status`).
                        next_fire: None,
                        schedule,
                        running: false,
                        last_run: None,
                        current_drift: None,
                        stuck_leases: 0,
                        skipped_overlaps: 0,
                    },
                )
            })
            .collect();
        let total = settings.sharding.total;
        let shards = (0..total).map(|i| (i, ShardStatus::default())).collect();
        let pass_metrics = PassMetrics::new(total);
        let has_pass = !settings.pass_jobs().is_empty();
        if has_pass {
            metrics.export_passes(&pass_metrics);
        }
        pass_metrics
            .pace
            .set(ctx.pacer.as_ref().map_or(0.0, |p| p.rate()));
        if let Some(interval) = ctx
            .pass_schedule
            .as_ref()
            .and_then(|s| s.interval_after(Utc::now()))
        {
            pass_metrics.interval.set(interval.as_secs_f64());
        }
        let changes = has_pass.then(|| Arc::new(Changes::new(settings)));
        if let Some(c) = &changes {
            metrics.export_changes(&c.metrics);
        }
        let stop = CancellationToken::new();
        let kept = (has_pass && !settings.reconcile.dry_run)
            .then(|| Arc::new(KeptPass::new(settings.shard(), stop.clone())));
        Arc::new(Runner {
            ctx,
            metrics,
            pass_metrics,
            expired_orders_schedule,
            pass_stop: Mutex::new(stop.child_token()),
            stop,
            tracker: TaskTracker::new(),
            pass_guard: Default::default(),
            expired_guard: Default::default(),
            status: Mutex::new(status),
            changes,
            shards: Mutex::new(shards),
            fallback: Mutex::new(None),
            kept,
            passes_started: AtomicBool::new(false),
            rebuilding: AtomicBool::new(false),
        })
    }

    /// The pass lease of this process's own shard, kept between passes
    /// (None without a pass, and in a dry run).
    pub fn kept_pass(&self) -> Option<&Arc<KeptPass>> {
        self.kept.as_ref()
    }

    /// Whether a pass was started since the daemon started.
    pub fn passes_started(&self) -> bool {
        self.passes_started.load(Ordering::SeqCst)
    }

    /// Redis lost its data (the caller counts the gap that starts a pass):
    /// the pass under way stops (what it read is gone), the pace
    /// starts again (a new server, and no live hold waits on a hash that
    /// is gone), and passes follow one another until the missing hashes
    /// are all rebuilt.
    pub fn redis_data_lost(&self) {
        lock(&self.pass_stop).cancel();
        if let Some(p) = &self.ctx.pacer {
            p.start_again();
        }
        self.rebuilding.store(true, Ordering::SeqCst);
    }

    /// After a pass of this process's own shard that ran: while rebuilding
    /// after a data loss, another pass at once if this one completed its
    /// sweep with missing hashes left over its budget (a failed one waits
    /// for the next gap or fire).
    fn rebuild_goes_on(&self, report: &jobs::report::RunReport, changes: &Changes) {
        if !self.rebuilding.load(Ordering::SeqCst) {
            return;
        }
        let Some(missing) = report.jobs.iter().find(|j| j.kind == Kind::MissingHashes) else {
            self.rebuilt();
            return;
        };
        if missing.fatal.is_some() || missing.nothing_completed {
            return;
        }
        if missing.backlog > 0 {
            changes.pass_again();
        } else {
            self.rebuilt();
        }
    }

    fn rebuilt(&self) {
        self.rebuilding.store(false, Ordering::SeqCst);
    }

    /// The current pace of the passes' reads (None: unpaced) and its back-offs.
    pub fn pace(&self) -> Option<(f64, crate::pace::Backoffs)> {
        self.ctx.pacer.as_ref().map(|p| (p.rate(), p.backoffs()))
    }

    /// The change-driven checks, when the daemon has a pass.
    pub fn changes(&self) -> Option<&Arc<Changes>> {
        self.changes.as_ref()
    }

    /// The run `trigger` asks for, as the daemon runs it: stopped with the
    /// daemon, telling its findings to the change queue.
    fn request(&self, trigger: Trigger) -> RunRequest {
        RunRequest::new(
            &self.ctx,
            trigger,
            self.stop.clone(),
            self.outbox(),
            self.kept.clone(),
        )
    }

    /// Cancelled when the daemon shuts down.
    pub fn stopping(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Runs a task of the daemon's that shutdown waits for.
    pub fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tracker.spawn(task);
    }

    /// Whether this process is its own shard's active replica (only then
    /// does it check changes between passes): it holds the shard's pass
    /// lease (Some(true)), or another reconciler's live lease holds it
    /// (Some(false)); None while nobody can be said to (before the first
    /// claim, a claim failing, a lease not renewed). A dry run takes no
    /// lease: it is active once its first pass has run.
    pub fn active_on_own_shard(&self) -> Option<bool> {
        let Some(kept) = &self.kept else {
            let own = self.ctx.settings.shard().index;
            return lock(&self.shards)
                .get(&own)
                .filter(|s| s.last_fire.is_some())
                .map(|s| s.active);
        };
        match kept.holding() {
            Holding::Held => Some(true),
            Holding::Standby { .. } => Some(false),
            Holding::NoHolder { .. } => None,
        }
    }

    /// A pass now, outside the schedule (after a gap in change detection).
    pub fn start_pass_now(self: &Arc<Self>) -> Result<(), NotStarted> {
        let rebuild = if self.rebuilding.load(Ordering::SeqCst) {
            Rebuild::AfterLoss
        } else {
            Rebuild::No
        };
        let trigger = Trigger::Pass {
            slot: None,
            rebuild,
            cadence: self.fallback().map(|f| f.every),
        };
        self.start(trigger, false)
    }

    /// Starts the run `trigger` asks for (a schedule's fire, a pass after a
    /// gap, the admin endpoint's job) in the background, after up to
    /// `daemon.start_jitter` when `jitter`, unless its schedule's previous
    /// run (the pass, or `expired-orders`) still goes: a schedule's fire is
    /// then skipped and counted.
    pub fn start(self: &Arc<Self>, trigger: Trigger, jitter: bool) -> Result<(), NotStarted> {
        if self.stop.is_cancelled() {
            return Err(NotStarted::ShuttingDown);
        }
        let kinds = RunRequest::kinds_of(&self.ctx.settings, &trigger);
        if kinds.is_empty() {
            return Ok(());
        }
        let is_pass = kinds.iter().any(|k| k.is_seat_job());
        let guard = if is_pass {
            &self.pass_guard
        } else {
            &self.expired_guard
        };
        let Ok(guard) = guard.clone().try_lock_owned() else {
            if trigger.is_scheduled() {
                self.skipped_overlap(&trigger, &kinds);
            }
            return Err(NotStarted::AlreadyRunning);
        };
        let this = Arc::clone(self);
        self.set_running(&kinds, true);
        if is_pass {
            self.passes_started.store(true, Ordering::SeqCst);
        }
        self.tracker.spawn(async move {
            let max = this.ctx.settings.daemon.start_jitter;
            if jitter && !max.is_zero() {
                let delay = rand::rng().random_range(Duration::ZERO..=max);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = this.stop.cancelled() => {}
                }
            }
            if is_pass {
                this.run_pass(&trigger, &kinds).await;
            } else {
                this.enter(&this.ctx, this.request(trigger)).await;
            }
            this.set_running(&kinds, false);
            drop(guard);
        });
        Ok(())
    }

    /// A schedule's fire while its previous run goes: counted and logged.
    #[allow(
        clippy::expect_used,
        reason = "the status map holds every kind from the start"
    )]
    fn skipped_overlap(&self, trigger: &Trigger, kinds: &[Kind]) {
        for k in kinds {
            self.metrics.record_skipped_overlap(*k);
            lock(&self.status)
                .get_mut(k)
                .expect("kind")
                .skipped_overlaps += 1;
        }
        let labels: Vec<&str> = kinds.iter().map(|k| k.label()).collect();
        tracing::warn!(
            fire = trigger.label(),
            kinds = labels.join(","),
            "previous run still going; this fire is skipped"
        );
    }

    #[allow(
        clippy::expect_used,
        reason = "the status map holds every kind from the start"
    )]
    fn set_running(&self, kinds: &[Kind], running: bool) {
        let mut status = lock(&self.status);
        for k in kinds {
            status.get_mut(k).expect("kind").running = running;
        }
    }

    /// One pass: this process's own shard first, then (for a scheduled
    /// pass of a sharded estate) every other shard that nobody ran within
    /// `pass.takeover_after`. Stops at the next fire at the latest.
    async fn run_pass(&self, trigger: &Trigger, kinds: &[Kind]) {
        let settings = &self.ctx.settings;
        let own = settings.shard();
        let slot = match trigger {
            Trigger::Pass { slot, .. } => *slot,
            _ => None,
        };
        // Dry runs take no pass lease, so they keep to their own shard.
        let shards = if slot.is_some() && !settings.reconcile.dry_run {
            own.all_from_here()
        } else {
            vec![own]
        };
        // This pass's own stop (under the daemon's): `restart_pass`.
        let stop = self.stop.child_token();
        *lock(&self.pass_stop) = stop.clone();
        let mut ran_any = false;
        for shard in shards {
            if stop.is_cancelled() {
                break;
            }
            let ctx = self.ctx.for_shard(shard);
            if let Some(slot) = slot
                && !settings.reconcile.dry_run
                && !self.goes_first(&ctx, shard).await
            {
                let wait = (slot + settings.pass.takeover_after - Utc::now())
                    .to_std()
                    .unwrap_or_default();
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.cancelled() => break,
                }
            }
            if let Some(changes) = self.changes.as_ref().filter(|_| shard == own) {
                changes.pass_starts();
            }
            let kept = self.kept.clone().filter(|_| shard == own);
            let request = RunRequest::new(&ctx, trigger.clone(), stop.clone(), self.outbox(), kept);
            // From this fire to the next (outside the schedule: the cadence
            // in force, so that the first pass of a large estate already
            // says whether it fits and what one shard carries).
            let interval = request.interval;
            let run = self.enter(&ctx, request).await;
            ran_any |= !matches!(run.pass, PassOutcome::StoodBy { .. });
            self.record_pass(shard, &run.pass, &run.report, interval);
            if let (Some(changes), PassOutcome::Ran { .. }) = (&self.changes, &run.pass)
                && shard == own
            {
                changes.pass_ended(&run.report);
                self.rebuild_goes_on(&run.report, changes);
            }
        }
        if !ran_any && !stop.is_cancelled() {
            // A standby's scan gauges would otherwise show what it saw when
            // it was last active, long repaired since: the active one's are
            // the current ones (dashboards take the max over replicas).
            for k in kinds {
                self.metrics.clear_scan_gauges(*k);
                if let Some(st) = lock(&self.status).get_mut(k) {
                    st.current_drift = None;
                }
            }
        }
        if let Some(p) = &self.ctx.pacer {
            // Between passes the pace is the budget's alone.
            p.need(0.0);
        }
        self.show_pace();
    }

    /// The daemon's way through the door (`jobs::run`) for a pass or a
    /// job: `request` (built once, for `ctx`'s shard) made, and what came
    /// of it recorded in `/status` and the metrics.
    async fn enter(&self, ctx: &Context, request: RunRequest) -> jobs::RunResult {
        let started_at = Utc::now();
        let result = jobs::run(ctx, request).await;
        self.record(&result.report, started_at);
        result
    }

    /// A change-driven check of this process's own shard, made now: the
    /// enabled seat jobs scoped to `due`'s showtimes, and `expired-orders`
    /// too when `source` may be an order's deadline (waiting for its turn
    /// if another run of it goes); the queue is told how it went.
    pub async fn check(&self, source: Source, due: Vec<Due>) {
        let showtimes = due.iter().map(|d| d.showtime).collect();
        let trigger = Trigger::Check { source, showtimes };
        // `jobs::run` boxes the run's deep future itself.
        let report = jobs::run(&self.ctx, self.request(trigger)).await.report;
        self.record_check(&report);
        tracing::debug!(
            source = source.label(),
            showtimes = ?due.iter().map(|d| d.showtime).collect::<Vec<_>>(),
            jobs = ?report.jobs.iter().map(|j| j.counts()).collect::<Vec<_>>(),
            "check done"
        );
        if let Some(changes) = &self.changes {
            changes.check_ended(&report, source, due);
        }
    }

    /// Whether this process claims `shard`'s pass at the fire: the shard's
    /// owner does (its own shard when sharded; with one shard, the
    /// reconciler that ran the last pass, or anyone when none did). The
    /// others wait `pass.takeover_after`, so the active runner stays put
    /// and a standby takes over only when it is gone.
    async fn goes_first(&self, ctx: &Context, shard: Shard) -> bool {
        let own = ctx.settings.shard();
        if shard != own {
            return false;
        }
        if own.total > 1 || self.kept.as_ref().is_some_and(|k| k.is_ours()) {
            return true;
        }
        match ctx.redis.read_pass(shard).await {
            Ok((_, Some(last))) => last.instance == ctx.settings.reconcile.instance,
            Ok((_, None)) => true,
            Err(_) => true,
        }
    }

    /// Where the daemon's runs tell the change queue what they find.
    fn outbox(&self) -> Option<crate::run::jobs::Outbox> {
        self.changes.as_ref().map(|c| c.outbox())
    }

    /// Stops new runs, lets running ones finish their chunk within
    /// `timeout`, then releases every showtime lease this process still holds.
    pub async fn shutdown(&self, timeout: Duration) {
        self.stop.cancel();
        self.tracker.close();
        if tokio::time::timeout(timeout, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                ?timeout,
                "running jobs did not finish in time; releasing their showtime leases"
            );
        }
        let held = self.ctx.leases.len();
        if let Err(e) = self.ctx.leases.release_all(&self.ctx.redis).await {
            tracing::warn!(error = %e, held, "could not release every showtime lease; they expire with their TTL");
        }
        // A standby takes the shard's pass at once, not a TTL later.
        if let Some(kept) = &self.kept {
            kept.release().await;
        }
    }

    /// Pings both stores (bounded) and records the result as metrics.
    pub async fn probe_dependencies(&self) -> (bool, bool) {
        let (mysql, redis) = tokio::join!(
            tokio::time::timeout(PROBE_TIMEOUT, self.ctx.mysql.ping()),
            tokio::time::timeout(PROBE_TIMEOUT, self.ctx.redis.ping()),
        );
        let mysql_ok = matches!(mysql, Ok(Ok(())));
        let redis_ok = matches!(redis, Ok(Ok(())));
        self.metrics.set_dependency("mysql", mysql_ok);
        self.metrics.set_dependency("redis", redis_ok);
        (mysql_ok, redis_ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fire_asks_for_its_pass_or_its_job() {
        let slot = Utc::now();
        let pass = Fire::Pass.trigger(slot);
        assert!(matches!(pass, Trigger::Pass { slot: Some(s), .. } if s == slot));
        let expired = Fire::ExpiredOrders;
        let job = expired.trigger(slot);
        assert!(matches!(job, Trigger::ExpiredOrders));
        assert!(pass.is_scheduled() && job.is_scheduled());
    }
}
