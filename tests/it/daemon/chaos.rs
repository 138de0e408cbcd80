//! Chaos convergence: live seatflow traffic (the simulator, with crashes in
//! every window) against reconciler processes running every second with a
//! short grace period, while their Redis and MariaDB connections are killed
//! at random, Redis loses seat hashes and MariaDB refuses the audit for a
//! while.
//!
//! The estate (`estate.rs`): three halls of different sizes and layouts,
//! each with disabled seats, and showtimes in every status the contract
//! defines. The simulator sells the ON_SALE ones; the SCHEDULED, CLOSED and
//! CANCELLED ones carry what would be drift on sale (and some no hash), and
//! must be left exactly as they were.
//!
//! Two phases. In the first, two reconcilers work under live traffic: they
//! are seen releasing orphans and deferring suspects, and no customer whose
//! order was being written, valid or paid has a seat changed under them
//! (the simulator's customers check their own seats in Redis's order of
//! events; see `tests/simulator/src/lib.rs`). Then they stop while the customers go on
//! (drift of every kind piles up), the traffic stops, and a hash is lost:
//! nobody writes. The stores are read there (the first cut), two fresh
//! reconcilers start with the audit table gone until their rows are seen
//! waiting in Redis, converge under the connection killer, and stop; the
//! stores are read again (the second cut). Between the cuts only those two
//! wrote, so their audit is judged from the stores (`stores.rs`): every
//! field, hash and order that changed has its audit rows with matching
//! before/after, and every row is such a change; none is lost, whatever
//! MariaDB refused meanwhile. The first phase's rows (written among live
//! writes) are matched to the repairs its reconcilers reported, none lost
//! either. At the end the stores are in the contract's expected state,
//! judged by an oracle written here from the contract alone, and both kinds
//! of connection were really killed.
//!
//! Redis here is a private server with keyspace notifications on, so the
//! reconcilers' change-driven checks run too (and are seen to), beside the
//! pass every second: the event-driven path under the same faults.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::BufRead;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use rand::seq::IndexedRandom;
use seatflow_reconciler::config::SecretUrl;
use seatflow_test_support::daemon::{Daemon, daemon_command, free_port, sample};
use seatflow_test_support::servers::{self, wait_until};
use seatflow_test_support::simulator::{Flow, SimConfig, Simulator};
use seatflow_test_support::{DbUser, TestEnv};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

mod estate;
mod stores;

use estate::{Estate, HandsOff, LOST_BEFORE_CUT, LOST_IN_TRAFFIC};

/// Traffic runs at least this long, and until enough has happened during it
/// (flows, crashes, kills of both stores, the reconcilers seen at work).
const TRAFFIC: Duration = Duration::from_secs(10);
/// Hang guards only: a stuck test stops; nothing is judged by them.
const HANG_GUARD: Duration = Duration::from_secs(180);
const KINDS: [&str; 5] = seatflow_test_support::JOB_LABELS;
/// Flows of each crashing kind (and abandoned orders) made while no
/// reconciler runs, so that the reconciler-only phase has drift of every
/// kind to repair.
const UNATTENDED_EACH: i64 = 3;

/// A MariaDB user per reconciler process, so the test can find (and kill)
/// exactly that process's connections; dropped at the end. `binlog`: it
/// may read the binlog too (the privileges the daemon's binlog source needs).
async fn chaos_user(env: &TestEnv, name: &str, binlog: bool) -> DbUser {
    let replication = binlog
        .then(|| format!("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{name}'@'%'"));
    let grants: Vec<String> = [format!("GRANT ALL ON `{}`.* TO '{name}'@'%'", env.db)]
        .into_iter()
        .chain(replication)
        .collect();
    DbUser::create(env, name, &grants).await
}

/// Connections the killer really ended (the server said so), and attempts,
/// counted while it runs.
#[derive(Debug, Default)]
struct Kills {
    redis: AtomicU64,
    mysql: AtomicU64,
    attempts: AtomicU64,
}

impl Kills {
    fn of_each_store(&self) -> bool {
        self.redis.load(Ordering::SeqCst) > 0 && self.mysql.load(Ordering::SeqCst) > 0
    }
}

