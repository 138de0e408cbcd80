//! Redis keyspace notifications, read: which showtime a message is about,
//! and whether the server sends them at all (pure; the subscription itself
//! is `store::redis::notify`).
//!
//! The reconciler never sets `notify-keyspace-events` (it is the server
//! owner's setting, and managed Redis often forbids `CONFIG SET`). It finds
//! out instead: it writes a probe hash of its own (`HSET`, then `DEL`) and
//! watches for the two notifications. Both seen: events are on. Not both
//! within [`PROBE_TIMEOUT`]: off. A probe is sent every [`PROBE_EVERY`], so
//! events that stop (a config change, a failover to a server set up
//! differently) are noticed within a minute and counted as a gap.
//!
//! In Redis Cluster mode each primary publishes only its own keys' events
//! and has its own setting: there is one probe key per primary, in a slot
//! it owns, and events are on only when every primary answered its probe.
//!
//! Our own repairs write seat hashes too, and each write is an event: a
//! check of it would find nothing (the repair was planned from MySQL just
//! before). Our scripts bracket their seat writes with a key of their own,
//! `reconcile:writing:{S}`, created before the first and deleted after the
//! last ([`OwnWrites`]); a script runs atomically, and one connection's
//! notifications arrive in the order they were published, so the seat
//! events between that key's `hset` and its `del` are exactly ours. A
//! customer's write just before or after the script is outside the bracket
//! and is checked as always.

use std::collections::HashSet;
use std::time::{Duration, Instant};

pub use crate::keys::{Channels, glob_escape};
use crate::model::ShowtimeId;

/// How often the probe is written.
pub const PROBE_EVERY: Duration = Duration::from_secs(60);

/// How long a probe's notifications may take before events count as off.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The events on a seat hash that can leave drift behind: a seat written or
/// removed, the hash deleted, expired or evicted.
pub const SEAT_EVENTS: [&str; 5] = ["hset", "hdel", "del", "expired", "evicted"];

/// The flags docs/change-detection.md asks for: keyspace channels (`K`) of hash (`h`) and
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
    /// The `HSET` (true) or `DEL` (false) of our probe key number `key`
    /// (one per primary) arrived.
    Probe { key: usize, hash_event: bool },
    /// One of our repair scripts began (`started`) or ended its writes to
    /// the showtime's seat hash (the `hset` and `del` of its writing key).
    OwnWrites { showtime: ShowtimeId, started: bool },
    /// Not ours to act on (a key under the pattern that names no showtime).
    Ignored,
}

/// A keyspace message, read ([`Channels`] names the channels).
impl Channels {
    /// Reads one message: `channel` as delivered, `event` its payload.
    pub fn read(&self, channel: &str, event: &str) -> Message {
        let Some(key) = channel.strip_prefix(&self.space) else {
            return Message::Ignored;
        };
        if let Some(probe) = self.probe_keys.iter().position(|k| k == key) {
            return match event {
                "hset" => Message::Probe {
                    key: probe,
                    hash_event: true,
                },
                "del" => Message::Probe {
                    key: probe,
                    hash_event: false,
                },
                _ => Message::Ignored,
            };
        }
        if let Some(showtime) = showtime_in(key, &self.writing_prefix) {
            return match event {
                "hset" => Message::OwnWrites {
                    showtime,
                    started: true,
                },
                "del" => Message::OwnWrites {
                    showtime,
                    started: false,
                },
                _ => Message::Ignored,
            };
        }
        let Some(id) = showtime_in(key, &self.seat_prefix) else {
            return Message::Ignored;
        };
        if SEAT_EVENTS.contains(&event) {
            Message::Seat(id)
        } else {
            Message::SeatOther(id)
        }
    }
}

/// The showtime of `{prefix}...:{S}`, exactly as `Keys` writes it.
fn showtime_in(key: &str, prefix: &str) -> Option<ShowtimeId> {
    key.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('{'))
        .and_then(|rest| rest.strip_suffix('}'))
        .and_then(|id| id.parse::<ShowtimeId>().ok())
        .filter(|id| *id > 0)
}

