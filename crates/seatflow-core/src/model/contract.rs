//! The strict reading of seatflow's contract (rules 12, 15, 16). Every row
//! read from MySQL passes through here: it becomes typed values, or an
//! [`UnknownRow`] that is reported with its table and id and never read as
//! "free". Pure: the stores decode columns into plain values (a column that
//! does not decode arrives as `Err`, never as a panic) and ask here what the
//! row means.

use std::fmt;

use crate::model::{Holding, OrderStatus, ShowtimeId};

/// A row the contract does not explain: left alone and reported.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UnknownRow {
    /// `showtime`, `hall_seat`, `ticket_order` or `order_seat`.
    pub table: &'static str,
    /// The row's key: `42`, `order 7 seat a-01`, `hall 3 seat A-1`.
    pub id: String,
    /// What is outside the contract.
    pub why: String,
}

impl UnknownRow {
    pub fn new(table: &'static str, id: impl Into<String>, why: impl Into<String>) -> UnknownRow {
        UnknownRow {
            table,
            id: id.into(),
            why: why.into(),
        }
    }

    /// `order_seat order 7 seat a-01`: the key that names it once per run.
    pub fn key(&self) -> String {
        format!("{} {}", self.table, self.id)
    }
}

impl fmt::Display for UnknownRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.table, self.id, self.why)
    }
}

/// A column as decoded: `Err` carries why it did not decode (a zero date,
/// a NULL in a NOT NULL column, a type the schema should not have).
pub type Column<T> = Result<T, String>;

/// The order a seat row belongs to, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderFacts {
    /// `ticket_order.status`, exactly as stored.
    pub status: Column<String>,
    pub showtime_id: Column<ShowtimeId>,
    /// Every date of the order decodes (`expires_at`, `created_at`, and
    /// `paid_at`/`cancelled_at` when set); else which one does not.
    pub dates: Column<()>,
}

/// One `order_seat` row with its order (None: no `ticket_order` row).
/// Its key columns may not decode either where the schema allows NULL
/// (rule 17): such a row is unknown, or, with no `order_id`, orderless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatRowFacts {
    pub showtime_id: Column<ShowtimeId>,
    pub order_id: Column<i64>,
    pub seat_no: Column<String>,
    /// `active` as a number (`Ok(None)`: NULL).
    pub active: Column<Option<i64>>,
    pub order: Option<OrderFacts>,
}

/// What an `order_seat` row means under the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeatRow {
    /// A valid occupancy (the seat number still has to be an enabled
    /// template seat byte for byte: the caller knows the template).
    Occupies(OrderStatus),
    /// An order that ended by the contract's own cancel or refund
    /// (`CANCELLED`/`REFUNDED` exactly, `active` NULL): holds nothing.
    Ended,
    /// Outside the contract: may hold the seat, so it blocks lowering.
    Unknown(String),
}

impl SeatRow {
    /// The report of this row when it is outside the contract.
    pub fn unknown_row(&self, facts: &SeatRowFacts) -> Option<UnknownRow> {
        match self {
            SeatRow::Unknown(why) => Some(UnknownRow::new(
                "order_seat",
                seat_row_key(facts),
                why.clone(),
            )),
            _ => None,
        }
    }

    /// The row as the planner holds it (None: it holds nothing).
    pub fn holding(&self, order_id: i64) -> Option<Holding> {
        match self {
            SeatRow::Occupies(status) => Some(Holding::Valid(*status)),
            SeatRow::Ended => None,
            SeatRow::Unknown(_) => Some(Holding::Unknown { order_id }),
        }
    }
}

/// `order 7 seat a-01` (`order NULL`, `seat NULL` where they are NULL; an
/// id beyond BIGINT as its digits): the row's key in reports.
pub fn seat_row_key(facts: &SeatRowFacts) -> String {
    let shown = |c: &Column<String>| c.clone().unwrap_or_else(|_| "NULL".into());
    format!(
        "order {} seat {}",
        facts
            .order_id
            .as_ref()
            .map_or_else(|e| undecoded_id(e).to_string(), |id| id.to_string()),
        shown(&facts.seat_no)
    )
}

/// An id that did not decode, as a key shows it: its digits when it is a
/// number beyond BIGINT (the decoder's words start with them), else NULL
/// or `?`.
fn undecoded_id(why: &str) -> &str {
    match why.split_whitespace().next() {
        Some(n) if n.bytes().all(|b| b.is_ascii_digit()) => n,
        _ if why == "NULL" => "NULL",
        _ => "?",
    }
}

/// The contract's order statuses, spelled exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderState {
    Pending,
    Paid,
    Cancelled,
    Refunded,
}

impl OrderState {
    /// Exactly as the contract spells it (binary: `paid`, `PAID ` are not).
    pub fn parse(raw: &str) -> Option<OrderState> {
        match raw {
            "PENDING" => Some(OrderState::Pending),
            "PAID" => Some(OrderState::Paid),
            "CANCELLED" => Some(OrderState::Cancelled),
            "REFUNDED" => Some(OrderState::Refunded),
            _ => None,
        }
    }
}

