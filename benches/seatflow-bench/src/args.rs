//! The command line, and what it may not ask for.

use std::path::PathBuf;

use anyhow::{Result, ensure};
use clap::Parser;

/// Keys and databases the benchmark must never touch: the production defaults.
const PRODUCTION_PREFIX: &str = "seatflow:";
const PRODUCTION_DATABASE: &str = "seatflow";

#[derive(Parser, Debug)]
#[command(
    about = "Seeds N ON_SALE showtimes × M seats with drift, then measures the raw-read floor \
             and a full sweep of the seat-level jobs (see benches/README.md)"
)]
pub struct Args {
    /// ON_SALE showtimes to seed.
    #[arg(long, default_value_t = 1000)]
    pub showtimes: usize,
    /// Seats per hall; every showtime has all of its hall's seats.
    #[arg(long, default_value_t = 300)]
    pub seats: usize,
    /// Share of seats drifted, spread evenly over the three seat-level kinds.
    #[arg(long, default_value_t = 0.01)]
    pub drift: f64,
    /// Share of seats occupied by valid orders (80 % PAID, 20 % PENDING).
    #[arg(long, default_value_t = 0.3)]
    pub occupancy: f64,
    /// Halls the showtimes are spread over (all of the same size).
    #[arg(long, default_value_t = 10)]
    pub halls: usize,
    /// Showtimes per Redis pipeline, for the floor and the sweep
    /// (reconcile.scan_chunk); default: the reconciler's default.
    #[arg(long)]
    pub scan_chunk: Option<usize>,
    /// Measure this many times; the drift is re-injected in between.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Seed of the generator: the same seed gives the same estate.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Keep the database and keys afterwards (to inspect them).
    #[arg(long)]
    pub keep: bool,
    /// The throwaway database (dropped and created again).
    #[arg(long, default_value = "seatflow_bench")]
    pub database: String,
    /// The throwaway key prefix (every key under it is deleted).
    #[arg(long, default_value = "seatflow-bench:")]
    pub prefix: String,
    /// The reconciler to measure; default: `seatflow-reconciler` next to this binary.
    #[arg(long, value_name = "PATH")]
    pub reconciler: Option<PathBuf>,
    /// MariaDB/MySQL server, without a database.
    #[arg(
        long,
        env = "SEATFLOW_TEST_MYSQL_URL",
        hide_env_values = true,
        default_value = "mysql://root@127.0.0.1:3306"
    )]
    pub mysql_url: String,
    /// Redis server.
    #[arg(
        long,
        env = "SEATFLOW_TEST_REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
}

impl Args {
    pub fn validate(&self) -> Result<()> {
        ensure!(self.showtimes > 0, "--showtimes must be at least 1");
        ensure!(
            (1..=10_000).contains(&self.seats),
            "--seats must be in 1..=10000"
        );
        ensure!(self.halls > 0, "--halls must be at least 1");
        ensure!(self.repeat > 0, "--repeat must be at least 1");
        ensure!(
            (0.0..=0.5).contains(&self.drift),
            "--drift must be in 0..=0.5"
        );
        ensure!(
            (0.0..=0.9).contains(&self.occupancy),
            "--occupancy must be in 0..=0.9 (drift needs free seats)"
        );
        ensure!(
            self.prefix != PRODUCTION_PREFIX && self.database != PRODUCTION_DATABASE,
            "refusing to use seatflow's production database or key prefix"
        );
        Ok(())
    }
}
