//! Results: every number of a run, the verdict against the spec's targets, and
//! the JSON written with `--json`.

use std::process::Command;

use anyhow::Result;
use serde::Serialize;

use seatflow_reconciler::config::redact_url;

use crate::args::{Args, EstateArgs};
use crate::bench::Bench;
use crate::launcher::repo_root;
use crate::machine::{Machine, machine};
use crate::replica::Reads;
use crate::seeding::SeedStats;
use crate::services::Load;
use crate::verify::{Verification, unrepaired};

#[derive(Debug, Serialize)]
pub struct FloorDetail {
    pub redis_s: f64,
    pub mysql_s: f64,
    /// Both reads at once (not part of the floor; see `Bench::overlapped_reads`).
    pub overlapped_s: Option<f64>,
    pub hash_fields: u64,
    pub occupancy_rows: u64,
}

/// What the per-showtime loop (per_showtime.rs) found and did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct LoopCounts {
    pub showtimes: u64,
    pub drift: u64,
    pub repaired: u64,
    /// Redis round trips: one HGETALL per showtime, one script per seat.
    pub round_trips: u64,
}

#[derive(Debug, Serialize)]
pub struct Phase {
    pub name: String,
    /// Wall clock; for a sweep, from spawning the process to reaping it.
    pub wall_s: f64,
    /// The reconciler's own `duration_ms` (connected, jobs run).
    pub in_process_s: Option<f64>,
    pub seats_per_s: f64,
    pub vs_floor: f64,
    pub redis_round_trips: Option<u64>,
    pub round_trips_per_100_showtimes: Option<f64>,
    pub peak_rss_mb: Option<f64>,
    /// The floor under `peak_rss_mb`: the launcher's own peak (see `Measured`).
    pub launcher_rss_mb: Option<f64>,
    /// User + system CPU time of the client: the reconciler process for a
    /// sweep, this process for the floor.
    pub cpu_s: Option<f64>,
    pub floor: Option<FloorDetail>,
    /// The reconciler's `once --output json` report.
    pub reconciler: Option<serde_json::Value>,
    /// The per-showtime loop's own counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_showtime: Option<LoopCounts>,
    pub load: Load,
}

impl Phase {
    /// What the reconciler reported under `fixed`.
    pub fn fixed(&self, counter: &str) -> u64 {
        self.reconciler
            .as_ref()
            .and_then(|r| r["fixed"][counter].as_u64())
            .unwrap_or(0)
    }

    /// Drift found and repaired: by the reconciler's jobs, or by the loop.
    pub fn found_and_repaired(&self) -> Option<(u64, u64)> {
        match (&self.reconciler, &self.per_showtime) {
            (Some(_), _) => Some((self.jobs_sum("drift"), self.jobs_sum("fixed"))),
            (None, Some(l)) => Some((l.drift, l.repaired)),
            (None, None) => None,
        }
    }

    /// Sum of a per-job field (`drift`, `backlog`, `errors`) over the jobs.
    pub fn jobs_sum(&self, field: &str) -> u64 {
        self.reconciler
            .as_ref()
            .and_then(|r| r["jobs"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|j| j[field].as_u64())
            .sum()
    }
}

#[derive(Debug, Serialize)]
pub struct Run {
    /// The machine's load average when the run started: was something else busy?
    pub load_average: String,
    /// With `--replica-url`: whether the reconciler read the replica.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reads: Option<Reads>,
    /// Whether the per-showtime loop (the last phase) ran before the
    /// reconciler's sweeps (None: not measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_first: Option<bool>,
    /// Other clients' traffic during one idle second before the run.
    pub idle: Load,
    pub phases: Vec<Phase>,
    pub verify_before: Verification,
    pub verify_after: Verification,
}

#[derive(Debug, Serialize)]
pub struct Params {
    pub showtimes: usize,
    pub seats_per_showtime: usize,
    pub seats: u64,
    pub halls: usize,
    pub occupancy: f64,
    pub drift: f64,
    pub scan_chunk: usize,
    pub seed: u64,
    pub repeat: usize,
    /// The reconciler's environment for the sweeps (URLs redacted); with
    /// `--compare`, the runs without the replica lack only
    /// `SEATFLOW__MYSQL__REPLICA_URL`.
    pub sweep_env: Vec<(String, String)>,
    /// `--replica-url` (redacted), measured beside the primary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_url: Option<String>,
    /// `--compare`: every repetition without and with the replica.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub compare: bool,
}

#[derive(Debug, Serialize)]
pub struct Target {
    pub name: &'static str,
    pub measured: String,
    pub met: Option<bool>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub date: String,
    pub commit: String,
    pub machine: Machine,
    pub params: Params,
    pub seeding: SeedStats,
    pub runs: Vec<Run>,
    pub targets: Vec<Target>,
}

impl Report {
    pub async fn new(
        args: &Args,
        estate: &EstateArgs,
        bench: &Bench,
        seeding: SeedStats,
    ) -> Result<Report> {
        let reads = bench.replica.as_ref().map(|_| Reads::Replica);
        let sweep_env = bench
            .sweep_env(&seeding, reads)?
            .into_iter()
            .map(|(k, v)| {
                let v = if k.ends_with("_URL") {
                    redact_url(&v)
                } else {
                    v
                };
                (k, v)
            })
            .collect();
        Ok(Report {
            date: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            commit: git_commit(),
            machine: machine(bench).await?,
            params: Params {
                showtimes: estate.showtimes,
                seats_per_showtime: estate.seats,
                seats: (estate.showtimes * estate.seats) as u64,
                halls: estate.halls,
                occupancy: estate.occupancy,
                drift: args.drift,
                scan_chunk: bench.scan_chunk,
                seed: estate.seed,
                repeat: args.repeat,
                sweep_env,
                replica_url: args.replica_url.as_deref().map(redact_url),
                compare: args.compare,
            },
            seeding,
            runs: Vec::new(),
            targets: Vec::new(),
        })
    }

