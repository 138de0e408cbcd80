//! The sweep benchmark's run: seed the estate, then per repetition read the
//! raw-read floor and sweep with the reconciler (in both orders), verify
//! every seat, and put the report together. With `--compare`, each
//! repetition is two runs: the reconciler without the replica, and with it.

use crate::args::Args;
use crate::bench::Bench;
use crate::estate::{Drift, Estate};
use crate::machine::load_average;
use crate::numbers::thousands;
use crate::replica::{Reads, schedule};
use crate::report::{Report, Run};
use crate::seeding::{SeedStats, Seeder};
use anyhow::Result;
use std::path::Path;

impl Bench {
    pub async fn seed_and_measure(&self, args: &Args, reconciler: &Path) -> Result<Report> {
        let estate = Estate::new(&args.estate, args.drift);
        eprintln!(
            "seeding {} showtimes × {} seats into database {} and keys {}* …",
            thousands(args.estate.showtimes as u64),
            args.estate.seats,
            self.database,
            self.keys.prefix()
        );
        let (seeding, drift) = Seeder::new(self, &estate).run().await?;
        eprintln!(
            "seeded in {:.1} s: {} orders, {} order_seat rows, {} hash fields, {} drifted seats",
            seeding.seconds,
            thousands(seeding.orders),
            thousands(seeding.order_seats),
            thousands(seeding.hash_fields),
            thousands(seeding.drift_total())
        );
        if let Some(replica) = &self.replica {
            replica.await_seeding(&self.pool).await?;
        }
        let mut report = Report::new(args, self, seeding).await?;
        let runs = schedule(args.repeat, self.replica.is_some(), args.compare);
        for (i, reads) in runs.iter().enumerate() {
            if i > 0 {
                self.reinject(&drift, &estate).await?;
            }
            let how = reads.map_or(String::new(), |r| format!(", {}", r.label()));
            eprintln!("measuring, run {}/{}{how} …", i + 1, runs.len());
            let run = self
                .measure(&estate, reconciler, &report.seeding, *reads)
                .await?;
            report.runs.push(run);
        }
        report.judge();
        Ok(report)
    }

    /// One measurement: floor (after a warm-up), check, sweep, sweep again, check.
    pub async fn measure(
        &self,
        estate: &Estate,
        reconciler: &Path,
        seeding: &SeedStats,
        reads: Option<Reads>,
    ) -> Result<Run> {
        let seats = estate.total_seats();
        let idle = self.idle_load().await?;
        self.floor().await?; // warm-up: page cache, buffer pool, allocator
        let floor = self.fastest_floor().await?;
        let before = self.verify(estate).await?;
        let repair = self.sweep(reconciler, seeding, reads).await?;
        let converged = self.sweep(reconciler, seeding, reads).await?;
        let after = self.verify(estate).await?;
        let floor_s = floor.seconds;
        Ok(Run {
            load_average: load_average(),
            reads,
            idle,
            phases: vec![
                floor.into_phase(seats, self.showtimes),
                repair.into_phase("sweep, drift", seats, floor_s, self),
                converged.into_phase("sweep, converged", seats, floor_s, self),
            ],
            verify_before: before,
            verify_after: after,
        })
    }

    /// Puts the drift back (between repetitions): Redis only, MySQL is unchanged.
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
