//! What the server must allow before the stream starts: its settings
//! (the binlog on, in rows, with full images, uncompressed) and the user's
//! privileges (`REPLICATION CLIENT`, `REPLICATION SLAVE`), each one missing
//! named as the statement to run.

use std::collections::HashMap;

use mysql_async::BinlogStreamRequest;
use mysql_async::Conn;

use super::connection::{
    ACCESS_DENIED, ACCESS_DENIED_FOR_OPERATION, SYNTAX_ERROR, connect, first_row, server_code,
};
use super::{BinlogOptions, BinlogPosition};
use crate::error::{Error, Result};
use crate::store::mysql::MysqlTls;

/// A statement to run that would let the source start (for the error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Missing {
    ReplicationClient,
    ReplicationSlave,
    LogBin,
    Format(String),
    RowImage(String),
    Compressed,
}

impl Missing {
    pub(super) fn remedy(&self, grantee: &str) -> String {
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
pub(super) fn missing_settings(vars: &HashMap<String, String>) -> Vec<Missing> {
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
pub(super) fn grantee(current_user: &str) -> String {
    match current_user.rsplit_once('@') {
        Some((user, host)) => format!("'{user}'@'{host}'"),
        None => format!("'{current_user}'"),
    }
}

/// Whether the server refused to register a replica for want of
/// `REPLICATION SLAVE`: MySQL says 1227, MariaDB 1045 ("access denied for
/// user", though the login went through).
pub(super) fn refused_replication(e: &mysql_async::Error) -> bool {
    matches!(
        server_code(e),
        Some(ACCESS_DENIED_FOR_OPERATION | ACCESS_DENIED)
    )
}

/// The binlog's current end: `SHOW BINARY LOG STATUS` (MySQL 8.2+), else
/// `SHOW MASTER STATUS`. `Ok(None)`: the privilege is missing; an empty
/// result (binlog off) is an error naming it.
pub(super) async fn current_position(conn: &mut Conn) -> Result<Option<BinlogPosition>> {
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
pub(super) async fn may_replicate(
    url: &str,
    tls: &MysqlTls,
    options: &BinlogOptions,
) -> Result<bool> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
