//! Safety rule 4, pure: orphans are suspects first. A seat seen orphaned is
//! recorded with its first sighting (Redis clock) and repaired only after
//! `reconcile.orphan_grace` of continuous orphanhood; order activity on the
//! seat since then restarts the clock.

use std::collections::{HashMap, HashSet};

use crate::model::{Kind, RowsMark, SeatNo, SeatRepair, SeatRows, SeatState};

/// How far apart the Redis clock (suspect times) and the application's clock
/// (order timestamps in MySQL) may be, at most: the margin of a record
/// without a mark of the seat's rows.
pub const CLOCK_SLACK_MS: i64 = 5_000;

/// True when no order came or went on a seat since it was first seen
/// orphaned (with clock slack): only then was it orphaned *continuously*.
/// Without this, a hold that was released and taken again between two runs
/// (A holds, A's order commits and is cancelled, B holds) would inherit A's
/// old first-seen time and B's in-flight hold could be released.
fn orphaned_throughout(first_seen_ms: i64, last_activity_ms: Option<i64>) -> bool {
    last_activity_ms.is_none_or(|t| t < first_seen_ms - CLOCK_SLACK_MS)
}

impl Suspect {
    /// Rule 4's "continuously" for this record, given the seat's rows now.
    /// A record with a mark was written after MySQL showed its rows so:
    /// orphaned throughout while they are still exactly so, in MySQL's own
    /// terms, with no clock compared (the application's may be off by any
    /// amount, and an order that ended just before the sighting costs no
    /// slack). A record without one (a pass's first sighting) falls back to
    /// the order times against the clocks' slack.
    pub fn orphaned_throughout(&self, now: &SeatRows) -> bool {
        match self.rows {
            Some(mark) => mark == now.mark,
            None => orphaned_throughout(self.first_seen_ms, now.last_activity_ms),
        }
    }

    /// A record started over by a confirmation that read `rows`, at `now_ms`:
    /// a Redis time taken *after* that read, so that every order write the
    /// mark does not show came after the first sighting and changes it.
    pub fn seen_with(state: SeatState, now_ms: i64, rows: &SeatRows) -> Suspect {
        Suspect {
            state,
            first_seen_ms: now_ms,
            rows: Some(rows.mark),
        }
    }
}

/// A suspect record: the orphaned value first seen at `first_seen_ms`
/// (Redis server time), and the mark of the seat's rows when a confirmation
/// read them before that time. Stored in `{prefix}reconcile:suspect:{S}` as
/// `"<value>@<ms>"`, or `"<value>@<ms>@<mark>"` (16 hex digits). A reader
/// that does not know the mark reads the record as unreadable and starts
/// it over: the safe direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suspect {
    pub state: SeatState,
    pub first_seen_ms: i64,
    pub rows: Option<RowsMark>,
}

impl Suspect {
    pub fn encode(&self) -> String {
        match self.rows {
            None => format!("{}@{}", self.state.as_redis(), self.first_seen_ms),
            Some(m) => format!(
                "{}@{}@{}",
                self.state.as_redis(),
                self.first_seen_ms,
                m.encode()
            ),
        }
    }

    pub fn decode(raw: &str) -> Option<Suspect> {
        let (state, rest) = raw.split_once('@')?;
        let (ms, rows) = match rest.split_once('@') {
            None => (rest, None),
            Some((ms, mark)) => (ms, Some(RowsMark::decode(mark)?)),
        };
        Some(Suspect {
            state: SeatState::from_redis(state)?,
            first_seen_ms: ms.parse().ok()?,
            rows,
        })
    }
}

/// The orphaned value a grace-period job watches.
pub fn suspect_state(kind: Kind) -> Option<SeatState> {
    match kind {
        Kind::OrphanLocks => Some(SeatState::Locked),
        Kind::SoldOrphans => Some(SeatState::Sold),
        _ => None,
    }
}

