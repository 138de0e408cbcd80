//! `seatflow-bench soak`: the daemon on its defaults over a large estate for
//! many minutes, as production runs it, with a seat-hold workload alongside.
//!
//! 1. A private `redis-server` (so every Redis command counted is the
//!    daemons', the hold workload's or our injections'), the estate seeded
//!    into it and into a throwaway database on the MariaDB of
//!    `SEATFLOW_TEST_MYSQL_URL`, without drift.
//! 2. An idle baseline: the hold workload alone (`--idle-seconds`).
//! 3. `--replicas` daemons (`seatflow-reconciler run`), configured with their
//!    stores, key prefix, HTTP port, instance name and log level only.
//! 4. For `--minutes`: the hold workload's latency tagged by whether a seat
//!    pass is in progress (`/status`, every 100 ms), drift injected every
//!    minute, RSS every 10 s; with `--traffic-showtimes`, seatflow's
//!    customers and their crashes, and hashes lost now and then.
//! 5. The report (stdout, `--json`), from server counters, the daemons'
//!    audit (`reconcile_fix`) and the samples; then everything is removed,
//!    on success, error and Ctrl-C alike.

mod daemons;
mod drift;
mod holds;
mod report;
mod traffic;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use chrono::Utc;
use tokio::signal::unix::{SignalKind, signal};

use seatflow_reconciler::config::{Settings, redact_url};
use seatflow_reconciler::ops::demo::servers::{PrivateServer, TempDir, require_binary};

use crate::args::SoakArgs;
use crate::bench::Bench;
use crate::estate::Estate;
use crate::machine::machine;
use crate::numbers::thousands;
use crate::report::git_commit;
use crate::seeding::Seeder;
use crate::sweep::reconciler_path;

use daemons::{Daemon, DaemonEnv};
use drift::Injector;
use holds::{DURING_PASS, HoldWorkload, OUTSIDE_PASS};
use report::{DaemonReport, FixCount, HoldReport, ServerLoad, SoakParams, SoakReport};
use traffic::{Traffic, Waits};

/// How often each daemon's `/status` is polled.
const STATUS_EVERY: Duration = Duration::from_millis(100);
/// How often each daemon's RSS is sampled.
const RSS_EVERY: Duration = Duration::from_secs(10);
/// How long the first pass may take to come and subscribe to events.
const EVENTS_WAIT: Duration = Duration::from_secs(150);
/// How often drift is injected.
const INJECT_EVERY: Duration = Duration::from_secs(60);
/// Unrepaired drift injected this close to the end is reported apart (and
/// does not fail the soak). An orphan is released a grace (120 s) after
/// its first sighting, which comes up to an interval (60 s) after the
/// injection; a pass that sees it a few milliseconds short of the grace
/// releases it an interval later; passes vary by seconds. So 240 s and
/// room: 180 s failed soaks whose injections fell just after the pass read
/// their showtimes.
const RECENT_S: f64 = 300.0;

/// Everything the soak starts, torn down by `cleanup` whatever happened.
/// Field order is drop order: processes before the directory they log into.
struct Rig {
    daemons: Vec<Daemon>,
    traffic: Option<Traffic>,
    holds: Option<HoldWorkload>,
    bench: Option<Bench>,
    redis: Option<PrivateServer>,
    dir: TempDir,
}

impl Rig {
    async fn cleanup(&mut self) -> Result<()> {
        if let Some(mut t) = self.traffic.take() {
            let _ = t.finish().await;
        }
        for d in &mut self.daemons {
            d.stop().await;
        }
        self.daemons.clear();
        if let Some(mut h) = self.holds.take() {
            let _ = h.finish();
        }
        let dropped = match self.bench.take() {
            Some(bench) => {
                let r = bench.drop_database().await;
                if r.is_ok() {
                    eprintln!("removed database {}", bench.database);
                }
                r
            }
            None => Ok(()),
        };
        if let Some(mut redis) = self.redis.take() {
            redis.stop();
        }
        dropped
    }
}

