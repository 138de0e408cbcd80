//! The servers tests start for themselves, all with the product's
//! [`PrivateServer`]: on 127.0.0.1 and a free port, every file they write
//! (data, persistence, log) inside their own temp dir, killed and removed
//! when dropped. And the one bounded wait every test uses.

use std::fmt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::TestEnv;

pub use seatflow_reconciler::ops::demo::servers::{
    PrivateServer, Ready, TempDir, free_port, require_binary,
};

/// An installed program, or a panic that says which Debian package has it.
pub fn tool(name: &str, package: &str) -> PathBuf {
    require_binary(name, package).unwrap_or_else(|e| panic!("{e} (.ci/run installs it)"))
}

/// Polls `check` every 100 ms until it holds; panics after `limit`, with
/// `what` formatted then (see [`with_log`]).
pub async fn wait_until<F, Fut>(what: impl fmt::Display, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `what`, and the tail of `server`'s log as it is when a wait times out.
pub fn with_log<'a>(what: &'a str, server: &'a PrivateServer) -> impl fmt::Display + 'a {
    struct WithLog<'a>(&'a str, &'a PrivateServer);
    impl fmt::Display for WithLog<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "{}; {} log:\n{}",
                self.0,
                self.1.name(),
                self.1.log_tail()
            )
        }
    }
    WithLog(what, server)
}

