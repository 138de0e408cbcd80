//! `seatflow-reconciler demo`: a self-contained tour. By default it starts
//! its own throwaway `redis-server` and `mariadbd` (private temp dir, free
//! ports on 127.0.0.1) and removes them afterwards, so it never touches a
//! server someone uses. With [`Servers::Configured`] it runs on `mysql.url` /
//! `redis.url` instead: it checks Redis first, and only ever drops the
//! database `seatflow_demo` if the demo created it (its marker row).

pub mod fixtures;
pub mod servers;
mod tour;

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::config::{SecretUrl, Settings};
use servers::{PrivateServer, Ready, TempDir};

pub const DEMO_DATABASE: &str = "seatflow_demo";
pub const DEMO_PREFIX: &str = "seatflow-demo:";
/// The table whose row says "the demo created this database".
pub const MARKER_TABLE: &str = "seatflow_demo_marker";
const MARKER: &str = "created by seatflow-reconciler demo";
const GRACE: Duration = Duration::from_secs(3);
const INSTALL_HINT: &str = "install them (Debian/Ubuntu: `apt-get install redis-server mariadb-server`; \
     they need not be running) or run the demo on the configured servers with \
     `demo --use-configured-servers`";

/// Where the demo runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Servers {
    /// Its own throwaway `redis-server` and `mariadbd`, removed afterwards.
    Private,
    /// The configured `mysql.url` and `redis.url`.
    Configured,
}

/// Runs the demo; `interrupted` resolving (Ctrl-C) stops it early. The
/// private servers are removed afterwards, unless `keep` and the tour
/// succeeded: then they keep running with the demo's data, and the demo
/// prints how to point the reconciler (and Prometheus) at them and how to
/// stop them.
pub async fn run(
    mut settings: Settings,
    servers: Servers,
    keep: bool,
    interrupted: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    crate::outln!("== seatflow-reconciler demo ==");
    let private = match servers {
        Servers::Private => {
            let private = tokio::task::spawn_blocking(PrivateServices::start).await??;
            crate::outln!("{}", private.describe(keep));
            settings.mysql.url = SecretUrl::new(private.mysql_url());
            settings.redis.url = SecretUrl::new(private.redis_url());
            settings.redis.cluster_urls.clear();
            Some(private)
        }
        Servers::Configured => {
            probe_redis(&settings).await?;
            None
        }
    };
    let configured = (settings.mysql.url.clone(), settings.redis.url.clone());
    let result = tokio::select! {
        r = prepare_and_tour(settings) => r,
        () = interrupted => Err(anyhow::anyhow!("interrupted")),
    };
    match private {
        Some(private) if keep && result.is_ok() => {
            let kept = tokio::task::spawn_blocking(move || private.keep()).await??;
            crate::outln!("{}", kept.describe());
        }
        Some(private) => {
            tokio::task::spawn_blocking(move || drop(private)).await?;
            crate::outln!("\nThe private servers are stopped and removed.");
        }
        None if result.is_ok() => {
            crate::outln!("Audit trail: SELECT * FROM {DEMO_DATABASE}.reconcile_fix;");
            if keep {
                let (mysql, redis) = configured;
                crate::outln!(
                    "\nThe demo's data stays on the configured servers: database \
                     `{DEMO_DATABASE}` on {mysql}, key prefix `{DEMO_PREFIX}` on {redis}. \
                     Point the reconciler at it with SEATFLOW__MYSQL__URL (that server, \
                     database `{DEMO_DATABASE}`) and SEATFLOW__REDIS__KEY_PREFIX={DEMO_PREFIX}."
                );
            }
        }
        None => {}
    }
    result
}

async fn prepare_and_tour(mut settings: Settings) -> anyhow::Result<()> {
    let server_url = settings.mysql.url.expose().to_string();
    crate::outln!(
        "MySQL database `{DEMO_DATABASE}` and Redis prefix `{DEMO_PREFIX}` on {}",
        settings.redis.url
    );
    claim_database(&server_url, DEMO_DATABASE)
        .await
        .with_context(|| format!("preparing the demo database on {}", settings.mysql.url))?;
    settings.mysql.url = SecretUrl::new(fixtures::with_database(&server_url, DEMO_DATABASE)?);
    settings.redis.key_prefix = DEMO_PREFIX.to_string();
    settings.reconcile.orphan_grace = GRACE;
    tour::run(settings).await
}

/// Redis must answer before anything touches MySQL.
async fn probe_redis(settings: &Settings) -> anyhow::Result<()> {
    let ping = async {
        crate::run::context::connect_redis(settings)
            .await?
            .ping()
            .await
    };
    match tokio::time::timeout(Duration::from_secs(10), ping).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => bail!(
            "Redis is not reachable at {} ({e}); nothing was changed",
            settings.redis.url
        ),
        Err(_) => bail!(
            "Redis at {} did not answer within 10 s; nothing was changed",
            settings.redis.url
        ),
    }
}

