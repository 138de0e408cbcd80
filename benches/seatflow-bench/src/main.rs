//! `seatflow-bench`: how fast does the reconciler sweep a large estate, and
//! how close is that to the cost of merely reading it?
//!
//! 1. Seeds a throwaway database and key prefix on the local services with N
//!    ON_SALE showtimes × M seats: orders occupying a share of the seats, warmed
//!    hashes matching MySQL, then drift spread over the three seat-level kinds.
//! 2. Measures, in the same run and against the same data:
//!    - the raw-read floor (the fastest of three, after a warm-up): pipelined
//!      HGETALL of every hash + one streaming read of all occupancy, nothing else;
//!    - a full sweep of `paid-seats`, `orphan-locks` and `sold-orphans` by the
//!      real `seatflow-reconciler once` binary (wall time, peak RSS and CPU time
//!      from `wait4`), then a second sweep over the converged state;
//!    - around each of them: Redis commands (`INFO commandstats` deltas), SQL
//!      statements (`SHOW GLOBAL STATUS` deltas, server-wide) and the CPU time
//!      of both servers.
//! 3. Checks every seat against MySQL before the sweep (the injected drift must
//!    be found) and after it (none may be left: otherwise the benchmark exits
//!    1 after its report, naming how many seats and an example).
//! 4. Prints one table, writes JSON (`--json`), and removes the database and
//!    keys unless `--keep`.
//!
//! `seatflow-bench soak` is the other benchmark: the daemon on its defaults
//! for many minutes, with drift injected and a seat-hold workload alongside,
//! on a private redis-server (src/soak/).
//!
//! Method and recorded results: benches/README.md.

mod args;
mod bench;
mod compare;
mod counters;
mod estate;
mod floor;
mod launcher;
mod machine;
mod measure;
mod numbers;
mod per_showtime;
mod process;
mod replica;
mod report;
mod reuse;
mod seeding;
mod services;
mod sizes;
mod soak;
mod statement_log;
mod sweep;
mod table;
mod verify;

use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser;

use seatflow_reconciler::config::Settings;
use seatflow_reconciler::ops::demo::fixtures;

use crate::args::{Args, Cli, Mode};
use crate::bench::Bench;
use crate::launcher::{LAUNCHER_ENV, launcher_main};
use crate::replica::ReplicaServer;
use crate::sweep::reconciler_path;

fn main() -> ExitCode {
    if std::env::var_os(LAUNCHER_ENV).is_some() {
        return launcher_main();
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let valid = match &cli.mode {
        None => cli.sweep.validate(),
        Some(Mode::Soak(soak)) => soak.validate(),
    };
    if let Err(e) = valid {
        eprintln!("error: {e:#}");
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let outcome = match cli.mode {
        None => runtime.block_on(run(cli.sweep)),
        Some(Mode::Soak(soak)) => runtime.block_on(soak::run(soak)),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<()> {
    let scan_chunk = match args.scan_chunk {
        Some(n) => n,
        None => {
            Settings::load_with_env(None, Vec::new())?
                .reconcile
                .scan_chunk
        }
    };
    let reconciler = reconciler_path(args.reconciler.as_deref())?;
    // The replica first: it needs nothing of the bench's database, and a
    // refusal then leaves nothing to tear down.
    let replica = match &args.replica_url {
        Some(url) => Some(ReplicaServer::connect(url).await?),
        None => None,
    };
    let estates = args.estates();
    if let Some(dir) = &args.statement_log {
        // Before our own connections: sessions take the globals at connect.
        let server = fixtures::server_pool(&args.estate.mysql_url, &estates[0].1).await?;
        statement_log::prepare(&server, dir).await?;
        server.close().await;
    }
    let mut benches = Vec::new();
    for (estate, database) in &estates {
        let mut bench =
            Bench::connect(estate, database, &args.redis_url, scan_chunk, args.reuse).await?;
        bench.replica = replica.clone();
        benches.push(bench);
    }
    let estate_args: Vec<_> = estates.into_iter().map(|(e, _)| e).collect();
    let outcome = measure::seed_and_measure(&benches, &args, &estate_args, &reconciler).await;
    if args.statement_log.is_some() {
        statement_log::finish(&benches[0].pool).await?;
    }
    for bench in &benches {
        if args.keep || args.reuse {
            eprintln!(
                "kept database {} and keys {}* (inspect with: SEATFLOW__MYSQL__URL=… \
                 SEATFLOW__REDIS__KEY_PREFIX={} {} inspect --showtime 1)",
                bench.database,
                bench.keys.prefix(),
                bench.keys.prefix(),
                reconciler.display()
            );
        } else {
            bench.teardown().await?;
        }
    }
    let reports = outcome?;
    for report in &reports {
        print!("{}", report.table());
    }
    if reports.len() > 1 {
        print!("{}", sizes::table(&reports));
    }
    if let Some(path) = &args.json {
        let json = match &reports[..] {
            [one] => serde_json::to_string_pretty(one)?,
            all => serde_json::to_string_pretty(&serde_json::json!({ "sizes": all }))?,
        };
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    // The numbers are printed and written first, so that a failed run can be
    // looked at; but a sweep that left seats wrong is not a result.
    let failures: Vec<String> = reports
        .iter()
        .filter_map(|r| r.verification_failure())
        .collect();
    match failures.is_empty() {
        true => Ok(()),
        false => anyhow::bail!(failures.join("; ")),
    }
}
