//! Rule 19, recovers by itself or says it cannot: the shard's pass always
//! has a holder, or `/readyz` and `seatflow_reconcile_pass_active` say why
//! not, whenever a Redis outage falls (on the claim, on a renewal mid-pass,
//! between passes) and whichever permission is taken away and given back;
//! a standby sees a holder gone within seconds; Redis data loss (a flush, a
//! restart without persistence) is a gap that starts a pass at once.
//!
//! Each daemon runs in process on a Redis of the test's own (stopped,
//! restarted and flushed here), its schedules a year away and keyspace
//! events off: nothing but the recovery under test can start its passes.
//! The pass lease is short (1 s: renewed every third, lapsed after two),
//! so an outage of a second or two is already one the holder cannot ride
//! out.

use std::time::Duration;

use seatflow_reconciler::config::{RedisEvents, SecretUrl, Settings};
use seatflow_reconciler::model::Shard;
use seatflow_reconciler::run::context::Context;
use seatflow_reconciler::store::redis::key_slot;
use seatflow_test_support::TestEnv;
use seatflow_test_support::daemon::{InProcessDaemon, metrics, sample};
use seatflow_test_support::estate::{
    after_a_first_pass, daemon_on_estate, estate, estate_on, post, seat_becomes,
};
use seatflow_test_support::servers::{self, PrivateServer, RedisCluster, wait_until};

/// Showtimes of each test's estate (one 1x4 hall).
const SHOWTIMES: i64 = 4;

const ACTIVE: &str = r#"seatflow_reconcile_pass_active{shard="0"}"#;

fn short_lease(s: &mut Settings) {
    s.changes.redis_events = RedisEvents::Off;
    s.pass.pass_lease_ttl = Duration::from_secs(1);
}

/// The estate on `redis` (a private server), and a daemon whose first pass
/// has run (it holds the shard's pass).
async fn daemon_on(
    redis: PrivateServer,
    tweak: impl FnOnce(&mut Settings),
) -> (PrivateServer, TestEnv, InProcessDaemon) {
    let env = estate(Some(&redis), SHOWTIMES, |s| {
        short_lease(s);
        tweak(s);
    })
    .await;
    let daemon = after_a_first_pass(&env).await;
    ready(&daemon).await;
    (redis, env, daemon)
}

/// `/readyz`: its status and body.
async fn readyz(daemon: &InProcessDaemon) -> (u16, serde_json::Value) {
    let r = reqwest::get(daemon.url("/readyz")).await.unwrap();
    let code = r.status().as_u16();
    (
        code,
        serde_json::from_str(&r.text().await.unwrap()).unwrap(),
    )
}

/// Waits until `/readyz` says 200 (the pass held) and the gauge says 1.
async fn ready(daemon: &InProcessDaemon) {
    wait_until("ready, the pass held", Duration::from_secs(60), || async {
        readyz(daemon).await == (200, ready_body()) && sample(&metrics(daemon).await, ACTIVE) == 1.0
    })
    .await;
}

fn ready_body() -> serde_json::Value {
    serde_json::json!({"mysql": "ok", "redis": "ok", "pass": {"state": "held"}})
}

/// Waits until `/readyz` answers 503 because the pass has no holder, with
/// a reason containing `why`, and the gauge says 0; returns the reason.
async fn no_holder(daemon: &InProcessDaemon, why: &str) -> String {
    let unheld = |body: &serde_json::Value| {
        body["pass"]["state"] == "no_holder"
            && body["pass"]["why"]
                .as_str()
                .is_some_and(|said| said.contains(why))
    };
    wait_until(
        format!("no holder ({why})"),
        Duration::from_secs(60),
        || async {
            let (code, body) = readyz(daemon).await;
            code == 503 && unheld(&body) && sample(&metrics(daemon).await, ACTIVE) == 0.0
        },
    )
    .await;
    let (_, body) = readyz(daemon).await;
    body["pass"]["why"].as_str().unwrap_or_default().to_string()
}

/// Waits until every showtime's seat hash is back in Redis (`what`).
async fn hashes_back(env: &TestEnv, what: &str) {
    hashes_of_back(env, SHOWTIMES, what).await
}

/// The same for showtimes `1..=showtimes`.
async fn hashes_of_back(env: &TestEnv, showtimes: i64, what: &str) {
    wait_until(what, Duration::from_secs(60), || async {
        for showtime in 1..=showtimes {
            match env.fx.hash(showtime).await {
                Ok(h) if h.len() == 4 => {}
                _ => return false,
            }
        }
        true
    })
    .await;
}