/// Makes `db` on the server of `server_url` an empty database holding the
/// demo's marker row. An existing `db` is dropped only if it holds that
/// marker; otherwise this refuses and changes nothing.
pub async fn claim_database(server_url: &str, db: &str) -> anyhow::Result<()> {
    let pool = fixtures::server_pool(server_url, db).await?;
    let result = async {
        let exists: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?",
        )
        .bind(db)
        .fetch_one(&pool)
        .await?;
        if exists > 0 {
            if !has_marker(&pool, db).await? {
                bail!(
                    "the database `{db}` exists but the demo did not create it (no row in \
                     `{db}`.`{MARKER_TABLE}`); nothing was dropped. Drop it yourself if it is \
                     a leftover, point mysql.url at another server, or run the demo on private \
                     servers (without --use-configured-servers)"
                );
            }
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE `{db}`")))
                .execute(&pool)
                .await?;
        }
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE DATABASE `{db}` CHARACTER SET utf8mb4; \
             CREATE TABLE `{db}`.`{MARKER_TABLE}` (note VARCHAR(64) NOT NULL, \
             created_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP)"
        )))
        .execute(&pool)
        .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO `{db}`.`{MARKER_TABLE}` (note) VALUES (?)"
        )))
        .bind(MARKER)
        .execute(&pool)
        .await?;
        Ok(())
    }
    .await;
    pool.close().await;
    result
}

/// Whether `db` holds the demo's marker row.
async fn has_marker(pool: &sqlx::MySqlPool, db: &str) -> anyhow::Result<bool> {
    let tables: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
    )
    .bind(db)
    .bind(MARKER_TABLE)
    .fetch_one(pool)
    .await?;
    if tables == 0 {
        return Ok(false);
    }
    let rows: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM `{db}`.`{MARKER_TABLE}` WHERE BINARY note = ?"
    )))
    .bind(MARKER)
    .fetch_one(pool)
    .await?;
    Ok(rows > 0)
}

/// The demo's own `redis-server` and `mariadbd`, under one temp dir.
struct PrivateServices {
    redis: PrivateServer,
    mariadb: PrivateServer,
    // Declared last: removed after both servers are gone.
    dir: TempDir,
}

impl PrivateServices {
    fn start() -> anyhow::Result<PrivateServices> {
        let bins = ["redis-server", "mariadbd", "mariadb-install-db"].map(servers::find_binary);
        let missing: Vec<&str> = ["redis-server", "mariadbd", "mariadb-install-db"]
            .into_iter()
            .zip(&bins)
            .filter(|(_, b)| b.is_none())
            .map(|(n, _)| n)
            .collect();
        let [Some(redis_bin), Some(mariadbd), Some(install_db)] = bins else {
            bail!(
                "the demo runs on its own private Redis and MariaDB, but {} {} not installed: \
                 {INSTALL_HINT}",
                missing.join(", "),
                if missing.len() == 1 { "is" } else { "are" }
            );
        };
        let dir = TempDir::new("demo")?;
        let redis = servers::start_redis(dir.path(), redis_bin)?;
        let mariadb = start_mariadb(dir.path(), mariadbd, install_db)?;
        Ok(PrivateServices {
            redis,
            mariadb,
            dir,
        })
    }

    fn redis_url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.redis.port())
    }

    /// Leaves both servers running with their data, and writes `env.sh`
    /// (the environment that points the reconciler at them) and `stop.sh`
    /// (stops them and removes the directory) beside them.
    fn keep(self) -> anyhow::Result<KeptServers> {
        let redis_url = self.redis_url();
        let mysql_url = fixtures::with_database(&self.mysql_url(), DEMO_DATABASE)?;
        let (redis_port, mysql_port) = (self.redis.port(), self.mariadb.port());
        let PrivateServices {
            redis,
            mariadb,
            dir,
        } = self;
        let pids: Vec<u32> = [redis.keep(), mariadb.keep()]
            .into_iter()
            .flatten()
            .collect();
        let dir = dir.keep();
        let kept = KeptServers {
            dir,
            pids,
            redis_url,
            mysql_url,
            redis_port,
            mysql_port,
        };
        std::fs::write(kept.dir.join("env.sh"), kept.env_sh())?;
        std::fs::write(kept.dir.join("stop.sh"), kept.stop_sh())?;
        Ok(kept)
    }

    fn mysql_url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.mariadb.port())
    }

    fn describe(&self, keep: bool) -> String {
        let pid = |s: &PrivateServer| s.pid().map_or("-".into(), |p| p.to_string());
        format!(
            "Private servers, {}: redis-server on 127.0.0.1:{} (pid {}), \
             mariadbd on 127.0.0.1:{} (pid {}), in {}",
            if keep {
                "kept afterwards (--keep)"
            } else {
                "removed afterwards"
            },
            self.redis.port(),
            pid(&self.redis),
            self.mariadb.port(),
            pid(&self.mariadb),
            self.dir.path().display()
        )
    }
}

