//! Keyspace notifications: subscriber connections of their own (a
//! connection in subscribe mode can send nothing else), the probe write
//! that tells whether the server sends them, and, in Redis Cluster mode,
//! the topology they follow: a node publishes only its own keys' events, so
//! every primary is subscribed, and probed, on its own.

use super::*;
use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use std::time::Duration;

/// One message as delivered: its channel and payload (the event's name).
pub type Notification = (String, String);

/// How long one cluster node may take to accept its subscriber connection:
/// a node that does not answer fails the whole subscription (retried), so
/// that no primary is silently left out.
const NODE_SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

/// A Redis Cluster primary: where it listens and the hash slots it owns.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Primary {
    pub host: String,
    pub port: u16,
    /// Inclusive ranges, in order, adjacent ones joined.
    pub slots: Vec<(u16, u16)>,
}

impl Primary {
    /// `host:port`, for logs.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// The primaries of a Redis Cluster (in address order) and their slots: what
/// a subscription covers. Two readings that differ mean a failover or a
/// resharding happened in between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub primaries: Vec<Primary>,
}

impl RedisStore {
    /// The Redis database the keys live in (keyspace channels name it; a
    /// cluster has only database 0).
    pub fn db(&self) -> i64 {
        match &self.subscriber {
            Subscriber::Single(c) => c.get_connection_info().redis_settings().db(),
            Subscriber::Cluster(_) => 0,
        }
    }

    /// The cluster's primaries and their slots, as every primary the
    /// cluster connection knows sees them (`CLUSTER SLOTS` on each); None
    /// for a single server. Primaries that disagree (a change spreading
    /// through the cluster) are an error: read again later.
    pub async fn topology(&self) -> Result<Option<Topology>> {
        let RedisConn::Cluster(conn) = &self.conn else {
            return Ok(None);
        };
        let mut conn = conn.clone();
        self.trip();
        let replies = conn
            .route_command(
                redis::cmd("CLUSTER").arg("SLOTS").clone(),
                // No response policy: each primary's reply under its address.
                RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
            )
            .await?;
        let Value::Map(replies) = replies else {
            return Err(Error::Protocol(format!(
                "CLUSTER SLOTS on every primary: {replies:?}"
            )));
        };
        let mut seen: Option<Topology> = None;
        for (addr, reply) in replies {
            let addr: String = from_value(addr)?;
            let answering = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h);
            let topology = parse_cluster_slots(reply, answering)?;
            match &seen {
                Some(t) if *t != topology => {
                    return Err(Error::Protocol(
                        "the Redis Cluster primaries disagree on who owns which slots (a change under way)"
                            .into(),
                    ));
                }
                Some(_) => {}
                None => seen = Some(topology),
            }
        }
        match seen {
            Some(t) if !t.primaries.is_empty() => Ok(Some(t)),
            _ => Err(Error::Protocol(
                "no Redis Cluster primary owns a slot".into(),
            )),
        }
    }

    /// Dedicated connections subscribed to `patterns` and `channels`, their
    /// messages merged: on the single server, or on each primary of
    /// `topology` in a cluster (a node publishes only its own keys'
    /// events). The stream ends when any connection drops: listening on
    /// part of the primaries would miss the others' events unnoticed.
    pub async fn subscribe(
        &self,
        patterns: &[String],
        channels: &[String],
        topology: Option<&Topology>,
    ) -> Result<BoxStream<'static, Notification>> {
        match (&self.subscriber, topology) {
            (Subscriber::Single(client), _) => {
                Ok(listen(client, patterns, channels).await?.boxed())
            }
            (Subscriber::Cluster(seed), Some(topology)) => {
                let nodes = futures_util::future::try_join_all(topology.primaries.iter().map(
                    |p| async move {
                        let client = node_client(seed, p)?;
                        tokio::time::timeout(
                            NODE_SUBSCRIBE_TIMEOUT,
                            listen(&client, patterns, channels),
                        )
                        .await
                        .map_err(|_| {
                            redis::RedisError::from(std::io::Error::new(
                                std::io::ErrorKind::TimedOut,
                                format!("subscribing on {}", p.addr()),
                            ))
                        })?
                    },
                ))
                .await?;
                // Each node's messages, then a `None` when it ends; the
                // merged stream stops at the first `None`.
                let ends = nodes
                    .into_iter()
                    .map(|node| node.map(Some).chain(stream::iter([None])).boxed());
                Ok(stream::select_all(ends)
                    .scan((), |(), msg| std::future::ready(msg))
                    .boxed())
            }
            (Subscriber::Cluster(_), None) => Err(Error::Protocol(
                "a Redis Cluster subscription needs the cluster's topology".into(),
            )),
        }
    }

    /// The server's `notify-keyspace-events` (one server; None in a
    /// cluster, whose primaries each have their own): what a dry run, which
    /// writes no probe (rule 5), can read instead. Managed servers may
    /// refuse `CONFIG`: an error then.
    pub async fn keyspace_events_config(&self) -> Result<Option<String>> {
        let RedisConn::Single(_) = &self.conn else {
            return Ok(None);
        };
        let mut c = self.conn.clone();
        self.trip();
        let reply: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("notify-keyspace-events")
            .query_async(&mut c)
            .await?;
        Ok(reply.into_iter().nth(1))
    }

    /// Writes each probe hash and deletes it, atomically (no one sees the
    /// key) and in one round trip: a server that sends the notifications
    /// we need announces both (`hset`, `del`). In a cluster each key is its
    /// own transaction, on the node owning it (redis-rs sends a pipeline to
    /// its first key's node), all at once.
    pub async fn write_probe(&self, keys: &[String]) -> Result<()> {
        let probe = |key: &String| {
            [
                redis::cmd("MULTI"),
                redis::cmd("HSET").arg(key).arg("probe").arg(1).clone(),
                redis::cmd("DEL").arg(key).clone(),
                redis::cmd("EXEC"),
            ]
        };
        let replies = match &self.conn {
            RedisConn::Single(_) => {
                let cmds: Vec<Cmd> = keys.iter().flat_map(probe).collect();
                self.pipeline(&cmds).await?
            }
            RedisConn::Cluster(_) => {
                let sent = futures_util::future::join_all(
                    keys.iter()
                        .map(|k| async move { self.pipeline_on_one_node(&probe(k), false).await }),
                )
                .await;
                self.trip();
                let mut replies = Vec::new();
                for one in sent {
                    replies.extend(one?.0);
                }
                replies
            }
        };
        for r in replies {
            r?;
        }
        Ok(())
    }
}

