//! Row images as showtimes (pure): which tables name showtimes, where
//! their showtime column is ([`layouts`], from `information_schema`), and
//! the showtimes one row change touches ([`showtimes_of`]).

use std::collections::HashMap;

use crate::model::ShowtimeId;

/// The tables whose changes name showtimes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    TicketOrder,
    OrderSeat,
    Showtime,
}

impl Table {
    pub const ALL: [Table; 3] = [Table::TicketOrder, Table::OrderSeat, Table::Showtime];

    pub fn name(self) -> &'static str {
        match self {
            Table::TicketOrder => "ticket_order",
            Table::OrderSeat => "order_seat",
            Table::Showtime => "showtime",
        }
    }

    /// The column that holds the showtime's id.
    pub fn key_column(self) -> &'static str {
        match self {
            Table::TicketOrder | Table::OrderSeat => "showtime_id",
            Table::Showtime => "id",
        }
    }

    /// The table of this name (byte-equal, as the binlog spells it).
    pub fn from_name(name: &[u8]) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.name().as_bytes() == name)
    }
}

/// Where a table's showtime column is, as `information_schema` said at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// 0-based position of the key column among the table's columns.
    pub key: usize,
    /// How many columns the table has.
    pub columns: usize,
    /// 0-based position of `showtime.status` (None for the other tables).
    pub status: Option<usize>,
}

/// Each table's [`Layout`] from `(table, column, ORDINAL_POSITION)` rows of
/// `information_schema.COLUMNS`; a table or key column that is missing is
/// named (the contract's schema is not there).
pub fn layouts(rows: &[(String, String, u64)]) -> Result<HashMap<Table, Layout>, String> {
    let mut out = HashMap::new();
    for table in Table::ALL {
        let mine: Vec<&(String, String, u64)> =
            rows.iter().filter(|(t, _, _)| t == table.name()).collect();
        if mine.is_empty() {
            return Err(format!("table `{}` not found", table.name()));
        }
        // 0-based, from the 1-based ORDINAL_POSITION.
        let position = |name: &str| {
            mine.iter()
                .find(|(_, c, _)| c.eq_ignore_ascii_case(name))
                .and_then(|(_, _, pos)| usize::try_from(*pos).ok()?.checked_sub(1))
        };
        let key = position(table.key_column()).ok_or_else(|| {
            format!(
                "column `{}`.`{}` not found",
                table.name(),
                table.key_column()
            )
        })?;
        let status = (table == Table::Showtime)
            .then(|| position("status"))
            .flatten();
        out.insert(
            table,
            Layout {
                key,
                columns: mine.len(),
                status,
            },
        );
    }
    Ok(out)
}

/// Which column a value of a row image belongs to: by name when the table
/// map carries the names (`binlog_row_metadata = FULL`), else by position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnRef {
    Named(String),
    Position(usize),
}

impl ColumnRef {
    /// mysql_common names a column it has no name for `@<position>`.
    pub(super) fn parse(name: &str) -> ColumnRef {
        match name.strip_prefix('@').and_then(|n| n.parse().ok()) {
            Some(position) => ColumnRef::Position(position),
            None => ColumnRef::Named(name.to_string()),
        }
    }
}

/// A value of a row image, as far as a showtime id (or a showtime's
/// status) cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    Int(i64),
    Null,
    /// A string's bytes, as stored.
    Text(Vec<u8>),
    /// Anything else (dates, an unsigned value past `i64::MAX`, ...).
    Other,
}

/// The `showtime.status` values, byte for byte, of a showtime that is not
/// for sale (the contract's other three): nothing of it is repaired.
const NOT_ON_SALE: [&[u8]; 3] = [b"SCHEDULED", b"CLOSED", b"CANCELLED"];

/// One row image: the columns it carries (all of them with
/// `binlog_row_image = FULL`) and their values.
pub type Image = [(ColumnRef, Cell)];

