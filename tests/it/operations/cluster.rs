//! Redis Cluster mode against a real local cluster of three primaries,
//! started by the test on free ports: pipelines grouped by slot, scripts
//! keyed by hash tag, every repair kind exercised; keyspace notifications
//! heard from every primary, probed on each, and followed across a
//! resharding.

use std::time::Duration;

use seatflow_reconciler::config::SecretUrl;
use seatflow_reconciler::model::Kind;
use seatflow_reconciler::ops::inspect;
use seatflow_reconciler::store::redis::key_slot;
use seatflow_test_support::TestEnv;
use seatflow_test_support::daemon::{InProcessDaemon, metric_reaches, metrics, pass_runs, sample};
use seatflow_test_support::estate::{
    daemon_on_estate, events_gauge_says_off, events_on, seat_becomes,
};
use seatflow_test_support::servers::RedisCluster;

fn urls(cluster: &RedisCluster) -> Vec<SecretUrl> {
    cluster
        .ports()
        .map(|p| SecretUrl::new(format!("redis://127.0.0.1:{p}")))
        .collect()
}

#[tokio::test]
async fn the_five_jobs_repair_a_three_primary_cluster() {
    let cluster = RedisCluster::start().await;
    let urls = urls(&cluster);
    let env = TestEnv::with(move |s| {
        s.redis.cluster_urls = urls;
        s.reconcile.scan_chunk = 4;
    })
    .await;
    let seats = env.fx.hall(1, 2, 4).await.unwrap();
    let mut expired = Vec::new();
    for id in 1..=12 {
        env.fx.showtime(id, 1, 10 * id, "ON_SALE").await.unwrap();
        env.fx.order(id, "PAID", &["A-1"], -600).await.unwrap();
        env.fx.order(id, "REFUNDED", &["A-3"], -600).await.unwrap();
        expired.push(env.fx.order(id, "PENDING", &["B-1"], -600).await.unwrap());
        if id % 4 == 0 {
            continue; // its hash is "lost"
        }
        // paid seat shown held, orphan lock, sold orphan, an expired hold.
        env.fx
            .warm_all(
                id,
                &seats,
                &[("A-1", "1"), ("A-2", "1"), ("A-3", "2"), ("B-1", "1")],
            )
            .await
            .unwrap();
    }
    let per_node = cluster.keys_per_node();
    assert!(
        per_node.iter().filter(|n| **n > 0).count() >= 2,
        "keys spread over the nodes: {per_node:?}"
    );

    let first = env.once(&Kind::ALL).await;
    assert_eq!(first.exit_code(), 0, "{}", first.to_text());
    let fixed: Vec<(Kind, u64)> = first.jobs.iter().map(|j| (j.kind, j.fixed)).collect();
    assert_eq!(
        fixed,
        vec![
            (Kind::ExpiredOrders, 12),
            (Kind::PaidSeats, 9),
            (Kind::MissingHashes, 3),
            (Kind::OrphanLocks, 9),
            (Kind::SoldOrphans, 9),
        ]
    );
    for order in expired {
        assert_eq!(env.fx.order_status(order).await.unwrap(), "CANCELLED");
    }
    assert_eq!(inspect::differences(&env.ctx).await.unwrap(), vec![]);
    let second = env.once(&Kind::ALL).await;
    assert_eq!(second.total_fixed(), 0, "{}", second.to_text());
    // O(1) round trips per batch in a cluster too: each chunk's per-slot
    // pipelines go out at once (one wait per chunk: 3 chunks of 4 here), plus
    // the run's reads and writes of the four seat jobs' cursors (8), plus one
    // look at the audit backlog. Sent one slot after another, the same run
    // waited 23 times, once more per showtime.
    assert!(
        second.redis_round_trips <= 3 + 8 + 1,
        "{} round trips",
        second.redis_round_trips
    );
    assert!(second.jobs.iter().all(|j| j.drift == 0));
}