/// `seatflow_reconcile_change_gaps_total{reason}` now.
async fn gaps(daemon: &InProcessDaemon, reason: &str) -> f64 {
    sample(
        &metrics(daemon).await,
        &format!(r#"seatflow_reconcile_change_gaps_total{{reason="{reason}"}}"#),
    )
}

/// Waits until the gap counter of `reason` is above `before`.
async fn gap_counted(daemon: &InProcessDaemon, reason: &str, before: f64) {
    wait_until(
        format!("a {reason} gap counted"),
        Duration::from_secs(60),
        || async { gaps(daemon, reason).await > before },
    )
    .await;
}

/// `SET` of the shard's pass lease to `value` (a stand-in holder's), with
/// an expiry of `px_ms` (None: none, as no reconciler sets it).
fn pass_lease_set(env: &TestEnv, value: &str, px_ms: Option<u64>) -> redis::Cmd {
    let mut c = redis::cmd("SET");
    c.arg(env.ctx.redis.keys.pass_lease(Shard::ALL)).arg(value);
    if let Some(ms) = px_ms {
        c.arg("PX").arg(ms);
    }
    c
}

/// The daemon comes back: a gap of `reason` counted (above `before`),
/// every hash back (`what`), ready with the pass held.
async fn comes_back(
    env: &TestEnv,
    daemon: &InProcessDaemon,
    reason: &str,
    before: f64,
    what: &str,
) {
    gap_counted(daemon, reason, before).await;
    hashes_back(env, what).await;
    ready(daemon).await;
}

/// Redis comes back empty on its port after being away `down`.
async fn outage(redis: &mut PrivateServer, down: Duration) {
    redis.stop();
    tokio::time::sleep(down).await;
    redis.start().unwrap();
}

/// A command on the private server itself (never the shared one).
async fn on_private(redis: &PrivateServer, cmd: &redis::Cmd) {
    let client = redis::Client::open(format!("redis://127.0.0.1:{}", redis.port())).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let () = cmd.query_async(&mut c).await.unwrap();
}

/// A customer's hold on seat A-1 of showtime 1 (Redis "1", its order
/// PENDING), consistent; returns the order.
async fn a_hold(env: &TestEnv) -> i64 {
    let order = env.fx.order(1, "PENDING", &["A-1"], 900).await.unwrap();
    env.fx.warm(1, &[("A-1", "1")]).await.unwrap();
    order
}

/// The outage falls on the claim: the daemon's lease lapsed while Redis
/// (persistent: nothing is lost, so no data loss starts a pass) is away,
/// and a pass asked for meanwhile cannot claim it. The claim is retried
/// until Redis answers; meanwhile `/readyz` and the gauge say the pass has
/// no holder. Back as the holder, the daemon runs a pass, which repairs the
/// payment made meanwhile (without the retry, the daemon stood by with no
/// holder until the next fire, a year away here).
#[tokio::test]
async fn an_outage_on_the_claim_is_retried_until_the_pass_has_a_holder() {
    let (mut redis, env, daemon) = daemon_on(servers::persistent_redis(), |_| {}).await;
    let order = a_hold(&env).await;
    redis.stop();
    assert!(env.fx.pay(order).await.unwrap());
    let why = no_holder(&daemon, "not been renewed").await;
    assert!(why.contains("pass lease"), "{why}");
    assert_eq!(post(&daemon, "/jobs/paid_seats/run").await.0, 202);
    daemon
        .status_when("the pass's claim failed", |s| {
            s["pass"]["shards"]["0"]["last_fire"] == "claim_failed"
        })
        .await;
    no_holder(&daemon, "").await;
    redis.start().unwrap();
    seat_becomes(
        &env,
        1,
        "A-1",
        "2",
        "the payment repaired by the holder's pass",
    )
    .await;
    ready(&daemon).await;
    daemon.stop().await;
}

/// The outage falls on a renewal, mid-pass (paced to two hashes a second;
/// Redis persistent): the holder stops writing and says it cannot be sure
/// of its lease; once Redis is back it holds the pass again by itself, and
/// a pass repairs the payment made meanwhile.
#[tokio::test]
async fn an_outage_during_a_pass_ends_with_the_holder_back_and_a_pass() {
    let (mut redis, env, daemon) = daemon_on(servers::persistent_redis(), |s| {
        s.pass.max_hashes_per_second = 2;
        s.pass.hashes_per_batch = 1;
    })
    .await;
    let order = a_hold(&env).await;
    assert_eq!(post(&daemon, "/jobs/paid_seats/run").await.0, 202);
    daemon
        .status_when("a pass under way", |s| {
            s["jobs"]["paid_seats"]["running"] == true
        })
        .await;
    redis.stop();
    assert!(env.fx.pay(order).await.unwrap());
    no_holder(&daemon, "not been renewed").await;
    redis.start().unwrap();
    seat_becomes(&env, 1, "A-1", "2", "the payment repaired after the outage").await;
    ready(&daemon).await;
    daemon.stop().await;
}

/// The outage falls between passes (2 s, longer than the lease): Redis
/// comes back empty (no persistence), the loss is a gap, and a pass
/// rebuilds every hash.
#[tokio::test]
async fn an_outage_between_passes_is_a_gap_and_every_hash_comes_back() {
    let (mut redis, env, daemon) = daemon_on(servers::redis(), |_| {}).await;
    let lost = gaps(&daemon, "redis_data_lost").await;
    outage(&mut redis, Duration::from_secs(2)).await;
    let what = "every hash rebuilt after the outage";
    comes_back(&env, &daemon, "redis_data_lost", lost, what).await;
    daemon.stop().await;
}

/// FLUSHALL, FLUSHDB and a restart without persistence (no outage worth
/// the name) each lose every seat hash: each is told by the data marker,
/// counted as a gap, and the pass it starts rebuilds every hash; the
/// holder keeps the pass throughout.
#[tokio::test]
async fn a_flushall_a_flushdb_and_a_restart_each_start_a_pass_at_once() {
    let (mut redis, env, daemon) = daemon_on(servers::redis(), |_| {}).await;
    for fault in ["FLUSHALL", "FLUSHDB", "restart"] {
        let lost = gaps(&daemon, "redis_data_lost").await;
        match fault {
            "restart" => outage(&mut redis, Duration::ZERO).await,
            flush => on_private(&redis, &redis::cmd(flush)).await,
        }
        let what = format!("every hash rebuilt after {fault}");
        comes_back(&env, &daemon, "redis_data_lost", lost, &what).await;
    }
    daemon.stop().await;
}

/// More hashes lost than a pass may rebuild (`missing_hashes.scan_limit`
/// and `batch_size` one here, four lost): passes follow one another at
/// once until every hash is back, not one a fire.
#[tokio::test]
async fn a_loss_larger_than_a_passs_budget_is_rebuilt_by_passes_in_a_row() {
    let (redis, env, daemon) = daemon_on(servers::redis(), |s| {
        let job = s.job_mut(seatflow_reconciler::model::Kind::MissingHashes);
        (job.batch_size, job.scan_limit) = (1, 1);
    })
    .await;
    let lost = gaps(&daemon, "redis_data_lost").await;
    on_private(&redis, &redis::cmd("FLUSHALL")).await;
    let what = "every hash rebuilt, one a pass";
    comes_back(&env, &daemon, "redis_data_lost", lost, what).await;
    assert_eq!(rebuilding_runs(&env).await, SHOWTIMES);
    daemon.stop().await;
}

/// A data loss is a restore, not drift: the pass it starts rebuilds up to
/// `missing_hashes.scan_limit` hashes, past its `batch_size` (one here,
/// four lost), so every seat map is back after one pass, not one pass a
/// hash (at 10 k showtimes and the default 200, that was 50 passes).
#[tokio::test]
async fn a_data_loss_is_rebuilt_in_one_pass_past_the_jobs_batch_size() {
    let (redis, env, daemon) = daemon_on(servers::redis(), |s| {
        s.job_mut(seatflow_reconciler::model::Kind::MissingHashes)
            .batch_size = 1;
    })
    .await;
    let lost = gaps(&daemon, "redis_data_lost").await;
    on_private(&redis, &redis::cmd("FLUSHALL")).await;
    let what = "every hash rebuilt in one pass";
    comes_back(&env, &daemon, "redis_data_lost", lost, what).await;
    assert_eq!(rebuilding_runs(&env).await, 1);
    daemon.stop().await;
}

/// How many runs rebuilt the estate's hashes, once the audit has every
/// rebuild (a run writes its audit rows as it ends, after its hashes).
async fn rebuilding_runs(env: &TestEnv) -> i64 {
    let count = |sql: &'static str| async move {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(env.ctx.mysql.pool())
            .await
            .unwrap()
    };
    wait_until("every rebuild audited", Duration::from_secs(30), || async {
        count("SELECT COUNT(*) FROM reconcile_fix WHERE job = 'missing_hashes'").await >= SHOWTIMES
    })
    .await;
    count("SELECT COUNT(DISTINCT run_id) FROM reconcile_fix WHERE job = 'missing_hashes'").await
}

