//! What the runner shows: `/status` state per job and per shard, the
//! passes' cadence while a change source is down, and the metrics of each
//! run's report (a pass's fit, handovers, overruns; a check's counts).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Runner, lock};
use crate::capacity::{self, Capacity};
use crate::model::{Kind, Shard};
use crate::pass_fit::{self, PassFit};
use crate::run::jobs::pass_run::PassOutcome;
use crate::run::jobs::report::{JobReport, Outcome, RunReport};
use crate::run::pass_lease::Holding;

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
    /// Showtime leases without expiry held by someone else that the last
    /// completed run met (rule 13): those showtimes wait for an operator.
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

/// What `/status` shows for one shard's pass, as this process saw it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ShardStatus {
    /// This process holds the shard's pass lease (its own shard, kept
    /// between passes), or, taking none (a dry run), ran its latest pass.
    pub active: bool,
    /// Who holds this process's own shard's pass (`held`, `standby` with
    /// the holder, `no_holder` with why and since when); absent for the
    /// other shards and in a dry run (no lease).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<Holding>,
    /// What the latest fire found: `ran`, `standby`, `already_done`,
    /// `stuck_lease` (the pass lease has no expiry), `claim_failed`, or
    /// `dry_run` (no pass lease taken).
    pub last_fire: Option<&'static str>,
    /// The reconciler that held the pass when this one stood by.
    pub holder: Option<String>,
    /// The last pass this process knows of (its own or another's).
    pub last_pass_by: Option<String>,
    pub last_pass_finished_at: Option<DateTime<Utc>>,
    pub handovers: u64,
    pub overruns: u64,
    /// Whether the last pass this process ran fits the interval at its
    /// pace, and what would make it fit.
    pub fit: Option<PassFit>,
}

/// A pass every `every` while a change source is down, whatever
/// `pass.schedule` says (the 20-minute net of `auto` with both sources):
/// what the pass interval gauge, `/status` and so the pass-stalled alert
/// follow meanwhile.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Fallback {
    #[serde(serialize_with = "as_seconds", rename = "every_seconds")]
    pub every: Duration,
    /// When the next such pass is due.
    pub next_fire: DateTime<Utc>,
    /// Which source is down.
    pub why: String,
}

fn as_seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}

impl Runner {
    /// The passes' cadence in force: `fallback` while a change source is
    /// down, else the schedule's. The pass interval gauge follows it (so
    /// the pass-stalled alert counts in the minute, not the 20-minute net),
    /// and so do `/status`'s next fire of the seat jobs and its `pass`.
    pub fn set_fallback(&self, fallback: Option<Fallback>) {
        let interval = match &fallback {
            Some(f) => Some(f.every),
            None => self
                .ctx
                .pass_schedule
                .as_ref()
                .and_then(|s| s.interval_after(Utc::now())),
        };
        if let Some(interval) = interval {
            self.pass_metrics.interval.set(interval.as_secs_f64());
        }
        *lock(&self.fallback) = fallback;
    }

    /// The fallback cadence, while a change source is down.
    pub fn fallback(&self) -> Option<Fallback> {
        lock(&self.fallback).clone()
    }

    pub fn status(&self) -> BTreeMap<Kind, JobStatus> {
        let mut s = lock(&self.status).clone();
        let now = Utc::now();
        let fallback = self.fallback();
        for (k, st) in s.iter_mut() {
            st.next_fire = self.next_fire(*k, now);
            // A source down: the pass comes sooner than the schedule's fire.
            if let Some(f) = fallback.as_ref().filter(|_| k.is_seat_job()) {
                st.next_fire = Some(st.next_fire.map_or(f.next_fire, |n| n.min(f.next_fire)));
            }
        }
        s
    }

    /// When `kind` is next fired after `now` (None: disabled, or a
    /// schedule with no fire): the pass's schedule for a seat job.
    fn next_fire(&self, kind: Kind, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if !self.ctx.settings.job(kind).enabled {
            return None;
        }
        let schedule = match kind.is_seat_job() {
            true => self.ctx.pass_schedule.as_deref(),
            false => self.expired_orders_schedule.as_ref(),
        };
        schedule?.next_after(now)
    }

    pub fn shard_status(&self) -> BTreeMap<u32, ShardStatus> {
        self.holding();
        lock(&self.shards).clone()
    }

    /// What one replica carries at the rates measured here (its own
    /// shard's last pass, the checks of the last minutes), and the shards
    /// this estate and its traffic need (`capacity`).
    pub fn capacity(&self) -> Capacity {
        let fit = lock(&self.shards)
            .get(&self.ctx.shard.index)
            .and_then(|s| s.fit);
        let checks = self.changes.as_ref().and_then(|c| c.checks_per_second());
        let budget = self
            .changes
            .as_ref()
            .map(|_| self.ctx.settings.changes.max_checks_per_second);
        capacity::judge(fit.as_ref(), self.ctx.shard.total, checks, budget)
    }

    /// Shows the pacer's state in the pass metrics: after each pass and at
    /// each scrape, since the pace changes within a pass.
    pub fn show_pace(&self) {
        if let Some(c) = &self.changes {
            c.show_queue();
        }
        if let Some((rate, backoffs)) = self.pace() {
            self.pass_metrics.show_pace(rate, backoffs);
        }
    }

