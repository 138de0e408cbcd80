//! The schema the contract relies on, judged against the one MySQL has
//! (rule 17). Pure: the store reads `information_schema` into
//! [`SchemaFacts`]; [`judge`] says how it deviates from the contract and,
//! for each deviation, what the reconciler may still do
//! ([`Handling`]). What a data check then finds decides the holds
//! (`model::holds`). The table of decisions is in
//! docs/seatflow-contract.md ("When the schema deviates"); it and
//! [`handling`] say the same things.
//!
//! Which file holds what: `spec.rs` the contract's columns and keys (data);
//! `types.rs` the types each read takes (shared with the store's
//! decoders); `uses.rs` which job reads or writes which column; here what
//! MySQL has ([`SchemaFacts`]) and the deviations' vocabulary; `judge.rs`
//! the judging and the handling of each deviation; `indexes.rs` the
//! indexes the reads rely on and the triggers on the contract's tables.

mod indexes;
mod judge;
mod spec;
pub mod types;
pub mod uses;

use std::fmt;

pub use self::indexes::INDEXES;
pub use self::judge::{handling, judge, seat_groups};
pub use self::spec::{
    AUDIT_TABLE, CANCEL_REASON_CHARS, COLUMNS, CONTRACT_TABLES, ColumnSpec, KEYS, KeySpec,
    ORDER_STATUSES, SHOWTIME_STATUSES,
};
pub use self::types::Read;

/// One column as `information_schema.COLUMNS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnFacts {
    pub table: String,
    pub column: String,
    /// `DATA_TYPE`, lower case: `bigint`, `varchar`.
    pub data_type: String,
    /// `COLUMN_TYPE` as MySQL gives it: `bigint(20) unsigned`, an ENUM's
    /// members as spelled (`enum('PAID','PENDING')`).
    pub column_type: String,
    pub nullable: bool,
    /// `CHARACTER_MAXIMUM_LENGTH` (characters) of a string type.
    pub max_chars: Option<u64>,
    pub charset: Option<String>,
    pub collation: Option<String>,
}

/// One index as `information_schema.STATISTICS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFacts {
    pub table: String,
    pub name: String,
    pub unique: bool,
    /// In order: each column, and its prefix length when only a prefix is indexed.
    pub columns: Vec<(String, Option<u64>)>,
}

/// One trigger as `information_schema.TRIGGERS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerFacts {
    pub table: String,
    pub name: String,
    /// `BEFORE` or `AFTER`.
    pub timing: String,
    /// `INSERT`, `UPDATE` or `DELETE`.
    pub event: String,
}

/// One CHECK constraint as `information_schema` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckFacts {
    pub table: String,
    pub name: String,
    /// `CHECK_CLAUSE`: identifiers quoted with backticks.
    pub clause: String,
}

/// The schema MySQL has for the contract's tables and the audit table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchemaFacts {
    pub columns: Vec<ColumnFacts>,
    pub indexes: Vec<IndexFacts>,
    /// Triggers on the contract's tables.
    pub triggers: Vec<TriggerFacts>,
    /// CHECK constraints on the contract's tables (MariaDB's JSON type is
    /// one: `json_valid(col)`).
    pub checks: Vec<CheckFacts>,
}

impl SchemaFacts {
    pub fn column(&self, table: &str, column: &str) -> Option<&ColumnFacts> {
        self.columns
            .iter()
            .find(|c| c.table == table && c.column == column)
    }

    pub fn has_table(&self, table: &str) -> bool {
        self.columns.iter().any(|c| c.table == table)
    }

    /// A unique index over exactly `columns`, no prefix.
    fn has_unique(&self, table: &str, columns: &[&str]) -> bool {
        self.indexes.iter().any(|i| {
            i.table == table
                && i.unique
                && i.columns.len() == columns.len()
                && i.columns
                    .iter()
                    .zip(columns)
                    .all(|((c, prefix), want)| c == want && prefix.is_none())
        })
    }

    /// Some index (unique or not) whose first column is `column`: a data
    /// check on it is an index range.
    pub fn leads_an_index(&self, table: &str, column: &str) -> bool {
        self.leads_with(table, &[column])
    }

    /// Some index (unique or not) whose first columns are `columns`, in
    /// order, whole or prefixed: a read by them is an index range.
    pub fn leads_with(&self, table: &str, columns: &[&str]) -> bool {
        self.indexes.iter().any(|i| {
            i.table == table
                && i.columns.len() >= columns.len()
                && i.columns
                    .iter()
                    .zip(columns)
                    .all(|((c, _), want)| c == want)
        })
    }
}

