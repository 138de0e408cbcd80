//! Test support for seatflow-reconciler's integration tests: every test
//! gets its own MariaDB database and Redis key prefix on the real local
//! services, removed again when it ends ([`TestEnv`]); [`daemon`] runs the
//! real binary; [`estate`] is a daemon in process on a small estate (the
//! change-source tests'); [`servers`] starts private servers; [`simulator`] plays
//! seatflow's traffic (its own crate, which the benchmark's soak shares).

pub mod daemon;
pub mod docs;
pub mod estate;
pub mod own_keys;
#[cfg(feature = "failpoints")]
pub mod races;
pub mod servers;
pub use seatflow_simulator as simulator;
pub mod tls;

use std::collections::BTreeMap;
use std::time::Duration;

use seatflow_reconciler::config::{SecretUrl, Settings};
use seatflow_reconciler::model::Kind;
use seatflow_reconciler::ops::demo::fixtures::{self, Fixtures};
use seatflow_reconciler::plan;
use seatflow_reconciler::run::context::Context;
use seatflow_reconciler::run::jobs::report::{JobReport, Outcome, RunReport};
use seatflow_reconciler::run::jobs::{RunOptions, RunRequest};

/// The `kind` label of each job, spelled out as the spec spells it (not
/// taken from the product, so the tests check the product's names).
pub const JOB_LABELS: [&str; 5] = [
    "expired_orders",
    "paid_seats",
    "missing_hashes",
    "orphan_locks",
    "sold_orphans",
];

/// Seat `seat` of `showtime` as Redis holds it (None: no such field or hash).
pub async fn seat(env: &TestEnv, showtime: i64, seat: &str) -> Option<String> {
    env.fx.seat_value(showtime, seat).await.unwrap()
}

/// Every job of the run ended: none failed or stopped on a fatal error.
pub fn ended_well(report: &RunReport) {
    for j in &report.jobs {
        assert_ne!(j.outcome, Outcome::Failure, "{}", report.to_text());
        assert!(j.fatal.is_none(), "{}", report.to_text());
    }
}

