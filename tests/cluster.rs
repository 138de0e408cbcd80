//! Redis Cluster mode against a real local cluster of three primaries,
//! started by the test on free ports: pipelines grouped by slot, scripts
//! keyed by hash tag, every repair kind exercised.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::TestEnv;
use seatflow_reconciler::config::SecretUrl;
use seatflow_reconciler::inspect;
use seatflow_reconciler::model::Kind;

/// A port whose cluster bus port (+10000) is free too.
fn cluster_port() -> u16 {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p < 55_000 && std::net::TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return p;
        }
    }
}

struct Cluster {
    nodes: Vec<Child>,
    ports: Vec<u16>,
    dir: std::path::PathBuf,
}

impl Cluster {
    fn start(tag: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("sf-cluster-{tag}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = Cluster {
            nodes: Vec::new(),
            ports: Vec::new(),
            dir,
        };
        for _ in 0..3 {
            let port = cluster_port();
            let child = Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--cluster-enabled",
                    "yes",
                ])
                .args([
                    "--cluster-config-file",
                    &format!("nodes-{port}.conf"),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .arg("--dir")
                .arg(&c.dir)
                .stdout(Stdio::null())
                .spawn()
                .expect("redis-server");
            c.nodes.push(child);
            c.ports.push(port);
        }
        for &p in &c.ports {
            wait(
                || std::net::TcpStream::connect(("127.0.0.1", p)).is_ok(),
                "node up",
            );
        }
        let addrs: Vec<String> = c.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        for &p in &c.ports {
            wait(
                || {
                    let info = Command::new("redis-cli")
                        .args(["-p", &p.to_string(), "cluster", "info"])
                        .output()
                        .unwrap();
                    String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok")
                },
                "cluster_state:ok",
            );
        }
        c
    }

    fn urls(&self) -> Vec<SecretUrl> {
        self.ports
            .iter()
            .map(|p| SecretUrl::new(format!("redis://127.0.0.1:{p}")))
            .collect()
    }

    fn keys_per_node(&self) -> Vec<u64> {
        self.ports
            .iter()
            .map(|p| {
                let out = Command::new("redis-cli")
                    .args(["-p", &p.to_string(), "dbsize"])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse()
                    .unwrap_or(0)
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            let _ = n.kill();
            let _ = n.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn wait(mut ok: impl FnMut() -> bool, what: &str) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test]
async fn the_five_jobs_repair_a_three_primary_cluster() {
    let cluster = Cluster::start(&uuid::Uuid::new_v4().simple().to_string()[..12]);
    let urls = cluster.urls();
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
    // the run's reads and writes of the four seat jobs' cursors (8). Sent one
    // slot after another, the same run waited 23 times, once more per showtime.
    assert!(
        second.redis_round_trips <= 3 + 8,
        "{} round trips",
        second.redis_round_trips
    );
    assert!(second.jobs.iter().all(|j| j.drift == 0));
}
