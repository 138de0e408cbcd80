//! The key layout (**pure**): seatflow's seat hashes and every key of
//! ours, each showtime's under its hash tag `{S}`; the aside name of a key
//! of ours found of the wrong type; the keyspace channels the daemon
//! subscribes to (read by `changes::events`).

use crate::model::{Shard, ShowtimeId};

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

    /// The showtime lease (the spec's per-showtime mutex; the key name
    /// `reconcile:lock:` is seatflow's interface and stays).
    pub fn showtime_lease(&self, s: ShowtimeId) -> String {
        format!("{}reconcile:lock:{{{s}}}", self.prefix)
    }

    pub fn suspect(&self, s: ShowtimeId) -> String {
        format!("{}reconcile:suspect:{{{s}}}", self.prefix)
    }

    /// Replies of recent repair operations, so a retry is answered, not redone.
    pub fn done(&self, s: ShowtimeId) -> String {
        format!("{}reconcile:done:{{{s}}}", self.prefix)
    }

    /// Exists only inside our repair scripts, around their writes to the
    /// seat hash (created before the first, deleted after the last, in one
    /// atomic script: nobody ever reads it). Its two keyspace events
    /// bracket the seat events that are our own writes, so the event
    /// subscriber asks no check for them (`changes::events::OwnWrites`).
    pub fn writing(&self, s: ShowtimeId) -> String {
        format!("{}reconcile:writing:{{{s}}}", self.prefix)
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

    /// The pass lease: a shard's pass among reconcilers.
    pub fn pass_lease(&self, shard: Shard) -> String {
        format!("{}reconcile:pass:{{{}}}", self.prefix, shard.name())
    }

    /// The record of a shard's last completed pass (same hash tag).
    pub fn pass_record(&self, shard: Shard) -> String {
        format!("{}reconcile:pass-done:{{{}}}", self.prefix, shard.name())
    }

    /// Where the shard's MySQL binlog reader resumes: its position and the
    /// server it belongs to (same hash tag as the pass lease).
    pub fn binlog_position(&self, shard: Shard) -> String {
        format!("{}reconcile:binlog:{{{}}}", self.prefix, shard.name())
    }

    /// Audit rows of applied Redis repairs that MySQL did not take yet.
    pub fn audit_backlog(&self) -> String {
        format!("{}reconcile:audit-backlog", self.prefix)
    }

    /// The hash one reconciler writes (and deletes) to learn whether the
    /// server sends keyspace notifications.
    pub fn events_probe(&self, instance: &str) -> String {
        format!("{}reconcile:events-probe:{instance}", self.prefix)
    }

    /// The probe hash for a Redis Cluster primary owning `slots` (inclusive
    /// ranges): keyspace events are published only by the node owning the
    /// key, so each primary gets a probe key of its own, in one of its
    /// slots. The hash tag is the first of `p0`, `p1`, ... that hashes
    /// into `slots` (a few tries for a primary owning a third of the slots);
    /// it comes before the instance, whose name may hold braces. None if
    /// `slots` is empty (no primary to probe).
    pub fn events_probe_in(&self, instance: &str, slots: &[(u16, u16)]) -> Option<String> {
        primary_tag(slots)
            .map(|tag| format!("{}reconcile:events-probe:{{{tag}}}:{instance}", self.prefix))
    }

    /// The data marker of a single server: a string of ours without
    /// expiry, gone when the server loses its data (`data_marker.lua`).
    pub fn data_marker(&self) -> String {
        format!("{}reconcile:data-marker", self.prefix)
    }

    /// The data marker of a Redis Cluster primary owning `slots`: each
    /// primary loses its data on its own (a `FLUSHALL` on one node, its
    /// failover to an empty replica), so each has one, in one of its slots
    /// (the same tag as its probe key). None if `slots` is empty.
    pub fn data_marker_in(&self, slots: &[(u16, u16)]) -> Option<String> {
        primary_tag(slots).map(|tag| format!("{}reconcile:data-marker:{{{tag}}}", self.prefix))
    }

    /// A fresh name to move an audit backlog of the wrong type aside to.
    pub fn audit_backlog_aside(&self) -> String {
        aside_key(
            &self.audit_backlog(),
            &uuid::Uuid::new_v4().simple().to_string(),
        )
    }
}

/// The first of `p0`, `p1`, ... whose slot is in `slots` (inclusive
/// ranges): a hash tag that lands a key of ours on the primary owning them
/// (a few tries for a primary owning a third of the slots). None if
/// `slots` is empty.
fn primary_tag(slots: &[(u16, u16)]) -> Option<String> {
    // A primary owning one slot needs 16,384 tries on average; a million
    // misses it with a chance of e^-61.
    (0..1_000_000u32).map(|i| format!("p{i}")).find(|tag| {
        let slot = key_slot(tag.as_bytes());
        slots.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot))
    })
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag
/// (or of the whole key), modulo 16,384, as Redis computes it.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key)) % 16_384
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

/// The part of a key Redis Cluster hashes: the first non-empty `{…}`.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The channels subscribed, for one Redis database and key prefix.
#[derive(Debug, Clone)]
pub struct Channels {
    /// `__keyspace@<db>__:`
    pub(crate) space: String,
    /// `{prefix}seat:`
    pub(crate) seat_prefix: String,
    /// `{prefix}reconcile:writing:`
    pub(crate) writing_prefix: String,
    /// The probe hashes' keys: one for a single server, one per primary
    /// in a cluster.
    pub(crate) probe_keys: Vec<String>,
}

impl Channels {
    pub fn new(db: i64, key_prefix: &str, probe_keys: Vec<String>) -> Channels {
        Channels {
            space: format!("__keyspace@{db}__:"),
            seat_prefix: format!("{key_prefix}seat:"),
            writing_prefix: format!("{key_prefix}reconcile:writing:"),
            probe_keys,
        }
    }

    /// The probe keys, in the order
    /// [`Message::Probe`](crate::changes::events::Message::Probe) numbers them.
    pub fn probe_keys(&self) -> &[String] {
        &self.probe_keys
    }

    /// The patterns subscribed: the seat hashes' channels and our writing
    /// keys' (one connection, so that a script's events stay in order),
    /// the prefix escaped for Redis' glob (`*`, `?`, `[`, `]` and `\` in a
    /// prefix match themselves).
    pub fn patterns(&self) -> [String; 2] {
        [&self.seat_prefix, &self.writing_prefix].map(|keys| {
            let mut p = glob_escape(&self.space);
            p.push_str(&glob_escape(keys));
            p.push_str("{*}");
            p
        })
    }

    /// The probes' own channels (subscribed exactly).
    pub fn probe_channels(&self) -> Vec<String> {
        self.probe_keys
            .iter()
            .map(|k| format!("{}{k}", self.space))
            .collect()
    }
}

/// `s` as a Redis glob (`PSUBSCRIBE`, ACL patterns) that matches only itself.
pub fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
