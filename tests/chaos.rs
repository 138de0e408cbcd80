//! Chaos convergence: live seatflow traffic (the simulator, with crashes in
//! every window) against two reconciler processes running every second with
//! a short grace period, while their Redis and MariaDB connections are
//! killed at random. Afterwards the stores converge to the contract's
//! expected state, and the audit trail shows no customer was harmed.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::Rng;
use rand::seq::IndexedRandom;
use seatflow_reconciler::inspect;
use seatflow_test_support::TestEnv;
use seatflow_test_support::daemon::{Daemon, daemon_command, free_port, sample};
use seatflow_test_support::simulator::{HoldRecord, SimConfig, Simulator};
use tokio_util::sync::CancellationToken;

const TRAFFIC: Duration = Duration::from_secs(10);
const KINDS: [&str; 5] = seatflow_test_support::JOB_LABELS;

/// A MariaDB user per reconciler process, so the test can find (and kill)
/// exactly that process's connections; dropped at the end.
struct DbUser {
    name: String,
    pool: sqlx::MySqlPool,
}

impl DbUser {
    async fn create(env: &TestEnv, name: &str) -> DbUser {
        let pool = env.ctx.mysql.pool().clone();
        for sql in [
            format!("CREATE USER '{name}'@'%' IDENTIFIED BY 'chaos-pw'"),
            format!("GRANT ALL ON `{}`.* TO '{name}'@'%'", env.db),
        ] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&pool)
                .await
                .unwrap();
        }
        DbUser {
            name: name.into(),
            pool,
        }
    }

    fn url(&self, env: &TestEnv) -> String {
        let mut u = url::Url::parse(&env.db_url).unwrap();
        u.set_username(&self.name).unwrap();
        u.set_password(Some("chaos-pw")).unwrap();
        u.to_string()
    }
}

impl Drop for DbUser {
    fn drop(&mut self) {
        let (pool, name) = (self.pool.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async move {
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                        "DROP USER IF EXISTS '{name}'@'%'"
                    )))
                    .execute(&pool)
                    .await;
                })
        })
        .join();
    }
}

/// Kills a random connection of one of the reconcilers every few hundred ms.
async fn killer(
    env_redis: seatflow_reconciler::store::redis::RedisConn,
    pool: sqlx::MySqlPool,
    names: Vec<String>,
    users: Vec<String>,
    stop: CancellationToken,
) -> (u64, u64) {
    let (mut redis_kills, mut mysql_kills) = (0, 0);
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
                let _: redis::RedisResult<i64> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("ID")
                    .arg(id)
                    .query_async(&mut c)
                    .await;
                redis_kills += 1;
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
                let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL {id}")))
                    .execute(&pool)
                    .await;
                mysql_kills += 1;
            }
        }
    }
    (redis_kills, mysql_kills)
}

/// (job, kind, showtime, seat, before, after, fixed_at) of `reconcile_fix`.
type AuditRow = (
    String,
    String,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<String>,
    chrono::NaiveDateTime,
);

fn ms(t: chrono::NaiveDateTime) -> i64 {
    t.and_utc().timestamp_millis()
}