    /// Why the benchmark must exit non-zero: see [`unrepaired`].
    pub fn verification_failure(&self) -> Option<String> {
        unrepaired(self.runs.iter().map(|run| &run.verify_after))
    }

    /// The spec's targets, judged on the median repair sweep (by wall time).
    pub fn judge(&mut self) {
        let Some(run) = self.median_run() else { return };
        let (floor, sweep) = (&run.phases[0], &run.phases[1]);
        let mut targets = Vec::new();
        if self.params.seats == 3_000_000 {
            targets.push(Target {
                name: "10k × 300 swept in ≤ 3 s",
                measured: format!("{:.2} s", sweep.wall_s),
                met: Some(sweep.wall_s <= 3.0),
            });
        }
        targets.push(Target {
            name: "≥ 1 M seats/s",
            measured: format!("{:.2} M seats/s", sweep.seats_per_s / 1e6),
            met: Some(sweep.seats_per_s >= 1e6),
        });
        targets.push(Target {
            name: "≤ 1.5 × the raw-read floor",
            measured: format!(
                "{:.2} × ({:.2} s / {:.2} s)",
                sweep.vs_floor, sweep.wall_s, floor.wall_s
            ),
            met: Some(sweep.vs_floor <= 1.5),
        });
        let converged = &run.phases[2];
        targets.push(Target {
            name: "converged ≤ 1.0 × the raw-read floor",
            measured: format!("{:.2} × ({:.2} s)", converged.vs_floor, converged.wall_s),
            met: Some(converged.vs_floor <= 1.0),
        });
        if let Some(per_showtime) = run.phases.get(3) {
            let ahead = per_showtime.wall_s / sweep.wall_s;
            targets.push(Target {
                name: "≥ 1.5 × faster than the per-showtime loop",
                measured: format!(
                    "{ahead:.2} × ({:.2} s / {:.2} s)",
                    per_showtime.wall_s, sweep.wall_s
                ),
                met: Some(ahead >= 1.5),
            });
        }
        targets.push(Target {
            name: "Redis round trips per 100 showtimes O(1)",
            measured: sweep
                .round_trips_per_100_showtimes
                .map_or("not reported".into(), |r| {
                    format!(
                        "{r:.2} (floor {:.2})",
                        floor.round_trips_per_100_showtimes.unwrap_or(0.0)
                    )
                }),
            met: None,
        });
        let chunks = self.params.showtimes.div_ceil(self.params.scan_chunk) as f64;
        targets.push(Target {
            name: "SQL statements per chunk O(1)",
            measured: format!(
                "{:.1} per chunk of {} showtimes (server-wide Questions)",
                sweep.load.sql_questions() as f64 / chunks,
                self.params.scan_chunk
            ),
            met: None,
        });
        let rss = sweep.peak_rss_mb.unwrap_or(0.0);
        targets.push(Target {
            name: "peak RSS ≤ 64 MB (and flat as N grows)",
            measured: format!("{rss:.1} MB"),
            met: Some(rss <= 64.0),
        });
        self.targets = targets;
    }

    /// The median run by the drift sweep's wall time; of an even number, the
    /// faster middle one (on a shared machine, noise only ever adds time).
    /// With `--compare`, of the runs without the replica.
    fn median_run(&self) -> Option<&Run> {
        let mut runs: Vec<&Run> = self
            .runs
            .iter()
            .filter(|r| !self.params.compare || r.reads == Some(Reads::Primary))
            .collect();
        runs.sort_by(|a, b| a.phases[1].wall_s.total_cmp(&b.phases[1].wall_s));
        runs.get(runs.len().saturating_sub(1) / 2).copied()
    }
}

/// `bc9d361`, with `+dirty` when the reconciler's tracked sources differ from
/// that commit (the benchmark's own crate and results, under benches/, do not
/// count), run in the source tree the binaries were built from.
pub fn git_commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(repo_root())
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let changes = [
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":!benches",
    ];
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(head) => match git(&changes) {
            Some(changed) if !changed.is_empty() => format!("{head}+dirty"),
            _ => head,
        },
        None => "unknown".into(),
    }
}
