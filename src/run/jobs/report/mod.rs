//! What a job run reports: the counters metrics and exit codes are derived
//! from, the `once --output json` shape (the fields below), and the text
//! table. Here the counting; `render.rs` shows a report (text, JSON, log
//! line).

mod render;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::Denial;
use crate::error::{Error, Stage};
use crate::model::Kind;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Success,
    Partial,
    Failure,
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Success, Outcome::Partial, Outcome::Failure];

    pub const fn label(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Partial => "partial",
            Outcome::Failure => "failure",
        }
    }
}

/// Drift ages from a sweep (seconds) to a day; 300 s is the monitoring
/// mixin's drift-age objective (`driftAgeObjectiveSeconds`) and must stay a
/// boundary.
pub const DRIFT_AGE_BUCKETS: [f64; 14] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 1800.0, 3600.0, 10800.0, 21600.0,
    86400.0,
];

/// A run's drift ages in `DRIFT_AGE_BUCKETS` (and one above the last): how
/// many fell in each, and their sum. A fixed size whatever the number of
/// repairs (a `Vec` of every age grew with them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DriftAges {
    /// Per bucket: (observations, their sum in seconds).
    buckets: [(u64, f64); DRIFT_AGE_BUCKETS.len() + 1],
}

impl DriftAges {
    pub fn observe(&mut self, ms: u64) {
        let seconds = ms as f64 / 1000.0;
        // Prometheus' rule: a value falls in the first bucket whose upper
        // bound is at or above it.
        let i = DRIFT_AGE_BUCKETS.partition_point(|&le| le < seconds);
        let (n, sum) = &mut self.buckets[i];
        *n += 1;
        *sum += seconds;
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|(n, _)| n).sum()
    }

    /// The observations to replay into a histogram with the same buckets:
    /// each bucket's mean, as many times as it had values. The mean lies
    /// within its bucket, so counts per bucket and the sum come out exact.
    pub fn replay(&self) -> impl Iterator<Item = f64> + '_ {
        self.buckets
            .iter()
            .filter(|(n, _)| *n > 0)
            .flat_map(|&(n, sum)| std::iter::repeat_n(sum / n as f64, n as usize))
    }
}

/// Most examples of drift a report keeps per job (for the text report).
pub const MAX_EXAMPLES: usize = 5;

#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    #[serde(serialize_with = "render::serialize_kind")]
    pub kind: Kind,
    pub outcome: Outcome,
    /// Showtimes scanned (orders, for expired_orders).
    pub scanned: u64,
    /// Drift found: seats, hashes or orders.
    pub drift: u64,
    /// Repairs applied.
    pub fixed: u64,
    /// Suspects waiting out the grace period.
    pub deferred: u64,
    /// Showtimes skipped because another holder had their showtime lease.
    pub skipped_busy: u64,
    /// Among them, showtime leases without expiry that are not ours (rule
    /// 13): they never expire on their own; an operator must look.
    pub stuck_leases: u64,
    /// Operational errors (mysql, redis, lock, audit) after retries.
    pub errors: u64,
    /// Drift left for later runs, plus showtimes not scanned this run.
    pub backlog: u64,
    /// Bad data seen and left alone.
    pub invalid_data: u64,
    /// Repairs the schema's deviations held back (rule 17).
    #[serde(skip_serializing_if = "render::is_zero")]
    pub held_back: u64,
    /// Items skipped because another MySQL transaction held their rows
    /// (expired orders the application is paying or cancelling): not waited
    /// for, left to a later run.
    #[serde(skip_serializing_if = "render::is_zero")]
    pub skipped_locked: u64,
    /// Showtimes whose work kept failing after retries: skipped for this run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quarantined: Vec<i64>,
    /// Errors by stage (`mysql`, `redis`, `lock`, `audit`, `invalid_data`),
    /// as counted in `seatflow_reconcile_errors_total`.
    #[serde(
        serialize_with = "render::serialize_stages",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub errors_by_stage: BTreeMap<Stage, u64>,
    /// The first drift found (at most MAX_EXAMPLES), as in the text report.
    #[serde(rename = "drift_examples", skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    /// The first error messages (at most MAX_EXAMPLES; secrets redacted).
    #[serde(rename = "error_messages", skip_serializing_if = "Vec::is_empty")]
    pub error_messages: Vec<String>,
    /// Permissions a store refused (rule 18): how often, and the last
    /// error's words. Counted by the metrics, shown by `/status`.
    #[serde(skip)]
    pub denied: BTreeMap<Denial, (u64, String)>,
    pub duration_ms: u64,
    /// Set when the job could not go on (its last error).
    #[serde(rename = "stopped_by", skip_serializing_if = "Option::is_none")]
    pub fatal: Option<String>,
    /// Set when every chunk it scanned failed: nothing was checked.
    #[serde(skip)]
    pub nothing_completed: bool,
    /// The pass reached its deadline (the next fire) before the end of the
    /// estate: the rest continues in the next pass.
    #[serde(skip)]
    pub cut_short: bool,
    /// ON_SALE showtimes in the sweep's scope, where it counted them (a
    /// pass on a schedule, or with progress shown).
    #[serde(skip)]
    pub estate: Option<u64>,
    /// How long each repaired drift had been seen before its repair (first
    /// sighting → repair): the `seatflow_reconcile_drift_age_seconds`
    /// observations of this run, kept per bucket so a run of any size holds
    /// the same few numbers.
    #[serde(skip)]
    pub drift_ages: DriftAges,
    /// The run wrote nothing (rule 5): shown by `seatflow_reconciler_dry_run`.
    #[serde(skip)]
    pub dry_run: bool,
}

