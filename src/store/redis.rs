//! Redis: key layout, pipelined reads, and every write as a Lua
//! compare-and-set (safety rule 1). Keys of one showtime share the hash tag
//! `{S}`, so one script can touch the seat hash, our lease and our suspects.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Script, Value};

use crate::error::{Error, Result};
use crate::model::{SeatFields, SeatNo, SeatRepair, SeatState, Shard, ShowtimeId};

/// A Lua script: its source (for SCRIPT LOAD) and SHA1 (for EVALSHA).
pub struct Lua {
    code: &'static str,
    script: LazyLock<Script>,
}

macro_rules! lua {
    ($name:ident, $file:literal) => {
        static $name: Lua = Lua {
            code: include_str!($file),
            script: LazyLock::new(|| Script::new(include_str!($file))),
        };
    };
}

lua!(REPAIR_SEATS, "lua/repair_seats.lua");
lua!(REBUILD_HASH, "lua/rebuild_hash.lua");
lua!(RECORD_SUSPECTS, "lua/record_suspects.lua");
lua!(LEASE_ACQUIRE, "lua/lease_acquire.lua");
lua!(LEASE_RENEW, "lua/lease_renew.lua");
lua!(LEASE_RELEASE, "lua/lease_release.lua");
lua!(CURSOR_CAS, "lua/cursor_cas.lua");
lua!(PASS_CLAIM, "lua/pass_claim.lua");
lua!(PASS_FINISH, "lua/pass_finish.lua");
lua!(BACKLOG_PUSH, "lua/backlog_push.lua");
lua!(BACKLOG_POP, "lua/backlog_pop.lua");

const ALL_SCRIPTS: [&Lua; 11] = [
    &REPAIR_SEATS,
    &REBUILD_HASH,
    &RECORD_SUSPECTS,
    &LEASE_ACQUIRE,
    &LEASE_RENEW,
    &LEASE_RELEASE,
    &CURSOR_CAS,
    &PASS_CLAIM,
    &PASS_FINISH,
    &BACKLOG_PUSH,
    &BACKLOG_POP,
];

/// The key layout. `{prefix}seat:{S}` is seatflow's; the rest are ours.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: impl Into<String>) -> Self {
        Keys {
            prefix: prefix.into(),
        }
    }
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    pub fn seat(&self, s: ShowtimeId) -> String {
        format!("{}seat:{{{s}}}", self.prefix)
    }
    /// The showtime's lease (the spec's per-showtime mutex; the key name
    /// `reconcile:lock:` is seatflow's interface and stays).
    pub fn lease(&self, s: ShowtimeId) -> String {
        format!("{}reconcile:lock:{{{s}}}", self.prefix)
    }
    pub fn suspect(&self, s: ShowtimeId) -> String {
        format!("{}reconcile:suspect:{{{s}}}", self.prefix)
    }
    /// Replies of recent repair operations, so a retry is answered, not redone.
    pub fn done(&self, s: ShowtimeId) -> String {
        format!("{}reconcile:done:{{{s}}}", self.prefix)
    }
    pub fn cursor(&self, job: &str) -> String {
        format!("{}reconcile:cursor:{job}", self.prefix)
    }
    /// A job's cursor in one shard's sweep (the plain one when unsharded).
    pub fn shard_cursor(&self, job: &str, shard: Shard) -> String {
        if shard.total == 1 {
            self.cursor(job)
        } else {
            format!("{}:{}", self.cursor(job), shard.name())
        }
    }
    /// The lease on a shard's pass among reconcilers.
    pub fn pass_lease(&self, shard: Shard) -> String {
        format!("{}reconcile:pass:{{{}}}", self.prefix, shard.name())
    }
    /// The record of a shard's last completed pass (same hash tag).
    pub fn pass_record(&self, shard: Shard) -> String {
        format!("{}reconcile:pass-done:{{{}}}", self.prefix, shard.name())
    }
    /// Audit rows of applied Redis repairs that MySQL did not take yet.
    pub fn audit_backlog(&self) -> String {
        format!("{}reconcile:audit-backlog", self.prefix)
    }
    /// A fresh name to move an audit backlog of the wrong type aside to.
    pub fn audit_backlog_aside(&self) -> String {
        aside_key(
            &self.audit_backlog(),
            &uuid::Uuid::new_v4().simple().to_string(),
        )
    }
}

/// The name a key of ours found of the wrong type is moved aside to, when it
/// may hold something an operator needs (the audit backlog):
/// `<key>:wrong-type:<suffix>`, under the key's own prefix (ACL key
/// patterns, SCAN by prefix) and in the key's Redis Cluster slot (RENAME
/// needs both names in one slot). A key with a hash tag keeps it; a key
/// without one is given its whole name as the tag,
/// `<key>:wrong-type:<suffix>:{<key>}`. Keys of ours have braces only in a
/// tag (`redis.key_prefix` may not contain any), and `suffix` has none.
pub fn aside_key(key: &str, suffix: &str) -> String {
    if hash_tag(key.as_bytes()).len() < key.len() {
        format!("{key}:wrong-type:{suffix}")
    } else {
        format!("{key}:wrong-type:{suffix}:{{{key}}}")
    }
}

