//! Rule 13, "no half-applied writes": every script checks key types and
//! preconditions before its first write; the reconciler's own keys (suspect,
//! done, cursor, lock) in a wrong shape are reported and replaced, and the
//! audit backlog is moved aside, never lost; none of them blocks a repair or
//! a run; a lease without expiry that is not ours is reported as stuck and
//! left alone. Each test fails without its part of the rule.
//! (The one that pauses a run in a race window while the backlog's key
//! changes type is a failpoint test: `tests/failpoints/own_keys.rs`.)

use std::process::Command;
use std::time::Duration;

use seatflow_reconciler::daemon::runner::Runner;
use seatflow_reconciler::error::Stage;
use seatflow_reconciler::metrics::Metrics;
use seatflow_reconciler::model::{Kind, SeatState};
use seatflow_reconciler::run::jobs::Trigger;
use seatflow_reconciler::run::jobs::report::{JobReport, Outcome};
use seatflow_reconciler::store::redis::{CursorMove, Fenced, LeaseTake, SuspectOp};
use seatflow_test_support::own_keys::{backlog_aside, key_type, orphan_lock, release_locks};
use seatflow_test_support::{TestEnv, audit_row, seed_expired};

/// A string where a hash of ours belongs (or any other wrong type).
async fn corrupt(env: &TestEnv, key: &str) {
    let _: () = env.redis(redis::cmd("SET").arg(key).arg("garbage")).await;
}

/// Commands that write `key` as each Redis type other than a string.
fn other_types(key: &str) -> Vec<(&'static str, redis::Cmd)> {
    vec![
        (
            "hash",
            redis::cmd("HSET").arg(key).arg("a").arg("b").clone(),
        ),
        ("list", redis::cmd("RPUSH").arg(key).arg("a").clone()),
        ("set", redis::cmd("SADD").arg(key).arg("a").clone()),
        ("zset", redis::cmd("ZADD").arg(key).arg(1).arg("a").clone()),
        (
            "stream",
            redis::cmd("XADD")
                .arg(key)
                .arg("*")
                .arg("a")
                .arg("b")
                .clone(),
        ),
    ]
}

fn invalid(r: &JobReport) -> u64 {
    r.errors_by_stage
        .get(&Stage::InvalidData)
        .copied()
        .unwrap_or(0)
}

/// The user's case with `orphan_grace = 0s`: the suspect key is a string.
/// The script used to set the seat and then fail on HDEL: seat changed,
/// reported as quarantined, not counted, not audited. Now the key is
/// replaced inside the same script, and the repair is applied, counted and
/// audited in the same run under the same lease.
#[tokio::test]
async fn a_string_suspect_key_never_leaves_a_repair_unaudited() {
    let env = TestEnv::new().await;
    orphan_lock(&env).await;
    let suspect = env.ctx.redis.keys.suspect(1);
    corrupt(&env, &suspect).await;

    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!(
        (r.outcome, r.fixed, r.errors, r.invalid_data),
        (Outcome::Success, 1, 0, 1),
        "{r:?}"
    );
    assert!(r.quarantined.is_empty(), "{r:?}");
    assert_eq!(invalid(&r), 1);
    assert_eq!(
        env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
        Some("0")
    );
    assert_eq!(
        env.audit().await,
        vec![audit_row(
            "orphan_locks",
            "seat_released",
            1,
            Some("A-1"),
            None,
            "1",
            "0"
        )]
    );
    assert_eq!(key_type(&env, &suspect).await, "none", "replaced");
    // Replaced once: the next run has nothing to report.
    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!((r.fixed, r.invalid_data), (0, 0), "{r:?}");
}