/// The contract's showtime statuses, spelled exactly.
pub const SHOWTIME_STATUSES: [&str; 4] = ["SCHEDULED", "ON_SALE", "CLOSED", "CANCELLED"];

/// Reads one `order_seat` row strictly (rule 15's "in its own terms" is the
/// caller's: the row was found by MySQL's comparison of the seat).
pub fn read_seat_row(row: &SeatRowFacts) -> SeatRow {
    let row_showtime = match &row.showtime_id {
        Ok(id) => *id,
        Err(e) => return SeatRow::Unknown(format!("showtime_id does not decode ({e})")),
    };
    if let Err(e) = &row.seat_no {
        return SeatRow::Unknown(format!("seat_no does not decode ({e})"));
    }
    let active = match &row.active {
        Err(e) => return SeatRow::Unknown(format!("active does not decode ({e})")),
        Ok(None) => None,
        Ok(Some(1)) => Some(()),
        Ok(Some(other)) => {
            return SeatRow::Unknown(format!("active = {other}, neither 1 nor NULL"));
        }
    };
    // A row whose order_id is NULL has no order to read: held while
    // active, ended while NULL, as any orderless row. One whose id does not
    // decode (beyond BIGINT) has an order nobody can name, whether or not
    // a read found it (a join does; a read by id cannot): unknown, and
    // said so.
    if let Err(e) = &row.order_id
        && e != "NULL"
    {
        return SeatRow::Unknown(format!("order_id does not decode ({e})"));
    }
    let order = row.order.as_ref().filter(|_| row.order_id.is_ok());
    let Some(order) = order else {
        return match active {
            // A released row whose order is gone (archived): holds nothing.
            None => SeatRow::Ended,
            Some(()) => SeatRow::Unknown("active = 1 but no ticket_order row".into()),
        };
    };
    let status = match &order.status {
        Err(e) => return SeatRow::Unknown(format!("order status does not decode ({e})")),
        Ok(raw) => match OrderState::parse(raw) {
            Some(s) => s,
            None => {
                return SeatRow::Unknown(format!(
                    "order status {raw:?} is not spelled as the contract spells it"
                ));
            }
        },
    };
    let ended = matches!(status, OrderState::Cancelled | OrderState::Refunded);
    match (active, ended) {
        (None, true) => return SeatRow::Ended,
        (Some(()), true) => {
            return SeatRow::Unknown(format!(
                "active = 1 on a {} order",
                if status == OrderState::Cancelled {
                    "CANCELLED"
                } else {
                    "REFUNDED"
                }
            ));
        }
        (None, false) => {
            return SeatRow::Unknown("active is NULL but the order is PENDING or PAID".into());
        }
        (Some(()), false) => {}
    }
    match &order.showtime_id {
        Err(e) => return SeatRow::Unknown(format!("order showtime_id does not decode ({e})")),
        Ok(id) if *id != row_showtime => {
            return SeatRow::Unknown(format!(
                "order_seat.showtime_id {row_showtime} differs from its order's {id}"
            ));
        }
        Ok(_) => {}
    }
    if let Err(e) = &order.dates {
        return SeatRow::Unknown(format!("a date of its order does not decode ({e})"));
    }
    SeatRow::Occupies(if status == OrderState::Paid {
        OrderStatus::Paid
    } else {
        OrderStatus::Pending
    })
}

/// An `order_seat` row outside the contract, as reported: its id is
/// `order 7 seat a-01`.
pub fn unknown_seat_row(order_id: i64, seat_no: &str, why: impl Into<String>) -> UnknownRow {
    UnknownRow::new(
        "order_seat",
        format!("order {order_id} seat {seat_no}"),
        why,
    )
}

