//! `--compare`: per phase, the medians of the runs without the replica and
//! of those with it, side by side: what the replica takes off the primary
//! (statements, SELECTs, rows read, CPU) and what it costs the replica.

use std::fmt::Write as _;

use crate::numbers::thousands;
use crate::replica::Reads;
use crate::report::{Phase, Run};
use crate::services::Load;

/// One server's medians over the runs of one kind, for one phase.
#[derive(Debug)]
pub struct ServerMedians {
    pub statements: f64,
    pub com_select: f64,
    pub rows_read: f64,
    pub cpu_s: Option<f64>,
}

/// One phase over the runs of one kind (without the replica, or with it).
#[derive(Debug)]
pub struct Compared {
    pub phase: String,
    pub reads: Reads,
    pub runs: usize,
    pub wall_s: f64,
    /// The reconciler's CPU for a sweep, this process's for the floor.
    pub client_cpu_s: Option<f64>,
    pub primary: ServerMedians,
    pub replica: ServerMedians,
}

/// Every phase, without then with the replica; empty unless both kinds ran.
pub fn compare(runs: &[Run]) -> Vec<Compared> {
    let of = |reads| -> Vec<&Run> { runs.iter().filter(|r| r.reads == Some(reads)).collect() };
    let (without, with) = (of(Reads::Primary), of(Reads::Replica));
    if without.is_empty() || with.is_empty() {
        return Vec::new();
    }
    let phases = runs[0].phases.len();
    let mut out = Vec::new();
    for i in 0..phases {
        for (reads, group) in [(Reads::Primary, &without), (Reads::Replica, &with)] {
            let phases: Vec<&Phase> = group.iter().map(|r| &r.phases[i]).collect();
            let m = |f: &dyn Fn(&Phase) -> f64| median(phases.iter().map(|p| f(p)).collect());
            let mo = |f: &dyn Fn(&Phase) -> Option<f64>| {
                let v: Option<Vec<f64>> = phases.iter().map(|p| f(p)).collect();
                v.map(median)
            };
            let server = |sql: &dyn Fn(&Load, &str) -> u64, cpu: &dyn Fn(&Load) -> Option<f64>| {
                ServerMedians {
                    statements: m(&|p| sql(&p.load, "Questions") as f64),
                    com_select: m(&|p| sql(&p.load, "Com_select") as f64),
                    rows_read: m(&|p| sql(&p.load, "Rows_read") as f64),
                    cpu_s: mo(&|p| cpu(&p.load)),
                }
            };
            out.push(Compared {
                phase: phases[0].name.clone(),
                reads,
                runs: phases.len(),
                wall_s: m(&|p| p.wall_s),
                client_cpu_s: mo(&|p| p.cpu_s),
                primary: server(&|l, c| l.sql(c), &|l| l.mariadb_cpu_s),
                replica: server(&|l, c| l.replica.as_ref().map_or(0, |r| r.sql(c)), &|l| {
                    l.replica.as_ref().and_then(|r| r.cpu_s)
                }),
            });
        }
    }
    out
}

/// The middle value; of an even number, the mean of the two middle ones.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// One row of the comparison: its label, and how to read it.
type Row<'a> = (&'static str, &'a dyn Fn(&Compared) -> String);

/// The comparison table: a column per phase and kind of run.
pub fn write_comparison(out: &mut String, compared: &[Compared]) -> std::fmt::Result {
    if compared.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nwithout the replica vs bulk reads on the replica, medians of {} and {} runs:",
        compared[0].runs,
        compared.get(1).map_or(0, |c| c.runs)
    )?;
    write!(out, "{:<30}", "")?;
    for c in compared {
        write!(out, "{:>18}", c.phase)?;
    }
    writeln!(out)?;
    write!(out, "{:<30}", "")?;
    for c in compared {
        let kind = match c.reads {
            Reads::Primary => "without",
            Reads::Replica => "with replica",
        };
        write!(out, "{kind:>18}")?;
    }
    writeln!(out)?;
    let n = |v: f64| thousands(v.round() as u64);
    let s = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    let rows: [Row; 10] = [
        ("wall s", &|c| format!("{:.2}", c.wall_s)),
        ("client CPU s", &|c| s(c.client_cpu_s)),
        ("primary: SQL statements", &|c| n(c.primary.statements)),
        ("primary: SELECTs", &|c| n(c.primary.com_select)),
        ("primary: rows read", &|c| n(c.primary.rows_read)),
        ("primary: server CPU s", &|c| s(c.primary.cpu_s)),
        ("replica: SQL statements", &|c| n(c.replica.statements)),
        ("replica: SELECTs", &|c| n(c.replica.com_select)),
        ("replica: rows read", &|c| n(c.replica.rows_read)),
        ("replica: server CPU s", &|c| s(c.replica.cpu_s)),
    ];
    for (label, value) in rows {
        write!(out, "{label:<30}")?;
        for c in compared {
            write!(out, "{:>18}", value(c))?;
        }
        writeln!(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![7.0]), 7.0);
        assert!(median(Vec::new()).is_nan());
    }
}