pub async fn run(args: SoakArgs) -> Result<()> {
    let reconciler = reconciler_path(args.reconciler.as_deref())?;
    let redis_bin = require_binary("redis-server", "redis-server")?;
    let mut rig = Rig {
        daemons: Vec::new(),
        traffic: None,
        holds: None,
        bench: None,
        redis: None,
        dir: TempDir::new("soak")?,
    };
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let outcome = tokio::select! {
        r = soak(&mut rig, &args, &reconciler, redis_bin) => r,
        _ = interrupt.recv() => Err(anyhow::anyhow!("interrupted (SIGINT)")),
        _ = terminate.recv() => Err(anyhow::anyhow!("terminated (SIGTERM)")),
    };
    if outcome.is_err() {
        for d in rig.daemons.iter().filter(|d| d.log_bytes() > 0) {
            eprintln!("{} log (tail):\n{}", d.name, d.log_tail());
        }
    }
    eprintln!("cleaning up …");
    let cleaned = rig.cleanup().await;
    drop(rig);
    let report = outcome?;
    cleaned.context("removing the soak's database")?;
    print!("{}", report.table());
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    // Printed and written first, so that a failed soak can be looked at.
    if let Some(failure) = report.drift.verification_failure() {
        anyhow::bail!(failure);
    }
    if let Some(t) = report.traffic.as_ref().filter(|t| t.harmed > 0) {
        anyhow::bail!(
            "{} customers were harmed, e.g. {}",
            t.harmed,
            t.harm_examples.join(" | ")
        );
    }
    Ok(())
}