/// What a scan read at one showtime's seat key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashRead {
    Missing,
    WrongType,
    Fields(SeatFields),
}

/// One showtime's scan result.
#[derive(Debug, Clone)]
pub struct ShowtimeRead {
    pub hash: HashRead,
    /// Suspect records (empty unless asked for).
    pub suspects: HashMap<SeatNo, String>,
    /// Our suspect key was of the wrong type (rule 13): read as no records;
    /// the next suspect write replaces it.
    pub suspects_wrong_type: bool,
}

/// Result of one fenced script call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fenced<T> {
    Done(T),
    /// The lease was not ours: nothing was written.
    LeaseLost,
    /// Seatflow's seat key had the wrong type (rule 13): nothing was written.
    SeatKeyWrongType,
}

/// A script's reply and our own keys it found in the wrong shape and
/// replaced (rule 13), for the caller to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replied<T> {
    pub reply: T,
    /// Full names of the keys replaced.
    pub replaced: Vec<String>,
}

/// What a cursor CAS did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorMove {
    Moved,
    /// Someone else moved it: left alone.
    Raced,
    /// It was of the wrong type (rule 13): replaced by the new value.
    Replaced,
}

/// What trying to take one showtime's lease did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseTake {
    /// Ours now.
    Taken,
    /// Ours now; the lock key was of another type than a string (nobody's
    /// lease: rule 13) and was replaced.
    Replaced,
    /// Someone's lease (a string): left alone.
    Busy,
}

impl LeaseTake {
    pub fn is_taken(self) -> bool {
        self != LeaseTake::Busy
    }
}

/// One Redis server (reconnecting on its own) or a Redis Cluster.
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(cmd, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

#[derive(Clone)]
pub struct RedisStore {
    conn: RedisConn,
    pub keys: Keys,
    /// `CLIENT SETNAME` of our connection, so operators (and the chaos
    /// test) can find it in `CLIENT LIST`.
    client_name: String,
    /// Round trips made so far (a pipeline is one), for load reporting.
    round_trips: Arc<AtomicU64>,
}

/// One Redis server, or the seed nodes of a Redis Cluster.
#[derive(Debug, Clone, Copy)]
pub enum RedisEndpoint<'a> {
    Single(&'a str),
    Cluster(&'a [&'a str]),
}

/// TLS material for `rediss://`, as plain PEM bytes (filled from the
/// settings). Empty: the system's roots, no client certificate.
#[derive(Clone, Default)]
pub struct RedisTls {
    /// CA bundle; when set, the only roots trusted.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate and key, for mutual TLS.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca_pem", &self.ca_pem.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl RedisTls {
    /// redis-rs's form, or `None` when nothing is configured.
    fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.ca_pem.is_none() && self.client.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca_pem.clone(),
        })
    }
}

/// `seatflow-reconciler:<instance>`, reduced to characters Redis accepts.
pub fn client_name(instance: &str) -> String {
    let clean: String = instance
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-:/".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("seatflow-reconciler:{clean}")
}

impl RedisStore {
    /// Connects to `endpoint` (with `tls` for `rediss://`); keys are named under `key_prefix`, and the
    /// connection is named after `instance` (visible in CLIENT LIST).
    pub async fn connect(
        endpoint: RedisEndpoint<'_>,
        tls: &RedisTls,
        key_prefix: &str,
        response_timeout: Duration,
        instance: &str,
    ) -> Result<RedisStore> {
        let conn = match endpoint {
            RedisEndpoint::Single(url) => {
                let client = match tls.certificates() {
                    Some(certs) => redis::Client::build_with_tls(url, certs)?,
                    None => redis::Client::open(url)?,
                };
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_response_timeout(Some(response_timeout))
                    .set_connection_timeout(Some(response_timeout))
                    .set_number_of_retries(2);
                RedisConn::Single(ConnectionManager::new_with_config(client, config).await?)
            }
            RedisEndpoint::Cluster(urls) => {
                let mut builder = redis::cluster::ClusterClient::builder(urls.to_vec())
                    .response_timeout(response_timeout)
                    .connection_timeout(response_timeout);
                if let Some(certs) = tls.certificates() {
                    builder = builder.certs(certs);
                }
                let client = builder.build()?;
                RedisConn::Cluster(client.get_async_connection().await?)
            }
        };
        let store = RedisStore {
            conn,
            keys: Keys::new(key_prefix.to_string()),
            client_name: client_name(instance),
            round_trips: Arc::default(),
        };
        store.load_scripts().await?;
        Ok(store)
    }

