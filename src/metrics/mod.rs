//! Every metric family in one place, with exactly the spec's names, types
//! and labels. Every labelled series of a job that runs exists (as 0) from
//! start, so dashboards and alerts see a series before the first repair; a
//! job or pass that does not run has none, so no 0 reads as "never ran".
//! Both `run` and `once`
//! record through [`Metrics::record`], so both modes report alike.
//!
//! Which file holds what: here the registry and [`Metrics`], the jobs'
//! families and the process's (build, dependencies, dry run, the schema's
//! deviations); `pass.rs` the daemon's passes ([`PassMetrics`]);
//! `changes.rs` the change-driven checks ([`ChangeMetrics`]);
//! `families.rs` how each part makes its families: each one made, listed
//! for the registry and its series created at 0 in one step.

// Every family is defined here, with names and labels of ours: a failure to
// register one is a bug caught by the tests, never a condition of the data.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

mod changes;
mod families;
mod pass;
#[cfg(target_os = "linux")]
pub mod process;
pub mod seat_reads;
pub mod telemetry;

pub use self::changes::{ChangeMetrics, GAP_REASONS};
pub use self::pass::PassMetrics;

use self::families::Families;
use crate::error::Stage;
use crate::model::Kind;
use crate::run::jobs::report::{JobReport, Outcome};

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
pub use crate::run::jobs::report::DRIFT_AGE_BUCKETS;

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
        let kind = &["kind"];
        // The series that exist at 0 from start: one per job that runs (by
        // outcome, or by stage, where the family has one).
        let per_job = || jobs.iter().map(|k| [k.label()]);
        let by_outcome = jobs.iter().flat_map(|k| {
            let outcomes = Outcome::ALL.map(Outcome::label).into_iter();
            outcomes
                .chain([SKIPPED_OVERLAP])
                .map(move |o| [k.label(), o])
        });
        let by_stage = jobs
            .iter()
            .flat_map(|k| Stage::ALL.map(|s| [k.label(), s.label()]));
        let mut f = Families::default();
        let fixes = f.add_at_zero(
            IntCounterVec::new(
                Opts::new("seatflow_reconcile_fixes_total", "Repairs applied, by job."),
                kind,
            )
            .unwrap(),
            per_job(),
        );
        let drift = f.add_at_zero(
            IntGaugeVec::new(
                Opts::new(
                    "seatflow_reconcile_drift",
                    "Drift found by the last completed scan, by job.",
                ),
                kind,
            )
            .unwrap(),
            per_job(),
        );
        let deferred = f.add_at_zero(
            IntGaugeVec::new(
                Opts::new(
                    "seatflow_reconcile_deferred",
                    "Orphan suspects waiting out the grace period, by job.",
                ),
                kind,
            )
            .unwrap(),
            per_job(),
        );
        let runs = f.add_at_zero(
            IntCounterVec::new(
                Opts::new(
                    "seatflow_reconcile_runs_total",
                    "Job runs, by job and outcome.",
                ),
                &["kind", "outcome"],
            )
            .unwrap(),
            by_outcome,
        );
        let run_duration = f.add_at_zero(
            HistogramVec::new(
                HistogramOpts::new(
                    "seatflow_reconcile_run_duration_seconds",
                    "Wall time of a job run, by job.",
                )
                .buckets(DURATION_BUCKETS.to_vec()),
                kind,
            )
            .unwrap(),
            per_job(),
        );
        let last_success = f.add_at_zero(
            GaugeVec::new(
                Opts::new(
                    "seatflow_reconcile_last_success_timestamp_seconds",
                    "Unix time of the last successful run, by job (0 = never).",
                ),
                kind,
            )
            .unwrap(),
            per_job(),
        );
        let errors = f.add_at_zero(
            IntCounterVec::new(
                Opts::new(
                    "seatflow_reconcile_errors_total",
                    "Errors by job and stage (mysql, redis, lock, audit, invalid_data).",
                ),
                &["kind", "stage"],
            )
            .unwrap(),
            by_stage,
        );
        let mutex_busy = f.add_at_zero(
            IntCounterVec::new(
                Opts::new(
                    "seatflow_reconcile_mutex_busy_total",
                    "Showtimes skipped because another holder had their showtime lease, by job.",
                ),
                kind,
            )
            .unwrap(),
            per_job(),
        );
        let skipped_locked = f.add_at_zero(
            IntCounterVec::new(
                Opts::new(
                    "seatflow_reconcile_skipped_locked_total",
                    "Items skipped because another MySQL transaction held their rows (expired orders the application is changing), not waited for; a later run takes them. By job.",
                ),
                kind,
            )
            .unwrap(),
            per_job(),
        );
        let backlog = f.add_at_zero(
            IntGaugeVec::new(
                Opts::new(
                    "seatflow_reconcile_backlog",
                    "Drift and showtimes left for later runs after the last run, by job.",
                ),
                kind,
            )
            .unwrap(),
            per_job(),
        );
        let stuck_leases = f.add_at_zero(
            IntGaugeVec::new(
                Opts::new(
                    "seatflow_reconcile_stuck_leases",
                    "Showtime leases without expiry held by someone else, met by the last run, by job (rule 13).",
                ),
                kind,
            )
            .unwrap(),
            per_job(),
        );
        let scanned = f.add_at_zero(
            IntCounterVec::new(
                Opts::new(
                    "seatflow_reconcile_scanned_total",
                    "Showtimes (orders, for expired_orders) scanned, by job.",
                ),
                kind,
            )
            .unwrap(),
            per_job(),
        );
        let build_info = f.add(
            IntGaugeVec::new(
                Opts::new(
                    "seatflow_reconciler_build_info",
                    "Always 1; the version label tells the build.",
                ),
                &["version"],
            )
            .unwrap(),
        );
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let dependency_up = f.add_at_zero(
            IntGaugeVec::new(
                Opts::new(
                    "seatflow_reconciler_dependency_up",
                    "1 when the last probe (every 10 s, and on /readyz) reached the dependency, else 0.",
                ),
                &["dependency"],
            )
            .unwrap(),
            DEPENDENCIES.map(|d| [d]),
        );
        let drift_age = f.add_at_zero(
            HistogramVec::new(
                HistogramOpts::new(
                    "seatflow_reconcile_drift_age_seconds",
                    "How long a repaired drift had been seen before its repair (first sighting to repair), by job.",
                )
                .buckets(DRIFT_AGE_BUCKETS.to_vec()),
                kind,
            )
            .unwrap(),
            per_job(),
        );
        let dry_run = f.add(
            IntGauge::new(
                "seatflow_reconciler_dry_run",
                "1 when the reconciler runs in dry-run mode (detects and reports, writes nothing), else 0.",
            )
            .unwrap(),
        );
        // `kind` here is the deviation's kind (nullable, type, collation, …),
        // as the issue that named the family gave it; the jobs' `kind` is
        // on no series of this family.
        let contract_deviations = f.add(
            IntGaugeVec::new(
                Opts::new(
                    "seatflow_reconcile_contract_deviations",
                    "Ways the schema deviates from the contract, by table, column (or key) and kind of deviation: 1 while it holds repairs back, 0 while it is proved harmless on the data (rule 17; no series: as the contract has it).",
                ),
                &["table", "column", "kind"],
            )
            .unwrap(),
        );
        let registry = Registry::new();
        f.register(&registry);
        // The standard process_* metrics (CPU, memory, file descriptors,
        // start time) of this process; Linux only (they read /proc).
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(crate::metrics::process::ProcessMetrics::for_self()))
            .expect("process metric names are unique");
        Metrics {
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
        }
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
    pub fn show_contract(&self, deviations: &[crate::run::jobs::deviations::DeviationReport]) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
