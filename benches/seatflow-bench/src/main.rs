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
//!    be found) and after it (none may be left).
//! 4. Prints one table, writes JSON (`--json`), and removes the database and
//!    keys unless `--keep`.
//!
//! Method and recorded results: benches/README.md.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::Read as _;
use std::ops::Range;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use clap::Parser;
use futures_util::TryStreamExt as _;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};
use serde::Serialize;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::{MySql, QueryBuilder, Row};
use tokio::task::JoinSet;

use seatflow_reconciler::config::{Settings, redact_url};
use seatflow_reconciler::fixtures::{self, row_label};
use seatflow_reconciler::store::mysql::MysqlStore;
use seatflow_reconciler::store::redis::Keys;

/// Seats per row of the generated hall template (`A-1` … `A-20`, `B-1` …).
const SEATS_PER_ROW: usize = 20;
/// Share of occupied seats held by PAID orders; the rest are PENDING.
const PAID_SHARE: f64 = 0.8;
/// Largest order, in seats (orders take 1..=this many seats).
const MAX_ORDER_SEATS: usize = 4;
/// Showtimes generated, and written to Redis in one pipeline, per seeding step.
const SEED_STEP: usize = 500;
/// A multi-row INSERT is sent once its text reaches this size: tens of
/// thousands of `order_seat` rows per statement, far below max_allowed_packet.
const MAX_STATEMENT_BYTES: usize = 1 << 20;
/// Seeding statements and pipelines in flight at once (and MySQL connections).
const SEED_IN_FLIGHT: usize = 4;
/// Floor measurements per run (after one warm-up); the fastest is kept.
const FLOOR_SAMPLES: usize = 3;
/// Showtimes per step of the seat-by-seat verification.
const VERIFY_CHUNK: usize = 1000;
/// How long the idle probe watches the services for other clients' traffic.
const IDLE_PROBE: Duration = Duration::from_secs(1);
/// Keys and databases the benchmark must never touch: the production defaults.
const PRODUCTION_PREFIX: &str = "seatflow:";
const PRODUCTION_DATABASE: &str = "seatflow";
/// What `once` must sweep: the three seat-level jobs (env names and CLI names).
const SEAT_JOBS: [(&str, &str); 3] = [
    ("PAID_SEATS", "paid-seats"),
    ("ORPHAN_LOCKS", "orphan-locks"),
    ("SOLD_ORPHANS", "sold-orphans"),
];
/// Every valid occupancy: the read the floor streams (the contract's definition).
const OCCUPANCY_SQL: &str = "SELECT os.showtime_id, os.seat_no, o.status FROM order_seat os \
     JOIN ticket_order o ON o.id = os.order_id \
     WHERE os.active = 1 AND o.status IN ('PENDING', 'PAID')";
/// Server counters sampled around each phase: statements, then why they cost.
const SQL_COUNTERS: [&str; 7] = [
    "Questions",
    "Com_select",
    "Com_insert",
    "Com_update",
    "Com_stmt_execute",
    "Rows_read",
    "Innodb_buffer_pool_reads",
];

#[derive(Parser, Debug)]
#[command(
    about = "Seeds N ON_SALE showtimes × M seats with drift, then measures the raw-read floor \
             and a full sweep of the seat-level jobs (see benches/README.md)"
)]
struct Args {
    /// ON_SALE showtimes to seed.
    #[arg(long, default_value_t = 1000)]
    showtimes: usize,
    /// Seats per hall; every showtime has all of its hall's seats.
    #[arg(long, default_value_t = 300)]
    seats: usize,
    /// Share of seats drifted, spread evenly over the three seat-level kinds.
    #[arg(long, default_value_t = 0.01)]
    drift: f64,
    /// Share of seats occupied by valid orders (80 % PAID, 20 % PENDING).
    #[arg(long, default_value_t = 0.3)]
    occupancy: f64,
    /// Halls the showtimes are spread over (all of the same size).
    #[arg(long, default_value_t = 10)]
    halls: usize,
    /// Showtimes per Redis pipeline, for the floor and the sweep
    /// (reconcile.scan_chunk); default: the reconciler's default.
    #[arg(long)]
    scan_chunk: Option<usize>,
    /// Measure this many times; the drift is re-injected in between.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Seed of the generator: the same seed gives the same estate.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Keep the database and keys afterwards (to inspect them).
    #[arg(long)]
    keep: bool,
    /// The throwaway database (dropped and created again).
    #[arg(long, default_value = "seatflow_bench")]
    database: String,
    /// The throwaway key prefix (every key under it is deleted).
    #[arg(long, default_value = "seatflow-bench:")]
    prefix: String,
    /// The reconciler to measure; default: `seatflow-reconciler` next to this binary.
    #[arg(long, value_name = "PATH")]
    reconciler: Option<PathBuf>,
    /// MariaDB/MySQL server, without a database.
    #[arg(
        long,
        env = "SEATFLOW_TEST_MYSQL_URL",
        hide_env_values = true,
        default_value = "mysql://root@127.0.0.1:3306"
    )]
    mysql_url: String,
    /// Redis server.
    #[arg(
        long,
        env = "SEATFLOW_TEST_REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    redis_url: String,
}