    /// Round trips to Redis made through this store so far.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    fn trip(&self) {
        self.trips(1);
    }

    fn trips(&self, n: u64) {
        self.round_trips.fetch_add(n, Ordering::Relaxed);
    }

    pub fn connection(&self) -> RedisConn {
        self.conn.clone()
    }

    pub async fn ping(&self) -> Result<()> {
        let mut c = self.conn.clone();
        self.trip();
        redis::cmd("PING").query_async::<String>(&mut c).await?;
        Ok(())
    }

    /// Loads every script, so pipelines can use EVALSHA. In a cluster each
    /// SCRIPT LOAD goes to every primary.
    pub async fn load_scripts(&self) -> Result<()> {
        let mut c = self.conn.clone();
        match &self.conn {
            RedisConn::Single(_) => {
                let mut pipe = redis::pipe();
                for s in ALL_SCRIPTS {
                    pipe.cmd("SCRIPT").arg("LOAD").arg(s.code).ignore();
                }
                self.trip();
                pipe.query_async::<()>(&mut c).await?;
            }
            RedisConn::Cluster(_) => {
                for s in ALL_SCRIPTS {
                    self.trip();
                    redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(s.code)
                        .query_async::<Value>(&mut c)
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// Runs commands, each with its own result: in one pipeline on a single
    /// server; in a cluster, one pipeline per hash slot (redis-rs routes a
    /// pipeline as a unit, so it must not cross slots), all sent at once. The
    /// cluster connection multiplexes them over one connection per node, so a
    /// batch still waits about one round trip, and is counted as one.
    async fn pipeline(&self, cmds: &[Cmd]) -> Result<Vec<RedisResult<Value>>> {
        if let RedisConn::Single(_) = self.conn {
            let (results, sends) = self.pipeline_on_one_node(cmds, true).await?;
            self.trips(sends);
            return Ok(results);
        }
        let groups = group_by_slot(cmds);
        let sent = futures_util::future::join_all(groups.iter().map(|group| async move {
            let part: Vec<Cmd> = group.iter().map(|&i| cmds[i].clone()).collect();
            self.pipeline_on_one_node(&part, false).await
        }))
        .await;
        let mut results: Vec<Option<RedisResult<Value>>> = cmds.iter().map(|_| None).collect();
        let mut waits = 0;
        for (group, out) in groups.into_iter().zip(sent) {
            let (out, sends) = out?;
            waits = waits.max(sends);
            for (i, r) in group.into_iter().zip(out) {
                results[i] = Some(r);
            }
        }
        self.trips(waits);
        results
            .into_iter()
            .map(|r| r.ok_or_else(|| Error::Protocol("a pipeline reply is missing".into())))
            .collect()
    }

    /// One pipeline, and how many times it was sent (1, or 2 when scripts
    /// the server lost (restart, SCRIPT FLUSH) were reloaded and only those
    /// commands re-run, so no script runs twice).
    async fn pipeline_on_one_node(
        &self,
        cmds: &[Cmd],
        name_client: bool,
    ) -> Result<(Vec<RedisResult<Value>>, u64)> {
        let mut pipe = Pipeline::with_capacity(cmds.len() + 1);
        pipe.ignore_errors();
        if name_client {
            // The connection manager reconnects on its own; naming the
            // connection in every pipeline keeps the name across reconnects
            // at no extra round trip.
            pipe.cmd("CLIENT")
                .arg("SETNAME")
                .arg(&self.client_name)
                .ignore();
        }
        for c in cmds {
            pipe.add_command(c.clone());
        }
        let mut conn = self.conn.clone();
        let mut sends = 1;
        let mut results: Vec<RedisResult<Value>> = pipe.query_async(&mut conn).await?;
        let lost: Vec<usize> = results
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r, Err(e) if e.code() == Some("NOSCRIPT")))
            .map(|(i, _)| i)
            .collect();
        if !lost.is_empty() {
            self.load_scripts().await?;
            let mut again = Pipeline::with_capacity(lost.len());
            again.ignore_errors();
            for &i in &lost {
                again.add_command(cmds[i].clone());
            }
            sends += 1;
            let rerun: Vec<RedisResult<Value>> = again.query_async(&mut conn).await?;
            for (i, r) in lost.into_iter().zip(rerun) {
                results[i] = r;
            }
        }
        if results.len() != cmds.len() {
            return Err(Error::Protocol(format!(
                "pipeline of {} commands returned {} replies",
                cmds.len(),
                results.len()
            )));
        }
        Ok((results, sends))
    }

    /// Redis server time in milliseconds: one clock for every replica.
    pub async fn server_time_ms(&self) -> Result<i64> {
        let mut c = self.conn.clone();
        self.trip();
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// One round trip: server time plus HGETALL of each showtime's seat hash
    /// (and suspect hash when `with_suspects`).
    pub async fn read_showtimes(
        &self,
        ids: &[ShowtimeId],
        with_suspects: bool,
    ) -> Result<(i64, Vec<ShowtimeRead>)> {
        let mut cmds = Vec::with_capacity(1 + ids.len() * 2);
        cmds.push(redis::cmd("TIME"));
        for &id in ids {
            cmds.push(redis::cmd("HGETALL").arg(self.keys.seat(id)).clone());
            if with_suspects {
                cmds.push(redis::cmd("HGETALL").arg(self.keys.suspect(id)).clone());
            }
        }
        let mut results = self.pipeline(&cmds).await?.into_iter();
        let mut next = || {
            results
                .next()
                .ok_or_else(|| Error::Protocol("a pipeline reply is missing".into()))
        };
        let (secs, micros): (i64, i64) = from_value(next()??)?;
        let now_ms = secs * 1000 + micros / 1000;
        let mut out = Vec::with_capacity(ids.len());
        for _ in ids {
            let hash = match next()? {
                Ok(v) => {
                    let fields = seat_fields(v)?;
                    if fields.is_empty() {
                        HashRead::Missing
                    } else {
                        HashRead::Fields(fields)
                    }
                }
                Err(e) if e.code() == Some("WRONGTYPE") => HashRead::WrongType,
                Err(e) => return Err(e.into()),
            };
            let (suspects, suspects_wrong_type) = if with_suspects {
                match next()? {
                    Ok(v) => (string_map(v)?, false),
                    // Our own key of the wrong type (rule 13): no records,
                    // so every grace clock starts now (the safe direction).
                    Err(e) if e.code() == Some("WRONGTYPE") => (HashMap::new(), true),
                    Err(e) => return Err(e.into()),
                }
            } else {
                (HashMap::new(), false)
            };
            out.push(ShowtimeRead {
                hash,
                suspects,
                suspects_wrong_type,
            });
        }
        Ok((now_ms, out))
    }

    /// Writes and clears suspect records of several showtimes in one round
    /// trip. A showtime with no ops only has its suspect key replaced if it
    /// is of the wrong type. Returns the suspect keys that were of the wrong
    /// type and replaced (rule 13).
    pub async fn update_suspects(
        &self,
        updates: &[(ShowtimeId, Vec<SuspectOp>)],
        ttl_ms: i64,
    ) -> Result<Vec<String>> {
        let cmds: Vec<Cmd> = updates
            .iter()
            .map(|(id, ops)| {
                let mut c = evalsha(&RECORD_SUSPECTS, &[self.keys.suspect(*id)]);
                c.arg(ttl_ms);
                for op in ops {
                    match op {
                        SuspectOp::Record { seat, encoded } => c.arg("r").arg(seat).arg(encoded),
                        SuspectOp::Clear { seat, state } => c
                            .arg("c")
                            .arg(seat)
                            .arg(state.map(SeatState::as_redis).unwrap_or("")),
                    };
                }
                c
            })
            .collect();
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        let mut replaced = Vec::new();
        for (r, (id, _)) in self.pipeline(&cmds).await?.into_iter().zip(updates) {
            let (_changed, was_replaced): (i64, i64) = from_value(r?)?;
            if was_replaced == 1 {
                replaced.push(self.keys.suspect(*id));
            }
        }
        Ok(replaced)
    }

    /// Applies fenced per-seat compare-and-sets, one script per showtime, all
    /// in one round trip. Per showtime: which repairs were applied, or
    /// `LeaseLost`, or `SeatKeyWrongType` (nothing written), or an error;
    /// with our own keys (suspect, done) it replaced for being of the wrong
    /// type (rule 13). Retrying a call with the same batches (same operation
    /// ids) is safe.
    pub async fn repair_seats(
        &self,
        token: &str,
        batches: &[SeatBatch],
    ) -> Result<Vec<Replied<Result<Fenced<Vec<bool>>>>>> {
        let cmds: Vec<Cmd> = batches
            .iter()
            .map(|b| {
                let id = b.showtime;
                let mut c = evalsha(
                    &REPAIR_SEATS,
                    &[
                        self.keys.seat(id),
                        self.keys.lease(id),
                        self.keys.suspect(id),
                        self.keys.done(id),
                    ],
                );
                c.arg(token).arg(&b.op_id);
                for r in &b.repairs {
                    c.arg(&r.seat)
                        .arg(r.observed.map(SeatState::as_redis).unwrap_or(""))
                        .arg(r.target.as_redis());
                }
                c
            })
            .collect();
        let results = self.pipeline(&cmds).await?;
        Ok(results
            .into_iter()
            .zip(batches)
            .map(|(r, b)| {
                let mut replaced = Vec::new();
                let reply = (|| {
                    let codes: Vec<i64> = from_value(r?)?;
                    match codes.as_slice() {
                        [1, mask, rest @ ..] if rest.len() == b.repairs.len() => {
                            if mask & 1 != 0 {
                                replaced.push(self.keys.suspect(b.showtime));
                            }
                            if mask & 2 != 0 {
                                replaced.push(self.keys.done(b.showtime));
                            }
                            Ok(Fenced::Done(rest.iter().map(|&c| c == 1).collect()))
                        }
                        [-1, ..] => Ok(Fenced::LeaseLost),
                        [-2, 1] => Ok(Fenced::SeatKeyWrongType),
                        _ => Err(Error::Protocol(format!("repair script replied {codes:?}"))),
                    }
                })();
                Replied { reply, replaced }
            })
            .collect())
    }

    /// Creates a missing hash, fenced, only if it is still missing.
    /// `Done(true)` created, `Done(false)` a hash appeared meanwhile.
    /// Retrying with the same `op_id` is safe.
    pub async fn rebuild_hash(
        &self,
        token: &str,
        op_id: &str,
        showtime: ShowtimeId,
        fields: &[(SeatNo, SeatState)],
    ) -> Result<Replied<Fenced<bool>>> {
        let mut c = evalsha(
            &REBUILD_HASH,
            &[
                self.keys.seat(showtime),
                self.keys.lease(showtime),
                self.keys.done(showtime),
            ],
        );
        c.arg(token).arg(op_id);
        for (seat, state) in fields {
            c.arg(seat).arg(state.as_redis());
        }
        let (code, mask): (i64, i64) = from_value(self.pipeline(&[c]).await?.remove(0)?)?;
        let reply = match code {
            1 => Fenced::Done(true),
            0 => Fenced::Done(false),
            -1 => Fenced::LeaseLost,
            -2 => Fenced::SeatKeyWrongType,
            other => {
                return Err(Error::Protocol(format!("rebuild script replied {other}")));
            }
        };
        let replaced = if mask & 2 != 0 {
            vec![self.keys.done(showtime)]
        } else {
            Vec::new()
        };
        Ok(Replied { reply, replaced })
    }

    /// Tries to take each showtime's lease (`SET PX` with our token where
    /// there is none), in one round trip. A lock key of another type than a
    /// string is nobody's lease (rule 13): it is replaced and reported as
    /// `LeaseTake::Replaced`.
    pub async fn acquire_leases(
        &self,
        token: &str,
        ids: &[ShowtimeId],
        ttl_ms: u64,
    ) -> Result<Vec<LeaseTake>> {
        let cmds: Vec<Cmd> = ids
            .iter()
            .map(|&id| {
                let mut c = evalsha(&LEASE_ACQUIRE, &[self.keys.lease(id)]);
                c.arg(token).arg(ttl_ms);
                c
            })
            .collect();
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        self.pipeline(&cmds)
            .await?
            .into_iter()
            .map(|r| match from_value::<i64>(r?)? {
                1 => Ok(LeaseTake::Taken),
                0 => Ok(LeaseTake::Busy),
                2 => Ok(LeaseTake::Replaced),
                other => Err(Error::Protocol(format!("lease script replied {other}"))),
            })
            .collect()
    }

    /// PTTL of each showtime's lease in one round trip: ms left, -1 no
    /// expiry, -2 gone.
    pub async fn lease_pttls(&self, ids: &[ShowtimeId]) -> Result<Vec<i64>> {
        let cmds: Vec<Cmd> = ids
            .iter()
            .map(|&id| redis::cmd("PTTL").arg(self.keys.lease(id)).clone())
            .collect();
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        self.pipeline(&cmds)
            .await?
            .into_iter()
            .map(|r| from_value(r?))
            .collect()
    }

    /// Extends our leases; false where the lease is no longer ours.
    pub async fn renew_leases(
        &self,
        token: &str,
        ids: &[ShowtimeId],
        ttl_ms: u64,
    ) -> Result<Vec<bool>> {
        let cmds: Vec<Cmd> = ids
            .iter()
            .map(|&id| {
                let mut c = evalsha(&LEASE_RENEW, &[self.keys.lease(id)]);
                c.arg(token).arg(ttl_ms);
                c
            })
            .collect();
        self.int_results(&cmds).await
    }

    /// Compare-and-delete of our leases; false where it was not ours any more.
    pub async fn release_leases(&self, token: &str, ids: &[ShowtimeId]) -> Result<Vec<bool>> {
        let cmds: Vec<Cmd> = ids
            .iter()
            .map(|&id| {
                let mut c = evalsha(&LEASE_RELEASE, &[self.keys.lease(id)]);
                c.arg(token);
                c
            })
            .collect();
        self.int_results(&cmds).await
    }

    async fn int_results(&self, cmds: &[Cmd]) -> Result<Vec<bool>> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        self.pipeline(cmds)
            .await?
            .into_iter()
            .map(|r| Ok(from_value::<i64>(r?)? == 1))
            .collect()
    }

    /// Appends entries to the audit backlog (a list). A backlog key of
    /// another type is moved aside first (rule 13: it may hold rows someone
    /// needs; ours still go to a fresh backlog); returns the name it was
    /// moved to, for the caller to report.
    pub async fn push_audit_backlog(&self, entries: &[String]) -> Result<Option<String>> {
        if entries.is_empty() {
            return Ok(None);
        }
        let aside = self.keys.audit_backlog_aside();
        let mut c = evalsha(&BACKLOG_PUSH, &[self.keys.audit_backlog(), aside.clone()]);
        c.arg(entries);
        let (_length, moved): (i64, i64) = from_value(self.pipeline(&[c]).await?.remove(0)?)?;
        Ok((moved == 1).then_some(aside))
    }

    /// Takes up to `n` entries off the audit backlog: each is taken by one
    /// reconciler only, whoever else drains at the same time. A backlog key
    /// of another type is moved aside (rule 13) instead, and the name it was
    /// moved to returned with no entries, for the caller to report.
    pub async fn pop_audit_backlog(&self, n: usize) -> Result<(Vec<String>, Option<String>)> {
        let aside = self.keys.audit_backlog_aside();
        let mut c = evalsha(&BACKLOG_POP, &[self.keys.audit_backlog(), aside.clone()]);
        c.arg(n);
        let reply: Vec<Value> = from_value(self.pipeline(&[c]).await?.remove(0)?)?;
        let mut reply = reply.into_iter();
        let moved: i64 = match reply.next() {
            Some(v) => from_value(v)?,
            None => return Err(Error::Protocol("backlog pop replied nothing".into())),
        };
        let entries = reply.map(from_value).collect::<Result<Vec<String>>>()?;
        Ok((entries, (moved == 1).then_some(aside)))
    }

    pub async fn get_string(&self, key: &str) -> Result<Option<String>> {
        let mut c = self.conn.clone();
        self.trip();
        Ok(redis::cmd("GET").arg(key).query_async(&mut c).await?)
    }

    /// A cursor: `Ok(value)`, or `Err(WrongType)` when the key is not a
    /// string (rule 13: ours, reported and replaced by the next `set_cursor`).
    pub async fn read_cursor(&self, key: &str) -> Result<Result<Option<String>, WrongType>> {
        let mut c = self.conn.clone();
        self.trip();
        match redis::cmd("GET").arg(key).query_async(&mut c).await {
            Ok(v) => Ok(Ok(v)),
            Err(e) if e.code() == Some("WRONGTYPE") => Ok(Err(WrongType)),
            Err(e) => Err(e.into()),
        }
    }

    /// Moves a cursor from `seen` (None = absent) to `next` (None = delete);
    /// a cursor key of the wrong type is replaced whatever was seen.
    pub async fn set_cursor(
        &self,
        key: &str,
        seen: Option<&str>,
        next: Option<&str>,
    ) -> Result<CursorMove> {
        let mut c = evalsha(&CURSOR_CAS, &[key.to_string()]);
        c.arg(seen.unwrap_or("")).arg(next.unwrap_or(""));
        let code: i64 = from_value(self.pipeline(&[c]).await?.remove(0)?)?;
        match code {
            1 => Ok(CursorMove::Moved),
            0 => Ok(CursorMove::Raced),
            2 => Ok(CursorMove::Replaced),
            other => Err(Error::Protocol(format!("cursor script replied {other}"))),
        }
    }
}

/// Claims of a shard's pass, and the record of its last completed pass.
impl RedisStore {
    /// Tries to take `shard`'s pass for `slot_ms` (0: outside the schedule).
    pub async fn claim_pass(
        &self,
        shard: Shard,
        value: &str,
        ttl_ms: u64,
        slot_ms: i64,
    ) -> Result<PassClaim> {
        let mut c = evalsha(
            &PASS_CLAIM,
            &[self.keys.pass_lease(shard), self.keys.pass_record(shard)],
        );
        c.arg(value).arg(ttl_ms).arg(slot_ms);
        let (code, text, pttl, replaced): (i64, String, i64, i64) =
            from_value(self.pipeline(&[c]).await?.remove(0)?)?;
        let replaced = replaced == 1;
        match code {
            1 => Ok(PassClaim::Claimed {
                last: PassRecord::decode(&text),
                replaced,
            }),
            0 => Ok(PassClaim::Held {
                holder: lease_holder(&text),
                pttl_ms: pttl,
            }),
            2 => Ok(PassClaim::Done {
                record: PassRecord::decode(&text).unwrap_or_default(),
            }),
            other => Err(Error::Protocol(format!("pass claim replied {other}"))),
        }
    }

    /// Extends our pass lease; false when it is not ours any more.
    pub async fn renew_pass(&self, shard: Shard, value: &str, ttl_ms: u64) -> Result<bool> {
        let mut c = evalsha(&LEASE_RENEW, &[self.keys.pass_lease(shard)]);
        c.arg(value).arg(ttl_ms);
        Ok(self.int_results(&[c]).await?[0])
    }

    /// Gives the lease back without recording a pass (stopped, failed).
    pub async fn release_pass(&self, shard: Shard, value: &str) -> Result<bool> {
        let mut c = evalsha(&LEASE_RELEASE, &[self.keys.pass_lease(shard)]);
        c.arg(value);
        Ok(self.int_results(&[c]).await?[0])
    }

    /// Records the completed pass and releases the lease, if still ours.
    pub async fn finish_pass(
        &self,
        shard: Shard,
        value: &str,
        record: &PassRecord,
    ) -> Result<bool> {
        let mut c = evalsha(
            &PASS_FINISH,
            &[self.keys.pass_lease(shard), self.keys.pass_record(shard)],
        );
        c.arg(value).arg(record.encode());
        Ok(self.int_results(&[c]).await?[0])
    }

    /// Who holds the pass now (instance), and the last completed pass.
    pub async fn read_pass(&self, shard: Shard) -> Result<(Option<String>, Option<PassRecord>)> {
        let cmds = [
            redis::cmd("GET").arg(self.keys.pass_lease(shard)).clone(),
            redis::cmd("GET").arg(self.keys.pass_record(shard)).clone(),
        ];
        let mut r = self.pipeline(&cmds).await?.into_iter();
        // A key of the wrong type reads as nothing here; the next claim replaces it.
        let mut text = || -> Option<String> {
            r.next()
                .and_then(|v| v.ok())
                .and_then(|v| from_value::<Option<String>>(v).ok())
                .flatten()
        };
        let holder = text().map(|v| lease_holder(&v));
        let record = text().and_then(|t| PassRecord::decode(&t));
        Ok((holder, record))
    }
}

/// The instance in a pass lease's value (`token instance`).
fn lease_holder(value: &str) -> String {
    value
        .split_once(' ')
        .map(|(_, who)| who)
        .unwrap_or(value)
        .to_string()
}

/// What claiming a shard's pass found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassClaim {
    /// Ours now. `last`: the shard's last completed pass, if any.
    Claimed {
        last: Option<PassRecord>,
        /// Our own key was of the wrong type and was replaced (rule 13).
        replaced: bool,
    },
    /// Another reconciler runs it; `pttl_ms` -1 means a lease without expiry.
    Held { holder: String, pttl_ms: i64 },
    /// This schedule slot's pass was already completed.
    Done { record: PassRecord },
}

