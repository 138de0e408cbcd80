//! The daemon: the seat jobs' shared pass on `sweep.schedule` and
//! `expired-orders` on its own, both UTC cron schedules (through the
//! `Runner`, so neither overlaps itself), the HTTP server, and a graceful
//! stop when the caller's `shutdown` future completes. Signals and the process
//! exit belong to `main.rs`, so the daemon can run inside a test.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::metrics::Metrics;
use crate::model::Kind;
use crate::runner::{Fire, Runner};
use crate::schedule::Schedule;

/// Fires `fire` at each time `schedule` names, with that time as the
/// fire's slot, until `stop`.
async fn fire_on_schedule(
    runner: Arc<Runner>,
    fire: Fire,
    schedule: Schedule,
    stop: CancellationToken,
) {
    let mut after = Utc::now();
    while let Some(at) = schedule.next_after(after) {
        let wait = (at - Utc::now()).to_std().unwrap_or_default();
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
        runner.fire(fire, at);
        after = at;
    }
}

/// `schedule`, parsed once at start.
fn parsed(schedule: &str) -> anyhow::Result<Schedule> {
    Schedule::new(schedule)
        .map_err(|e| anyhow::anyhow!("invalid cron expression {schedule:?}: {e}"))
}

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
/// releases every lease this process holds, and returns.
pub async fn run_on(
    ctx: Context,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let metrics = Metrics::new();
    metrics.set_dry_run(ctx.settings.reconcile.dry_run);
    let runner = Runner::new(ctx.clone(), metrics.clone());
    tracing::info!(listen = %listener.local_addr()?, "HTTP listening");
    let http_stop = CancellationToken::new();
    let server = tokio::spawn(crate::http::serve(
        listener,
        crate::http::router(runner.clone()),
        ctx.settings.http.header_timeout,
        ctx.settings.http.max_connections,
        http_stop.clone(),
    ));

    let fire_stop = CancellationToken::new();
    let settings = &ctx.settings;
    let mut tasks = Vec::new();
    let pass_jobs: Vec<&str> = Kind::SEAT_JOBS
        .into_iter()
        .filter(|k| settings.job(*k).enabled)
        .map(Kind::label)
        .collect();
    if !pass_jobs.is_empty() {
        let schedule = settings.sweep.schedule.clone();
        tracing::info!(
            jobs = pass_jobs.join(","),
            schedule,
            shard = settings.shard().name(),
            "pass scheduled (UTC)"
        );
        tasks.push(tokio::spawn(fire_on_schedule(
            runner.clone(),
            Fire::Pass,
            parsed(&schedule)?,
            fire_stop.clone(),
        )));
    }
    if settings.job(Kind::ExpiredOrders).enabled {
        let schedule = settings.schedule(Kind::ExpiredOrders).to_string();
        tracing::info!(
            kind = Kind::ExpiredOrders.label(),
            schedule,
            "job scheduled (UTC)"
        );
        tasks.push(tokio::spawn(fire_on_schedule(
            runner.clone(),
            Fire::Job(Kind::ExpiredOrders),
            parsed(&schedule)?,
            fire_stop.clone(),
        )));
    }
    for kind in Kind::ALL.into_iter().filter(|k| !settings.job(*k).enabled) {
        tracing::info!(kind = kind.label(), "job disabled");
    }
    let probe = tokio::spawn(probe_dependencies(runner.clone()));
    tracing::info!(dry_run = ctx.settings.reconcile.dry_run, "daemon started");

    shutdown.await;
    tracing::info!("shutdown requested; finishing running batches");
    fire_stop.cancel();
    for t in tasks {
        let _ = t.await;
    }
    probe.abort();
    runner.shutdown(ctx.settings.daemon.shutdown_timeout).await;
    http_stop.cancel();
    let _ = server.await;
    tracing::info!("stopped");
    Ok(())
}