/// Kills a random connection of one of the reconcilers every few hundred ms.
async fn killer(
    env_redis: seatflow_reconciler::store::redis::RedisConn,
    pool: sqlx::MySqlPool,
    names: Vec<String>,
    users: Vec<String>,
    stop: CancellationToken,
    kills: Arc<Kills>,
) {
    while !stop.is_cancelled() {
        let pause = rand::rng().random_range(150..450);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if rand::rng().random_bool(0.5) {
            let mut c = env_redis.clone();
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut c)
                .await
                .unwrap();
            let ids: Vec<String> = list
                .lines()
                .filter(|l| names.iter().any(|n| l.contains(&format!(" name={n} "))))
                .filter_map(|l| {
                    l.split(' ')
                        .find_map(|f| f.strip_prefix("id="))
                        .map(String::from)
                })
                .collect();
            let pick = ids.choose(&mut rand::rng()).cloned();
            if let Some(id) = pick {
                kills.attempts.fetch_add(1, Ordering::SeqCst);
                // CLIENT KILL ID answers how many clients it killed.
                let killed: redis::RedisResult<i64> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("ID")
                    .arg(id)
                    .query_async(&mut c)
                    .await;
                if killed == Ok(1) {
                    kills.redis.fetch_add(1, Ordering::SeqCst);
                }
            }
        } else {
            let ids: Vec<i64> = sqlx::query_scalar(
                "SELECT id FROM information_schema.processlist WHERE user = ? OR user = ?",
            )
            .bind(&users[0])
            .bind(&users[1])
            .fetch_all(&pool)
            .await
            .unwrap();
            let pick = ids.choose(&mut rand::rng()).copied();
            if let Some(id) = pick {
                kills.attempts.fetch_add(1, Ordering::SeqCst);
                // KILL answers OK for a connection it ended, and an error
                // (unknown thread id) for one that was gone already.
                let killed = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL {id}")))
                    .execute(&pool)
                    .await;
                if killed.is_ok() {
                    kills.mysql.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
    }
}

/// A daemon's stderr (JSON log lines), read while it is written so that the
/// pipe never fills.
struct LogTap {
    lines: Arc<Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
}

impl LogTap {
    fn of(d: &mut Daemon) -> LogTap {
        let stderr = d.child.stderr.take().expect("stderr is piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let reader = std::thread::spawn({
            let lines = lines.clone();
            move || {
                for line in std::io::BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    lines.lock().unwrap().push(line);
                }
            }
        });
        LogTap { lines, reader }
    }

    /// Every line once the process has exited (its stderr closed).
    fn finish(self) -> Vec<Value> {
        self.reader.join().unwrap();
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
            .collect()
    }
}

/// What was seen of the reconcilers while the simulator's customers held
/// seats (observations made before the traffic stopped, each with holds in
/// flight right after it).
#[derive(Debug, Default)]
struct Live {
    /// Audit rows of orphan releases, by job.
    releases: BTreeMap<String, i64>,
    /// The most suspects waiting out the grace period, by kind (both
    /// reconcilers' `seatflow_reconcile_deferred`).
    deferred: BTreeMap<&'static str, f64>,
    /// The most showtimes checked on a keyspace event (both reconcilers'
    /// `seatflow_reconcile_change_checks_total{source="event"}`).
    event_checks: f64,
    observations: u64,
}

const ORPHAN_KINDS: [&str; 2] = ["orphan_locks", "sold_orphans"];

