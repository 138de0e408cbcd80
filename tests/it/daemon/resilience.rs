//! Safety rules 4 and 9 in real time: in-flight holds across the grace
//! period, and a Redis restart under the daemon. (Two reconcilers on the
//! same showtimes: tests/failpoints/races.rs, where a failpoint makes them overlap.)

use std::collections::HashMap;
use std::time::Duration;

use seatflow_reconciler::model::Kind;
use seatflow_test_support::TestEnv;
use seatflow_test_support::daemon::{Daemon, daemon_command, free_port, sample};
use seatflow_test_support::servers::{self, wait_until};

/// A hold in flight (Redis "1", order not committed yet) survives runs
/// inside the grace period, and is released after it only if its order
/// never commits. The grace is long (120 s) so that no run can reach its end
/// by itself, however slow the machine; its end is reached by aging the
/// suspect records (their first-seen times, kept in Redis), not by sleeping.
#[tokio::test]
async fn an_in_flight_hold_survives_the_grace_period_unless_it_never_commits() {
    let grace = Duration::from_secs(120);
    let env = TestEnv::with(|s| s.reconcile.orphan_grace = grace).await;
    let seats = env.fx.hall(1, 1, 3).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    // Two customers hold A-1 and A-2; only the first one's order commits.
    env.fx
        .warm_all(1, &seats, &[("A-1", "1"), ("A-2", "1")])
        .await
        .unwrap();
    for _ in 0..3 {
        let r = env.job(Kind::OrphanLocks).await;
        assert_eq!(
            (r.drift, r.fixed, r.deferred),
            (2, 0, 2),
            "inside the grace period: {r:?}"
        );
    }
    let suspects: HashMap<String, String> = env
        .redis(redis::cmd("HGETALL").arg(env.ctx.redis.keys.suspect(1)))
        .await;
    let mut suspected: Vec<&String> = suspects.keys().collect();
    suspected.sort();
    assert_eq!(suspected, ["A-1", "A-2"], "both holds are suspects");
    // The first customer's order commits while its hold is still a suspect;
    // then both records are as old as the grace period: A-1 would be due now
    // if the commit were not seen.
    env.fx.order(1, "PENDING", &["A-1"], 900).await.unwrap();
    for seat in ["A-1", "A-2"] {
        env.age_suspect(1, seat, "1", grace + Duration::from_secs(1))
            .await;
    }
    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!((r.drift, r.fixed, r.deferred), (1, 1, 0), "{r:?}");
    let h = env.fx.hash(1).await.unwrap();
    assert_eq!((h["A-1"].as_str(), h["A-2"].as_str()), ("1", "0"));
}

