//! The connections a command works with: settings, both stores, and the
//! book of showtime leases this process holds. Jobs, `inspect`, the runner
//! and the demo all take a `Context`; it is built from settings in one place.

use std::future::Future;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::{MysqlTlsMode, Settings};
use crate::error::{Error, Result, Stage};
use crate::model::{Scope, Shard, ShowtimeId};
use crate::pace::Pacer;
use crate::repeats::Repeats;
use crate::run::refusals::Denials;
use crate::run::replica_choice::{Reason, Replica};
use crate::run::retry::with_retry;
use crate::run::showtime_leases::LeaseBook;
use crate::schedule::Schedule;
use crate::store::mysql::binlog::{BinlogOptions, BinlogSource, Checkpoint};
use crate::store::mysql::{MySqlSslMode, MysqlStore, MysqlTls};
use crate::store::redis::{RedisEndpoint, RedisStore, RedisTls};

/// Everything a command needs: settings and the two stores.
#[derive(Clone)]
pub struct Context {
    pub settings: Arc<Settings>,
    pub mysql: MysqlStore,
    pub redis: RedisStore,
    /// The shard this context's runs sweep: the process's own
    /// (`settings.shard()`), or another one a replica took over.
    pub shard: Shard,
    /// Every showtime lease this process holds, so shutdown can release them.
    pub leases: LeaseBook,
    /// The database's clock when this process connected: runs this instance
    /// started before it belong to an earlier process.
    pub connected_at: chrono::NaiveDateTime,
    /// What this process logged when: repeated problems and quiet runs are
    /// logged once per interval (`repeats.rs`).
    pub repeats: Repeats,
    /// Permissions the stores refused while this process ran (rule 18):
    /// `/status` lists them, `seatflow_reconcile_permission_denied_total`
    /// counts them.
    pub denials: Denials,
    /// Paces the daemon's seat hash reads (`pass.pace`); one per process,
    /// so a back-off carries over from one run to the next. `once` and the
    /// library's direct runs are unpaced.
    pub pacer: Option<Arc<Pacer>>,
    /// `pass.schedule`, parsed once (None: a schedule with no fire).
    pub pass_schedule: Option<Arc<Schedule>>,
    /// `mysql.replica_url`'s replica for a pass's bulk reads (None: off).
    pub replica: Option<Arc<Replica>>,
    /// Held by the run of this process that runs `expired-orders`, so that
    /// one runs at a time whatever started it (a schedule's fire, an admin
    /// run, a deadline's or a retry's check): the door (`jobs::run`)
    /// takes it.
    pub expired_orders_turn: Arc<tokio::sync::Mutex<()>>,
}

/// Where one chunk's bulk reads go: the replica (while it serves them), or
/// the primary.
#[derive(Clone, Default)]
pub struct ChunkSource {
    replica: Option<Arc<Replica>>,
}

impl Context {
    /// Connects to both stores; an error here is "unreachable at start".
    pub async fn connect(settings: Settings) -> Result<Context> {
        let mysql = connect_mysql(&settings).await?;
        let redis = connect_redis(&settings).await?;
        let connected_at = mysql.now_utc().await?;
        let replica = connect_replica(&settings, &mysql)?;
        Ok(Context {
            shard: settings.shard(),
            mysql,
            redis,
            leases: LeaseBook::default(),
            connected_at,
            repeats: Repeats::default(),
            denials: Denials::default(),
            pacer: settings.pass.pace.then(|| {
                Arc::new(Pacer::new(
                    settings.pass.max_hashes_per_second,
                    settings.pass.hashes_per_batch,
                ))
            }),
            pass_schedule: Schedule::new(&settings.pass.schedule).ok().map(Arc::new),
            replica,
            expired_orders_turn: Arc::default(),
            settings: Arc::new(settings),
        })
    }

    /// Starts reading MySQL's binlog (`changes.mysql_binlog`) from `from`
    /// when it belongs to the server, else from the server's current
    /// position: the server's privileges and settings are checked first
    /// (`Error::BinlogSetup` names each missing one as the statement to run).
    pub async fn start_binlog(&self, from: Option<Checkpoint>) -> Result<BinlogSource> {
        start_binlog(&self.settings, from).await
    }

    /// When a pass fired for `slot` must stop scanning: shortly before the
    /// next fire, so that it never overlaps the next pass (None: the
    /// schedule has no next fire).
    pub fn pass_deadline(&self, slot: DateTime<Utc>) -> Option<tokio::time::Instant> {
        let next = self.pass_schedule.as_ref()?.next_after(slot)?;
        let interval = (next - slot).to_std().ok()?;
        // Room for the pass's tail (audit flush, cursors): a twentieth of
        // the interval, at most 2 s.
        let margin = (interval / 20).min(std::time::Duration::from_secs(2));
        let left = (next - Utc::now()).to_std().unwrap_or_default();
        Some(tokio::time::Instant::now() + left.saturating_sub(margin))
    }

    /// The same connections, sweeping another shard's showtimes.
    pub fn for_shard(&self, shard: Shard) -> Context {
        Context {
            shard,
            ..self.clone()
        }
    }