/// The showtimes whose seat hash one of our scripts is writing, as told by
/// the messages of one subscription (a new subscription starts empty: a
/// script is atomic, so none can be half seen at its start).
#[derive(Debug, Default)]
pub struct OwnWrites {
    writing: HashSet<ShowtimeId>,
}

impl OwnWrites {
    /// Takes in `message`; true when it is a seat event of our own write,
    /// for which no check is asked.
    pub fn ours(&mut self, message: Message) -> bool {
        match message {
            Message::OwnWrites { showtime, started } => {
                if started {
                    self.writing.insert(showtime);
                } else {
                    self.writing.remove(&showtime);
                }
                false
            }
            Message::Seat(s) | Message::SeatOther(s) => self.writing.contains(&s),
            Message::Probe { .. } | Message::Ignored => false,
        }
    }
}

/// Whether the server sends the notifications we need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventsState {
    /// Not known yet: no probe has been judged since the subscription began.
    Unknown,
    /// Both probe notifications arrived.
    On,
    /// A probe went unanswered (or half answered: `K` on, but not `h` or
    /// `g`), in a cluster by any one primary.
    Off,
    /// No subscription could be made or it was lost (a failed connection,
    /// in a cluster to any one primary, or a topology that could not be
    /// read): the sweep alone finds drift until one is made again.
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

/// Whether a server's `notify-keyspace-events` flags send what the checks
/// need: keyspace notifications (`K`) of hash commands (`h`) and of generic
/// ones such as `DEL` (`g`); `A` stands for every class. What a dry run
/// goes by, since it writes no probe (rule 5).
pub fn flags_send_what_checks_need(flags: &str) -> bool {
    let has = |c: char| flags.contains(c);
    has('K') && (has('A') || (has('h') && has('g')))
}

/// The probe's bookkeeping: when one was sent, to how many keys (one per
/// primary), which of each key's two notifications came back, and the
/// verdict.
#[derive(Debug, Clone)]
pub struct Probe {
    state: EventsState,
    sent_at: Option<Instant>,
    answers: Vec<Answer>,
}

/// What one probe key's server sent back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Answer {
    pub hash_event: bool,
    pub del_event: bool,
}

impl Answer {
    fn whole(self) -> bool {
        self.hash_event && self.del_event
    }
}

/// A change of verdict worth a log line (and, for `Stopped`, a gap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Events arrive (first time, or again) from every probed server.
    Started,
    /// Events are off from the start: `answers`, one per probe key.
    Off { answers: Vec<Answer> },
    /// Events were on and stopped.
    Stopped { answers: Vec<Answer> },
}

impl Verdict {
    /// Whether every probe key's `hset`, and every one's `del`, arrived.
    pub fn events_seen(&self) -> (bool, bool) {
        match self {
            Verdict::Started => (true, true),
            Verdict::Off { answers } | Verdict::Stopped { answers } => (
                answers.iter().all(|a| a.hash_event),
                answers.iter().all(|a| a.del_event),
            ),
        }
    }

    /// The probe keys (by number) whose server did not answer in full.
    pub fn silent(&self) -> Vec<usize> {
        match self {
            Verdict::Started => Vec::new(),
            Verdict::Off { answers } | Verdict::Stopped { answers } => answers
                .iter()
                .enumerate()
                .filter(|(_, a)| !a.whole())
                .map(|(i, _)| i)
                .collect(),
        }
    }
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            state: EventsState::Unknown,
            sent_at: None,
            answers: Vec::new(),
        }
    }
}

impl Probe {
    pub fn state(&self) -> EventsState {
        self.state
    }

    /// A probe is written at `now` to `keys` probe keys (one per primary).
    pub fn sent(&mut self, now: Instant, keys: usize) {
        self.sent_at = Some(now);
        self.answers = vec![Answer::default(); keys];
    }

