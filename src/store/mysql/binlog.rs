//! MySQL's row binlog, read as a replica reads it (mysql_async's binlog
//! stream): each committed transaction that changed seatflow's
//! `ticket_order`, `order_seat` or `showtime` rows in the configured
//! database, as the showtimes it touched, with the binlog position after it.
//!
//! What the server must allow, checked before the stream starts and named
//! as the statement to run when missing ([`Error::BinlogSetup`]):
//! `REPLICATION CLIENT` (the current position: `SHOW MASTER STATUS`; MariaDB
//! calls it `BINLOG MONITOR`), `REPLICATION SLAVE` (the stream itself), the
//! binlog on, `binlog_format = ROW`, and row images that carry every column
//! (`binlog_row_image = FULL` or `NOBLOB`: a `MINIMAL` update of an order's
//! status logs neither image's `showtime_id`), MariaDB's `log_bin_compress`
//! off (its compressed row events are not decoded).
//!
//! MariaDB sends a replica that announces no capability (mysql_async does
//! not) only MySQL's event types: a GTID becomes a `BEGIN` query, annotate
//! rows, binlog checkpoints and GTID lists become dummy events of the same
//! size, so positions stay contiguous. MySQL 8 sends its own GTID events and
//! version 2 row events; both are decoded. A transaction ends with an XID
//! (InnoDB) or a `COMMIT` query (other engines).
//!
//! The binlog names no column: the position of `showtime_id` (`id` for
//! `showtime`) comes from `information_schema`, read at start; a table map
//! whose column count differs from it (the table changed since) is a gap.
//!
//! A position means something only on the server that wrote it: the source
//! reads the server's identity at start ([`ServerIdentity`]) and starts
//! from a given [`Checkpoint`] only when it names that server.
//!
//! Here: the server's settings and the stream; `reader.rs` turns the
//! stream's events into committed transactions and positions (no server:
//! its tests replay MySQL 8's events).

mod reader;

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt as _;
use mysql_async::prelude::Queryable as _;
use mysql_async::{
    BinlogStream, BinlogStreamRequest, ClientIdentity, Conn, OptsBuilder, Row, SslOpts, Value,
};

use self::reader::EventReader;
use super::{MySqlSslMode, MysqlTls};
use crate::error::{Error, Result};
use crate::model::ShowtimeId;

/// The server's error numbers this module tells apart.
const ACCESS_DENIED_FOR_OPERATION: u16 = 1227; // ER_SPECIFIC_ACCESS_DENIED_ERROR
const ACCESS_DENIED: u16 = 1045; // ER_ACCESS_DENIED_ERROR
const SYNTAX_ERROR: u16 = 1064;
const FATAL_READING_BINLOG: u16 = 1236; // ER_MASTER_FATAL_ERROR_READING_BINLOG

/// A place in the binlog: a file and the offset of the next event in it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct BinlogPosition {
    pub file: String,
    pub offset: u64,
}

impl std::fmt::Display for BinlogPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.offset)
    }
}

/// The server a binlog position belongs to: `@@server_id`, and
/// `@@server_uuid` where the server has one (MySQL; MariaDB has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerIdentity {
    pub server_id: u32,
    pub server_uuid: Option<String>,
}

impl std::fmt::Display for ServerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.server_uuid {
            Some(uuid) => write!(f, "server_id {} ({uuid})", self.server_id),
            None => write!(f, "server_id {}", self.server_id),
        }
    }
}

/// A binlog position and the server it belongs to: where a reader may
/// start again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub server: ServerIdentity,
    pub position: BinlogPosition,
}

/// Where a source started reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartedFrom {
    /// The checkpoint it was given.
    Given,
    /// The server's current position: no checkpoint was given.
    Current,
    /// The server's current position: the checkpoint given belongs to
    /// another server (this one).
    OtherServer(ServerIdentity),
}

/// The server's identity from `SHOW GLOBAL VARIABLES` (lowercase names).
fn identity(vars: &HashMap<String, String>) -> Result<ServerIdentity> {
    let server_id = vars
        .get("server_id")
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| {
            Error::BinlogGap(format!("unreadable server_id {:?}", vars.get("server_id")))
        })?;
    let server_uuid = vars
        .get("server_uuid")
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    Ok(ServerIdentity {
        server_id,
        server_uuid,
    })
}