/// A `redis-server` on `port` (free when `None`) with its `--dir` in its temp
/// dir, plus `extra` arguments; not started.
fn redis_server(name: &str, port: Option<u16>, extra: &[&str]) -> PrivateServer {
    let mut s = PrivateServer::new(name, tool("redis-server", "redis-server")).unwrap();
    if let Some(port) = port {
        s = s.with_port(port);
    }
    let (port, dir) = (s.port().to_string(), s.dir().to_owned());
    s.args(["--port", &port, "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .ready(Ready::RedisPing, Duration::from_secs(60));
    s
}

/// A started Redis of the test's own, without persistence; `stop` and
/// `start` it to take it away and bring an empty one back on its port.
pub fn redis() -> PrivateServer {
    let mut s = redis_server("redis", None, &["--save", "", "--appendonly", "no"]);
    s.start().unwrap();
    s
}

/// A started Redis that sends the keyspace notifications change-driven
/// checks use (`notify-keyspace-events Khgxe`, as docs/change-detection.md asks).
pub fn redis_with_keyspace_events() -> PrivateServer {
    let mut s = redis_server(
        "redis-events",
        None,
        &[
            "--save",
            "",
            "--appendonly",
            "no",
            "--notify-keyspace-events",
            "Khgxe",
        ],
    );
    s.start().unwrap();
    s
}

/// A started Redis whose default user needs `password` (`requirepass`).
pub fn redis_with_password(password: &str) -> PrivateServer {
    let mut s = redis_server(
        "redis-auth",
        None,
        &[
            "--save",
            "",
            "--appendonly",
            "no",
            "--requirepass",
            password,
        ],
    );
    // PING answers -NOAUTH until one logs in: ready when it listens.
    s.ready(Ready::Tcp, Duration::from_secs(60));
    s.start().unwrap();
    s
}

/// A started Redis whose every write is in its append-only file (in its temp
/// dir), so `stop` and `start` restart it with its data.
pub fn persistent_redis() -> PrivateServer {
    let mut s = redis_server(
        "redis-aof",
        None,
        &[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ],
    );
    s.start().unwrap();
    s
}

/// A Redis Cluster of three primaries, no replicas, ready (`cluster_state:ok`).
pub struct RedisCluster {
    pub nodes: Vec<PrivateServer>,
}

impl RedisCluster {
    pub async fn start() -> RedisCluster {
        RedisCluster::start_with(&[]).await
    }

    /// A cluster whose every node sends the keyspace notifications
    /// change-driven checks use (`notify-keyspace-events Khgxe`, on each
    /// node, as docs/change-detection.md asks).
    pub async fn with_keyspace_events() -> RedisCluster {
        RedisCluster::start_with(&["--notify-keyspace-events", "Khgxe"]).await
    }

    /// A cluster whose nodes are started with `extra` arguments too.
    pub async fn start_with(extra: &[&str]) -> RedisCluster {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            let port = cluster_port();
            let mut node = redis_server(
                "redis-cluster-node",
                Some(port),
                &[
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                    ],
                    extra,
                ]
                .concat(),
            );
            let nodes_conf = node.dir().join("nodes.conf");
            node.arg("--cluster-config-file").arg(nodes_conf);
            node.start().unwrap();
            nodes.push(node);
        }
        let cluster = RedisCluster { nodes };
        let addrs: Vec<String> = cluster.ports().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = Command::new(tool("redis-cli", "redis-tools"))
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
        for p in cluster.ports() {
            wait_until("cluster_state:ok", Duration::from_secs(60), || async move {
                cluster_cli(p, &["cluster", "info"]).contains("cluster_state:ok")
            })
            .await;
        }
        cluster
    }

    pub fn ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.nodes.iter().map(PrivateServer::port)
    }

    /// `DBSIZE` of each node.
    pub fn keys_per_node(&self) -> Vec<u64> {
        self.ports()
            .map(|p| cluster_cli(p, &["dbsize"]).trim().parse().unwrap_or(0))
            .collect()
    }

    /// Runs `redis-cli` on the node at `port` with `args`; its output.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        cluster_cli(port, args)
    }

    /// The port of the primary owning `slot`, as the node at `ask` sees it
    /// (`CLUSTER NODES`: `<id> <ip:port@bus> <flags> ... <ranges>`).
    pub fn owner_of_slot(&self, ask: u16, slot: u16) -> u16 {
        for line in cluster_cli(ask, &["cluster", "nodes"]).lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") {
                continue;
            }
            let owns = fields[8..].iter().any(|r| {
                let (lo, hi) = r.split_once('-').unwrap_or((r, r));
                match (lo.parse::<u16>(), hi.parse::<u16>()) {
                    (Ok(lo), Ok(hi)) => (lo..=hi).contains(&slot),
                    _ => false, // `[slot->-id]`: a migration's marker
                }
            });
            if owns {
                let port = fields[1].split(['@', ',']).next().unwrap();
                return port.rsplit_once(':').unwrap().1.parse().unwrap();
            }
        }
        panic!("no primary owns slot {slot}")
    }

    /// Moves `slot` and its keys to the primary at `to`, as
    /// `redis-cli --cluster reshard` does for each slot: importing on the
    /// target, migrating on the source, `MIGRATE` of every key, then the new
    /// owner told to every node. Waits until every node sees it.
    pub async fn move_slot(&self, slot: u16, to: u16) {
        let from = self.owner_of_slot(to, slot);
        assert_ne!(from, to, "slot {slot} is already on {to}");
        let id = |p: u16| cluster_cli(p, &["cluster", "myid"]).trim().to_string();
        let (from_id, to_id) = (id(from), id(to));
        let slot_s = slot.to_string();
        let ok = |out: String| assert!(out.trim() == "OK", "{out}");
        ok(cluster_cli(
            to,
            &["cluster", "setslot", &slot_s, "importing", &from_id],
        ));
        ok(cluster_cli(
            from,
            &["cluster", "setslot", &slot_s, "migrating", &to_id],
        ));
        loop {
            let keys = cluster_cli(from, &["cluster", "getkeysinslot", &slot_s, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let to_s = to.to_string();
            let mut args = vec!["migrate", "127.0.0.1", &to_s, "", "0", "5000", "keys"];
            args.extend(keys);
            ok(cluster_cli(from, &args));
        }
        for p in [to, from] {
            ok(cluster_cli(
                p,
                &["cluster", "setslot", &slot_s, "node", &to_id],
            ));
        }
        for p in self.ports().filter(|p| ![to, from].contains(p)) {
            ok(cluster_cli(
                p,
                &["cluster", "setslot", &slot_s, "node", &to_id],
            ));
        }
        for p in self.ports() {
            wait_until(
                format!("node {p} sees slot {slot} on {to}"),
                Duration::from_secs(60),
                || async move { self.owner_of_slot(p, slot) == to },
            )
            .await;
        }
    }
}

fn cluster_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new(tool("redis-cli", "redis-tools"))
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A free port whose cluster bus port (+10000) is free too.
fn cluster_port() -> u16 {
    loop {
        let p = free_port();
        if p < 55_000 && std::net::TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return p;
        }
    }
}