/// A completed pass: the schedule slot it served, when it finished, by whom.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassRecord {
    pub slot_ms: i64,
    pub finished_ms: i64,
    pub instance: String,
}

impl PassRecord {
    pub fn encode(&self) -> String {
        format!("{} {} {}", self.slot_ms, self.finished_ms, self.instance)
    }

    /// None for a value not written by `encode` (rule 13: read as no record).
    pub fn decode(text: &str) -> Option<PassRecord> {
        let mut parts = text.splitn(3, ' ');
        let slot_ms = parts.next()?.parse().ok()?;
        let finished_ms = parts.next()?.parse().ok()?;
        let instance = parts.next()?.to_string();
        Some(PassRecord {
            slot_ms,
            finished_ms,
            instance,
        })
    }
}

/// A key of ours found of the wrong type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrongType;

/// The repairs of one showtime, applied by one script call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatBatch {
    pub showtime: ShowtimeId,
    /// Unique per call and kept across its retries.
    pub op_id: String,
    pub repairs: Vec<SeatRepair>,
}

impl SeatBatch {
    pub fn new(showtime: ShowtimeId, repairs: Vec<SeatRepair>) -> SeatBatch {
        SeatBatch {
            showtime,
            op_id: uuid::Uuid::new_v4().simple().to_string(),
            repairs,
        }
    }
}

