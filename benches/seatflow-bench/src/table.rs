//! The results table printed on stdout.

use std::fmt::Write as _;

use crate::compare::{compare, write_comparison};
use crate::counters::ServerLoad;
use crate::estate::DriftKind;
use crate::numbers::thousands;
use crate::report::{Phase, Report, Run};

/// One row of the results table: its label, and how to read it off a phase.
type TableRow<'a> = (&'static str, &'a dyn Fn(&Phase) -> String);

/// With `--replica-url`: the primary's SELECTs, then the replica's figures.
const REPLICA_ROWS: [TableRow<'static>; 5] = [
    ("SQL SELECTs (Com_select)", &|ph| {
        thousands(ph.load.sql("Com_select"))
    }),
    ("replica: SQL statements", &|ph| {
        replica(ph, |r| thousands(r.sql("Questions")))
    }),
    ("replica: SELECTs (Com_select)", &|ph| {
        replica(ph, |r| thousands(r.sql("Com_select")))
    }),
    ("replica: rows read", &|ph| {
        replica(ph, |r| thousands(r.sql("Rows_read")))
    }),
    ("replica: server CPU s", &|ph| {
        replica(ph, |r| r.cpu_s.map_or("-".into(), |c| format!("{c:.2}")))
    }),
];

fn replica(ph: &Phase, show: impl Fn(&ServerLoad) -> String) -> String {
    ph.load.replica.as_ref().map_or("-".into(), show)
}

