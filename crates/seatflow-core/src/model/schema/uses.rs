//! Which job reads or writes which column of the contract: one table
//! ([`USES`]), shown in docs/seatflow-contract.md ("Which job uses which
//! column"). A column that cannot be read as the contract has it (missing,
//! or of a type the reads do not take) holds exactly the jobs that use it
//! ([`Use::reach`]).
//!
//! The four seat jobs share one sweep: its page of showtimes, the
//! templates, the occupancy and the confirmation before a write; so they
//! use the same columns. `expired-orders` has two parts: the cancel (its
//! page of due orders and the conditional update) and the release of the
//! cancelled orders' seats, which goes through the sweep's confirmation
//! and is a seat write like the sweep's.

use super::Reach;

/// How one part of the reconciler uses a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    No,
    /// Only to order a rebuilt hash's fields or inspect's seat map: the
    /// reads leave it out when it is missing.
    Order,
    Read,
    Write,
    ReadWrite,
}

impl Access {
    fn reads(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }

    fn writes(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }

    /// As docs/seatflow-contract.md's table shows it.
    pub fn shown(self) -> &'static str {
        match self {
            Access::No => "",
            Access::Order => "order",
            Access::Read => "R",
            Access::Write => "W",
            Access::ReadWrite => "RW",
        }
    }
}

/// One column's users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Use {
    pub table: &'static str,
    pub column: &'static str,
    /// The seat jobs' sweep (paid-seats, missing-hashes, orphan-locks,
    /// sold-orphans) and every confirmation before a seat write, the
    /// release of `expired-orders` included.
    pub sweep: Access,
    /// `expired-orders`' page and cancel: `Read` by the page (or the
    /// locking read before the update), `Write` by the update (and read
    /// back only by it, and by a retry of it).
    pub cancel: Access,
}

const fn u(table: &'static str, column: &'static str, sweep: Access, cancel: Access) -> Use {
    Use {
        table,
        column,
        sweep,
        cancel,
    }
}

use Access::{No, Order, Read, ReadWrite, Write};

/// Every column of the contract's tables, in [`super::COLUMNS`]' order.
pub const USES: [Use; 24] = [
    u("hall_seat", "hall_id", Read, No),
    u("hall_seat", "seat_no", Read, No),
    u("hall_seat", "row_label", Order, No),
    u("hall_seat", "col_no", Order, No),
    u("hall_seat", "enabled", Read, No),
    u("showtime", "id", Read, No),
    u("showtime", "movie_id", No, No),
    u("showtime", "hall_id", Read, No),
    u("showtime", "starts_at", Read, No),
    u("showtime", "status", Read, No),
    u("ticket_order", "id", Read, ReadWrite),
    u("ticket_order", "order_no", No, No),
    u("ticket_order", "user_id", No, No),
    u("ticket_order", "showtime_id", Read, Read),
    u("ticket_order", "status", Read, ReadWrite),
    u("ticket_order", "expires_at", Read, Read),
    u("ticket_order", "created_at", Read, No),
    u("ticket_order", "paid_at", Read, No),
    u("ticket_order", "cancelled_at", Read, Write),
    u("ticket_order", "cancel_reason", No, Write),
    u("order_seat", "order_id", Read, ReadWrite),
    u("order_seat", "showtime_id", Read, Read),
    u("order_seat", "seat_no", Read, Read),
    u("order_seat", "active", Read, ReadWrite),
];

/// The column's users (every contract column has an entry).
pub fn of(table: &str, column: &str) -> Option<&'static Use> {
    USES.iter().find(|u| u.table == table && u.column == column)
}

impl Use {
    /// What a column the reads cannot take holds: the sweep's seat writes
    /// where the sweep reads it, `expired-orders` wholly where its page or
    /// cancel reads it, its cancels where the cancel only writes it.
    /// None: no job reads it (or only to order fields; the reads adapt).
    pub fn reach(&self) -> Option<Reach> {
        reach(
            self.sweep.reads(),
            self.cancel.reads(),
            self.cancel.writes(),
        )
    }
}

fn reach(sweep: bool, reads: bool, writes: bool) -> Option<Reach> {
    match (sweep, reads, writes) {
        (true, true, _) => Some(Reach::Everything),
        (true, false, true) => Some(Reach::SeatWritesAndCancels),
        (true, false, false) => Some(Reach::SeatWrites),
        (false, true, _) => Some(Reach::OrderReads),
        (false, false, true) => Some(Reach::Cancels),
        (false, false, false) => None,
    }
}

/// What a missing table holds: what each of its columns would.
pub fn of_table(table: &str) -> Option<Reach> {
    let columns = || USES.iter().filter(|u| u.table == table);
    reach(
        columns().any(|u| u.sweep.reads()),
        columns().any(|u| u.cancel.reads()),
        columns().any(|u| u.cancel.writes()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::schema::COLUMNS;

    /// docs/seatflow-contract.md shows this table ("Which job uses which
    /// column"), row for row.
    #[test]
    fn the_contract_page_shows_the_table() {
        let doc = include_str!("../../../../../docs/seatflow-contract.md");
        for u in USES.iter() {
            let cell = |a: Access| match a.shown() {
                "" => " ".to_string(),
                shown => format!(" {shown} "),
            };
            let row = format!(
                "| `{}.{}` |{}|{}|",
                u.table,
                u.column,
                cell(u.sweep),
                cell(u.cancel)
            );
            assert!(doc.contains(&row), "the page lacks:\n{row}");
        }
    }

    #[test]
    fn every_contract_column_has_its_users() {
        for (spec, uses) in COLUMNS.iter().zip(USES.iter()) {
            assert_eq!((spec.table, spec.column), (uses.table, uses.column));
        }
        assert_eq!(
            of("ticket_order", "cancel_reason").and_then(Use::reach),
            Some(Reach::Cancels),
            "written by the cancel alone: the seat jobs go on"
        );
        assert_eq!(
            of("ticket_order", "expires_at").and_then(Use::reach),
            Some(Reach::Everything)
        );
        assert_eq!(of("hall_seat", "row_label").and_then(Use::reach), None);
        assert_eq!(of_table("showtime"), Some(Reach::SeatWrites));
        assert_eq!(of_table("order_seat"), Some(Reach::Everything));
        assert_eq!(of("showtime", "movie_id").and_then(Use::reach), None);
        assert_eq!(
            of("showtime", "hall_id").and_then(Use::reach),
            Some(Reach::SeatWrites)
        );
    }
}
