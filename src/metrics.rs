//! Every metric family in one place, with exactly the spec's names, types
//! and labels. Every labelled series of a job that runs exists (as 0) from
//! start, so dashboards and alerts see a series before the first repair; a
//! job or pass that does not run has none, so no 0 reads as "never ran".
//! Both `run` and `once`
//! record through [`Metrics::record`], so both modes report alike.

// Every family is defined here, with names and labels of ours: a failure to
// register one is a bug caught by the tests, never a condition of the data.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::error::Stage;
use crate::jobs::report::{JobReport, Outcome};
use crate::model::Kind;
use crate::pace::Backoffs;

/// The `outcome` of a scheduled fire that found the previous run still
/// going; the other outcomes are `Outcome`'s.
pub const SKIPPED_OVERLAP: &str = "skipped_overlap";
/// Dependencies reported by `seatflow_reconciler_dependency_up`.
pub const DEPENDENCIES: [&str; 2] = ["mysql", "redis"];
/// Run durations from milliseconds (a tiny estate) to minutes (a backlog).
const DURATION_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// Drift ages: the report keeps its observations in the same buckets.
pub use crate::jobs::report::DRIFT_AGE_BUCKETS;

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub fixes: IntCounterVec,
    pub drift: IntGaugeVec,
    pub deferred: IntGaugeVec,
    pub runs: IntCounterVec,
    pub run_duration: HistogramVec,
    pub last_success: GaugeVec,
    pub errors: IntCounterVec,
    pub mutex_busy: IntCounterVec,
    pub skipped_locked: IntCounterVec,
    pub backlog: IntGaugeVec,
    pub stuck_leases: IntGaugeVec,
    pub scanned: IntCounterVec,
    pub build_info: IntGaugeVec,
    pub dependency_up: IntGaugeVec,
    pub drift_age: HistogramVec,
    pub dry_run: IntGauge,
    pub contract_deviations: IntGaugeVec,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every job's series (a `once` run, a push, the tests).
    pub fn new() -> Metrics {
        Self::for_jobs(&Kind::ALL)
    }

    /// The series of `jobs` only: a job that does not run (disabled) has
    /// none, so no dashboard or alert reads a 0 that means "never ran" as a
    /// state of the data.
    pub fn for_jobs(jobs: &[Kind]) -> Metrics {
        let registry = Registry::new();
        let kind = &["kind"];
        let fixes = IntCounterVec::new(
            Opts::new("seatflow_reconcile_fixes_total", "Repairs applied, by job."),
            kind,
        )
        .unwrap();
        let drift = IntGaugeVec::new(
            Opts::new(
                "seatflow_reconcile_drift",
                "Drift found by the last completed scan, by job.",
            ),
            kind,
        )
        .unwrap();
        let deferred = IntGaugeVec::new(
            Opts::new(
                "seatflow_reconcile_deferred",
                "Orphan suspects waiting out the grace period, by job.",
            ),
            kind,
        )
        .unwrap();
        let runs = IntCounterVec::new(
            Opts::new(
                "seatflow_reconcile_runs_total",
                "Job runs, by job and outcome.",
            ),
            &["kind", "outcome"],
        )
        .unwrap();
        let run_duration = HistogramVec::new(
            HistogramOpts::new(
                "seatflow_reconcile_run_duration_seconds",
                "Wall time of a job run, by job.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            kind,
        )
        .unwrap();
        let last_success = GaugeVec::new(
            Opts::new(
                "seatflow_reconcile_last_success_timestamp_seconds",
                "Unix time of the last successful run, by job (0 = never).",
            ),
            kind,
        )
        .unwrap();
        let errors = IntCounterVec::new(
            Opts::new(
                "seatflow_reconcile_errors_total",
                "Errors by job and stage (mysql, redis, lock, audit, invalid_data).",
            ),
            &["kind", "stage"],
        )
        .unwrap();
        let mutex_busy = IntCounterVec::new(
            Opts::new(
                "seatflow_reconcile_mutex_busy_total",
                "Showtimes skipped because another holder had their showtime lease, by job.",
            ),
            kind,
        )
        .unwrap();
        let skipped_locked = IntCounterVec::new(
            Opts::new(
                "seatflow_reconcile_skipped_locked_total",
                "Items skipped because another MySQL transaction held their rows (expired orders the application is changing), not waited for; a later run takes them. By job.",
            ),
            kind,
        )
        .unwrap();
        let backlog = IntGaugeVec::new(
            Opts::new(
                "seatflow_reconcile_backlog",
                "Drift and showtimes left for later runs after the last run, by job.",
            ),
            kind,
        )
        .unwrap();
        let stuck_leases = IntGaugeVec::new(
            Opts::new(
                "seatflow_reconcile_stuck_leases",
                "Showtime leases without expiry held by someone else, met by the last run, by job (rule 13).",
            ),
            kind,
        )
        .unwrap();
        let scanned = IntCounterVec::new(
            Opts::new(
                "seatflow_reconcile_scanned_total",
                "Showtimes (orders, for expired_orders) scanned, by job.",
            ),
            kind,
        )
        .unwrap();
        let build_info = IntGaugeVec::new(
            Opts::new(
                "seatflow_reconciler_build_info",
                "Always 1; the version label tells the build.",
            ),
            &["version"],
        )
        .unwrap();
        let dependency_up = IntGaugeVec::new(
            Opts::new(
                "seatflow_reconciler_dependency_up",
                "1 when the last probe (every 10 s, and on /readyz) reached the dependency, else 0.",
            ),
            &["dependency"],
        )
        .unwrap();
        let drift_age = HistogramVec::new(
            HistogramOpts::new(
                "seatflow_reconcile_drift_age_seconds",
                "How long a repaired drift had been seen before its repair (first sighting to repair), by job.",
            )
            .buckets(DRIFT_AGE_BUCKETS.to_vec()),
            kind,
        )
        .unwrap();
        let dry_run = IntGauge::new(
            "seatflow_reconciler_dry_run",
            "1 when the reconciler runs in dry-run mode (detects and reports, writes nothing), else 0.",
        )
        .unwrap();
        // `kind` here is the deviation's kind (nullable, type, collation, …),
        // as the issue that named the family gave it; the jobs' `kind` is
        // on no series of this family.
        let contract_deviations = IntGaugeVec::new(
            Opts::new(
                "seatflow_reconcile_contract_deviations",
                "Ways the schema deviates from the contract, by table, column (or key) and kind of deviation: 1 while it holds repairs back, 0 while it is proved harmless on the data (rule 17; no series: as the contract has it).",
            ),
            &["table", "column", "kind"],
        )
        .unwrap();
        let m = Metrics {
            registry,
            fixes,
            drift,
            deferred,
            runs,
            run_duration,
            last_success,
            errors,
            mutex_busy,
            skipped_locked,
            backlog,
            stuck_leases,
            scanned,
            build_info,
            dependency_up,
            drift_age,
            dry_run,
            contract_deviations,
        };
        m.register_all();
        m.zero(jobs);
        m
    }

    fn register_all(&self) {
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(self.fixes.clone()),
            Box::new(self.drift.clone()),
            Box::new(self.deferred.clone()),
            Box::new(self.runs.clone()),
            Box::new(self.run_duration.clone()),
            Box::new(self.last_success.clone()),
            Box::new(self.errors.clone()),
            Box::new(self.mutex_busy.clone()),
            Box::new(self.skipped_locked.clone()),
            Box::new(self.backlog.clone()),
            Box::new(self.stuck_leases.clone()),
            Box::new(self.scanned.clone()),
            Box::new(self.build_info.clone()),
            Box::new(self.dependency_up.clone()),
            Box::new(self.drift_age.clone()),
            Box::new(self.dry_run.clone()),
            Box::new(self.contract_deviations.clone()),
        ];
        for c in collectors {
            self.registry.register(c).expect("metric names are unique");
        }
        // The standard process_* metrics (CPU, memory, file descriptors,
        // start time) of this process; Linux only (they read /proc).
        #[cfg(target_os = "linux")]
        self.registry
            .register(Box::new(crate::process_metrics::ProcessMetrics::for_self()))
            .expect("process metric names are unique");
    }

    /// Creates every labelled series of `jobs` at 0.
    fn zero(&self, jobs: &[Kind]) {
        for k in jobs.iter().map(|k| k.label()) {
            self.fixes.with_label_values(&[k]);
            self.drift.with_label_values(&[k]);
            self.deferred.with_label_values(&[k]);
            self.run_duration.with_label_values(&[k]);
            self.last_success.with_label_values(&[k]);
            self.mutex_busy.with_label_values(&[k]);
            self.skipped_locked.with_label_values(&[k]);
            self.backlog.with_label_values(&[k]);
            self.stuck_leases.with_label_values(&[k]);
            self.scanned.with_label_values(&[k]);
            for o in Outcome::ALL.map(Outcome::label) {
                self.runs.with_label_values(&[k, o]);
            }
            self.runs.with_label_values(&[k, SKIPPED_OVERLAP]);
            for s in Stage::ALL.map(Stage::label) {
                self.errors.with_label_values(&[k, s]);
            }
            self.drift_age.with_label_values(&[k]);
        }
        for d in DEPENDENCIES {
            self.dependency_up.with_label_values(&[d]);
        }
        self.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
    }

    /// Records a finished job run.
    pub fn record(&self, r: &JobReport) {
        let k = r.kind.label();
        self.record_check(r);
        self.scanned.with_label_values(&[k]).inc_by(r.scanned);
        self.runs.with_label_values(&[k, r.outcome.label()]).inc();
        self.run_duration
            .with_label_values(&[k])
            .observe(r.duration_ms as f64 / 1000.0);
        // Gauges describe the last *completed* scan: a failed run leaves them.
        if r.outcome != Outcome::Failure {
            self.drift.with_label_values(&[k]).set(r.drift as i64);
            self.deferred.with_label_values(&[k]).set(r.deferred as i64);
            self.backlog.with_label_values(&[k]).set(r.backlog as i64);
            self.stuck_leases
                .with_label_values(&[k])
                .set(r.stuck_leases as i64);
        }
        if r.outcome == Outcome::Success {
            let now = chrono::Utc::now().timestamp_millis() as f64 / 1000.0;
            self.last_success.with_label_values(&[k]).set(now);
        }
        self.set_dry_run(r.dry_run);
    }

    /// Shows dry-run mode (`seatflow_reconciler_dry_run`); also set by every
    /// recorded run.
    pub fn set_dry_run(&self, on: bool) {
        self.dry_run.set(on as i64);
    }

    /// Shows the schema's deviations as a run last read them (rule 17):
    /// one series each, 1 while it holds repairs back; a deviation that is
    /// gone loses its series.
    pub fn show_contract(&self, deviations: &[crate::jobs::contract::DeviationReport]) {
        self.contract_deviations.reset();
        for d in deviations {
            self.contract_deviations
                .with_label_values(&[d.table, d.column, d.kind])
                .set(i64::from(d.holds));
        }
    }

    /// Whether a family is the process's own (`build_info`, `dry_run`, the
    /// schema's deviations, `process_*`) rather than a job's: pushed once
    /// per run, not per job.
    pub fn is_process_family(name: &str) -> bool {
        matches!(
            name,
            "seatflow_reconciler_build_info"
                | "seatflow_reconciler_dry_run"
                | "seatflow_reconcile_contract_deviations"
        ) || name.starts_with("process_")
    }

    /// Zeroes what the last scan found (a standby's, which is not current).
    pub fn clear_scan_gauges(&self, kind: Kind) {
        let k = kind.label();
        self.drift.with_label_values(&[k]).set(0);
        self.deferred.with_label_values(&[k]).set(0);
        self.backlog.with_label_values(&[k]).set(0);
        self.stuck_leases.with_label_values(&[k]).set(0);
    }

    pub fn record_skipped_overlap(&self, kind: Kind) {
        self.runs
            .with_label_values(&[kind.label(), SKIPPED_OVERLAP])
            .inc();
    }

    pub fn set_dependency(&self, dependency: &str, up: bool) {
        self.dependency_up
            .with_label_values(&[dependency])
            .set(up as i64);
    }

    /// The Prometheus text exposition.
    pub fn encode(&self) -> String {
        Self::encode_families(&self.gather())
    }

    pub fn gather(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.registry.gather()
    }

    pub fn encode_families(families: &[prometheus::proto::MetricFamily]) -> String {
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(families, &mut buf)
            .expect("text encoding");
        String::from_utf8(buf).expect("utf-8 exposition")
    }
}