/// Item 1 at the script level: a key of the wrong type is found before the
/// first write. Seatflow's seat key of the wrong type gets a distinct reply
/// and nothing written; our own keys of the wrong type are replaced and the
/// repair goes on.
#[tokio::test]
async fn scripts_check_every_key_type_before_their_first_write() {
    let env = TestEnv::new().await;
    let redis = &env.ctx.redis;

    // Suspect, done and writing keys of the wrong type: replaced, repair
    // applied (the writing key exists only inside the script: deleted).
    env.fx.warm(1, &[("A-1", "1"), ("A-2", "1")]).await.unwrap();
    corrupt(&env, &redis.keys.suspect(1)).await;
    corrupt(&env, &redis.keys.writing(1)).await;
    let _: () = env
        .redis(redis::cmd("RPUSH").arg(redis.keys.done(1)).arg("x"))
        .await;
    assert_eq!(
        redis
            .acquire_leases("me", &[1, 2, 3], 10_000)
            .await
            .unwrap(),
        vec![LeaseTake::Taken; 3]
    );
    let released = release_locks(&env, "me", 1, &["A-1", "A-2"]).await;
    assert_eq!(
        released.replaced,
        vec![redis.keys.suspect(1), redis.keys.done(1)]
    );
    assert_eq!(released.reply.unwrap(), Fenced::Done(vec![true, true]));
    assert_eq!(key_type(&env, &redis.keys.done(1)).await, "hash");
    assert_eq!(key_type(&env, &redis.keys.suspect(1)).await, "none");
    assert_eq!(key_type(&env, &redis.keys.writing(1)).await, "none");
    assert_eq!(
        env.fx.seat_value(1, "A-2").await.unwrap().as_deref(),
        Some("0")
    );

    // Seatflow's seat key of the wrong type: a distinct reply, nothing written.
    corrupt(&env, &redis.keys.seat(2)).await;
    let released = release_locks(&env, "me", 2, &["A-1"]).await;
    assert_eq!(released.reply.unwrap(), Fenced::SeatKeyWrongType);
    assert_eq!(key_type(&env, &redis.keys.done(2)).await, "none");
    let rebuilt = redis
        .rebuild_hash("me", "op-r", 2, &[("A-1".into(), SeatState::Free)])
        .await
        .unwrap();
    assert_eq!(rebuilt.reply, Fenced::SeatKeyWrongType);
    assert!(rebuilt.replaced.is_empty(), "no key of ours was replaced");
    assert_eq!(key_type(&env, &redis.keys.seat(2)).await, "string");

    // A rebuild with done and writing keys of the wrong type: replaced,
    // hash created.
    corrupt(&env, &redis.keys.done(3)).await;
    corrupt(&env, &redis.keys.writing(3)).await;
    let rebuilt = redis
        .rebuild_hash("me", "op-3", 3, &[("A-1".into(), SeatState::Free)])
        .await
        .unwrap();
    assert_eq!(rebuilt.reply, Fenced::Done(true));
    assert_eq!(rebuilt.replaced, vec![redis.keys.done(3)]);
    assert_eq!(key_type(&env, &redis.keys.writing(3)).await, "none");
    assert_eq!(
        env.fx.seat_value(3, "A-1").await.unwrap().as_deref(),
        Some("0")
    );

    // Suspect records and cursors of the wrong type: replaced.
    corrupt(&env, &redis.keys.suspect(4)).await;
    let replaced = redis
        .update_suspects(
            &[(
                4,
                vec![SuspectOp::Record {
                    seat: "A-1".into(),
                    encoded: "1@1000".into(),
                }],
            )],
            60_000,
        )
        .await
        .unwrap();
    assert_eq!(replaced, vec![redis.keys.suspect(4)]);
    let record: Option<String> = env
        .redis(redis::cmd("HGET").arg(redis.keys.suspect(4)).arg("A-1"))
        .await;
    assert_eq!(record.as_deref(), Some("1@1000"));
    let cursor = redis.keys.cursor("paid_seats");
    let _: () = env.redis(redis::cmd("SADD").arg(&cursor).arg("x")).await;
    assert_eq!(
        redis.set_cursor(&cursor, None, Some("next")).await.unwrap(),
        CursorMove::Replaced
    );
    assert_eq!(
        redis.get_string(&cursor).await.unwrap().as_deref(),
        Some("next")
    );

    // A lock key of another type is nobody's lease: replaced by ours. A
    // string is someone's lease, even without expiry: left alone.
    let _: () = env
        .redis(
            redis::cmd("SADD")
                .arg(redis.keys.showtime_lease(5))
                .arg("x"),
        )
        .await;
    corrupt(&env, &redis.keys.showtime_lease(6)).await;
    assert_eq!(
        redis.acquire_leases("me", &[5, 6], 10_000).await.unwrap(),
        vec![LeaseTake::Replaced, LeaseTake::Busy]
    );
    assert_eq!(
        redis
            .get_string(&redis.keys.showtime_lease(5))
            .await
            .unwrap()
            .as_deref(),
        Some("me")
    );
    let pttl: i64 = env
        .redis(redis::cmd("PTTL").arg(redis.keys.showtime_lease(5)))
        .await;
    assert!(pttl > 0, "{pttl}");
    assert_eq!(
        redis
            .get_string(&redis.keys.showtime_lease(6))
            .await
            .unwrap()
            .as_deref(),
        Some("garbage")
    );

    // The audit backlog of another type: moved aside, never deleted (it may
    // hold rows someone needs); the push or the read goes on with a list.
    let backlog = redis.keys.audit_backlog();
    let _: () = env.redis(redis::cmd("SADD").arg(&backlog).arg("m")).await;
    let pushed_aside = redis
        .push_audit_backlog(&["row".into()])
        .await
        .unwrap()
        .expect("moved aside");
    assert_eq!(key_type(&env, &pushed_aside).await, "set");
    let rows: Vec<String> = env
        .redis(redis::cmd("LRANGE").arg(&backlog).arg(0).arg(-1))
        .await;
    assert_eq!(rows, ["row"]);
    assert_eq!(
        redis.read_audit_backlog(10).await.unwrap(),
        (vec!["row".to_string()], None)
    );
    assert_eq!(redis.ack_audit_backlog(&["row".into()]).await.unwrap(), 1);
    corrupt(&env, &backlog).await;
    assert_eq!(
        redis.ack_audit_backlog(&["row".into()]).await.unwrap(),
        0,
        "left alone"
    );
    let (rows, popped_aside) = redis.read_audit_backlog(10).await.unwrap();
    assert!(rows.is_empty());
    let popped_aside = popped_aside.expect("moved aside");
    assert_ne!(popped_aside, pushed_aside);
    assert_eq!(
        redis.get_string(&popped_aside).await.unwrap().as_deref(),
        Some("garbage")
    );
    assert_eq!(key_type(&env, &backlog).await, "none");
    assert_eq!(backlog_aside(&env).await.len(), 2);
}

