//! The binlog's events, one at a time, as committed transactions: the
//! state machine under [`BinlogSource`](super::BinlogSource), with no
//! server (the replay tests below feed it MySQL 8's events).
//!
//! What mysql_async's `BinlogStream` (0.37) hands over, and so what
//! [`EventReader::read`] is given, read from its source: each event packet
//! of the dump is parsed by one mysql_common `EventStreamReader`, which
//! keeps the latest format description (its checksum algorithm: a
//! checksum is cut off the event, not checked) and the table maps by table
//! id (`BinlogStream::get_tme`; a rotate naming a position other than 0
//! forgets them all). A `TRANSACTION_PAYLOAD` event (MySQL 8.0.20+,
//! `binlog_transaction_compression = ON`) is yielded itself, with its own
//! `log_pos`: the end of the payload event in the file. Its payload is then
//! decompressed whole (`TransactionPayloadEvent::danger_decompress`: zstd,
//! or as is) and the events inside are yielded next, one per poll, before
//! the stream reads the server again (`read_decompressed`: read with no
//! checksum; their table maps are registered as any other). They are the
//! transaction's `BEGIN`, table maps, row events and `XID`, with the
//! `log_pos` the server wrote inside the payload: 0 (no place of their
//! own), so a commit inside one ends where the payload event ends. A
//! payload that does not parse or decompress yields no events (the stream
//! drops the error): its transaction never commits here, silently.

use std::collections::{BTreeSet, HashMap};

use mysql_async::Value;
use mysql_async::binlog::RowsEventFlags;
use mysql_async::binlog::events::{Event, EventData, RowsEventData, TableMapEvent};
use mysql_async::binlog::row::BinlogRow;
use mysql_async::binlog::value::BinlogValue;

use super::{BinlogPosition, Cell, ColumnRef, Committed, Layout, Table, showtimes_of};
use crate::error::{Error, Result};
use crate::model::ShowtimeId;

/// What a query event means to a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Statement {
    Begin,
    Commit,
    Rollback,
    /// DDL, a dummy event, anything else: a statement of its own outside a
    /// transaction, nothing inside one.
    Other,
}

fn statement(query: &str) -> Statement {
    let q = query.trim().trim_end_matches(';').trim();
    if q.eq_ignore_ascii_case("BEGIN") {
        Statement::Begin
    } else if q.eq_ignore_ascii_case("COMMIT") {
        Statement::Commit
    } else if q.eq_ignore_ascii_case("ROLLBACK") {
        Statement::Rollback
    } else {
        Statement::Other
    }
}

/// The binlog's events in, the committed transactions that touched the
/// contract's tables out, and where a new stream would start.
#[derive(Debug)]
pub(super) struct EventReader {
    db: String,
    layouts: HashMap<Table, Layout>,
    /// The file the stream reads now, and the offset after the last event.
    file: String,
    /// After the last transaction read whole: where to start again.
    position: BinlogPosition,
    /// The server sent from the start position: a whole transaction (or
    /// statement) was read past it, or a heartbeat came (it reached the end).
    proven: bool,
    /// Showtimes of the open transaction's rows.
    pending: BTreeSet<ShowtimeId>,
    in_transaction: bool,
    /// A format description came on this connection (events before it, the
    /// server's first rotate, are checksummed as the server guessed).
    seen_format: bool,
    /// Where MySQL's last compressed transaction (a transaction payload
    /// event) ends: the events inside it have no place of their own.
    payload_end: u64,
}

impl EventReader {
    /// A reader of database `db`'s tables as `layouts` has them, from
    /// `position`; `proven` when there is nothing to prove (the position is
    /// the server's own current one).
    pub(super) fn new(
        db: String,
        layouts: HashMap<Table, Layout>,
        position: BinlogPosition,
        proven: bool,
    ) -> EventReader {
        EventReader {
            db,
            layouts,
            file: position.file.clone(),
            position,
            proven,
            pending: BTreeSet::new(),
            in_transaction: false,
            seen_format: false,
            payload_end: 0,
        }
    }

    /// After the last transaction read whole.
    pub(super) fn position(&self) -> &BinlogPosition {
        &self.position
    }

    pub(super) fn proven(&self) -> bool {
        self.proven
    }

