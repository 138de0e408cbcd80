//! The sweep: the real `seatflow-reconciler once` binary over the three
//! seat-level jobs, configured by environment only, and where that binary is.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail, ensure};

use crate::bench::Bench;
use crate::launcher::{LAUNCHER_ENV, Measured, repo_root, run_reconciler, tail};
use crate::replica::{Reads, replica_env};
use crate::report::Phase;
use crate::seeding::SeedStats;
use crate::services::Load;

/// What `once` must sweep: the three seat-level jobs (env names and CLI names).
const SEAT_JOBS: [(&str, &str); 3] = [
    ("PAID_SEATS", "paid-seats"),
    ("ORPHAN_LOCKS", "orphan-locks"),
    ("SOLD_ORPHANS", "sold-orphans"),
];

/// The reconciler binary: `--reconciler`, else the one built next to us (in
/// a workspace both land in the same target directory, `CARGO_TARGET_DIR`
/// included).
pub fn reconciler_path(given: Option<&Path>) -> Result<PathBuf> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()?.with_file_name("seatflow-reconciler"),
    };
    ensure!(
        path.is_file(),
        "{} not found: build it with `cargo build --release -p seatflow-reconciler` \
         or pass --reconciler",
        path.display()
    );
    warn_if_stale(&path);
    Ok(path)
}

/// `cargo run -p seatflow-bench` rebuilds only the benchmark: warn when
/// the reconciler it would measure is older than the library's sources.
fn warn_if_stale(reconciler: &Path) {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(built) = modified(reconciler) else {
        return;
    };
    let mut dirs = vec![repo_root().join("src")];
    let mut newer = None;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if modified(&path).is_some_and(|t| t > built) {
                newer = Some(path);
            }
        }
    }
    if let Some(path) = newer {
        eprintln!(
            "warning: {} is newer than {}: rebuild it with \
             `cargo build --release -p seatflow-reconciler`, or this measures old code",
            path.display(),
            reconciler.display()
        );
    }
}

impl Bench {
    /// Runs the real reconciler over the three seat-level jobs.
    pub async fn sweep(
        &self,
        reconciler: &Path,
        seeding: &SeedStats,
        reads: Option<Reads>,
    ) -> Result<SweepRun> {
        let cmd = self.sweep_command(reconciler, seeding, reads)?;
        let before = self.snapshot().await?;
        let child = tokio::task::spawn_blocking(move || run_reconciler(cmd)).await??;
        let load = before.load_until(&self.snapshot().await?);
        if child.measured.exit_code != Some(0) {
            bail!(
                "the reconciler exited with {:?}; its stderr:\n{}",
                child.measured.exit_code,
                tail(&child.stderr, 40)
            );
        }
        let report: serde_json::Value = serde_json::from_str(&child.stdout)
            .with_context(|| format!("the reconciler's JSON report: {}", child.stdout))?;
        // A sweep that did not cover the estate measured something else.
        for job in report["jobs"].as_array().into_iter().flatten() {
            let scanned = job["scanned"].as_u64().unwrap_or(0);
            ensure!(
                scanned == self.showtimes as u64,
                "{} scanned {scanned} of {} showtimes: not a full sweep",
                job["kind"],
                self.showtimes
            );
        }
        Ok(SweepRun {
            measured: child.measured,
            report,
            load,
        })
    }

    /// The launcher running `seatflow-reconciler once --job … --output json`,
    /// configured by environment only, so that the whole estate is swept and
    /// all drift is repaired in one run, at once (no grace period).
    fn sweep_command(
        &self,
        reconciler: &Path,
        seeding: &SeedStats,
        reads: Option<Reads>,
    ) -> Result<Command> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.env(LAUNCHER_ENV, "1").arg(reconciler).arg("once");
        for (_, job) in SEAT_JOBS {
            cmd.args(["--job", job]);
        }
        cmd.args(["--output", "json"]);
        // Only our settings: none leaks in from the caller's environment.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SEATFLOW__") {
                cmd.env_remove(key);
            }
        }
        cmd.envs(self.sweep_env(seeding, reads)?);
        Ok(cmd)
    }

    /// The reconciler's settings; with `reads` on the replica, also
    /// `mysql.replica_url` (everything else is the same in both).
    pub fn sweep_env(
        &self,
        seeding: &SeedStats,
        reads: Option<Reads>,
    ) -> Result<Vec<(String, String)>> {
        // Room for every injected repair (and then some), within the validator's range.
        let batch = (seeding.drift_total() * 2).clamp(1000, 10_000_000);
        let mut env: Vec<(String, String)> = [
            ("SEATFLOW__MYSQL__URL", self.db_url.clone()),
            ("SEATFLOW__REDIS__URL", self.redis_url.clone()),
            (
                "SEATFLOW__REDIS__KEY_PREFIX",
                self.keys.prefix().to_string(),
            ),
            ("SEATFLOW__RECONCILE__ORPHAN_GRACE", "0s".into()),
            (
                "SEATFLOW__RECONCILE__SCAN_CHUNK",
                self.scan_chunk.to_string(),
            ),
            ("SEATFLOW__RECONCILE__INSTANCE", "seatflow-bench".into()),
            ("SEATFLOW__LOG__LEVEL", "warn".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for (job, _) in SEAT_JOBS {
            env.push((
                format!("SEATFLOW__JOBS__{job}__BATCH_SIZE"),
                batch.to_string(),
            ));
            // One more than the estate: the run must see the end (a short
            // page) to clear its cursor. Stopping exactly at the limit leaves
            // the cursor on the last showtime, and the next run scans nothing.
            env.push((
                format!("SEATFLOW__JOBS__{job}__SCAN_LIMIT"),
                (self.showtimes + 1).to_string(),
            ));
        }
        if let (Some(Reads::Replica), Some(replica)) = (reads, &self.replica) {
            env.push(replica_env(&replica.url, &self.database)?);
        }
        Ok(env)
    }
}

pub struct SweepRun {
    pub measured: Measured,
    pub report: serde_json::Value,
    pub load: Load,
}

impl SweepRun {
    pub fn into_phase(self, name: &str, seats: u64, floor_s: f64, bench: &Bench) -> Phase {
        let trips = self.report["redis_round_trips"].as_u64();
        let wall = self.measured.wall_s;
        Phase {
            name: name.into(),
            wall_s: wall,
            in_process_s: self.report["duration_ms"]
                .as_u64()
                .map(|ms| ms as f64 / 1000.0),
            seats_per_s: seats as f64 / wall,
            vs_floor: wall / floor_s,
            redis_round_trips: trips,
            round_trips_per_100_showtimes: trips.map(|t| t as f64 * 100.0 / bench.showtimes as f64),
            peak_rss_mb: Some(self.measured.peak_rss_mb),
            launcher_rss_mb: Some(self.measured.launcher_rss_mb),
            cpu_s: Some(self.measured.cpu_s),
            floor: None,
            reconciler: Some(self.report),
            per_showtime: None,
            load: self.load,
        }
    }
}