/// A connection of `client`'s own, subscribed: its messages until it drops.
async fn listen(
    client: &redis::Client,
    patterns: &[String],
    channels: &[String],
) -> Result<impl futures_util::Stream<Item = Notification> + Send + use<>> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.psubscribe(patterns).await?;
    if !channels.is_empty() {
        pubsub.subscribe(channels).await?;
    }
    Ok(pubsub.into_on_message().map(|msg| {
        let payload = msg.get_payload::<String>().unwrap_or_default();
        (msg.get_channel_name().to_string(), payload)
    }))
}

/// A client for one cluster node: the seed's settings (credentials, TLS,
/// protocol), the node's host and port.
fn node_client(seed: &ClusterSeed, node: &Primary) -> Result<redis::Client> {
    let ClusterSeed { seed, tls } = seed;
    let (host, port) = (node.host.clone(), node.port);
    let addr = match seed.addr() {
        redis::ConnectionAddr::TcpTls { insecure, .. } => redis::ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: None,
        },
        _ => redis::ConnectionAddr::Tcp(host, port),
    };
    let info = seed.clone().set_addr(addr);
    Ok(match tls.certificates() {
        Some(certs) => redis::Client::build_with_tls(info, certs)?,
        None => redis::Client::open(info)?,
    })
}

/// Reads a `CLUSTER SLOTS` reply: each range's primary (the first node
/// listed) and its slots. An empty or null host is the answering node's
/// (`answering`), as the command's documentation asks; a primary whose
/// address is unknown (`?`) cannot be subscribed to, so it fails the whole.
pub(super) fn parse_cluster_slots(reply: Value, answering: &str) -> Result<Topology> {
    let bad = |what: &str| Error::Protocol(format!("CLUSTER SLOTS: {what}"));
    let Value::Array(ranges) = reply else {
        return Err(bad(&format!("{reply:?}")));
    };
    let mut owners: std::collections::BTreeMap<(String, u16), Vec<(u16, u16)>> =
        std::collections::BTreeMap::new();
    for range in ranges {
        let Value::Array(range) = range else {
            return Err(bad("a range is not an array"));
        };
        let mut fields = range.into_iter();
        let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(node))) =
            (fields.next(), fields.next(), fields.next())
        else {
            return Err(bad("a range without its bounds and primary"));
        };
        let mut node = node.into_iter();
        let host = match node.next() {
            Some(Value::BulkString(h)) => String::from_utf8_lossy(&h).into_owned(),
            Some(Value::SimpleString(h)) => h,
            Some(Value::Nil) => String::new(),
            _ => return Err(bad("a primary without its host")),
        };
        let host = match host.as_str() {
            "" => answering.to_string(),
            "?" => return Err(bad("a primary whose address is unknown (?)")),
            _ => host,
        };
        let Some(Value::Int(port)) = node.next() else {
            return Err(bad("a primary without its port"));
        };
        let (Ok(lo), Ok(hi), Ok(port)) =
            (u16::try_from(lo), u16::try_from(hi), u16::try_from(port))
        else {
            return Err(bad("a slot or port out of range"));
        };
        owners.entry((host, port)).or_default().push((lo, hi));
    }
    let primaries = owners
        .into_iter()
        .map(|((host, port), mut ranges)| {
            ranges.sort_unstable();
            let mut slots: Vec<(u16, u16)> = Vec::with_capacity(ranges.len());
            for (lo, hi) in ranges {
                match slots.last_mut() {
                    Some(last) if u32::from(lo) <= u32::from(last.1) + 1 => last.1 = last.1.max(hi),
                    _ => slots.push((lo, hi)),
                }
            }
            Primary { host, port, slots }
        })
        .collect();
    Ok(Topology { primaries })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    fn range(lo: i64, hi: i64, nodes: Vec<Value>) -> Value {
        let mut r = vec![Value::Int(lo), Value::Int(hi)];
        r.extend(nodes);
        Value::Array(r)
    }

    #[test]
    fn cluster_slots_give_each_primary_its_ranges_joined() {
        let reply = Value::Array(vec![
            range(10923, 16383, vec![node("10.0.0.3", 7002)]),
            range(0, 100, vec![node("10.0.0.1", 7000), node("10.0.0.4", 7003)]),
            range(5461, 10922, vec![node("", 7001)]),
            range(101, 5460, vec![node("10.0.0.1", 7000)]),
            range(16000, 16000, vec![node("10.0.0.1", 7000)]),
        ]);
        let t = parse_cluster_slots(reply, "10.0.0.9").unwrap();
        assert_eq!(
            t.primaries,
            vec![
                Primary {
                    host: "10.0.0.1".into(),
                    port: 7000,
                    slots: vec![(0, 5460), (16000, 16000)],
                },
                Primary {
                    host: "10.0.0.3".into(),
                    port: 7002,
                    slots: vec![(10923, 16383)],
                },
                // An empty host: the answering node's.
                Primary {
                    host: "10.0.0.9".into(),
                    port: 7001,
                    slots: vec![(5461, 10922)],
                },
            ]
        );
        assert_eq!(t.primaries[0].addr(), "10.0.0.1:7000");
    }

    #[test]
    fn a_primary_of_unknown_address_or_a_strange_reply_is_an_error() {
        let unknown = Value::Array(vec![range(0, 16383, vec![node("?", 7000)])]);
        assert!(parse_cluster_slots(unknown, "h").is_err());
        assert!(parse_cluster_slots(Value::Int(1), "h").is_err());
        let no_primary = Value::Array(vec![range(0, 16383, vec![])]);
        assert!(parse_cluster_slots(no_primary, "h").is_err());
    }
}
