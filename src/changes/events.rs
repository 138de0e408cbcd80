//! Redis keyspace notifications, read: which showtime a message is about,
//! and whether the server sends them at all (pure; the subscription itself
//! is `store::redis::notify`).
//!
//! The reconciler never sets `notify-keyspace-events` (it is the server
//! owner's setting, and managed Redis often forbids `CONFIG SET`). It finds
//! out instead: it writes a probe hash of its own (`HSET`, then `DEL`) and
//! watches for the two notifications. Both seen: events are on. Neither
//! within [`PROBE_TIMEOUT`]: off. A probe is sent every [`PROBE_EVERY`], so
//! events that stop (a config change, a failover to a server set up
//! differently) are noticed within a minute and counted as a gap.

use std::time::{Duration, Instant};

use crate::model::ShowtimeId;

/// How often the probe is written.
pub const PROBE_EVERY: Duration = Duration::from_secs(60);

/// How long a probe's notifications may take before events count as off.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The events on a seat hash that can leave drift behind: a seat written or
/// removed, the hash deleted, expired or evicted.
pub const SEAT_EVENTS: [&str; 5] = ["hset", "hdel", "del", "expired", "evicted"];

/// The flags the README asks for: keyspace channels (`K`) of hash (`h`) and
/// generic (`g`) commands, expiries (`x`) and evictions (`e`).
pub const FLAGS_NEEDED: &str = "Khgxe";

/// What a keyspace message is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// A seat hash changed in a way that may leave drift.
    Seat(ShowtimeId),
    /// Another event on a seat hash (`hincrby`, `rename_from`, ...): the
    /// hash changed all the same, so it is checked too.
    SeatOther(ShowtimeId),
    /// Our probe's `HSET` (true) or `DEL` (false) arrived.
    Probe { hash_event: bool },
    /// Not ours to act on (a key under the pattern that names no showtime).
    Ignored,
}

/// The channels subscribed, for one Redis database and key prefix.
#[derive(Debug, Clone)]
pub struct Channels {
    /// `__keyspace@<db>__:`
    space: String,
    /// `{prefix}seat:`
    seat_prefix: String,
    /// The probe hash's key.
    probe_key: String,
}

impl Channels {
    pub fn new(db: i64, key_prefix: &str, probe_key: &str) -> Channels {
        Channels {
            space: format!("__keyspace@{db}__:"),
            seat_prefix: format!("{key_prefix}seat:"),
            probe_key: probe_key.to_string(),
        }
    }

    /// The pattern of the seat hashes' channels, the prefix escaped for
    /// Redis' glob (`*`, `?`, `[`, `]` and `\` in a prefix match themselves).
    pub fn seat_pattern(&self) -> String {
        let mut p = glob_escape(&self.space);
        p.push_str(&glob_escape(&self.seat_prefix));
        p.push_str("{*}");
        p
    }

    /// The probe's own channel (subscribed exactly).
    pub fn probe_channel(&self) -> String {
        format!("{}{}", self.space, self.probe_key)
    }

    /// Reads one message: `channel` as delivered, `event` its payload.
    pub fn read(&self, channel: &str, event: &str) -> Message {
        let Some(key) = channel.strip_prefix(&self.space) else {
            return Message::Ignored;
        };
        if key == self.probe_key {
            return match event {
                "hset" => Message::Probe { hash_event: true },
                "del" => Message::Probe { hash_event: false },
                _ => Message::Ignored,
            };
        }
        // `{prefix}seat:{S}`, exactly as `Keys::seat` writes it.
        let Some(id) = key
            .strip_prefix(&self.seat_prefix)
            .and_then(|rest| rest.strip_prefix('{'))
            .and_then(|rest| rest.strip_suffix('}'))
            .and_then(|id| id.parse::<ShowtimeId>().ok())
            .filter(|id| *id > 0)
        else {
            return Message::Ignored;
        };
        if SEAT_EVENTS.contains(&event) {
            Message::Seat(id)
        } else {
            Message::SeatOther(id)
        }
    }
}

fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whether the server sends the notifications we need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventsState {
    /// Not known yet: no probe has been judged since the subscription began.
    Unknown,
    /// Both probe notifications arrived.
    On,
    /// A probe went unanswered (or half answered: `K` on, but not `h` or `g`).
    Off,
    /// No subscription could be made (Redis Cluster, for now, or a failed
    /// connection): the sweep alone finds drift.
    Unavailable,
    /// `changes.redis_events = "off"`: no subscription.
    Disabled,
    /// Another replica runs this shard's passes and listens; this one does not.
    Standby,
}

impl EventsState {
    pub const ALL: [EventsState; 6] = [
        EventsState::Unknown,
        EventsState::On,
        EventsState::Off,
        EventsState::Unavailable,
        EventsState::Disabled,
        EventsState::Standby,
    ];

    pub fn label(self) -> &'static str {
        match self {
            EventsState::Unknown => "unknown",
            EventsState::On => "on",
            EventsState::Off => "off",
            EventsState::Unavailable => "unavailable",
            EventsState::Disabled => "disabled",
            EventsState::Standby => "standby",
        }
    }
}

/// The probe's bookkeeping: when one was sent, which of its two
/// notifications came back, and the verdict.
#[derive(Debug, Clone)]
pub struct Probe {
    state: EventsState,
    sent_at: Option<Instant>,
    hash_seen: bool,
    del_seen: bool,
}

