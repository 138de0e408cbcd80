//! The sweep benchmark's run: seed each estate (or find it kept, `--reuse`),
//! then per repetition and estate read the raw-read floor, sweep with the
//! reconciler and run the per-showtime loop (the two in both orders), verify
//! every seat, and put the reports together. With `--compare`, each
//! repetition is two runs: the reconciler without the replica, and with it.
//! With `--sizes`, the estates take turns, in both orders.

use crate::args::{Args, EstateArgs};
use crate::bench::Bench;
use crate::estate::{Drift, Estate};
use crate::machine::load_average;
use crate::numbers::thousands;
use crate::per_showtime::LoopRun;
use crate::replica::{Reads, schedule};
use crate::report::{Report, Run};
use crate::seeding::Seeder;
use crate::statement_log;
use anyhow::Result;
use std::path::Path;

/// One estate under measurement: its services and names, what was seeded,
/// the drift to put back between phases, and its report.
pub struct Subject {
    pub bench: Bench,
    estate: Estate,
    drift: Vec<Drift>,
    pub report: Report,
}

/// The order of run `i`'s parts: estates (by index) and whether the loop
/// goes before the reconciler's sweeps. Every second run turns both round,
/// so neither part nor estate always meets the other's leftovers in the
/// buffer pool.
pub fn turn(i: usize, estates: usize) -> (Vec<usize>, bool) {
    let mut order: Vec<usize> = (0..estates).collect();
    if i % 2 == 1 {
        order.reverse();
    }
    (order, i % 2 == 1)
}

/// Seeds every estate (or finds it kept), then measures them all; the
/// reports, one per estate, in the order of `subjects`.
pub async fn seed_and_measure(
    benches: &[Bench],
    args: &Args,
    estates: &[EstateArgs],
    reconciler: &Path,
) -> Result<Vec<Report>> {
    let mut subjects = Vec::new();
    for (bench, estate) in benches.iter().zip(estates) {
        subjects.push(bench.seed(args, estate).await?);
    }
    let runs = schedule(args.repeat, benches[0].replica.is_some(), args.compare);
    for (i, reads) in runs.iter().enumerate() {
        let (order, loop_first) = turn(i, subjects.len());
        for s in order {
            let subject = &mut subjects[s];
            let how = reads.map_or(String::new(), |r| format!(", {}", r.label()));
            eprintln!(
                "measuring {} showtimes, run {}/{}{how} …",
                thousands(subject.estate.showtimes as u64),
                i + 1,
                runs.len()
            );
            let loop_first = (!args.no_loop).then_some(loop_first);
            let log = args.statement_log.as_deref().map(|dir| (dir, i + 1));
            let run = subject.measure(reconciler, *reads, loop_first, log).await?;
            subject.report.runs.push(run);
        }
    }
    Ok(subjects
        .into_iter()
        .map(|mut s| {
            s.report.judge();
            s.report
        })
        .collect())
}

impl Bench {
    /// Seeds the estate, or, with `--reuse` and the estate kept in the
    /// database, writes its seat hashes anew and empties the reconciler's tables.
    async fn seed(&self, args: &Args, estate_args: &EstateArgs) -> Result<Subject> {
        let estate = Estate::new(estate_args, args.drift);
        let kept = match args.reuse {
            true => self.kept_estate(&estate).await?,
            false => None,
        };
        let mysql = kept.is_none();
        eprintln!(
            "seeding {} showtimes × {} seats into {} and keys {}* …",
            thousands(estate.showtimes as u64),
            estate.seats,
            match mysql {
                true => format!("database {}", self.database),
                false => format!("(kept: database {} as it is)", self.database),
            },
            self.keys.prefix()
        );
        if mysql {
            self.recreate().await?;
        }
        let (mut seeding, drift) = Seeder::new(self, &estate, mysql).run().await?;
        eprintln!(
            "seeded in {:.1} s: {} orders, {} order_seat rows, {} hash fields, {} drifted seats",
            seeding.seconds,
            thousands(seeding.orders),
            thousands(seeding.order_seats),
            thousands(seeding.hash_fields),
            thousands(seeding.drift_total())
        );
        match kept {
            Some(kept) => {
                self.empty_reconciler_tables().await?;
                seeding.mysql_seconds = kept.mysql_seconds;
            }
            None => {
                seeding.mysql_seconds = Some(seeding.seconds);
                if args.reuse {
                    self.keep_estate(&estate, &seeding).await?;
                }
            }
        }
        if let Some(replica) = &self.replica {
            replica.await_seeding(&self.pool).await?;
        }
        let report = Report::new(args, estate_args, self, seeding).await?;
        Ok(Subject {
            bench: self.clone(),
            estate,
            drift,
            report,
        })
    }
}

