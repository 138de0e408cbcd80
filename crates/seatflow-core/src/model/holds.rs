//! What the schema's deviations hold back now (rule 17). Pure: the
//! deviations `schema::judge` found, and what their data checks found,
//! become a [`ContractState`]: each deviation judged harmless or holding,
//! the [`Holds`] the jobs obey, and the [`ReadShape`] the store's reads
//! adapt to.

use std::collections::{BTreeMap, HashMap};

use super::schema::{Deviation, Handling, Proof, Reach, SchemaFacts};
use super::{SeatNo, ShowtimeId};

/// What a data check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// `order_seat` rows with no `showtime_id`: each row's key, and its
    /// order's showtime when that decodes.
    NullShowtimeRows {
        rows: Vec<(String, Option<ShowtimeId>)>,
        more: bool,
    },
    /// Showtime ids on more than one row.
    DuplicateShowtimes { ids: Vec<ShowtimeId>, more: bool },
    /// Template seats one name to `order_seat`'s comparison: hall, seats.
    SeatGroups {
        groups: Vec<(i64, Vec<SeatNo>)>,
        more: bool,
    },
    /// Ids beyond BIGINT, as text.
    IdsBeyondBigint { ids: Vec<String>, more: bool },
    /// The check itself failed (why): taken as the worst it could find.
    Failed(String),
}

impl Finding {
    fn is_empty(&self) -> bool {
        match self {
            Finding::NullShowtimeRows { rows, more } => rows.is_empty() && !more,
            Finding::DuplicateShowtimes { ids, more } => ids.is_empty() && !more,
            Finding::SeatGroups { groups, more } => groups.is_empty() && !more,
            Finding::IdsBeyondBigint { ids, more } => ids.is_empty() && !more,
            Finding::Failed(_) => false,
        }
    }

    /// A few of what it found, for the report.
    fn describe(&self) -> String {
        fn few<T: std::fmt::Display>(items: &[T], more: bool) -> String {
            let shown: Vec<String> = items.iter().take(5).map(ToString::to_string).collect();
            let rest = items.len().saturating_sub(5);
            match (rest, more) {
                (0, false) => shown.join(", "),
                _ => format!("{} and more", shown.join(", ")),
            }
        }
        match self {
            Finding::NullShowtimeRows { rows, more } => {
                let keys: Vec<String> = rows
                    .iter()
                    .map(|(k, s)| match s {
                        Some(s) => format!("{k} (its order's showtime {s})"),
                        None => format!("{k} (no showtime of its order either)"),
                    })
                    .collect();
                format!("order_seat rows with no showtime_id: {}", few(&keys, *more))
            }
            Finding::DuplicateShowtimes { ids, more } => {
                format!("showtime ids on two rows: {}", few(ids, *more))
            }
            Finding::SeatGroups { groups, more } => {
                let shown: Vec<String> = groups
                    .iter()
                    .map(|(hall, seats)| format!("hall {hall}: {}", seats.join(" = ")))
                    .collect();
                format!(
                    "template seats that are one seat to order_seat: {}",
                    few(&shown, *more)
                )
            }
            Finding::IdsBeyondBigint { ids, more } => {
                format!("ids beyond BIGINT, never read: {}", few(ids, *more))
            }
            Finding::Failed(why) => format!("the data check failed ({why})"),
        }
    }
}

/// A deviation with its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub deviation: Deviation,
    /// Something is held back because of it (the metric's value 1).
    pub holds: bool,
    /// Holds nothing, but is logged as a warning (an index the reads rely
    /// on, a trigger).
    pub warns: bool,
    /// Why harmless, or what it holds and why.
    pub detail: String,
}

/// What the jobs may not write now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holds {
    /// No seat write anywhere, why.
    pub seat_writes: Option<String>,
    /// No lowering anywhere, why.
    pub lowering: Option<String>,
    /// No cancel of an expired order, why (they are still read and counted).
    pub cancels: Option<String>,
    /// `expired-orders` reads nothing: its page cannot be read as the
    /// contract has it, why.
    pub order_reads: Option<String>,
    /// Showtimes with no seat write, why.
    pub seat_writes_in: BTreeMap<ShowtimeId, String>,
    /// Showtimes with no lowering, why.
    pub lowering_in: BTreeMap<ShowtimeId, String>,
}

/// What may be written to one showtime's seats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SeatHold {
    /// Every repair the contract's reading allows.
    None,
    /// Raises only: no seat is lowered and a rebuilt hash has no field a
    /// valid occupancy does not raise.
    Lowering,
    /// Nothing.
    All,
}

