//! Where a shard's MySQL binlog reader resumes: `{prefix}reconcile:binlog:{<shard>}`,
//! a string holding one JSON object, the position and the server it belongs
//! to, and the reader that saved it:
//!
//! ```text
//! {"server_id":1,"server_uuid":null,"file":"binlog.000003","offset":1234,"reader":"reconciler-0 4f1c…"}
//! ```
//!
//! `reader` is the instance and a token of its start, so two readers never
//! save the same value: a save names the value its reader saved last, and a
//! reader that another one started after leaves the key alone.

use serde::{Deserialize, Serialize};

use super::*;
use crate::error::{Error, Result};
use crate::model::Shard;
use crate::store::mysql::binlog::{BinlogPosition, Checkpoint, ServerIdentity};

/// A shard's saved binlog position, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SavedPosition {
    Absent,
    Found {
        checkpoint: Checkpoint,
        /// The value as stored.
        raw: String,
    },
    /// Not a string (rule 13): treated as absent, replaced by the next save.
    WrongType,
    /// A string that is not a saved position (cut short for logs): treated
    /// as absent, replaced by the next save.
    Unreadable(String),
}

/// What a save did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PositionSave {
    Saved,
    /// Another reader saved since this one's last save: left alone.
    Raced,
    /// The key had the wrong type (rule 13): replaced by the new value.
    Replaced,
    /// The key was gone (Redis lost it) though this reader had saved it:
    /// saved again, by the reader that holds the stream.
    Restored,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    server_id: u32,
    server_uuid: Option<String>,
    file: String,
    offset: u64,
    reader: String,
}

/// The value saved for `checkpoint` by `reader` (instance and start token).
pub fn saved_value(checkpoint: &Checkpoint, reader: &str) -> String {
    let stored = Stored {
        server_id: checkpoint.server.server_id,
        server_uuid: checkpoint.server.server_uuid.clone(),
        file: checkpoint.position.file.clone(),
        offset: checkpoint.position.offset,
        reader: reader.to_string(),
    };
    serde_json::to_string(&stored).unwrap_or_default()
}

/// A saved value read back; None if it is not one (a binlog file has a name,
/// and its events start after its 4-byte magic number).
pub fn parse_saved(raw: &str) -> Option<Checkpoint> {
    let s: Stored = serde_json::from_str(raw).ok()?;
    if s.file.is_empty() || s.offset < 4 {
        return None;
    }
    Some(Checkpoint {
        server: ServerIdentity {
            server_id: s.server_id,
            server_uuid: s.server_uuid,
        },
        position: BinlogPosition {
            file: s.file,
            offset: s.offset,
        },
    })
}

/// At most this much of an unreadable value goes into a log line.
const SHOWN: usize = 80;

impl RedisStore {
    /// The saved binlog position of `shard`.
    pub async fn read_binlog_position(&self, shard: Shard) -> Result<SavedPosition> {
        let mut c = self.conn.clone();
        self.trip();
        let got: redis::RedisResult<Option<Vec<u8>>> = redis::cmd("GET")
            .arg(self.keys.binlog_position(shard))
            .query_async(&mut c)
            .await;
        let raw = match got {
            Ok(Some(raw)) => raw,
            Ok(None) => return Ok(SavedPosition::Absent),
            Err(e) if e.code() == Some("WRONGTYPE") => return Ok(SavedPosition::WrongType),
            Err(e) => return Err(e.into()),
        };
        let text = String::from_utf8_lossy(&raw);
        Ok(match parse_saved(&text) {
            Some(checkpoint) if text.len() == raw.len() => SavedPosition::Found {
                checkpoint,
                raw: text.into_owned(),
            },
            _ => SavedPosition::Unreadable(text.chars().take(SHOWN).collect()),
        })
    }

    /// Saves `value` ([`saved_value`]) as `shard`'s binlog position if the
    /// key still holds `last` (this reader's previous save); `None` takes
    /// the key whatever it holds (a reader starting). A key of the wrong
    /// type is replaced either way.
    pub async fn save_binlog_position(
        &self,
        shard: Shard,
        last: Option<&str>,
        value: &str,
    ) -> Result<PositionSave> {
        let mut c = evalsha(&BINLOG_POSITION_SAVE, &[self.keys.binlog_position(shard)]);
        c.arg(last.unwrap_or("")).arg(value);
        let code: i64 = from_value(self.pipeline(&[c]).await?.remove(0)?)?;
        match code {
            1 => Ok(PositionSave::Saved),
            0 => Ok(PositionSave::Raced),
            2 => Ok(PositionSave::Replaced),
            3 => Ok(PositionSave::Restored),
            other => Err(Error::Protocol(format!(
                "binlog position script replied {other}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(uuid: Option<&str>) -> Checkpoint {
        Checkpoint {
            server: ServerIdentity {
                server_id: 7,
                server_uuid: uuid.map(str::to_string),
            },
            position: BinlogPosition {
                file: "binlog.000003".into(),
                offset: 1234,
            },
        }
    }

    #[test]
    fn a_saved_position_reads_back_with_its_server() {
        for uuid in [None, Some("3e11fa47-71ca-11e1-9e33-c80aa9429562")] {
            let c = checkpoint(uuid);
            let raw = saved_value(&c, "reconciler-0 ab12");
            assert_eq!(parse_saved(&raw), Some(c));
        }
        assert_eq!(
            saved_value(&checkpoint(None), "r-0 ab12"),
            r#"{"server_id":7,"server_uuid":null,"file":"binlog.000003","offset":1234,"reader":"r-0 ab12"}"#
        );
        // Two readers never save the same value.
        assert_ne!(
            saved_value(&checkpoint(None), "r-0 ab12"),
            saved_value(&checkpoint(None), "r-0 cd34")
        );
    }

    #[test]
    fn anything_else_is_no_saved_position() {
        let good = saved_value(&checkpoint(None), "r");
        for bad in [
            "",
            "garbage",
            "binlog.000003:1234",
            "{}",
            "null",
            r#"{"server_id":7,"server_uuid":null,"file":"binlog.000003","offset":1234}"#,
            r#"{"server_id":-1,"server_uuid":null,"file":"b.1","offset":4,"reader":"r"}"#,
            r#"{"server_id":7,"server_uuid":null,"file":"","offset":1234,"reader":"r"}"#,
            r#"{"server_id":7,"server_uuid":null,"file":"b.1","offset":3,"reader":"r"}"#,
            r#"{"server_id":7,"server_uuid":null,"file":"b.1","offset":"4","reader":"r"}"#,
            r#"{"server_id":7,"server_uuid":null,"file":"b.1","offset":4,"reader":"r","x":1}"#,
            &good[..good.len() - 1],
        ] {
            assert_eq!(parse_saved(bad), None, "{bad}");
        }
    }
}