/// The daemon's passes (one active runner per shard) and their pace. Only
/// the daemon registers them: a `once` run has no schedule to keep.
#[derive(Clone)]
pub struct PassMetrics {
    pub active: IntGaugeVec,
    pub last_completed: GaugeVec,
    pub handovers: IntCounterVec,
    pub overruns: prometheus::IntCounter,
    pub pace: prometheus::Gauge,
    pub backoffs: IntCounterVec,
    /// The last pass's pace and the shards it would fit at (`pass_fit`).
    pub showtimes_per_second: GaugeVec,
    pub shards_to_fit: IntGaugeVec,
    /// From one fire of `sweep.schedule` to the next: what the pass-stalled
    /// alert counts in (the `auto` schedule is a minute or 15).
    pub interval: prometheus::Gauge,
}

impl PassMetrics {
    /// The pass metrics, every `shard` series at 0, not yet exported
    /// ([`Metrics::export_passes`]): a daemon without seat jobs has no pass,
    /// and exports none of them.
    pub fn new(shards: u32) -> PassMetrics {
        let shard = &["shard"];
        let m = PassMetrics {
            active: IntGaugeVec::new(
                Opts::new(
                    "seatflow_reconcile_pass_active",
                    "1 when this process ran the shard's latest seat pass, 0 when it stood by.",
                ),
                shard,
            )
            .unwrap(),
            last_completed: GaugeVec::new(
                Opts::new(
                    "seatflow_reconcile_pass_last_completed_timestamp_seconds",
                    "When this process last completed a pass of the shard (max over processes: the last pass by anyone).",
                ),
                shard,
            )
            .unwrap(),
            handovers: IntCounterVec::new(
                Opts::new(
                    "seatflow_reconcile_pass_handovers_total",
                    "Passes this process ran whose shard's previous pass another instance ran.",
                ),
                shard,
            )
            .unwrap(),
            overruns: prometheus::IntCounter::new(
                "seatflow_reconcile_pass_overruns_total",
                "Passes that reached the next fire before the end of the estate (the rest continues next pass).",
            )
            .unwrap(),
            pace: prometheus::Gauge::new(
                "seatflow_reconcile_pace_hashes_per_second",
                "The current pace of seat hash reads in passes (0: unpaced).",
            )
            .unwrap(),
            backoffs: IntCounterVec::new(
                Opts::new(
                    "seatflow_reconcile_pace_backoffs_total",
                    "Times the pace was halved because this store answered slower than usual.",
                ),
                &["store"],
            )
            .unwrap(),
            showtimes_per_second: GaugeVec::new(
                Opts::new(
                    "seatflow_reconcile_pass_showtimes_per_second",
                    "Showtimes this process's last pass of the shard swept per second.",
                ),
                shard,
            )
            .unwrap(),
            shards_to_fit: IntGaugeVec::new(
                Opts::new(
                    "seatflow_reconcile_pass_shards_to_fit",
                    "sharding.total at which a pass of each shard takes at most 80 % of the sweep interval, at the last pass's pace.",
                ),
                shard,
            )
            .unwrap(),
            interval: prometheus::Gauge::new(
                "seatflow_reconcile_pass_interval_seconds",
                "From one fire of sweep.schedule to the next, in seconds (0: no schedule).",
            )
            .unwrap(),
        };
        for i in 0..shards {
            let i = i.to_string();
            m.active.with_label_values(&[&i]);
            m.last_completed.with_label_values(&[&i]);
            m.handovers.with_label_values(&[&i]);
            m.showtimes_per_second.with_label_values(&[&i]);
            m.shards_to_fit.with_label_values(&[&i]);
        }
        for (store, _) in Backoffs::default().by_store() {
            m.backoffs.with_label_values(&[store]);
        }
        m
    }
}