/// A started Prometheus with `config` as its `prometheus.yml` and its TSDB
/// in its temp dir; ready when `/-/ready` answers.
pub fn prometheus(config: &str) -> PrivateServer {
    let mut s = PrivateServer::new("prometheus", tool("prometheus", "prometheus")).unwrap();
    let (port, dir) = (s.port(), s.dir().to_owned());
    std::fs::write(dir.join("prometheus.yml"), config).unwrap();
    s.arg(format!(
        "--config.file={}",
        dir.join("prometheus.yml").display()
    ))
    .arg(format!(
        "--storage.tsdb.path={}",
        dir.join("data").display()
    ))
    .arg(format!("--web.listen-address=127.0.0.1:{port}"))
    .arg("--log.level=warn")
    .ready(Ready::Http("/-/ready".into()), Duration::from_secs(60));
    s.start().unwrap();
    s
}

/// A started Pushgateway that persists into its temp dir only: Debian's
/// default (`/var/lib/prometheus/pushgateway.data`) would load every earlier
/// run's groups.
pub fn pushgateway() -> PrivateServer {
    let mut s = PrivateServer::new(
        "pushgateway",
        tool("prometheus-pushgateway", "prometheus-pushgateway"),
    )
    .unwrap();
    let (port, dir) = (s.port(), s.dir().to_owned());
    s.arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg(format!(
            "--persistence.file={}",
            dir.join("pushgateway.data").display()
        ))
        .arg("--log.level=warn")
        .ready(Ready::Http("/-/ready".into()), Duration::from_secs(60));
    s.start().unwrap();
    s
}

/// A started `mariadbd` of the test's own with the row binlog on, as the
/// binlog source needs it (`--log-bin`, `binlog_format = ROW`,
/// `binlog_row_image = FULL`, server id 1), on 127.0.0.1 and a free port;
/// `root` without a password. No name resolution: a user made for
/// `'name'@'127.0.0.1'` is who a connection from here logs in as.
pub fn mariadb_with_binlog() -> PrivateServer {
    let mut s = private_mariadb("mariadb-binlog");
    let binlog = s.dir().join("data").join("binlog");
    s.arg(format!("--log-bin={}", binlog.display())).args([
        "--skip-name-resolve",
        "--server-id=1",
        "--binlog-format=ROW",
        "--binlog-row-image=FULL",
    ]);
    s.start().unwrap();
    s
}

/// A private primary ([`mariadb_with_binlog`]) and a started replica of it
/// (server id 2, `read_only`), replicating everything the primary writes by
/// GTID from its first event; both `root` without a password. The
/// replica's threads run when this returns.
pub async fn mariadb_with_replica() -> (PrivateServer, PrivateServer) {
    let primary = mariadb_with_binlog();
    let mut replica = private_mariadb("mariadb-replica");
    replica.args(["--skip-name-resolve", "--server-id=2", "--read-only"]);
    replica.start().unwrap();
    replicate(&replica, "STOP SLAVE").await;
    replicate(
        &replica,
        &format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
             MASTER_USER = 'root', MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos, \
             MASTER_CONNECT_RETRY = 1",
            primary.port()
        ),
    )
    .await;
    replicate(&replica, "START SLAVE").await;
    wait_until(
        with_log("the replica's threads run", &replica),
        Duration::from_secs(60),
        || async { replica_threads(&replica).await == (true, true) },
    )
    .await;
    (primary, replica)
}