/// Timestamps of two processes on one machine; the audit time is taken just
/// after a repair, the simulator's just before/after its steps.
const SLOP_MS: i64 = 25;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn live_traffic_and_killed_connections_converge_without_harm() {
    let env = TestEnv::new().await;
    let id = &env.db["sf_test_".len()..];
    let seats = env.fx.hall(1, 10, 10).await.unwrap();
    let mut showtimes = Vec::new();
    for s in 1..=10 {
        env.fx.showtime(s, 1, 30 * s, "ON_SALE").await.unwrap();
        env.fx.warm_all(s, &seats, &[]).await.unwrap();
        showtimes.push((s, seats.clone()));
    }
    let users = [
        DbUser::create(&env, &format!("sfa_{id}")).await,
        DbUser::create(&env, &format!("sfb_{id}")).await,
    ];
    let instances = [format!("chaos-a-{id}"), format!("chaos-b-{id}")];
    let mut daemons = Vec::new();
    for (user, instance) in users.iter().zip(&instances) {
        let port = free_port();
        let mut cmd = daemon_command(&env, port);
        cmd.env("SEATFLOW__MYSQL__URL", user.url(&env))
            .env("SEATFLOW__RECONCILE__INSTANCE", instance)
            .env("SEATFLOW__RECONCILE__ORPHAN_GRACE", "1s")
            .env("SEATFLOW__RECONCILE__EXPIRED_ORDER_BUFFER", "1s")
            .env("SEATFLOW__RECONCILE__LOCK_TTL", "5s")
            .env("SEATFLOW__REDIS__RESPONSE_TIMEOUT", "2s")
            .env("SEATFLOW__LOG__LEVEL", "error");
        daemons.push(Daemon::start(cmd, port).await);
    }

    // Traffic, a Redis loss in the middle of it, and the connection killer.
    let sim = Simulator::new(
        env.ctx.mysql.pool().clone(),
        env.ctx.redis.connection(),
        env.ctx.redis.keys.clone(),
    );
    let stop = CancellationToken::new();
    let cfg = SimConfig {
        showtimes,
        workers: 16,
        abandon_expiry: Duration::from_millis(800),
        // In-flight windows up to a quarter of the grace period: long enough
        // that a reconciler ignoring the grace would be caught releasing them.
        max_step_delay: Duration::from_millis(250),
    };
    let traffic = tokio::spawn({
        let (sim, stop) = (sim.clone(), stop.clone());
        async move { sim.run(cfg, stop).await }
    });
    let kills = tokio::spawn(killer(
        env.ctx.redis.connection(),
        env.ctx.mysql.pool().clone(),
        instances
            .iter()
            .map(|i| seatflow_reconciler::store::redis::client_name(i))
            .collect(),
        users.iter().map(|u| u.name.clone()).collect(),
        stop.clone(),
    ));
    tokio::time::sleep(TRAFFIC / 2).await;
    let _: () = env
        .redis(redis::cmd("DEL").arg(env.ctx.redis.keys.seat(3)))
        .await;
    tokio::time::sleep(TRAFFIC / 2).await;
    stop.cancel();
    let log = traffic.await.unwrap();
    let (redis_kills, mysql_kills) = kills.await.unwrap();

    // With traffic stopped, a few runs converge (grace 1 s, plus the 5 s
    // continuity slack for seats with recent order activity).
    let start = Instant::now();
    let overdue = || async {
        // Abandoned orders expire 0.8 s after creation; the buffer is 1 s.
        sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM ticket_order WHERE status = 'PENDING' AND expires_at < UTC_TIMESTAMP(3) - INTERVAL 3 SECOND",
        )
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap()
    };
    let (mut diffs, mut unexpired);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        diffs = inspect::differences(&env.ctx).await.unwrap();
        unexpired = overdue().await;
        let settled =
            diffs.is_empty() && unexpired == 0 && start.elapsed() > Duration::from_secs(4);
        if settled || start.elapsed() > Duration::from_secs(60) {
            break;
        }
    }
    let converged_after = start.elapsed();
    assert!(
        diffs.is_empty(),
        "not converged after {converged_after:?}: {diffs:?}"
    );
    assert_eq!(unexpired, 0, "PENDING orders left past their deadline");

    // Let every run in flight finish, then read both processes' counters.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut fixes: HashMap<&str, f64> = HashMap::new();
    let mut audit_errors = 0.0;
    for d in &daemons {
        let m = d.metrics().await;
        for k in KINDS {
            *fixes.entry(k).or_default() += sample(
                &m,
                &format!(r#"seatflow_reconcile_fixes_total{{kind="{k}"}}"#),
            );
            audit_errors += sample(
                &m,
                &format!(r#"seatflow_reconcile_errors_total{{kind="{k}",stage="audit"}}"#),
            );
        }
    }
    for d in &mut daemons {
        d.signal("TERM");
    }
    for d in &mut daemons {
        assert_eq!(
            d.wait_exit(Duration::from_secs(15))
                .await
                .and_then(|s| s.code()),
            Some(0)
        );
    }

    let audit: Vec<AuditRow> = sqlx::query_as(
        "SELECT job, kind, showtime_id, seat_no, before_value, after_value, fixed_at FROM reconcile_fix",
    )
    .fetch_all(env.ctx.mysql.pool())
    .await
    .unwrap();
    // When each order stopped occupying its seats, whoever ended it (the
    // simulator, or the reconciler cancelling an expired order).
    let ended: HashMap<i64, Option<chrono::NaiveDateTime>> =
        sqlx::query_as::<_, (i64, Option<chrono::NaiveDateTime>)>(
            "SELECT id, cancelled_at FROM ticket_order",
        )
        .fetch_all(env.ctx.mysql.pool())
        .await
        .unwrap()
        .into_iter()
        .collect();
    let occupied_until = |h: &HoldRecord| -> i64 {
        let db = h
            .order_id
            .and_then(|o| ended.get(&o).copied().flatten())
            .map(ms);
        h.ended_at.into_iter().chain(db).min().unwrap_or(i64::MAX)
    };
    let mut by_seat: HashMap<(i64, String), Vec<&HoldRecord>> = HashMap::new();
    for h in &log.holds {
        for s in &h.seats {
            by_seat.entry((h.showtime, s.clone())).or_default().push(h);
        }
    }

    // No hold that belonged to an order which committed was released while
    // that order held the seat (or was about to commit it).
    let mut harmed = Vec::new();
    // No seat of a PAID order was set below "2".
    let mut unsold = Vec::new();
    for (job, kind, showtime, seat, before, after, at) in &audit {
        let (Some(showtime), Some(seat)) = (showtime, seat) else {
            continue;
        };
        let t = ms(*at);
        let holds = by_seat
            .get(&(*showtime, seat.clone()))
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if kind == "seat_released" && before.as_deref() == Some("1") && job == "orphan_locks" {
            for h in holds {
                if h.committed_at.is_some()
                    && h.held_at + SLOP_MS < t
                    && t + SLOP_MS < occupied_until(h)
                {
                    harmed.push(format!("{job} released {showtime}/{seat} at {t}: {h:?}"));
                }
            }
        }
        if before.as_deref() == Some("2") && after.as_deref() != Some("2") {
            for h in holds {
                if let Some(paid) = h.paid_at
                    && paid + SLOP_MS < t
                    && t + SLOP_MS < occupied_until(h)
                {
                    unsold.push(format!(
                        "{job} set {showtime}/{seat} to {after:?} at {t}: {h:?}"
                    ));
                }
            }
        }
    }
    assert!(
        harmed.is_empty(),
        "in-flight or committed holds released:\n{}",
        harmed.join("\n")
    );
    assert!(
        unsold.is_empty(),
        "paid seats set below \"2\":\n{}",
        unsold.join("\n")
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
        .filter(|h| h.flow == seatflow_test_support::simulator::Flow::Abandon)
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

    // The audit table accounts for every repair.
    let mut rows: HashMap<&str, f64> = HashMap::new();
    for (job, kind, ..) in &audit {
        let counted = if job == "expired_orders" {
            kind == "order_cancelled"
        } else {
            true
        };
        if counted && let Some(k) = KINDS.iter().find(|k| **k == job) {
            *rows.entry(k).or_default() += 1.0;
        }
    }
    for k in KINDS {
        let (fixed, audited) = (
            fixes.get(k).copied().unwrap_or(0.0),
            rows.get(k).copied().unwrap_or(0.0),
        );
        if audit_errors == 0.0 {
            assert_eq!(
                fixed, audited,
                "{k}: {fixed} repairs counted, {audited} audited"
            );
        } else {
            assert!(audited <= fixed, "{k}: more audit rows than repairs");
        }
    }

    let report = format!(
        "chaos: {} flows ({} crashes, {} sold out, {} order conflicts, {} sim errors) {:?}; \
         killed {redis_kills} Redis and {mysql_kills} MariaDB connections; \
         repairs {:?}; audit errors {audit_errors}; converged {converged_after:?} after traffic stopped",
        log.total_flows(),
        log.crashes(),
        log.sold_out,
        log.order_conflicts,
        log.errors,
        log.flows,
        KINDS
            .iter()
            .map(|k| (*k, fixes.get(k).copied().unwrap_or(0.0) as u64))
            .collect::<Vec<_>>(),
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
    assert!(
        log.crashes() > 20 && redis_kills + mysql_kills > 5,
        "{report}"
    );
    for k in [
        "expired_orders",
        "paid_seats",
        "orphan_locks",
        "sold_orphans",
        "missing_hashes",
    ] {
        assert!(
            fixes.get(k).copied().unwrap_or(0.0) > 0.0,
            "no {k} repair exercised: {report}"
        );
    }
}