impl JobReport {
    pub fn new(kind: Kind) -> JobReport {
        JobReport {
            kind,
            outcome: Outcome::Success,
            scanned: 0,
            drift: 0,
            fixed: 0,
            deferred: 0,
            skipped_busy: 0,
            stuck_leases: 0,
            errors: 0,
            backlog: 0,
            invalid_data: 0,
            held_back: 0,
            skipped_locked: 0,
            quarantined: Vec::new(),
            errors_by_stage: BTreeMap::new(),
            examples: Vec::new(),
            error_messages: Vec::new(),
            denied: BTreeMap::new(),
            duration_ms: 0,
            fatal: None,
            nothing_completed: false,
            cut_short: false,
            estate: None,
            drift_ages: DriftAges::default(),
            dry_run: false,
        }
    }

    /// Records how long one repaired drift had been seen before this repair
    /// (first sighting → repair), in milliseconds.
    pub fn observe_drift_age(&mut self, ms: u64) {
        self.drift_ages.observe(ms);
    }

    /// Records a repair, applied now, of drift first seen at `first_seen_ms`
    /// (Unix milliseconds: a suspect record's first sighting, or the scan
    /// that found it for kinds without one). A clock step backwards counts 0.
    pub fn observe_drift_since(&mut self, first_seen_ms: i64) {
        let now = chrono::Utc::now().timestamp_millis();
        self.observe_drift_age((now - first_seen_ms).max(0) as u64);
    }

    /// Counts an operational error under its stage and keeps its message
    /// (the first MAX_EXAMPLES).
    pub fn error(&mut self, e: &Error) {
        self.error_at(e.stage());
        if let Some(d) = Denial::of(e) {
            let seen = self.denied.entry(d).or_default();
            seen.0 += 1;
            seen.1 = e.to_string();
        }
        if self.error_messages.len() < MAX_EXAMPLES {
            self.error_messages.push(e.to_string());
        }
    }

    pub fn error_at(&mut self, stage: Stage) {
        self.errors += 1;
        *self.errors_by_stage.entry(stage).or_default() += 1;
    }

    pub fn invalid(&mut self) {
        self.invalid_data += 1;
        *self.errors_by_stage.entry(Stage::InvalidData).or_default() += 1;
    }

    pub fn example(&mut self, text: impl FnOnce() -> String) {
        if self.examples.len() < MAX_EXAMPLES {
            self.examples.push(text());
        }
    }

    /// Counts an error that made these showtimes be skipped for the run.
    pub fn quarantine(&mut self, e: &Error, showtimes: impl IntoIterator<Item = i64>) {
        self.error(e);
        self.quarantined.extend(showtimes);
        self.quarantined.sort_unstable();
        self.quarantined.dedup();
    }

    /// The job stopped early on an error it could not get past.
    pub fn fail(&mut self, e: &Error) {
        self.error(e);
        self.fatal = Some(e.to_string());
    }

    /// Settles the outcome: failure when it stopped before doing anything
    /// (or every chunk failed), partial when it stopped later or some items
    /// failed, else success.
    pub fn finish(&mut self) {
        self.outcome = match (&self.fatal, self.errors) {
            (Some(_), _) if self.scanned == 0 || self.nothing_completed => Outcome::Failure,
            (Some(_), _) => Outcome::Partial,
            (None, 0) => Outcome::Success,
            (None, _) => Outcome::Partial,
        };
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub run_id: String,
    pub dry_run: bool,
    pub duration_ms: u64,
    /// Redis round trips this run made (a pipeline counts once).
    pub redis_round_trips: u64,
    pub fixed: BTreeMap<&'static str, u64>,
    pub jobs: Vec<JobReport>,
    /// Jobs that did not run because another reconciler has their pass.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedJob>,
    /// A change-driven check: what asked for it (`RunOptions::check`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<&'static str>,
    /// How the schema deviates from the contract, as the run read it
    /// (rule 17): the holding ones first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub contract_deviations: Vec<super::deviations::DeviationReport>,
}

/// Why a job of the run did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Another reconciler holds the shard's pass lease.
    PassHeld,
    /// This schedule slot's pass was already done by another reconciler.
    PassDone,
}

