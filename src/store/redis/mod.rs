//! Redis: key layout, pipelined reads, and every write as a Lua
//! compare-and-set (safety rule 1). Keys of one showtime share the hash tag
//! `{S}`, so one script can touch the seat hash, our showtime lease and our
//! suspects.

use crate::error::{Error, Result};
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, Script, Value};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock};

mod acl_check;
mod audit_backlog;
mod binlog_position;
mod bulk_read;
mod conn;
mod cursors;
mod data_marker;
// The key layout is pure (seatflow-core).
use seatflow_core::keys;
mod leases;
mod notify;
mod seats;
mod tls;

pub use acl_check::AclVerdict;
pub use binlog_position::{PositionSave, SavedPosition, parse_saved, saved_value};
pub use bulk_read::FastReads;
pub use conn::{RedisEndpoint, client_name};
pub use cursors::{CursorMove, WrongType};
pub use data_marker::MarkerRead;
pub use keys::{Keys, aside_key, key_slot};
pub use leases::{LeaseTake, PassClaim, PassRecord, pass_lease_value};
pub use notify::{Primary, Topology};
pub use seats::{Fenced, HashRead, Replied, SeatBatch, ShowtimeRead, SuspectOp};
pub use tls::RedisTls;

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

lua!(REPAIR_SEATS, "../lua/repair_seats.lua");

lua!(REBUILD_HASH, "../lua/rebuild_hash.lua");

lua!(RECORD_SUSPECTS, "../lua/record_suspects.lua");

lua!(LEASE_ACQUIRE, "../lua/lease_acquire.lua");

lua!(LEASE_RENEW, "../lua/lease_renew.lua");

lua!(LEASE_RELEASE, "../lua/lease_release.lua");

lua!(CURSOR_CAS, "../lua/cursor_cas.lua");

lua!(PASS_CLAIM, "../lua/pass_claim.lua");

lua!(PASS_FINISH, "../lua/pass_finish.lua");

lua!(BACKLOG_PUSH, "../lua/backlog_push.lua");

lua!(BACKLOG_READ, "../lua/backlog_read.lua");

lua!(BACKLOG_ACK, "../lua/backlog_ack.lua");

lua!(BINLOG_POSITION_SAVE, "../lua/binlog_position_save.lua");

lua!(ACL_CHECK, "../lua/acl_check.lua");

lua!(DATA_MARKER, "../lua/data_marker.lua");

const ALL_SCRIPTS: [&Lua; 15] = [
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
    &BACKLOG_READ,
    &BACKLOG_ACK,
    &BINLOG_POSITION_SAVE,
    &ACL_CHECK,
    &DATA_MARKER,
];

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
    /// How to open subscriber connections of their own (`notify.rs`).
    subscriber: Subscriber,
    /// The sweep's reader of seat hashes (a single server, TCP or TLS).
    bulk: Option<Arc<bulk_read::BulkReader>>,
    /// Reads of seat hashes made through the crate (`read_showtimes`).
    crate_seat_reads: Arc<AtomicU64>,
}

/// The reads of seat hashes so far (`RedisStore::read_showtimes`, one a
/// pipeline), by the reader that answered them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeatHashReads {
    /// By the fast reader (`bulk_read.rs`).
    pub fast: u64,
    /// Through the crate: no fast reader (a Unix socket, a cluster,
    /// `redis.fast_seat_reads = false`), or it stood aside.
    pub through_crate: u64,
}

/// What a subscriber connection is opened with: the single server's client,
/// or a cluster's first seed node's settings (credentials, TLS, protocol),
/// to which each primary's address is given.
#[derive(Clone)]
enum Subscriber {
    Single(Arc<redis::Client>),
    Cluster(Arc<ClusterSeed>),
}

struct ClusterSeed {
    seed: redis::ConnectionInfo,
    tls: tls::RedisTls,
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

#[cfg(test)]
mod tests {
    use super::conn::group_by_slot;
    use super::keys::hash_tag;
    use super::*;

    #[test]
    fn cluster_groups_follow_hash_tags() {
        let k = Keys::new("seatflow:");
        let cmds = vec![
            redis::cmd("TIME"),
            redis::cmd("HGETALL").arg(k.seat(1)).clone(),
            redis::cmd("HGETALL").arg(k.suspect(1)).clone(),
            redis::cmd("HGETALL").arg(k.seat(2)).clone(),
            evalsha(&REPAIR_SEATS, &[k.seat(2), k.showtime_lease(2)]),
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
    fn key_slots_are_the_clusters() {
        // The examples of the Redis Cluster specification, and redis-rs's
        // own routing for a spread of keys (tagged or not).
        assert_eq!(key_slot(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        let k = Keys::new("seatflow:");
        for key in (0..200)
            .map(|s| k.seat(s))
            .chain((0..200).map(|i| format!("plain-{i}")))
        {
            assert_eq!(
                redis::cluster_routing::Slot::new(key_slot(key.as_bytes())),
                Some(redis::cluster_routing::Slot::for_key(&key)),
                "{key}"
            );
        }
    }

    #[test]
    fn a_primarys_probe_key_is_in_one_of_its_slots() {
        let k = Keys::new("sf:");
        for slots in [
            vec![(0, 5460)],
            vec![(5461, 10922)],
            vec![(10923, 16383)],
            vec![(7, 7), (16383, 16383)],
        ] {
            let key = k.events_probe_in("host{1}", &slots).unwrap();
            assert!(key.starts_with("sf:reconcile:events-probe:{p"), "{key}");
            assert!(key.ends_with("}:host{1}"), "{key}");
            let slot = key_slot(key.as_bytes());
            assert!(
                slots.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot)),
                "{key} in slot {slot}, not in {slots:?}"
            );
        }
        assert_eq!(k.events_probe_in("a", &[]), None);
        // The same primary, the same key (the subscriber's channels and its
        // writes agree).
        assert_eq!(
            k.events_probe_in("a", &[(0, 100)]),
            k.events_probe_in("a", &[(0, 100)])
        );
    }

    #[test]
    fn keys_of_one_showtime_share_its_hash_tag() {
        let k = Keys::new("seatflow:");
        assert_eq!(k.seat(42), "seatflow:seat:{42}");
        assert_eq!(k.showtime_lease(42), "seatflow:reconcile:lock:{42}");
        assert_eq!(k.suspect(42), "seatflow:reconcile:suspect:{42}");
    }
}