/// What to do with one showtime's orphan candidates of one kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GracePlan {
    /// Orphaned continuously for at least the grace period: repair now.
    pub ready: Vec<SeatRepair>,
    /// Still inside the grace period.
    pub deferred: Vec<SeatRepair>,
    /// New or restarted suspect records to write.
    pub record: Vec<(SeatNo, Suspect)>,
    /// Suspect records of this kind whose seat is no longer an orphan.
    pub clear: Vec<SeatNo>,
    /// How long until the first deferred seat's grace ends (ms from
    /// `now_ms`), when any is deferred: when a check would find it ready.
    pub ends_in_ms: Option<i64>,
    /// The same for the seats that had a record already (not `record`'s).
    pub known_ends_in_ms: Option<i64>,
}

/// Splits candidates into ready and deferred. A candidate is ready when a
/// suspect record with the same orphaned value is at least `grace_ms` old (or
/// the grace is zero). Records of this kind whose seat is no longer a
/// candidate, and unreadable records, are cleared.
pub fn apply_grace(
    kind: Kind,
    candidates: Vec<SeatRepair>,
    suspects: &HashMap<SeatNo, String>,
    now_ms: i64,
    grace_ms: i64,
) -> GracePlan {
    let mut plan = GracePlan::default();
    let Some(watched) = suspect_state(kind) else {
        plan.ready = candidates;
        return plan;
    };
    let candidate_seats: HashSet<&str> = candidates.iter().map(|c| c.seat.as_str()).collect();
    for (seat, raw) in suspects {
        let stale = match Suspect::decode(raw) {
            None => true,
            Some(s) => s.state == watched && !candidate_seats.contains(seat.as_str()),
        };
        if stale {
            plan.clear.push(seat.clone());
        }
    }
    plan.clear.sort();
    for candidate in candidates {
        let known = suspects
            .get(&candidate.seat)
            .and_then(|raw| Suspect::decode(raw))
            .filter(|s| Some(s.state) == candidate.observed);
        match known {
            _ if grace_ms <= 0 => plan.ready.push(candidate),
            Some(s) if now_ms.saturating_sub(s.first_seen_ms) >= grace_ms => {
                plan.ready.push(candidate)
            }
            Some(s) => {
                let ends_in = s.first_seen_ms.saturating_add(grace_ms) - now_ms;
                plan.ends_within(ends_in);
                plan.known_ends_in_ms =
                    Some(plan.known_ends_in_ms.map_or(ends_in, |m| m.min(ends_in)));
                plan.deferred.push(candidate)
            }
            None => {
                plan.ends_within(grace_ms);
                let state = candidate.observed.unwrap_or(watched);
                plan.record.push((
                    candidate.seat.clone(),
                    Suspect {
                        state,
                        first_seen_ms: now_ms,
                        rows: None,
                    },
                ));
                plan.deferred.push(candidate);
            }
        }
    }
    plan
}