/// The cases of a property test over the real servers: `PROPTEST_CASES`
/// when set (a longer hunt, e.g. nightly), else `default` (few: each case
/// makes a database). proptest reads that variable only where a test sets
/// no number of its own.
pub fn property_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn mysql_base_url() -> String {
    std::env::var("SEATFLOW_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}

pub fn redis_url() -> String {
    std::env::var("SEATFLOW_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

pub struct TestEnv {
    pub ctx: Context,
    pub fx: Fx,
    pub db: String,
    pub db_url: String,
    pub prefix: String,
}

/// Settings for a test: defaults, the test's database and prefix, zero grace.
pub fn test_settings(db_url: &str, prefix: &str) -> Settings {
    let mut s = Settings::load_with_env(None, Vec::new()).expect("default settings");
    s.mysql.url = SecretUrl::new(db_url);
    s.redis.url = SecretUrl::new(redis_url());
    s.redis.key_prefix = prefix.to_string();
    s.reconcile.orphan_grace = Duration::ZERO;
    s.reconcile.retry_base_delay = Duration::from_millis(5);
    s.reconcile.instance = "test".into();
    s
}

/// A fresh, empty database named `sf_test_…`; returns (name, URL).
pub async fn fresh_database() -> (String, String) {
    fresh_database_on(&mysql_base_url()).await
}

/// [`fresh_database`] on the server at `base_url` (a private one).
pub async fn fresh_database_on(base_url: &str) -> (String, String) {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let db = format!("sf_test_{}", &id[..12]);
    let db_url = fixtures::with_database(base_url, &db).unwrap();
    fixtures::recreate_database(&db_url, &db)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "MariaDB is not reachable at {base_url} ({e}). Start it with \
                 `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd` \
                 or set SEATFLOW_TEST_MYSQL_URL"
            )
        });
    (db, db_url)
}

impl TestEnv {
    pub async fn new() -> TestEnv {
        Self::with(|_| {}).await
    }

    /// A fresh database and prefix; `tweak` adjusts the settings.
    pub async fn with(tweak: impl FnOnce(&mut Settings)) -> TestEnv {
        Self::on(&mysql_base_url(), tweak).await
    }

    /// [`with`](Self::with), the database on the server at `base_url` (a
    /// private one, such as [`servers::mariadb_with_binlog`]'s); seatflow's
    /// schema and the reconciler's tables in it, as always.
    pub async fn on(base_url: &str, tweak: impl FnOnce(&mut Settings)) -> TestEnv {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (db, db_url) = fresh_database_on(base_url).await;
        let prefix = format!("sftest:{}:", &db["sf_test_".len()..]);
        let mut settings = test_settings(&db_url, &prefix);
        tweak(&mut settings);
        let ctx = Context::connect(settings).await.unwrap_or_else(|e| {
            panic!(
                "cannot connect to Redis at {} or MariaDB ({e}). Start Redis with \
                 `redis-server --daemonize yes --port 6379 --save ''` or set SEATFLOW_TEST_REDIS_URL",
                redis_url()
            )
        });
        ctx.mysql.migrate(true).await.expect("migrations");
        let fx = Fx(Fixtures {
            pool: ctx.mysql.pool().clone(),
            redis: ctx.redis.connection(),
            keys: ctx.redis.keys.clone(),
        });
        TestEnv {
            ctx,
            fx,
            db,
            db_url,
            prefix,
        }
    }

    pub async fn once(&self, kinds: &[Kind]) -> RunReport {
        run(&self.ctx, kinds, RunOptions::default()).await
    }

    pub async fn job(&self, kind: Kind) -> JobReport {
        self.once(&[kind]).await.jobs.remove(0)
    }

    pub async fn dry(&self, kinds: &[Kind]) -> RunReport {
        let dry = RunOptions {
            dry_run: true,
            ..Default::default()
        };
        run(&self.ctx, kinds, dry).await
    }

    /// Audit rows, sorted.
    pub async fn audit(&self) -> Vec<AuditRow> {
        let mut rows: Vec<AuditRow> = sqlx::query_as(
            "SELECT job, kind, showtime_id, seat_no, order_id, before_value, after_value FROM reconcile_fix",
        )
        .fetch_all(self.ctx.mysql.pool())
        .await
        .unwrap();
        rows.sort();
        rows
    }

    /// Each audited fix's kind with what found it: the source that asked
    /// for its run's check (`reconcile_run.report`'s `check`), or `sweep`
    /// for a run of the jobs themselves (a pass, `once`, a scheduled run).
    pub async fn found_by(&self) -> Vec<(String, String)> {
        let mut rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT f.kind, COALESCE(JSON_VALUE(r.report, '$.check'), 'sweep') \
             FROM reconcile_fix f JOIN reconcile_run r ON r.run_id = f.run_id",
        )
        .fetch_all(self.ctx.mysql.pool())
        .await
        .unwrap();
        rows.sort();
        rows
    }

    /// `found_by` once at least `n` repairs are audited, or after 10 s with
    /// what it holds then. A run writes its audit rows when its job closes,
    /// a moment after the repair itself: a test that saw a seat change
    /// waits here before it asks who changed it.
    pub async fn found_by_at_least(&self, n: usize) -> Vec<(String, String)> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let rows = self.found_by().await;
            if rows.len() >= n || std::time::Instant::now() >= deadline {
                return rows;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Runs statements of the test's own (seatflow's side: schema changes,
    /// data nobody cleaned; several separated by `;`) in the test's database.
    pub async fn sql(&self, statements: &str) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statements.to_string()))
            .execute(self.ctx.mysql.pool())
            .await
            .unwrap_or_else(|e| panic!("{statements}: {e}"));
    }

    /// Runs statements on a connection of their own with the permissive
    /// `sql_mode` a server configured without strict dates has (zero dates,
    /// days past a month's end, values cut to fit): how data nobody
    /// cleaned got in. Not the product's pool, whose sessions keep its own
    /// strict mode. Errors are returned (a unique key may refuse a value).
    pub async fn permissive(&self, statements: &[&str]) -> Result<(), sqlx::Error> {
        use sqlx::Connection as _;
        let mut c = sqlx::MySqlConnection::connect(&self.db_url).await?;
        sqlx::query("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
            .execute(&mut c)
            .await?;
        for s in statements {
            sqlx::query(sqlx::AssertSqlSafe(s.to_string()))
                .execute(&mut c)
                .await?;
        }
        c.close().await
    }

    /// [`TestEnv::permissive`] where every statement must be taken: a
    /// refusal fails the test (strict_reading's data nobody cleaned).
    pub async fn permissive_all(&self, statements: &[String]) {
        let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
        self.permissive(&statements).await.unwrap();
    }

    /// [`TestEnv::permissive`] of one statement that may be refused, the
    /// error ignored: a junk value a unique key refuses is simply not there
    /// (junk_props).
    pub async fn permissive_or_refused(&self, statement: String) {
        let _ = self.permissive(&[statement.as_str()]).await;
    }

    pub async fn redis<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let mut c = self.ctx.redis.connection();
        cmd.query_async(&mut c).await.unwrap()
    }

    /// Backdates a seat's suspect record to `"<state>@<now - age>"` (Redis
    /// server time), as if it had been seen orphaned for `age`: tests step
    /// over the grace period instead of sleeping through it.
    pub async fn age_suspect(&self, showtime: i64, seat: &str, state: &str, age: Duration) {
        let now = self.ctx.redis.server_time_ms().await.unwrap();
        let value = format!("{state}@{}", now - age.as_millis() as i64);
        let _: () = self
            .redis(
                redis::cmd("HSET")
                    .arg(self.ctx.redis.keys.suspect(showtime))
                    .arg(seat)
                    .arg(value),
            )
            .await;
    }

    /// A 120 s grace (rule 4's default; tests start with none) and showtime
    /// `id` ON_SALE in a 1×`seats` hall, warmed with `values` (the rest `"0"`).
    pub async fn with_grace_on(id: i64, seats: usize, values: &[(&str, &str)]) -> TestEnv {
        let env = TestEnv::with(|s| s.reconcile.orphan_grace = Duration::from_secs(120)).await;
        let names = env.fx.hall(1, 1, seats).await.unwrap();
        env.fx.showtime(id, 1, 60, "ON_SALE").await.unwrap();
        env.fx.warm_all(id, &names, values).await.unwrap();
        env
    }

    /// A seat's suspect record, decoded (None: none, or unreadable).
    pub async fn suspect(&self, showtime: i64, seat: &str) -> Option<plan::Suspect> {
        let raw: Option<String> = self
            .redis(
                redis::cmd("HGET")
                    .arg(self.ctx.redis.keys.suspect(showtime))
                    .arg(seat),
            )
            .await;
        plan::Suspect::decode(&raw?)
    }

    /// Writes a seat's suspect record as a confirmation writes it: marked with
    /// the seat's rows as MySQL shows them now, first seen `age` ago.
    pub async fn mark_suspect(&self, showtime: i64, seat: &str, state: &str, age: Duration) {
        let (history, _) = self
            .ctx
            .mysql
            .confirm_seats(&[(showtime, seat.into(), true)])
            .await
            .unwrap();
        let now = self.ctx.redis.server_time_ms().await.unwrap();
        let record = plan::Suspect {
            state: seatflow_reconciler::model::SeatState::from_redis(state).unwrap(),
            first_seen_ms: now - age.as_millis() as i64,
            rows: Some(history[0].rows.mark),
        };
        let _: () = self
            .redis(
                redis::cmd("HSET")
                    .arg(self.ctx.redis.keys.suspect(showtime))
                    .arg(seat)
                    .arg(record.encode()),
            )
            .await;
    }

    /// Every key under the prefix with a dump of its value (for checksums).
    pub async fn redis_snapshot(&self) -> BTreeMap<String, Vec<u8>> {
        let keys: Vec<String> = self
            .redis(redis::cmd("KEYS").arg(format!("{}*", self.prefix)))
            .await;
        let mut out = BTreeMap::new();
        for k in keys {
            let dump: Vec<u8> = self.redis(redis::cmd("DUMP").arg(&k)).await;
            out.insert(k, dump);
        }
        out
    }

    /// CHECKSUM TABLE of every table in the test database.
    pub async fn mysql_snapshot(&self) -> Vec<(String, Option<i64>)> {
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY table_name",
        )
        .fetch_all(self.ctx.mysql.pool())
        .await
        .unwrap();
        let mut out = Vec::new();
        for t in tables {
            let row: (String, Option<i64>) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "CHECKSUM TABLE `{t}` EXTENDED"
            )))
            .fetch_one(self.ctx.mysql.pool())
            .await
            .unwrap();
            out.push((t, row.1));
        }
        out
    }
}

