//! The command line, and what it may not ask for.
//!
//! Without a subcommand, `seatflow-bench [OPTIONS]` is the sweep benchmark
//! (as it always was); `seatflow-bench soak [OPTIONS]` is the soak benchmark.
//! Both seed the same estate, so its options are one flattened struct.

use std::path::PathBuf;

use anyhow::{Result, ensure};
use clap::{Parser, Subcommand};

/// Keys and databases the benchmark must never touch: the production defaults.
const PRODUCTION_PREFIX: &str = "seatflow:";
const PRODUCTION_DATABASE: &str = "seatflow";

#[derive(Parser, Debug)]
#[command(
    about = "Seeds N ON_SALE showtimes × M seats with drift, then measures the raw-read floor \
             and a full sweep of the seat-level jobs (see benches/README.md); \
             `soak` runs the daemon on its defaults instead",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub mode: Option<Mode>,
    /// The sweep benchmark's options (when no subcommand is given).
    #[command(flatten)]
    pub sweep: Args,
}

#[derive(Subcommand, Debug)]
pub enum Mode {
    /// The daemon (`seatflow-reconciler run`) on its defaults over the estate for
    /// many minutes, with drift injected and a seat-hold workload alongside, on a
    /// private redis-server (see benches/README.md, "Soak").
    Soak(SoakArgs),
}

/// The estate both benchmarks seed, and where.
#[derive(clap::Args, Debug, Clone)]
pub struct EstateArgs {
    /// ON_SALE showtimes to seed.
    #[arg(long, default_value_t = 1000)]
    pub showtimes: usize,
    /// Seats per hall; every showtime has all of its hall's seats.
    #[arg(long, default_value_t = 300)]
    pub seats: usize,
    /// Share of seats occupied by valid orders (80 % PAID, 20 % PENDING).
    #[arg(long, default_value_t = 0.3)]
    pub occupancy: f64,
    /// Halls the showtimes are spread over (all of the same size).
    #[arg(long, default_value_t = 10)]
    pub halls: usize,
    /// Seed of the generator: the same seed gives the same estate.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// The throwaway database (dropped and created again); default
    /// `seatflow_bench`, for `soak` `seatflow_soak`.
    #[arg(long)]
    pub database: Option<String>,
    /// The throwaway key prefix (every key under it is deleted).
    #[arg(long, default_value = "seatflow-bench:")]
    pub prefix: String,
    /// MariaDB/MySQL server, without a database.
    #[arg(
        long,
        env = "SEATFLOW_TEST_MYSQL_URL",
        hide_env_values = true,
        default_value = "mysql://root@127.0.0.1:3306"
    )]
    pub mysql_url: String,
}

impl EstateArgs {
    /// `--database`, or this mode's default.
    pub fn database_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.database.as_deref().unwrap_or(default)
    }

    pub fn validate(&self, database: &str) -> Result<()> {
        ensure!(self.showtimes > 0, "--showtimes must be at least 1");
        ensure!(
            (1..=10_000).contains(&self.seats),
            "--seats must be in 1..=10000"
        );
        ensure!(self.halls > 0, "--halls must be at least 1");
        ensure!(
            (0.0..=0.9).contains(&self.occupancy),
            "--occupancy must be in 0..=0.9 (drift needs free seats)"
        );
        ensure!(
            self.prefix != PRODUCTION_PREFIX && database != PRODUCTION_DATABASE,
            "refusing to use seatflow's production database or key prefix"
        );
        Ok(())
    }
}

