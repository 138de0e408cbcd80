//! The contract's schema as data: its tables, every column of them as
//! `migrations/reference` creates it ([`COLUMNS`]) and the keys it relies
//! on ([`KEYS`]), each with the statement that restores it.

/// The contract's tables the reconciler reads (`hall` is never read).
pub const CONTRACT_TABLES: [&str; 4] = ["hall_seat", "showtime", "ticket_order", "order_seat"];

/// The reconciler's audit table: its `seat_no` copies the contract's.
pub const AUDIT_TABLE: &str = "reconcile_fix";

/// What the reconciler writes into `ticket_order.cancel_reason`.
pub const CANCEL_REASON_CHARS: u64 = "RECONCILE_EXPIRED".len() as u64;

/// A column's type family: the types the reconciler reads the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Any integer type (signed; an unsigned one is its own deviation).
    Integer,
    /// Any string type, with the contract's length.
    Text(u64),
    /// `DATETIME` or `TIMESTAMP`, any precision.
    DateTime,
}

/// One column as the contract defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnSpec {
    pub table: &'static str,
    pub column: &'static str,
    /// As the contract writes it: the `MODIFY` of the fix.
    pub definition: &'static str,
    pub family: Family,
    pub nullable: bool,
}

const fn col(
    table: &'static str,
    column: &'static str,
    definition: &'static str,
    family: Family,
    nullable: bool,
) -> ColumnSpec {
    ColumnSpec {
        table,
        column,
        definition,
        family,
        nullable,
    }
}

use Family::{DateTime, Integer, Text};

/// Every column of the contract's tables, as `migrations/reference`
/// creates them.
pub const COLUMNS: [ColumnSpec; 24] = [
    col("hall_seat", "hall_id", "BIGINT NOT NULL", Integer, false),
    col(
        "hall_seat",
        "seat_no",
        "VARCHAR(16) NOT NULL",
        Text(16),
        false,
    ),
    col("hall_seat", "row_label", "VARCHAR(8) NULL", Text(8), true),
    col("hall_seat", "col_no", "INT NULL", Integer, true),
    col(
        "hall_seat",
        "enabled",
        "TINYINT(1) NOT NULL DEFAULT 1",
        Integer,
        false,
    ),
    col("showtime", "id", "BIGINT NOT NULL", Integer, false),
    col("showtime", "movie_id", "BIGINT NOT NULL", Integer, false),
    col("showtime", "hall_id", "BIGINT NOT NULL", Integer, false),
    col(
        "showtime",
        "starts_at",
        "DATETIME(3) NOT NULL",
        DateTime,
        false,
    ),
    col(
        "showtime",
        "status",
        "VARCHAR(16) NOT NULL",
        Text(16),
        false,
    ),
    col(
        "ticket_order",
        "id",
        "BIGINT NOT NULL AUTO_INCREMENT",
        Integer,
        false,
    ),
    col(
        "ticket_order",
        "order_no",
        "VARCHAR(40) NOT NULL",
        Text(40),
        false,
    ),
    col("ticket_order", "user_id", "BIGINT NOT NULL", Integer, false),
    col(
        "ticket_order",
        "showtime_id",
        "BIGINT NOT NULL",
        Integer,
        false,
    ),
    col(
        "ticket_order",
        "status",
        "VARCHAR(16) NOT NULL",
        Text(16),
        false,
    ),
    col(
        "ticket_order",
        "expires_at",
        "DATETIME(3) NOT NULL",
        DateTime,
        false,
    ),
    col(
        "ticket_order",
        "created_at",
        "DATETIME(3) NOT NULL",
        DateTime,
        false,
    ),
    col(
        "ticket_order",
        "paid_at",
        "DATETIME(3) NULL",
        DateTime,
        true,
    ),
    col(
        "ticket_order",
        "cancelled_at",
        "DATETIME(3) NULL",
        DateTime,
        true,
    ),
    col(
        "ticket_order",
        "cancel_reason",
        "VARCHAR(32) NULL",
        Text(32),
        true,
    ),
    col("order_seat", "order_id", "BIGINT NOT NULL", Integer, false),
    col(
        "order_seat",
        "showtime_id",
        "BIGINT NOT NULL",
        Integer,
        false,
    ),
    col(
        "order_seat",
        "seat_no",
        "VARCHAR(16) NOT NULL",
        Text(16),
        false,
    ),
    col(
        "order_seat",
        "active",
        "TINYINT(1) NULL DEFAULT 1",
        Integer,
        true,
    ),
];

/// A key the contract relies on: a unique index over exactly these columns
/// (whole columns, no prefix), whatever its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    pub table: &'static str,
    /// The contract's name for it (the metric's `column` label).
    pub name: &'static str,
    pub columns: &'static [&'static str],
    /// The fix when it is missing.
    pub add: &'static str,
}

pub const KEYS: [KeySpec; 5] = [
    KeySpec {
        table: "hall_seat",
        name: "PRIMARY",
        columns: &["hall_id", "seat_no"],
        add: "ALTER TABLE hall_seat ADD PRIMARY KEY (hall_id, seat_no)",
    },
    KeySpec {
        table: "showtime",
        name: "PRIMARY",
        columns: &["id"],
        add: "ALTER TABLE showtime ADD PRIMARY KEY (id)",
    },
    KeySpec {
        table: "ticket_order",
        name: "PRIMARY",
        columns: &["id"],
        add: "ALTER TABLE ticket_order ADD PRIMARY KEY (id)",
    },
    KeySpec {
        table: "order_seat",
        name: "PRIMARY",
        columns: &["order_id", "seat_no"],
        add: "ALTER TABLE order_seat ADD PRIMARY KEY (order_id, seat_no)",
    },
    KeySpec {
        table: "order_seat",
        name: "uq_occupancy",
        columns: &["showtime_id", "seat_no", "active"],
        add: "ALTER TABLE order_seat ADD UNIQUE KEY uq_occupancy (showtime_id, seat_no, active)",
    },
];