pub type AuditRow = (
    String,
    String,
    Option<i64>,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<String>,
);

pub fn audit_row(
    job: &str,
    kind: &str,
    showtime: i64,
    seat: Option<&str>,
    order: Option<i64>,
    before: &str,
    after: &str,
) -> AuditRow {
    (
        job.into(),
        kind.into(),
        Some(showtime),
        seat.map(Into::into),
        order,
        Some(before.into()),
        Some(after.into()),
    )
}

/// Drops a test database and deletes a key prefix (best effort).
pub fn cleanup(db: String, db_url: String, prefix: String) {
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut server = url::Url::parse(&db_url).unwrap();
            server.set_path("/");
            if let Ok(pool) = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(1)
                .connect(server.as_str())
                .await
            {
                // A failed test may leave a transaction open on this database
                // (its pool is not closed yet): end those sessions so the
                // DROP cannot wait on their locks.
                let ids: Vec<i64> = sqlx::query_scalar(
                    "SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()",
                )
                .bind(&db)
                .fetch_all(&pool)
                .await
                .unwrap_or_default();
                for id in ids {
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL {id}")))
                        .execute(&pool)
                        .await;
                }
                let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "SET SESSION lock_wait_timeout = 10; DROP DATABASE IF EXISTS `{db}`"
                )))
                .execute(&pool)
                .await;
            }
            if let Ok(client) = redis::Client::open(redis_url())
                && let Ok(mut c) = client.get_multiplexed_async_connection().await
            {
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{prefix}*"))
                    .query_async(&mut c)
                    .await
                    .unwrap_or_default();
                if !keys.is_empty() {
                    let _: Result<(), _> = redis::cmd("DEL").arg(keys).query_async(&mut c).await;
                }
            }
        });
    })
    .join();
}