/// Indices of `cmds` grouped so that each group's keys share a hash slot:
/// by hash tag (`{42}`), else by whole key; keyless commands alone.
fn group_by_slot(cmds: &[Cmd]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(Option<Vec<u8>>, Vec<usize>)> = Vec::new();
    for (i, cmd) in cmds.iter().enumerate() {
        let tag = routing_key(cmd).map(|k| hash_tag(&k).to_vec());
        match groups.iter_mut().find(|(t, _)| t.is_some() && *t == tag) {
            Some((_, idx)) => idx.push(i),
            None => groups.push((tag, vec![i])),
        }
    }
    groups.into_iter().map(|(_, idx)| idx).collect()
}

/// The key a command is routed by: the first key of EVAL/EVALSHA, else the
/// first argument; None for keyless commands (TIME, PING).
fn routing_key(cmd: &Cmd) -> Option<Vec<u8>> {
    let args: Vec<Vec<u8>> = cmd
        .args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => b.to_vec(),
            _ => Vec::new(),
        })
        .collect();
    let name = args.first()?.to_ascii_uppercase();
    match name.as_slice() {
        b"EVAL" | b"EVALSHA" => (args.get(2)? != b"0").then(|| args.get(3).cloned())?,
        b"TIME" | b"PING" => None,
        _ => args.get(1).cloned(),
    }
}

