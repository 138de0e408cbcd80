//! What a soak measured: the JSON written with `--json` and the table on stdout.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::machine::Machine;
use crate::numbers::thousands;
use crate::seeding::SeedStats;
use crate::services::{CmdStat, Load};

use super::daemons::{Daemon, RssSample};
use super::drift::{DriftAges, Injected};
use super::holds::{Latencies, PHASES, WINDOW_S};
use super::traffic::{Delays, TrafficReport};

#[derive(Debug, Serialize)]
pub struct SoakParams {
    pub showtimes: usize,
    pub seats_per_showtime: usize,
    pub seats: u64,
    pub halls: usize,
    pub occupancy: f64,
    pub seed: u64,
    pub minutes: f64,
    pub idle_seconds: u64,
    pub replicas: usize,
    pub hold_interval_ms: f64,
    pub inject_share_per_minute: f64,
    pub injected_seats_per_round: usize,
    pub delete_hash_every_rounds: u64,
    pub reconciler: String,
    /// Each daemon's whole configuration (URLs redacted): the rest is default.
    pub daemon_env: Vec<(String, String)>,
}

/// What the servers did over a stretch of wall time (all clients: on the
/// private Redis that is the daemons, the hold workload and our injections).
#[derive(Debug, Serialize)]
pub struct ServerLoad {
    pub wall_s: f64,
    pub redis_cpu_s: f64,
    /// CPU seconds per wall second (1.0 = one core busy).
    pub redis_cpu_share: f64,
    pub mariadb_cpu_s: Option<f64>,
    pub mariadb_cpu_share: Option<f64>,
    pub redis_commands: u64,
    pub redis_by_command: BTreeMap<String, CmdStat>,
    /// `SHOW GLOBAL STATUS` Questions: server-wide (MariaDB is shared).
    pub sql_questions: u64,
}

impl ServerLoad {
    pub fn new(load: &Load, wall_s: f64) -> ServerLoad {
        ServerLoad {
            wall_s,
            redis_cpu_s: load.redis_cpu_s,
            redis_cpu_share: load.redis_cpu_s / wall_s,
            mariadb_cpu_s: load.mariadb_cpu_s,
            mariadb_cpu_share: load.mariadb_cpu_s.map(|s| s / wall_s),
            redis_commands: load.redis_commands,
            redis_by_command: load.redis_by_command.clone(),
            sql_questions: load.sql_questions(),
        }
    }

    pub fn calls(&self, command: &str) -> u64 {
        self.redis_by_command.get(command).map_or(0, |c| c.calls)
    }
}