/// The private servers `demo --keep` left running.
struct KeptServers {
    dir: std::path::PathBuf,
    pids: Vec<u32>,
    redis_url: String,
    mysql_url: String,
    redis_port: u16,
    mysql_port: u16,
}

impl KeptServers {
    fn env_sh(&self) -> String {
        format!(
            "# Points seatflow-reconciler at the demo's servers: . {dir}/env.sh\n\
             export SEATFLOW__MYSQL__URL='{mysql}'\n\
             export SEATFLOW__REDIS__URL='{redis}'\n\
             export SEATFLOW__REDIS__KEY_PREFIX='{DEMO_PREFIX}'\n",
            dir = self.dir.display(),
            mysql = self.mysql_url,
            redis = self.redis_url,
        )
    }

    /// Waits for the servers to go (a zombie, whose parent the demo was,
    /// has an empty command line and counts as gone), then removes the data.
    fn stop_sh(&self) -> String {
        let pids: Vec<String> = self.pids.iter().map(u32::to_string).collect();
        format!(
            "#!/bin/sh\n\
             # Stops the demo's servers and removes their data: sh {dir}/stop.sh\n\
             for pid in {pids}; do kill \"$pid\" 2>/dev/null; done\n\
             for _ in $(seq 1 100); do\n\
             \x20 alive=0\n\
             \x20 for pid in {pids}; do grep -qa . /proc/$pid/cmdline 2>/dev/null && alive=1; done\n\
             \x20 [ \"$alive\" = 0 ] && break\n\
             \x20 sleep 0.1\n\
             done\n\
             rm -rf '{dir}'\n\
             echo 'seatflow-reconciler demo: servers stopped, {dir} removed'\n",
            dir = self.dir.display(),
            pids = pids.join(" "),
        )
    }

    fn describe(&self) -> String {
        let dir = self.dir.display();
        format!(
            "\nThe private servers keep running with the demo's data (--keep):\n\
             \x20 redis-server on 127.0.0.1:{redis_port}, mariadbd on 127.0.0.1:{mysql_port}, in {dir}\n\
             Point the reconciler at them:\n\
             \x20 . {dir}/env.sh\n\
             \x20 seatflow-reconciler inspect --showtime 101\n\
             \x20 seatflow-reconciler once --dry-run\n\
             \x20 seatflow-reconciler run    # metrics on http://127.0.0.1:9464/metrics for a Prometheus\n\
             Make drift to watch it repaired: redis-cli -p {redis_port} HSET '{DEMO_PREFIX}seat:{{101}}' A-8 1\n\
             Stop them and remove their data:\n\
             \x20 sh {dir}/stop.sh",
            redis_port = self.redis_port,
            mysql_port = self.mysql_port,
        )
    }
}

fn start_mariadb(
    parent: &Path,
    mariadbd: std::path::PathBuf,
    install_db: std::path::PathBuf,
) -> anyhow::Result<PrivateServer> {
    let mut mariadb = PrivateServer::new_in(parent, "mariadb", mariadbd)?;
    let dir = mariadb.dir().to_owned();
    // mariadbd refuses to run as root unless told to; as anyone else the
    // option only warns, so it is given to root only.
    let as_root = is_root().then(|| "--user=root".to_string());
    let data = dir.join("data");
    // Its own tmpdir, never the shared /tmp: a starting mariadbd (and the
    // bootstrap) deletes every `#sql*` file in its tmpdir, the temporary
    // tables another server on the machine has open there.
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    let install = || {
        let mut install = std::process::Command::new(&install_db);
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .arg(format!("--tmpdir={}", tmp.display()))
            .args(as_root.clone());
        install
    };
    // On a loaded machine its bootstrap has failed now and then (2 of 7
    // full test runs, never alone): once more on a fresh data directory
    // before giving up, saying why.
    if let Err(first) = mariadb.run_step("mariadb-install-db", install()) {
        eprintln!("{first:#}\nmariadb-install-db failed; trying once more");
        std::fs::remove_dir_all(&data).ok();
        mariadb.run_step("mariadb-install-db", install())?;
    }
    let port = mariadb.port();
    mariadb
        .arg("--no-defaults")
        .arg(format!("--datadir={}", dir.join("data").display()))
        .arg(format!("--socket={}", dir.join("mariadbd.sock").display()))
        .arg(format!("--pid-file={}", dir.join("mariadbd.pid").display()))
        .arg(format!("--tmpdir={}", tmp.display()))
        .arg(format!("--port={port}"))
        .args(["--bind-address=127.0.0.1", "--skip-log-bin"])
        .args(as_root)
        .ready(Ready::Tcp, Duration::from_secs(60));
    mariadb.start()?;
    Ok(mariadb)
}

/// Whether this process runs as root (the owner of `/proc/self`).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}
