//! The daemon: the seat jobs' shared pass on `pass.schedule` and
//! `expired-orders` on its own, both UTC cron schedules run by
//! `tokio-cron-scheduler` (through the `Runner`, so neither overlaps
//! itself), the HTTP server, and a graceful stop when the caller's
//! `shutdown` future completes. Signals and the process exit belong to
//! `main.rs`, so the daemon can run inside a test.

pub mod change_state;
pub mod change_watch;
pub mod http;
pub mod runner;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::net::TcpListener;
// The crate's `Job` is a schedule entry here: a job is one of the five repairs.
use tokio_cron_scheduler::{Job as CronEntry, JobScheduler, JobSchedulerError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::daemon::runner::{Fire, Runner};
use crate::metrics::Metrics;
use crate::metrics::seat_reads::SeatHashReadMetrics;
use crate::model::Kind;
use crate::run::context::Context;
use crate::schedule::Schedule;

/// The daemon's schedules on `tokio-cron-scheduler`, wrapped where it falls
/// short. The overlap guard is not here: it belongs to each schedule's
/// entry in the `Runner` (a fire while the previous run goes is skipped and
/// counted), and the start jitter is applied there, after the slot is fixed.
struct Schedules {
    scheduler: JobScheduler,
    /// Cancelled first at shutdown, checked at the start of every fire: the
    /// crate's `shutdown()` does not stop a fire already under way, which
    /// must then do nothing.
    stop: CancellationToken,
    /// Every fire in flight: the crate's `shutdown()` does not wait for
    /// them, and a fire must have handed its run to the `Runner` (whose
    /// tracker the shutdown then waits on) before showtime leases are released.
    fires: TaskTracker,
}

impl Schedules {
    async fn new() -> Result<Schedules, JobSchedulerError> {
        Ok(Schedules {
            scheduler: JobScheduler::new().await?,
            stop: CancellationToken::new(),
            fires: TaskTracker::new(),
        })
    }

    /// Calls `on_fire` with the slot of each fire of `schedule` (UTC).
    async fn add(
        &self,
        schedule: Schedule,
        on_fire: impl Fn(DateTime<Utc>) + Send + Sync + 'static,
    ) -> Result<(), JobSchedulerError> {
        let on_fire = Arc::new(on_fire);
        let (stop, fires) = (self.stop.clone(), self.fires.clone());
        let raw = schedule.as_str().to_string();
        let entry = CronEntry::new_async(raw, move |_, _| {
            let (schedule, on_fire, stop) = (schedule.clone(), on_fire.clone(), stop.clone());
            // Tracked from the moment the scheduler calls the entry.
            Box::pin(fires.track_future(async move {
                if stop.is_cancelled() {
                    return;
                }
                // The crate never hands an entry its scheduled time: work it
                // out, the same in every replica.
                match schedule.slot_at(Utc::now()) {
                    Some(slot) => on_fire(slot),
                    None => tracing::warn!(
                        schedule = schedule.as_str(),
                        "a fire with no occurrence of its schedule before it; skipped"
                    ),
                }
            }))
        })?;
        self.scheduler.add(entry).await?;
        Ok(())
    }

    async fn start(&self) -> Result<(), JobSchedulerError> {
        self.scheduler.start().await
    }

    /// Stops firing: once this returns, no fire calls `on_fire` any more and
    /// every call already under way has returned.
    async fn stop(mut self) {
        self.stop.cancel();
        if let Err(e) = self.scheduler.shutdown().await {
            tracing::warn!(error = %e, "could not stop the scheduler; its late fires do nothing");
        }
        self.fires.close();
        self.fires.wait().await;
    }
}

/// `fire`'s run started on `runner` at each slot of `schedule`. The job
/// holds the runner weakly: the crate's tasks (and the jobs they keep)
/// outlive its `shutdown()`, and must not keep the runner and its stores
/// alive.
async fn schedule_fire(
    schedules: &Schedules,
    runner: &Arc<Runner>,
    fire: Fire,
    schedule: &str,
) -> anyhow::Result<()> {
    // Parsed once, here; each fire asks the parsed schedule for its slot.
    let schedule = Schedule::new(schedule)
        .map_err(|e| anyhow::anyhow!("invalid cron expression {schedule:?}: {e}"))?;
    let runner = Arc::downgrade(runner);
    schedules
        .add(schedule, move |slot| {
            // A fire while the previous run goes is skipped and counted there.
            if let Some(runner) = runner.upgrade() {
                let _ = runner.start(fire.trigger(slot), true);
            }
        })
        .await?;
    Ok(())
}

/// The longest the start waits for its first claim of the shard's pass.
const FIRST_CLAIM_WAIT: Duration = Duration::from_secs(5);

/// Keeps `seatflow_reconciler_dependency_up` current between readiness probes.
async fn probe_dependencies(runner: Arc<Runner>) {
    let mut every = tokio::time::interval(Duration::from_secs(10));
    loop {
        every.tick().await;
        runner.probe_dependencies().await;
    }
}

/// Binds `http.listen` and runs the daemon until `shutdown` completes.
pub async fn run(ctx: Context, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    let listener = TcpListener::bind(ctx.settings.http.listen).await?;
    run_on(ctx, listener, shutdown).await
}

/// Runs the daemon with HTTP on `listener` until `shutdown` completes; then
/// stops firing, lets running batches finish within `daemon.shutdown_timeout`,
/// releases every showtime lease this process holds, and returns.
pub async fn run_on(
    ctx: Context,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let metrics = Metrics::for_jobs(&ctx.settings.enabled_jobs());
    metrics.set_dry_run(ctx.settings.reconcile.dry_run);
    metrics.register(vec![Box::new(ctx.denials.counter())]);
    if let Some(replica) = &ctx.replica {
        metrics.register(replica.collectors());
    }
    let redis = ctx.redis.clone();
    let seat_reads = SeatHashReadMetrics::new(move || redis.seat_hash_reads());
    metrics.register(vec![Box::new(seat_reads)]);
    // Rule 17: the schema judged at start (and again before every pass).
    crate::run::jobs::deviations::at_start(&ctx).await;
    let runner = Runner::new(ctx.clone(), metrics.clone());
    runner.show_contract();

    // The schedules first: a schedule the scheduler refuses stops the
    // start-up before anything else runs.
    let schedules = Schedules::new().await?;
    let settings = &ctx.settings;
    let pass_jobs: Vec<&str> = settings.pass_jobs().into_iter().map(Kind::label).collect();
    if !pass_jobs.is_empty() {
        let schedule = &settings.pass.schedule;
        schedule_fire(&schedules, &runner, Fire::Pass, schedule).await?;
        tracing::info!(
            jobs = pass_jobs.join(","),
            schedule,
            shard = settings.shard().name(),
            "pass scheduled (UTC)"
        );
    }
    if settings.job(Kind::ExpiredOrders).enabled {
        let schedule = settings.schedule(Kind::ExpiredOrders);
        let fire = Fire::ExpiredOrders;
        schedule_fire(&schedules, &runner, fire, schedule).await?;
        tracing::info!(
            kind = Kind::ExpiredOrders.label(),
            schedule,
            "job scheduled (UTC)"
        );
    }
    for kind in Kind::ALL.into_iter().filter(|k| !settings.job(*k).enabled) {
        tracing::info!(kind = kind.label(), "job disabled");
    }
    schedules.start().await?;
    // Who holds the shard's pass is known before `/readyz` first answers
    // (bounded: an unreachable Redis is the keeper's to retry).
    if let Some(kept) = runner.kept_pass() {
        let first = tokio::time::timeout(FIRST_CLAIM_WAIT, kept.keep(&ctx)).await;
        if let Ok(Err(e)) = first {
            ctx.denials.note(&e);
        }
    }
    if let Some(changes) = runner.changes() {
        crate::daemon::change_watch::spawn(&runner, changes);
    }

    tracing::info!(listen = %listener.local_addr()?, "HTTP listening");
    let http_stop = CancellationToken::new();
    let server = tokio::spawn(crate::daemon::http::serve(
        listener,
        crate::daemon::http::router(runner.clone()),
        ctx.settings.http.header_timeout,
        ctx.settings.http.max_connections,
        http_stop.clone(),
    ));
    let probe = tokio::spawn(probe_dependencies(runner.clone()));
    tracing::info!(dry_run = ctx.settings.reconcile.dry_run, "daemon started");

    shutdown.await;
    tracing::info!("shutdown requested; finishing running batches");
    // In this order: no fire starts a run any more; the runs under way
    // finish (within the timeout); then the showtime leases are released.
    schedules.stop().await;
    probe.abort();
    runner.shutdown(ctx.settings.daemon.shutdown_timeout).await;
    http_stop.cancel();
    let _ = server.await;
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Instant;

    /// The one real-time test of the schedules (the scheduler reads the wall
    /// clock; the slot is tested with fixed times in `schedule`): a fire
    /// every second, each with a whole-second slot at or before it, and
    /// none once stopped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_schedule_fires_with_whole_second_slots_until_stopped() {
        // (slot, when on_fire was called)
        type Fired = Vec<(DateTime<Utc>, DateTime<Utc>)>;
        let fired: Arc<Mutex<Fired>> = Arc::default();
        let schedules = Schedules::new().await.unwrap();
        let record = fired.clone();
        let every_second = Schedule::new("* * * * * *").unwrap();
        schedules
            .add(every_second, move |slot| {
                record.lock().unwrap().push((slot, Utc::now()));
            })
            .await
            .unwrap();
        schedules.start().await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while fired.lock().unwrap().len() < 2 {
            assert!(Instant::now() < deadline, "two fires in 5 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        schedules.stop().await;
        let at_stop = fired.lock().unwrap().clone();
        let slots: Vec<DateTime<Utc>> = at_stop.iter().map(|(slot, _)| *slot).collect();
        for (slot, at) in &at_stop {
            assert_eq!(slot.timestamp_subsec_nanos(), 0, "{slot}");
            assert!(slot <= at && *at - *slot < chrono::Duration::seconds(1));
        }
        assert!(slots.is_sorted(), "{slots:?}");
        assert!(slots.first() < slots.last(), "two slots: {slots:?}");

        // The scheduler keeps ticking after its shutdown() (for up to one
        // tick) and its job calls may still arrive: none reaches on_fire.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(fired.lock().unwrap().len(), at_stop.len());
    }
}