#[tokio::test]
async fn a_redis_restart_mid_run_fails_the_run_and_the_daemon_recovers() {
    let env = TestEnv::new().await;
    // A Redis of the test's own, with persistence, restartable on its port.
    let mut redis = servers::persistent_redis();
    let redis_url = format!("redis://127.0.0.1:{}", redis.port());
    // Seed the hash on the test's own Redis.
    let seats = env.fx.hall(1, 1, 4).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    let order = env.fx.order(1, "PENDING", &["A-1"], 900).await.unwrap();
    {
        let client = redis::Client::open(redis_url.as_str()).unwrap();
        let mut c = client.get_multiplexed_async_connection().await.unwrap();
        let mut cmd = redis::cmd("HSET");
        cmd.arg(env.ctx.redis.keys.seat(1));
        for s in &seats {
            cmd.arg(s).arg(if s == "A-1" { "1" } else { "0" });
        }
        let _: () = cmd.query_async(&mut c).await.unwrap();
    }
    let port = free_port();
    let mut cmd = daemon_command(&env, port);
    // Its log, as JSON lines, to check that the failed passes' lines carry
    // their run_id.
    let log = std::env::temp_dir().join(format!("{}daemon.log", env.prefix.replace(':', "-")));
    let log_file = std::fs::File::create(&log).unwrap();
    cmd.env("SEATFLOW__REDIS__URL", &redis_url)
        .env("SEATFLOW__REDIS__RESPONSE_TIMEOUT", "1s")
        .env("SEATFLOW__RECONCILE__RETRY_MAX_DELAY", "200ms")
        // The pass lease kept between passes lapses 2 s into the outage.
        .env("SEATFLOW__PASS__PASS_LEASE_TTL", "3s")
        .env("SEATFLOW__LOG__FORMAT", "json")
        .stderr(log_file);
    let d = Daemon::start(cmd, port).await;
    let ok = |m: &str, k: &str| {
        sample(
            m,
            &format!(r#"seatflow_reconcile_runs_total{{kind="{k}",outcome="success"}}"#),
        )
    };
    wait_until("a successful run", Duration::from_secs(60), || async {
        ok(&d.metrics().await, "paid_seats") >= 1.0
    })
    .await;

    redis.stop();
    // While Redis is away the customer pays: MySQL moves, Redis cannot.
    assert!(env.fx.pay(order).await.unwrap());
    wait_until(
        "runs fail while Redis is down",
        Duration::from_secs(60),
        || async {
            let m = d.metrics().await;
            KINDS.iter().any(|k| {
                sample(
                    &m,
                    &format!(r#"seatflow_reconcile_runs_total{{kind="{k}",outcome="failure"}}"#),
                ) >= 1.0
            })
        },
    )
    .await;
    assert_eq!(
        d.get("/healthz").await.unwrap().0,
        200,
        "the daemon keeps going"
    );
    // A pass that could not even claim its lease (the lease it kept could
    // not be renewed) is a failed run in the audit, with its seat jobs, and
    // its lines carry its run_id.
    let claim_runs = || {
        let lines = std::fs::read_to_string(&log).unwrap_or_default();
        lines
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|l| l["message"] == "could not claim the pass")
            .filter_map(|l| l["run_id"].as_str().map(String::from))
            .collect::<Vec<String>>()
    };
    wait_until(
        "a failed claim's run is recorded",
        Duration::from_secs(60),
        || async {
            for run_id in claim_runs() {
                let outcome: Option<Option<String>> =
                    sqlx::query_scalar("SELECT outcome FROM reconcile_run WHERE run_id = ?")
                        .bind(&run_id)
                        .fetch_optional(env.ctx.mysql.pool())
                        .await
                        .unwrap();
                if outcome.flatten().as_deref() == Some("failure") {
                    return true;
                }
            }
            false
        },
    )
    .await;
    let failed_runs = || async {
        sqlx::query_as::<_, (String, String)>(
            "SELECT run_id, kinds FROM reconcile_run WHERE outcome = 'failure' \
             AND kinds LIKE '%paid_seats%'",
        )
        .fetch_all(env.ctx.mysql.pool())
        .await
        .unwrap()
    };
    wait_until(
        "a failed pass is recorded in reconcile_run",
        Duration::from_secs(60),
        || async { !failed_runs().await.is_empty() },
    )
    .await;
    let failed_pass = failed_runs().await;
    let (_, kinds) = &failed_pass[0];
    assert_eq!(kinds, "paid_seats,missing_hashes,orphan_locks,sold_orphans");
    let failed_ids: Vec<&str> = failed_pass.iter().map(|(id, _)| id.as_str()).collect();
    let lines = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let claims: Vec<serde_json::Value> = lines
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["message"] == "could not claim the pass")
        .collect();
    assert!(!claims.is_empty(), "no failed claim logged:\n{lines}");
    for line in &claims {
        let run_id = line["run_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no run_id: {line}"));
        // The latest line's run may still be writing its row.
        let recorded: Option<Option<String>> =
            sqlx::query_scalar("SELECT outcome FROM reconcile_run WHERE run_id = ?")
                .bind(run_id)
                .fetch_optional(env.ctx.mysql.pool())
                .await
                .unwrap();
        assert!(
            matches!(recorded.flatten().as_deref(), None | Some("failure")),
            "{line}: a failed claim's run is recorded as a success"
        );
    }
    assert!(
        claims
            .iter()
            .any(|l| failed_ids.contains(&l["run_id"].as_str().unwrap())),
        "a failed claim's line names a failed run's row"
    );

    redis.start().unwrap();
    let before = ok(&d.metrics().await, "paid_seats");
    wait_until(
        "the paid seat is repaired after the restart",
        Duration::from_secs(60),
        || async {
            let client = redis::Client::open(redis_url.as_str()).unwrap();
            let Ok(mut c) = client.get_multiplexed_async_connection().await else {
                return false;
            };
            let v: Option<String> = redis::cmd("HGET")
                .arg(env.ctx.redis.keys.seat(1))
                .arg("A-1")
                .query_async(&mut c)
                .await
                .unwrap_or(None);
            v.as_deref() == Some("2")
        },
    )
    .await;
    wait_until("runs succeed again", Duration::from_secs(60), || async {
        ok(&d.metrics().await, "paid_seats") > before
    })
    .await;
    let fixes: HashMap<String, i64> =
        sqlx::query_as::<_, (String, i64)>("SELECT job, COUNT(*) FROM reconcile_fix GROUP BY job")
            .fetch_all(env.ctx.mysql.pool())
            .await
            .unwrap()
            .into_iter()
            .collect();
    assert_eq!(fixes.get("paid_seats"), Some(&1), "{fixes:?}");
}

const KINDS: [&str; 5] = seatflow_test_support::JOB_LABELS;