async fn soak(
    rig: &mut Rig,
    args: &SoakArgs,
    reconciler: &std::path::Path,
    redis_bin: PathBuf,
) -> Result<SoakReport> {
    let redis_port = start_redis(rig, redis_bin, args.keyspace_events.as_deref())?;
    let redis_url = format!("redis://127.0.0.1:{redis_port}");
    let scan_chunk = Settings::load_with_env(None, Vec::new())?
        .reconcile
        .scan_chunk;
    let bench =
        Bench::connect(&args.estate, args.database(), &redis_url, scan_chunk, false).await?;
    rig.bench = Some(bench.clone());

    // 1. The estate, consistent (drift is injected during the soak).
    let estate = Estate::new(&args.estate, 0.0);
    eprintln!(
        "seeding {} showtimes × {} seats into database {} and a private redis-server on port {} …",
        thousands(estate.showtimes as u64),
        estate.seats,
        bench.database,
        redis_port
    );
    let (seeding, _) = Seeder::new(&bench, &estate, true).run().await?;
    eprintln!("seeded in {:.1} s", seeding.seconds);
    let machine = machine(&bench).await?;

    // 2. The idle baseline: the hold workload alone.
    let interval = Duration::from_secs_f64(args.hold_interval_ms / 1000.0);
    // With traffic, holds on keys apart: seats that never exist (an HGET a
    // call), so that the latency probe makes no keyspace events.
    let hold_keys = match args.traffic_showtimes {
        0 => bench.keys.clone(),
        _ => seatflow_reconciler::store::redis::Keys::new(format!(
            "{}latency-probe:",
            bench.keys.prefix()
        )),
    };
    let holds = HoldWorkload::start(
        &redis_url,
        hold_keys,
        estate.showtimes,
        estate.seat_names.clone(),
        interval,
    )?;
    rig.holds = Some(holds);
    eprintln!("idle baseline: {} s of holds alone …", args.idle_seconds);
    let idle_start = (bench.snapshot().await?, Instant::now());
    tokio::time::sleep(Duration::from_secs(args.idle_seconds)).await;
    let idle_end = (bench.snapshot().await?, Instant::now());

    if args.traffic_showtimes > 0 && args.traffic_lose_every > 0 {
        traffic::schedule_openings(&bench, &estate).await?;
    }

    // 3. The daemons, on their defaults.
    let env = DaemonEnv {
        mysql_url: bench.db_url.clone(),
        redis_url: redis_url.clone(),
        key_prefix: bench.keys.prefix().to_string(),
        extra: args
            .daemon_settings
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (format!("SEATFLOW__{}", k.to_uppercase()), v.to_string()))
            .collect(),
    };
    // The daemons' settings as they read them (the traffic's judgement
    // and the report's waits use their grace and buffer).
    let settings = Settings::load_with_env(None, env.vars(1, 0))?;
    for n in 1..=args.replicas {
        let d = Daemon::spawn(reconciler, &env, n, rig.dir.path())?;
        rig.daemons.push(d);
    }
    for d in &mut rig.daemons {
        d.wait_ready().await?;
    }
    rig.holds.as_ref().expect("started").set_phase(OUTSIDE_PASS);
    eprintln!(
        "{} daemon(s) running; soaking for {} min …",
        args.replicas, args.minutes
    );

    // 4. The soak.
    if args.traffic_showtimes > 0 {
        if args.keyspace_events.is_some() {
            // The subscription comes with the first pass (up to a minute):
            // crashes before it would be timed against a reconciler that
            // cannot hear of them yet.
            wait_for_events(&rig.daemons).await?;
        }
        let t = Traffic::start(
            &bench,
            &estate,
            args.traffic_showtimes,
            args.traffic_workers,
            settings.reconcile.orphan_grace,
        )
        .await?;
        rig.traffic = Some(t);
    }
    let started_at = Utc::now();
    let soak_start = (bench.snapshot().await?, Instant::now());
    let cpu_start: Vec<Option<f64>> = rig.daemons.iter().map(Daemon::cpu_s).collect();
    let reads_start = seat_hash_reads(&rig.daemons).await;
    let per_round = (estate.total_seats() as f64 * args.inject).round() as usize;
    let mut injector = Injector::new(&bench, &estate, per_round, args.delete_hash_every);
    let deadline = soak_start.1 + Duration::from_secs_f64(args.minutes * 60.0);
    watch(
        rig,
        &mut injector,
        args.traffic_lose_every,
        soak_start.1,
        deadline,
    )
    .await?;
    let traffic_log = match rig.traffic.as_mut() {
        Some(t) => Some(t.finish().await?),
        None => None,
    };
    let soak_end = (bench.snapshot().await?, Instant::now());
    let ended_at = Utc::now();
    let wall_s = soak_end.1.duration_since(soak_start.1).as_secs_f64();
    let cpu_end: Vec<Option<f64>> = rig.daemons.iter().map(Daemon::cpu_s).collect();

    // 5. Their change-driven checks' counters, then stop (the daemons flush
    // their audit on SIGTERM), then read the audit.
    let reads_end = seat_hash_reads(&rig.daemons).await;
    for d in &mut rig.daemons {
        d.read_change_counters().await;
    }
    eprintln!("stopping the daemons …");
    for d in &mut rig.daemons {
        d.stop().await;
    }
    let latencies = rig.holds.as_mut().expect("started").finish()?;
    rig.holds = None;
    let fixes = drift::fixes_since(&bench.pool, started_at).await?;
    let keys = bench.keys.clone();
    let ages = drift::ages(&injector.log, &fixes, ended_at, RECENT_S, |s| keys.seat(s));
    let traffic = match (rig.traffic.take(), traffic_log) {
        (Some(t), Some((log, made))) => {
            let waits = Waits {
                orphan_grace_s: settings.reconcile.orphan_grace.as_secs_f64(),
                expired_order_buffer_s: settings.reconcile.expired_order_buffer.as_secs_f64(),
            };
            Some(t.report(&log, &made, &fixes, waits, args.traffic_lose_every))
        }
        _ => None,
    };
    let daemons: Vec<DaemonReport> = rig
        .daemons
        .iter()
        .zip(cpu_start.iter().zip(&cpu_end))
        .map(|(d, (a, b))| DaemonReport::new(d, b.zip(*a).map(|(b, a)| b - a), wall_s))
        .collect();
    let soak_load = soak_start.0.load_until(&soak_end.0);
    let idle_wall = idle_end.1.duration_since(idle_start.1).as_secs_f64();
    let hgetall = soak_load
        .redis_by_command
        .get("hgetall")
        .map_or(0, |c| c.calls);
    Ok(SoakReport {
        date: started_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        commit: git_commit(),
        machine,
        params: SoakParams {
            showtimes: estate.showtimes,
            seats_per_showtime: estate.seats,
            seats: estate.total_seats(),
            halls: estate.halls,
            occupancy: estate.occupancy,
            seed: estate.seed,
            minutes: args.minutes,
            idle_seconds: args.idle_seconds,
            replicas: args.replicas,
            hold_interval_ms: args.hold_interval_ms,
            inject_share_per_minute: args.inject,
            injected_seats_per_round: per_round,
            delete_hash_every_rounds: args.delete_hash_every,
            reconciler: reconciler.display().to_string(),
            daemon_env: env
                .vars(1, 0)
                .into_iter()
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        k if k.ends_with("_URL") => redact_url(&v),
                        "SEATFLOW__HTTP__LISTEN" => "127.0.0.1:<a free port each>".into(),
                        "SEATFLOW__RECONCILE__INSTANCE" => "replica-<1..=replicas>".into(),
                        _ => v,
                    };
                    (k, v)
                })
                .collect(),
        },
        seeding,
        idle: ServerLoad::new(&idle_start.0.load_until(&idle_end.0), idle_wall),
        soak: ServerLoad::new(&soak_load, wall_s),
        seat_hash_reads_per_hash_per_minute: reads_start
            .zip(reads_end)
            .map(|(a, b)| (b - a) / estate.showtimes as f64 / (wall_s / 60.0)),
        hgetall_per_seat_hash_per_minute: hgetall as f64
            / estate.showtimes as f64
            / (wall_s / 60.0),
        passes_per_minute: daemons.iter().map(|d| d.passes_seen).sum::<usize>() as f64
            / (wall_s / 60.0),
        hold: HoldReport::new(latencies),
        fixes: fix_counts(&fixes),
        drift: ages,
        daemons,
        traffic,
        injected: injector.log,
    })
}

