//! What the reads and the cancel rely on besides the columns (rule 17):
//! the indexes that make the reads ranges ([`INDEXES`]), and the triggers
//! and CHECK constraints on the contract's tables, which may refuse or
//! rewrite the cancel's writes. None holds anything, but one: a missing
//! index makes a read slow, not wrong, and every cancel fails alone and is
//! read back before its seats are released. Each is reported as a warning,
//! with what it costs and the statement that fixes it. The one that holds:
//! a CHECK that no cancel can pass (MariaDB's JSON type on a column the
//! cancel writes a word into).

use super::{COLUMNS, Deviation, DeviationKind, Handling, Reach, SchemaFacts};

/// An index a read relies on: some index (unique or not, whatever its
/// name) whose first columns are `columns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexSpec {
    pub table: &'static str,
    pub columns: &'static [&'static str],
    /// The fix's index name (another is chosen when it is taken).
    pub name: &'static str,
    /// The reads that use it, and what they cost without it.
    pub without: &'static str,
}

pub const INDEXES: [IndexSpec; 6] = [
    IndexSpec {
        table: "order_seat",
        columns: &["showtime_id"],
        name: "idx_order_seat_showtime",
        without: "every chunk's occupancy read, every confirmation before a write and the check for rows with no showtime scan the whole of order_seat: a converged pass over 400 showtimes read about a million rows instead of a few hundred (uq_occupancy leads with showtime_id and serves)",
    },
    IndexSpec {
        table: "ticket_order",
        columns: &["status", "expires_at"],
        name: "idx_order_status_expires",
        without: "every run of expired-orders, and the daemon's read of the coming deadlines, scan the whole of ticket_order",
    },
    IndexSpec {
        table: "ticket_order",
        columns: &["showtime_id", "status"],
        name: "idx_order_showtime_status",
        without: "every confirmation before a lowering finds the showtime's orders (for their rows in another showtime) by a scan of the whole of ticket_order",
    },
    IndexSpec {
        table: "showtime",
        columns: &["status", "starts_at"],
        name: "idx_showtime_status_starts",
        without: "every page of ON_SALE showtimes a sweep reads scans and sorts the whole of showtime",
    },
    IndexSpec {
        table: "hall_seat",
        columns: &["hall_id"],
        name: "idx_hall_seat_hall",
        without: "every read of a hall's template scans the whole of hall_seat",
    },
    IndexSpec {
        table: "order_seat",
        columns: &["order_id"],
        name: "idx_order_seat_order",
        without: "the cancel's locking read of an order's rows scans, and locks until its commit, every row of order_seat; so does the naming of a row's seat",
    },
];

/// Each index of [`INDEXES`] that no index of MySQL's serves (only for
/// tables that exist: a missing table is its own deviation).
pub(super) fn judge_indexes(facts: &SchemaFacts, out: &mut Vec<Deviation>) {
    for spec in INDEXES.iter() {
        if !facts.has_table(spec.table) || facts.leads_with(spec.table, spec.columns) {
            continue;
        }
        let name = free_name(facts, spec.table, spec.name);
        out.push(Deviation {
            table: spec.table,
            column: spec.columns[0],
            kind: DeviationKind::Index,
            found: format!("no index leads with ({})", spec.columns.join(", ")),
            expected: format!(
                "an index whose first columns are ({})",
                spec.columns.join(", ")
            ),
            fix: format!(
                "CREATE INDEX {name} ON {} ({})",
                spec.table,
                spec.columns.join(", ")
            ),
            handling: Handling::Warns(spec.without),
        });
    }
}

/// `name`, or `name_2`, `name_3`, … when the table has an index so named.
fn free_name(facts: &SchemaFacts, table: &str, name: &str) -> String {
    let taken = |n: &str| {
        facts
            .indexes
            .iter()
            .any(|i| i.table == table && i.name == n)
    };
    let mut candidate = name.to_string();
    let mut n = 2;
    while taken(&candidate) {
        candidate = format!("{name}_{n}");
        n += 1;
    }
    candidate
}

/// The metric's `column` label of a trigger: when it fires.
fn when(timing: &str, event: &str) -> &'static str {
    match (timing, event) {
        ("BEFORE", "INSERT") => "BEFORE INSERT",
        ("BEFORE", "UPDATE") => "BEFORE UPDATE",
        ("BEFORE", "DELETE") => "BEFORE DELETE",
        ("AFTER", "INSERT") => "AFTER INSERT",
        ("AFTER", "UPDATE") => "AFTER UPDATE",
        ("AFTER", "DELETE") => "AFTER DELETE",
        _ => "trigger",
    }
}