impl PassMetrics {
    /// Shows the pacer's state: its pace, and its back-offs so far (the
    /// counter catches up with the pacer's own count).
    pub fn show_pace(&self, rate: f64, backoffs: Backoffs) {
        self.pace.set(rate);
        for (store, count) in backoffs.by_store() {
            let c = self.backoffs.with_label_values(&[store]);
            c.inc_by(count.saturating_sub(c.get()));
        }
    }
}

/// The change-driven checks' families (src/changes/), exported by a daemon
/// whose changes are on.
#[derive(Clone)]
pub struct ChangeMetrics {
    /// Keyspace notifications on seat hashes received (probe ones excluded).
    pub events: prometheus::IntCounter,
    /// Of those, our own repair scripts' writes: no check is asked for them.
    pub own_events: prometheus::IntCounter,
    /// Moments a source may have missed a change, by `reason`.
    pub gaps: IntCounterVec,
    /// Checks of a showtime run, by `source` (what asked for it).
    pub checks: IntCounterVec,
    /// Repairs made by checks, by `kind` and `source`.
    pub fixes: IntCounterVec,
    /// Repairs a pass made while every configured source was on with no gap,
    /// where no check was due within seconds: missed by the checks.
    pub missed: IntCounterVec,
    /// The drift ages of the checks' repairs, by `kind` and `source`.
    pub drift_age: HistogramVec,
    pub queue_depth: IntGauge,
    pub queue_oldest_due: prometheus::Gauge,
    /// 1 for the Redis events' current state (`on`, `off`, ...), 0 for the rest.
    pub redis_events: IntGaugeVec,
}