/// The part of a key Redis Cluster hashes: the first non-empty `{…}`.
fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// One change to a showtime's suspect records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SuspectOp {
    Record {
        seat: SeatNo,
        encoded: String,
    },
    /// Delete the record if it is of `state` (None = whatever it holds).
    Clear {
        seat: SeatNo,
        state: Option<SeatState>,
    },
}

fn evalsha(lua: &Lua, keys: &[String]) -> Cmd {
    let mut c = redis::cmd("EVALSHA");
    c.arg(lua.script.get_hash()).arg(keys.len());
    for k in keys {
        c.arg(k);
    }
    c
}

fn from_value<T: FromRedisValue>(v: Value) -> Result<T> {
    T::from_redis_value(v).map_err(|e| Error::Protocol(e.to_string()))
}

/// One item of an HGETALL reply, as the bytes it holds (no copy).
fn bytes(v: Value) -> Result<Vec<u8>> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        other => Err(Error::Protocol(format!("unexpected hash item {other:?}"))),
    }
}

/// HGETALL reply of a seat hash → its fields as they are. This runs for every
/// field of every sweep: the reply's buffers are kept, nothing is decoded.
fn seat_fields(v: Value) -> Result<SeatFields> {
    match v {
        // RESP2: a flat array of field, value, field, value, …
        Value::Array(items) => Ok(SeatFields::from_flat(
            items.into_iter().map(bytes).collect::<Result<_>>()?,
        )),
        // RESP3: a map.
        Value::Map(pairs) => Ok(SeatFields::from_flat(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [k, v])
                .map(bytes)
                .collect::<Result<_>>()?,
        )),
        Value::Nil => Ok(SeatFields::default()),
        other => Err(Error::Protocol(format!("HGETALL replied {other:?}"))),
    }
}