/// A private `redis-server` in the soak's directory, without persistence,
/// sending the keyspace notifications `events` names.
fn start_redis(rig: &mut Rig, program: PathBuf, events: Option<&str>) -> Result<u16> {
    let extra: Vec<&str> = events
        .map(|flags| vec!["--notify-keyspace-events", flags])
        .unwrap_or_default();
    let redis =
        seatflow_reconciler::ops::demo::servers::start_redis_with(rig.dir.path(), program, &extra)?;
    let port = redis.port();
    rig.redis = Some(redis);
    Ok(port)
}

/// Until `deadline`: polls every daemon's `/status` (and tags the hold
/// workload's phase), samples RSS, and injects drift once a minute from the start.
async fn watch(
    rig: &mut Rig,
    injector: &mut Injector<'_>,
    lose_every_s: u64,
    start: Instant,
    deadline: Instant,
) -> Result<()> {
    let mut next_rss = start;
    let mut next_inject = start;
    let lose_every = Duration::from_secs(lose_every_s);
    let mut next_loss = start + lose_every;
    // Sales open as often, half-way between two losses.
    let mut next_opening = start + lose_every / 2;
    let mut tick = tokio::time::interval(STATUS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        if now >= deadline {
            return Ok(());
        }
        for d in &mut rig.daemons {
            d.check_alive()?;
        }
        futures_util::future::join_all(rig.daemons.iter_mut().map(Daemon::poll_status)).await;
        let in_pass = rig.daemons.iter().any(|d| d.in_pass);
        let holds = rig.holds.as_ref().expect("started");
        if holds.failed() {
            bail!("the hold workload stopped");
        }
        holds.set_phase(if in_pass { DURING_PASS } else { OUTSIDE_PASS });
        if now >= next_rss {
            let t_s = now.duration_since(start).as_secs_f64();
            for d in &mut rig.daemons {
                d.sample_rss(t_s);
            }
            next_rss += RSS_EVERY;
        }
        if now >= next_inject {
            let n = injector.round().await?;
            eprintln!(
                "  {:>5.1} min: injected {n} drifted seats/hashes; pass in progress: {in_pass}",
                now.duration_since(start).as_secs_f64() / 60.0
            );
            next_inject += INJECT_EVERY;
        }
        if let Some(t) = rig
            .traffic
            .as_mut()
            .filter(|_| lose_every_s > 0 && now >= next_loss)
        {
            t.lose_one().await?;
            next_loss += lose_every;
        }
        if let Some(t) = rig
            .traffic
            .as_mut()
            .filter(|_| lose_every_s > 0 && now >= next_opening)
        {
            t.open_one().await?;
            next_opening += lose_every;
        }
    }
}

/// Seat hashes read by all daemons so far (None if one did not answer).
async fn seat_hash_reads(daemons: &[Daemon]) -> Option<f64> {
    let mut sum = 0.0;
    for d in daemons {
        sum += d.seat_hash_reads().await?;
    }
    Some(sum)
}

/// Until one daemon's `/status` says keyspace events are on (the others
/// stand by), at most [`EVENTS_WAIT`].
async fn wait_for_events(daemons: &[Daemon]) -> Result<()> {
    let until = Instant::now() + EVENTS_WAIT;
    eprintln!("waiting for the keyspace subscription (the first pass) …");
    loop {
        for d in daemons {
            if d.redis_events().await.as_deref() == Some("on") {
                return Ok(());
            }
        }
        if Instant::now() >= until {
            bail!("no daemon said keyspace events were on within {EVENTS_WAIT:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn fix_counts(fixes: &[drift::FixRow]) -> Vec<FixCount> {
    let mut counts = std::collections::BTreeMap::<(String, String), u64>::new();
    for f in fixes {
        *counts.entry((f.job.clone(), f.kind.clone())).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((job, kind), count)| FixCount { job, kind, count })
        .collect()
}