/// Why a change may have been missed (`seatflow_reconcile_change_gaps_total{reason}`).
/// `topology_changed`: a Redis Cluster's primaries or their slots changed
/// (a failover, a resharding), and the subscription was made again.
/// `start`: the daemon started (nobody listened before), and its first pass
/// ran at once instead of at the schedule's first fire.
/// `binlog_lost`: the MySQL binlog stream ended or failed (or started
/// again: commits before its new position were not read).
/// `binlog_position_lost`: the binlog reader could not resume where it (or
/// the shard's reader before it) stopped: the saved position belongs to
/// another server, or the server cannot send from it (purged), and it read
/// on from the server's current position.
pub const GAP_REASONS: [&str; 7] = [
    "connection_lost",
    "queue_full",
    "events_stopped",
    "topology_changed",
    "start",
    "binlog_lost",
    "binlog_position_lost",
];

impl ChangeMetrics {
    /// Every series at 0, for the enabled jobs `kinds` and each check's
    /// `sources`.
    pub fn new(kinds: &[Kind], sources: &[&str]) -> ChangeMetrics {
        let m = ChangeMetrics {
            events: prometheus::IntCounter::new(
                "seatflow_reconcile_change_events_total",
                "Redis keyspace notifications received on seat hashes.",
            )
            .unwrap(),
            own_events: prometheus::IntCounter::new(
                "seatflow_reconcile_change_events_own_total",
                "Of the keyspace notifications on seat hashes, those of the reconciler's own repair writes (inside its scripts' writing bracket): no check is asked for them.",
            )
            .unwrap(),
            gaps: IntCounterVec::new(
                Opts::new(
                    "seatflow_reconcile_change_gaps_total",
                    "Moments a change may have been missed (a subscription lost, a full queue, events stopped, a Redis Cluster topology changed, the binlog stream or its position lost); each starts a pass.",
                ),
                &["reason"],
            )
            .unwrap(),
            checks: IntCounterVec::new(
                Opts::new(
                    "seatflow_reconcile_change_checks_total",
                    "Showtimes checked between passes, by what asked for the check.",
                ),
                &["source"],
            )
            .unwrap(),
            fixes: IntCounterVec::new(
                Opts::new(
                    "seatflow_reconcile_change_fixes_total",
                    "Repairs made by checks between passes (also counted in seatflow_reconcile_fixes_total).",
                ),
                &["kind", "source"],
            )
            .unwrap(),
            missed: IntCounterVec::new(
                Opts::new(
                    "seatflow_reconcile_change_missed_total",
                    "Repairs a pass made while every configured change source was on with no gap since the previous pass, in showtimes no check was due for within seconds: drift the change-driven checks missed (with Redis events alone, MySQL-only changes among them).",
                ),
                &["kind"],
            )
            .unwrap(),
            drift_age: HistogramVec::new(
                HistogramOpts::new(
                    "seatflow_reconcile_change_drift_age_seconds",
                    "seatflow_reconcile_drift_age_seconds of the repairs made by checks between passes, by what asked for the check (the passes' are the rest).",
                )
                .buckets(DRIFT_AGE_BUCKETS.to_vec()),
                &["kind", "source"],
            )
            .unwrap(),
            queue_depth: IntGauge::new(
                "seatflow_reconcile_change_queue_depth",
                "Showtimes waiting for a check.",
            )
            .unwrap(),
            queue_oldest_due: prometheus::Gauge::new(
                "seatflow_reconcile_change_queue_oldest_due_seconds",
                "How long the most overdue waiting showtime has been due.",
            )
            .unwrap(),
            redis_events: IntGaugeVec::new(
                Opts::new(
                    "seatflow_reconcile_redis_events",
                    "1 for whether Redis sends the keyspace notifications the checks need: on, off, unknown (not probed yet), unavailable (no subscription), disabled (changes.redis_events = off) or standby (another replica runs the shard's passes and listens).",
                ),
                &["state"],
            )
            .unwrap(),
        };
        for r in GAP_REASONS {
            m.gaps.with_label_values(&[r]);
        }
        for k in kinds.iter().filter(|k| k.is_seat_job()) {
            m.missed.with_label_values(&[k.label()]);
        }
        for src in sources {
            m.checks.with_label_values(&[src]);
            for k in kinds {
                m.fixes.with_label_values(&[k.label(), src]);
                m.drift_age.with_label_values(&[k.label(), src]);
            }
        }
        m
    }