/// How a schema deviates (the metric's `kind` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviationKind {
    MissingTable,
    /// A column the contract has is not there.
    Missing,
    /// Another type family (a string where a number is read, …).
    Type,
    /// An unsigned integer where the contract has a signed one.
    Unsigned,
    /// NULL allowed where the contract says NOT NULL.
    Nullable,
    /// NOT NULL where the contract allows NULL.
    NotNull,
    /// Another length of a string column.
    Length,
    /// A character set in which the exact comparisons see other bytes.
    Charset,
    /// `hall_seat.seat_no` compared otherwise than `order_seat.seat_no`.
    Collation,
    /// A key the contract relies on is missing (or covers other columns,
    /// or a prefix).
    MissingKey,
    /// An index a read relies on to be a range is missing: the read is
    /// slow, not wrong.
    Index,
    /// A trigger on a contract table: it may refuse or rewrite a write.
    Trigger,
    /// A CHECK constraint on a contract table: it may refuse a write.
    Check,
}

impl DeviationKind {
    pub fn label(self) -> &'static str {
        match self {
            DeviationKind::MissingTable => "missing_table",
            DeviationKind::Missing => "missing",
            DeviationKind::Type => "type",
            DeviationKind::Unsigned => "unsigned",
            DeviationKind::Nullable => "nullable",
            DeviationKind::NotNull => "not_null",
            DeviationKind::Length => "length",
            DeviationKind::Charset => "charset",
            DeviationKind::Collation => "collation",
            DeviationKind::MissingKey => "missing_key",
            DeviationKind::Index => "index",
            DeviationKind::Trigger => "trigger",
            DeviationKind::Check => "check",
        }
    }
}

/// A data check that decides whether a deviation holds anything now: each
/// an index range or a read of the (small) template table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Proof {
    /// `order_seat` rows whose `showtime_id` is NULL (an index range).
    NullShowtimeRows,
    /// Showtime ids on more than one row (`showtime` has no unique id).
    DuplicateShowtimes,
    /// Enabled template seats of one hall that `order_seat.seat_no`'s
    /// comparison takes as one name: in this character set and collation.
    SeatGroups { charset: String, collation: String },
    /// Ids beyond BIGINT in an unsigned key column (`showtime`,
    /// `ticket_order`): those rows are never read.
    IdsBeyondBigint { table: &'static str },
}

/// What a deviation may touch when it is not harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reach {
    /// No seat is lowered anywhere (raises MySQL proves go on).
    Lowering,
    /// No seat write anywhere (the reads it would rest on cannot be
    /// trusted): the four seat jobs do not sweep, and `expired-orders`
    /// releases no seat.
    SeatWrites,
    /// No expired order is cancelled (they are still read and counted).
    Cancels,
    /// `expired-orders` reads nothing: its page cannot be read as the
    /// contract has it.
    OrderReads,
    /// Seat writes and cancels.
    SeatWritesAndCancels,
    /// Seat writes, and `expired-orders` wholly.
    Everything,
    /// Repairs of seats whose name does not fit the audit's column.
    LongSeatNames,
}

impl Reach {
    /// The jobs it holds, in words.
    pub fn jobs(self) -> &'static str {
        const SEAT: &str = "paid-seats, missing-hashes, orphan-locks, sold-orphans and expired-orders' seat releases";
        match self {
            Reach::Lowering => "every lowering of a seat (raises go on)",
            Reach::SeatWrites => SEAT,
            Reach::Cancels => "expired-orders' cancels",
            Reach::OrderReads => "expired-orders",
            Reach::SeatWritesAndCancels => {
                "paid-seats, missing-hashes, orphan-locks, sold-orphans and expired-orders' cancels and releases"
            }
            Reach::Everything => {
                "every job: paid-seats, missing-hashes, orphan-locks, sold-orphans and expired-orders"
            }
            Reach::LongSeatNames => "repairs of seats whose name is longer than the audit's column",
        }
    }
}

/// What the reconciler does about a deviation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handling {
    /// Harmless whatever the data: how the reads take it.
    Harmless(&'static str),
    /// Holds nothing, but the operator should know (logged as a warning,
    /// shown as 0): a read that is slow without an index, a trigger that
    /// may refuse or rewrite a write.
    Warns(&'static str),
    /// Harmless while the data check finds nothing; what it finds is held
    /// (`model::holds` decides how far).
    Proved(Proof),
    /// Holds this regardless of the data, and why.
    Holds(Reach, std::borrow::Cow<'static, str>),
}

/// One way the schema deviates from the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deviation {
    pub table: &'static str,
    /// A column, or a key's contract name (`PRIMARY`, `uq_occupancy`), or
    /// empty for a missing table.
    pub column: &'static str,
    pub kind: DeviationKind,
    /// What MySQL has: `bigint(20) unsigned NULL`, `utf8mb4_bin`.
    pub found: String,
    /// What the contract says.
    pub expected: String,
    /// The statement that would bring the schema back to the contract.
    pub fix: String,
    pub handling: Handling,
}

impl fmt::Display for Deviation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.column.is_empty() {
            self.table.to_string()
        } else {
            format!("{}.{}", self.table, self.column)
        };
        write!(
            f,
            "{what} ({}): {}, the contract has {}",
            self.kind.label(),
            self.found,
            self.expected
        )
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_reads;