/// `mysql://root@127.0.0.1:<port>` of a private server.
pub fn root_url(server: &PrivateServer) -> String {
    format!("mysql://root@127.0.0.1:{}", server.port())
}

/// Runs a replication statement (`STOP SLAVE`, `CHANGE MASTER TO …`) on
/// the private `replica` as root, as text (not every one is preparable).
pub async fn replicate(replica: &PrivateServer, statement: &str) {
    use sqlx::Connection as _;
    let mut conn = sqlx::MySqlConnection::connect(&root_url(replica))
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_string()))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
    conn.close().await.ok();
}

/// Makes the replica apply every change `seconds` after the primary made
/// it (`MASTER_DELAY`); its threads run again when this returns.
pub async fn delay_replica(replica: &PrivateServer, seconds: u32) {
    replicate(
        replica,
        &format!("STOP SLAVE; CHANGE MASTER TO MASTER_DELAY = {seconds}; START SLAVE"),
    )
    .await;
}

/// Whether the replica's I/O and SQL threads run.
async fn replica_threads(replica: &PrivateServer) -> (bool, bool) {
    use sqlx::Connection as _;
    use sqlx::Row as _;
    let Ok(mut conn) = sqlx::MySqlConnection::connect(&root_url(replica)).await else {
        return (false, false);
    };
    let row = sqlx::raw_sql("SHOW SLAVE STATUS")
        .fetch_optional(&mut conn)
        .await
        .ok()
        .flatten();
    conn.close().await.ok();
    let yes = |name: &str| {
        row.as_ref().is_some_and(|r| {
            r.try_get::<String, _>(name).is_ok_and(|v| v == "Yes")
                || r.try_get::<Vec<u8>, _>(name).is_ok_and(|v| v == b"Yes")
        })
    };
    (yes("Slave_IO_Running"), yes("Slave_SQL_Running"))
}

/// Waits until the replica has applied everything the primary has written
/// so far (its `gtid_slave_pos` reaches the primary's `gtid_binlog_pos`).
pub async fn replica_caught_up(primary: &PrivateServer, replica: &PrivateServer) {
    let ask = |server: &PrivateServer, variable: &'static str| {
        let url = root_url(server);
        async move {
            use sqlx::Connection as _;
            let mut conn = sqlx::MySqlConnection::connect(&url).await.ok()?;
            let pos: Option<String> =
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT @@{variable}")))
                    .fetch_one(&mut conn)
                    .await
                    .ok();
            conn.close().await.ok();
            pos
        }
    };
    let Some(target) = ask(primary, "gtid_binlog_pos").await else {
        panic!("the primary's gtid_binlog_pos");
    };
    wait_until(
        with_log(&format!("the replica applied {target}"), replica),
        Duration::from_secs(60),
        || async { ask(replica, "gtid_slave_pos").await.as_deref() == Some(target.as_str()) },
    )
    .await;
}

/// A `mariadbd` of the test's own, not started: its data directory
/// bootstrapped (once more on a fresh one when the bootstrap fails, as it
/// does now and then on a loaded machine, as the demo's), and the arguments
/// every one takes (its own files, 127.0.0.1 and a free port, root allowed);
/// the caller adds its own and starts it. `root` has no password.
pub fn private_mariadb(name: &str) -> PrivateServer {
    configured_mariadb(PrivateServer::new(name, tool("mariadbd", "mariadb-server")).unwrap())
}

/// A started private MariaDB whose files live in memory (`/dev/shm` where
/// there is one) and are never synced: for a test that changes a schema
/// hundreds of times (an `ALTER TABLE` of a small table costs tens of
/// milliseconds on disk, a few in memory). Never for a test of what
/// survives a crash.
pub fn mariadb_in_memory() -> PrivateServer {
    let shm = std::path::Path::new("/dev/shm");
    let program = tool("mariadbd", "mariadb-server");
    let id = uuid::Uuid::new_v4().simple().to_string();
    let server = match shm.is_dir() {
        true => PrivateServer::new_in(shm, &format!("seatflow-mariadb-{}", &id[..12]), program),
        false => PrivateServer::new("mariadb-in-memory", program),
    };
    let mut s = configured_mariadb(server.unwrap());
    s.args([
        "--skip-name-resolve",
        "--innodb-flush-log-at-trx-commit=0",
        "--innodb-doublewrite=0",
        "--innodb-flush-method=nosync",
        "--innodb-buffer-pool-size=32M",
        "--innodb-log-file-size=16M",
    ]);
    s.start().unwrap();
    s
}