    /// Shows the Redis events' state: 1 for `state`, 0 for the rest of `all`.
    pub fn show_redis_events(&self, state: &str, all: &[&str]) {
        for s in all {
            self.redis_events
                .with_label_values(&[s])
                .set((*s == state) as i64);
        }
    }
}

impl Metrics {
    /// Exports the change-driven checks' metrics (the daemon, changes on).
    pub fn export_changes(&self, m: &ChangeMetrics) {
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(m.events.clone()),
            Box::new(m.own_events.clone()),
            Box::new(m.gaps.clone()),
            Box::new(m.checks.clone()),
            Box::new(m.fixes.clone()),
            Box::new(m.missed.clone()),
            Box::new(m.drift_age.clone()),
            Box::new(m.queue_depth.clone()),
            Box::new(m.queue_oldest_due.clone()),
            Box::new(m.redis_events.clone()),
        ];
        self.register(collectors);
    }

    /// Adds families to this registry (also those kept elsewhere: the
    /// context's denials, rule 18).
    pub fn register(&self, collectors: Vec<Box<dyn prometheus::core::Collector>>) {
        for c in collectors {
            self.registry.register(c).expect("metric names are unique");
        }
    }

    /// Records what a check's job report shares with any run's (`record`
    /// adds the rest): its repairs, errors and drift ages. The scan gauges
    /// and run counters are the runs' alone (a check of a few showtimes
    /// says nothing of the estate).
    pub fn record_check(&self, r: &JobReport) {
        let k = r.kind.label();
        self.fixes.with_label_values(&[k]).inc_by(r.fixed);
        self.mutex_busy
            .with_label_values(&[k])
            .inc_by(r.skipped_busy);
        self.skipped_locked
            .with_label_values(&[k])
            .inc_by(r.skipped_locked);
        for (stage, n) in &r.errors_by_stage {
            self.errors
                .with_label_values(&[k, stage.label()])
                .inc_by(*n);
        }
        let ages = self.drift_age.with_label_values(&[k]);
        for seconds in r.drift_ages.replay() {
            ages.observe(seconds);
        }
    }
}