/// With the default grace, a string suspect key failed the chunk on every
/// run and was never cleaned. Now it is reported, read as no records (the
/// grace clock restarts: the safe direction) and replaced.
#[tokio::test]
async fn a_string_suspect_key_under_grace_is_reported_and_replaced() {
    let env = TestEnv::with(|s| s.reconcile.orphan_grace = Duration::from_secs(120)).await;
    orphan_lock(&env).await;
    let suspect = env.ctx.redis.keys.suspect(1);
    corrupt(&env, &suspect).await;

    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!(
        (
            r.outcome,
            r.drift,
            r.deferred,
            r.fixed,
            r.errors,
            r.invalid_data
        ),
        (Outcome::Success, 1, 1, 0, 0, 1),
        "{r:?}"
    );
    assert_eq!(key_type(&env, &suspect).await, "hash");
    let record: String = env.redis(redis::cmd("HGET").arg(&suspect).arg("A-1")).await;
    assert!(record.starts_with("1@"), "{record}");
    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!(
        (r.outcome, r.deferred, r.invalid_data),
        (Outcome::Success, 1, 0)
    );

    // A string key with nothing to record is replaced all the same.
    env.fx.warm(1, &[("A-1", "0")]).await.unwrap();
    corrupt(&env, &suspect).await;
    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!((r.outcome, r.invalid_data), (Outcome::Success, 1), "{r:?}");
    assert_eq!(key_type(&env, &suspect).await, "none");
}

/// A done key of the wrong type used to fail the showtime on every run.
#[tokio::test]
async fn a_done_key_of_the_wrong_type_is_replaced_and_the_repair_goes_on() {
    let env = TestEnv::new().await;
    orphan_lock(&env).await;
    let done = env.ctx.redis.keys.done(1);
    corrupt(&env, &done).await;

    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!(
        (r.outcome, r.fixed, r.errors, r.invalid_data),
        (Outcome::Success, 1, 0, 1),
        "{r:?}"
    );
    assert_eq!(env.audit().await.len(), 1);
    assert_eq!(key_type(&env, &done).await, "hash");

    // Missing hashes: the rebuild replaces it likewise.
    let seats = env.fx.hall(2, 1, 2).await.unwrap();
    assert_eq!(seats.len(), 2);
    env.fx.showtime(2, 2, 20, "ON_SALE").await.unwrap();
    corrupt(&env, &env.ctx.redis.keys.done(2)).await;
    let r = env.job(Kind::MissingHashes).await;
    assert_eq!(
        (r.outcome, r.fixed, r.errors, r.invalid_data),
        (Outcome::Success, 1, 0, 1),
        "{r:?}"
    );
    assert_eq!(env.fx.hash(2).await.unwrap().len(), 2);
}

