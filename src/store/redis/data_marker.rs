//! The data marker (`data_marker.lua`): one string of ours without expiry
//! per server (per primary in a Redis Cluster), read every second by the
//! daemon, so that a loss of the server's data is told without reading any
//! seat hash: the marker is gone, or another reconciler has set a new one.

use super::*;
use crate::error::{Error, Result};
use redis::Cmd;

// The plain value, read by the pure verdict (`changes::marker`).
pub use seatflow_core::changes::marker::MarkerRead;

impl RedisStore {
    /// Reads each marker of `keys` in one round trip (per slot in a
    /// cluster), setting `value` where there is none when `write`; without
    /// it (a dry run, rule 5) with plain `GET`s, writing nothing.
    pub async fn read_markers(
        &self,
        keys: &[String],
        value: &str,
        write: bool,
    ) -> Result<Vec<MarkerRead>> {
        let cmds: Vec<Cmd> = keys
            .iter()
            .map(|key| {
                if !write {
                    return redis::cmd("GET").arg(key).clone();
                }
                let mut c = evalsha(&DATA_MARKER, std::slice::from_ref(key));
                c.arg(value);
                c
            })
            .collect();
        self.replies(&cmds, |r| if write { set_or_found(r) } else { got(r) })
            .await
    }
}

/// The script's reply.
fn set_or_found(reply: redis::RedisResult<Value>) -> Result<MarkerRead> {
    let (code, text): (i64, String) = from_value(reply?)?;
    match code {
        1 => Ok(MarkerRead::Found(text)),
        2 => Ok(MarkerRead::Set {
            replaced: (text != "none").then_some(text),
        }),
        other => Err(Error::Protocol(format!("data marker replied {other}"))),
    }
}

/// A `GET`'s reply; a key of another type is no marker (the next run that
/// writes replaces it).
fn got(reply: redis::RedisResult<Value>) -> Result<MarkerRead> {
    match reply {
        Ok(v) => Ok(match from_value::<Option<String>>(v)? {
            Some(value) => MarkerRead::Found(value),
            None => MarkerRead::Absent,
        }),
        Err(e) if e.code() == Some("WRONGTYPE") => Ok(MarkerRead::Absent),
        Err(e) => Err(e.into()),
    }
}