/// `s` set up as every private MariaDB is (see [`private_mariadb`]).
fn configured_mariadb(mut s: PrivateServer) -> PrivateServer {
    let dir = s.dir().to_owned();
    // mariadbd refuses to run as root unless told to.
    let as_root = is_root().then(|| "--user=root".to_string());
    let tmp = private_tmpdir(&dir);
    let install = || {
        let mut install = Command::new(tool("mariadb-install-db", "mariadb-server"));
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .arg(format!("--tmpdir={}", tmp.display()))
            .args(as_root.clone());
        install
    };
    if s.run_step("mariadb-install-db", install()).is_err() {
        std::fs::remove_dir_all(dir.join("data")).ok();
        s.run_step("mariadb-install-db", install()).unwrap();
    }
    let port = s.port();
    // `--no-defaults` must come first.
    s.arg("--no-defaults")
        .arg(format!("--datadir={}", dir.join("data").display()))
        .arg(format!("--socket={}", dir.join("mariadbd.sock").display()))
        .arg(format!("--pid-file={}", dir.join("mariadbd.pid").display()))
        .arg(format!("--tmpdir={}", tmp.display()))
        .arg(format!("--port={port}"))
        .arg("--bind-address=127.0.0.1")
        .args(as_root)
        .ready(Ready::Tcp, Duration::from_secs(60));
    s
}

/// A private server's own temp dir. Never the shared `/tmp`: a starting
/// `mariadbd` (and `mariadb-install-db`'s bootstrap) deletes every `#sql*`
/// file in its tmpdir, the internal temporary tables another server has
/// open there, which then fails ("Error on delete of '/tmp/#sql-temptable-…'")
/// or crashes.
fn private_tmpdir(dir: &std::path::Path) -> std::path::PathBuf {
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    tmp
}

/// Whether this process runs as root (the owner of `/proc/self`).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The server's replication connections (`Binlog Dump` threads).
pub async fn binlog_dumps(env: &TestEnv) -> Vec<i64> {
    use sqlx::Row as _;
    sqlx::query("SHOW PROCESSLIST")
        .fetch_all(env.ctx.mysql.pool())
        .await
        .unwrap()
        .iter()
        .filter(|r| r.try_get::<String, _>("Command").unwrap_or_default() == "Binlog Dump")
        .map(|r| r.try_get::<i64, _>("Id").unwrap())
        .collect()
}

pub async fn binlog_dumps_become(env: &TestEnv, n: usize) {
    wait_until(
        "the daemon reads the binlog",
        Duration::from_secs(30),
        || async { binlog_dumps(env).await.len() == n },
    )
    .await;
}

/// Purges the binlog files before `newest`, until `gone` is no more.
/// MariaDB keeps a file until a later one records its binlog checkpoint
/// (crash recovery), so the purge may take a few tries.
pub async fn purge_to(pool: &sqlx::MySqlPool, gone: &str, newest: &str) {
    wait_until(
        format!("{gone} purged"),
        Duration::from_secs(60),
        || async {
            use sqlx::Row as _;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "PURGE BINARY LOGS TO '{newest}'"
            )))
            .execute(pool)
            .await
            .unwrap();
            let logs = sqlx::query("SHOW BINARY LOGS")
                .fetch_all(pool)
                .await
                .unwrap();
            !logs
                .iter()
                .any(|row| row.try_get::<String, _>(0).unwrap() == gone)
        },
    )
    .await;
}