    /// Takes one event in, with the table maps read so far by table id;
    /// a transaction that touched showtimes, when this event committed it.
    pub(super) fn read<'m>(
        &mut self,
        event: &Event,
        table_map: impl Fn(u64) -> Option<&'m TableMapEvent<'static>>,
    ) -> Result<Option<Committed>> {
        let header = event.header();
        let end = u64::from(header.log_pos());
        let data = event
            .read_data()
            .map_err(|e| Error::BinlogGap(format!("an event that does not decode: {e}")))?;
        let Some(data) = data else {
            // A type this parser does not know: nothing of ours.
            return Ok(None);
        };
        match data {
            EventData::FormatDescriptionEvent(_) => self.seen_format = true,
            // The server's first, made-up rotate (log_pos 0) comes before any
            // format description, its checksum guessed: its name is not to be
            // trusted; the file asked for is the one it names.
            EventData::RotateEvent(rotate) if header.log_pos() != 0 || self.seen_format => {
                self.file = rotate.name().into_owned();
                if !self.in_transaction {
                    self.position = BinlogPosition {
                        file: self.file.clone(),
                        offset: rotate.position(),
                    };
                }
            }
            EventData::QueryEvent(query) => match statement(&query.query()) {
                Statement::Begin => {
                    self.in_transaction = true;
                    self.pending.clear();
                }
                Statement::Commit => return Ok(self.commit(end)),
                Statement::Rollback => {
                    self.pending.clear();
                    self.in_transaction = false;
                    self.advance(end);
                }
                Statement::Other if !self.in_transaction => self.advance(end),
                Statement::Other => {}
            },
            EventData::XidEvent(_) => return Ok(self.commit(end)),
            EventData::HeartbeatEvent => self.proven = true,
            EventData::TransactionPayloadEvent(_) => self.payload_end = end,
            EventData::RowsEvent(rows) => {
                self.rows(&rows, table_map)?;
                if !self.in_transaction && rows.flags().contains(RowsEventFlags::STMT_END) {
                    return Ok(self.commit(end));
                }
            }
            _ => {}
        }
        Ok(None)
    }

    /// The rows of one rows event, when they are the contract's tables.
    fn rows<'m>(
        &mut self,
        rows: &RowsEventData<'_>,
        table_map: impl Fn(u64) -> Option<&'m TableMapEvent<'static>>,
    ) -> Result<()> {
        let Some(map) = table_map(rows.table_id()) else {
            return Err(Error::BinlogGap(format!(
                "rows of table id {} without its table map",
                rows.table_id()
            )));
        };
        if map.database_name_raw() != self.db.as_bytes() {
            return Ok(());
        }
        let Some(table) = Table::from_name(map.table_name_raw()) else {
            return Ok(());
        };
        let Some(layout) = self.layouts.get(&table).copied() else {
            return Ok(());
        };
        if usize::try_from(map.columns_count()).ok() != Some(layout.columns) {
            return Err(Error::BinlogGap(format!(
                "`{}` has {} columns in the binlog, {} when the source started: it changed",
                table.name(),
                map.columns_count(),
                layout.columns
            )));
        }
        for row in rows.rows(map) {
            let (before, after) =
                row.map_err(|e| Error::BinlogGap(format!("a `{}` row: {e}", table.name())))?;
            // Only a showtime's status is read as text: other tables'
            // strings are not copied.
            let text = table == Table::Showtime;
            let before = before.as_ref().map(|r| image(r, text));
            let after = after.as_ref().map(|r| image(r, text));
            self.pending.extend(showtimes_of(
                table,
                layout,
                before.as_deref(),
                after.as_deref(),
            ));
        }
        Ok(())
    }

    fn advance(&mut self, end: u64) {
        // 0: an event the server made up (it has no place in the file).
        if end != 0 {
            self.proven = true;
            self.position = BinlogPosition {
                file: self.file.clone(),
                offset: end,
            };
        }
    }

    fn commit(&mut self, end: u64) -> Option<Committed> {
        self.in_transaction = false;
        // Inside a compressed transaction the events have no place of their
        // own: it ends where its payload event ends.
        let payload_end = std::mem::take(&mut self.payload_end);
        self.advance(if end == 0 { payload_end } else { end });
        if self.pending.is_empty() {
            return None;
        }
        Some(Committed {
            showtimes: std::mem::take(&mut self.pending).into_iter().collect(),
            position: self.position.clone(),
        })
    }
}

/// A decoded row image as [`showtimes_of`] reads it; strings kept as
/// [`Cell::Text`] only when `text`.
fn image(row: &BinlogRow, text: bool) -> Vec<(ColumnRef, Cell)> {
    row.columns_ref()
        .iter()
        .enumerate()
        .map(|(i, column)| {
            let cell = match row.as_ref(i) {
                Some(BinlogValue::Value(Value::Int(n))) => Cell::Int(*n),
                Some(BinlogValue::Value(Value::UInt(n))) => {
                    i64::try_from(*n).map_or(Cell::Other, Cell::Int)
                }
                Some(BinlogValue::Value(Value::NULL)) | None => Cell::Null,
                Some(BinlogValue::Value(Value::Bytes(b))) if text => Cell::Text(b.clone()),
                Some(_) => Cell::Other,
            };
            (ColumnRef::parse(&column.name_str()), cell)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transactions_begin_and_end_with_these_statements() {
        assert_eq!(statement("BEGIN"), Statement::Begin);
        assert_eq!(statement(" commit ;"), Statement::Commit);
        assert_eq!(statement("ROLLBACK"), Statement::Rollback);
        assert_eq!(
            statement("# Dummy event replacing event type 160 that slave cannot handle."),
            Statement::Other
        );
        assert_eq!(
            statement("ALTER TABLE showtime ADD x INT"),
            Statement::Other
        );
    }
}