impl Live {
    async fn observe(&mut self, env: &TestEnv, daemons: &[Daemon], sim: &Simulator) {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT job, COUNT(*) FROM reconcile_fix \
             WHERE job IN ('orphan_locks', 'sold_orphans') GROUP BY job",
        )
        .fetch_all(env.ctx.mysql.pool())
        .await
        .unwrap_or_default(); // none while the audit table is away
        let mut deferred = BTreeMap::new();
        let mut event_checks = 0.0;
        for d in daemons {
            // A daemon whose connections are being killed still answers
            // HTTP; a refused scrape is simply not an observation.
            let Ok((200, m)) = d.get("/metrics").await else {
                return;
            };
            for k in ORPHAN_KINDS {
                *deferred.entry(k).or_insert(0.0) +=
                    sample(&m, &format!(r#"seatflow_reconcile_deferred{{kind="{k}"}}"#));
            }
            event_checks += sample(
                &m,
                r#"seatflow_reconcile_change_checks_total{source="event"}"#,
            );
        }
        self.event_checks = self.event_checks.max(event_checks);
        if sim.holds_in_flight() == 0 {
            return;
        }
        self.observations += 1;
        for (job, n) in rows {
            let seen = self.releases.entry(job).or_default();
            *seen = (*seen).max(n);
        }
        for (k, n) in deferred {
            let seen = self.deferred.entry(k).or_default();
            *seen = seen.max(n);
        }
    }

    /// Releases and deferrals of both orphan kinds were seen, and checks
    /// on keyspace events.
    fn complete(&self) -> bool {
        self.event_checks > 0.0
            && ORPHAN_KINDS.iter().all(|k| {
                self.releases.get(*k).copied().unwrap_or(0) > 0
                    && self.deferred.get(k).copied().unwrap_or(0.0) > 0.0
            })
    }
}

/// MariaDB refusing the audit for a while: `reconcile_fix` renamed away and
/// back. Repairs go on; their rows are kept in Redis and written later (or,
/// for a cancel, the cancel waits, its row being in its transaction). Only
/// the audit is refused: MariaDB is up, so no row may be lost.
async fn move_audit_table(env: &TestEnv, from: &str, to: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SET SESSION lock_wait_timeout = 60; RENAME TABLE `{from}` TO `{to}`"
    )))
    .execute(env.ctx.mysql.pool())
    .await
    .unwrap();
}

/// The contract's expected state, computed here from the contract's tables
/// and seat hashes alone (none of the product's planning or inspection
/// code): for every ON_SALE showtime S and enabled template seat k of its
/// hall, Redis `{prefix}seat:{S}` field k is "2" when a PAID order occupies
/// k, "1" when a PENDING one does, else "0" (an occupancy: an `order_seat`
/// row with `active = 1` of a PENDING or PAID order). Returns every seat,
/// hash or field that disagrees.
async fn contract_differences(env: &TestEnv) -> Vec<String> {
    let pool = env.ctx.mysql.pool();
    let showtimes: Vec<(i64, i64)> =
        sqlx::query_as("SELECT id, hall_id FROM showtime WHERE BINARY status = 'ON_SALE'")
            .fetch_all(pool)
            .await
            .unwrap();
    let mut template: HashMap<i64, BTreeSet<String>> = HashMap::new();
    for (hall, seat) in sqlx::query_as::<_, (i64, String)>(
        "SELECT hall_id, seat_no FROM hall_seat WHERE enabled = 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    {
        template.entry(hall).or_default().insert(seat);
    }
    let mut occupied: HashMap<(i64, String), Vec<String>> = HashMap::new();
    for (showtime, seat, status) in sqlx::query_as::<_, (i64, String, String)>(
        "SELECT os.showtime_id, os.seat_no, o.status FROM order_seat os \
         JOIN ticket_order o ON o.id = os.order_id \
         WHERE os.active = 1 AND BINARY o.status IN ('PENDING', 'PAID')",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    {
        occupied.entry((showtime, seat)).or_default().push(status);
    }
    let mut out = Vec::new();
    for (showtime, hall) in showtimes {
        let key = format!("{}seat:{{{showtime}}}", env.prefix);
        let hash: HashMap<String, String> = env.redis(redis::cmd("HGETALL").arg(&key)).await;
        let seats = template.get(&hall).cloned().unwrap_or_default();
        if hash.is_empty() && !seats.is_empty() {
            out.push(format!("{key}: missing"));
            continue;
        }
        for seat in &seats {
            let occupants = occupied
                .get(&(showtime, seat.clone()))
                .cloned()
                .unwrap_or_default();
            let expected = match occupants.as_slice() {
                [] => "0",
                [s] if s == "PAID" => "2",
                [_] => "1",
                more => {
                    out.push(format!("{key} {seat}: occupied twice {more:?}"));
                    continue;
                }
            };
            let actual = hash.get(seat).map(String::as_str);
            if actual != Some(expected) {
                out.push(format!("{key} {seat}: {actual:?}, expected {expected:?}"));
            }
        }
        for field in hash.keys().filter(|f| !seats.contains(*f)) {
            out.push(format!("{key} {field}: not a template seat"));
        }
    }
    out
}

/// PENDING orders with a short deadline (the abandoned ones, 0.8 s): once
/// none is left, traffic having stopped, no new drift can appear.
async fn abandoned_pending(env: &TestEnv) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM ticket_order WHERE BINARY status = 'PENDING' \
         AND expires_at < UTC_TIMESTAMP(3) + INTERVAL 1 MINUTE",
    )
    .fetch_one(env.ctx.mysql.pool())
    .await
    .unwrap()
}

