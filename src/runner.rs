//! What runs a job for the daemon: one run at a time per job (a fire while
//! the previous run goes is skipped and counted), `/status` state, and the
//! graceful stop. The scheduler (`daemon`) and the admin endpoint (`http`)
//! both start runs through it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::Rng;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::context::Context;
use crate::jobs::report::JobReport;
use crate::jobs::{self, RunOptions};
use crate::metrics::Metrics;
use crate::model::Kind;
use crate::schedule::next_fire;

/// How long a dependency probe waits for each store.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What `/status` shows for one job.
#[derive(Debug, Clone, Serialize)]
pub struct JobStatus {
    pub enabled: bool,
    pub schedule: String,
    pub running: bool,
    pub next_fire: Option<DateTime<Utc>>,
    pub last_run: Option<LastRun>,
    /// Drift found by the last run that completed its scan.
    pub current_drift: Option<u64>,
    /// Leases without expiry held by someone else that the last completed
    /// run met (rule 13): those showtimes wait for an operator.
    pub stuck_leases: u64,
    pub skipped_overlaps: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LastRun {
    pub run_id: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    #[serde(flatten)]
    pub report: JobReport,
}

/// Runs jobs on request (schedule or admin endpoint), one at a time per job.
pub struct Runner {
    pub ctx: Context,
    pub metrics: Metrics,
    stop: CancellationToken,
    tracker: TaskTracker,
    guards: BTreeMap<Kind, Arc<tokio::sync::Mutex<()>>>,
    status: Mutex<BTreeMap<Kind, JobStatus>>,
}

/// Why a trigger did not start a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStarted {
    AlreadyRunning,
    ShuttingDown,
}

impl Runner {
    pub fn new(ctx: Context, metrics: Metrics) -> Arc<Runner> {
        let status = Kind::ALL
            .into_iter()
            .map(|k| {
                let job = ctx.settings.job(k);
                (
                    k,
                    JobStatus {
                        enabled: job.enabled,
                        schedule: job.schedule.clone(),
                        running: false,
                        next_fire: job.enabled.then(|| next_fire(&job.schedule)).flatten(),
                        last_run: None,
                        current_drift: None,
                        stuck_leases: 0,
                        skipped_overlaps: 0,
                    },
                )
            })
            .collect();
        Arc::new(Runner {
            ctx,
            metrics,
            stop: CancellationToken::new(),
            tracker: TaskTracker::new(),
            guards: Kind::ALL
                .into_iter()
                .map(|k| (k, Default::default()))
                .collect(),
            status: Mutex::new(status),
        })
    }

    fn status_mut(&self) -> std::sync::MutexGuard<'_, BTreeMap<Kind, JobStatus>> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn status(&self) -> BTreeMap<Kind, JobStatus> {
        let mut s = self.status_mut().clone();
        for (k, st) in s.iter_mut() {
            if st.enabled {
                st.next_fire = next_fire(&self.ctx.settings.job(*k).schedule);
            }
        }
        s
    }

    /// A scheduled fire: skipped and counted if the previous run still goes.
    pub fn fire(self: &Arc<Self>, kind: Kind) {
        if let Err(NotStarted::AlreadyRunning) = self.start(kind, true) {
            self.metrics.record_skipped_overlap(kind);
            self.status_mut()
                .get_mut(&kind)
                .expect("kind")
                .skipped_overlaps += 1;
            tracing::warn!(
                kind = kind.label(),
                "previous run still going; this fire is skipped"
            );
        }
    }

    /// Starts a run of `kind` in the background unless one is running.
    pub fn start(self: &Arc<Self>, kind: Kind, jitter: bool) -> Result<(), NotStarted> {
        if self.stop.is_cancelled() {
            return Err(NotStarted::ShuttingDown);
        }
        let guard = self.guards[&kind]
            .clone()
            .try_lock_owned()
            .map_err(|_| NotStarted::AlreadyRunning)?;
        let this = Arc::clone(self);
        self.status_mut().get_mut(&kind).expect("kind").running = true;
        self.tracker.spawn(async move {
            let max = this.ctx.settings.daemon.start_jitter;
            if jitter && !max.is_zero() {
                let delay = rand::rng().random_range(Duration::ZERO..=max);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = this.stop.cancelled() => {}
                }
            }
            this.run(kind).await;
            drop(guard);
        });
        Ok(())
    }

    async fn run(&self, kind: Kind) {
        let started_at = Utc::now();
        let settings = &self.ctx.settings;
        let opts = RunOptions {
            dry_run: settings.reconcile.dry_run,
            stop: self.stop.clone(),
            bad_data_reporter: Kind::ALL
                .into_iter()
                .find(|k| *k != Kind::ExpiredOrders && settings.job(*k).enabled),
            ..RunOptions::default()
        };
        let report = jobs::run_once(&self.ctx, &[kind], &opts).await;
        let job = report.jobs.into_iter().next().expect("one job");
        self.metrics.record(&job);
        let mut status = self.status_mut();
        let st = status.get_mut(&kind).expect("kind");
        st.running = false;
        if job.outcome != jobs::report::Outcome::Failure {
            st.current_drift = Some(job.drift);
            st.stuck_leases = job.stuck_leases;
        }
        st.last_run = Some(LastRun {
            run_id: report.run_id,
            started_at,
            finished_at: Utc::now(),
            report: job,
        });
    }

    /// Stops new runs, lets running ones finish their chunk within
    /// `timeout`, then releases every lease this process still holds.
    pub async fn shutdown(&self, timeout: Duration) {
        self.stop.cancel();
        self.tracker.close();
        if tokio::time::timeout(timeout, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                ?timeout,
                "running jobs did not finish in time; releasing their leases"
            );
        }
        let held = self.ctx.leases.len();
        if let Err(e) = self.ctx.leases.release_all(&self.ctx.redis).await {
            tracing::warn!(error = %e, held, "could not release every lease; they expire with their TTL");
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