/// A cursor key of the wrong type used to fail every run. Now the run
/// starts over from the soonest showtime, reports the key with a WARN line
/// naming it, counts it as invalid data, and replaces it. Checked through
/// the binary, with its logs.
#[tokio::test]
async fn a_cursor_of_the_wrong_type_is_reported_and_replaced() {
    let env = TestEnv::new().await;
    orphan_lock(&env).await;
    let cursor = env.ctx.redis.keys.cursor("orphan_locks");
    let suspect = env.ctx.redis.keys.suspect(1);
    let _: () = env
        .redis(redis::cmd("HSET").arg(&cursor).arg("a").arg("b"))
        .await;
    corrupt(&env, &suspect).await;

    let out = Command::new(env!("CARGO_BIN_EXE_seatflow-reconciler"))
        .args(["once", "--job", "orphan-locks", "--output", "json"])
        .env("SEATFLOW__MYSQL__URL", &env.db_url)
        .env("SEATFLOW__REDIS__URL", seatflow_test_support::redis_url())
        .env("SEATFLOW__REDIS__KEY_PREFIX", &env.prefix)
        .env("SEATFLOW__RECONCILE__ORPHAN_GRACE", "0s")
        .env("SEATFLOW__LOG__LEVEL", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let job = &report["jobs"][0];
    assert_eq!(
        (&job["outcome"], &job["fixed"], &job["invalid_data"]),
        (&"success".into(), &1.into(), &2.into()),
        "{report}"
    );
    for key in [&cursor, &suspect] {
        assert!(
            stderr.lines().any(|l| l.contains("WARN")
                && l.contains("wrong type")
                && l.contains(key.as_str())),
            "no WARN naming {key}:\n{stderr}"
        );
    }
    // The run reached the end of the estate: the cursor is deleted.
    assert_eq!(key_type(&env, &cursor).await, "none");
    let r = env.job(Kind::OrphanLocks).await;
    assert_eq!((r.outcome, r.invalid_data), (Outcome::Success, 0), "{r:?}");
}

/// Item 3: a lease without expiry held by someone else blocks its showtime
/// for ever. It is reported as stuck (report, gauge, /status), and left
/// alone: never deleted or taken over. An ordinary busy lease is not stuck.
#[tokio::test]
async fn a_lease_without_expiry_is_reported_as_stuck_and_left_alone() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    for id in [1, 2] {
        env.fx.showtime(id, 1, 10 * id, "ON_SALE").await.unwrap();
        env.fx.warm_all(id, &seats, &[("A-1", "1")]).await.unwrap();
    }
    let stuck = env.ctx.redis.keys.showtime_lease(1);
    let _: () = env
        .redis(redis::cmd("SET").arg(&stuck).arg("other-version"))
        .await;
    let busy = env.ctx.redis.keys.showtime_lease(2);
    let _: () = env
        .redis(
            redis::cmd("SET")
                .arg(&busy)
                .arg("other")
                .arg("PX")
                .arg(60_000),
        )
        .await;

    let runner = Runner::new(env.ctx.clone(), Metrics::new());
    let initial = serde_json::to_value(&runner.status()[&Kind::OrphanLocks]).unwrap();
    assert_eq!(initial["stuck_leases"], 0, "{initial}");
    runner
        .start(
            Trigger::Admin {
                kind: Kind::OrphanLocks,
            },
            false,
        )
        .unwrap();
    // Waits for the run to finish; the limit only stops a run that never does.
    let started = std::time::Instant::now();
    let status = loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let s = runner.status()[&Kind::OrphanLocks].clone();
        if !s.running && s.last_run.is_some() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the run never finished"
        );
    };
    let r = &status.last_run.as_ref().unwrap().report;
    assert_eq!(
        (r.outcome, r.skipped_busy, r.stuck_leases, r.fixed),
        (Outcome::Success, 2, 1, 0),
        "{r:?}"
    );
    assert_eq!(status.stuck_leases, 1);
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["stuck_leases"], 1, "{json}");
    assert!(
        runner
            .metrics
            .encode()
            .contains("seatflow_reconcile_stuck_leases{kind=\"orphan_locks\"} 1")
    );
    // Left alone: same holder, still without expiry.
    let holder: Option<String> = env.redis(redis::cmd("GET").arg(&stuck)).await;
    assert_eq!(holder.as_deref(), Some("other-version"));
    let pttl: i64 = env.redis(redis::cmd("PTTL").arg(&stuck)).await;
    assert_eq!(pttl, -1);
    assert_eq!(
        env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
        Some("1")
    );

    // The expired-orders job reports it too.
    env.fx.order(1, "PENDING", &["A-2"], -3600).await.unwrap();
    let r = env.job(Kind::ExpiredOrders).await;
    assert_eq!(
        (r.skipped_busy, r.stuck_leases, r.fixed),
        (1, 1, 0),
        "{r:?}"
    );
}