/// Rule 13 in a cluster: a lock key of another type is replaced and an audit
/// backlog of another type is moved aside by one script each, so the aside
/// name must hash to the backlog's slot (RENAME refuses to cross slots).
#[tokio::test]
async fn own_keys_of_the_wrong_type_are_handled_in_their_slot() {
    let cluster = RedisCluster::start().await;
    let urls = urls(&cluster);
    let env = TestEnv::with(move |s| s.redis.cluster_urls = urls).await;
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(1, 1, 10, "ON_SALE").await.unwrap();
    env.fx.warm_all(1, &seats, &[("A-1", "1")]).await.unwrap();
    let keys = &env.ctx.redis.keys;
    let _: () = env
        .redis(
            redis::cmd("HSET")
                .arg(keys.showtime_lease(1))
                .arg("a")
                .arg("b"),
        )
        .await;
    let backlog = keys.audit_backlog();
    let _: () = env.redis(redis::cmd("SADD").arg(&backlog).arg("m")).await;

    let report = env.once(&[Kind::OrphanLocks]).await;
    let job = &report.jobs[0];
    assert_eq!(
        (job.fixed, job.errors, job.invalid_data),
        (1, 0, 2),
        "{job:?}"
    );
    let backlog_type: String = env.redis(redis::cmd("TYPE").arg(&backlog)).await;
    assert_eq!(backlog_type, "none", "moved aside");

    // And a push meets one too.
    let _: () = env.redis(redis::cmd("SADD").arg(&backlog).arg("m")).await;
    let aside = env
        .ctx
        .redis
        .push_audit_backlog(&["row".into()])
        .await
        .unwrap()
        .expect("moved aside");
    let members: Vec<String> = env.redis(redis::cmd("SMEMBERS").arg(&aside)).await;
    assert_eq!(members, ["m"]);
    let rows: Vec<String> = env
        .redis(redis::cmd("LRANGE").arg(&backlog).arg(0).arg(-1))
        .await;
    assert_eq!(rows, ["row"]);
}

/// The change tests' estate here: showtimes 1..=`SHOWTIMES`, their seat
/// hashes spread over the primaries by their hash tags.
const SHOWTIMES: i64 = 12;

fn slot_of(env: &TestEnv, showtime: i64) -> u16 {
    key_slot(env.ctx.redis.keys.seat(showtime).as_bytes())
}

/// A daemon on the change tests' estate of `SHOWTIMES` showtimes in
/// `cluster`, its pass a year away, after its one pass (started by hand).
async fn daemon_on_cluster(cluster: &RedisCluster) -> (TestEnv, InProcessDaemon) {
    let urls = urls(cluster);
    daemon_on_estate(None, SHOWTIMES, move |s| {
        s.redis.cluster_urls = urls;
        s.reconcile.orphan_grace = Duration::ZERO;
    })
    .await
}

const EVENT_FIXES: &str =
    r#"seatflow_reconcile_change_fixes_total{kind="orphan_locks",source="event"}"#;