impl Holds {
    /// What may be written to `showtime`'s seats, and why not more.
    pub fn seat(&self, showtime: ShowtimeId) -> (SeatHold, Option<&str>) {
        if let Some(why) = self
            .seat_writes
            .as_deref()
            .or_else(|| self.seat_writes_in.get(&showtime).map(String::as_str))
        {
            return (SeatHold::All, Some(why));
        }
        match self
            .lowering
            .as_deref()
            .or_else(|| self.lowering_in.get(&showtime).map(String::as_str))
        {
            Some(why) => (SeatHold::Lowering, Some(why)),
            None => (SeatHold::None, None),
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Holds::default()
    }

    fn everywhere(&mut self, reach: Reach, why: &str) {
        let set = |slot: &mut Option<String>| {
            slot.get_or_insert_with(|| why.to_string());
        };
        match reach {
            Reach::Lowering => set(&mut self.lowering),
            Reach::SeatWrites => set(&mut self.seat_writes),
            Reach::Cancels => set(&mut self.cancels),
            Reach::OrderReads => {
                set(&mut self.order_reads);
                set(&mut self.cancels);
            }
            Reach::SeatWritesAndCancels => {
                set(&mut self.seat_writes);
                set(&mut self.cancels);
            }
            Reach::Everything => {
                set(&mut self.seat_writes);
                set(&mut self.order_reads);
                set(&mut self.cancels);
            }
            // Decided per repair, by the audit column's width (`ReadShape`).
            Reach::LongSeatNames => {}
        }
    }
}

/// How the store's reads adapt to the schema MySQL has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadShape {
    /// `order_seat.showtime_id` may be NULL: the confirmation also reads the
    /// rows with none (an index range) and holds their seats.
    pub null_showtime_rows: bool,
    /// `order_seat.seat_no` may be NULL: the confirmation also reads a
    /// showtime's rows with none (they may hold any of its seats).
    pub null_seat_rows: bool,
    /// `showtime.id` is unsigned: pages stop at BIGINT's end.
    pub showtime_id_unsigned: bool,
    /// `ticket_order.id` is unsigned: pages stop at BIGINT's end.
    pub order_id_unsigned: bool,
    /// Template seats must be grouped under this comparison (character
    /// set, collation): `order_seat.seat_no`'s, when `hall_seat`'s own key
    /// does not make them distinct under it.
    pub seat_groups: Option<(String, String)>,
    /// `ticket_order.id` is unique by a key: the cancel need not check.
    pub order_ids_unique: bool,
    /// `showtime.id` is unique by a key: a page may find its rows by id.
    pub showtime_ids_unique: bool,
    /// `reconcile_fix.seat_no`'s width in characters (None: not read).
    pub audit_seat_chars: Option<u64>,
    /// Contract columns missing from tables that exist: the reads that use
    /// them only to order (`row_label`, `col_no`) or to show (`order_no`)
    /// leave them out.
    pub absent: Vec<(&'static str, &'static str)>,
}

impl Default for ReadShape {
    /// The contract's own shape.
    fn default() -> ReadShape {
        ReadShape {
            null_showtime_rows: false,
            null_seat_rows: false,
            showtime_id_unsigned: false,
            order_id_unsigned: false,
            seat_groups: None,
            order_ids_unique: true,
            showtime_ids_unique: true,
            audit_seat_chars: None,
            absent: Vec::new(),
        }
    }
}

/// `table.id` is unique by a key of that column alone.
fn ids_unique(facts: &SchemaFacts, table: &str) -> bool {
    facts
        .indexes
        .iter()
        .any(|i| i.table == table && i.unique && i.columns == [("id".into(), None)])
}

impl ReadShape {
    pub fn of(facts: &SchemaFacts) -> ReadShape {
        let nullable = |t: &str, c: &str| facts.column(t, c).is_none_or(|c| c.nullable);
        let unsigned = |t: &str, c: &str| {
            facts
                .column(t, c)
                .is_some_and(|c| c.column_type.contains("unsigned"))
        };
        ReadShape {
            null_showtime_rows: nullable("order_seat", "showtime_id"),
            null_seat_rows: nullable("order_seat", "seat_no"),
            showtime_id_unsigned: unsigned("showtime", "id"),
            order_id_unsigned: unsigned("ticket_order", "id"),
            seat_groups: match super::schema::seat_groups(facts) {
                Some(Proof::SeatGroups { charset, collation }) => Some((charset, collation)),
                _ => None,
            },
            order_ids_unique: ids_unique(facts, "ticket_order"),
            showtime_ids_unique: ids_unique(facts, "showtime"),
            audit_seat_chars: facts
                .column(super::schema::AUDIT_TABLE, "seat_no")
                .and_then(|c| c.max_chars),
            absent: super::schema::COLUMNS
                .iter()
                .filter(|c| facts.has_table(c.table) && facts.column(c.table, c.column).is_none())
                .map(|c| (c.table, c.column))
                .collect(),
        }
    }

    /// The column is there to read (or the schema was not read yet).
    pub fn has(&self, table: &str, column: &str) -> bool {
        !self.absent.iter().any(|(t, c)| *t == table && *c == column)
    }