/// A lock key that is not a string is nobody's lease: we only ever write
/// strings there. `SET NX` used to fail on it and, without expiry, it read
/// as a stuck lease for ever: the showtime was never repaired and the run
/// said success. Now it is replaced by our lease, reported once (WARN,
/// `invalid_data`), and the repair goes on in the same run.
#[tokio::test]
async fn a_lock_key_of_another_type_is_replaced_and_the_repair_goes_on() {
    let env = TestEnv::new().await;
    orphan_lock(&env).await;
    let lock = env.ctx.redis.keys.showtime_lease(1);
    for (n, (wrong, write)) in other_types(&lock).into_iter().enumerate() {
        env.fx.warm(1, &[("A-1", "1")]).await.unwrap();
        let _: redis::Value = env.redis(&write).await;
        assert_eq!(key_type(&env, &lock).await, wrong);

        let r = env.job(Kind::OrphanLocks).await;
        assert_eq!(
            (
                r.outcome,
                r.fixed,
                r.errors,
                r.invalid_data,
                r.skipped_busy,
                r.stuck_leases
            ),
            (Outcome::Success, 1, 0, 1, 0, 0),
            "{wrong}: {r:?}"
        );
        assert_eq!(invalid(&r), 1, "{wrong}");
        assert_eq!(
            env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
            Some("0"),
            "{wrong}"
        );
        let released = audit_row(
            "orphan_locks",
            "seat_released",
            1,
            Some("A-1"),
            None,
            "1",
            "0",
        );
        assert_eq!(env.audit().await, vec![released; n + 1], "{wrong}");
        assert_eq!(key_type(&env, &lock).await, "none", "{wrong}: released");
    }
}

/// The expired-orders job takes the same leases: an expired order whose
/// showtime's lock key is a hash is cancelled and its seat released.
#[tokio::test]
async fn an_expired_order_whose_lock_key_is_a_hash_is_cancelled() {
    let env = TestEnv::new().await;
    let order = seed_expired(&env).await;
    let lock = env.ctx.redis.keys.showtime_lease(1);
    let _: () = env
        .redis(redis::cmd("HSET").arg(&lock).arg("a").arg("b"))
        .await;

    let r = env.job(Kind::ExpiredOrders).await;
    assert_eq!(
        (
            r.outcome,
            r.fixed,
            r.errors,
            r.invalid_data,
            r.skipped_busy,
            r.stuck_leases
        ),
        (Outcome::Success, 1, 0, 1, 0, 0),
        "{r:?}"
    );
    assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
    assert_eq!(
        env.fx.seat_value(1, "A-1").await.unwrap().as_deref(),
        Some("0")
    );
    assert_eq!(key_type(&env, &lock).await, "none", "released");
}

