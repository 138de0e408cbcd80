//! Replicas share each pass (issue 17): several real daemons on the same
//! data run each shard's pass once per schedule; the others stand by and
//! take over when the active one dies, pauses past its lease, or restarts.

use std::process::Command;
use std::time::{Duration, Instant};

use seatflow_reconciler::model::Shard;
use seatflow_reconciler::run::pass_lease;
use seatflow_test_support::TestEnv;
use seatflow_test_support::daemon::{Daemon, daemon_command, free_port, sample};
use seatflow_test_support::servers::wait_until;
use tokio_util::sync::CancellationToken;

/// Showtimes each test sweeps.
const SHOWTIMES: i64 = 20;

async fn estate(env: &TestEnv, n: i64) {
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    for id in 1..=n {
        env.fx.showtime(id, 1, 30 + id, "ON_SALE").await.unwrap();
        env.fx.warm_all(id, &seats, &[]).await.unwrap();
    }
}

/// A replica: a pass every 2 s, a 2 s lease, take-over after 1 s.
fn replica(env: &TestEnv, name: &str, port: u16) -> Command {
    let mut c = daemon_command(env, port);
    c.env("SEATFLOW__RECONCILE__INSTANCE", name)
        .env("SEATFLOW__SWEEP__SCHEDULE", "*/2 * * * * *")
        .env("SEATFLOW__SWEEP__PASS_LEASE_TTL", "2s")
        .env("SEATFLOW__SWEEP__TAKEOVER_AFTER", "1s")
        .env("SEATFLOW__RECONCILE__LOCK_TTL", "2s")
        .env("SEATFLOW__JOBS__EXPIRED_ORDERS__ENABLED", "false");
    c
}

async fn start(env: &TestEnv, name: &str) -> Daemon {
    let port = free_port();
    Daemon::start(replica(env, name, port), port).await
}

/// Passes this daemon ran (every outcome; stand-bys are not runs).
async fn passes(d: &Daemon) -> f64 {
    passes_in(&d.metrics().await)
}