/// Keyspace events are published only by the node owning the key: with
/// every node subscribed, an orphan lock on a showtime of each of the three
/// primaries is released by its event's check, with no pass.
#[tokio::test]
async fn events_from_every_primary_are_checked_without_a_pass() {
    let cluster = RedisCluster::with_keyspace_events().await;
    let (env, daemon) = daemon_on_cluster(&cluster).await;
    events_on(&daemon).await;
    let first = cluster.ports().next().unwrap();
    // One showtime per primary.
    let picked: Vec<i64> = cluster
        .ports()
        .map(|port| {
            (1..=SHOWTIMES)
                .find(|s| cluster.owner_of_slot(first, slot_of(&env, *s)) == port)
                .unwrap_or_else(|| panic!("no showtime's hash on {port}"))
        })
        .collect();
    let passes_before = pass_runs(&metrics(&daemon).await);

    for showtime in &picked {
        env.fx.warm(*showtime, &[("A-3", "1")]).await.unwrap();
    }
    for showtime in &picked {
        seat_becomes(&env, *showtime, "A-3", "0", "the orphan lock is released").await;
    }
    let m = metric_reaches(&daemon, EVENT_FIXES, 3.0).await;
    assert_eq!(pass_runs(&m), passes_before, "no pass ran");
    assert_eq!(
        sample(&m, r#"seatflow_reconcile_redis_events{state="on"}"#),
        1.0
    );
    let status = daemon
        .status_when("events on", |s| s["changes"]["redis_events"] == "on")
        .await;
    assert_eq!(status["changes"]["redis_events"], "on");
    daemon.stop().await;
}

/// Each primary has its own `notify-keyspace-events`: one node without
/// them leaves its keys' changes unheard, so the probe (one key per
/// primary) finds events off, not on.
#[tokio::test]
async fn one_primary_without_keyspace_events_makes_them_off() {
    let cluster = RedisCluster::with_keyspace_events().await;
    // The last node in address order: not the one a single probe would hit
    // first.
    let silent = cluster.ports().max().unwrap();
    let out = cluster.cli(silent, &["config", "set", "notify-keyspace-events", ""]);
    assert_eq!(out.trim(), "OK");
    let (_env, daemon) = daemon_on_cluster(&cluster).await;
    let status = daemon
        .status_when("the probe finds events off", |s| {
            let state = &s["changes"]["redis_events"];
            assert_ne!(state, "on", "one primary sends no events");
            state == "off"
        })
        .await;
    assert_eq!(status["changes"]["redis_events"], "off");
    events_gauge_says_off(&daemon).await;
    daemon.stop().await;
}

/// A slot moved to another primary (a resharding) is a topology change: a
/// gap, counted, a pass after it, and the subscription made again; events
/// on the moved showtime still get it checked afterwards, by the primary
/// that owns it now.
#[tokio::test]
async fn a_resharding_is_a_gap_and_events_follow_the_moved_slot() {
    let cluster = RedisCluster::with_keyspace_events().await;
    let (env, daemon) = daemon_on_cluster(&cluster).await;
    events_on(&daemon).await;
    let first = cluster.ports().next().unwrap();
    let showtime = 1;
    let slot = slot_of(&env, showtime);
    let from = cluster.owner_of_slot(first, slot);
    let to = cluster.ports().find(|p| *p != from).unwrap();
    let passes_before = pass_runs(&metrics(&daemon).await);

    cluster.move_slot(slot, to).await;
    assert_eq!(cluster.owner_of_slot(to, slot), to);
    seatflow_test_support::servers::wait_until(
        "the topology change is a gap, and a pass runs after it",
        Duration::from_secs(60),
        || async {
            let m = metrics(&daemon).await;
            sample(
                &m,
                r#"seatflow_reconcile_change_gaps_total{reason="topology_changed"}"#,
            ) >= 1.0
                && pass_runs(&m) > passes_before
        },
    )
    .await;
    events_on(&daemon).await;
    let m = metrics(&daemon).await;
    let (passes, fixes) = (pass_runs(&m), sample(&m, EVENT_FIXES));
    assert_eq!(
        sample(
            &m,
            r#"seatflow_reconcile_change_gaps_total{reason="connection_lost"}"#
        ),
        0.0,
        "no subscription was lost"
    );

    env.fx.warm(showtime, &[("A-3", "1")]).await.unwrap();
    seat_becomes(&env, showtime, "A-3", "0", "the orphan lock is released").await;
    let m = metric_reaches(&daemon, EVENT_FIXES, fixes + 1.0).await;
    assert_eq!(pass_runs(&m), passes, "no pass ran");
    daemon.stop().await;
}

/// One primary's subscriber connection lost is the whole subscription lost:
/// a gap, counted, never a quiet watch of the other primaries; once the
/// node is back the subscription is made again on all three and events are
/// on again.
#[tokio::test]
async fn a_primary_lost_is_a_lost_subscription() {
    let mut cluster = RedisCluster::with_keyspace_events().await;
    let (_env, daemon) = daemon_on_cluster(&cluster).await;
    events_on(&daemon).await;

    // Its nodes.conf (in its temp dir) brings it back with its slots.
    cluster.nodes[1].stop();
    cluster.nodes[1].start().unwrap();
    seatflow_test_support::servers::wait_until(
        "the lost node is a lost subscription",
        Duration::from_secs(60),
        || async {
            sample(
                &metrics(&daemon).await,
                r#"seatflow_reconcile_change_gaps_total{reason="connection_lost"}"#,
            ) >= 1.0
        },
    )
    .await;
    events_on(&daemon).await;
    daemon.stop().await;
}