/// Through the binary, with its logs: lock keys of the wrong type met by
/// both jobs that take leases are each reported by a WARN naming the key;
/// an audit backlog of the wrong type met by the run's drain is moved
/// aside (a WARN naming both keys), its members intact, and the run goes on.
#[tokio::test]
async fn wrong_typed_lock_and_backlog_keys_are_reported_and_the_run_goes_on() {
    let env = TestEnv::new().await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    for id in [1, 2] {
        env.fx.showtime(id, 1, 10 * id, "ON_SALE").await.unwrap();
        env.fx.warm_all(id, &seats, &[("A-1", "1")]).await.unwrap();
    }
    // Showtime 1: an expired hold; showtime 2: an orphan lock.
    let order = env.fx.order(1, "PENDING", &["A-1"], -600).await.unwrap();
    let locks = [
        env.ctx.redis.keys.showtime_lease(1),
        env.ctx.redis.keys.showtime_lease(2),
    ];
    for lock in &locks {
        let _: () = env
            .redis(redis::cmd("HSET").arg(lock).arg("a").arg("b"))
            .await;
    }
    let backlog = env.ctx.redis.keys.audit_backlog();
    let _: () = env
        .redis(redis::cmd("SADD").arg(&backlog).arg("m1").arg("m2"))
        .await;

    let out = Command::new(env!("CARGO_BIN_EXE_seatflow-reconciler"))
        .args(["once", "--job", "expired-orders", "--job", "orphan-locks"])
        .args(["--output", "json"])
        .env("SEATFLOW__MYSQL__URL", &env.db_url)
        .env("SEATFLOW__REDIS__URL", seatflow_test_support::redis_url())
        .env("SEATFLOW__REDIS__KEY_PREFIX", &env.prefix)
        .env("SEATFLOW__RECONCILE__ORPHAN_GRACE", "0s")
        .env("SEATFLOW__LOG__LEVEL", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let outcomes: Vec<_> = report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["kind"].as_str().unwrap().to_string(),
                j["outcome"].clone(),
                j["fixed"].clone(),
                j["stuck_leases"].clone(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (
                "expired_orders".into(),
                "success".into(),
                1.into(),
                0.into()
            ),
            ("orphan_locks".into(), "success".into(), 1.into(), 0.into()),
        ],
        "{report}"
    );
    let invalid_data: u64 = report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["invalid_data"].as_u64().unwrap())
        .sum();
    assert_eq!(invalid_data, 3, "two locks and the backlog: {report}");
    for lock in &locks {
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("WARN") && l.contains(lock.as_str()))
            .collect();
        assert!(
            lines.len() == 1 && lines[0].contains("wrong type") && lines[0].contains("replaced"),
            "not one WARN naming {lock} as replaced:\n{stderr}"
        );
    }
    assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
    for id in [1, 2] {
        assert_eq!(
            env.fx.seat_value(id, "A-1").await.unwrap().as_deref(),
            Some("0")
        );
    }

    let aside = backlog_aside(&env).await;
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert!(
        stderr.lines().any(|l| l.contains("WARN")
            && l.contains("wrong type")
            && l.contains(backlog.as_str())
            && l.contains(aside[0].as_str())),
        "no WARN naming {backlog} and {}:\n{stderr}",
        aside[0]
    );
    let mut members: Vec<String> = env.redis(redis::cmd("SMEMBERS").arg(&aside[0])).await;
    members.sort();
    assert_eq!(members, ["m1", "m2"]);
    assert_eq!(key_type(&env, &backlog).await, "none");
}

/// Rule 13 for the pass lease: a key of ours of the wrong type is replaced
/// by the claim, and the claim says so (for the caller to report); an
/// absent one is simply taken, with nothing to report.
#[tokio::test]
async fn a_pass_lease_of_the_wrong_type_is_replaced_and_said_so() {
    use seatflow_reconciler::model::Shard;
    use seatflow_reconciler::store::redis::PassClaim;
    let env = TestEnv::new().await;
    let redis = &env.ctx.redis;
    let claimed = |c: PassClaim| match c {
        PassClaim::Claimed { replaced, .. } => replaced,
        other => panic!("not claimed: {other:?}"),
    };
    let fresh = redis
        .claim_pass(Shard::ALL, "t1 a", 60_000, 0)
        .await
        .unwrap();
    assert!(!claimed(fresh), "an absent lease: nothing replaced");
    let _: () = env
        .redis(redis::cmd("DEL").arg(redis.keys.pass_lease(Shard::ALL)))
        .await;
    let _: () = env
        .redis(
            redis::cmd("SADD")
                .arg(redis.keys.pass_lease(Shard::ALL))
                .arg("m"),
        )
        .await;
    let over = redis
        .claim_pass(Shard::ALL, "t2 a", 60_000, 0)
        .await
        .unwrap();
    assert!(claimed(over), "a set in its place: replaced");
    assert_eq!(
        key_type(&env, &redis.keys.pass_lease(Shard::ALL)).await,
        "string"
    );
}