/// How the source registers and how long it waits.
#[derive(Debug, Clone)]
pub struct BinlogOptions {
    /// This replica's server id: non-zero (0 asks the server to stop at the
    /// end of the binlog) and unique among the server's replicas (a second
    /// dump with the same id ends the first).
    pub server_id: u32,
    /// The server sends a heartbeat when it has had nothing to send for this
    /// long; three silent periods end the stream as a gap.
    pub heartbeat: Duration,
    /// Connecting and each set-up query.
    pub connect_timeout: Duration,
}

impl Default for BinlogOptions {
    fn default() -> Self {
        BinlogOptions {
            server_id: 0x5EA7_F10E,
            heartbeat: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// One committed transaction that changed the contract's tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The showtimes its rows touched, each once, ascending.
    pub showtimes: Vec<ShowtimeId>,
    /// The binlog position right after it.
    pub position: BinlogPosition,
}

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
    fn parse(name: &str) -> ColumnRef {
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

/// A statement to run that would let the source start (for the error).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Missing {
    ReplicationClient,
    ReplicationSlave,
    LogBin,
    Format(String),
    RowImage(String),
    Compressed,
}

impl Missing {
    fn remedy(&self, grantee: &str) -> String {
        match self {
            Missing::ReplicationClient => format!(
                "missing privilege REPLICATION CLIENT (MariaDB: BINLOG MONITOR), to read the \
                 current position: GRANT REPLICATION CLIENT ON *.* TO {grantee}"
            ),
            Missing::ReplicationSlave => format!(
                "missing privilege REPLICATION SLAVE, to read the binlog: \
                 GRANT REPLICATION SLAVE ON *.* TO {grantee}"
            ),
            Missing::LogBin => {
                "the binlog is off: start the server with log_bin (and a server_id)".to_string()
            }
            Missing::Format(now) => format!(
                "binlog_format is {now}, not ROW: SET GLOBAL binlog_format = 'ROW' (and \
                 binlog_format = ROW in the server's configuration; sessions already open keep \
                 their format until they reconnect)"
            ),
            Missing::RowImage(now) => format!(
                "binlog_row_image is {now}: an update would not log its showtime_id: \
                 SET GLOBAL binlog_row_image = 'FULL' (and in the server's configuration)"
            ),
            Missing::Compressed => "log_bin_compress is ON (compressed row events are not \
                 read): SET GLOBAL log_bin_compress = OFF"
                .to_string(),
        }
    }
}

/// What the settings of the server say is missing (`SHOW GLOBAL VARIABLES`:
/// name, value). A variable the server does not have is no problem
/// (`log_bin_compress` is MariaDB's).
fn missing_settings(vars: &HashMap<String, String>) -> Vec<Missing> {
    let get = |name: &str| vars.get(name).map(|v| v.to_ascii_uppercase());
    let mut missing = Vec::new();
    if get("log_bin").is_some_and(|v| v != "ON" && v != "1") {
        missing.push(Missing::LogBin);
    }
    if let Some(format) = get("binlog_format")
        && format != "ROW"
    {
        missing.push(Missing::Format(format));
    }
    if let Some(image) = get("binlog_row_image")
        && !matches!(image.as_str(), "FULL" | "NOBLOB")
    {
        missing.push(Missing::RowImage(image));
    }
    if get("log_bin_compress").is_some_and(|v| v == "ON" || v == "1") {
        missing.push(Missing::Compressed);
    }
    missing
}

/// `CURRENT_USER()` (`user@host`) as a grantee: `'user'@'host'`.
fn grantee(current_user: &str) -> String {
    match current_user.rsplit_once('@') {
        Some((user, host)) => format!("'{user}'@'{host}'"),
        None => format!("'{current_user}'"),
    }
}

/// The server's error number, if `e` is an error the server sent.
fn server_code(e: &mysql_async::Error) -> Option<u16> {
    match e {
        mysql_async::Error::Server(s) => Some(s.code),
        _ => None,
    }
}

/// Whether the server refused to register a replica for want of
/// `REPLICATION SLAVE`: MySQL says 1227, MariaDB 1045 ("access denied for
/// user", though the login went through).
fn refused_replication(e: &mysql_async::Error) -> bool {
    matches!(
        server_code(e),
        Some(ACCESS_DENIED_FOR_OPERATION | ACCESS_DENIED)
    )
}

/// Connection options from the configured URL (sqlx's: its TLS parameters
/// are read here, any other one is left alone, since mysql_async refuses
/// parameters it does not know) and TLS settings. `tls` says TLS or not:
/// mysql_async has no "preferred" (TLS if offered); see [`connect`].
fn opts(url: &str, tls: &MysqlTls, with_tls: bool) -> Result<mysql_async::Opts> {
    let bad = |why: &str| Error::BinlogSetup(vec![format!("mysql.url: {why}")]);
    let u = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if u.scheme() != "mysql" && u.scheme() != "mariadb" {
        return Err(bad("not a mysql:// URL"));
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let host = u.host_str().ok_or_else(|| bad("no host"))?;
    let db = u.path().trim_start_matches('/');
    let mut builder = OptsBuilder::default()
        .ip_or_hostname(host.trim_start_matches('[').trim_end_matches(']'))
        .tcp_port(u.port().unwrap_or(3306))
        .user(Some(decode(u.username())).filter(|s| !s.is_empty()))
        .pass(u.password().map(decode))
        .db_name(Some(decode(db)).filter(|s| !s.is_empty()))
        // Where the URL says, not the server's socket on a local host.
        .prefer_socket(false);
    if with_tls {
        let param = |name: &str| {
            u.query_pairs()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.into_owned())
        };
        let mode = tls
            .mode
            .unwrap_or_else(|| url_mode(param("ssl-mode").as_deref()));
        let ca = tls
            .ca_file
            .clone()
            .or_else(|| param("ssl-ca").map(Into::into));
        let client = tls
            .client
            .clone()
            .or_else(|| Some((param("ssl-cert")?.into(), param("ssl-key")?.into())));
        let mut ssl = SslOpts::default();
        if let Some(ca) = ca {
            ssl = ssl.with_root_certs(vec![ca.into()]);
        }
        if let Some((cert, key)) = client {
            ssl = ssl.with_client_identity(Some(ClientIdentity::new(cert.into(), key.into())));
        }
        ssl = match mode {
            MySqlSslMode::VerifyIdentity => ssl,
            MySqlSslMode::VerifyCa => ssl.with_danger_skip_domain_validation(true),
            _ => ssl
                .with_danger_skip_domain_validation(true)
                .with_danger_accept_invalid_certs(true),
        };
        builder = builder.ssl_opts(ssl);
    }
    Ok(builder.into())
}

/// sqlx's `ssl-mode` URL parameter; its default is `PREFERRED`.
fn url_mode(value: Option<&str>) -> MySqlSslMode {
    value
        .and_then(|v| v.parse().ok())
        .unwrap_or(MySqlSslMode::Preferred)
}

/// One connection as `url` and `tls` say: TLS when the mode asks for it;
/// with `PREFERRED` (sqlx's default), TLS if the server offers it, else
/// plain text, as sqlx does.
async fn connect(url: &str, tls: &MysqlTls, timeout: Duration) -> Result<Conn> {
    let u = url::Url::parse(url).ok();
    let url_param = u.as_ref().and_then(|u| {
        u.query_pairs()
            .find(|(k, _)| k == "ssl-mode")
            .map(|(_, v)| v.into_owned())
    });
    let mode = tls.mode.unwrap_or_else(|| url_mode(url_param.as_deref()));
    let within = |o: mysql_async::Opts| async move {
        tokio::time::timeout(timeout, Conn::new(o))
            .await
            .map_err(|_| Error::BinlogGap(format!("no connection within {timeout:?}")))?
            .map_err(Error::from)
    };
    match mode {
        MySqlSslMode::Disabled => within(opts(url, tls, false)?).await,
        MySqlSslMode::Preferred => match within(opts(url, tls, true)?).await {
            Err(Error::Binlog(mysql_async::Error::Driver(
                mysql_async::DriverError::NoClientSslFlagFromServer,
            ))) => within(opts(url, tls, false)?).await,
            other => other,
        },
        _ => within(opts(url, tls, true)?).await,
    }
}

/// A result row's columns as text (the text protocol's values are bytes).
fn texts(row: &Row) -> Vec<String> {
    (0..row.len())
        .map(|i| match row.as_ref(i) {
            Some(Value::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::Int(n)) => n.to_string(),
            Some(Value::UInt(n)) => n.to_string(),
            _ => String::new(),
        })
        .collect()
}

/// The first row of `query`'s result, as text columns.
async fn first_row(conn: &mut Conn, query: &str) -> Result<Option<Vec<String>>> {
    let row: Option<Row> = conn.query_first(query).await?;
    Ok(row.as_ref().map(texts))
}

/// Every row of `query`, as text columns.
async fn all_rows(conn: &mut Conn, query: &str) -> Result<Vec<Vec<String>>> {
    let rows: Vec<Row> = conn.query(query).await?;
    Ok(rows.iter().map(texts).collect())
}

/// The binlog's current end: `SHOW BINARY LOG STATUS` (MySQL 8.2+), else
/// `SHOW MASTER STATUS`. `Ok(None)`: the privilege is missing; an empty
/// result (binlog off) is an error naming it.
async fn current_position(conn: &mut Conn) -> Result<Option<BinlogPosition>> {
    let mut row = None;
    for query in ["SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"] {
        match first_row(conn, query).await {
            Ok(r) => {
                row = Some(r);
                break;
            }
            Err(Error::Binlog(e)) if server_code(&e) == Some(SYNTAX_ERROR) => continue,
            Err(Error::Binlog(e)) if server_code(&e) == Some(ACCESS_DENIED_FOR_OPERATION) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
    match row.flatten() {
        Some(cols) if cols.len() >= 2 => Ok(Some(BinlogPosition {
            file: cols[0].clone(),
            offset: cols[1].parse().map_err(|_| {
                Error::BinlogGap(format!("unreadable binlog position {:?}", cols[1]))
            })?,
        })),
        _ => Err(Error::BinlogSetup(vec![Missing::LogBin.remedy("")])),
    }
}

/// Whether this user may read the binlog (`REPLICATION SLAVE`), asked
/// without reading any: a dump of a file that does not exist is refused for
/// the privilege (the replica's registration) before the file is looked up
/// (1236).
async fn may_replicate(url: &str, tls: &MysqlTls, options: &BinlogOptions) -> Result<bool> {
    let conn = connect(url, tls, options.connect_timeout).await?;
    let request = BinlogStreamRequest::new(options.server_id)
        .with_filename(b"seatflow-reconciler-privilege-probe.000000")
        .with_non_blocking();
    match conn.get_binlog_stream(request).await {
        Ok(stream) => {
            let _ = stream.close().await;
            Ok(true)
        }
        Err(e) if refused_replication(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The showtimes of committed changes to the contract's tables, read from
/// the binlog of the server at the configured URL (its database).
pub struct BinlogSource {
    stream: BinlogStream,
    server: ServerIdentity,
    started_from: StartedFrom,
    /// The events read so far: the position, whether it is proven.
    reader: EventReader,
    silence_limit: Duration,
    /// When the server was last heard from (an event or a heartbeat): kept
    /// here, not in a call's timer, so that a caller that drops `next()`
    /// (a `select!` with other work) still sees a silent connection.
    last_heard: tokio::time::Instant,
}

impl BinlogSource {
    /// Checks what the server allows, then reads its binlog from `from`
    /// when it belongs to this server, else from its current end
    /// ([`started_from`](Self::started_from) says which). Everything
    /// missing is one [`Error::BinlogSetup`] naming each statement to run.
    /// A position the server no longer has (purged) is not found out here
    /// but by the first [`next`](Self::next): an [`Error::BinlogGap`].
    pub async fn start(
        url: &str,
        tls: &MysqlTls,
        options: &BinlogOptions,
        from: Option<Checkpoint>,
    ) -> Result<BinlogSource> {
        let mut conn = connect(url, tls, options.connect_timeout).await?;
        let db = conn
            .opts()
            .db_name()
            .map(str::to_string)
            .ok_or_else(|| Error::BinlogSetup(vec!["mysql.url names no database".into()]))?;
        let user = first_row(&mut conn, "SELECT CURRENT_USER()")
            .await?
            .and_then(|r| r.into_iter().next())
            .unwrap_or_default();
        let vars: HashMap<String, String> = all_rows(
            &mut conn,
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN \
             ('log_bin', 'binlog_format', 'binlog_row_image', 'log_bin_compress', \
              'server_id', 'server_uuid')",
        )
        .await?
        .into_iter()
        .filter_map(|r| {
            let mut r = r.into_iter();
            Some((r.next()?.to_ascii_lowercase(), r.next()?))
        })
        .collect();
        let mut missing = missing_settings(&vars);
        let end = if missing.contains(&Missing::LogBin) {
            None
        } else {
            let end = current_position(&mut conn).await?;
            if end.is_none() {
                missing.push(Missing::ReplicationClient);
            }
            end
        };
        // Only when something else is missing: otherwise the stream's own
        // registration says so (the same error), one connection fewer.
        if !missing.is_empty() && !may_replicate(url, tls, options).await? {
            missing.push(Missing::ReplicationSlave);
        }
        if !missing.is_empty() {
            let grantee = grantee(&user);
            return Err(Error::BinlogSetup(
                missing.iter().map(|m| m.remedy(&grantee)).collect(),
            ));
        }
        let columns: Vec<(String, String, u64)> = conn
            .exec(
                "SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = ? AND TABLE_NAME IN ('ticket_order', 'order_seat', 'showtime')",
                (db.clone(),),
            )
            .await?
            .into_iter()
            .filter_map(|row: Row| {
                let text = |i: usize| match row.as_ref(i) {
                    Some(Value::Bytes(b)) => Some(String::from_utf8_lossy(b).into_owned()),
                    _ => None,
                };
                let position = match row.as_ref(2) {
                    Some(Value::UInt(n)) => Some(*n),
                    Some(Value::Int(n)) => u64::try_from(*n).ok(),
                    Some(Value::Bytes(b)) => std::str::from_utf8(b).ok()?.parse().ok(),
                    _ => None,
                };
                Some((text(0)?, text(1)?, position?))
            })
            .collect();
        let layouts = layouts(&columns)
            .map_err(|why| Error::BinlogSetup(vec![format!("database `{db}`: {why}")]))?;
        let server = identity(&vars)?;
        let (from, started_from) = match from {
            Some(c) if c.server == server => (Some(c.position), StartedFrom::Given),
            Some(c) => (None, StartedFrom::OtherServer(c.server)),
            None => (None, StartedFrom::Current),
        };
        let Some(position) = from.or(end) else {
            return Err(Error::BinlogSetup(vec![Missing::LogBin.remedy("")]));
        };
        conn.query_drop(format!(
            "SET @master_heartbeat_period = {}",
            options.heartbeat.as_nanos()
        ))
        .await?;
        let request = BinlogStreamRequest::new(options.server_id)
            .with_filename(position.file.as_bytes())
            .with_pos(position.offset);
        let stream = conn.get_binlog_stream(request).await.map_err(|e| {
            if refused_replication(&e) {
                Error::BinlogSetup(vec![Missing::ReplicationSlave.remedy(&grantee(&user))])
            } else {
                e.into()
            }
        })?;
        let proven = started_from != StartedFrom::Given;
        Ok(BinlogSource {
            stream,
            reader: EventReader::new(db, layouts, position, proven),
            server,
            started_from,
            silence_limit: options.heartbeat * 3,
            last_heard: tokio::time::Instant::now(),
        })
    }

    /// After the last transaction read whole (whether or not it touched
    /// the contract's tables): where a new stream would start.
    pub fn position(&self) -> &BinlogPosition {
        self.reader.position()
    }

    /// The server read: whom [`position`](Self::position) belongs to.
    pub fn server(&self) -> &ServerIdentity {
        &self.server
    }

    /// [`position`](Self::position) with its server.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            server: self.server.clone(),
            position: self.reader.position().clone(),
        }
    }

    pub fn started_from(&self) -> &StartedFrom {
        &self.started_from
    }

    /// Whether the server sent from where this source started: a whole
    /// transaction or statement was read past it, or a heartbeat came (the
    /// server reached the binlog's end from there). Always true for a
    /// source that started from the server's current position.
    pub fn proven(&self) -> bool {
        self.reader.proven()
    }

    /// The next committed transaction that touched a showtime. Any error
    /// ends the stream, and changes may have been missed since: count a gap
    /// and start again from [`position`](Self::position). A stream that
    /// ends, falls silent past three heartbeats or cannot be sent from its
    /// position (purged) is an [`Error::BinlogGap`]; a broken connection is
    /// the driver's error (transient).
    pub async fn next(&mut self) -> Result<Committed> {
        loop {
            let silent_at = self.last_heard + self.silence_limit;
            let item = tokio::time::timeout_at(silent_at, self.stream.next())
                .await
                .map_err(|_| {
                    Error::BinlogGap(format!(
                        "no event or heartbeat for {:?}",
                        self.silence_limit
                    ))
                })?;
            let event = match item {
                None => return Err(Error::BinlogGap("the server ended the stream".into())),
                Some(Err(e)) if server_code(&e) == Some(FATAL_READING_BINLOG) => {
                    return Err(Error::BinlogGap(format!(
                        "the server cannot send the binlog from {}: {e}",
                        self.reader.position()
                    )));
                }
                Some(r) => r?,
            };
            self.last_heard = tokio::time::Instant::now();
            if let Some(done) = self.reader.read(&event, |id| self.stream.get_tme(id))? {
                return Ok(done);
            }
        }
    }
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

    #[test]
    fn settings_that_stop_the_source_are_named_with_their_statement() {
        let vars = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>()
        };
        let ok = vars(&[
            ("log_bin", "ON"),
            ("binlog_format", "ROW"),
            ("binlog_row_image", "FULL"),
            ("log_bin_compress", "OFF"),
        ]);
        assert!(missing_settings(&ok).is_empty());
        // MySQL has no log_bin_compress: not a problem.
        let mysql = vars(&[
            ("log_bin", "ON"),
            ("binlog_format", "ROW"),
            ("binlog_row_image", "NOBLOB"),
        ]);
        assert!(missing_settings(&mysql).is_empty());
        let bad = vars(&[
            ("log_bin", "OFF"),
            ("binlog_format", "MIXED"),
            ("binlog_row_image", "MINIMAL"),
            ("log_bin_compress", "ON"),
        ]);
        let got: Vec<String> = missing_settings(&bad)
            .iter()
            .map(|m| m.remedy("'u'@'h'"))
            .collect();
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(got[0].contains("log_bin"));
        assert!(
            got[1].contains("SET GLOBAL binlog_format = 'ROW'"),
            "{got:?}"
        );
        assert!(
            got[2].contains("SET GLOBAL binlog_row_image = 'FULL'"),
            "{got:?}"
        );
        assert!(
            got[3].contains("SET GLOBAL log_bin_compress = OFF"),
            "{got:?}"
        );
    }

    #[test]
    fn the_server_is_its_id_and_its_uuid_where_it_has_one() {
        let vars = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>()
        };
        let mariadb = identity(&vars(&[("server_id", "1"), ("log_bin", "ON")])).unwrap();
        assert_eq!(
            mariadb,
            ServerIdentity {
                server_id: 1,
                server_uuid: None
            }
        );
        assert_eq!(mariadb.to_string(), "server_id 1");
        let uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let mysql = identity(&vars(&[("server_id", "4294967295"), ("server_uuid", uuid)])).unwrap();
        assert_eq!(mysql.server_id, u32::MAX);
        assert_eq!(mysql.server_uuid.as_deref(), Some(uuid));
        assert!(identity(&vars(&[("server_id", "x")])).is_err());
        assert!(identity(&vars(&[])).is_err());
    }

    #[test]
    fn privileges_are_named_as_the_grant_to_run() {
        let who = grantee("reconciler@10.0.0.%");
        assert_eq!(who, "'reconciler'@'10.0.0.%'");
        assert!(
            Missing::ReplicationSlave
                .remedy(&who)
                .contains("GRANT REPLICATION SLAVE ON *.* TO 'reconciler'@'10.0.0.%'")
        );
        assert!(
            Missing::ReplicationClient
                .remedy(&who)
                .contains("GRANT REPLICATION CLIENT ON *.* TO 'reconciler'@'10.0.0.%'")
        );
    }

    #[test]
    fn the_url_gives_host_port_credentials_and_database_and_sqlx_parameters_are_left_out() {
        let o = opts(
            "mysql://rec%40x:p%2Fw@db.example:3307/seatflow?ssl-mode=disabled&statement-cache-capacity=10",
            &MysqlTls::default(),
            false,
        )
        .unwrap();
        assert_eq!(o.ip_or_hostname(), "db.example");
        assert_eq!(o.tcp_port(), 3307);
        assert_eq!(o.user(), Some("rec@x"));
        assert_eq!(o.pass(), Some("p/w"));
        assert_eq!(o.db_name(), Some("seatflow"));
        assert!(o.ssl_opts().is_none());
        assert!(!o.prefer_socket());
        let tls = opts("mysql://u@h/db", &MysqlTls::default(), true).unwrap();
        assert!(tls.ssl_opts().is_some());
        assert!(matches!(
            url_mode(Some("VERIFY_CA")),
            MySqlSslMode::VerifyCa
        ));
        assert!(matches!(url_mode(None), MySqlSslMode::Preferred));
    }
}