impl Metrics {
    /// Exports the pass metrics (the daemon, when it has seat jobs).
    pub fn export_passes(&self, m: &PassMetrics) {
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(m.active.clone()),
            Box::new(m.last_completed.clone()),
            Box::new(m.handovers.clone()),
            Box::new(m.overruns.clone()),
            Box::new(m.pace.clone()),
            Box::new(m.backoffs.clone()),
            Box::new(m.showtimes_per_second.clone()),
            Box::new(m.shards_to_fit.clone()),
            Box::new(m.interval.clone()),
        ];
        self.register(collectors);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_and_its_back_offs_are_shown_as_the_pacer_counts_them() {
        let m = PassMetrics::new(1);
        let b = |redis, mysql| Backoffs { redis, mysql };
        let shown = |store: &str| m.backoffs.with_label_values(&[store]).get();
        m.show_pace(2000.0, b(0, 0));
        m.show_pace(500.0, b(2, 0));
        m.show_pace(600.0, b(2, 0));
        assert_eq!(m.pace.get(), 600.0);
        assert_eq!((shown("redis"), shown("mysql")), (2, 0));
        m.show_pace(300.0, b(2, 1));
        assert_eq!((shown("redis"), shown("mysql")), (2, 1));
    }

    #[test]
    fn every_labelled_series_exists_from_start() {
        let text = Metrics::new().encode();
        for k in Kind::ALL.map(Kind::label) {
            assert!(text.contains(&format!("seatflow_reconcile_fixes_total{{kind=\"{k}\"}} 0")));
            assert!(text.contains(&format!(
                "seatflow_reconcile_runs_total{{kind=\"{k}\",outcome=\"skipped_overlap\"}} 0"
            )));
            assert!(text.contains(&format!(
                "seatflow_reconcile_errors_total{{kind=\"{k}\",stage=\"invalid_data\"}} 0"
            )));
            assert!(text.contains(&format!(
                "seatflow_reconcile_stuck_leases{{kind=\"{k}\"}} 0"
            )));
        }
        assert!(text.contains("seatflow_reconciler_build_info{version="));
        assert!(!text.contains("job=") && !text.contains("instance="));
    }