impl GracePlan {
    fn ends_within(&mut self, ms: i64) {
        self.ends_in_ms = Some(self.ends_in_ms.map_or(ms, |m| m.min(ms)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::orphan;
    use SeatState::*;

    fn hash(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn grace_defers_new_suspects_and_releases_old_ones() {
        let suspects = hash(&[
            ("A-1", "1@1000"),
            ("A-2", "1@9000"),
            ("A-9", "1@1"),
            ("B-1", "2@1"),
        ]);
        let plan = apply_grace(
            Kind::OrphanLocks,
            vec![orphan("A-1"), orphan("A-2"), orphan("A-3")],
            &suspects,
            10_000,
            5_000,
        );
        assert_eq!(plan.ready, vec![orphan("A-1")]);
        assert_eq!(plan.deferred, vec![orphan("A-2"), orphan("A-3")]);
        assert_eq!(
            plan.record,
            vec![(
                "A-3".into(),
                Suspect {
                    state: Locked,
                    first_seen_ms: 10_000,
                    rows: None,
                }
            )]
        );
        // A-9 is no longer an orphan lock; B-1 belongs to sold-orphans.
        assert_eq!(plan.clear, vec!["A-9".to_string()]);
        // A-2, seen at 9,000, is ready first: at 14,000 (A-3 at 15,000).
        assert_eq!(plan.ends_in_ms, Some(4_000));
        assert_eq!(plan.known_ends_in_ms, Some(4_000));
        // A new suspect alone: its grace ends in a whole grace.
        let new = apply_grace(
            Kind::OrphanLocks,
            vec![orphan("A-3")],
            &suspects,
            10_000,
            5_000,
        );
        assert_eq!((new.ends_in_ms, new.known_ends_in_ms), (Some(5_000), None));
    }

    #[test]
    fn a_suspect_of_another_value_restarts_the_clock() {
        let suspects = hash(&[("A-1", "2@0")]);
        let plan = apply_grace(
            Kind::OrphanLocks,
            vec![orphan("A-1")],
            &suspects,
            10_000,
            5_000,
        );
        assert!(plan.ready.is_empty());
        assert_eq!(plan.record[0].1.first_seen_ms, 10_000);
    }

    #[test]
    fn zero_grace_repairs_at_once() {
        let plan = apply_grace(
            Kind::OrphanLocks,
            vec![orphan("A-1")],
            &HashMap::new(),
            5,
            0,
        );
        assert_eq!(plan.ready, vec![orphan("A-1")]);
        assert!(plan.record.is_empty());
    }

    #[test]
    fn order_activity_after_first_seen_breaks_continuity() {
        assert!(orphaned_throughout(100_000, None));
        assert!(orphaned_throughout(
            100_000,
            Some(100_000 - CLOCK_SLACK_MS - 1)
        ));
        assert!(!orphaned_throughout(
            100_000,
            Some(100_000 - CLOCK_SLACK_MS)
        ));
        assert!(!orphaned_throughout(100_000, Some(150_000)));
    }

    #[test]
    fn a_marked_record_is_continuous_while_the_rows_are_as_marked_whatever_the_clocks() {
        let seen = 100_000;
        let rows = SeatRows {
            last_activity_ms: Some(seen - 1_000),
            mark: RowsMark(42),
        };
        let marked = Suspect::seen_with(Locked, seen, &rows);
        assert_eq!(marked.first_seen_ms, seen);
        // An order that ended a second before the sighting: no slack.
        assert!(marked.orphaned_throughout(&rows));
        // The rows changed, with times the clocks would have passed (an
        // application clock an hour behind).
        let changed = SeatRows {
            last_activity_ms: Some(seen - 3_600_000),
            mark: RowsMark(43),
        };
        assert!(!marked.orphaned_throughout(&changed));
        // Without a mark, the clocks decide, with their slack.
        let unmarked = Suspect {
            rows: None,
            ..marked
        };
        assert!(!unmarked.orphaned_throughout(&rows));
        assert!(unmarked.orphaned_throughout(&changed));
    }

    #[test]
    fn suspects_round_trip() {
        let s = Suspect {
            state: Sold,
            first_seen_ms: 1_700_000_000_123,
            rows: None,
        };
        assert_eq!(s.encode(), "2@1700000000123");
        assert_eq!(Suspect::decode(&s.encode()), Some(s));
        let marked = Suspect {
            rows: Some(RowsMark(u64::MAX - 7)),
            ..s
        };
        assert_eq!(marked.encode(), "2@1700000000123@fffffffffffffff8");
        assert_eq!(Suspect::decode(&marked.encode()), Some(marked));
        assert_eq!(Suspect::decode("garbage"), None);
        assert_eq!(Suspect::decode("7@1"), None);
        assert_eq!(Suspect::decode("1@1@"), None);
        assert_eq!(Suspect::decode("1@1@xyz"), None);
    }
}