/// Passes counted in one exposition.
fn passes_in(m: &str) -> f64 {
    ["success", "partial", "failure"]
        .iter()
        .map(|o| {
            sample(
                m,
                &format!(r#"seatflow_reconcile_runs_total{{kind="paid_seats",outcome="{o}"}}"#),
            )
        })
        .sum()
}

async fn scanned(d: &Daemon) -> f64 {
    scanned_in(&d.metrics().await)
}

fn scanned_in(m: &str) -> f64 {
    sample(m, r#"seatflow_reconcile_scanned_total{kind="paid_seats"}"#)
}

async fn last_fire(d: &Daemon) -> String {
    d.status().await["pass"]["shards"]["0"]["last_fire"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// HGETALL calls a Redis server has answered.
async fn hgetalls(env: &TestEnv) -> u64 {
    let info: String = env.redis(redis::cmd("INFO").arg("commandstats")).await;
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_hgetall:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn replicas_share_each_pass_and_read_each_hash_once_per_pass() {
    // A Redis of the test's own: its command counts are these daemons' alone.
    let redis = seatflow_test_support::servers::redis();
    let url = format!("redis://127.0.0.1:{}", redis.port());
    let env =
        TestEnv::with(|s| s.redis.url = seatflow_reconciler::config::SecretUrl::new(&url)).await;
    estate(&env, SHOWTIMES).await;
    let on_private = |name: &str| {
        let port = free_port();
        let mut c = replica(&env, name, port);
        c.env("SEATFLOW__REDIS__URL", &url);
        (c, port)
    };
    // Every pass counted below happens between `started` (before either
    // replica starts) and `elapsed` (after the last count is read), so the
    // fires in that window bound them however slow the machine is.
    let started = Instant::now();
    let (c, port) = on_private("replica-a");
    let a = Daemon::start(c, port).await;
    let (c, port) = on_private("replica-b");
    let b = Daemon::start(c, port).await;
    wait_until("six passes", Duration::from_secs(60), || async {
        passes(&a).await + passes(&b).await >= 6.0
    })
    .await;
    let done_before = passes(&a).await + passes(&b).await;
    let reads = hgetalls(&env).await;
    // Passes and hashes scanned from one exposition per replica, so that a
    // pass ending in between is counted in both or in neither.
    let (ma, mb) = (a.metrics().await, b.metrics().await);
    let elapsed = started.elapsed();
    let (pa, pb) = (passes_in(&ma), passes_in(&mb));
    let scanned = scanned_in(&ma) + scanned_in(&mb);
    // Fires (one every 2 s) in the window, counting one at each end.
    let fires = (elapsed.as_secs_f64() / 2.0).ceil() + 1.0;
    assert!(
        pa + pb <= fires,
        "{pa} + {pb} passes in {elapsed:?}: more than one per fire ({fires})"
    );
    // Each pass read each hash once (zero grace: no suspect records are
    // read), whichever replica ran it; a pass may be under way meanwhile.
    assert_eq!(scanned, (pa + pb) * SHOWTIMES as f64, "{pa} + {pb} passes");
    let per_pass = SHOWTIMES as u64;
    assert!(
        reads >= done_before as u64 * per_pass && reads <= (pa + pb + 1.0) as u64 * per_pass,
        "{reads} HGETALL for {pa} + {pb} passes of {SHOWTIMES} hashes"
    );
    // One was active and the other stood by (or found the slot done).
    let fires_seen = [last_fire(&a).await, last_fire(&b).await];
    assert!(
        fires_seen
            .iter()
            .any(|f| f == "standby" || f == "already_done"),
        "{fires_seen:?}"
    );
    drop((a, b));
    drop(redis);
}

#[tokio::test]
async fn sigkill_of_the_active_replica_hands_the_pass_over() {
    let env = TestEnv::new().await;
    estate(&env, SHOWTIMES).await;
    let mut replicas = [
        start(&env, "replica-a").await,
        start(&env, "replica-b").await,
    ];
    // Whichever ran the latest pass is active; the other stands by.
    let stands_by =
        async |d: &Daemon| matches!(last_fire(d).await.as_str(), "standby" | "already_done");
    wait_until("one replica stands by", Duration::from_secs(60), || async {
        stands_by(&replicas[0]).await || stands_by(&replicas[1]).await
    })
    .await;
    // The active one is who ran the last pass, as recorded in Redis (the
    // roles may have changed since the stand-by above was seen).
    let key = format!("{}reconcile:pass-done:{{0-of-1}}", env.prefix);
    wait_until("a pass is recorded", Duration::from_secs(60), || async {
        env.redis::<Option<String>>(redis::cmd("GET").arg(&key))
            .await
            .is_some()
    })
    .await;
    let record: String = env.redis(redis::cmd("GET").arg(&key)).await;
    let active = if record.ends_with(" replica-a") { 0 } else { 1 };
    let standby = &replicas[1 - active];
    let handovers = r#"seatflow_reconcile_pass_handovers_total{shard="0"}"#;
    let completed = r#"seatflow_reconcile_pass_last_completed_timestamp_seconds{shard="0"}"#;
    let before = standby.metrics().await;

    replicas[active].child.kill().unwrap();
    replicas[active].child.wait().unwrap();
    let killed = Instant::now();
    let standby = &replicas[1 - active];
    // Lease TTL (2 s) + one interval (2 s) + take-over delay (1 s), with
    // room for a loaded machine.
    wait_until(
        "the standby completes a pass",
        Duration::from_secs(60),
        || async { sample(&standby.metrics().await, completed) > sample(&before, completed) },
    )
    .await;
    eprintln!("hand-over after SIGKILL took {:?}", killed.elapsed());
    let m = standby.metrics().await;
    assert!(sample(&m, handovers) > sample(&before, handovers), "{m}");
    assert_eq!(
        sample(&m, r#"seatflow_reconcile_pass_active{shard="0"}"#),
        1.0
    );
}

/// A replica paused past its lease (SIGSTOP) mid-pass writes nothing when
/// it wakes: the standby has taken the pass over, and the paused one's
/// fence has lapsed. Without the fence it would go on repairing the drift
/// below from where it stopped.
#[tokio::test]
async fn a_replica_paused_past_its_lease_writes_nothing_when_it_wakes() {
    let env = TestEnv::new().await;
    estate(&env, 40).await;
    // Slow passes (10 hashes/s, 4 s for 40), one every 10 s.
    let slow = |name: &str, port: u16| -> Command {
        let mut c = replica(&env, name, port);
        c.env("SEATFLOW__SWEEP__SCHEDULE", "*/10 * * * * *")
            .env("SEATFLOW__SWEEP__MAX_HASHES_PER_SECOND", "10")
            .env("SEATFLOW__SWEEP__HASHES_PER_BATCH", "1");
        c
    };
    let port = free_port();
    let mut a = Daemon::start(slow("replica-a", port), port).await;
    wait_until("a is in a pass", Duration::from_secs(60), || async {
        a.status().await["jobs"]["paid_seats"]["running"] == true
    })
    .await;
    a.signal("STOP");
    let b = start(&env, "replica-b").await;
    wait_until("b completes a pass", Duration::from_secs(60), || async {
        sample(
            &b.metrics().await,
            r#"seatflow_reconcile_pass_last_completed_timestamp_seconds{shard="0"}"#,
        ) > 0.0
    })
    .await;
    // Drift a's paused pass would still reach: an orphan lock everywhere.
    let drifted_at: chrono::NaiveDateTime = sqlx::query_scalar("SELECT UTC_TIMESTAMP(3)")
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap();
    for id in 1..=40 {
        env.fx.warm(id, &[("A-1", "1")]).await.unwrap();
    }
    a.signal("CONT");
    // Connections made while it was stopped may be reset: ask until it answers.
    wait_until("a's stale pass ends", Duration::from_secs(60), || async {
        match a.get("/status").await {
            Ok((200, body)) => {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                v["jobs"]["paid_seats"]["running"] == false
            }
            _ => false,
        }
    })
    .await;
    let by_a: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM reconcile_fix WHERE instance = 'replica-a' AND fixed_at >= ?",
    )
    .bind(drifted_at)
    .fetch_one(env.ctx.mysql.pool())
    .await
    .unwrap();
    assert_eq!(
        by_a, 0,
        "the paused replica repaired after its lease lapsed"
    );
    // b repairs the drift in its next pass.
    wait_until("b repairs the drift", Duration::from_secs(60), || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM reconcile_fix WHERE instance = 'replica-b' AND fixed_at >= ?",
        )
        .bind(drifted_at)
        .fetch_one(env.ctx.mysql.pool())
        .await
        .unwrap();
        n == 40
    })
    .await;
    drop(b);
    a.signal("KILL");
    a.child.wait().unwrap();
}

/// Restarting the replicas one after the other (SIGTERM, start again)
/// never leaves the passes unrun: while one replica is down the other takes
/// them over, and once it is back passes go on. Judged by the pass record in
/// Redis (the slot each pass served and who ran it), one event after the
/// other with hang guards only; how soon a take-over happens is a timing
/// goal, measured by the soak, not asserted here.
#[tokio::test]
async fn a_rolling_restart_never_leaves_a_pass_unrun() {
    let env = TestEnv::new().await;
    estate(&env, SHOWTIMES).await;
    let names = ["replica-a", "replica-b"];
    let mut replicas = [start(&env, names[0]).await, start(&env, names[1]).await];
    let record_key = format!("{}reconcile:pass-done:{{0-of-1}}", env.prefix);
    // The last recorded pass: (slot, instance), from "slot finished instance".
    let record = async || -> Option<(i64, String)> {
        let rec: Option<String> = env.redis(redis::cmd("GET").arg(&record_key)).await;
        let rec = rec?;
        let mut parts = rec.splitn(3, ' ');
        let slot = parts.next()?.parse().ok()?;
        let instance = parts.nth(1)?.to_string();
        Some((slot, instance))
    };
    // The first pass recorded for a slot later than `after`.
    let next_pass = async |after: i64, what: &str| -> (i64, String) {
        let guard = Instant::now();
        loop {
            if let Some((slot, by)) = record().await
                && slot > after
            {
                return (slot, by);
            }
            assert!(
                guard.elapsed() < Duration::from_secs(60),
                "{what}: no pass recorded after slot {after}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let (mut last, _) = next_pass(0, "a first pass").await;
    for (i, name) in names.into_iter().enumerate() {
        let other = names[1 - i];
        replicas[i].signal("TERM");
        let status = replicas[i].wait_exit(Duration::from_secs(60)).await;
        assert!(status.is_some_and(|s| s.success()), "{name} stops cleanly");
        // `name` may have recorded a pass on its way out; any later one is
        // the other replica's.
        last = record().await.map_or(last, |(slot, _)| slot.max(last));
        let (slot, by) = next_pass(last, &format!("{other} takes over from {name}")).await;
        assert_eq!(by, other, "slot {slot} served while {name} was down");
        replicas[i] = start(&env, name).await;
        (last, _) = next_pass(slot, &format!("passes go on once {name} is back")).await;
    }
}

/// A pass that cannot finish before the next fire stops there, is counted
/// and shown, and the next pass continues from the cursors: the whole
/// estate is covered over several passes.
#[tokio::test]
async fn a_pass_longer_than_its_interval_stops_at_the_next_fire_and_is_counted() {
    let env = TestEnv::new().await;
    estate(&env, 80).await;
    let port = free_port();
    // 20 hashes a second: 4 s for the estate, fires every 2 s, so a pass
    // sweeps about 40 (enough to judge its pace by; see pass_fit).
    let mut c = replica(&env, "replica-a", port);
    c.env("SEATFLOW__SWEEP__MAX_HASHES_PER_SECOND", "20")
        .env("SEATFLOW__SWEEP__HASHES_PER_BATCH", "1")
        .env("SEATFLOW__SWEEP__SOONEST_WINDOW", "0s");
    let d = Daemon::start(c, port).await;
    wait_until("the estate is covered", Duration::from_secs(60), || async {
        scanned(&d).await >= 80.0
    })
    .await;
    let m = d.metrics().await;
    assert!(
        sample(&m, "seatflow_reconcile_pass_overruns_total") >= 1.0,
        "{m}"
    );
    // The pace shown is the configured cap or below (a back-off).
    let pace = sample(&m, "seatflow_reconcile_pace_hashes_per_second");
    assert!(pace > 0.0 && pace <= 20.0, "{pace}");
    // What would make it fit, measured on a pass that swept enough: at
    // about 20 showtimes a second, 80 showtimes need about 4 s of a 2 s
    // interval.
    wait_until("a pass is measured", Duration::from_secs(60), || async {
        d.status().await["pass"]["shards"]["0"]["fit"].is_object()
    })
    .await;
    let status = d.status().await;
    let shard = &status["pass"]["shards"]["0"];
    assert!(shard["overruns"].as_u64() >= Some(1), "{status}");
    let fit = &shard["fit"];
    assert_eq!(fit["showtimes"], 80, "{status}");
    // n paced reads take n - 1 spacings: a pass of 20 reads up to 20/19
    // of the pace.
    let rate = fit["showtimes_per_second"].as_f64().unwrap();
    assert!(rate > 0.0 && rate <= 20.0 * 20.0 / 19.0 + 1.0, "{status}");
    assert_eq!(fit["interval_seconds"], 2.0, "{status}");
    assert!(fit["shards_to_fit"].as_u64() >= Some(2), "{status}");
    assert!(
        fit["interval_to_fit_seconds"].as_u64() >= Some(4),
        "{status}"
    );
    // The same as capacity: what one shard's pass covers in 80 % of its
    // interval at that pace, and the shards the estate needs.
    let capacity = &status["capacity"];
    assert_eq!(
        capacity["showtimes_per_shard"].as_f64(),
        Some((rate * 2.0 * 0.8).floor()),
        "{status}"
    );
    assert_eq!(
        capacity["shards_for_estate"], fit["shards_to_fit"],
        "{status}"
    );
    assert!(
        capacity["shards_needed"].as_u64() >= fit["shards_to_fit"].as_u64(),
        "{status}"
    );
    let m = d.metrics().await;
    assert!(
        sample(&m, r#"seatflow_reconcile_pass_shards_to_fit{shard="0"}"#) >= 2.0,
        "{m}"
    );
    assert!(
        sample(
            &m,
            r#"seatflow_reconcile_pass_showtimes_per_second{shard="0"}"#
        ) > 0.0
    );
}

/// Claims the (free) pass of the whole estate in this process.
async fn claim_free_pass(
    env: &TestEnv,
    stop: &CancellationToken,
) -> std::sync::Arc<pass_lease::HeldPass> {
    match pass_lease::claim(&env.ctx, Shard::ALL, 1_000, stop)
        .await
        .unwrap()
    {
        pass_lease::Claimed::Ours { pass, .. } => pass,
        _ => panic!("a free pass lease is ours to claim"),
    }
}

/// The pass lease in one process (no daemon): a lease someone set without
/// an expiry is reported as stuck (rule 13), a live one is not.
#[tokio::test]
async fn a_pass_lease_without_expiry_is_reported_as_stuck() {
    let env = TestEnv::new().await;
    let key = env.ctx.redis.keys.pass_lease(Shard::ALL);
    let stop = CancellationToken::new();
    for (ttl_ms, stuck) in [(None, true), (Some(60_000), false)] {
        let mut set = redis::cmd("SET");
        set.arg(&key).arg("someone other-instance");
        if let Some(ms) = ttl_ms {
            set.arg("PX").arg(ms);
        }
        let _: () = env.redis(&set).await;
        match pass_lease::claim(&env.ctx, Shard::ALL, 1_000, &stop)
            .await
            .unwrap()
        {
            pass_lease::Claimed::Held { stuck: s, .. } => assert_eq!(s, stuck, "ttl {ttl_ms:?}"),
            _ => panic!("the lease is someone else's"),
        }
    }
}

/// A held pass whose lease is taken over stops: its renewal finds the lease
/// gone, the fence drops and the pass's stop token is cancelled, so the
/// pass ends instead of reading on without the right to write.
#[tokio::test]
async fn a_pass_whose_lease_is_taken_over_stops() {
    let env = TestEnv::with(|s| s.pass.pass_lease_ttl = Duration::from_millis(600)).await;
    let stop = CancellationToken::new();
    let held = claim_free_pass(&env, &stop).await;
    assert!(held.fence().holds());
    let _: () = env
        .redis(
            redis::cmd("SET")
                .arg(env.ctx.redis.keys.pass_lease(Shard::ALL))
                .arg("someone other-instance")
                .arg("PX")
                .arg(60_000),
        )
        .await;
    // Hang guard only: the renewal runs every 200 ms.
    tokio::time::timeout(Duration::from_secs(60), held.stop_token().cancelled())
        .await
        .expect("the pass stops once its renewal finds the lease gone");
    assert!(!held.fence().holds());
    assert!(!stop.is_cancelled(), "the caller's own token is left alone");
}

/// A pass given back without a record (it failed or was cut) frees its
/// lease at once, so another replica need not wait out the TTL; no slot
/// is recorded as done.
#[tokio::test]
async fn a_released_pass_frees_its_lease_at_once() {
    let env = TestEnv::new().await;
    let stop = CancellationToken::new();
    let held = claim_free_pass(&env, &stop).await;
    let keys = &env.ctx.redis.keys;
    let lease: Option<String> = env
        .redis(redis::cmd("GET").arg(keys.pass_lease(Shard::ALL)))
        .await;
    assert!(lease.is_some());
    held.release().await;
    let lease: Option<String> = env
        .redis(redis::cmd("GET").arg(keys.pass_lease(Shard::ALL)))
        .await;
    assert_eq!(lease, None);
    let record: Option<String> = env
        .redis(redis::cmd("GET").arg(keys.pass_record(Shard::ALL)))
        .await;
    assert_eq!(record, None, "no slot recorded as done");
}

/// A held pass dropped without `finish` or `release` (an early return, a
/// panic) stops renewing: its lease runs out with its TTL instead of being
/// kept alive by an orphaned renewal task, so a standby can take over.
#[tokio::test]
async fn a_dropped_pass_stops_renewing_its_lease() {
    let env = TestEnv::with(|s| s.pass.pass_lease_ttl = Duration::from_millis(600)).await;
    let stop = CancellationToken::new();
    let held = claim_free_pass(&env, &stop).await;
    drop(held);
    let key = env.ctx.redis.keys.pass_lease(Shard::ALL);
    // Renewed every 200 ms while the task lives; gone after 600 ms without it.
    wait_until(
        "the dropped pass's lease to expire",
        Duration::from_secs(60),
        || async {
            let lease: Option<String> = env.redis(redis::cmd("GET").arg(&key)).await;
            lease.is_none()
        },
    )
    .await;
}