    /// What a run reads: this context's shard, within `only` when it names
    /// showtimes.
    pub fn scope<'a>(&self, only: &'a [ShowtimeId]) -> Scope<'a> {
        Scope {
            shard: self.shard,
            only,
        }
    }

    /// Where a chunk's bulk reads go: the replica when the run may read it
    /// (`may`: a pass's chunk, not a check's) and it is current, else the
    /// primary (`replica.rs`).
    pub async fn chunk_source(&self, may: bool) -> ChunkSource {
        let Some(replica) = self.replica.as_ref().filter(|_| may) else {
            return ChunkSource::default();
        };
        let (reason, error) = replica.choose().await;
        if let Some(e) = &error {
            self.denials.note_replica(e);
        }
        ChunkSource {
            replica: (reason == Reason::Current).then(|| Arc::clone(replica)),
        }
    }

    /// One bulk read of a chunk, on its `source`. A read the replica fails
    /// is counted and made on the primary, as are the chunk's other reads
    /// after it; on the primary, with the retry policy.
    pub async fn bulk_read<T, F, Fut>(
        &self,
        source: &mut ChunkSource,
        what: &str,
        read: F,
    ) -> Result<T>
    where
        F: Fn(MysqlStore) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        if let Some(replica) = source.replica.clone() {
            match read(replica.store().clone()).await {
                Ok(value) => return Ok(value),
                Err(e) => {
                    self.denials.note_replica(&e);
                    replica.read_failed(&e);
                    source.replica = None;
                }
            }
        }
        self.retry(what, || read(self.mysql.clone())).await
    }

    /// Runs an I/O step with the configured retry policy.
    pub async fn retry<T, F, Fut>(&self, what: &str, op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        with_retry(&self.settings.reconcile.retry(), what, op).await
    }
}

/// [`Context::start_binlog`] from the settings alone (the start's check).
pub async fn start_binlog(settings: &Settings, from: Option<Checkpoint>) -> Result<BinlogSource> {
    let options = BinlogOptions {
        server_id: settings.changes.mysql_server_id,
        connect_timeout: settings.mysql.connect_timeout,
        ..BinlogOptions::default()
    };
    let url = settings.mysql.url.expose();
    BinlogSource::start(url, &mysql_tls(settings), &options, from).await
}

/// Connects to MySQL as `[mysql]` says (`check-config` needs no Redis).
pub async fn connect_mysql(settings: &Settings) -> Result<MysqlStore> {
    let m = &settings.mysql;
    MysqlStore::connect(
        m.url.expose(),
        &mysql_tls(settings),
        m.max_connections,
        m.connect_timeout,
        m.lock_wait_timeout,
    )
    .await
}

/// `mysql.replica_url`'s replica, its connections made when first needed
/// (None when unset).
pub fn connect_replica(settings: &Settings, primary: &MysqlStore) -> Result<Option<Arc<Replica>>> {
    let m = &settings.mysql;
    if m.replica_url.is_empty() {
        return Ok(None);
    }
    let store = primary.replica(
        m.replica_url.expose(),
        &mysql_tls(settings),
        m.max_connections,
        m.connect_timeout,
    )?;
    Ok(Some(Arc::new(Replica::new(store, m.max_replica_lag))))
}

/// Connects to Redis as `[redis]` says (one server, or a cluster's seeds).
pub async fn connect_redis(settings: &Settings) -> Result<RedisStore> {
    let r = &settings.redis;
    let cluster: Vec<&str> = r.cluster_urls.iter().map(|u| u.expose()).collect();
    let endpoint = if cluster.is_empty() {
        RedisEndpoint::Single(r.url.expose())
    } else {
        RedisEndpoint::Cluster(&cluster)
    };
    let store = RedisStore::connect(
        endpoint,
        &redis_tls(settings)?,
        &r.key_prefix,
        r.response_timeout,
        &settings.reconcile.instance,
    )
    .await?;
    Ok(if r.fast_seat_reads {
        store
    } else {
        store.without_fast_reads()
    })
}

/// `[mysql]`'s TLS settings as the store takes them.
fn mysql_tls(settings: &Settings) -> MysqlTls {
    let m = &settings.mysql;
    MysqlTls {
        mode: match m.effective_tls_mode() {
            MysqlTlsMode::Unset => None,
            MysqlTlsMode::Disabled => Some(MySqlSslMode::Disabled),
            MysqlTlsMode::Preferred => Some(MySqlSslMode::Preferred),
            MysqlTlsMode::Required => Some(MySqlSslMode::Required),
            MysqlTlsMode::VerifyCa => Some(MySqlSslMode::VerifyCa),
            MysqlTlsMode::VerifyIdentity => Some(MySqlSslMode::VerifyIdentity),
        },
        ca_file: m.tls_ca().map(Into::into),
        client: m
            .tls_cert()
            .zip(m.tls_key())
            .map(|(c, k)| (c.into(), k.into())),
    }
}

/// `[redis]`'s TLS files, read now (redis-rs takes the PEM bytes).
fn redis_tls(settings: &Settings) -> Result<RedisTls> {
    let r = &settings.redis;
    let read = |key: &str, path: &std::path::Path| {
        std::fs::read(path).map_err(|source| Error::TlsFile {
            stage: Stage::Redis,
            what: format!("{key} {}", path.display()),
            source,
        })
    };
    let ca_pem = r
        .tls_ca()
        .map(|p| read("redis.tls_ca_file", p))
        .transpose()?;
    let client = match (r.tls_cert(), r.tls_key()) {
        (Some(c), Some(k)) => Some((
            read("redis.tls_cert_file", c)?,
            read("redis.tls_key_file", k)?,
        )),
        _ => None,
    };
    Ok(RedisTls { ca_pem, client })
}
