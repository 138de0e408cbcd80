//! Redis Cluster mode against a real local cluster of three primaries,
//! started by the test on free ports: pipelines grouped by slot, scripts
//! keyed by hash tag, every repair kind exercised.

use seatflow_reconciler::config::SecretUrl;
use seatflow_reconciler::inspect;
use seatflow_reconciler::model::Kind;
use seatflow_test_support::TestEnv;
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
        .redis(redis::cmd("HSET").arg(keys.lease(1)).arg("a").arg("b"))
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
