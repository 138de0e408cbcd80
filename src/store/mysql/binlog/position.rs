//! Positions in the binlog and the server they belong to: a position
//! means something only on the server that wrote it, so a [`Checkpoint`]
//! carries the server's identity, read from its settings at start.

use std::collections::HashMap;

use crate::error::{Error, Result};

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
pub(super) fn identity(vars: &HashMap<String, String>) -> Result<ServerIdentity> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