/// The hall template's `enabled` flag, strictly: 1 enabled, 0 disabled,
/// anything else unknown (the seat is then no enabled template seat: its
/// field and its rows are left alone).
pub fn read_enabled(raw: &Column<i64>) -> Result<bool, String> {
    match raw {
        Ok(1) => Ok(true),
        Ok(0) => Ok(false),
        Ok(other) => Err(format!("enabled = {other}, neither 0 nor 1")),
        Err(e) => Err(format!("enabled does not decode ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(active: Column<Option<i64>>, order: Option<OrderFacts>) -> SeatRowFacts {
        SeatRowFacts {
            showtime_id: Ok(5),
            order_id: Ok(7),
            seat_no: Ok("A-1".into()),
            active,
            order,
        }
    }

    fn order(status: &str) -> Option<OrderFacts> {
        Some(OrderFacts {
            status: Ok(status.into()),
            showtime_id: Ok(5),
            dates: Ok(()),
        })
    }

    fn is_unknown(r: &SeatRow) -> bool {
        matches!(r, SeatRow::Unknown(_))
    }

    #[test]
    fn valid_occupancies_are_exact_statuses_with_active_1_in_their_own_showtime() {
        assert_eq!(
            read_seat_row(&row(Ok(Some(1)), order("PAID"))),
            SeatRow::Occupies(OrderStatus::Paid)
        );
        assert_eq!(
            read_seat_row(&row(Ok(Some(1)), order("PENDING"))),
            SeatRow::Occupies(OrderStatus::Pending)
        );
        assert_eq!(
            read_seat_row(&row(Ok(None), order("CANCELLED"))),
            SeatRow::Ended
        );
        assert_eq!(
            read_seat_row(&row(Ok(None), order("REFUNDED"))),
            SeatRow::Ended
        );
        assert_eq!(read_seat_row(&row(Ok(None), None)), SeatRow::Ended);
    }

    #[test]
    fn every_other_row_is_unknown() {
        for status in ["paid", "PAID ", "Pending", "SOLD", "", "cancelled"] {
            for active in [Some(1), None] {
                assert!(
                    is_unknown(&read_seat_row(&row(Ok(active), order(status)))),
                    "{status:?} {active:?}"
                );
            }
        }
        for active in [0, 2, -1, 127] {
            for status in ["PAID", "PENDING", "CANCELLED"] {
                assert!(is_unknown(&read_seat_row(&row(
                    Ok(Some(active)),
                    order(status)
                ))));
            }
        }
        assert!(is_unknown(&read_seat_row(&row(
            Err("x".into()),
            order("PAID")
        ))));
        assert!(is_unknown(&read_seat_row(&row(
            Ok(Some(1)),
            order("CANCELLED")
        ))));
        assert!(is_unknown(&read_seat_row(&row(Ok(None), order("PAID")))));
        assert!(is_unknown(&read_seat_row(&row(Ok(Some(1)), None))));
        let mut other_showtime = order("PENDING");
        if let Some(o) = &mut other_showtime {
            o.showtime_id = Ok(6);
        }
        assert!(is_unknown(&read_seat_row(&row(
            Ok(Some(1)),
            other_showtime
        ))));
        let mut zero_date = order("PAID");
        if let Some(o) = &mut zero_date {
            o.dates = Err("expires_at".into());
        }
        assert!(is_unknown(&read_seat_row(&row(Ok(Some(1)), zero_date))));
        // Key columns a NULL-able schema lets through (rule 17).
        let mut no_showtime = row(Ok(Some(1)), order("PAID"));
        no_showtime.showtime_id = Err("NULL".into());
        assert!(is_unknown(&read_seat_row(&no_showtime)));
        let mut no_seat = row(Ok(Some(1)), order("PAID"));
        no_seat.seat_no = Err("NULL".into());
        assert!(is_unknown(&read_seat_row(&no_seat)));
        let mut no_order_id = row(Ok(Some(1)), order("PAID"));
        no_order_id.order_id = Err("NULL".into());
        assert!(is_unknown(&read_seat_row(&no_order_id)));
        assert_eq!(
            seat_row_key(&no_order_id),
            "order NULL seat A-1",
            "reported by its key"
        );
        no_order_id.active = Ok(None);
        assert_eq!(
            read_seat_row(&no_order_id),
            SeatRow::Ended,
            "orderless, released"
        );
        // An order the join found, whose id is beyond BIGINT: said so, by
        // its digits, never "no ticket_order row".
        let mut beyond = row(Ok(Some(1)), order("PAID"));
        beyond.order_id =
            Err("9223372036854775813 is beyond BIGINT (order_id is BIGINT UNSIGNED)".into());
        assert_eq!(seat_row_key(&beyond), "order 9223372036854775813 seat A-1");
        match read_seat_row(&beyond) {
            SeatRow::Unknown(why) => assert!(why.contains("BIGINT UNSIGNED"), "{why}"),
            other => panic!("{other:?}"),
        }
        // The same row as a chunk's read meets it: its order cannot be read
        // by an id that does not decode, so none was found. Still said so.
        beyond.order = None;
        match read_seat_row(&beyond) {
            SeatRow::Unknown(why) => assert!(why.contains("BIGINT UNSIGNED"), "{why}"),
            other => panic!("{other:?}"),
        }
        let mut bad_status = order("PAID");
        if let Some(o) = &mut bad_status {
            o.status = Err("NULL".into());
        }
        assert!(is_unknown(&read_seat_row(&row(Ok(Some(1)), bad_status))));
    }

    #[test]
    fn enabled_is_exactly_0_or_1() {
        assert_eq!(read_enabled(&Ok(1)), Ok(true));
        assert_eq!(read_enabled(&Ok(0)), Ok(false));
        assert!(read_enabled(&Ok(2)).is_err());
        assert!(read_enabled(&Err("NULL".into())).is_err());
    }
}