impl Args {
    fn validate(&self) -> Result<()> {
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

fn main() -> ExitCode {
    if std::env::var_os(LAUNCHER_ENV).is_some() {
        return launcher_main();
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    if let Err(e) = args.validate() {
        eprintln!("error: {e:#}");
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(args)) {
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
    let bench = Bench::connect(&args, scan_chunk).await?;
    let outcome = bench.seed_and_measure(&args, &reconciler).await;
    if args.keep {
        eprintln!(
            "kept database {} and keys {}* (inspect with: SEATFLOW__MYSQL__URL=… \
             SEATFLOW__REDIS__KEY_PREFIX={} {} inspect --showtime 1)",
            args.database,
            args.prefix,
            args.prefix,
            reconciler.display()
        );
    } else {
        bench.teardown().await?;
    }
    let report = outcome?;
    print!("{}", report.table());
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The repository root: the reconciler's source tree, two levels above this
/// crate (`benches/seatflow-bench`).
fn repo_root() -> &'static Path {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().and_then(Path::parent).unwrap_or(manifest)
}

/// The reconciler binary: `--reconciler`, else the one built next to us (in
/// a workspace both land in the same target directory, `CARGO_TARGET_DIR`
/// included).
fn reconciler_path(given: Option<&Path>) -> Result<PathBuf> {
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

// ---------------------------------------------------------------------------
// The estate: what is seeded, generated deterministically per showtime.
// ---------------------------------------------------------------------------

/// Who occupies a seat in MySQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Occupant {
    Free,
    Pending,
    Paid,
}

impl Occupant {
    /// The contract's expected Redis value.
    fn expected(self) -> u8 {
        match self {
            Occupant::Free => b'0',
            Occupant::Pending => b'1',
            Occupant::Paid => b'2',
        }
    }
}

/// The three seat-level drifts, each from one of seatflow's crash windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
enum DriftKind {
    /// Paid in MySQL, the `"1"` → `"2"` step lost.
    PaidSeat,
    /// Held in Redis, the order never inserted.
    OrphanLock,
    /// Refunded in MySQL, the `"2"` → `"0"` step lost.
    SoldOrphan,
}

impl DriftKind {
    const ALL: [DriftKind; 3] = [
        DriftKind::PaidSeat,
        DriftKind::OrphanLock,
        DriftKind::SoldOrphan,
    ];

    /// The value the crash left in Redis.
    fn injected(self) -> u8 {
        match self {
            DriftKind::PaidSeat | DriftKind::OrphanLock => b'1',
            DriftKind::SoldOrphan => b'2',
        }
    }

    /// Whether a seat with this occupant can carry this drift.
    fn fits(self, occupant: Occupant) -> bool {
        match self {
            DriftKind::PaidSeat => occupant == Occupant::Paid,
            DriftKind::OrphanLock | DriftKind::SoldOrphan => occupant == Occupant::Free,
        }
    }

    /// The counter under `fixed` in `once --output json` that repairs it.
    fn counter(self) -> &'static str {
        match self {
            DriftKind::PaidSeat => "paid_seats_fixed",
            DriftKind::OrphanLock => "orphan_locks_released",
            DriftKind::SoldOrphan => "sold_orphans_released",
        }
    }
}

/// The statuses the estate's orders have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pending,
    Paid,
    /// Paid, then refunded: its seats are released (`active` NULL).
    Refunded,
}

impl Status {
    fn as_sql(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::Paid => "PAID",
            Status::Refunded => "REFUNDED",
        }
    }
}

/// One order: its status and seat indices.
struct OrderSeed {
    status: Status,
    seats: Vec<usize>,
}

/// One drifted seat, kept so the drift can be re-injected between repetitions.
struct Drift {
    showtime: i64,
    seat: usize,
    kind: DriftKind,
}

/// One showtime as seeded.
struct ShowtimeSeed {
    id: i64,
    hall: i64,
    /// Redis value per seat index, drift included.
    values: Vec<u8>,
    orders: Vec<OrderSeed>,
    drift: Vec<Drift>,
}

/// The shape of the estate; each showtime is generated from its own seed, so
/// the estate does not depend on seeding order or batch sizes.
struct Estate {
    showtimes: usize,
    seats: usize,
    halls: usize,
    occupancy: f64,
    drift: f64,
    seed: u64,
    /// `A-1`, `A-2`, …: every hall has the same template.
    seat_names: Vec<String>,
}

impl Estate {
    fn new(args: &Args) -> Estate {
        let seat_names = (0..args.seats)
            .map(|i| format!("{}-{}", row_label(i / SEATS_PER_ROW), i % SEATS_PER_ROW + 1))
            .collect();
        Estate {
            showtimes: args.showtimes,
            seats: args.seats,
            halls: args.halls,
            occupancy: args.occupancy,
            drift: args.drift,
            seed: args.seed,
            seat_names,
        }
    }

    fn total_seats(&self) -> u64 {
        (self.showtimes * self.seats) as u64
    }

    /// Drifted seats of the showtime at `index`, numbered estate-wide: an exact
    /// share of the total, spread evenly, so 1 % of 3 M seats is 30,000 seats.
    fn drift_numbers(&self, index: usize) -> Range<u64> {
        let upto = |i: usize| (i as f64 * self.seats as f64 * self.drift).floor() as u64;
        upto(index)..upto(index + 1)
    }

    fn showtime(&self, index: usize) -> ShowtimeSeed {
        let id = index as i64 + 1;
        // A per-showtime seed: golden-ratio spread so neighbouring ids differ.
        let mut rng =
            SmallRng::seed_from_u64(self.seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let (occupants, mut orders) = self.orders(&mut rng);
        let mut values: Vec<u8> = occupants.iter().map(|o| o.expected()).collect();
        let mut drift = Vec::new();
        for n in self.drift_numbers(index) {
            // Rotate the kind estate-wide so the three get equal shares.
            let wanted = DriftKind::ALL[(n % 3) as usize];
            let Some((kind, seat)) = pick_drift_seat(&mut rng, &occupants, &values, wanted) else {
                continue;
            };
            values[seat] = kind.injected();
            if kind == DriftKind::SoldOrphan {
                // The refund happened in MySQL: the order is there, inactive.
                orders.push(OrderSeed {
                    status: Status::Refunded,
                    seats: vec![seat],
                });
            }
            drift.push(Drift {
                showtime: id,
                seat,
                kind,
            });
        }
        ShowtimeSeed {
            id,
            hall: (index % self.halls) as i64 + 1,
            values,
            orders,
            drift,
        }
    }

    /// Exactly `occupancy` of the seats, in orders of 1..=MAX_ORDER_SEATS seats.
    fn orders(&self, rng: &mut SmallRng) -> (Vec<Occupant>, Vec<OrderSeed>) {
        let taken = (self.seats as f64 * self.occupancy).round() as usize;
        let mut seats = rand::seq::index::sample(rng, self.seats, taken).into_vec();
        seats.sort_unstable();
        let mut occupants = vec![Occupant::Free; self.seats];
        let mut orders = Vec::new();
        let mut rest = seats.as_slice();
        while !rest.is_empty() {
            let n = rng.random_range(1..=MAX_ORDER_SEATS).min(rest.len());
            let (group, tail) = rest.split_at(n);
            rest = tail;
            let (status, occupant) = if rng.random_bool(PAID_SHARE) {
                (Status::Paid, Occupant::Paid)
            } else {
                (Status::Pending, Occupant::Pending)
            };
            for &s in group {
                occupants[s] = occupant;
            }
            orders.push(OrderSeed {
                status,
                seats: group.to_vec(),
            });
        }
        (occupants, orders)
    }
}

/// A random seat not yet drifted that can carry `wanted`, or else the next kind.
fn pick_drift_seat(
    rng: &mut SmallRng,
    occupants: &[Occupant],
    values: &[u8],
    wanted: DriftKind,
) -> Option<(DriftKind, usize)> {
    let start = DriftKind::ALL.iter().position(|k| *k == wanted)?;
    (0..3)
        .map(|i| DriftKind::ALL[(start + i) % 3])
        .find_map(|kind| {
            let candidates: Vec<usize> = (0..occupants.len())
                .filter(|&s| kind.fits(occupants[s]) && values[s] == occupants[s].expected())
                .collect();
            let seat = *candidates.get(rng.random_range(0..candidates.len().max(1)))?;
            Some((kind, seat))
        })
}

// ---------------------------------------------------------------------------
// Seeding: multi-row INSERTs and pipelined HSETs, several in flight.
// ---------------------------------------------------------------------------

/// One multi-row INSERT being built as literal SQL text. Literal values (all
/// generated here: integers and `[A-Z0-9-]` names) keep the statement far
/// below the 65,535-placeholder limit of a prepared statement.
struct Insert {
    head: &'static str,
    sql: String,
}

impl Insert {
    fn new(head: &'static str) -> Insert {
        Insert {
            head,
            sql: String::new(),
        }
    }

