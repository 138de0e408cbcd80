//! The stream of committed transactions: [`BinlogSource`] checks what the
//! server allows, registers as a replica from a checkpoint (or the
//! server's current end) and hands over each committed transaction that
//! touched the contract's tables, with the position after it.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt as _;
use mysql_async::prelude::Queryable as _;
use mysql_async::{BinlogStream, BinlogStreamRequest, Row, Value};

use super::connection::{FATAL_READING_BINLOG, all_rows, connect, first_row, server_code};
use super::position::identity;
use super::reader::EventReader;
use super::setup::{
    Missing, current_position, grantee, may_replicate, missing_settings, refused_replication,
};
use super::{BinlogPosition, Checkpoint, ServerIdentity, StartedFrom, layouts};
use crate::error::{Error, Result};
use crate::model::ShowtimeId;
use crate::store::mysql::MysqlTls;

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