/// Another reconciler's lease (here set by the test, with an expiry): the
/// daemon stands by, ready, naming the holder. When that lease is gone (the
/// holder died) the daemon claims the pass within seconds, and the gap
/// (`no_holder`) starts a pass at once, which repairs what nobody watched.
#[tokio::test]
async fn a_standby_claims_the_pass_within_seconds_of_the_holders_lease_going() {
    let env = estate(None, SHOWTIMES, short_lease).await;
    let lease = env.ctx.redis.keys.pass_lease(Shard::ALL);
    let value = seatflow_reconciler::store::redis::pass_lease_value(
        "0f0f",
        chrono::Utc::now().timestamp_millis(),
        "replica-z",
    );
    let _: () = env.redis(&pass_lease_set(&env, &value, Some(60_000))).await;
    let daemon = InProcessDaemon::start(env.ctx.clone()).await;
    wait_until("standing by", Duration::from_secs(60), || async {
        let (code, body) = readyz(&daemon).await;
        code == 200
            && body["pass"] == serde_json::json!({"state": "standby", "holder": "replica-z"})
    })
    .await;
    // The first pass (the daemon's start) stood by for replica-z.
    daemon
        .status_when("the first pass stood by", |s| {
            s["pass"]["shards"]["0"]["last_fire"] == "standby"
        })
        .await;
    assert_eq!(sample(&metrics(&daemon).await, ACTIVE), 0.0);
    // Drift nobody repairs while replica-z "holds" the pass: a lost hash.
    let _: () = env
        .redis(redis::cmd("DEL").arg(env.ctx.redis.keys.seat(2)))
        .await;
    let holder_gone = gaps(&daemon, "no_holder").await;
    let _: () = env.redis(redis::cmd("DEL").arg(&lease)).await;
    let what = "the lost hash rebuilt by the new holder";
    comes_back(&env, &daemon, "no_holder", holder_gone, what).await;
    daemon.stop().await;
}