/// Every trigger on a contract table (as gh-ost inspects triggers before it
/// touches a table): each may refuse or rewrite the cancel's writes.
pub(super) fn judge_triggers(facts: &SchemaFacts, out: &mut Vec<Deviation>) {
    for t in &facts.triggers {
        let Some(table) = super::CONTRACT_TABLES.iter().find(|c| **c == t.table) else {
            continue;
        };
        let writes = matches!(
            (*table, t.event.as_str()),
            ("ticket_order" | "order_seat", "UPDATE")
        );
        out.push(Deviation {
            table,
            column: when(&t.timing, &t.event),
            kind: DeviationKind::Trigger,
            found: format!("trigger `{}` {} {} ON {table}", t.name, t.timing, t.event),
            expected: "no trigger (the contract's writes are the application's own)".into(),
            fix: format!("DROP TRIGGER `{}`", t.name.replace('`', "``")),
            handling: Handling::Warns(if writes {
                "it fires on the cancel's updates and may refuse or rewrite them: each order's cancel commits or fails alone, and is read back before its seats are released (a refused or rewritten cancel is reported with its order, and retried next run); drop it only if it should not apply to the reconciler"
            } else {
                "it fires on no write of the reconciler's (which only updates ticket_order and order_seat); it may change what seatflow writes"
            }),
        });
    }
}

/// The columns the cancel writes, and what it writes into them.
const CANCEL_WRITES: [(&str, &str, &str); 4] = [
    ("ticket_order", "status", "CANCELLED"),
    ("ticket_order", "cancel_reason", "RECONCILE_EXPIRED"),
    ("ticket_order", "cancelled_at", "UTC_TIMESTAMP(3)"),
    ("order_seat", "active", "NULL"),
];

/// Every CHECK constraint on a contract table. One on a column the cancel
/// writes may refuse the cancel of an order (each order's cancel fails
/// alone, and is reported): a warning; `json_valid` on a column the cancel
/// writes a word into refuses every cancel: it holds them, and the fix is
/// the contract's type. One on columns the reconciler never writes: harmless.
pub(super) fn judge_checks(facts: &SchemaFacts, out: &mut Vec<Deviation>) {
    for c in &facts.checks {
        let Some(table) = super::CONTRACT_TABLES.iter().find(|t| **t == c.table) else {
            continue;
        };
        let named = |column: &str| c.clause.contains(&format!("`{column}`"));
        let written = CANCEL_WRITES
            .iter()
            .find(|(t, column, _)| t == table && named(column));
        let json_word = written.filter(|(_, _, value)| {
            c.clause.to_ascii_lowercase().starts_with("json_valid(")
                && value.chars().all(|ch| ch.is_ascii_uppercase() || ch == '_')
        });
        let spec = json_word.and_then(|(t, column, _)| {
            COLUMNS
                .iter()
                .find(|s| s.table == *t && s.column == *column)
        });
        let (column, fix, handling) = match (written, spec) {
            (Some((_, column, value)), Some(spec)) => (
                *column,
                format!("ALTER TABLE {table} MODIFY {column} {}", spec.definition()),
                Handling::Holds(
                    Reach::Cancels,
                    format!(
                        "the cancel writes {value}, which is no JSON: MySQL refuses every cancel"
                    )
                    .into(),
                ),
            ),
            (Some((_, column, _)), None) => (
                *column,
                drop_check(table, &c.name),
                Handling::Warns(
                    "it may refuse the cancel of an order: each order's cancel commits or fails alone, and a refused one is reported with MySQL's words and tried again next run",
                ),
            ),
            (None, _) => (
                "",
                drop_check(table, &c.name),
                Handling::Harmless("the reconciler writes no column it checks"),
            ),
        };
        out.push(Deviation {
            table,
            column,
            kind: DeviationKind::Check,
            found: format!("CHECK `{}` ({})", c.name, c.clause),
            expected: "no CHECK on a column the cancel writes".into(),
            fix,
            handling,
        });
    }
}

fn drop_check(table: &str, name: &str) -> String {
    format!(
        "ALTER TABLE {table} DROP CONSTRAINT `{}`",
        name.replace('`', "``")
    )
}