    /// `hall_seat`'s order in a rebuilt hash and the seat map, by the
    /// columns it has (the contract's: `row_label, col_no, seat_no`).
    pub fn seat_order(&self, alias: &str) -> String {
        ["row_label", "col_no", "seat_no"]
            .iter()
            .filter(|c| self.has("hall_seat", c))
            .map(|c| format!("{alias}{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The audit row of a repair of `seat` fits `reconcile_fix.seat_no`.
    pub fn fits_audit(&self, seat: &str) -> bool {
        self.audit_seat_chars
            .is_none_or(|w| seat.chars().count() as u64 <= w)
    }
}

/// The schema judged: each deviation's verdict, what they hold, and the
/// shape the reads take.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContractState {
    pub judged: Vec<Judged>,
    pub holds: Holds,
    pub shape: ReadShape,
}

impl ContractState {
    /// The deviations that hold something back.
    pub fn holding(&self) -> impl Iterator<Item = &Judged> {
        self.judged.iter().filter(|j| j.holds)
    }

    /// The data checks the deviations need, each once.
    pub fn proofs(deviations: &[Deviation]) -> Vec<Proof> {
        let mut out: Vec<Proof> = Vec::new();
        for d in deviations {
            if let Handling::Proved(p) = &d.handling
                && !out.contains(p)
            {
                out.push(p.clone());
            }
        }
        out
    }

    /// Each deviation judged by what its data check found (a check with no
    /// finding counts as failed).
    pub fn judge(
        facts: &SchemaFacts,
        deviations: Vec<Deviation>,
        findings: &HashMap<Proof, Finding>,
    ) -> ContractState {
        let mut holds = Holds::default();
        let judged = deviations
            .into_iter()
            .map(|deviation| {
                let (held, detail) = match &deviation.handling {
                    Handling::Harmless(why) | Handling::Warns(why) => (false, (*why).to_string()),
                    Handling::Holds(reach, why) => {
                        holds.everywhere(*reach, why);
                        (true, format!("{why}; holds {}", reach.jobs()))
                    }
                    Handling::Proved(proof) => {
                        let failed = Finding::Failed("not run".into());
                        let finding = findings.get(proof).unwrap_or(&failed);
                        held_by(proof, finding, &mut holds)
                    }
                };
                Judged {
                    warns: matches!(deviation.handling, Handling::Warns(_)),
                    deviation,
                    holds: held,
                    detail,
                }
            })
            .collect();
        ContractState {
            judged,
            holds,
            shape: ReadShape::of(facts),
        }
    }
}

/// What a data check's finding holds, and the verdict's words.
fn held_by(proof: &Proof, finding: &Finding, holds: &mut Holds) -> (bool, String) {
    if finding.is_empty() {
        return (false, format!("harmless now: {}", nothing_found(proof)));
    }
    let found = finding.describe();
    match (proof, finding) {
        (Proof::NullShowtimeRows, Finding::NullShowtimeRows { rows, more: false })
            if rows.iter().all(|(_, s)| s.is_some()) =>
        {
            for (key, showtime) in rows {
                if let Some(s) = showtime {
                    holds
                        .lowering_in
                        .entry(*s)
                        .or_insert_with(|| format!("{key} has no showtime_id"));
                }
            }
            (
                true,
                format!("{found}: nothing is lowered in those showtimes"),
            )
        }
        (Proof::NullShowtimeRows, _) => {
            holds.everywhere(
                Reach::Lowering,
                "order_seat rows with no showtime_id whose showtime is unknown",
            );
            (true, format!("{found}: nothing is lowered anywhere"))
        }
        (Proof::DuplicateShowtimes, Finding::DuplicateShowtimes { ids, more: false }) => {
            for id in ids {
                holds
                    .seat_writes_in
                    .entry(*id)
                    .or_insert_with(|| format!("showtime id {id} is on two rows"));
            }
            (
                true,
                format!("{found}: nothing is written to those showtimes"),
            )
        }
        (Proof::DuplicateShowtimes, _) => {
            holds.everywhere(Reach::SeatWrites, "showtime ids on two rows");
            (true, format!("{found}: nothing is written to any showtime"))
        }
        // Enforced where the templates are read: a row on one seat of a
        // group holds them all.
        (Proof::SeatGroups { .. }, Finding::Failed(_)) => (
            true,
            format!("{found}; the templates are still grouped as they are read"),
        ),
        (Proof::SeatGroups { .. }, _) => (
            true,
            format!(
                "{found}: a row on one of them holds them all, and a rebuilt hash leaves them out"
            ),
        ),
        // The pages stop at BIGINT's end: those rows are never read.
        (Proof::IdsBeyondBigint { .. }, _) => (true, found),
    }
}

fn nothing_found(proof: &Proof) -> &'static str {
    match proof {
        Proof::NullShowtimeRows => "no order_seat row has a NULL showtime_id",
        Proof::DuplicateShowtimes => "no showtime id is on two rows",
        Proof::SeatGroups { .. } => "no two template seats of a hall are one seat to order_seat",
        Proof::IdsBeyondBigint { .. } => "no id is beyond BIGINT",
    }
}