/// A pass lease without expiry that is not ours (no reconciler sets one):
/// the shard has no live holder; `/readyz` says so and why, the gauge is 0.
/// Once an operator deletes it, the daemon claims the pass.
#[tokio::test]
async fn a_pass_lease_without_expiry_leaves_the_daemon_unready_until_deleted() {
    let env = estate(None, SHOWTIMES, short_lease).await;
    let lease = env.ctx.redis.keys.pass_lease(Shard::ALL);
    let _: () = env
        .redis(&pass_lease_set(&env, "0f0f replica-stuck", None))
        .await;
    let daemon = InProcessDaemon::start(env.ctx.clone()).await;
    no_holder(&daemon, "held by replica-stuck without an expiry").await;
    let _: () = env.redis(redis::cmd("DEL").arg(&lease)).await;
    ready(&daemon).await;
    daemon.stop().await;
}

/// The daemon's Redis user under exactly the documented ACL (on the
/// test's own Redis), reached as that user.
async fn as_acl_user(redis: &PrivateServer) -> (TestEnv, Context) {
    let env = estate(Some(redis), SHOWTIMES, |s| {
        short_lease(s);
        // Lapsed 4 s after its last renewal, gone 2 s later: the permission
        // is given back while the lease is still the daemon's.
        s.pass.pass_lease_ttl = Duration::from_secs(6);
    })
    .await;
    let access = seatflow_reconciler::ops::access::redis_access(&env.ctx.settings, false);
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg("sf-recover").arg("on").arg(">pw");
    for token in access.tokens() {
        cmd.arg(token);
    }
    on_private(redis, &cmd).await;
    let mut settings = (*env.ctx.settings).clone();
    settings.redis.url =
        SecretUrl::new(format!("redis://sf-recover:pw@127.0.0.1:{}", redis.port()));
    let ctx = Context::connect(settings).await.unwrap();
    (env, ctx)
}

