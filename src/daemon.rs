//! The daemon: each enabled job on its own UTC cron schedule (through the
//! `Runner`, so a job never overlaps itself), the HTTP server, and a graceful
//! stop when the caller's `shutdown` future completes. Signals and the process
//! exit belong to `main.rs`, so the daemon can run inside a test.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_cron_scheduler::{Job, JobScheduler};
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::metrics::Metrics;
use crate::model::Kind;
use crate::runner::Runner;

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

    let mut scheduler = JobScheduler::new().await?;
    for kind in Kind::ALL {
        let job = ctx.settings.job(kind);
        if !job.enabled {
            tracing::info!(kind = kind.label(), "job disabled");
            continue;
        }
        let r = runner.clone();
        scheduler
            .add(Job::new_async(job.schedule.as_str(), move |_, _| {
                let r = r.clone();
                Box::pin(async move { r.fire(kind) })
            })?)
            .await?;
        tracing::info!(kind = kind.label(), schedule = %job.schedule, "job scheduled (UTC)");
    }
    scheduler.start().await?;
    let probe = tokio::spawn(probe_dependencies(runner.clone()));
    tracing::info!(dry_run = ctx.settings.reconcile.dry_run, "daemon started");

    shutdown.await;
    tracing::info!("shutdown requested; finishing running batches");
    scheduler.shutdown().await?;
    probe.abort();
    runner.shutdown(ctx.settings.daemon.shutdown_timeout).await;
    http_stop.cancel();
    let _ = server.await;
    tracing::info!("stopped");
    Ok(())
}
