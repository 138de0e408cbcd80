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
//! Which file holds what:
//! - `decode.rs`: row images as showtimes (pure): the tables, their
//!   layouts, [`showtimes_of`];
//! - `setup.rs`: the server's settings and the user's privileges checked,
//!   each missing one named;
//! - `connection.rs`: connection options from the URL and TLS settings,
//!   one connection, the set-up's queries;
//! - `stream.rs`: [`BinlogSource`], the stream of committed transactions;
//! - `position.rs`: [`BinlogPosition`], [`ServerIdentity`], [`Checkpoint`];
//! - `reader.rs`: the stream's events as committed transactions and
//!   positions (the state machine: no server; its tests replay MySQL 8's
//!   events).

mod connection;
mod decode;
mod position;
mod reader;
mod setup;
mod stream;

pub use self::decode::{Cell, ColumnRef, Image, Layout, Table, layouts, showtimes_of};
pub use self::position::{BinlogPosition, Checkpoint, ServerIdentity, StartedFrom};
pub use self::stream::{BinlogOptions, BinlogSource, Committed};