impl Report {
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = self.write_table(&mut out);
        out
    }

    fn write_table(&self, out: &mut String) -> std::fmt::Result {
        let (p, m, s) = (&self.params, &self.machine, &self.seeding);
        writeln!(
            out,
            "\nseatflow-bench: {} showtimes × {} seats = {} seats, occupancy {:.0} %, drift {:.2} % ({} seats)",
            thousands(p.showtimes as u64),
            p.seats_per_showtime,
            thousands(p.seats),
            p.occupancy * 100.0,
            p.drift * 100.0,
            thousands(s.drift_total()),
        )?;
        writeln!(
            out,
            "commit {} · {} · scan_chunk {} · {} CPUs ({}), {:.1} GiB, load average {}",
            self.commit, self.date, p.scan_chunk, m.cpus, m.cpu_model, m.memory_gib, m.load_average,
        )?;
        writeln!(
            out,
            "Redis {} (seat hashes: {}) · MariaDB {} (buffer pool {} MB)",
            m.redis_version, m.redis_hash_encoding, m.mariadb_version, m.innodb_buffer_pool_mb,
        )?;
        writeln!(
            out,
            "seeded in {:.1} s: {} orders, {} order_seat rows, {} hash fields; Redis used_memory {:.0} MB",
            s.seconds,
            thousands(s.orders),
            thousands(s.order_seats),
            thousands(s.hash_fields),
            s.redis_used_memory_mb
        )?;
        for (i, run) in self.runs.iter().enumerate() {
            self.write_run(out, i + 1, run)?;
        }
        write_comparison(out, &compare(&self.runs))?;
        writeln!(
            out,
            "\ntargets (spec: on 2 cores), judged on the median run:"
        )?;
        for t in &self.targets {
            let verdict = match t.met {
                Some(true) => "met",
                Some(false) => "MISSED",
                None => "see sizes",
            };
            writeln!(out, "  {verdict:<10} {}: {}", t.name, t.measured)?;
        }
        Ok(())
    }

    fn write_run(&self, out: &mut String, n: usize, run: &Run) -> std::fmt::Result {
        let reads = run
            .reads
            .map_or(String::new(), |r| format!(", {}", r.label()));
        let idle_replica = run.idle.replica.as_ref().map_or(String::new(), |r| {
            format!(" (the replica {})", r.sql("Questions"))
        });
        let order = match run.loop_first {
            Some(true) => ", the loop before the sweeps",
            Some(false) => ", the loop after the sweeps",
            None => "",
        };
        writeln!(
            out,
            "\nrun {n}/{}{reads}{order} (load average {}; in the idle second before it, other clients sent {} Redis commands and {} SQL statements{idle_replica})",
            self.runs.len(),
            run.load_average,
            run.idle.redis_commands,
            run.idle.sql_questions()
        )?;
        write!(out, "{:<34}", "")?;
        for ph in &run.phases {
            write!(out, "{:>18}", ph.name)?;
        }
        writeln!(out)?;
        let chunks = self.params.showtimes.div_ceil(self.params.scan_chunk) as f64;
        let num = |v: f64, prec: usize| format!("{v:.prec$}");
        let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |v| num(v, prec));
        let sql = |ph: &Phase, counter: &str| thousands(ph.load.sql(counter));
        let rows: [TableRow; 16] = [
            ("wall s", &|ph| num(ph.wall_s, 2)),
            ("  reconciler's own duration s", &|ph| {
                opt(ph.in_process_s, 2)
            }),
            ("M seats/s", &|ph| num(ph.seats_per_s / 1e6, 2)),
            ("× floor", &|ph| num(ph.vs_floor, 2)),
            ("client CPU s", &|ph| opt(ph.cpu_s, 2)),
            ("Redis server CPU s", &|ph| num(ph.load.redis_cpu_s, 2)),
            ("MariaDB server CPU s", &|ph| opt(ph.load.mariadb_cpu_s, 2)),
            ("peak RSS MB", &|ph| opt(ph.peak_rss_mb, 1)),
            ("Redis commands", &|ph| thousands(ph.load.redis_commands)),
            ("Redis round trips", &|ph| {
                ph.redis_round_trips.map_or("-".into(), thousands)
            }),
            ("  per 100 showtimes", &|ph| {
                opt(ph.round_trips_per_100_showtimes, 2)
            }),
            ("SQL statements (Questions)", &|ph| {
                thousands(ph.load.sql_questions())
            }),
            ("  per chunk of scan_chunk", &|ph| {
                num(ph.load.sql_questions() as f64 / chunks, 2)
            }),
            ("rows read by the server", &|ph| sql(ph, "Rows_read")),
            ("InnoDB pages read from disk", &|ph| {
                sql(ph, "Innodb_buffer_pool_reads")
            }),
            (
                "drift found / repaired",
                &|ph| match ph.found_and_repaired() {
                    Some((found, repaired)) => {
                        format!("{} / {}", thousands(found), thousands(repaired))
                    }
                    None => "-".into(),
                },
            ),
        ];
        let replica_rows: &[TableRow] = match run.phases[0].load.replica {
            Some(_) => &REPLICA_ROWS,
            None => &[],
        };
        for (label, value) in rows.iter().chain(replica_rows) {
            write!(out, "{label:<34}")?;
            for ph in &run.phases {
                write!(out, "{:>18}", value(ph))?;
            }
            writeln!(out)?;
        }
        if let Some(f) = &run.phases[0].floor {
            writeln!(
                out,
                "floor = Redis {:.2} s ({} fields) + MySQL {:.2} s ({} occupancy rows); \
                 both at once (not the floor): {} s",
                f.redis_s,
                thousands(f.hash_fields),
                f.mysql_s,
                thousands(f.occupancy_rows),
                f.overlapped_s.map_or("-".into(), |s| format!("{s:.2}"))
            )?;
        }
        for ph in &run.phases {
            writeln!(
                out,
                "Redis commands, {}: {}",
                ph.name,
                ph.load.redis_summary()
            )?;
        }
        let sweep = &run.phases[1];
        let repairs: Vec<String> = DriftKind::ALL
            .iter()
            .map(|k| {
                let injected = self.seeding.drift_by_kind.get(k).copied().unwrap_or(0);
                format!(
                    "{} {}/{}",
                    k.counter(),
                    thousands(sweep.fixed(k.counter())),
                    thousands(injected)
                )
            })
            .collect();
        writeln!(
            out,
            "repaired/injected: {}; backlog {}, errors {}; converged sweep found drift {}",
            repairs.join(", "),
            sweep.jobs_sum("backlog"),
            sweep.jobs_sum("errors"),
            run.phases[2].jobs_sum("drift"),
        )?;
        writeln!(
            out,
            "verify (every seat vs MySQL): before the sweep {} wrong (injected {}); after it {} of {} wrong{}",
            thousands(run.verify_before.wrong),
            thousands(self.seeding.drift_total()),
            thousands(run.verify_after.wrong),
            thousands(run.verify_after.seats_checked),
            if run.verify_after.wrong == 0 {
                " ✓"
            } else {
                " ✗"
            }
        )?;
        for e in &run.verify_after.examples {
            writeln!(out, "  still wrong: {e}")?;
        }
        Ok(())
    }
}