/// Holds a row lock on an order so that the expired-orders job blocks on it:
/// a real slow database, not a sleep in the product.
pub async fn hold_order_lock(env: &TestEnv, order: i64) -> sqlx::Transaction<'static, sqlx::MySql> {
    let mut tx = env.ctx.mysql.pool().begin().await.unwrap();
    sqlx::query("SELECT id FROM ticket_order WHERE id = ? FOR UPDATE")
        .bind(order)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx
}

/// Holds a lock that the cancel of an expired order waits on, to make a
/// run slow on purpose (the cancel skips the rows another transaction
/// holds, so a held order row no longer does): every row of
/// `reconcile_fix` and the gap after the last, so the cancel's audit
/// insert (inside its transaction, after the showtime leases) waits until
/// the returned transaction ends, or `mysql.lock_wait_timeout` passes. Give
/// the run a long one (`LONG_LOCK_WAIT`).
pub async fn hold_audit_lock(env: &TestEnv) -> sqlx::Transaction<'static, sqlx::MySql> {
    let mut tx = env.ctx.mysql.pool().begin().await.unwrap();
    sqlx::query("SELECT id FROM reconcile_fix FOR UPDATE")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx
}

/// A `mysql.lock_wait_timeout` for runs made slow by [`hold_audit_lock`]:
/// longer than any test waits.
pub const LONG_LOCK_WAIT: &str = "300s";

