//! The contract's schema as data: its tables, every column of them as
//! `migrations/reference` creates it ([`COLUMNS`]) and the keys it relies
//! on ([`KEYS`]), each with the statement that restores it.

/// The contract's tables the reconciler reads (`hall` is never read).
pub const CONTRACT_TABLES: [&str; 4] = ["hall_seat", "showtime", "ticket_order", "order_seat"];

/// The reconciler's audit table: its `seat_no` copies the contract's.
pub const AUDIT_TABLE: &str = "reconcile_fix";

/// What the reconciler writes into `ticket_order.cancel_reason`.
pub const CANCEL_REASON_CHARS: u64 = "RECONCILE_EXPIRED".len() as u64;

use super::types::Read;

/// One column as the contract defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnSpec {
    pub table: &'static str,
    pub column: &'static str,
    /// The type as the contract writes it: `BIGINT`, `VARCHAR(16)`.
    pub sql_type: &'static str,
    pub nullable: bool,
    /// What follows the nullability: `DEFAULT 1`, `AUTO_INCREMENT`, or "".
    pub extra: &'static str,
    /// A string column's length in characters.
    pub chars: Option<u64>,
    /// How the reconciler reads it: the types it takes (`types.rs`).
    pub read: Read,
}

impl ColumnSpec {
    /// `VARCHAR(16) NOT NULL`, `TINYINT(1) NULL DEFAULT 1`: as the contract
    /// writes the column.
    pub fn definition(&self) -> String {
        self.definition_in(None)
    }

    /// [`ColumnSpec::definition`] with a character set, which MySQL takes
    /// right after the type and before the nullability.
    pub fn definition_in(&self, charset: Option<&str>) -> String {
        let mut out = self.sql_type.to_string();
        if let Some(cs) = charset {
            out.push_str(" CHARACTER SET ");
            out.push_str(cs);
        }
        out.push_str(if self.nullable { " NULL" } else { " NOT NULL" });
        if !self.extra.is_empty() {
            out.push(' ');
            out.push_str(self.extra);
        }
        out
    }
}

const fn col(
    table: &'static str,
    column: &'static str,
    sql_type: &'static str,
    nullable: bool,
    extra: &'static str,
    read: Read,
) -> ColumnSpec {
    ColumnSpec {
        table,
        column,
        sql_type,
        nullable,
        extra,
        chars: None,
        read,
    }
}

/// A `VARCHAR(chars)` column.
const fn text(
    table: &'static str,
    column: &'static str,
    sql_type: &'static str,
    chars: u64,
    nullable: bool,
    read: Read,
) -> ColumnSpec {
    ColumnSpec {
        chars: Some(chars),
        ..col(table, column, sql_type, nullable, "", read)
    }
}

/// The contract's spellings of `showtime.status`.
pub const SHOWTIME_STATUSES: &[&str] = &["SCHEDULED", "ON_SALE", "CLOSED", "CANCELLED"];
/// The contract's spellings of `ticket_order.status` (the cancel writes
/// `CANCELLED`).
pub const ORDER_STATUSES: &[&str] = &["PENDING", "PAID", "CANCELLED", "REFUNDED"];

use Read::{DateTime, Flag, Integer, Name, Spelled, Unread};

/// Every column of the contract's tables, as `migrations/reference`
/// creates them, with how the reconciler reads each.
pub const COLUMNS: [ColumnSpec; 24] = [
    col("hall_seat", "hall_id", "BIGINT", false, "", Integer),
    text("hall_seat", "seat_no", "VARCHAR(16)", 16, false, Name),
    text("hall_seat", "row_label", "VARCHAR(8)", 8, true, Name),
    col("hall_seat", "col_no", "INT", true, "", Integer),
    col(
        "hall_seat",
        "enabled",
        "TINYINT(1)",
        false,
        "DEFAULT 1",
        Flag,
    ),
    col("showtime", "id", "BIGINT", false, "", Integer),
    col("showtime", "movie_id", "BIGINT", false, "", Unread),
    col("showtime", "hall_id", "BIGINT", false, "", Integer),
    col("showtime", "starts_at", "DATETIME(3)", false, "", DateTime),
    text(
        "showtime",
        "status",
        "VARCHAR(16)",
        16,
        false,
        Spelled(SHOWTIME_STATUSES),
    ),
    col(
        "ticket_order",
        "id",
        "BIGINT",
        false,
        "AUTO_INCREMENT",
        Integer,
    ),
    text("ticket_order", "order_no", "VARCHAR(40)", 40, false, Unread),
    col("ticket_order", "user_id", "BIGINT", false, "", Unread),
    col("ticket_order", "showtime_id", "BIGINT", false, "", Integer),
    text(
        "ticket_order",
        "status",
        "VARCHAR(16)",
        16,
        false,
        Spelled(ORDER_STATUSES),
    ),
    col(
        "ticket_order",
        "expires_at",
        "DATETIME(3)",
        false,
        "",
        DateTime,
    ),
    col(
        "ticket_order",
        "created_at",
        "DATETIME(3)",
        false,
        "",
        DateTime,
    ),
    col("ticket_order", "paid_at", "DATETIME(3)", true, "", DateTime),
    col(
        "ticket_order",
        "cancelled_at",
        "DATETIME(3)",
        true,
        "",
        DateTime,
    ),
    text(
        "ticket_order",
        "cancel_reason",
        "VARCHAR(32)",
        32,
        true,
        Spelled(&["RECONCILE_EXPIRED"]),
    ),
    col("order_seat", "order_id", "BIGINT", false, "", Integer),
    col("order_seat", "showtime_id", "BIGINT", false, "", Integer),
    text("order_seat", "seat_no", "VARCHAR(16)", 16, false, Name),
    col(
        "order_seat",
        "active",
        "TINYINT(1)",
        true,
        "DEFAULT 1",
        Flag,
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