#[derive(Debug, Serialize)]
pub struct LatencyStats {
    pub calls: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl LatencyStats {
    /// Nearest-rank quantiles of nanosecond samples (sorted in place).
    pub fn of(ns: &mut [u32]) -> Option<LatencyStats> {
        if ns.is_empty() {
            return None;
        }
        ns.sort_unstable();
        let at = |q: f64| {
            let rank = ((q * ns.len() as f64).ceil() as usize).clamp(1, ns.len());
            ns[rank - 1] as f64 / 1e6
        };
        Some(LatencyStats {
            calls: ns.len(),
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            p999_ms: at(0.999),
            max_ms: at(1.0),
        })
    }
}

#[derive(Debug, Serialize)]
pub struct HoldReport {
    /// Before any daemon started.
    pub idle: Option<LatencyStats>,
    /// Daemons running, none in a seat pass.
    pub outside_passes: Option<LatencyStats>,
    /// Some daemon in a seat pass.
    pub during_passes: Option<LatencyStats>,
    /// p99 during passes minus p99 idle.
    pub p99_rise_during_passes_ms: Option<f64>,
    /// Share of the soak's calls made while a pass was in progress.
    pub during_pass_share: f64,
    pub held: u64,
    pub errors: u64,
    /// The same per window of `WINDOW_S` seconds from the workload's start.
    pub windows: Vec<HoldWindow>,
}

/// One window's holds: the p99 in each phase met in it.
#[derive(Debug, Serialize)]
pub struct HoldWindow {
    pub from_s: u64,
    pub idle: Option<LatencyStats>,
    pub outside_passes: Option<LatencyStats>,
    pub during_passes: Option<LatencyStats>,
}

impl HoldReport {
    pub fn new(mut lat: Latencies) -> HoldReport {
        let windows = std::mem::take(&mut lat.by_window)
            .into_iter()
            .enumerate()
            .map(|(i, mut w)| {
                let [idle, outside_passes, during_passes] =
                    w.each_mut().map(|v| LatencyStats::of(v));
                HoldWindow {
                    from_s: i as u64 * WINDOW_S,
                    idle,
                    outside_passes,
                    during_passes,
                }
            })
            .collect();
        let during = lat.by_phase[2].len() as f64;
        let soak = during + lat.by_phase[1].len() as f64;
        let [idle, outside, during_passes] = lat.by_phase.each_mut().map(|v| LatencyStats::of(v));
        let rise = match (&idle, &during_passes) {
            (Some(idle), Some(during)) => Some(during.p99_ms - idle.p99_ms),
            _ => None,
        };
        HoldReport {
            idle,
            outside_passes: outside,
            during_passes,
            p99_rise_during_passes_ms: rise,
            during_pass_share: if soak > 0.0 { during / soak } else { 0.0 },
            held: lat.held,
            errors: lat.errors,
            windows,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct RssSummary {
    pub first_mb: f64,
    pub min_mb: f64,
    pub max_mb: f64,
    pub last_mb: f64,
    pub median_mb: f64,
    /// The largest distance of a sample from the median, in % of the median.
    pub max_deviation_pct: f64,
    /// The same over the samples after the first WARMUP_S seconds (the
    /// first passes fill the allocator's pools); `None` in shorter soaks.
    pub max_deviation_after_warmup_pct: Option<f64>,
}

/// RSS samples before this (seconds into the soak) are warm-up.
pub const WARMUP_S: f64 = 300.0;

/// Median and the largest distance of a value from it, in % of the median
/// (`v` sorted in place).
fn median_and_deviation(v: &mut [f64]) -> Option<(f64, f64)> {
    v.sort_by(f64::total_cmp);
    let median = *v.get((v.len().max(1) - 1) / 2)?;
    let (min, max) = (v[0], v[v.len() - 1]);
    Some((median, (max - median).max(median - min) / median * 100.0))
}

impl RssSummary {
    pub fn of(samples: &[RssSample]) -> Option<RssSummary> {
        let mut v: Vec<f64> = samples.iter().map(|s| s.rss_mb).collect();
        let (first, last) = (*v.first()?, *v.last()?);
        let (median, dev) = median_and_deviation(&mut v)?;
        let (min, max) = (v[0], v[v.len() - 1]);
        let mut warm: Vec<f64> = samples
            .iter()
            .filter(|s| s.t_s >= WARMUP_S)
            .map(|s| s.rss_mb)
            .collect();
        Some(RssSummary {
            first_mb: first,
            min_mb: min,
            max_mb: max,
            last_mb: last,
            median_mb: median,
            max_deviation_pct: dev,
            max_deviation_after_warmup_pct: median_and_deviation(&mut warm).map(|(_, d)| d),
        })
    }
}

#[derive(Debug, Serialize)]
pub struct DaemonReport {
    pub name: String,
    pub rss: Option<RssSummary>,
    /// Every 10 s.
    pub rss_samples: Vec<RssSample>,
    /// Its stdout and stderr (log level warn), in bytes.
    pub log_bytes: u64,
    pub cpu_s: Option<f64>,
    pub cpu_share: Option<f64>,
    /// Seat passes seen starting and ending by polling `/status`, and how long they took.
    pub passes_seen: usize,
    pub pass_p50_s: Option<f64>,
    pub pass_max_s: Option<f64>,
    pub status_errors: u64,
    pub exit: Option<String>,
    /// The last lines of its log (what the log volume is made of).
    pub log_tail: String,
    /// Its non-zero change-driven checks' series at the end.
    pub changes: std::collections::BTreeMap<String, f64>,
}

impl DaemonReport {
    pub fn new(d: &Daemon, cpu_s: Option<f64>, wall_s: f64) -> DaemonReport {
        let mut passes = d.passes_s.clone();
        passes.sort_by(f64::total_cmp);
        DaemonReport {
            name: d.name.clone(),
            rss: RssSummary::of(&d.rss),
            rss_samples: d.rss.clone(),
            log_bytes: d.log_bytes(),
            cpu_s,
            cpu_share: cpu_s.map(|c| c / wall_s),
            passes_seen: passes.len(),
            pass_p50_s: passes.get((passes.len().max(1) - 1) / 2).copied(),
            pass_max_s: passes.last().copied(),
            status_errors: d.status_errors,
            exit: d.exit.clone(),
            log_tail: d.log_tail(),
            changes: d.changes.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct FixCount {
    pub job: String,
    pub kind: String,
    pub count: u64,
}

#[derive(Debug, Serialize)]
pub struct SoakReport {
    pub date: String,
    pub commit: String,
    pub machine: Machine,
    pub params: SoakParams,
    pub seeding: SeedStats,
    /// The idle baseline: the hold workload alone.
    pub idle: ServerLoad,
    /// The soak: daemons, hold workload and injections.
    pub soak: ServerLoad,
    /// Seat hashes read over the soak, per hash per minute, by the daemons'
    /// own counters (passes and change-driven checks).
    pub seat_hash_reads_per_hash_per_minute: Option<f64>,
    /// HGETALL calls over the soak per seat hash per minute. Suspect hashes
    /// are read with HGETALL too (see benches/README.md, "Soak").
    pub hgetall_per_seat_hash_per_minute: f64,
    /// Seat passes seen on `/status` per minute, all daemons together: each
    /// full pass reads every seat hash once (passes shorter than the 100 ms
    /// poll may be missed).
    pub passes_per_minute: f64,
    pub hold: HoldReport,
    /// `reconcile_fix` rows written during the soak, by job and kind.
    pub fixes: Vec<FixCount>,
    pub drift: DriftAges,
    pub daemons: Vec<DaemonReport>,
    /// With `--traffic-showtimes`: the customers, and each crash's repair.
    pub traffic: Option<TrafficReport>,
    pub injected: Vec<Injected>,
}

impl SoakReport {
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = self.write_table(&mut out);
        out
    }

    fn write_table(&self, out: &mut String) -> std::fmt::Result {
        let (p, m) = (&self.params, &self.machine);
        writeln!(
            out,
            "\nseatflow-bench soak: {} showtimes × {} seats = {} seats, {} replica(s) on their defaults, {:.1} min (idle baseline {} s)",
            thousands(p.showtimes as u64),
            p.seats_per_showtime,
            thousands(p.seats),
            p.replicas,
            p.minutes,
            p.idle_seconds
        )?;
        writeln!(
            out,
            "commit {} · {} · {} CPUs ({}), load average {} · Redis {} (private, seat hashes: {}) · MariaDB {}",
            self.commit,
            self.date,
            m.cpus,
            m.cpu_model,
            m.load_average,
            m.redis_version,
            m.redis_hash_encoding,
            m.mariadb_version
        )?;
        let (i, s) = (&self.idle, &self.soak);
        writeln!(out, "\n{:<44}{:>14}{:>14}", "", "idle", "soak")?;
        let opt = |v: Option<f64>, unit: &str| v.map_or("-".into(), |v| format!("{v:.3}{unit}"));
        let rows: [(&str, String, String); 6] = [
            (
                "wall s",
                format!("{:.0}", i.wall_s),
                format!("{:.0}", s.wall_s),
            ),
            (
                "Redis CPU share (CPU s / wall s)",
                format!("{:.3}", i.redis_cpu_share),
                format!("{:.3}", s.redis_cpu_share),
            ),
            (
                "MariaDB CPU share (server-wide)",
                opt(i.mariadb_cpu_share, ""),
                opt(s.mariadb_cpu_share, ""),
            ),
            (
                "Redis commands",
                thousands(i.redis_commands),
                thousands(s.redis_commands),
            ),
            (
                "HGETALL calls",
                thousands(i.calls("hgetall")),
                thousands(s.calls("hgetall")),
            ),
            (
                "SQL statements (server-wide)",
                thousands(i.sql_questions),
                thousands(s.sql_questions),
            ),
        ];
        for (label, a, b) in rows {
            writeln!(out, "{label:<44}{a:>14}{b:>14}")?;
        }
        writeln!(
            out,
            "seat-hash reads per hash per minute (daemons' counters: passes and checks): {}; \
             HGETALL per seat hash per minute: {:.2} (seat and suspect hashes; see README); \
             seat passes seen per minute, all daemons: {:.2}",
            opt(self.seat_hash_reads_per_hash_per_minute, ""),
            self.hgetall_per_seat_hash_per_minute,
            self.passes_per_minute
        )?;
        writeln!(
            out,
            "Redis commands, soak: {}",
            summary(&s.redis_by_command)
        )?;
        writeln!(
            out,
            "\nhold script latency, ms (one EVALSHA every {} ms)   calls       p50       p99      p999       max",
            p.hold_interval_ms
        )?;
        let h = &self.hold;
        let phases = [&h.idle, &h.outside_passes, &h.during_passes];
        for (phase, stats) in PHASES.iter().zip(phases) {
            match stats {
                Some(l) => writeln!(
                    out,
                    "  {phase:<44}{:>9}{:>10.3}{:>10.3}{:>10.3}{:>10.3}",
                    thousands(l.calls as u64),
                    l.p50_ms,
                    l.p99_ms,
                    l.p999_ms,
                    l.max_ms
                )?,
                None => writeln!(out, "  {phase:<44}{:>9}", 0)?,
            }
        }
        writeln!(
            out,
            "  p99 during passes − p99 idle: {} ms; {:.0} % of the soak's calls during a pass; {} errors",
            self.hold
                .p99_rise_during_passes_ms
                .map_or("-".into(), |r| format!("{r:+.3}")),
            self.hold.during_pass_share * 100.0,
            self.hold.errors
        )?;
        writeln!(
            out,
            "  p99 per {WINDOW_S} s window from the holds' start (calls): idle | outside passes | during a pass"
        )?;
        let cell = |l: &Option<LatencyStats>| {
            l.as_ref().map_or("-".to_string(), |l| {
                format!("{:.3} ({})", l.p99_ms, thousands(l.calls as u64))
            })
        };
        for w in &self.hold.windows {
            writeln!(
                out,
                "    {:>5} s  {:>18} {:>18} {:>18}",
                w.from_s,
                cell(&w.idle),
                cell(&w.outside_passes),
                cell(&w.during_passes)
            )?;
        }
        let fixes: Vec<String> = self
            .fixes
            .iter()
            .map(|f| format!("{}/{} {}", f.job, f.kind, thousands(f.count)))
            .collect();
        writeln!(out, "\nfixes (reconcile_fix): {}", fixes.join(", "))?;
        let d = &self.drift;
        let secs = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1} s"));
        writeln!(
            out,
            "drift injected {}, repaired {}, not repaired by the end {} ({} of them injected in the last {:.0} s)",
            thousands(d.injected as u64),
            thousands(d.repaired as u64),
            thousands(d.not_repaired as u64),
            thousands(d.not_repaired_recent as u64),
            d.recent_s
        )?;
        writeln!(
            out,
            "drift age at repair: p50 {}, p90 {}, max {}",
            secs(d.p50_s),
            secs(d.p90_s),
            secs(d.max_s)
        )?;
        for (kind, k) in &d.by_kind {
            writeln!(
                out,
                "  {:<26} repaired {}/{}, age p50 {}, max {}",
                kind.label(),
                thousands(k.repaired as u64),
                thousands(k.injected as u64),
                secs(k.p50_s),
                secs(k.max_s)
            )?;
        }
        writeln!(
            out,
            "\n{:<12}{:>14}{:>8}{:>8}{:>8}{:>11}{:>15}{:>11}{:>12}{:>8}{:>10}{:>10}",
            "daemon",
            "RSS MB: first",
            "min",
            "max",
            "last",
            "max dev %",
            "after 5 min %",
            "CPU share",
            "log bytes",
            "passes",
            "pass p50",
            "pass max"
        )?;
        for dm in &self.daemons {
            let r = dm.rss.as_ref();
            let mb = |f: fn(&RssSummary) -> f64| r.map_or("-".into(), |r| format!("{:.1}", f(r)));
            writeln!(
                out,
                "{:<12}{:>14}{:>8}{:>8}{:>8}{:>11}{:>15}{:>11}{:>12}{:>8}{:>10}{:>10}",
                dm.name,
                mb(|r| r.first_mb),
                mb(|r| r.min_mb),
                mb(|r| r.max_mb),
                mb(|r| r.last_mb),
                mb(|r| r.max_deviation_pct),
                r.and_then(|r| r.max_deviation_after_warmup_pct)
                    .map_or("-".into(), |d| format!("{d:.1}")),
                opt(dm.cpu_share, ""),
                thousands(dm.log_bytes),
                dm.passes_seen,
                secs(dm.pass_p50_s),
                secs(dm.pass_max_s)
            )?;
        }
        for dm in &self.daemons {
            writeln!(
                out,
                "{}: {}; /status errors {}",
                dm.name,
                dm.exit.as_deref().unwrap_or("running"),
                dm.status_errors
            )?;
            for (series, value) in &dm.changes {
                writeln!(out, "  {series} {value}")?;
            }
            let tail: Vec<&str> = dm.log_tail.lines().collect();
            for line in &tail[tail.len().saturating_sub(5)..] {
                writeln!(out, "  log: {line}")?;
            }
        }
        if let Some(t) = &self.traffic {
            write_traffic(out, t)?;
        }
        Ok(())
    }
}

/// The traffic's crashes: how long after each became repairable it was
/// repaired, by kind and by what found it.
fn write_traffic(out: &mut String, t: &TrafficReport) -> std::fmt::Result {
    let flows: Vec<String> = t.flows.iter().map(|(f, n)| format!("{f} {n}")).collect();
    writeln!(
        out,
        "\ntraffic: {} customers on {} showtimes, a hash lost and a showtime opened every {} s; flows: {}; errors {}; \
         crashes settled by a loss {}; customers harmed {} (not judged: {} whose order came after the grace)",
        t.workers,
        thousands(t.showtimes as u64),
        t.lose_every_s,
        flows.join(", "),
        t.flow_errors,
        t.settled_by_a_loss,
        t.harmed,
        t.late
    )?;
    if let Some(w) = &t.waits {
        writeln!(
            out,
            "delay after repairable (orphans after a grace of {:.0} s, orders after their deadline + {:.0} s), s",
            w.orphan_grace_s, w.expired_order_buffer_s
        )?;
    }
    writeln!(
        out,
        "  {:<32}{:<10}{:>8}{:>8}{:>9}{:>9}{:>9}",
        "drift", "found by", "drifts", "open", "p50", "p99", "max"
    )?;
    let s = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    let row = |out: &mut String, kind: &str, by: &str, n: String, open: String, d: &Delays| {
        writeln!(
            out,
            "  {kind:<32}{by:<10}{n:>8}{open:>8}{:>9}{:>9}{:>9}",
            s(d.p50_s),
            s(d.p99_s),
            s(d.max_s)
        )
    };
    for (kind, k) in &t.by_kind {
        row(
            out,
            kind.label(),
            "all",
            thousands(k.drifts as u64),
            thousands(k.open as u64),
            &k.all,
        )?;
        for (source, d) in &k.by_source {
            row(
                out,
                "",
                source,
                thousands(d.repaired as u64),
                String::new(),
                d,
            )?;
        }
        for slow in k.slowest.iter().take(2) {
            writeln!(out, "    slowest: {slow}")?;
        }
    }
    Ok(())
}

/// `hgetall 10,000, evalsha 300, …`, busiest first.
fn summary(cmds: &BTreeMap<String, CmdStat>) -> String {
    let mut v: Vec<(&String, &CmdStat)> = cmds.iter().collect();
    v.sort_by(|a, b| b.1.calls.cmp(&a.1.calls).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(n, s)| format!("{n} {}", thousands(s.calls)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_quantiles_are_nearest_rank() {
        let mut ns: Vec<u32> = (1..=1000).map(|i| i * 1000).collect();
        let l = LatencyStats::of(&mut ns).unwrap();
        assert_eq!(l.calls, 1000);
        assert_eq!(
            (l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms),
            (0.5, 0.99, 0.999, 1.0)
        );
        assert!(LatencyStats::of(&mut []).is_none());
    }

    #[test]
    fn holds_are_judged_per_window_as_well_as_per_phase() {
        let ms = |n: u32| n * 1_000_000;
        let lat = Latencies {
            by_phase: [vec![ms(1)], vec![ms(2)], vec![ms(3), ms(4)]],
            by_window: vec![
                [vec![ms(1)], vec![], vec![ms(3)]],
                [vec![], vec![ms(2)], vec![ms(4)]],
            ],
            held: 5,
            errors: 0,
        };
        let h = HoldReport::new(lat);
        assert_eq!(h.p99_rise_during_passes_ms, Some(3.0));
        assert_eq!(h.windows.len(), 2);
        assert_eq!(h.windows[1].from_s, WINDOW_S);
        assert!(h.windows[0].outside_passes.is_none());
        assert_eq!(h.windows[0].during_passes.as_ref().unwrap().p99_ms, 3.0);
        assert_eq!(h.windows[1].during_passes.as_ref().unwrap().p99_ms, 4.0);
    }

    #[test]
    fn rss_deviation_is_from_the_median() {
        let s = |t_s, rss_mb| RssSample { t_s, rss_mb };
        let r =
            RssSummary::of(&[s(0.0, 30.0), s(10.0, 40.0), s(20.0, 40.0), s(30.0, 44.0)]).unwrap();
        assert_eq!((r.first_mb, r.last_mb, r.median_mb), (30.0, 44.0, 40.0));
        assert_eq!(r.max_deviation_pct, 25.0);
        assert_eq!(r.max_deviation_after_warmup_pct, None);
        let later = [s(0.0, 10.0), s(300.0, 40.0), s(310.0, 42.0), s(320.0, 40.0)];
        let r = RssSummary::of(&later).unwrap();
        assert_eq!(r.max_deviation_after_warmup_pct, Some(5.0));
    }
}