/// The reconcilers' orphan grace: four times a flow's longest pause.
const ORPHAN_GRACE: Duration = Duration::from_secs(1);

/// A reconciler daemon as the test runs it: its own MariaDB user and
/// instance name (so its connections can be found, and its audit rows told
/// apart), every second, a short grace, JSON logs read as they come.
async fn start_reconciler(
    env: &TestEnv,
    user: &DbUser,
    instance: &str,
    extra_env: &[(&str, &str)],
) -> (Daemon, LogTap) {
    let port = free_port();
    let mut cmd = daemon_command(env, port);
    cmd.envs(extra_env.iter().copied());
    cmd.env("SEATFLOW__MYSQL__URL", user.url(env))
        .env("SEATFLOW__RECONCILE__INSTANCE", instance)
        .env(
            "SEATFLOW__RECONCILE__ORPHAN_GRACE",
            format!("{}ms", ORPHAN_GRACE.as_millis()),
        )
        .env("SEATFLOW__RECONCILE__EXPIRED_ORDER_BUFFER", "1s")
        .env("SEATFLOW__RECONCILE__LOCK_TTL", "5s")
        .env("SEATFLOW__REDIS__RESPONSE_TIMEOUT", "2s")
        // A check on a keyspace event at once: with a pass every second, a
        // check due later would nearly always find its showtime read by a
        // pass first (and be dropped), and the event path go unexercised.
        .env("SEATFLOW__CHANGES__EVENT_SETTLE", "0s")
        // The job reports and audit-failure events are read from the log:
        // info level, JSON.
        .env("SEATFLOW__LOG__FORMAT", "json")
        .env("SEATFLOW__LOG__LEVEL", "info")
        .stderr(Stdio::piped());
    let mut d = Daemon::start(cmd, port).await;
    let log = LogTap::of(&mut d);
    (d, log)
}

/// SIGTERM: each daemon lets its runs finish (their audit flushed or kept
/// in Redis) and exits 0; then its log holds every run it made.
async fn stop_reconcilers(daemons: Vec<Daemon>, logs: Vec<LogTap>) -> Vec<Value> {
    let mut daemons = daemons;
    for d in &mut daemons {
        d.signal("TERM");
    }
    for d in &mut daemons {
        assert_eq!(
            d.wait_exit(Duration::from_secs(60))
                .await
                .and_then(|s| s.code()),
            Some(0)
        );
    }
    logs.into_iter().flat_map(LogTap::finish).collect()
}

/// The repairs the daemons' runs reported (the `fixed` of every job report
/// logged), by job.
fn reported_repairs(lines: &[Value]) -> BTreeMap<String, u64> {
    let mut repairs: BTreeMap<String, u64> = BTreeMap::new();
    for l in lines.iter().filter(|l| l["message"] == "run finished") {
        for job in seatflow_test_support::run_line_jobs(l) {
            *repairs.entry(job["kind"].clone()).or_default() +=
                job["fixed"].parse::<u64>().unwrap();
        }
    }
    repairs
}