    #[test]
    fn a_job_that_does_not_run_has_no_series() {
        let text = Metrics::for_jobs(&[Kind::ExpiredOrders]).encode();
        assert!(text.contains("seatflow_reconcile_runs_total{kind=\"expired_orders\""));
        for k in Kind::SEAT_JOBS.map(Kind::label) {
            assert!(!text.contains(&format!("kind=\"{k}\"")), "{k}:\n{text}");
        }
        assert!(
            !text.contains("seatflow_reconcile_pass_"),
            "no pass, no pass series"
        );
        let m = Metrics::for_jobs(&Kind::SEAT_JOBS);
        m.export_passes(&PassMetrics::new(2));
        let text = m.encode();
        assert!(
            text.contains(
                "seatflow_reconcile_pass_last_completed_timestamp_seconds{shard=\"1\"} 0"
            )
        );
    }

    #[test]
    fn a_report_moves_the_counters() {
        let m = Metrics::new();
        let mut r = JobReport::new(Kind::OrphanLocks);
        r.fixed = 3;
        r.drift = 4;
        r.skipped_busy = 1;
        r.stuck_leases = 1;
        r.invalid();
        r.finish();
        m.record(&r);
        let text = m.encode();
        assert!(text.contains("seatflow_reconcile_fixes_total{kind=\"orphan_locks\"} 3"));
        assert!(text.contains("seatflow_reconcile_drift{kind=\"orphan_locks\"} 4"));
        assert!(text.contains("seatflow_reconcile_mutex_busy_total{kind=\"orphan_locks\"} 1"));
        assert!(text.contains("seatflow_reconcile_stuck_leases{kind=\"orphan_locks\"} 1"));
        assert!(text.contains(
            "seatflow_reconcile_runs_total{kind=\"orphan_locks\",outcome=\"success\"} 1"
        ));
        assert!(text.contains(
            "seatflow_reconcile_errors_total{kind=\"orphan_locks\",stage=\"invalid_data\"} 1"
        ));
    }

    #[test]
    fn drift_ages_dry_run_and_process_metrics_are_exported() {
        let m = Metrics::new();
        let text = m.encode();
        for k in Kind::ALL.map(Kind::label) {
            assert!(
                text.contains(&format!(
                    "seatflow_reconcile_drift_age_seconds_count{{kind=\"{k}\"}} 0"
                )),
                "{text}"
            );
        }
        assert!(text.contains("seatflow_reconciler_dry_run 0"), "{text}");
        #[cfg(target_os = "linux")]
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_start_time_seconds",
            "process_open_fds",
        ] {
            assert!(
                text.contains(&format!("\n{name} ")),
                "{name} missing:\n{text}"
            );
        }
        // The mixin's drift-age objective (300 s) is a bucket boundary.
        assert!(DRIFT_AGE_BUCKETS.contains(&300.0));

        let mut r = JobReport::new(Kind::SoldOrphans);
        r.fixed = 3;
        r.observe_drift_age(2_000);
        r.observe_drift_age(150_000);
        r.observe_drift_age(400_000);
        r.dry_run = true;
        r.finish();
        m.record(&r);
        let text = m.encode();
        for (le, n) in [
            ("1", 0),
            ("5", 1),
            ("180", 2),
            ("300", 2),
            ("600", 3),
            ("+Inf", 3),
        ] {
            let line = format!(
                "seatflow_reconcile_drift_age_seconds_bucket{{kind=\"sold_orphans\",le=\"{le}\"}} {n}"
            );
            assert!(text.contains(&line), "{line} missing:\n{text}");
        }
        assert!(
            text.contains("seatflow_reconcile_drift_age_seconds_sum{kind=\"sold_orphans\"} 552")
        );
        assert!(text.contains("seatflow_reconciler_dry_run 1"));
    }
}