/// A permission taken away while the daemon holds the pass (`+evalsha`,
/// then the reconciler's key pattern): it cannot renew it, and `/readyz`
/// names the refusal. Given back (before the lease expired), the daemon
/// holds the pass again by itself, and the time it had none is a gap: a
/// pass repairs what drifted meanwhile (without it, nothing did until the
/// next fire).
#[tokio::test]
async fn a_refused_permission_given_back_brings_the_pass_back() {
    let redis = servers::redis();
    let (env, ctx) = as_acl_user(&redis).await;
    let own_keys = format!("~{}reconcile:*", env.prefix);
    let daemon = InProcessDaemon::start(ctx).await;
    assert_eq!(post(&daemon, "/jobs/paid_seats/run").await.0, 202);
    daemon
        .status_when("the first pass ran", |s| {
            s["pass"]["shards"]["0"]["last_fire"] == "ran"
        })
        .await;
    ready(&daemon).await;
    for (take, give, refused) in [
        (
            "-evalsha",
            "+evalsha".to_string(),
            "no permissions to run the 'evalsha'",
        ),
        (
            "resetkeys",
            own_keys.clone(),
            "no permissions to access one of the keys",
        ),
    ] {
        let mut taking = redis::cmd("ACL");
        taking.arg("SETUSER").arg("sf-recover").arg(take);
        if take == "resetkeys" {
            // Only the seat hashes are left.
            taking.arg(format!("~{}seat:*", env.prefix));
        }
        on_private(&redis, &taking).await;
        no_holder(&daemon, refused).await;
        // Drift while nobody holds the pass: a lost hash.
        let _: () = env
            .redis(redis::cmd("DEL").arg(env.ctx.redis.keys.seat(3)))
            .await;
        on_private(
            &redis,
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("sf-recover")
                .arg(&give),
        )
        .await;
        hashes_back(&env, &format!("the hash rebuilt once {give} is given back")).await;
        ready(&daemon).await;
    }
    daemon.stop().await;
}

/// In a Redis Cluster each primary loses its data on its own (a FLUSHALL
/// on one node): each has a data marker of its own, in one of its slots,
/// so the loss of one node's hashes is a gap too, and they come back.
#[tokio::test]
async fn a_flushall_of_one_cluster_primary_is_a_gap_and_its_hashes_come_back() {
    const SPREAD: i64 = 12;
    let cluster = RedisCluster::start().await;
    let urls: Vec<SecretUrl> = cluster
        .ports()
        .map(|p| SecretUrl::new(format!("redis://127.0.0.1:{p}")))
        .collect();
    let (env, daemon) = daemon_on_estate(None, SPREAD, |s| {
        short_lease(s);
        s.redis.cluster_urls = urls;
    })
    .await;
    let ports: Vec<u16> = cluster.ports().collect();
    wait_until(
        "a data marker on every primary",
        Duration::from_secs(60),
        || async {
            ports.iter().all(|p| {
                !cluster
                    .cli(*p, &["keys", "*reconcile:data-marker*"])
                    .trim()
                    .is_empty()
            })
        },
    )
    .await;
    let first = env.ctx.redis.keys.seat(1);
    let node = cluster.owner_of_slot(ports[0], key_slot(first.as_bytes()));
    let lost = gaps(&daemon, "redis_data_lost").await;
    assert_eq!(cluster.cli(node, &["flushall"]).trim(), "OK");
    gap_counted(&daemon, "redis_data_lost", lost).await;
    hashes_of_back(&env, SPREAD, "the flushed primary's hashes rebuilt").await;
    daemon.stop().await;
}

/// Redis' data lost while this daemon stood by (its binlog reader not
/// reading): when it becomes the holder, the saved binlog position it finds
/// missing is a lost one (a gap, a pass), not "none yet". The flush and a
/// stand-in holder's lease (3 s) are one transaction, so the loss is told
/// before the daemon can claim the pass.
#[tokio::test]
async fn a_binlog_position_gone_with_redis_data_is_a_lost_one() {
    let mariadb = servers::mariadb_with_binlog();
    let redis = servers::redis();
    let env = estate_on(&servers::root_url(&mariadb), Some(&redis), SHOWTIMES, |s| {
        short_lease(s);
        s.changes.mysql_binlog = true;
    })
    .await;
    let standby_for = |ms: u64| pass_lease_set(&env, "0f0f replica-z", Some(ms));
    let _: () = env.redis(&standby_for(60_000)).await;
    let daemon = InProcessDaemon::start(env.ctx.clone()).await;
    wait_until(
        "standing by, the marker set",
        Duration::from_secs(60),
        || async {
            let marker: Option<String> = env
                .redis(redis::cmd("GET").arg(env.ctx.redis.keys.data_marker()))
                .await;
            readyz(&daemon).await.1["pass"]["state"] == "standby" && marker.is_some()
        },
    )
    .await;
    let lost = gaps(&daemon, "binlog_position_lost").await;
    let mut flush = redis::pipe();
    flush
        .atomic()
        .cmd("FLUSHALL")
        .add_command(standby_for(3_000));
    let client = redis::Client::open(format!("redis://127.0.0.1:{}", redis.port())).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let () = flush.query_async(&mut c).await.unwrap();
    gap_counted(&daemon, "binlog_position_lost", lost).await;
    ready(&daemon).await;
    daemon.stop().await;
}