    /// The text to append one `(…)` tuple to.
    fn row(&mut self) -> &mut String {
        if self.sql.is_empty() {
            self.sql.push_str(self.head);
        } else {
            self.sql.push(',');
        }
        &mut self.sql
    }

    fn take_if_full(&mut self) -> Option<String> {
        (self.sql.len() >= MAX_STATEMENT_BYTES).then(|| std::mem::take(&mut self.sql))
    }

    fn take(&mut self) -> Option<String> {
        (!self.sql.is_empty()).then(|| std::mem::take(&mut self.sql))
    }
}

/// Timestamps of the seeded rows, as SQL literals (computed once).
struct Clock {
    now: chrono::NaiveDateTime,
    created: String,
    paid: String,
    refunded: String,
    /// PENDING orders expire in an hour: none is expired during the run.
    pending_expires: String,
    paid_expires: String,
}

impl Clock {
    fn new() -> Clock {
        let now = chrono::Utc::now().naive_utc();
        let at = |offset_s: i64| {
            let t = now + chrono::TimeDelta::seconds(offset_s);
            format!("'{}'", t.format("%Y-%m-%d %H:%M:%S%.3f"))
        };
        Clock {
            now,
            created: at(-600),
            paid: at(-540),
            refunded: at(-300),
            pending_expires: at(3600),
            paid_expires: at(300),
        }
    }

    /// Showtimes start a day from now, a minute apart, in id order.
    fn starts_at(&self, id: i64) -> String {
        let t = self.now + chrono::TimeDelta::days(1) + chrono::TimeDelta::minutes(id);
        format!("'{}'", t.format("%Y-%m-%d %H:%M:%S%.3f"))
    }
}

#[derive(Debug, Default, Clone, Serialize)]
struct SeedStats {
    seconds: f64,
    showtimes: u64,
    orders: u64,
    order_seats: u64,
    hash_fields: u64,
    drift_by_kind: BTreeMap<DriftKind, u64>,
    /// Redis `used_memory` after seeding, in MB.
    redis_used_memory_mb: f64,
}

impl SeedStats {
    fn drift_total(&self) -> u64 {
        self.drift_by_kind.values().sum()
    }
}

struct Seeder<'a> {
    bench: &'a Bench,
    estate: &'a Estate,
    clock: Clock,
    showtimes: Insert,
    orders: Insert,
    order_seats: Insert,
    in_flight: JoinSet<Result<()>>,
    next_order_id: i64,
    stats: SeedStats,
    drift: Vec<Drift>,
}

impl<'a> Seeder<'a> {
    fn new(bench: &'a Bench, estate: &'a Estate) -> Seeder<'a> {
        Seeder {
            bench,
            estate,
            clock: Clock::new(),
            showtimes: Insert::new(
                "INSERT INTO showtime (id, movie_id, hall_id, starts_at, status) VALUES ",
            ),
            orders: Insert::new(
                "INSERT INTO ticket_order (id, order_no, user_id, showtime_id, status, \
                 expires_at, created_at, paid_at, cancelled_at) VALUES ",
            ),
            order_seats: Insert::new(
                "INSERT INTO order_seat (order_id, showtime_id, seat_no, active) VALUES ",
            ),
            in_flight: JoinSet::new(),
            next_order_id: 0,
            stats: SeedStats::default(),
            drift: Vec::new(),
        }
    }

    /// Seeds the whole estate; returns what was written and the drift list.
    async fn run(mut self) -> Result<(SeedStats, Vec<Drift>)> {
        let started = Instant::now();
        self.halls().await?;
        for first in (0..self.estate.showtimes).step_by(SEED_STEP) {
            let last = (first + SEED_STEP).min(self.estate.showtimes);
            let mut pipe = redis::pipe();
            for index in first..last {
                let st = self.estate.showtime(index);
                self.add_rows(&st);
                self.add_hash(&mut pipe, &st);
                self.drift.extend(st.drift);
            }
            self.send_redis(pipe).await?;
            self.send_full_statements().await?;
        }
        for sql in [
            self.showtimes.take(),
            self.orders.take(),
            self.order_seats.take(),
        ]
        .into_iter()
        .flatten()
        {
            self.send_sql(sql).await?;
        }
        while let Some(done) = self.in_flight.join_next().await {
            done??;
        }
        // Fresh statistics, as a long-lived production database would have,
        // so the optimizer's plans do not depend on when auto-recalc ran.
        sqlx::raw_sql("ANALYZE TABLE hall_seat, showtime, ticket_order, order_seat")
            .execute(&self.bench.pool)
            .await?;
        self.stats.seconds = started.elapsed().as_secs_f64();
        self.stats.redis_used_memory_mb = self.bench.redis_used_memory_mb().await?;
        for d in &self.drift {
            *self.stats.drift_by_kind.entry(d.kind).or_default() += 1;
        }
        Ok((self.stats, self.drift))
    }