/// Showtime 1 with an order 10 min past its deadline holding A-1 (`"1"`).
pub async fn seed_expired(env: &TestEnv) -> i64 {
    let seats = env.fx.hall(1, 1, 2).await.unwrap();
    env.fx.showtime(1, 1, 60, "ON_SALE").await.unwrap();
    let order = env.fx.order(1, "PENDING", &["A-1"], -600).await.unwrap();
    env.fx.warm_all(1, &seats, &[("A-1", "1")]).await.unwrap();
    order
}

impl Drop for TestEnv {
    /// Removes the database and the keys, even when the test failed.
    fn drop(&mut self) {
        cleanup(self.db.clone(), self.db_url.clone(), self.prefix.clone());
    }
}

/// A Redis ACL user of its own (removed on drop), to make Redis refuse some
/// commands of the reconciler (NOPERM) now that a wrong-shaped key of ours
/// no longer does (rule 13). It may read and write every `reconcile:` key of
/// the test's prefix and the seat hashes of `writable`, only read those of
/// `read_only`, and not touch any other seat hash.
pub struct AclUser {
    pub name: String,
    password: String,
}

impl AclUser {
    pub async fn create(env: &TestEnv, read_only: &[i64], writable: &[i64]) -> AclUser {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let user = AclUser {
            name: format!("sftest-{}", &id[..12]),
            password: id,
        };
        let k = &env.ctx.redis.keys;
        let mut cmd = redis::cmd("ACL");
        cmd.arg("SETUSER")
            .arg(&user.name)
            .arg("on")
            .arg(format!(">{}", user.password))
            .arg("+@all")
            .arg(format!("~{}reconcile:*", env.prefix));
        for id in read_only {
            cmd.arg(format!("%R~{}", k.seat(*id)));
        }
        for id in writable {
            cmd.arg(format!("~{}", k.seat(*id)));
        }
        let _: () = env.redis(&cmd).await;
        user
    }

    /// `redis_url()` with this user's credentials.
    pub fn url(&self) -> String {
        redis_url().replacen(
            "redis://",
            &format!("redis://{}:{}@", self.name, self.password),
            1,
        )
    }
}

impl Drop for AclUser {
    fn drop(&mut self) {
        if let Ok(mut c) = redis::Client::open(redis_url()).and_then(|c| c.get_connection()) {
            let _: redis::RedisResult<i64> = redis::cmd("ACL")
                .arg("DELUSER")
                .arg(&self.name)
                .query(&mut c);
        }
    }
}

/// A MariaDB user of its own on the test's server (`'name'@'%'`, password
/// `pw`), given `grants`; dropped on drop.
pub struct DbUser {
    pub name: String,
    /// The test database's URL (as its owner): the drop connects afresh,
    /// since the test's pool belongs to the test's runtime.
    admin_url: String,
}

impl DbUser {
    pub async fn create(env: &TestEnv, name: &str, grants: &[String]) -> DbUser {
        let pool = env.ctx.mysql.pool().clone();
        let create = format!("CREATE USER '{name}'@'%' IDENTIFIED BY 'pw'");
        for sql in std::iter::once(&create).chain(grants) {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&pool)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        DbUser {
            name: name.into(),
            admin_url: env.db_url.clone(),
        }
    }

    /// The test's database URL with this user's credentials.
    pub fn url(&self, env: &TestEnv) -> String {
        let mut u = url::Url::parse(&env.db_url).unwrap();
        u.set_username(&self.name).unwrap();
        u.set_password(Some("pw")).unwrap();
        u.to_string()
    }
}