/// A seat job that stood by: who has its shard's pass, since when.
#[derive(Debug, Clone, Serialize)]
pub struct SkippedJob {
    #[serde(serialize_with = "render::serialize_kind")]
    pub kind: Kind,
    pub reason: SkipReason,
    pub shard: u32,
    pub holder: String,
    /// The holder's claim (or when the slot's pass was done); absent when
    /// its lease does not say (an older version's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<chrono::DateTime<chrono::Utc>>,
}

impl RunReport {
    pub fn new(run_id: String, dry_run: bool, jobs: Vec<JobReport>, duration_ms: u64) -> RunReport {
        let fixed = Kind::ALL
            .iter()
            .map(|k| {
                let n = jobs.iter().filter(|j| j.kind == *k).map(|j| j.fixed).sum();
                (k.fixed_counter(), n)
            })
            .collect();
        RunReport {
            run_id,
            dry_run,
            duration_ms,
            redis_round_trips: 0,
            fixed,
            jobs,
            skipped: Vec::new(),
            check: None,
            contract_deviations: Vec::new(),
        }
    }

    pub fn total_fixed(&self) -> u64 {
        self.jobs.iter().map(|j| j.fixed).sum()
    }

    /// The worst job outcome.
    pub fn outcome(&self) -> Outcome {
        if self.jobs.iter().any(|j| j.outcome == Outcome::Failure) {
            Outcome::Failure
        } else if self.jobs.iter().any(|j| j.outcome == Outcome::Partial) {
            Outcome::Partial
        } else {
            Outcome::Success
        }
    }

    /// `once` exits 0 when every job completed, else 1.
    pub fn exit_code(&self) -> i32 {
        match self.outcome() {
            Outcome::Success => 0,
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_ages_count_from_the_first_sighting() {
        let mut j = JobReport::new(Kind::OrphanLocks);
        let now = chrono::Utc::now().timestamp_millis();
        j.observe_drift_since(now - 150_000);
        j.observe_drift_since(now + 60_000); // a clock ahead of ours
        j.observe_drift_age(7);
        assert_eq!(j.drift_ages.count(), 3);
        let ages: Vec<f64> = j.drift_ages.replay().collect();
        // 0 and 0.007 s share the first bucket (mean 0.0035 s); the first
        // sighting 150 s ago falls in (120, 180].
        assert_eq!(ages.len(), 3);
        assert_eq!(ages[..2], [0.0035, 0.0035]);
        assert!((150.0..160.0).contains(&ages[2]), "{ages:?}");
    }

    #[test]
    fn drift_ages_keep_buckets_and_sum_in_fixed_size() {
        let mut a = DriftAges::default();
        // A bucket boundary belongs to the bucket it closes (le = 300).
        for ms in [300_000, 299_000, 301_000, 90_000_000] {
            a.observe(ms);
        }
        for _ in 0..100_000 {
            a.observe(2_000);
        }
        assert_eq!(a.count(), 100_004);
        let ages: Vec<f64> = a.replay().collect();
        let sum: f64 = ages.iter().sum();
        assert!((sum - (300.0 + 299.0 + 301.0 + 90_000.0 + 200_000.0)).abs() < 1e-3);
        let in_bucket = |lo: f64, hi: f64| ages.iter().filter(|&&v| v > lo && v <= hi).count();
        assert_eq!(in_bucket(1.0, 5.0), 100_000);
        assert_eq!(in_bucket(180.0, 300.0), 2);
        assert_eq!(in_bucket(300.0, 600.0), 1);
        assert_eq!(in_bucket(86_400.0, f64::INFINITY), 1);
        assert_eq!(std::mem::size_of::<DriftAges>(), 15 * 16);
    }

    #[test]
    fn outcomes_follow_errors() {
        let mut j = JobReport::new(Kind::PaidSeats);
        j.invalid();
        j.finish();
        assert_eq!(
            j.outcome,
            Outcome::Success,
            "bad data alone is not a failure"
        );
        j.error_at(Stage::Redis);
        j.finish();
        assert_eq!(j.outcome, Outcome::Partial);
        let mut k = JobReport::new(Kind::PaidSeats);
        k.fail(&Error::Protocol("down".into()));
        k.finish();
        assert_eq!(k.outcome, Outcome::Failure);
        assert_eq!(
            RunReport::new("r".into(), false, vec![j, k], 0).exit_code(),
            1
        );
    }
}