/// The sweep benchmark.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub estate: EstateArgs,
    /// Share of seats drifted, spread evenly over the three seat-level kinds.
    #[arg(long, default_value_t = 0.01)]
    pub drift: f64,
    /// Showtimes per Redis pipeline, for the floor and the sweep
    /// (reconcile.scan_chunk); default: the reconciler's default.
    #[arg(long)]
    pub scan_chunk: Option<usize>,
    /// Measure this many times; the drift is re-injected in between.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Keep the database and keys afterwards (to inspect them).
    #[arg(long)]
    pub keep: bool,
    /// The reconciler to measure; default: `seatflow-reconciler` next to this binary.
    #[arg(long, value_name = "PATH")]
    pub reconciler: Option<PathBuf>,
    /// Redis server.
    #[arg(
        long,
        env = "SEATFLOW_TEST_REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
    /// A MariaDB replica of `--mysql-url`'s server, without a database: the
    /// sweeps read their bulk reads there (mysql.replica_url), and its
    /// statements and CPU are measured beside the primary's.
    #[arg(long, value_name = "URL")]
    pub replica_url: Option<String>,
    /// With --replica-url: measure every repetition twice on the same
    /// estate, the reconciler without the replica and with it (alternating
    /// which goes first).
    #[arg(long, requires = "replica_url")]
    pub compare: bool,
    /// Estate sizes (showtimes) measured in one run, alternated, instead of
    /// `--showtimes`: `--sizes 10000,100000`. Each size has its own database
    /// (`<database>_<N>`) and key prefix (`<prefix><N>:`).
    #[arg(long, value_delimiter = ',', value_name = "N,N,…")]
    pub sizes: Vec<usize>,
    /// Keep the seeded estate for the next run, and use one kept before: a
    /// database that holds exactly this estate (size, seats, occupancy,
    /// halls, seed, drift) is not seeded again; only its seat hashes are
    /// written anew and the reconciler's own tables emptied. Nothing is
    /// removed at the end.
    #[arg(long)]
    pub reuse: bool,
    /// Leave out the per-showtime loop (measured by default).
    #[arg(long)]
    pub no_loop: bool,
    /// Log every SQL statement of each measured phase to a file of its own
    /// in DIR (MariaDB's slow-query log with its InnoDB figures). Sets the
    /// server's globals: a private server only.
    #[arg(long, value_name = "DIR")]
    pub statement_log: Option<PathBuf>,
}

impl Args {
    pub fn database(&self) -> &str {
        self.estate.database_or("seatflow_bench")
    }

    /// The estates to measure, each with its database and key prefix:
    /// `--sizes`, or the one of `--showtimes`.
    pub fn estates(&self) -> Vec<(EstateArgs, String)> {
        if self.sizes.is_empty() {
            return vec![(self.estate.clone(), self.database().to_string())];
        }
        self.sizes
            .iter()
            .map(|&n| {
                let mut estate = self.estate.clone();
                estate.showtimes = n;
                estate.prefix = format!("{}{n}:", self.estate.prefix);
                (estate, format!("{}_{n}", self.database()))
            })
            .collect()
    }

