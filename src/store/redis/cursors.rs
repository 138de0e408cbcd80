//! The sweep's cursors (where each job's sweep resumes, per shard).

use super::*;
use crate::error::{Error, Result};

/// What a cursor CAS did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorMove {
    Moved,
    /// Someone else moved it: left alone.
    Raced,
    /// It was of the wrong type (rule 13): replaced by the new value.
    Replaced,
}

/// A key of ours found of the wrong type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrongType;

impl RedisStore {
    /// A cursor: `Ok(value)`, or `Err(WrongType)` when the key is not a
    /// string (rule 13: ours, reported and replaced by the next `set_cursor`).
    pub async fn read_cursor(&self, key: &str) -> Result<Result<Option<String>, WrongType>> {
        let mut c = self.conn.clone();
        self.trip();
        match redis::cmd("GET").arg(key).query_async(&mut c).await {
            Ok(v) => Ok(Ok(v)),
            Err(e) if e.code() == Some("WRONGTYPE") => Ok(Err(WrongType)),
            Err(e) => Err(e.into()),
        }
    }

    /// Moves a cursor from `seen` (None = absent) to `next` (None = delete);
    /// a cursor key of the wrong type is replaced whatever was seen.
    pub async fn set_cursor(
        &self,
        key: &str,
        seen: Option<&str>,
        next: Option<&str>,
    ) -> Result<CursorMove> {
        let mut c = evalsha(&CURSOR_CAS, &[key.to_string()]);
        c.arg(seen.unwrap_or("")).arg(next.unwrap_or(""));
        let code: i64 = from_value(self.pipeline(&[c]).await?.remove(0)?)?;
        match code {
            1 => Ok(CursorMove::Moved),
            0 => Ok(CursorMove::Raced),
            2 => Ok(CursorMove::Replaced),
            other => Err(Error::Protocol(format!("cursor script replied {other}"))),
        }
    }
}