impl Drop for DbUser {
    fn drop(&mut self) {
        use sqlx::Connection;
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async move {
                    let drop_user = async {
                        let mut conn = sqlx::MySqlConnection::connect(&url).await?;
                        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                            "DROP USER IF EXISTS '{name}'@'%'"
                        )))
                        .execute(&mut conn)
                        .await
                    };
                    // The server may be gone (a private one dropped first).
                    let _ = tokio::time::timeout(Duration::from_secs(10), drop_user).await;
                })
        })
        .join();
    }
}

/// The product's fixtures (seatflow's side of the data, shared with the
/// demo) and the moves only tests make (a payment without its Redis step).
pub struct Fx(pub Fixtures);

impl std::ops::Deref for Fx {
    type Target = Fixtures;

    fn deref(&self) -> &Fixtures {
        &self.0
    }
}

impl Fx {
    /// Pays a PENDING order (seatflow's conditional update), without touching Redis.
    pub async fn pay(
        &self,
        order_id: i64,
    ) -> seatflow_reconciler::ops::demo::fixtures::AnyResult<bool> {
        let n = sqlx::query(
            "UPDATE ticket_order SET status = 'PAID', paid_at = UTC_TIMESTAMP(3) WHERE id = ? AND status = 'PENDING'",
        )
        .bind(order_id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Cancels a PENDING order as seatflow does (the customer's cancel, or
    /// its own expiry message): status, `active = NULL` and its own reason,
    /// in one transaction, without touching Redis.
    pub async fn cancel(
        &self,
        order_id: i64,
    ) -> seatflow_reconciler::ops::demo::fixtures::AnyResult<bool> {
        self.end_order(
            order_id,
            "status = 'CANCELLED', cancelled_at = UTC_TIMESTAMP(3), cancel_reason = 'USER_CANCEL'",
            "PENDING",
        )
        .await
    }

    /// Refunds a PAID order as seatflow does: status and `active = NULL`
    /// in one transaction, without touching Redis.
    pub async fn refund(
        &self,
        order_id: i64,
    ) -> seatflow_reconciler::ops::demo::fixtures::AnyResult<bool> {
        self.end_order(
            order_id,
            "status = 'REFUNDED', cancelled_at = UTC_TIMESTAMP(3)",
            "PAID",
        )
        .await
    }

    /// `set` on the order where it is `from`, and its occupancy ended, in
    /// one transaction. False when the order was not `from`.
    async fn end_order(
        &self,
        order_id: i64,
        set: &'static str,
        from: &str,
    ) -> seatflow_reconciler::ops::demo::fixtures::AnyResult<bool> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE ticket_order SET {set} WHERE id = ? AND status = ?"
        )))
        .bind(order_id)
        .bind(from)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        sqlx::query("UPDATE order_seat SET active = NULL WHERE order_id = ?")
            .bind(order_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(n == 1)
    }
}

/// The per-job counts of a `run finished` log line (its `jobs` field:
/// `paid_seats success scanned=10 drift=1 …; orphan_locks …`), one map per
/// job with `kind`, `outcome` and every count.
pub fn run_line_jobs(line: &serde_json::Value) -> Vec<BTreeMap<String, String>> {
    line["jobs"]
        .as_str()
        .unwrap_or_default()
        .split("; ")
        .filter(|j| !j.is_empty())
        .map(|job| {
            let mut words = job.split(' ');
            let mut m = BTreeMap::new();
            m.insert("kind".into(), words.next().unwrap_or_default().into());
            m.insert("outcome".into(), words.next().unwrap_or_default().into());
            for w in words {
                if let Some((k, v)) = w.split_once('=') {
                    m.insert(k.into(), v.into());
                }
            }
            m
        })
        .collect()
}

/// A run of `kinds` with `opts`, as a library caller makes one: outside any
/// pass (no pass lease).
pub async fn run(ctx: &Context, kinds: &[Kind], opts: RunOptions) -> RunReport {
    seatflow_reconciler::run::jobs::run(ctx, RunRequest::direct(ctx, kinds, opts))
        .await
        .report
}