/// A change of verdict worth a log line (and, for `Stopped`, a gap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Events arrive (first time, or again).
    Started,
    /// Events are off from the start.
    Off { hash_event: bool, del_event: bool },
    /// Events were on and stopped.
    Stopped { hash_event: bool, del_event: bool },
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            state: EventsState::Unknown,
            sent_at: None,
            hash_seen: false,
            del_seen: false,
        }
    }
}

impl Probe {
    pub fn state(&self) -> EventsState {
        self.state
    }

    /// A probe is written at `now`.
    pub fn sent(&mut self, now: Instant) {
        self.sent_at = Some(now);
        self.hash_seen = false;
        self.del_seen = false;
    }

    /// One of the probe's notifications arrived.
    pub fn seen(&mut self, hash_event: bool) -> Option<Verdict> {
        self.sent_at?;
        if hash_event {
            self.hash_seen = true;
        } else {
            self.del_seen = true;
        }
        if self.hash_seen && self.del_seen {
            self.sent_at = None;
            if self.state != EventsState::On {
                self.state = EventsState::On;
                return Some(Verdict::Started);
            }
        }
        None
    }

    /// Judges an outstanding probe at `now`: past [`PROBE_TIMEOUT`] without
    /// both notifications, events are off.
    pub fn judge(&mut self, now: Instant) -> Option<Verdict> {
        let sent_at = self.sent_at?;
        if now.saturating_duration_since(sent_at) < PROBE_TIMEOUT {
            return None;
        }
        self.sent_at = None;
        let (hash_event, del_event) = (self.hash_seen, self.del_seen);
        let was = self.state;
        self.state = EventsState::Off;
        match was {
            EventsState::On => Some(Verdict::Stopped {
                hash_event,
                del_event,
            }),
            EventsState::Off => None,
            _ => Some(Verdict::Off {
                hash_event,
                del_event,
            }),
        }
    }

    /// The subscription broke: nothing is known until the next probe.
    pub fn lost(&mut self) {
        self.set(EventsState::Unavailable);
    }

    /// A state known without a probe (no subscription, or none wanted).
    pub fn set(&mut self, state: EventsState) {
        *self = Probe {
            state,
            ..Probe::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channels() -> Channels {
        Channels::new(3, "sf[1]:", "sf[1]:reconcile:events-probe:{a}")
    }

    #[test]
    fn a_seat_hash_message_names_its_showtime() {
        let c = channels();
        assert_eq!(
            c.read("__keyspace@3__:sf[1]:seat:{42}", "hset"),
            Message::Seat(42)
        );
        assert_eq!(
            c.read("__keyspace@3__:sf[1]:seat:{42}", "evicted"),
            Message::Seat(42)
        );
        assert_eq!(
            c.read("__keyspace@3__:sf[1]:seat:{42}", "hincrby"),
            Message::SeatOther(42)
        );
        for junk in [
            "__keyspace@3__:sf[1]:seat:{x}",
            "__keyspace@3__:sf[1]:seat:{-4}",
            "__keyspace@3__:sf[1]:seat:42",
            "__keyspace@4__:sf[1]:seat:{42}",
            "__keyspace@3__:sf[1]:seat:{42}:wrong-type:s1",
        ] {
            assert_eq!(c.read(junk, "hset"), Message::Ignored, "{junk}");
        }
    }

    #[test]
    fn the_pattern_escapes_the_prefix_and_the_probe_is_told_apart() {
        let c = channels();
        assert_eq!(c.seat_pattern(), "__keyspace@3__:sf\\[1\\]:seat:{*}");
        let probe = c.probe_channel();
        assert_eq!(c.read(&probe, "hset"), Message::Probe { hash_event: true });
        assert_eq!(c.read(&probe, "del"), Message::Probe { hash_event: false });
        assert_eq!(c.read(&probe, "expire"), Message::Ignored);
    }

    #[test]
    fn the_probe_judges_on_off_and_stopped() {
        let t0 = Instant::now();
        let mut p = Probe::default();
        assert_eq!(p.state(), EventsState::Unknown);
        // Both notifications: on.
        p.sent(t0);
        assert_eq!(p.seen(true), None);
        assert_eq!(p.seen(false), Some(Verdict::Started));
        assert_eq!(p.judge(t0 + PROBE_TIMEOUT), None);
        assert_eq!(p.state(), EventsState::On);
        // Only the hash event (`g` missing): events stopped being enough.
        p.sent(t0);
        p.seen(true);
        assert_eq!(p.judge(t0 + PROBE_TIMEOUT / 2), None);
        assert_eq!(
            p.judge(t0 + PROBE_TIMEOUT),
            Some(Verdict::Stopped {
                hash_event: true,
                del_event: false
            })
        );
        assert_eq!(p.state(), EventsState::Off);
        // Still off: no new verdict, no repeated log line.
        p.sent(t0);
        assert_eq!(p.judge(t0 + PROBE_TIMEOUT), None);
    }

    #[test]
    fn a_server_without_events_is_off_from_the_first_probe() {
        let t0 = Instant::now();
        let mut p = Probe::default();
        p.sent(t0);
        assert_eq!(
            p.judge(t0 + PROBE_TIMEOUT),
            Some(Verdict::Off {
                hash_event: false,
                del_event: false
            })
        );
    }
}