/// HGETALL reply of a small hash of ours (suspect records) → map;
/// non-UTF-8 bytes become U+FFFD and fail validation later.
fn string_map(v: Value) -> Result<HashMap<String, String>> {
    Ok(seat_fields(v)?.to_map())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_groups_follow_hash_tags() {
        let k = Keys::new("seatflow:");
        let cmds = vec![
            redis::cmd("TIME"),
            redis::cmd("HGETALL").arg(k.seat(1)).clone(),
            redis::cmd("HGETALL").arg(k.suspect(1)).clone(),
            redis::cmd("HGETALL").arg(k.seat(2)).clone(),
            evalsha(&REPAIR_SEATS, &[k.seat(2), k.lease(2)]),
            redis::cmd("GET").arg(k.cursor("paid_seats")).clone(),
        ];
        assert_eq!(
            group_by_slot(&cmds),
            vec![vec![0], vec![1, 2], vec![3, 4], vec![5]]
        );
        assert_eq!(hash_tag(b"a{}b{c}"), b"a{}b{c}");
        assert_eq!(hash_tag(b"x{42}y"), b"42");
    }

    #[test]
    fn a_key_moved_aside_keeps_its_prefix_and_its_slot() {
        let k = Keys::new("seatflow:");
        let backlog = k.audit_backlog();
        let aside = aside_key(&backlog, "s1");
        assert_eq!(
            aside,
            "seatflow:reconcile:audit-backlog:wrong-type:s1:{seatflow:reconcile:audit-backlog}"
        );
        assert_eq!(hash_tag(aside.as_bytes()), backlog.as_bytes());
        // A key with a hash tag keeps it.
        let tagged = aside_key(&k.done(42), "s2");
        assert_eq!(tagged, "seatflow:reconcile:done:{42}:wrong-type:s2");
        assert_eq!(hash_tag(tagged.as_bytes()), b"42");
        // Fresh each time, same slot.
        let (a, b) = (k.audit_backlog_aside(), k.audit_backlog_aside());
        assert_ne!(a, b);
        assert!(a.starts_with("seatflow:reconcile:audit-backlog:wrong-type:"));
        assert_eq!(hash_tag(a.as_bytes()), hash_tag(b.as_bytes()));
    }

    #[test]
    fn keys_of_one_showtime_share_its_hash_tag() {
        let k = Keys::new("seatflow:");
        assert_eq!(k.seat(42), "seatflow:seat:{42}");
        assert_eq!(k.lease(42), "seatflow:reconcile:lock:{42}");
        assert_eq!(k.suspect(42), "seatflow:reconcile:suspect:{42}");
    }
}
