//! `--sizes`: the estates side by side, medians over each estate's runs:
//! wall times, their ratios to the floor and to the per-showtime loop of the
//! same run, InnoDB pages read from disk, peak RSS.

use std::fmt::Write as _;

use crate::compare::median;
use crate::numbers::thousands;
use crate::report::{Phase, Report, Run};

/// Phases by their place in a run (see `Subject::measure`).
const FLOOR: usize = 0;
const DRIFT: usize = 1;
const CONVERGED: usize = 2;
const LOOP: usize = 3;

/// One row: its label, and how to read it off one run.
type SizeRow = (&'static str, fn(&Run) -> Option<f64>, usize);

fn wall(run: &Run, phase: usize) -> Option<f64> {
    run.phases.get(phase).map(|p| p.wall_s)
}

fn disk_reads(run: &Run, phase: usize) -> Option<f64> {
    run.phases
        .get(phase)
        .map(|p: &Phase| p.load.sql("Innodb_buffer_pool_reads") as f64)
}

const ROWS: [SizeRow; 13] = [
    ("floor, wall s", |r| wall(r, FLOOR), 2),
    ("sweep with drift, wall s", |r| wall(r, DRIFT), 2),
    ("  × floor", |r| Some(wall(r, DRIFT)? / wall(r, FLOOR)?), 2),
    ("sweep converged, wall s", |r| wall(r, CONVERGED), 2),
    (
        "  × floor",
        |r| Some(wall(r, CONVERGED)? / wall(r, FLOOR)?),
        2,
    ),
    ("per-showtime loop, wall s", |r| wall(r, LOOP), 2),
    (
        "  loop ÷ sweep with drift",
        |r| Some(wall(r, LOOP)? / wall(r, DRIFT)?),
        2,
    ),
    ("InnoDB pages from disk: floor", |r| disk_reads(r, FLOOR), 0),
    ("  sweep with drift", |r| disk_reads(r, DRIFT), 0),
    ("  sweep converged", |r| disk_reads(r, CONVERGED), 0),
    ("  per-showtime loop", |r| disk_reads(r, LOOP), 0),
    (
        "peak RSS MB, with drift",
        |r| r.phases[DRIFT].peak_rss_mb,
        1,
    ),
    (
        "peak RSS MB, converged",
        |r| r.phases[CONVERGED].peak_rss_mb,
        1,
    ),
];

/// The medians of every estate, a column each.
pub fn table(reports: &[Report]) -> String {
    let mut out = String::new();
    let _ = write_table(&mut out, reports);
    out
}

fn write_table(out: &mut String, reports: &[Report]) -> std::fmt::Result {
    writeln!(
        out,
        "\nthe sizes side by side, medians of each one's runs (alternated: estates and the loop's place turn round every run):"
    )?;
    write!(out, "{:<34}", "")?;
    for r in reports {
        let size = format!(
            "{} × {}",
            thousands(r.params.showtimes as u64),
            r.params.seats_per_showtime
        );
        write!(out, "{size:>18}")?;
    }
    writeln!(out)?;
    for (label, value, precision) in ROWS {
        write!(out, "{label:<34}")?;
        for r in reports {
            let values: Vec<f64> = r.runs.iter().filter_map(value).collect();
            let shown = match values.is_empty() {
                true => "-".to_string(),
                false if precision == 0 => thousands(median(values).round() as u64),
                false => format!("{:.precision$}", median(values)),
            };
            write!(out, "{shown:>18}")?;
        }
        writeln!(out)?;
    }
    Ok(())
}