/// The showtimes one row change touches: its key column's value in the
/// before image (the row as it was: an update, a delete) and in the after
/// image (as it is now: an insert, an update), each once. A key that is NULL
/// or not an integer names no showtime.
///
/// A `showtime` row names its id only when it may be for sale after the
/// change: the contract expects a state of `ON_SALE` showtimes alone, so a
/// showtime deleted, or whose status is now `SCHEDULED`, `CLOSED` or
/// `CANCELLED` byte for byte, has nothing to check (a schedule imported in
/// one transaction would otherwise queue a check per showtime, and hold up
/// every other change behind the check budget). Any other status, an odd
/// spelling or a status not in the image included, is checked.
pub fn showtimes_of(
    table: Table,
    layout: Layout,
    before: Option<&Image>,
    after: Option<&Image>,
) -> Vec<ShowtimeId> {
    let key = |image: &Image| match cell(image, table.key_column(), Some(layout.key)) {
        Some(Cell::Int(id)) => Some(*id),
        _ => None,
    };
    let not_for_sale = |image: &Image| {
        matches!(cell(image, "status", layout.status),
            Some(Cell::Text(status)) if NOT_ON_SALE.contains(&status.as_slice()))
    };
    let mut ids: Vec<ShowtimeId> = match table {
        Table::Showtime => after
            .filter(|a| !not_for_sale(a))
            .and_then(key)
            .into_iter()
            .collect(),
        Table::TicketOrder | Table::OrderSeat => {
            before.into_iter().chain(after).filter_map(key).collect()
        }
    };
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The value of column `name` (by name when the image names its columns,
/// else at `position`) in `image`, if the image carries it.
fn cell<'a>(image: &'a Image, name: &str, position: Option<usize>) -> Option<&'a Cell> {
    image.iter().find_map(|(column, cell)| {
        let found = match column {
            ColumnRef::Named(n) => n.eq_ignore_ascii_case(name),
            ColumnRef::Position(p) => Some(*p) == position,
        };
        found.then_some(cell)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(position: usize, cell: Cell) -> (ColumnRef, Cell) {
        (ColumnRef::Position(position), cell)
    }

    const ORDER: Layout = Layout {
        key: 3,
        columns: 10,
        status: None,
    };

    /// A `ticket_order` row as `binlog_row_image = FULL` logs it: every
    /// column by position (no names), `showtime_id` fourth.
    fn order_row(showtime: Cell) -> Vec<(ColumnRef, Cell)> {
        vec![
            at(0, Cell::Int(7)),
            at(1, Cell::Other),
            at(2, Cell::Int(70)),
            at(3, showtime),
            at(4, Cell::Other),
            at(5, Cell::Other),
            at(6, Cell::Other),
            at(7, Cell::Null),
            at(8, Cell::Null),
            at(9, Cell::Null),
        ]
    }

    #[test]
    fn a_payment_names_its_showtime_once() {
        let before = order_row(Cell::Int(42));
        let after = order_row(Cell::Int(42));
        assert_eq!(
            showtimes_of(Table::TicketOrder, ORDER, Some(&before), Some(&after)),
            vec![42]
        );
    }

    #[test]
    fn an_order_moved_to_another_showtime_names_both() {
        let before = order_row(Cell::Int(42));
        let after = order_row(Cell::Int(7));
        assert_eq!(
            showtimes_of(Table::TicketOrder, ORDER, Some(&before), Some(&after)),
            vec![7, 42]
        );
    }

    #[test]
    fn inserts_and_deletes_name_the_one_image_they_have() {
        let seat = Layout {
            key: 1,
            columns: 4,
            status: None,
        };
        let row = vec![
            at(0, Cell::Int(9)),
            at(1, Cell::Int(-5)),
            at(2, Cell::Other),
            at(3, Cell::Int(1)),
        ];
        assert_eq!(
            showtimes_of(Table::OrderSeat, seat, None, Some(&row)),
            vec![-5]
        );
        assert_eq!(
            showtimes_of(Table::OrderSeat, seat, Some(&row), None),
            vec![-5]
        );
    }

    const SHOWTIME: Layout = Layout {
        key: 0,
        columns: 5,
        status: Some(4),
    };

    /// A `showtime` row: id, movie, hall, starts_at, status.
    fn showtime_row(id: i64, status: Cell) -> Vec<(ColumnRef, Cell)> {
        vec![
            at(0, Cell::Int(id)),
            at(1, Cell::Int(1)),
            at(2, Cell::Int(3)),
            at(3, Cell::Other),
            at(4, status),
        ]
    }

    fn text(s: &str) -> Cell {
        Cell::Text(s.as_bytes().to_vec())
    }

    #[test]
    fn a_showtime_row_names_its_own_id_while_it_may_be_for_sale() {
        let on_sale = showtime_row(101, text("ON_SALE"));
        assert_eq!(
            showtimes_of(Table::Showtime, SHOWTIME, None, Some(&on_sale)),
            vec![101]
        );
        let scheduled = showtime_row(101, text("SCHEDULED"));
        assert_eq!(
            showtimes_of(Table::Showtime, SHOWTIME, Some(&scheduled), Some(&on_sale)),
            vec![101],
            "sales opened"
        );
        // An odd spelling, a status the image does not carry, or one that
        // is not text: checked (the check reports or judges it).
        for status in [text("on_sale"), text("SCHEDULED "), Cell::Other, Cell::Null] {
            let row = showtime_row(101, status.clone());
            assert_eq!(
                showtimes_of(Table::Showtime, SHOWTIME, None, Some(&row)),
                vec![101],
                "{status:?}"
            );
        }
        let key_only = vec![at(0, Cell::Int(101))];
        assert_eq!(
            showtimes_of(Table::Showtime, SHOWTIME, None, Some(&key_only)),
            vec![101]
        );
        let named = vec![
            (ColumnRef::Named("ID".into()), Cell::Int(5)),
            (ColumnRef::Named("status".into()), text("ON_SALE")),
        ];
        assert_eq!(
            showtimes_of(Table::Showtime, SHOWTIME, None, Some(&named)),
            vec![5]
        );
    }

    #[test]
    fn a_showtime_not_for_sale_after_the_change_names_nothing() {
        let on_sale = showtime_row(101, text("ON_SALE"));
        for status in ["SCHEDULED", "CLOSED", "CANCELLED"] {
            let row = showtime_row(101, text(status));
            assert!(
                showtimes_of(Table::Showtime, SHOWTIME, None, Some(&row)).is_empty(),
                "inserted {status}"
            );
            assert!(
                showtimes_of(Table::Showtime, SHOWTIME, Some(&on_sale), Some(&row)).is_empty(),
                "{status} after ON_SALE"
            );
        }
        assert!(
            showtimes_of(Table::Showtime, SHOWTIME, Some(&on_sale), None).is_empty(),
            "deleted"
        );
        let named = vec![
            (ColumnRef::Named("id".into()), Cell::Int(5)),
            (ColumnRef::Named("STATUS".into()), text("CLOSED")),
        ];
        assert!(showtimes_of(Table::Showtime, SHOWTIME, None, Some(&named)).is_empty());
    }

    #[test]
    fn names_from_full_row_metadata_win_over_the_layout() {
        // binlog_row_metadata = FULL: the table map names the columns, and a
        // partial image (MINIMAL) puts the key anywhere.
        let row = vec![
            (ColumnRef::Named("id".into()), Cell::Int(5)),
            (ColumnRef::Named("showtime_id".into()), Cell::Int(77)),
        ];
        assert_eq!(
            showtimes_of(Table::TicketOrder, ORDER, None, Some(&row)),
            vec![77]
        );
    }

    #[test]
    fn a_null_a_non_integer_or_a_missing_key_names_nothing() {
        let null = order_row(Cell::Null);
        let text = order_row(Cell::Other);
        // MINIMAL image of a payment: the primary key before, the status after.
        let pk_only = vec![at(0, Cell::Int(7))];
        let status_only = vec![at(4, Cell::Other)];
        assert!(showtimes_of(Table::TicketOrder, ORDER, Some(&null), Some(&text)).is_empty());
        assert!(
            showtimes_of(
                Table::TicketOrder,
                ORDER,
                Some(&pk_only),
                Some(&status_only)
            )
            .is_empty()
        );
        assert!(showtimes_of(Table::TicketOrder, ORDER, None, None).is_empty());
    }

    #[test]
    fn mysql_common_names_unnamed_columns_by_their_position() {
        assert_eq!(ColumnRef::parse("@3"), ColumnRef::Position(3));
        assert_eq!(
            ColumnRef::parse("showtime_id"),
            ColumnRef::Named("showtime_id".into())
        );
        assert_eq!(ColumnRef::parse("@x"), ColumnRef::Named("@x".into()));
    }

    #[test]
    fn layouts_come_from_ordinal_positions_and_name_what_is_missing() {
        let cols = |t: &str, names: &[&str]| {
            names
                .iter()
                .enumerate()
                .map(|(i, n)| (t.to_string(), n.to_string(), i as u64 + 1))
                .collect::<Vec<_>>()
        };
        let mut rows = cols(
            "ticket_order",
            &["id", "order_no", "user_id", "showtime_id", "status"],
        );
        rows.extend(cols(
            "order_seat",
            &["order_id", "showtime_id", "seat_no", "active"],
        ));
        rows.extend(cols(
            "showtime",
            &["id", "movie_id", "hall_id", "starts_at", "status"],
        ));
        let got = layouts(&rows).unwrap();
        let layout = |key, columns, status| Layout {
            key,
            columns,
            status,
        };
        // The order's status is not the showtime's: only `showtime` has one.
        assert_eq!(got[&Table::TicketOrder], layout(3, 5, None));
        assert_eq!(got[&Table::OrderSeat], layout(1, 4, None));
        assert_eq!(got[&Table::Showtime], layout(0, 5, Some(4)));

        let no_seats: Vec<_> = rows
            .iter()
            .filter(|r| r.0 != "order_seat")
            .cloned()
            .collect();
        assert_eq!(
            layouts(&no_seats).unwrap_err(),
            "table `order_seat` not found"
        );
        let no_key: Vec<_> = rows
            .iter()
            .filter(|r| !(r.0 == "ticket_order" && r.1 == "showtime_id"))
            .cloned()
            .collect();
        assert_eq!(
            layouts(&no_key).unwrap_err(),
            "column `ticket_order`.`showtime_id` not found"
        );
    }

    #[test]
    fn only_the_contract_tables_spelled_exactly() {
        assert_eq!(Table::from_name(b"order_seat"), Some(Table::OrderSeat));
        assert_eq!(Table::from_name(b"ticket_order"), Some(Table::TicketOrder));
        assert_eq!(Table::from_name(b"showtime"), Some(Table::Showtime));
        assert_eq!(Table::from_name(b"hall"), None);
        assert_eq!(Table::from_name(b"showtimes"), None);
    }
}