    /// One of probe key `key`'s notifications arrived. Events are on once
    /// every key's both did.
    pub fn seen(&mut self, key: usize, hash_event: bool) -> Option<Verdict> {
        self.sent_at?;
        let answer = self.answers.get_mut(key)?;
        if hash_event {
            answer.hash_event = true;
        } else {
            answer.del_event = true;
        }
        if self.answers.iter().all(|a| a.whole()) {
            self.sent_at = None;
            if self.state != EventsState::On {
                self.state = EventsState::On;
                return Some(Verdict::Started);
            }
        }
        None
    }

    /// Judges an outstanding probe at `now`: past [`PROBE_TIMEOUT`] without
    /// both notifications of every key, events are off.
    pub fn judge(&mut self, now: Instant) -> Option<Verdict> {
        let sent_at = self.sent_at?;
        if now.saturating_duration_since(sent_at) < PROBE_TIMEOUT {
            return None;
        }
        self.sent_at = None;
        let answers = std::mem::take(&mut self.answers);
        let was = self.state;
        self.state = EventsState::Off;
        match was {
            EventsState::On => Some(Verdict::Stopped { answers }),
            EventsState::Off => None,
            _ => Some(Verdict::Off { answers }),
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
        Channels::new(3, "sf[1]:", vec!["sf[1]:reconcile:events-probe:{a}".into()])
    }

    #[test]
    fn the_servers_flags_say_whether_a_dry_run_gets_events() {
        for on in ["KA", "AK", "Kgh", "KEA", "Khgx"] {
            assert!(flags_send_what_checks_need(on), "{on}");
        }
        for off in ["", "EA", "Kh", "Kg", "Ex", "K$lszxe"] {
            assert!(!flags_send_what_checks_need(off), "{off}");
        }
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
        assert_eq!(
            c.patterns(),
            [
                "__keyspace@3__:sf\\[1\\]:seat:{*}",
                "__keyspace@3__:sf\\[1\\]:reconcile:writing:{*}"
            ]
        );
        let probe = &c.probe_channels()[0];
        assert_eq!(
            c.read(probe, "hset"),
            Message::Probe {
                key: 0,
                hash_event: true
            }
        );
        assert_eq!(
            c.read(probe, "del"),
            Message::Probe {
                key: 0,
                hash_event: false
            }
        );
        assert_eq!(c.read(probe, "expire"), Message::Ignored);
    }

    /// The seat events between a script's writing-key `hset` and `del` are
    /// ours; a customer's just before or after, another showtime's in
    /// between (another primary's, merged), and any once the bracket has
    /// closed are not.
    #[test]
    fn seat_events_inside_a_scripts_bracket_are_ours_and_no_others() {
        let c = channels();
        let seat = |s: i64, e: &str| c.read(&format!("__keyspace@3__:sf[1]:seat:{{{s}}}"), e);
        let writing = |s: i64, e: &str| {
            c.read(
                &format!("__keyspace@3__:sf[1]:reconcile:writing:{{{s}}}"),
                e,
            )
        };
        assert_eq!(
            writing(42, "hset"),
            Message::OwnWrites {
                showtime: 42,
                started: true
            }
        );
        assert_eq!(writing(42, "expire"), Message::Ignored);
        let mut own = OwnWrites::default();
        let heard: Vec<bool> = [
            seat(42, "hset"),
            writing(42, "hset"),
            seat(42, "hset"),
            seat(7, "hset"),
            seat(42, "hset"),
            seat(42, "hdel"),
            writing(42, "del"),
            seat(42, "hset"),
            seat(42, "del"),
        ]
        .into_iter()
        .map(|m| own.ours(m))
        .collect();
        assert_eq!(
            heard,
            [false, false, true, false, true, true, false, false, false]
        );
        assert!(!own.ours(c.read(&c.probe_channels()[0], "hset")));
    }

    #[test]
    fn each_primarys_probe_key_is_told_apart() {
        let keys: Vec<String> = ["p0", "p1", "p2"]
            .iter()
            .map(|t| format!("sf:reconcile:events-probe:{{{t}}}:host"))
            .collect();
        let c = Channels::new(0, "sf:", keys.clone());
        assert_eq!(c.probe_keys(), keys);
        let channels = c.probe_channels();
        assert_eq!(
            channels[2],
            "__keyspace@0__:sf:reconcile:events-probe:{p2}:host"
        );
        for (i, channel) in channels.iter().enumerate() {
            assert_eq!(
                c.read(channel, "del"),
                Message::Probe {
                    key: i,
                    hash_event: false
                }
            );
        }
        assert_eq!(
            c.read("__keyspace@0__:sf:reconcile:events-probe:{p3}:host", "del"),
            Message::Ignored
        );
    }

    #[test]
    fn the_probe_judges_on_off_and_stopped() {
        let t0 = Instant::now();
        let mut p = Probe::default();
        assert_eq!(p.state(), EventsState::Unknown);
        // Both notifications: on.
        p.sent(t0, 1);
        assert_eq!(p.seen(0, true), None);
        assert_eq!(p.seen(0, false), Some(Verdict::Started));
        assert_eq!(p.judge(t0 + PROBE_TIMEOUT), None);
        assert_eq!(p.state(), EventsState::On);
        // Only the hash event (`g` missing): events stopped being enough.
        p.sent(t0, 1);
        p.seen(0, true);
        assert_eq!(p.judge(t0 + PROBE_TIMEOUT / 2), None);
        let stopped = p.judge(t0 + PROBE_TIMEOUT).unwrap();
        assert_eq!(
            stopped,
            Verdict::Stopped {
                answers: vec![Answer {
                    hash_event: true,
                    del_event: false
                }]
            }
        );
        assert_eq!(stopped.events_seen(), (true, false));
        assert_eq!(stopped.silent(), [0]);
        assert_eq!(p.state(), EventsState::Off);
        // Still off: no new verdict, no repeated log line.
        p.sent(t0, 1);
        assert_eq!(p.judge(t0 + PROBE_TIMEOUT), None);
    }

    #[test]
    fn a_server_without_events_is_off_from_the_first_probe() {
        let t0 = Instant::now();
        let mut p = Probe::default();
        p.sent(t0, 1);
        let off = p.judge(t0 + PROBE_TIMEOUT).unwrap();
        assert_eq!(
            off,
            Verdict::Off {
                answers: vec![Answer::default()]
            }
        );
        assert_eq!(off.events_seen(), (false, false));
    }

    #[test]
    fn events_are_on_only_when_every_primary_answered() {
        let t0 = Instant::now();
        let mut p = Probe::default();
        p.sent(t0, 3);
        // Two primaries of three answer in full, the third only half.
        for key in [0, 2] {
            assert_eq!(p.seen(key, true), None);
            assert_eq!(p.seen(key, false), None);
        }
        assert_eq!(p.seen(1, true), None);
        assert_eq!(p.state(), EventsState::Unknown);
        let off = p.judge(t0 + PROBE_TIMEOUT).unwrap();
        assert_eq!(off.silent(), [1]);
        assert_eq!(off.events_seen(), (true, false));
        assert_eq!(p.state(), EventsState::Off);
        // All three answer: on; a key out of range counts for nothing.
        p.sent(t0, 3);
        assert_eq!(p.seen(7, true), None);
        for key in 0..3 {
            p.seen(key, false);
        }
        assert_eq!(p.seen(0, true), None);
        assert_eq!(p.seen(1, true), None);
        assert_eq!(p.seen(2, true), Some(Verdict::Started));
        assert_eq!(p.state(), EventsState::On);
        // Then one primary falls silent: stopped, naming it.
        p.sent(t0, 3);
        for key in [0, 1] {
            p.seen(key, true);
            p.seen(key, false);
        }
        let stopped = p.judge(t0 + PROBE_TIMEOUT).unwrap();
        assert!(matches!(stopped, Verdict::Stopped { .. }), "{stopped:?}");
        assert_eq!(stopped.silent(), [2]);
        assert_eq!(stopped.events_seen(), (false, false));
    }
}