impl Subject {
    /// One measurement: floor (after a warm-up), then the reconciler's sweep
    /// (check, sweep, sweep again, check) and the loop, in the order given
    /// (`loop_first`; None: no loop). The drift is put back before each.
    /// With `log` (`--statement-log` and the run's number), each phase's
    /// statements go to a file of its own.
    async fn measure(
        &self,
        reconciler: &Path,
        reads: Option<Reads>,
        loop_first: Option<bool>,
        log: Option<(&Path, usize)>,
    ) -> Result<Run> {
        let (bench, estate) = (&self.bench, &self.estate);
        let seats = estate.total_seats();
        let seeding = &self.report.seeding;
        let idle = bench.idle_load().await?;
        bench.floor().await?; // warm-up: page cache, buffer pool, allocator
        self.log(log, Some("floor")).await?;
        let floor = bench.fastest_floor().await?;
        self.log(log, None).await?;
        let floor_s = floor.seconds;
        let mut per_showtime = None;
        if loop_first == Some(true) {
            per_showtime = Some(self.per_showtime_loop(log).await?);
        }
        bench.reinject(&self.drift, estate).await?;
        let before = bench.verify(estate).await?;
        self.log(log, Some("sweep, drift")).await?;
        let repair = bench.sweep(reconciler, seeding, reads).await?;
        self.log(log, Some("sweep, converged")).await?;
        let converged = bench.sweep(reconciler, seeding, reads).await?;
        self.log(log, None).await?;
        let after = bench.verify(estate).await?;
        if loop_first == Some(false) {
            per_showtime = Some(self.per_showtime_loop(log).await?);
        }
        let mut phases = vec![
            floor.into_phase(seats, bench.showtimes),
            repair.into_phase("sweep, drift", seats, floor_s, bench),
            converged.into_phase("sweep, converged", seats, floor_s, bench),
        ];
        phases.extend(per_showtime.map(|l| l.into_phase(seats, floor_s, bench.showtimes)));
        Ok(Run {
            load_average: load_average(),
            reads,
            loop_first,
            idle,
            phases,
            verify_before: before,
            verify_after: after,
        })
    }
}

impl Subject {
    /// The loop over the estate with its drift put back.
    async fn per_showtime_loop(&self, log: Option<(&Path, usize)>) -> Result<LoopRun> {
        self.bench.reinject(&self.drift, &self.estate).await?;
        self.log(log, Some("per-showtime loop")).await?;
        let run = self.bench.per_showtime_loop().await?;
        self.log(log, None).await?;
        Ok(run)
    }

    /// With `--statement-log`: the statements from now on go to `phase`'s
    /// file (None: to none).
    async fn log(&self, log: Option<(&Path, usize)>, phase: Option<&str>) -> Result<()> {
        let Some((dir, run)) = log else {
            return Ok(());
        };
        let file = phase.map(|p| statement_log::file(dir, self.estate.showtimes, run, p));
        statement_log::switch(&self.bench.pool, dir, file.as_deref()).await
    }
}

impl Bench {
    /// Puts the drift back: Redis only, MySQL is unchanged.
    async fn reinject(&self, drift: &[Drift], estate: &Estate) -> Result<()> {
        let mut conn = self.redis.clone();
        for batch in drift.chunks(10_000) {
            let mut pipe = redis::pipe();
            for d in batch {
                pipe.cmd("HSET")
                    .arg(self.keys.seat(d.showtime))
                    .arg(&estate.seat_names[d.seat])
                    .arg(std::slice::from_ref(&d.kind.injected()))
                    .ignore();
            }
            pipe.query_async::<()>(&mut conn).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::turn;

    #[test]
    fn every_second_run_turns_estates_and_parts_round() {
        assert_eq!(turn(0, 2), (vec![0, 1], false));
        assert_eq!(turn(1, 2), (vec![1, 0], true));
        assert_eq!(turn(2, 2), (vec![0, 1], false));
        assert_eq!(turn(3, 1), (vec![0], true));
    }
}