    pub fn validate(&self) -> Result<()> {
        for (estate, database) in self.estates() {
            estate.validate(&database)?;
        }
        ensure!(self.repeat > 0, "--repeat must be at least 1");
        ensure!(
            self.sizes.is_empty() || self.replica_url.is_none(),
            "--sizes and --replica-url are measured apart"
        );
        ensure!(
            (0.0..=0.5).contains(&self.drift),
            "--drift must be in 0..=0.5"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(["seatflow-bench"].iter().chain(args)).unwrap()
    }

    #[test]
    fn without_a_subcommand_it_is_the_sweep_benchmark() {
        let cli = parse(&["--showtimes", "5", "--repeat", "3", "--json", "x.json"]);
        assert!(cli.mode.is_none());
        assert_eq!(cli.sweep.estate.showtimes, 5);
        assert_eq!(cli.sweep.repeat, 3);
        assert_eq!(cli.sweep.database(), "seatflow_bench");
    }

    #[test]
    fn soak_takes_the_estate_options_and_its_own() {
        let cli = parse(&[
            "soak",
            "--minutes",
            "3",
            "--showtimes",
            "20",
            "--replicas",
            "2",
        ]);
        let Some(Mode::Soak(soak)) = cli.mode else {
            panic!("not soak")
        };
        assert_eq!(soak.estate.showtimes, 20);
        assert_eq!(soak.replicas, 2);
        assert_eq!(soak.database(), "seatflow_soak");
        assert!(soak.validate().is_ok());
    }

    #[test]
    fn compare_needs_a_replica() {
        assert!(Cli::try_parse_from(["seatflow-bench", "--compare"]).is_err());
        let cli = parse(&["--replica-url", "mysql://root@127.0.0.1:3492", "--compare"]);
        assert!(cli.sweep.compare);
        assert!(cli.sweep.validate().is_ok());
    }

    #[test]
    fn each_size_has_its_own_database_and_prefix() {
        let cli = parse(&["--sizes", "10000,100000", "--prefix", "b:", "--reuse"]);
        let estates = cli.sweep.estates();
        let named: Vec<(usize, &str, &str)> = estates
            .iter()
            .map(|(e, db)| (e.showtimes, e.prefix.as_str(), db.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                (10_000, "b:10000:", "seatflow_bench_10000"),
                (100_000, "b:100000:", "seatflow_bench_100000")
            ]
        );
        assert!(cli.sweep.validate().is_ok());
        let one = parse(&["--showtimes", "5"]).sweep.estates();
        assert_eq!((one.len(), one[0].1.as_str()), (1, "seatflow_bench"));
        let with_replica = parse(&["--sizes", "1,2", "--replica-url", "mysql://r"]);
        assert!(with_replica.sweep.validate().is_err());
    }

    #[test]
    fn sweep_options_before_soak_are_refused() {
        let err = Cli::try_parse_from(["seatflow-bench", "--repeat", "2", "soak"]);
        assert!(err.is_err());
    }
}

#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    #[command(flatten)]
    pub estate: EstateArgs,
    /// How long the daemons run (fractions allowed for development).
    #[arg(long, default_value_t = 30.0)]
    pub minutes: f64,
    /// The idle baseline: the hold workload alone, before any daemon starts.
    #[arg(long, default_value_t = 60)]
    pub idle_seconds: u64,
    /// Daemons started on the same data.
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// A setting given to every daemon besides the defaults, as
    /// `SECTION__KEY=VALUE` (`PASS__MAX_HASHES_PER_SECOND=1000`): for
    /// tuning experiments only; the recorded results use none.
    #[arg(long = "daemon-setting", value_name = "SECTION__KEY=VALUE")]
    pub daemon_settings: Vec<String>,
    /// Share of all seats drifted each minute (plus a deleted hash every
    /// `--delete-hash-every` minutes).
    #[arg(long, default_value_t = 0.001)]
    pub inject: f64,
    /// Delete one seat hash on injection round 2 and every this many rounds after (0: never).
    #[arg(long, default_value_t = 5)]
    pub delete_hash_every: u64,
    /// Milliseconds between two calls of the hold script.
    #[arg(long, default_value_t = 2.0)]
    pub hold_interval_ms: f64,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// The reconciler to run; default: `seatflow-reconciler` next to this binary.
    #[arg(long, value_name = "PATH")]
    pub reconciler: Option<PathBuf>,
    /// The private Redis's `notify-keyspace-events` (`Khgxe`: the
    /// notifications the daemon's change-driven checks use); default: the
    /// server's own (none).
    #[arg(long, value_name = "FLAGS")]
    pub keyspace_events: Option<String>,
    /// Live seatflow traffic on this many showtimes spread over the estate
    /// (0: none): customers buying, cancelling, refunding and abandoning,
    /// and crashing in each of the contract's windows (`seatflow-simulator`).
    /// The hold workload then runs on keys apart from the seat hashes, so
    /// that its writes are not a storm of keyspace events.
    #[arg(long, default_value_t = 0)]
    pub traffic_showtimes: usize,
    /// Concurrent customers of the traffic.
    #[arg(long, default_value_t = 16)]
    pub traffic_workers: usize,
    /// With traffic: a traffic showtime's hash is lost (`DEL`) every this
    /// many seconds, and as often (half-way between) sales open for a
    /// showtime whose hash is then never warmed (0: neither).
    #[arg(long, default_value_t = 20)]
    pub traffic_lose_every: u64,
}

impl SoakArgs {
    pub fn database(&self) -> &str {
        self.estate.database_or("seatflow_soak")
    }

    pub fn validate(&self) -> Result<()> {
        self.estate.validate(self.database())?;
        ensure!(self.minutes > 0.0, "--minutes must be more than 0");
        ensure!(
            (1..=16).contains(&self.replicas),
            "--replicas must be in 1..=16"
        );
        ensure!(
            (0.0..=0.05).contains(&self.inject),
            "--inject must be in 0..=0.05"
        );
        ensure!(
            self.hold_interval_ms >= 0.1,
            "--hold-interval-ms must be at least 0.1"
        );
        ensure!(
            (1..=256).contains(&self.traffic_workers),
            "--traffic-workers must be in 1..=256"
        );
        Ok(())
    }
}
