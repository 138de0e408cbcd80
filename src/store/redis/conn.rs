//! Connections (single node, TLS, Redis Cluster), script loading, and
//! pipelines routed by hash slot (NOSCRIPT-safe).

use super::bulk_read::{BulkReader, FastReads};
use super::keys::hash_tag;
use super::tls::RedisTls;
use super::*;
use crate::error::{Error, Result};
use redis::aio::ConnectionManager;
use redis::{Cmd, Pipeline, RedisResult, Value};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// One Redis server, or the seed nodes of a Redis Cluster.
#[derive(Debug, Clone, Copy)]
pub enum RedisEndpoint<'a> {
    Single(&'a str),
    Cluster(&'a [&'a str]),
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

/// Indices of `cmds` grouped so that each group's keys share a hash slot:
/// by hash tag (`{42}`), else by whole key; keyless commands alone.
pub(super) fn group_by_slot(cmds: &[Cmd]) -> Vec<Vec<usize>> {
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
pub(super) fn routing_key(cmd: &Cmd) -> Option<Vec<u8>> {
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
        let subscriber;
        let mut bulk = None;
        let client_name = client_name(instance);
        let conn = match endpoint {
            RedisEndpoint::Single(url) => {
                let client = match tls.certificates() {
                    Some(certs) => redis::Client::build_with_tls(url, certs)?,
                    None => redis::Client::open(url)?,
                };
                subscriber = Subscriber::Single(Arc::new(client.clone()));
                bulk = BulkReader::for_server(
                    client.get_connection_info(),
                    tls,
                    &client_name,
                    response_timeout,
                )
                .map(Arc::new);
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_response_timeout(Some(response_timeout))
                    .set_connection_timeout(Some(response_timeout))
                    .set_number_of_retries(2);
                RedisConn::Single(ConnectionManager::new_with_config(client, config).await?)
            }
            RedisEndpoint::Cluster(urls) => {
                // The cluster client logs in to every node with the first
                // seed's credentials; so do the subscribers.
                let seed = urls
                    .first()
                    .ok_or_else(|| Error::Protocol("no Redis Cluster node given".into()))?;
                subscriber = Subscriber::Cluster(Arc::new(ClusterSeed {
                    seed: redis::IntoConnectionInfo::into_connection_info(*seed)?,
                    tls: tls.clone(),
                }));
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
            client_name,
            round_trips: Arc::default(),
            crate_seat_reads: Arc::default(),
            subscriber,
            bulk,
        };
        store.load_scripts().await?;
        Ok(store)
    }

    /// This store without the fast reader of seat hashes: every read
    /// through the crate (`redis.fast_seat_reads = false`, and a test's
    /// yardstick for that reader).
    pub fn without_fast_reads(mut self) -> RedisStore {
        self.bulk = None;
        self
    }

    /// What the fast reader of seat hashes did so far; `None` where there
    /// is none (a Unix socket, `#insecure`, a cluster).
    pub fn fast_reads(&self) -> Option<FastReads> {
        self.bulk.as_ref().map(|b| b.counts())
    }

    /// The reads of seat hashes so far, by the reader that answered them.
    pub fn seat_hash_reads(&self) -> SeatHashReads {
        SeatHashReads {
            fast: self.bulk.as_ref().map_or(0, |b| b.counts().served),
            through_crate: self.crate_seat_reads.load(Ordering::Relaxed),
        }
    }

    /// Round trips to Redis made through this store so far.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    pub(super) fn trip(&self) {
        self.trips(1);
    }

    pub(super) fn trips(&self, n: u64) {
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
    pub(super) async fn pipeline(&self, cmds: &[Cmd]) -> Result<Vec<RedisResult<Value>>> {
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
    pub(super) async fn pipeline_on_one_node(
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

    pub(super) async fn int_results(&self, cmds: &[Cmd]) -> Result<Vec<bool>> {
        self.replies(cmds, |r| Ok(from_value::<i64>(r?)? == 1))
            .await
    }

    /// Runs `cmds` in one pipeline (none: no round trip) and reads each
    /// reply with `read`.
    pub(super) async fn replies<T>(
        &self,
        cmds: &[Cmd],
        read: impl FnMut(RedisResult<Value>) -> Result<T>,
    ) -> Result<Vec<T>> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        self.pipeline(cmds).await?.into_iter().map(read).collect()
    }

    pub async fn get_string(&self, key: &str) -> Result<Option<String>> {
        let mut c = self.conn.clone();
        self.trip();
        Ok(redis::cmd("GET").arg(key).query_async(&mut c).await?)
    }
}
