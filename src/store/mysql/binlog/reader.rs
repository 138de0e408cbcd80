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
        if self.payload_end != 0 && end != 0 {
            return Err(self.lost_payload());
        }
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

    /// A server event came after a payload event but before the commit
    /// inside it: the payload did not decompress (the stream drops that
    /// error and yields none of its events). Its transaction is lost: a
    /// gap, resumed past it, since it would be lost the same way again.
    fn lost_payload(&mut self) -> Error {
        let payload_end = std::mem::take(&mut self.payload_end);
        self.pending.clear();
        self.in_transaction = false;
        self.advance(payload_end);
        Error::BinlogGap(format!(
            "a compressed transaction that did not decompress, ending at {}",
            self.position
        ))
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
    //! MySQL 8.0's side of the stream, replayed without a server: the
    //! events a 8.0.36 source sends a replica, laid out with mysql_common's
    //! own serializers (each event is read back and written again by
    //! mysql_common, byte for byte, before it is sent), fed through the
    //! same mysql_common calls as mysql_async's `BinlogStream` (see
    //! [`Stream`]).

    use std::collections::VecDeque;
    use std::io::Cursor;

    use mysql_common::binlog::EventStreamReader;
    use mysql_common::binlog::consts::{
        BinlogChecksumAlg, BinlogVersion, EventFlags, EventType, GtidFlags,
        TransactionPayloadCompressionType,
    };
    use mysql_common::binlog::events::{
        BinlogEventFooter, BinlogEventHeader, FormatDescriptionEvent, GtidEvent, QueryEvent,
        RotateEvent, TransactionPayloadEvent, XidEvent,
    };
    use mysql_common::proto::MySerialize;

    use super::*;
    use crate::store::mysql::binlog::layouts;

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

    const SERVER_ID: u32 = 8036;
    const WHEN: u32 = 1_777_000_000;
    const SID: [u8; 16] = *b"\x3e\x11\xfa\x47\x71\xca\x11\xe1\x9e\x33\xc8\x0a\xa9\x42\x95\x62";

    /// MySQL 8.0.26+'s post-header lengths, by event type - 1 (41 types,
    /// `HEARTBEAT_LOG_EVENT_V2` last; the payload's is its type code, 40,
    /// as the server writes it).
    const POST_HEADER_LENGTHS: [u8; 41] = [
        0, 13, 0, 8, 0, 0, 0, 0, 4, 0, 4, 0, 0, 0, 98, 0, 4, 26, 8, 0, 0, 0, 8, 8, 8, 2, 0, 0, 0,
        10, 10, 10, 42, 42, 0, 18, 52, 0, 10, 40, 0,
    ];

    /// The column types the contract's tables use, as a table map gives
    /// them (`VarChar`: the column's length in bytes, utf8mb4).
    #[derive(Debug, Clone, Copy)]
    enum Type {
        BigInt,
        TinyInt,
        VarChar(u16),
        DateTime3,
    }

    impl Type {
        fn code(self) -> u8 {
            match self {
                Type::TinyInt => 1,
                Type::BigInt => 8,
                Type::VarChar(_) => 15,
                Type::DateTime3 => 18,
            }
        }

        fn metadata(self, out: &mut Vec<u8>) {
            match self {
                Type::BigInt | Type::TinyInt => {}
                Type::VarChar(len) => out.extend_from_slice(&len.to_le_bytes()),
                Type::DateTime3 => out.push(3),
            }
        }
    }

    /// A value of a row image.
    #[derive(Debug, Clone, Copy)]
    enum V {
        I(i64),
        S(&'static str),
        /// 2026-05-01 19:30:00.000
        Time,
        Null,
    }

    fn put(out: &mut Vec<u8>, ty: Type, v: V) {
        match (ty, v) {
            (Type::BigInt, V::I(n)) => out.extend_from_slice(&n.to_le_bytes()),
            (Type::TinyInt, V::I(n)) => out.push(i8::try_from(n).unwrap() as u8),
            (Type::VarChar(len), V::S(s)) => {
                if len < 256 {
                    out.push(u8::try_from(s.len()).unwrap());
                } else {
                    out.extend_from_slice(&u16::try_from(s.len()).unwrap().to_le_bytes());
                }
                out.extend_from_slice(s.as_bytes());
            }
            (Type::DateTime3, V::Time) => {
                // DATETIME2: 5 bytes big-endian (offset 2^39), then the
                // fraction (2 bytes for 3 digits).
                let (y, mo, d, h, mi, s) = (2026u64, 5, 1, 19, 30, 0);
                let ymd = ((y * 13 + mo) << 5) | d;
                let packed = ((ymd << 17) | (h << 12) | (mi << 6) | s) + 0x80_0000_0000;
                out.extend_from_slice(&packed.to_be_bytes()[3..]);
                out.extend_from_slice(&[0, 0]);
            }
            other => panic!("no {other:?}"),
        }
    }

    fn lenenc(out: &mut Vec<u8>, n: u64) {
        match n {
            0..=250 => out.push(n as u8),
            251..=0xffff => {
                out.push(0xfc);
                out.extend_from_slice(&(n as u16).to_le_bytes());
            }
            _ => panic!("{n}"),
        }
    }

    /// One table as its table map describes it.
    struct Def {
        id: u64,
        db: &'static str,
        name: &'static str,
        /// Name, type, nullable.
        columns: Vec<(&'static str, Type, bool)>,
        /// `binlog_row_metadata = FULL` (the names, the primary key and
        /// visibility), else MINIMAL (signedness and charset only).
        full: bool,
    }

    fn ticket_order(id: u64, db: &'static str) -> Def {
        Def {
            id,
            db,
            name: "ticket_order",
            columns: vec![
                ("id", Type::BigInt, false),
                ("order_no", Type::VarChar(160), false),
                ("user_id", Type::BigInt, false),
                ("showtime_id", Type::BigInt, false),
                ("status", Type::VarChar(64), false),
                ("expires_at", Type::DateTime3, false),
                ("created_at", Type::DateTime3, false),
                ("paid_at", Type::DateTime3, true),
                ("cancelled_at", Type::DateTime3, true),
                ("cancel_reason", Type::VarChar(128), true),
            ],
            full: true,
        }
    }

    fn order_seat(id: u64) -> Def {
        Def {
            id,
            db: "sf",
            name: "order_seat",
            columns: vec![
                ("order_id", Type::BigInt, false),
                ("showtime_id", Type::BigInt, false),
                ("seat_no", Type::VarChar(64), false),
                ("active", Type::TinyInt, true),
            ],
            full: false,
        }
    }

    fn showtime(id: u64) -> Def {
        Def {
            id,
            db: "sf",
            name: "showtime",
            columns: vec![
                ("id", Type::BigInt, false),
                ("movie_id", Type::BigInt, false),
                ("hall_id", Type::BigInt, false),
                ("starts_at", Type::DateTime3, false),
                ("status", Type::VarChar(64), false),
            ],
            full: false,
        }
    }

    /// A `ticket_order` row: id, showtime, status.
    fn order(id: i64, showtime: i64, status: &'static str) -> Vec<V> {
        vec![
            V::I(id),
            V::S("SF-0001"),
            V::I(70),
            V::I(showtime),
            V::S(status),
            V::Time,
            V::Time,
            if status == "PAID" { V::Time } else { V::Null },
            V::Null,
            V::Null,
        ]
    }

    /// A row change: its before and after images, as its event has them.
    type Change = (Option<Vec<V>>, Option<Vec<V>>);

    fn seat(order: i64, showtime: i64, seat: &'static str) -> Vec<V> {
        vec![V::I(order), V::I(showtime), V::S(seat), V::I(1)]
    }

    fn showtime_row(id: i64, status: &'static str) -> Vec<V> {
        vec![V::I(id), V::I(1), V::I(3), V::Time, V::S(status)]
    }

    fn bitmap(bits: impl IntoIterator<Item = bool>, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n.div_ceil(8)];
        for (i, bit) in bits.into_iter().enumerate() {
            if bit {
                out[i / 8] |= 1 << (i % 8);
            }
        }
        out
    }

    fn tlv(out: &mut Vec<u8>, field: u8, value: &[u8]) {
        out.push(field);
        lenenc(out, value.len() as u64);
        out.extend_from_slice(value);
    }

    impl Def {
        fn table_map(&self) -> Vec<u8> {
            let n = self.columns.len();
            let mut b = Vec::new();
            b.extend_from_slice(&self.id.to_le_bytes()[..6]);
            b.extend_from_slice(&1u16.to_le_bytes()); // TM_BIT_LEN_EXACT_F
            for name in [self.db, self.name] {
                b.push(name.len() as u8);
                b.extend_from_slice(name.as_bytes());
                b.push(0);
            }
            lenenc(&mut b, n as u64);
            b.extend(self.columns.iter().map(|c| c.1.code()));
            let mut meta = Vec::new();
            for c in &self.columns {
                c.1.metadata(&mut meta);
            }
            lenenc(&mut b, meta.len() as u64);
            b.extend_from_slice(&meta);
            b.extend(bitmap(self.columns.iter().map(|c| c.2), n));
            // Optional metadata, in the server's order. SIGNEDNESS: one bit
            // per numeric column, the first the most significant (all
            // signed here).
            let numeric = self
                .columns
                .iter()
                .filter(|c| matches!(c.1, Type::BigInt | Type::TinyInt))
                .count();
            tlv(&mut b, 1, &vec![0; numeric.div_ceil(8)]);
            // DEFAULT_CHARSET: utf8mb4_0900_ai_ci (255) for every string.
            let mut charset = Vec::new();
            lenenc(&mut charset, 255);
            tlv(&mut b, 2, &charset);
            if self.full {
                // COLUMN_NAME, SIMPLE_PRIMARY_KEY (column 0), COLUMN_VISIBILITY.
                let mut names = Vec::new();
                for c in &self.columns {
                    lenenc(&mut names, c.0.len() as u64);
                    names.extend_from_slice(c.0.as_bytes());
                }
                tlv(&mut b, 4, &names);
                tlv(&mut b, 8, &[0]);
                let mut visible = vec![0u8; n.div_ceil(8)];
                for i in 0..n {
                    visible[i / 8] |= 0x80 >> (i % 8);
                }
                tlv(&mut b, 12, &visible);
            }
            b
        }

        /// A v2 rows event of this table (`STMT_END_F` set: the statement's
        /// last), its rows each a before and an after image as the type says.
        fn rows(&self, rows: &[Change]) -> Vec<u8> {
            let n = self.columns.len();
            let mut b = Vec::new();
            b.extend_from_slice(&self.id.to_le_bytes()[..6]);
            b.extend_from_slice(&1u16.to_le_bytes()); // STMT_END_F
            b.extend_from_slice(&2u16.to_le_bytes()); // no extra row info
            lenenc(&mut b, n as u64);
            let (before, after) = (rows[0].0.is_some(), rows[0].1.is_some());
            let all = bitmap(std::iter::repeat_n(true, n), n);
            for present in [before, after] {
                if present {
                    b.extend_from_slice(&all);
                }
            }
            for (b_img, a_img) in rows {
                for image in [b_img, a_img].into_iter().flatten() {
                    b.extend(bitmap(image.iter().map(|v| matches!(v, V::Null)), n));
                    for (c, v) in self.columns.iter().zip(image) {
                        if !matches!(v, V::Null) {
                            put(&mut b, c.1, *v);
                        }
                    }
                }
            }
            b
        }
    }

    /// A zstd frame holding `data` as raw (stored) blocks: what the
    /// payload's decoder (the zstd crate, under mysql_common) reads as it
    /// reads the server's compressed blocks.
    fn zstd_frame(data: &[u8]) -> Vec<u8> {
        let mut out = vec![0x28, 0xb5, 0x2f, 0xfd];
        // Single segment, a 4-byte content size, no checksum, no dictionary.
        out.push(0b1010_0000);
        out.extend_from_slice(&u32::try_from(data.len()).unwrap().to_le_bytes());
        let mut blocks = data.chunks(1000).peekable();
        while let Some(block) = blocks.next() {
            let last = u32::from(blocks.peek().is_none());
            let header = (u32::try_from(block.len()).unwrap() << 3) | last; // raw block
            out.extend_from_slice(&header.to_le_bytes()[..3]);
            out.extend_from_slice(block);
        }
        out
    }

    /// What one event of a transaction is.
    struct Ev(EventType, Vec<u8>);

    fn query(sql: &str) -> Ev {
        // Flags2, sql_mode, catalog, charsets, utf8mb4's default collation.
        let mut vars = vec![0, 0, 0, 0, 0, 1, 0, 0, 0x20, 0x15, 0, 0, 0, 0];
        vars.extend_from_slice(&[6, 3, b's', b't', b'd']);
        vars.extend_from_slice(&[4, 0xff, 0, 0xff, 0, 0xff, 0]);
        vars.extend_from_slice(&[18, 0xff, 0]);
        let mut b = Vec::new();
        QueryEvent::new(vars, &b"sf"[..])
            .with_thread_id(11)
            .with_query(sql.as_bytes())
            .serialize(&mut b);
        Ev(EventType::QUERY_EVENT, b)
    }

    fn table_map(def: &Def) -> Ev {
        Ev(EventType::TABLE_MAP_EVENT, def.table_map())
    }

    fn write(def: &Def, rows: Vec<Vec<V>>) -> Ev {
        let rows: Vec<_> = rows.into_iter().map(|r| (None, Some(r))).collect();
        Ev(EventType::WRITE_ROWS_EVENT, def.rows(&rows))
    }

    fn update(def: &Def, rows: Vec<(Vec<V>, Vec<V>)>) -> Ev {
        let rows: Vec<_> = rows.into_iter().map(|(b, a)| (Some(b), Some(a))).collect();
        Ev(EventType::UPDATE_ROWS_EVENT, def.rows(&rows))
    }

    fn delete(def: &Def, rows: Vec<Vec<V>>) -> Ev {
        let rows: Vec<_> = rows.into_iter().map(|r| (Some(r), None)).collect();
        Ev(EventType::DELETE_ROWS_EVENT, def.rows(&rows))
    }

    fn xid(xid: u64) -> Ev {
        let mut b = Vec::new();
        XidEvent { xid }.serialize(&mut b);
        Ev(EventType::XID_EVENT, b)
    }

    /// A MySQL 8.0.36 source dumping its binlog to a replica that asked for
    /// checksums (mysql_async does: `@master_binlog_checksum = 'ALL'`): the
    /// packets it sends, and where it is in its file.
    struct Source {
        /// `binlog_checksum = CRC32`, else `NONE`.
        crc: bool,
        fde: FormatDescriptionEvent<'static>,
        file: String,
        /// Where the next event goes in `file`.
        offset: u32,
        gno: u64,
        packets: Vec<Vec<u8>>,
    }

    impl Source {
        fn new(crc: bool) -> Source {
            let alg = if crc {
                BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32
            } else {
                BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_OFF
            };
            Source {
                crc,
                fde: FormatDescriptionEvent::new(BinlogVersion::Version4)
                    .with_server_version(&b"8.0.36"[..])
                    .with_create_timestamp(WHEN)
                    .with_event_type_header_lengths(&POST_HEADER_LENGTHS[..])
                    .with_footer(BinlogEventFooter::new(alg)),
                file: String::new(),
                offset: 0,
                gno: 0,
                packets: Vec::new(),
            }
        }

        /// One event's bytes: `checksummed` as the server's setting says
        /// (the events inside a payload never are; a format description
        /// always carries the algorithm and room for one).
        fn encode(
            &self,
            ty: EventType,
            body: &[u8],
            log_pos: u32,
            flags: EventFlags,
            checksummed: bool,
        ) -> Vec<u8> {
            let is_fde = ty == EventType::FORMAT_DESCRIPTION_EVENT;
            let crc = checksummed && self.crc;
            let trailer = if is_fde {
                5
            } else if crc {
                4
            } else {
                0
            };
            let size = BinlogEventHeader::LEN + body.len() + trailer;
            let mut raw = Vec::new();
            BinlogEventHeader::new(WHEN, ty, SERVER_ID, size as u32, log_pos, flags)
                .serialize(&mut raw);
            raw.extend_from_slice(body);
            if is_fde {
                raw.push(self.fde.footer().get_checksum_alg().unwrap().unwrap() as u8);
            }
            raw.resize(size, 0);
            let footer = BinlogEventFooter::new(if crc {
                BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32
            } else {
                BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_OFF
            });
            let context = self.fde.clone().with_footer(footer);
            let event = Event::read(&context, &raw[..]).unwrap();
            // mysql_common reads these bytes as this event, and writes the
            // event back as the same bytes.
            let data = event.read_data().unwrap().expect("a known event type");
            if !matches!(data, EventData::HeartbeatEvent) {
                let mut again = Vec::new();
                data.serialize(&mut again);
                assert_eq!(again, body, "{ty:?} written back");
            }
            if trailer == 0 {
                return raw;
            }
            // mysql_common's writer puts the checksum in.
            let mut out = Vec::new();
            event.write(BinlogVersion::Version4, &mut out).unwrap();
            assert_eq!(out.len(), size);
            out
        }

        /// Appends an event at the end of the file; its end.
        fn send(&mut self, ty: EventType, body: &[u8]) -> u64 {
            let size = BinlogEventHeader::LEN + body.len() + if self.crc { 4 } else { 0 };
            let end = self.offset + size as u32;
            let bytes = self.encode(ty, body, end, EventFlags::empty(), true);
            assert_eq!(bytes.len(), size);
            self.packet(bytes);
            self.offset = end;
            u64::from(end)
        }

        fn packet(&mut self, bytes: Vec<u8>) {
            let mut packet = vec![0]; // OK
            packet.extend(bytes);
            self.packets.push(packet);
        }

        /// What the source sends first for a file read from its start: a
        /// made-up rotate naming it (no place in the file: log_pos 0), its
        /// format description, its previous GTIDs.
        fn open(&mut self, file: &str) {
            self.file = file.to_string();
            let mut rotate = Vec::new();
            RotateEvent::new(4, file.as_bytes()).serialize(&mut rotate);
            let fake = self.encode(
                EventType::ROTATE_EVENT,
                &rotate,
                0,
                EventFlags::LOG_EVENT_ARTIFICIAL_F,
                true,
            );
            self.packet(fake);
            let mut fde = Vec::new();
            self.fde.serialize(&mut fde);
            let end = 4 + (BinlogEventHeader::LEN + fde.len() + 5) as u32;
            let bytes = self.encode(
                EventType::FORMAT_DESCRIPTION_EVENT,
                &fde,
                end,
                EventFlags::empty(),
                true,
            );
            self.packet(bytes);
            self.offset = end;
            self.send(EventType::PREVIOUS_GTIDS_EVENT, &[0; 8]);
        }

        /// The GTID event that starts each transaction.
        fn gtid(&mut self) -> Vec<u8> {
            self.gno += 1;
            let mut b = Vec::new();
            GtidEvent::new(SID, self.gno)
                .with_flags(GtidFlags::MAY_HAVE_SBR)
                .with_last_committed(self.gno - 1)
                .with_sequence_number(self.gno)
                .with_immediate_commit_timestamp(u64::from(WHEN) * 1_000_000)
                .with_original_commit_timestamp(u64::from(WHEN) * 1_000_000)
                .with_tx_length(500)
                .with_immediate_server_version(80036)
                .with_original_server_version(80036)
                .serialize(&mut b);
            b
        }

        /// A transaction (or a statement) as GTID and its events; where
        /// it ends.
        fn transaction(&mut self, events: Vec<Ev>) -> u64 {
            let gtid = self.gtid();
            self.send(EventType::GTID_EVENT, &gtid);
            let mut end = 0;
            for Ev(ty, body) in events {
                end = self.send(ty, &body);
            }
            end
        }

        /// A transaction compressed (`binlog_transaction_compression`):
        /// its GTID, then one payload event holding its events, each with
        /// log_pos 0 and no checksum; where the payload event ends.
        fn compressed(&mut self, events: Vec<Ev>) -> u64 {
            self.payload(events, zstd_frame)
        }

        /// [`compressed`](Self::compressed), its payload damaged so that
        /// zstd refuses it.
        fn compressed_corrupt(&mut self, events: Vec<Ev>) -> u64 {
            self.payload(events, |_| vec![0xEE; 32])
        }

        /// A GTID, then one payload event holding `events` as `frame` makes
        /// their bytes; where the payload event ends.
        fn payload(&mut self, events: Vec<Ev>, frame: impl Fn(&[u8]) -> Vec<u8>) -> u64 {
            let gtid = self.gtid();
            self.send(EventType::GTID_EVENT, &gtid);
            let mut inner = Vec::new();
            for Ev(ty, body) in events {
                inner.extend(self.encode(ty, &body, 0, EventFlags::empty(), false));
            }
            let frame = frame(&inner);
            let mut b = Vec::new();
            TransactionPayloadEvent::new(
                frame.len() as u64,
                TransactionPayloadCompressionType::ZSTD,
                inner.len() as u64,
                frame,
            )
            .serialize(&mut b);
            self.send(EventType::TRANSACTION_PAYLOAD_EVENT, &b)
        }

        /// The file is full: a rotate to the next, and the next opened.
        fn rotate(&mut self, next: &str) -> u64 {
            let mut b = Vec::new();
            RotateEvent::new(4, next.as_bytes()).serialize(&mut b);
            let end = self.send(EventType::ROTATE_EVENT, &b);
            self.open(next);
            end
        }

        /// A heartbeat: nothing more to send (`HEARTBEAT_LOG_EVENT`, or
        /// 8.0.26+'s `HEARTBEAT_LOG_EVENT_V2`, type 41, whose body is not
        /// read here).
        fn heartbeat(&mut self, v2: bool) {
            let file = self.file.clone();
            let mut bytes = self.encode(
                EventType::HEARTBEAT_EVENT,
                file.as_bytes(),
                self.offset,
                EventFlags::LOG_EVENT_ARTIFICIAL_F,
                true,
            );
            if v2 {
                // A type mysql_common has no name for: set in the header,
                // the checksum written again.
                bytes[4] = 41;
                let event = Event::read(&self.fde, &bytes[..]).unwrap();
                bytes.clear();
                event.write(BinlogVersion::Version4, &mut bytes).unwrap();
            }
            self.packet(bytes);
        }
    }

    /// mysql_async's `BinlogStream::poll_next`, without its connection: the
    /// same mysql_common calls in the same order (an OK packet's event
    /// read by the stream's `EventStreamReader`; a payload event yielded,
    /// then decompressed whole and its events yielded from
    /// `read_decompressed` before the next packet).
    struct Stream {
        esr: EventStreamReader,
        tpe: Option<Cursor<Vec<u8>>>,
        packets: VecDeque<Vec<u8>>,
    }

    impl Stream {
        fn next(&mut self) -> Option<Event> {
            if let Some(tpe) = self.tpe.as_mut() {
                match self.esr.read_decompressed(tpe).unwrap() {
                    Some(event) => return Some(event),
                    None => self.tpe = None,
                }
            }
            let packet = self.packets.pop_front()?;
            assert_eq!(packet[0], 0, "an event packet");
            let event = self.esr.read(&packet[1..]).unwrap()?;
            if event.header().event_type_raw() == EventType::TRANSACTION_PAYLOAD_EVENT as u8
                && let Ok(e) = event.read_event::<TransactionPayloadEvent<'_>>()
            {
                self.tpe = Some(Cursor::new(e.danger_decompress()));
            }
            Some(event)
        }
    }

    /// A reader and the stream it reads.
    struct Replay {
        stream: Stream,
        reader: EventReader,
    }

    impl Replay {
        /// Database `sf` as the contract has it, read from `from`.
        fn new(from: BinlogPosition, proven: bool) -> Replay {
            let columns: Vec<(String, String, u64)> =
                [ticket_order(0, "sf"), order_seat(0), showtime(0)]
                    .iter()
                    .flat_map(|def| {
                        def.columns
                            .iter()
                            .enumerate()
                            .map(|(i, c)| (def.name.to_string(), c.0.to_string(), i as u64 + 1))
                    })
                    .collect();
            Replay {
                stream: Stream {
                    esr: EventStreamReader::new(BinlogVersion::Version4),
                    tpe: None,
                    packets: VecDeque::new(),
                },
                reader: EventReader::new("sf".into(), layouts(&columns).unwrap(), from, proven),
            }
        }

        /// Reads what the source sent: the commits that named showtimes.
        fn read(&mut self, source: &mut Source) -> Result<Vec<Committed>> {
            self.stream.packets.extend(source.packets.drain(..));
            let mut done = Vec::new();
            while let Some(event) = self.stream.next() {
                let esr = &self.stream.esr;
                if let Some(c) = self.reader.read(&event, |id| esr.get_tme(id))? {
                    done.push(c);
                }
            }
            Ok(done)
        }

        fn at(&self) -> (&str, u64) {
            let p = self.reader.position();
            (p.file.as_str(), p.offset)
        }
    }

    fn at(file: &str, offset: u64) -> BinlogPosition {
        BinlogPosition {
            file: file.into(),
            offset,
        }
    }

    fn committed(showtimes: &[ShowtimeId], file: &str, offset: u64) -> Vec<Committed> {
        vec![Committed {
            showtimes: showtimes.to_vec(),
            position: at(file, offset),
        }]
    }

    /// A MySQL 8.0.36 source's binlog, two files, read from a checkpoint at
    /// the start of the first.
    fn replay_mysql8(crc: bool) {
        const FIRST: &str = "binlog.000001";
        const SECOND: &str = "binlog.000002";
        let mut source = Source::new(crc);
        let mut replay = Replay::new(at(FIRST, 4), false);

        source.open(FIRST);
        assert_eq!(replay.read(&mut source).unwrap(), vec![]);
        assert_eq!(replay.at(), (FIRST, 4), "the made-up rotate is not trusted");
        assert!(!replay.reader.proven(), "no transaction read yet");

        // A payment (FULL row metadata: the columns by name) and a seat
        // released, in one transaction.
        let orders = ticket_order(101, "sf");
        let seats = order_seat(102);
        let end = source.transaction(vec![
            query("BEGIN"),
            table_map(&orders),
            update(
                &orders,
                vec![(order(7, 42, "PENDING"), order(7, 42, "PAID"))],
            ),
            table_map(&seats),
            delete(&seats, vec![seat(8, 43, "A-1")]),
            xid(1001),
        ]);
        assert_eq!(
            replay.read(&mut source).unwrap(),
            committed(&[42, 43], FIRST, end)
        );
        assert_eq!(replay.at(), (FIRST, end));
        assert!(replay.reader.proven());

        // Another database's `ticket_order`: nothing, but read past.
        let theirs = ticket_order(103, "other");
        let end = source.transaction(vec![
            query("BEGIN"),
            table_map(&theirs),
            write(&theirs, vec![order(1, 99, "PENDING")]),
            xid(1002),
        ]);
        assert_eq!(replay.read(&mut source).unwrap(), vec![]);
        assert_eq!(replay.at(), (FIRST, end));

        // A statement of its own (DDL: no BEGIN, no XID).
        let end = source.transaction(vec![query(
            "CREATE TABLE sf.note (id BIGINT PRIMARY KEY) /* xid=1003 */",
        )]);
        assert_eq!(replay.read(&mut source).unwrap(), vec![]);
        assert_eq!(replay.at(), (FIRST, end));

        // A compressed transaction: showtimes on sale (one scheduled,
        // not), and an order; it ends where its payload event ends.
        let shows = showtime(104);
        let orders = ticket_order(101, "sf");
        let before = end;
        let end = source.compressed(vec![
            query("BEGIN"),
            table_map(&shows),
            write(
                &shows,
                vec![showtime_row(201, "ON_SALE"), showtime_row(202, "SCHEDULED")],
            ),
            table_map(&orders),
            write(&orders, vec![order(9, 55, "PENDING")]),
            xid(1004),
        ]);
        assert!(end > before);
        assert_eq!(
            replay.read(&mut source).unwrap(),
            committed(&[55, 201], FIRST, end)
        );
        assert_eq!(replay.at(), (FIRST, end));

        // A compressed transaction on another database: read past, to its
        // payload's end.
        let end = source.compressed(vec![
            query("BEGIN"),
            table_map(&theirs),
            write(&theirs, vec![order(2, 98, "PENDING")]),
            xid(1005),
        ]);
        assert_eq!(replay.read(&mut source).unwrap(), vec![]);
        assert_eq!(replay.at(), (FIRST, end));

        // The next file: its start, then a transaction in it (the table ids
        // of the first file forgotten, the maps sent again).
        source.rotate(SECOND);
        assert_eq!(replay.read(&mut source).unwrap(), vec![]);
        assert_eq!(replay.at(), (SECOND, 4));
        let seats = order_seat(201);
        let end = source.transaction(vec![
            query("BEGIN"),
            table_map(&seats),
            write(&seats, vec![seat(10, 77, "B-2"), seat(10, 77, "B-3")]),
            xid(1006),
        ]);
        assert_eq!(
            replay.read(&mut source).unwrap(),
            committed(&[77], SECOND, end)
        );
        assert_eq!(replay.at(), (SECOND, end));

        // And compressed in the second file too.
        let end = source.compressed(vec![
            query("BEGIN"),
            table_map(&seats),
            update(&seats, vec![(seat(10, 77, "B-2"), seat(10, 78, "B-2"))]),
            xid(1007),
        ]);
        assert_eq!(
            replay.read(&mut source).unwrap(),
            committed(&[77, 78], SECOND, end)
        );
        assert_eq!(replay.at(), (SECOND, end));
    }

    #[test]
    fn a_mysql8_binlog_with_crc32_checksums_replays_to_its_commits_and_positions() {
        replay_mysql8(true);
    }

    #[test]
    fn a_mysql8_binlog_without_checksums_replays_to_its_commits_and_positions() {
        replay_mysql8(false);
    }

    #[test]
    fn a_position_is_proven_by_a_whole_transaction_or_a_heartbeat() {
        // A checkpoint given: nothing proven by the file's start alone.
        let mut source = Source::new(true);
        let mut replay = Replay::new(at("binlog.000007", 4), false);
        source.open("binlog.000007");
        let gtid = source.gtid();
        source.send(EventType::GTID_EVENT, &gtid);
        source.send(EventType::QUERY_EVENT, &query("BEGIN").1);
        replay.read(&mut source).unwrap();
        assert!(!replay.reader.proven(), "a transaction begun is not read");
        // 8.0.26+'s heartbeat v2 is a type mysql_common 0.37 does not
        // know: read as nothing, it proves nothing.
        source.heartbeat(true);
        replay.read(&mut source).unwrap();
        assert!(!replay.reader.proven(), "heartbeat v2");
        source.heartbeat(false);
        replay.read(&mut source).unwrap();
        assert!(replay.reader.proven(), "heartbeat");

        // A compressed transaction read whole proves the position.
        let mut source = Source::new(true);
        let mut replay = Replay::new(at("binlog.000007", 4), false);
        source.open("binlog.000007");
        let theirs = ticket_order(5, "other");
        source.compressed(vec![
            query("BEGIN"),
            table_map(&theirs),
            write(&theirs, vec![order(2, 98, "PENDING")]),
            xid(1),
        ]);
        replay.read(&mut source).unwrap();
        assert!(replay.reader.proven(), "a compressed transaction");
        // A source that started at the server's own position has nothing
        // to prove.
        assert!(Replay::new(at("binlog.000007", 4), true).reader.proven());
    }

    #[test]
    fn a_compressed_transaction_that_does_not_decompress_is_a_gap_resumed_past_it() {
        let mut source = Source::new(true);
        let mut replay = Replay::new(at("binlog.000003", 4), false);
        source.open("binlog.000003");
        let seats = order_seat(301);
        let end = source.compressed_corrupt(vec![
            query("BEGIN"),
            table_map(&seats),
            write(&seats, vec![seat(1, 5, "A-1")]),
            xid(9),
        ]);
        source.transaction(vec![
            query("BEGIN"),
            table_map(&seats),
            write(&seats, vec![seat(2, 6, "A-2")]),
            xid(10),
        ]);
        match replay.read(&mut source) {
            Err(Error::BinlogGap(why)) => assert_eq!(
                why,
                format!(
                    "a compressed transaction that did not decompress, ending at binlog.000003:{end}"
                )
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(replay.at(), ("binlog.000003", end), "resumed past it");
    }

    #[test]
    fn rows_without_their_table_map_are_a_gap() {
        for compressed in [false, true] {
            let mut source = Source::new(true);
            let mut replay = Replay::new(at("binlog.000003", 4), false);
            source.open("binlog.000003");
            // The map of table 301 was sent before the position read from.
            let events = vec![
                query("BEGIN"),
                write(&order_seat(301), vec![seat(1, 5, "A-1")]),
                xid(9),
            ];
            if compressed {
                source.compressed(events);
            } else {
                source.transaction(events);
            }
            match replay.read(&mut source) {
                Err(Error::BinlogGap(why)) => {
                    assert_eq!(why, "rows of table id 301 without its table map")
                }
                other => panic!("compressed {compressed}: {other:?}"),
            }
            assert_eq!(replay.at(), ("binlog.000003", 4));
        }
    }
}