    /// Halls 1..=halls, each with the same template of enabled seats.
    async fn halls(&mut self) -> Result<()> {
        let mut halls = Insert::new("INSERT INTO hall (id, name) VALUES ");
        let mut seats = Insert::new(
            "INSERT INTO hall_seat (hall_id, seat_no, row_label, col_no, enabled) VALUES ",
        );
        for hall in 1..=self.estate.halls {
            write!(halls.row(), "({hall},'Bench hall {hall}')")?;
            for (i, name) in self.estate.seat_names.iter().enumerate() {
                let (row, col) = (row_label(i / SEATS_PER_ROW), i % SEATS_PER_ROW + 1);
                write!(seats.row(), "({hall},'{name}','{row}',{col},1)")?;
            }
        }
        for sql in [halls.take(), seats.take()].into_iter().flatten() {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&self.bench.pool)
                .await?;
        }
        Ok(())
    }

    fn add_rows(&mut self, st: &ShowtimeSeed) {
        let (sid, c) = (st.id, &self.clock);
        // `write!` into a String cannot fail.
        let _ = write!(
            self.showtimes.row(),
            "({sid},1,{},{},'ON_SALE')",
            st.hall,
            c.starts_at(sid)
        );
        for order in &st.orders {
            self.next_order_id += 1;
            let oid = self.next_order_id;
            let (expires, paid, cancelled, active) = match order.status {
                Status::Pending => (&c.pending_expires, "NULL", "NULL", "1"),
                Status::Paid => (&c.paid_expires, c.paid.as_str(), "NULL", "1"),
                Status::Refunded => (
                    &c.paid_expires,
                    c.paid.as_str(),
                    c.refunded.as_str(),
                    "NULL",
                ),
            };
            let _ = write!(
                self.orders.row(),
                "({oid},'B{oid:012}',{user},{sid},'{status}',{expires},{created},{paid},{cancelled})",
                user = oid % 100_000,
                status = order.status.as_sql(),
                created = c.created,
            );
            for &seat in &order.seats {
                let name = &self.estate.seat_names[seat];
                let _ = write!(self.order_seats.row(), "({oid},{sid},'{name}',{active})");
                self.stats.order_seats += 1;
            }
            self.stats.orders += 1;
        }
        self.stats.showtimes += 1;
    }

    /// The app's "open sales": one HSET of every seat (drift already applied).
    fn add_hash(&mut self, pipe: &mut redis::Pipeline, st: &ShowtimeSeed) {
        let cmd = pipe.cmd("HSET").arg(self.bench.keys.seat(st.id));
        for (name, value) in self.estate.seat_names.iter().zip(&st.values) {
            cmd.arg(name).arg(std::slice::from_ref(value));
        }
        cmd.ignore();
        self.stats.hash_fields += st.values.len() as u64;
    }

    async fn send_full_statements(&mut self) -> Result<()> {
        let full: Vec<String> = [
            self.showtimes.take_if_full(),
            self.orders.take_if_full(),
            self.order_seats.take_if_full(),
        ]
        .into_iter()
        .flatten()
        .collect();
        for sql in full {
            self.send_sql(sql).await?;
        }
        Ok(())
    }

    async fn send_sql(&mut self, sql: String) -> Result<()> {
        self.make_room().await?;
        let pool = self.bench.pool.clone();
        self.in_flight.spawn(async move {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&pool)
                .await?;
            Ok(())
        });
        Ok(())
    }

    async fn send_redis(&mut self, pipe: redis::Pipeline) -> Result<()> {
        self.make_room().await?;
        let mut conn = self.bench.redis.clone();
        self.in_flight.spawn(async move {
            pipe.query_async::<()>(&mut conn).await?;
            Ok(())
        });
        Ok(())
    }

    /// Backpressure: wait until fewer than SEED_IN_FLIGHT writes are pending.
    async fn make_room(&mut self) -> Result<()> {
        while self.in_flight.len() >= SEED_IN_FLIGHT {
            if let Some(done) = self.in_flight.join_next().await {
                done??;
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// The services: connections, counters, floor, verification, cleanup.
// ---------------------------------------------------------------------------

#[derive(Clone)]
struct Bench {
    pool: MySqlPool,
    redis: MultiplexedConnection,
    keys: Keys,
    db_url: String,
    redis_url: String,
    database: String,
    showtimes: usize,
    scan_chunk: usize,
    /// The MariaDB server's process, when it runs on this host.
    mariadb_pid: Option<u32>,
}

/// One command's `INFO commandstats` numbers.
#[derive(Debug, Default, Clone, Copy, Serialize)]
struct CmdStat {
    calls: u64,
    /// Redis CPU time spent in it, in microseconds.
    usec: u64,
}

/// Counters of both services at one instant.
struct Snapshot {
    redis: BTreeMap<String, CmdStat>,
    sql: BTreeMap<String, u64>,
    /// CPU seconds used so far by the Redis server, the MariaDB server (when
    /// it runs on this host and we may read its /proc entry) and this process.
    redis_cpu_s: f64,
    mariadb_cpu_s: Option<f64>,
    own_cpu_s: f64,
}

/// What the services did between two snapshots (other clients included).
#[derive(Debug, Default, Clone, Serialize)]
struct Load {
    /// Every Redis command, including those run inside Lua scripts, minus our INFO.
    redis_commands: u64,
    redis_by_command: BTreeMap<String, CmdStat>,
    /// `SHOW GLOBAL STATUS` deltas: server-wide (our own SHOW is taken out).
    sql: BTreeMap<String, u64>,
    /// CPU seconds the servers and this process spent meanwhile.
    redis_cpu_s: f64,
    mariadb_cpu_s: Option<f64>,
    bench_cpu_s: f64,
}

impl Load {
    fn sql_questions(&self) -> u64 {
        self.sql.get("Questions").copied().unwrap_or(0)
    }

    /// `hgetall 10000, evalsha 300, …`, busiest first.
    fn redis_summary(&self) -> String {
        let mut cmds: Vec<(&String, &CmdStat)> = self.redis_by_command.iter().collect();
        cmds.sort_by(|a, b| b.1.calls.cmp(&a.1.calls).then(a.0.cmp(b.0)));
        cmds.iter()
            .map(|(name, s)| format!("{name} {}", thousands(s.calls)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Snapshot {
    fn load_until(&self, later: &Snapshot) -> Load {
        let mut by_command = BTreeMap::new();
        for (name, after) in &later.redis {
            let before = self.redis.get(name).copied().unwrap_or_default();
            let calls = after.calls.saturating_sub(before.calls);
            // Our own INFO between snapshots is not part of what was measured.
            if calls > 0 && name != "info" {
                let usec = after.usec.saturating_sub(before.usec);
                by_command.insert(name.clone(), CmdStat { calls, usec });
            }
        }
        let sql = later
            .sql
            .iter()
            .map(|(k, v)| {
                let mut delta = v.saturating_sub(self.sql.get(k).copied().unwrap_or(0));
                // The later snapshot's own SHOW is counted in it: not measured work.
                if k == "Questions" {
                    delta = delta.saturating_sub(1);
                }
                (k.clone(), delta)
            })
            .collect();
        Load {
            redis_commands: by_command.values().map(|s| s.calls).sum(),
            redis_by_command: by_command,
            sql,
            redis_cpu_s: later.redis_cpu_s - self.redis_cpu_s,
            mariadb_cpu_s: later
                .mariadb_cpu_s
                .zip(self.mariadb_cpu_s)
                .map(|(a, b)| a - b),
            bench_cpu_s: later.own_cpu_s - self.own_cpu_s,
        }
    }
}

impl Bench {
    /// Connects, and starts from a clean slate: a new database with the
    /// reference schema, and no key under the prefix.
    async fn connect(args: &Args, scan_chunk: usize) -> Result<Bench> {
        let db_url = fixtures::with_database(&args.mysql_url, &args.database)?;
        fixtures::recreate_database(&db_url, &args.database)
            .await
            .with_context(|| format!("MariaDB at {}", redact_url(&args.mysql_url)))?;
        let pool = MySqlPoolOptions::new()
            .max_connections(SEED_IN_FLIGHT as u32)
            .connect(&db_url)
            .await?;
        MysqlStore::from_pool(pool.clone()).migrate(true).await?;
        let client = redis::Client::open(args.redis_url.as_str())?;
        // Seeding pipelines carry megabytes: far beyond the default 500 ms timeout.
        let config =
            AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(300)));
        let redis = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .with_context(|| format!("Redis at {}", redact_url(&args.redis_url)))?;
        let mariadb_pid = local_server_pid(&pool).await;
        let bench = Bench {
            mariadb_pid,
            pool,
            redis,
            keys: Keys::new(args.prefix.clone()),
            db_url,
            redis_url: args.redis_url.clone(),
            database: args.database.clone(),
            showtimes: args.showtimes,
            scan_chunk,
        };
        bench.delete_keys().await?;
        Ok(bench)
    }

    async fn seed_and_measure(&self, args: &Args, reconciler: &Path) -> Result<Report> {
        let estate = Estate::new(args);
        eprintln!(
            "seeding {} showtimes × {} seats into database {} and keys {}* …",
            thousands(args.showtimes as u64),
            args.seats,
            args.database,
            args.prefix
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
        let mut report = Report::new(args, self, seeding).await?;
        for rep in 1..=args.repeat {
            if rep > 1 {
                self.reinject(&drift, &estate).await?;
            }
            eprintln!("measuring, run {rep}/{} …", args.repeat);
            let run = self.measure(&estate, reconciler, &report.seeding).await?;
            report.runs.push(run);
        }
        report.judge();
        Ok(report)
    }

    /// One measurement: floor (after a warm-up), check, sweep, sweep again, check.
    async fn measure(
        &self,
        estate: &Estate,
        reconciler: &Path,
        seeding: &SeedStats,
    ) -> Result<Run> {
        let seats = estate.total_seats();
        let idle = self.idle_load().await?;
        self.floor().await?; // warm-up: page cache, buffer pool, allocator
        let floor = self.fastest_floor().await?;
        let before = self.verify(estate).await?;
        let repair = self.sweep(reconciler, seeding).await?;
        let converged = self.sweep(reconciler, seeding).await?;
        let after = self.verify(estate).await?;
        let floor_s = floor.seconds;
        Ok(Run {
            load_average: load_average(),
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

    /// Other clients' traffic over an idle second: the noise in every delta.
    async fn idle_load(&self) -> Result<Load> {
        let before = self.snapshot().await?;
        tokio::time::sleep(IDLE_PROBE).await;
        Ok(before.load_until(&self.snapshot().await?))
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        let mut conn = self.redis.clone();
        // "all" holds both sections we need, on every Redis version.
        let info: String = redis::cmd("INFO").arg("all").query_async(&mut conn).await?;
        let cpu = |field| info_field(&info, field).and_then(|v| v.parse::<f64>().ok());
        let names = SQL_COUNTERS.map(|n| format!("'{n}'")).join(", ");
        let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ({names})"
        )))
        .fetch_all(&self.pool)
        .await?;
        let mut sql = BTreeMap::new();
        for r in rows {
            let (name, value): (String, String) = (r.try_get(0)?, r.try_get(1)?);
            sql.insert(name, value.parse().unwrap_or(0));
        }
        Ok(Snapshot {
            redis: parse_commandstats(&info),
            sql,
            redis_cpu_s: cpu("used_cpu_user").unwrap_or(0.0) + cpu("used_cpu_sys").unwrap_or(0.0),
            mariadb_cpu_s: self.mariadb_pid.and_then(process_cpu_s),
            own_cpu_s: own_cpu_s(),
        })
    }

    async fn redis_used_memory_mb(&self) -> Result<f64> {
        let mut conn = self.redis.clone();
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await?;
        let bytes: f64 = info_field(&info, "used_memory").unwrap_or("0").parse()?;
        Ok(bytes / 1e6)
    }

    /// A floor is a lower bound, so the fastest of FLOOR_SAMPLES reads is
    /// taken: noise only ever adds time. This makes `× floor` conservative.
    async fn fastest_floor(&self) -> Result<FloorRun> {
        let mut best = self.floor().await?;
        for _ in 1..FLOOR_SAMPLES {
            let next = self.floor().await?;
            if next.seconds < best.seconds {
                best = next;
            }
        }
        Ok(best)
    }

    /// The raw-read floor: every hash (one pipeline per `scan_chunk` showtimes,
    /// one in flight, as the reconciler reads) and one streaming read of all
    /// occupancy. Replies are decoded, nothing else is done with them.
    async fn floor(&self) -> Result<FloorRun> {
        let before = self.snapshot().await?;
        let started = Instant::now();
        let (fields, pipelines) = self.read_every_hash().await?;
        let redis_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let rows = self.stream_occupancy().await?;
        let mysql_s = started.elapsed().as_secs_f64();
        let load = before.load_until(&self.snapshot().await?);
        Ok(FloorRun {
            seconds: redis_s + mysql_s,
            redis_s,
            mysql_s,
            overlapped_s: self.overlapped_reads().await?,
            fields,
            occupancy_rows: rows,
            pipelines,
            load,
        })
    }

    /// For reference, not the floor: both reads at once, one task each (so on
    /// both cores): what a sweep overlapping its Redis and MySQL reads could approach.
    async fn overlapped_reads(&self) -> Result<f64> {
        let started = Instant::now();
        let (a, b) = (self.clone(), self.clone());
        let hashes = tokio::spawn(async move { a.read_every_hash().await });
        let occupancy = tokio::spawn(async move { b.stream_occupancy().await });
        hashes.await??;
        occupancy.await??;
        Ok(started.elapsed().as_secs_f64())
    }

    async fn read_every_hash(&self) -> Result<(u64, u64)> {
        let mut conn = self.redis.clone();
        let (mut fields, mut pipelines) = (0u64, 0u64);
        for ids in id_chunks(self.showtimes, self.scan_chunk) {
            let mut pipe = redis::pipe();
            for id in ids {
                pipe.cmd("HGETALL").arg(self.keys.seat(id));
            }
            let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
            fields += replies.iter().map(hash_len).sum::<u64>();
            pipelines += 1;
        }
        Ok((fields, pipelines))
    }

    /// Streams every occupancy row and decodes it by position, keeping
    /// nothing: the way the reconciler reads occupancy, minus what it keeps.
    async fn stream_occupancy(&self) -> Result<u64> {
        let mut rows = 0u64;
        let mut stream = sqlx::query(OCCUPANCY_SQL).fetch(&self.pool);
        while let Some(row) = stream.try_next().await? {
            let _: i64 = row.try_get(0)?;
            let _: &str = row.try_get(1)?;
            let _: &str = row.try_get(2)?;
            rows += 1;
        }
        Ok(rows)
    }

    /// Runs the real reconciler over the three seat-level jobs.
    async fn sweep(&self, reconciler: &Path, seeding: &SeedStats) -> Result<SweepRun> {
        let cmd = self.sweep_command(reconciler, seeding)?;
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
    fn sweep_command(&self, reconciler: &Path, seeding: &SeedStats) -> Result<Command> {
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
        cmd.envs(self.sweep_env(seeding));
        Ok(cmd)
    }

    fn sweep_env(&self, seeding: &SeedStats) -> Vec<(String, String)> {
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
        env
    }

    /// Every seat of every ON_SALE showtime against what MySQL implies, read
    /// independently of the reconciler's code: template, occupancy, hash.
    /// The estate's shape is relied on: showtimes 1..=N, one shared template.
    async fn verify(&self, estate: &Estate) -> Result<Verification> {
        let started = Instant::now();
        let template: Vec<String> =
            sqlx::query_scalar("SELECT seat_no FROM hall_seat WHERE hall_id = 1 AND enabled = 1")
                .fetch_all(&self.pool)
                .await?;
        ensure!(
            template.len() == estate.seats,
            "hall 1 has {} enabled seats, expected {}",
            template.len(),
            estate.seats
        );
        let mut v = Verification::default();
        for ids in id_chunks(self.showtimes, VERIFY_CHUNK) {
            let occupancy = self.occupancy_of(ids.clone()).await?;
            let mut pipe = redis::pipe();
            for id in ids.clone() {
                pipe.cmd("HGETALL").arg(self.keys.seat(id));
            }
            let mut conn = self.redis.clone();
            let hashes: Vec<HashMap<String, String>> = pipe.query_async(&mut conn).await?;
            for (id, hash) in ids.zip(&hashes) {
                for seat in &template {
                    let occupant = occupancy.get(&id).and_then(|seats| seats.get(seat));
                    let expected = match occupant.map(String::as_str) {
                        Some("PAID") => "2",
                        Some(_) => "1",
                        None => "0",
                    };
                    v.check(id, seat, hash.get(seat).map(String::as_str), expected);
                }
            }
        }
        v.seconds = started.elapsed().as_secs_f64();
        Ok(v)
    }

    /// Showtime → seat → status of the valid order occupying it.
    async fn occupancy_of(&self, ids: Range<i64>) -> Result<HashMap<i64, HashMap<String, String>>> {
        let mut q = QueryBuilder::<MySql>::new(OCCUPANCY_SQL);
        q.push(" AND os.showtime_id >= ")
            .push_bind(ids.start)
            .push(" AND os.showtime_id < ")
            .push_bind(ids.end);
        let mut out: HashMap<i64, HashMap<String, String>> = HashMap::new();
        for r in q.build().fetch_all(&self.pool).await? {
            out.entry(r.try_get(0)?)
                .or_default()
                .insert(r.try_get(1)?, r.try_get(2)?);
        }
        Ok(out)
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

    async fn teardown(&self) -> Result<()> {
        self.delete_keys().await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS `{}`",
            self.database
        )))
        .execute(&self.pool)
        .await?;
        eprintln!(
            "removed database {} and keys {}*",
            self.database,
            self.keys.prefix()
        );
        Ok(())
    }

    /// Every key under the prefix: SCAN (never KEYS) and UNLINK (freed in the
    /// background, so a 3 GB estate does not block Redis).
    async fn delete_keys(&self) -> Result<()> {
        let mut conn = self.redis.clone();
        let pattern = format!("{}*", self.keys.prefix());
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(10_000)
                .query_async(&mut conn)
                .await?;
            if !keys.is_empty() {
                redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async::<()>(&mut conn)
                    .await?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}

/// Showtime ids 1..=n in ranges of `chunk`.
fn id_chunks(n: usize, chunk: usize) -> impl Iterator<Item = Range<i64>> {
    (1..=n as i64)
        .step_by(chunk)
        .map(move |first| first..(first + chunk as i64).min(n as i64 + 1))
}

/// Fields in an HGETALL reply (an array of field, value under RESP2; a map under RESP3).
fn hash_len(v: &Value) -> u64 {
    match v {
        Value::Array(items) => items.len() as u64 / 2,
        Value::Map(pairs) => pairs.len() as u64,
        _ => 0,
    }
}

/// `cmdstat_hgetall:calls=10,usec=52,…` lines → command → calls, usec.
fn parse_commandstats(info: &str) -> BTreeMap<String, CmdStat> {
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let mut stat = CmdStat::default();
            for (k, v) in rest.split(',').filter_map(|kv| kv.split_once('=')) {
                match k {
                    "calls" => stat.calls = v.parse().ok()?,
                    "usec" => stat.usec = v.parse().ok()?,
                    _ => {}
                }
            }
            Some((name.to_string(), stat))
        })
        .collect()
}

fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(field)?.strip_prefix(':'))
}

/// The MariaDB server's pid, from its pid file, if that process is on this host.
async fn local_server_pid(pool: &MySqlPool) -> Option<u32> {
    let (pid_file, datadir): (String, String) = sqlx::query_as("SELECT @@pid_file, @@datadir")
        .fetch_one(pool)
        .await
        .ok()?;
    let path = Path::new(&datadir).join(pid_file); // an absolute pid_file wins
    let pid: u32 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    process_cpu_s(pid).map(|_| pid)
}

/// User + system CPU seconds of a process, from /proc/<pid>/stat.
fn process_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the line, in clock ticks.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / per_second)
}

/// User + system CPU seconds of this process so far.
fn own_cpu_s() -> f64 {
    // SAFETY: `rusage` is plain old data; getrusage fills it in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is valid for the duration of the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    timeval_s(usage.ru_utime) + timeval_s(usage.ru_stime)
}

fn timeval_s(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

// ---------------------------------------------------------------------------
// The measured child process.
//
// Peak RSS comes from `wait4`'s rusage, with one trap: at exec, Linux folds
// the high-water RSS of the memory the process had *before* exec into its
// `ru_maxrss`, and a child spawned with posix_spawn (or vfork) shares its
// parent's memory until exec. Spawned from this process (hundreds of MB after
// seeding and verifying), every reconciler would seem to peak at our size.
// So the reconciler is started by a launcher: this same binary re-executed
// with LAUNCHER_ENV set, which branches off at the top of `main` before
// allocating much, spawns the reconciler, reaps it with `wait4` and reports
// on a marker line of stderr. The launcher's own high-water mark (a few MB)
// is the floor under the measurement, and is reported with it.
// ---------------------------------------------------------------------------

/// Set in the environment of the launcher (see above).
const LAUNCHER_ENV: &str = "SEATFLOW_BENCH_LAUNCHER";
/// Prefix of the launcher's report line on stderr.
const MEASURE_MARKER: &str = "seatflow-bench-measured: ";

/// What the launcher measured of one reconciler process.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
struct Measured {
    /// From spawning the process to reaping it.
    wall_s: f64,
    exit_code: Option<i32>,
    /// `ru_maxrss`: peak resident set size.
    peak_rss_mb: f64,
    /// User + system CPU time.
    cpu_s: f64,
    /// The launcher's own peak RSS: `peak_rss_mb` cannot be lower than this.
    launcher_rss_mb: f64,
}

/// Launcher mode: argv is `<program> <args…>`; stdout and stderr are inherited.
fn launcher_main() -> ExitCode {
    let mut argv = std::env::args_os().skip(1);
    let Some(program) = argv.next() else {
        eprintln!("launcher: no program given");
        return ExitCode::from(2);
    };
    let mut cmd = Command::new(program);
    cmd.args(argv).env_remove(LAUNCHER_ENV);
    match measure(cmd) {
        Ok(m) => {
            let line = serde_json::to_string(&m).expect("plain struct");
            eprintln!("\n{MEASURE_MARKER}{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("launcher: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `cmd` to completion and reaps it with `wait4`, which, unlike
/// `Child::wait`, also returns the child's resource usage.
fn measure(mut cmd: Command) -> std::io::Result<Measured> {
    let launcher_rss_mb = own_peak_rss_mb();
    let started = Instant::now();
    let child = cmd.spawn()?;
    let (status, usage) = wait4(child.id())?;
    Ok(Measured {
        wall_s: started.elapsed().as_secs_f64(),
        exit_code: std::process::ExitStatus::from_raw(status).code(),
        // Linux reports ru_maxrss in kilobytes.
        peak_rss_mb: usage.ru_maxrss as f64 / 1024.0,
        cpu_s: timeval_s(usage.ru_utime) + timeval_s(usage.ru_stime),
        launcher_rss_mb,
    })
}

/// `VmHWM` of this process: its own peak RSS since exec, nothing inherited.
fn own_peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

struct ChildRun {
    measured: Measured,
    stdout: String,
    /// The reconciler's stderr, without the launcher's marker line.
    stderr: String,
}

/// Runs `reconciler args…` through the launcher, capturing its output.
/// Piped stderr also keeps the reconciler from drawing progress (and from
/// paying for the COUNT query behind it) when the benchmark runs on a terminal.
fn run_reconciler(mut launcher: Command) -> Result<ChildRun> {
    launcher
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = launcher.spawn().context("starting the launcher")?;
    let mut err_pipe = child.stderr.take().expect("piped stderr");
    let stderr_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .expect("piped stdout")
        .read_to_string(&mut stdout)?;
    child.wait()?;
    let stderr = stderr_reader.join().unwrap_or_default();
    let Some((before, line)) = stderr.rsplit_once(MEASURE_MARKER) else {
        bail!(
            "the launcher reported no measurement; its stderr:\n{}",
            tail(&stderr, 40)
        );
    };
    Ok(ChildRun {
        measured: serde_json::from_str(line.trim())?,
        stdout,
        stderr: before.trim_end().to_string(),
    })
}

/// `wait4(2)` on our own child: its raw wait status and resource usage.
fn wait4(pid: u32) -> std::io::Result<(i32, libc::rusage)> {
    let mut status: libc::c_int = 0;
    // SAFETY: `rusage` is plain old data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `pid` is a child we spawned and have not reaped; both
        // pointers are valid for the duration of the call.
        let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
        if r == pid as libc::pid_t {
            return Ok((status, usage));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// ---------------------------------------------------------------------------
// Results: one table, JSON, and the verdict against the spec's targets.
// ---------------------------------------------------------------------------

struct FloorRun {
    seconds: f64,
    redis_s: f64,
    mysql_s: f64,
    overlapped_s: f64,
    fields: u64,
    occupancy_rows: u64,
    pipelines: u64,
    load: Load,
}

impl FloorRun {
    fn into_phase(self, seats: u64, showtimes: usize) -> Phase {
        Phase {
            name: "floor (raw read)".into(),
            wall_s: self.seconds,
            in_process_s: None,
            seats_per_s: seats as f64 / self.seconds,
            vs_floor: 1.0,
            redis_round_trips: Some(self.pipelines),
            round_trips_per_100_showtimes: Some(self.pipelines as f64 * 100.0 / showtimes as f64),
            peak_rss_mb: None,
            launcher_rss_mb: None,
            // This process did the reading.
            cpu_s: Some(self.load.bench_cpu_s),
            floor: Some(FloorDetail {
                redis_s: self.redis_s,
                mysql_s: self.mysql_s,
                overlapped_s: self.overlapped_s,
                hash_fields: self.fields,
                occupancy_rows: self.occupancy_rows,
            }),
            reconciler: None,
            load: self.load,
        }
    }
}

struct SweepRun {
    measured: Measured,
    report: serde_json::Value,
    load: Load,
}

impl SweepRun {
    fn into_phase(self, name: &str, seats: u64, floor_s: f64, bench: &Bench) -> Phase {
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
            load: self.load,
        }
    }
}

/// One row of the results table: its label, and how to read it off a phase.
type TableRow<'a> = (&'static str, &'a dyn Fn(&Phase) -> String);

#[derive(Debug, Serialize)]
struct FloorDetail {
    redis_s: f64,
    mysql_s: f64,
    /// Both reads at once (not part of the floor; see `Bench::overlapped_reads`).
    overlapped_s: f64,
    hash_fields: u64,
    occupancy_rows: u64,
}

#[derive(Debug, Serialize)]
struct Phase {
    name: String,
    /// Wall clock; for a sweep, from spawning the process to reaping it.
    wall_s: f64,
    /// The reconciler's own `duration_ms` (connected, jobs run).
    in_process_s: Option<f64>,
    seats_per_s: f64,
    vs_floor: f64,
    redis_round_trips: Option<u64>,
    round_trips_per_100_showtimes: Option<f64>,
    peak_rss_mb: Option<f64>,
    /// The floor under `peak_rss_mb`: the launcher's own peak (see `Measured`).
    launcher_rss_mb: Option<f64>,
    /// User + system CPU time of the client: the reconciler process for a
    /// sweep, this process for the floor.
    cpu_s: Option<f64>,
    floor: Option<FloorDetail>,
    /// The reconciler's `once --output json` report.
    reconciler: Option<serde_json::Value>,
    load: Load,
}

impl Phase {
    /// What the reconciler reported under `fixed`.
    fn fixed(&self, counter: &str) -> u64 {
        self.reconciler
            .as_ref()
            .and_then(|r| r["fixed"][counter].as_u64())
            .unwrap_or(0)
    }

    /// Sum of a per-job field (`drift`, `backlog`, `errors`) over the jobs.
    fn jobs_sum(&self, field: &str) -> u64 {
        self.reconciler
            .as_ref()
            .and_then(|r| r["jobs"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|j| j[field].as_u64())
            .sum()
    }
}

#[derive(Debug, Default, Serialize)]
struct Verification {
    seconds: f64,
    seats_checked: u64,
    /// Seats whose Redis value (or absence) differs from what MySQL implies.
    wrong: u64,
    examples: Vec<String>,
}

impl Verification {
    fn check(&mut self, showtime: i64, seat: &str, redis: Option<&str>, expected: &str) {
        self.seats_checked += 1;
        if redis != Some(expected) {
            self.wrong += 1;
            if self.examples.len() < 5 {
                self.examples.push(format!(
                    "showtime {showtime} seat {seat}: redis {redis:?}, expected {expected:?}"
                ));
            }
        }
    }
}

#[derive(Debug, Serialize)]
struct Run {
    /// The machine's load average when the run started: was something else busy?
    load_average: String,
    /// Other clients' traffic during one idle second before the run.
    idle: Load,
    phases: Vec<Phase>,
    verify_before: Verification,
    verify_after: Verification,
}

#[derive(Debug, Serialize)]
struct Machine {
    cpus: usize,
    cpu_model: String,
    memory_gib: f64,
    load_average: String,
    redis_version: String,
    /// How Redis stores a seeded seat hash: a listpack (compact, scanned
    /// linearly) below `hash-max-listpack-entries` fields, else a hash table.
    redis_hash_encoding: String,
    mariadb_version: String,
    innodb_buffer_pool_mb: u64,
}

#[derive(Debug, Serialize)]
struct Params {
    showtimes: usize,
    seats_per_showtime: usize,
    seats: u64,
    halls: usize,
    occupancy: f64,
    drift: f64,
    scan_chunk: usize,
    seed: u64,
    repeat: usize,
    /// The reconciler's environment for the sweeps (URLs redacted).
    sweep_env: Vec<(String, String)>,
}

#[derive(Debug, Serialize)]
struct Target {
    name: &'static str,
    measured: String,
    met: Option<bool>,
}

#[derive(Debug, Serialize)]
struct Report {
    date: String,
    commit: String,
    machine: Machine,
    params: Params,
    seeding: SeedStats,
    runs: Vec<Run>,
    targets: Vec<Target>,
}

impl Report {
    async fn new(args: &Args, bench: &Bench, seeding: SeedStats) -> Result<Report> {
        let sweep_env = bench
            .sweep_env(&seeding)
            .into_iter()
            .map(|(k, v)| {
                let v = if k.ends_with("_URL") {
                    redact_url(&v)
                } else {
                    v
                };
                (k, v)
            })
            .collect();
        Ok(Report {
            date: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            commit: git_commit(),
            machine: machine(bench).await?,
            params: Params {
                showtimes: args.showtimes,
                seats_per_showtime: args.seats,
                seats: (args.showtimes * args.seats) as u64,
                halls: args.halls,
                occupancy: args.occupancy,
                drift: args.drift,
                scan_chunk: bench.scan_chunk,
                seed: args.seed,
                repeat: args.repeat,
                sweep_env,
            },
            seeding,
            runs: Vec::new(),
            targets: Vec::new(),
        })
    }

    /// The spec's targets, judged on the median repair sweep (by wall time).
    fn judge(&mut self) {
        let Some(run) = self.median_run() else { return };
        let (floor, sweep) = (&run.phases[0], &run.phases[1]);
        let mut targets = Vec::new();
        if self.params.seats == 3_000_000 {
            targets.push(Target {
                name: "10k × 300 swept in ≤ 3 s",
                measured: format!("{:.2} s", sweep.wall_s),
                met: Some(sweep.wall_s <= 3.0),
            });
        }
        targets.push(Target {
            name: "≥ 1 M seats/s",
            measured: format!("{:.2} M seats/s", sweep.seats_per_s / 1e6),
            met: Some(sweep.seats_per_s >= 1e6),
        });
        targets.push(Target {
            name: "≤ 1.5 × the raw-read floor",
            measured: format!(
                "{:.2} × ({:.2} s / {:.2} s)",
                sweep.vs_floor, sweep.wall_s, floor.wall_s
            ),
            met: Some(sweep.vs_floor <= 1.5),
        });
        targets.push(Target {
            name: "Redis round trips per 100 showtimes O(1)",
            measured: sweep
                .round_trips_per_100_showtimes
                .map_or("not reported".into(), |r| {
                    format!(
                        "{r:.2} (floor {:.2})",
                        floor.round_trips_per_100_showtimes.unwrap_or(0.0)
                    )
                }),
            met: None,
        });
        let chunks = self.params.showtimes.div_ceil(self.params.scan_chunk) as f64;
        targets.push(Target {
            name: "SQL statements per chunk O(1)",
            measured: format!(
                "{:.1} per chunk of {} showtimes (server-wide Questions)",
                sweep.load.sql_questions() as f64 / chunks,
                self.params.scan_chunk
            ),
            met: None,
        });
        let rss = sweep.peak_rss_mb.unwrap_or(0.0);
        targets.push(Target {
            name: "peak RSS ≤ 64 MB (and flat as N grows)",
            measured: format!("{rss:.1} MB"),
            met: Some(rss <= 64.0),
        });
        self.targets = targets;
    }

    /// The median run by the drift sweep's wall time; of an even number, the
    /// faster middle one (on a shared machine, noise only ever adds time).
    fn median_run(&self) -> Option<&Run> {
        let mut runs: Vec<&Run> = self.runs.iter().collect();
        runs.sort_by(|a, b| a.phases[1].wall_s.total_cmp(&b.phases[1].wall_s));
        runs.get(runs.len().saturating_sub(1) / 2).copied()
    }

    fn table(&self) -> String {
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
        writeln!(
            out,
            "\ntargets (spec: 10k × 300 seats on 2 cores), judged on the median run:"
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
        writeln!(
            out,
            "\nrun {n}/{} (load average {}; in the idle second before it, other clients sent {} Redis commands and {} SQL statements)",
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
        let sql =
            |ph: &Phase, counter: &str| thousands(ph.load.sql.get(counter).copied().unwrap_or(0));
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
            ("drift found / repaired", &|ph| match ph.reconciler {
                Some(_) => format!(
                    "{} / {}",
                    thousands(ph.jobs_sum("drift")),
                    thousands(ph.jobs_sum("fixed"))
                ),
                None => "-".into(),
            }),
        ];
        for (label, value) in rows {
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
                 both at once (not the floor): {:.2} s",
                f.redis_s,
                thousands(f.hash_fields),
                f.mysql_s,
                thousands(f.occupancy_rows),
                f.overlapped_s
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

/// `bc9d361`, with `+dirty` when the reconciler's tracked sources differ from
/// that commit (the benchmark's own crate and results, under benches/, do not
/// count), run in the source tree the binaries were built from.
fn git_commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(repo_root())
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let changes = [
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":!benches",
    ];
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(head) => match git(&changes) {
            Some(changed) if !changed.is_empty() => format!("{head}+dirty"),
            _ => head,
        },
        None => "unknown".into(),
    }
}

async fn machine(bench: &Bench) -> Result<Machine> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let mut conn = bench.redis.clone();
    let server: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await?;
    let mariadb_version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&bench.pool)
        .await?;
    let buffer_pool: u64 = sqlx::query_scalar("SELECT @@innodb_buffer_pool_size")
        .fetch_one(&bench.pool)
        .await?;
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(bench.keys.seat(1))
        .query_async(&mut conn)
        .await?;
    // CONFIG may be disabled (managed Redis): the encoding alone still tells.
    let limit: Option<(String, String)> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("hash-max-listpack-entries")
        .query_async(&mut conn)
        .await
        .ok();
    Ok(Machine {
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model,
        memory_gib: mem_kib / (1024.0 * 1024.0),
        load_average: load_average(),
        redis_version: info_field(&server, "redis_version").unwrap_or("?").into(),
        redis_hash_encoding: match limit {
            Some((name, value)) => format!("{encoding} ({name} {value})"),
            None => encoding,
        },
        mariadb_version,
        innodb_buffer_pool_mb: buffer_pool / (1024 * 1024),
    })
}

/// The 1, 5 and 15 minute load averages, e.g. `0.42 1.64 2.26`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// 3000000 → `3,000,000`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