/// Audit writes MariaDB refused, as the daemons logged them.
fn audit_failures(lines: &[Value]) -> usize {
    lines
        .iter()
        .filter(|l| l["message"] == "repair applied but its audit row could not be written")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_traffic_and_killed_connections_converge_without_harm() {
    chaos(None).await;
}

/// The same with both change sources on: Redis keyspace events and MySQL's
/// binlog (a private MariaDB that writes one). The killer ends the binlog
/// reader's connection too (its user's), each a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_traffic_converges_without_harm_with_both_change_sources_on() {
    let mariadb = servers::mariadb_with_binlog();
    chaos(Some(&mariadb)).await;
}

/// `binlog_mariadb`: run on that server, with the daemons' binlog source on.
async fn chaos(binlog_mariadb: Option<&servers::PrivateServer>) {
    let redis = servers::redis_with_keyspace_events();
    let url = format!("redis://127.0.0.1:{}", redis.port());
    let env = match binlog_mariadb {
        Some(m) => {
            let base = servers::root_url(m);
            TestEnv::on(&base, |s| s.redis.url = SecretUrl::new(url)).await
        }
        None => TestEnv::with(|s| s.redis.url = SecretUrl::new(url)).await,
    };
    let binlog = binlog_mariadb.is_some();
    let binlog_env: &[(&str, &str)] = if binlog {
        &[("SEATFLOW__CHANGES__MYSQL_BINLOG", "true")]
    } else {
        &[]
    };
    let id = &env.db["sf_test_".len()..];
    let estate = Estate::build(&env).await;
    let hands_off_at_start = HandsOff::snapshot(&env, &estate).await;
    let users = [
        chaos_user(&env, &format!("sfa_{id}"), binlog).await,
        chaos_user(&env, &format!("sfb_{id}"), binlog).await,
    ];
    // The first phase's pair, and the reconciler-only phase's: instance
    // names tell their audit rows apart (a row kept in Redis keeps its
    // instance when a later run writes it).
    let live_instances = [format!("chaos-a-{id}"), format!("chaos-b-{id}")];
    let cut_instances = [format!("chaos-c-{id}"), format!("chaos-d-{id}")];
    let mut daemons = Vec::new();
    let mut logs = Vec::new();
    for (user, instance) in users.iter().zip(&live_instances) {
        let (d, log) = start_reconciler(&env, user, instance, binlog_env).await;
        daemons.push(d);
        logs.push(log);
    }

    // Traffic, a Redis loss in the middle of it, and the connection killer
    // (of all four reconcilers, each while it runs).
    let sim = Simulator::new(
        env.ctx.mysql.pool().clone(),
        env.ctx.redis.connection(),
        env.ctx.redis.keys.clone(),
    );
    let (stop_traffic, stop_killer) = (CancellationToken::new(), CancellationToken::new());
    let cfg = SimConfig {
        showtimes: estate.on_sale(),
        workers: 16,
        abandon_expiry: Duration::from_millis(800),
        // In-flight windows up to a quarter of the grace period: long enough
        // that a reconciler ignoring the grace would be caught releasing them.
        max_step_delay: Duration::from_millis(250),
        orphan_grace: ORPHAN_GRACE,
    };
    let traffic = tokio::spawn({
        let (sim, stop) = (sim.clone(), stop_traffic.clone());
        async move { sim.run(cfg, stop).await }
    });
    let kills = Arc::new(Kills::default());
    let killing = tokio::spawn(killer(
        env.ctx.redis.connection(),
        env.ctx.mysql.pool().clone(),
        live_instances
            .iter()
            .chain(&cut_instances)
            .map(|i| seatflow_reconciler::store::redis::client_name(i))
            .collect(),
        users.iter().map(|u| u.name.clone()).collect(),
        stop_killer.clone(),
        kills.clone(),
    ));
    let started = Instant::now();
    let mut live = Live::default();
    let mut hash_lost = false;
    let lost_key = env.ctx.redis.keys.seat(LOST_IN_TRAFFIC);
    // Enough of everything for the run to mean something: judged by what
    // happened, however long a slow machine takes for it. The lost hash is
    // back (only a rebuild makes it: a customer's hold needs a "0" seat).
    let enough = |live: &Live, rebuilt: bool| {
        let (flows, crashes) = sim.flows_so_far();
        live.complete() && flows > 200 && crashes > 20 && kills.of_each_store() && rebuilt
    };
    loop {
        let rebuilt = hash_lost && env.redis::<i64>(redis::cmd("EXISTS").arg(&lost_key)).await == 1;
        if started.elapsed() >= TRAFFIC && enough(&live, rebuilt) {
            break;
        }
        if started.elapsed() > HANG_GUARD {
            break; // judged below, with what was seen
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        if !hash_lost && started.elapsed() >= TRAFFIC / 2 {
            sim.lose_hash(LOST_IN_TRAFFIC).await.unwrap();
            hash_lost = true;
        }
        live.observe(&env, &daemons, &sim).await;
    }

    // The first pair stops while the customers go on: crashes and abandoned
    // orders of every kind are left for the next pair to repair.
    let live_lines =
        stop_reconcilers(std::mem::take(&mut daemons), std::mem::take(&mut logs)).await;
    if binlog {
        assert!(
            live_lines.iter().any(|l| l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("reading the MySQL binlog"))),
            "the binlog was read"
        );
    }
    let unattended_from = sim.finished_by_flow();
    let unattended = [
        Flow::Abandon,
        Flow::CrashAfterHold,
        Flow::CrashAfterPay,
        Flow::CrashAfterCancel,
        Flow::CrashAfterRefund,
    ];
    wait_until(
        "drift of every kind made with no reconciler running",
        HANG_GUARD,
        || async {
            let now = sim.finished_by_flow();
            unattended.iter().all(|f| {
                now.get(f).copied().unwrap_or(0) - unattended_from.get(f).copied().unwrap_or(0)
                    >= UNATTENDED_EACH
            })
        },
    )
    .await;
    stop_traffic.cancel();
    let log = traffic.await.unwrap();
    let traffic_for = started.elapsed();
    sim.lose_hash(LOST_BEFORE_CUT).await.unwrap();

    // The first cut: the traffic and the first pair are gone, the second
    // pair not started: nobody writes.
    let first_cut = stores::Cut::take(&env, &estate.ids()).await;
    // The second pair starts with the audit table away: its first repairs'
    // rows must wait in Redis (seen there), to be written later.
    move_audit_table(&env, "reconcile_fix", "reconcile_fix_away").await;
    for (user, instance) in users.iter().zip(&cut_instances) {
        // The shard's pass was last run by the first pair, gone for good:
        // take it over a second after a fire (the default waits 10 s for
        // the reconciler that ran it last).
        let mut extra = vec![("SEATFLOW__SWEEP__TAKEOVER_AFTER", "1s")];
        extra.extend_from_slice(binlog_env);
        let (d, log) = start_reconciler(&env, user, instance, &extra).await;
        daemons.push(d);
        logs.push(log);
    }
    let backlog_key = env.ctx.redis.keys.audit_backlog();
    let cut_started = Instant::now();
    let mut audit_back = false;
    let mut audit_back_after = Duration::ZERO;
    let mut diffs;
    loop {
        if !audit_back && env.redis::<i64>(redis::cmd("LLEN").arg(&backlog_key)).await > 0 {
            move_audit_table(&env, "reconcile_fix_away", "reconcile_fix").await;
            audit_back = true;
            audit_back_after = cut_started.elapsed();
        }
        // Converged: every seat as the contract expects and every abandoned
        // order cancelled. From then on no repair can apply any more (each
        // is a compare-and-set from a non-expected value).
        diffs = contract_differences(&env).await;
        let pending = abandoned_pending(&env).await;
        if audit_back && diffs.is_empty() && pending == 0 {
            break;
        }
        assert!(
            cut_started.elapsed() < HANG_GUARD,
            "not converged after {:?} (audit table back: {audit_back}; {pending} abandoned orders still PENDING): {diffs:#?}",
            cut_started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let converged_after = cut_started.elapsed();
    stop_killer.cancel();
    killing.await.unwrap();
    let (redis_kills, mysql_kills, kill_attempts) = (
        kills.redis.load(Ordering::SeqCst),
        kills.mysql.load(Ordering::SeqCst),
        kills.attempts.load(Ordering::SeqCst),
    );
    // Audit rows kept in Redis while MariaDB refused them are written by a
    // later run; wait for that.
    wait_until("the audit backlog is written", HANG_GUARD, || async {
        env.redis::<i64>(redis::cmd("LLEN").arg(&backlog_key)).await == 0
    })
    .await;
    let cut_lines = stop_reconcilers(daemons, logs).await;
    // The second cut: nobody writes any more.
    let second_cut = stores::Cut::take(&env, &estate.ids()).await;
    let left: i64 = env.redis(redis::cmd("LLEN").arg(&backlog_key)).await;
    assert_eq!(left, 0, "audit rows left in the Redis backlog");

    // The contract's expected state, on the final stores.
    let diffs = contract_differences(&env).await;
    assert!(diffs.is_empty(), "not in the expected state: {diffs:#?}");
    // The showtimes not on sale are exactly as they were.
    let touched = HandsOff::snapshot(&env, &estate)
        .await
        .touched(&hands_off_at_start, &env)
        .await;
    assert!(
        touched.is_empty(),
        "showtimes not on sale were touched:\n{}",
        touched.join("\n")
    );

    let audit = stores::fixes(&env).await;
    // The reconciler-only phase, judged from the stores.
    let cut_rows: Vec<&stores::Fix> = audit
        .iter()
        .filter(|f| cut_instances.contains(&f.instance))
        .collect();
    let problems = stores::judge(&first_cut, &second_cut, &cut_rows);
    assert!(
        problems.is_empty(),
        "the audit of the reconciler-only phase does not match the stores:\n{}",
        problems.join("\n")
    );
    let mut cut_repairs: BTreeMap<&str, u64> = BTreeMap::new();
    for f in &cut_rows {
        *cut_repairs.entry(f.job.as_str()).or_default() += 1;
    }
    for k in KINDS {
        assert!(
            cut_repairs.get(k).copied().unwrap_or(0) > 0,
            "no {k} repair between the cuts (the check would cover nothing of it): {cut_repairs:?}"
        );
    }
    let cut_audit_failures = audit_failures(&cut_lines);
    assert!(
        cut_audit_failures > 0,
        "no audit write failed while the audit table was away"
    );
    // Every row of a reconciler-only repair is in MariaDB: none was lost
    // although MariaDB refused them for a while (MariaDB itself was up).
    // The live phase's rows cannot be matched to Redis's changes (the
    // customers wrote too): each job's rows match the repairs its runs
    // reported, one for one, none lost either.
    let mut live_repairs = reported_repairs(&live_lines);
    live_repairs.retain(|_, n| *n > 0);
    let counted = |f: &stores::Fix| f.job != "expired_orders" || f.kind == "order_cancelled";
    let mut live_audited: BTreeMap<String, u64> = BTreeMap::new();
    for f in audit
        .iter()
        .filter(|f| live_instances.contains(&f.instance) && counted(f))
    {
        *live_audited.entry(f.job.clone()).or_default() += 1;
    }
    assert_eq!(
        live_audited, live_repairs,
        "the live phase's audit rows by job, and the repairs its runs reported"
    );
    let others: Vec<&stores::Fix> = audit
        .iter()
        .filter(|f| !live_instances.contains(&f.instance) && !cut_instances.contains(&f.instance))
        .collect();
    assert!(
        others.is_empty(),
        "audit rows of no reconciler here: {others:#?}"
    );

    // No customer's seat was changed under them while their order was
    // being written, valid or paid. A customer whose order came later than
    // the grace after their hold (a stalled machine) is not protected by
    // the contract, so not judged: most must be judged all the same.
    assert!(
        log.timely_orders() > 4 * log.late_orders(),
        "too few orders within the grace to judge: {} timely, {} late",
        log.timely_orders(),
        log.late_orders()
    );
    let harmed: Vec<String> = log
        .holds
        .iter()
        .filter(|h| h.harmed())
        .map(|h| format!("{h:?}"))
        .collect();
    assert!(
        harmed.is_empty(),
        "seats changed under customers:\n{}",
        harmed.join("\n")
    );
    // Redis found a seat free that MySQL had occupied: a customer could hold
    // it (and seatflow refused the order), or paid-seats had to put it back.
    // Every customer holds a seat in Redis before their order is written and
    // frees it only after it ends, so this happens only when a seat was taken
    // from an order being written or valid — or when Redis lost the hash.
    let lost = [LOST_IN_TRAFFIC, LOST_BEFORE_CUT];
    let refused: Vec<String> = log
        .holds
        .iter()
        .filter(|h| h.refused_occupied && !lost.contains(&h.showtime))
        .map(|h| format!("{h:?}"))
        .collect();
    assert!(
        refused.is_empty(),
        "orders refused for seats Redis showed free:\n{}",
        refused.join("\n")
    );
    let put_back: Vec<&stores::Fix> = audit
        .iter()
        .filter(|f| {
            f.job == "paid_seats"
                && !f.showtime.is_some_and(|s| lost.contains(&s))
                && f.before.as_deref() == Some("0")
        })
        .collect();
    assert!(
        put_back.is_empty(),
        "occupied seats found free in Redis: {put_back:#?}"
    );

    // Every order the reconciler cancelled was past its deadline plus buffer.
    let early: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM ticket_order WHERE cancel_reason = 'RECONCILE_EXPIRED' AND cancelled_at < expires_at + INTERVAL 1 SECOND",
    )
    .fetch_one(env.ctx.mysql.pool())
    .await
    .unwrap();
    assert_eq!(early, 0, "orders cancelled before deadline + buffer");
    let abandoned: std::collections::HashSet<i64> = log
        .holds
        .iter()
        .filter(|h| h.flow == Flow::Abandon)
        .filter_map(|h| h.order_id)
        .collect();
    let cancelled: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM ticket_order WHERE cancel_reason = 'RECONCILE_EXPIRED'")
            .fetch_all(env.ctx.mysql.pool())
            .await
            .unwrap();
    assert!(
        cancelled.iter().all(|o| abandoned.contains(o)),
        "only abandoned orders expire"
    );

    let report = format!(
        "chaos: estate {}; {} flows ({} crashes, {} sold out, {} order conflicts, {} sim errors, {} lost with the hash) {:?} \
         in {traffic_for:?}; killed {} Redis and {} MariaDB connections ({} attempts); \
         seen live ({} observations): releases {:?}, deferred at most {:?}, {} showtimes checked on events; \
         live repairs {live_repairs:?}; reconciler-only phase: audit rows by job {cut_repairs:?} \
         ({cut_audit_failures} written late through Redis, the audit table back after {audit_back_after:?}), \
         converged {converged_after:?} after it started",
        estate.describe(),
        log.total_flows(),
        log.crashes(),
        log.sold_out,
        log.order_conflicts,
        log.errors,
        log.holds.iter().filter(|h| h.lost).count(),
        log.flows,
        redis_kills,
        mysql_kills,
        kill_attempts,
        live.observations,
        live.releases,
        live.deferred,
        live.event_checks,
    );
    println!("{report}");
    let _ = std::fs::write(
        concat!(env!("CARGO_TARGET_TMPDIR"), "/chaos-report.txt"),
        &report,
    );
    assert!(
        log.total_flows() > 200,
        "too little traffic to mean anything: {report}"
    );
    assert!(log.crashes() > 20, "{report}");
    assert!(
        redis_kills > 0 && mysql_kills > 0,
        "connections of both stores killed: {report}"
    );
    assert!(
        live.complete(),
        "orphans released, suspects deferred and showtimes checked on keyspace events while customers held seats: {report}"
    );
    for k in KINDS {
        assert!(
            live_repairs.get(k).copied().unwrap_or(0) > 0,
            "no {k} repair exercised under live traffic: {report}"
        );
    }
}