    pub(super) fn record_pass(
        &self,
        shard: Shard,
        outcome: &PassOutcome,
        report: &RunReport,
        interval: Option<Duration>,
    ) {
        let label = shard.index.to_string();
        let m = &self.pass_metrics;
        let mut shards = lock(&self.shards);
        let st = shards.entry(shard.index).or_default();
        let ran = |st: &mut ShardStatus| {
            st.active = true;
            st.holder = None;
            // The seat jobs share the sweep: one of them tells its size and time.
            let sweep = report.jobs.iter().find(|j| j.kind != Kind::ExpiredOrders);
            if let Some((j, interval)) = sweep.zip(interval) {
                // A pass too small to judge by leaves the last fit standing.
                let measured = pass_fit::measure(
                    j.scanned,
                    j.estate.unwrap_or(j.scanned),
                    j.cut_short,
                    Duration::from_millis(j.duration_ms),
                    interval,
                    shard.total,
                );
                if let Some(fit) = measured {
                    st.fit = Some(fit);
                    m.showtimes_per_second
                        .with_label_values(&[&label])
                        .set(fit.showtimes_per_second);
                    m.shards_to_fit
                        .with_label_values(&[&label])
                        .set(i64::from(fit.shards_to_fit));
                }
            }
            if report.jobs.iter().any(|j| j.cut_short) {
                st.overruns += 1;
                m.overruns.inc();
                let fit = st.fit.as_ref();
                tracing::warn!(
                    shard = shard.index,
                    showtimes_per_second = fit.map(|f| f.showtimes_per_second.round()),
                    showtimes = fit.map(|f| f.showtimes),
                    shards_to_fit = fit.map(|f| f.shards_to_fit),
                    interval_to_fit_seconds = fit.map(|f| f.interval_to_fit_seconds),
                    "the pass reached the next fire before the end of the estate; the rest continues in the next pass \
                     (at this pace a pass fits with shards_to_fit shards, or a schedule of interval_to_fit_seconds)"
                );
            }
        };
        match outcome {
            PassOutcome::NotNeeded => {
                ran(st);
                st.last_fire = Some(if report.dry_run { "dry_run" } else { "ran" });
                self.completed(st, &label);
            }
            PassOutcome::Ran {
                took_over_from,
                recorded,
                ..
            } => {
                ran(st);
                st.last_fire = Some("ran");
                if took_over_from.is_some() {
                    st.handovers += 1;
                    m.handovers.with_label_values(&[&label]).inc();
                }
                if *recorded {
                    self.completed(st, &label);
                }
            }
            PassOutcome::ClaimFailed => {
                st.active = false;
                st.last_fire = Some("claim_failed");
            }
            PassOutcome::StoodBy {
                holder,
                already_done,
                stuck,
                ..
            } => {
                st.active = false;
                st.holder = Some(holder.clone());
                st.last_fire = Some(match (already_done, stuck) {
                    (true, _) => "already_done",
                    (_, true) => "stuck_lease",
                    _ => "standby",
                });
                if *already_done {
                    st.last_pass_by = Some(holder.clone());
                }
            }
        }
        // Another shard's pass lease is released when its pass ends: this
        // process does not hold it between passes.
        if shard != self.ctx.settings.shard() && !matches!(outcome, PassOutcome::NotNeeded) {
            st.active = false;
        }
        m.active.with_label_values(&[&label]).set(st.active as i64);
        drop(shards);
        self.holding();
    }

    /// Who holds this process's own shard's pass, as it knows it now; shown
    /// in `/status` and `seatflow_reconcile_pass_active` as it is read (by
    /// the keeper every second, `/readyz`, `/status`, `/metrics`). None:
    /// this process takes no pass lease (no pass, or a dry run).
    pub fn holding(&self) -> Option<Holding> {
        let holding = self.kept_pass()?.holding();
        let own = self.ctx.settings.shard().index;
        let mut shards = lock(&self.shards);
        let st = shards.entry(own).or_default();
        st.active = holding == Holding::Held;
        if let Holding::Standby { holder } = &holding {
            st.holder = Some(holder.clone());
        }
        st.lease = Some(holding.clone());
        self.pass_metrics
            .active
            .with_label_values(&[&own.to_string()])
            .set(st.active as i64);
        Some(holding)
    }

    fn completed(&self, st: &mut ShardStatus, label: &str) {
        let now = Utc::now();
        st.last_pass_by = Some(self.ctx.settings.reconcile.instance.clone());
        st.last_pass_finished_at = Some(now);
        self.pass_metrics
            .last_completed
            .with_label_values(&[label])
            .set(now.timestamp_millis() as f64 / 1000.0);
    }

    /// The schema's deviations as last read (rule 17), in their gauge; a
    /// run that could not read the schema leaves the last verdict shown.
    pub fn show_contract(&self) {
        let state = self.ctx.mysql.contract();
        self.metrics
            .show_contract(&crate::run::jobs::deviations::DeviationReport::all(&state));
    }

    /// A change-driven check's report: its jobs' metrics (no `/status`
    /// last run: that is the passes'), refused permissions, the schema's
    /// verdict.
    pub(super) fn record_check(&self, report: &RunReport) {
        for job in &report.jobs {
            self.metrics.record_check(job);
            self.ctx.denials.record_all(&job.denied);
        }
        self.show_contract();
    }

    /// Metrics and `/status` of each job in a run's report.
    #[allow(
        clippy::expect_used,
        reason = "the status map holds every kind from the start"
    )]
    pub(super) fn record(&self, report: &RunReport, started_at: DateTime<Utc>) {
        self.show_contract();
        let mut status = lock(&self.status);
        for job in report.jobs.iter().cloned() {
            self.metrics.record(&job);
            self.ctx.denials.record_all(&job.denied);
            let st = status.get_mut(&job.kind).expect("kind");
            if job.outcome != Outcome::Failure {
                st.current_drift = Some(job.drift);
                st.stuck_leases = job.stuck_leases;
            }
            st.last_run = Some(LastRun {
                run_id: report.run_id.clone(),
                started_at,
                finished_at: Utc::now(),
                report: job,
            });
        }
    }
}
