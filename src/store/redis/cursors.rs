//! The sweep's cursors and the audit backlog.

use super::*;
use crate::error::{Error, Result};
use redis::Value;

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
    /// Appends entries to the audit backlog (a list). A backlog key of
    /// another type is moved aside first (rule 13: it may hold rows someone
    /// needs; ours still go to a fresh backlog); returns the name it was
    /// moved to, for the caller to report.
    pub async fn push_audit_backlog(&self, entries: &[String]) -> Result<Option<String>> {
        if entries.is_empty() {
            return Ok(None);
        }
        let aside = self.keys.audit_backlog_aside();
        let mut c = evalsha(&BACKLOG_PUSH, &[self.keys.audit_backlog(), aside.clone()]);
        c.arg(entries);
        let (_length, moved): (i64, i64) = from_value(self.pipeline(&[c]).await?.remove(0)?)?;
        Ok((moved == 1).then_some(aside))
    }

    /// Reads up to `n` entries at the head of the audit backlog, leaving
    /// them there until `ack_audit_backlog` (two reconcilers draining at
    /// once may read the same rows: writing them is idempotent). A backlog
    /// key of another type is moved aside (rule 13) instead, and the name
    /// it was moved to returned with no entries, for the caller to report.
    pub async fn read_audit_backlog(&self, n: usize) -> Result<(Vec<String>, Option<String>)> {
        let aside = self.keys.audit_backlog_aside();
        let mut c = evalsha(&BACKLOG_READ, &[self.keys.audit_backlog(), aside.clone()]);
        c.arg(n);
        let reply: Vec<Value> = from_value(self.pipeline(&[c]).await?.remove(0)?)?;
        let mut reply = reply.into_iter();
        let moved: i64 = match reply.next() {
            Some(v) => from_value(v)?,
            None => return Err(Error::Protocol("backlog read replied nothing".into())),
        };
        let entries = reply.map(from_value).collect::<Result<Vec<String>>>()?;
        Ok((entries, (moved == 1).then_some(aside)))
    }

    /// Removes `entries` (as `read_audit_backlog` returned them, now in
    /// MySQL) from the backlog's head; returns how many it removed. Safe to
    /// repeat.
    pub async fn ack_audit_backlog(&self, entries: &[String]) -> Result<u64> {
        if entries.is_empty() {
            return Ok(0);
        }
        let mut c = evalsha(&BACKLOG_ACK, &[self.keys.audit_backlog()]);
        c.arg(entries);
        from_value(self.pipeline(&[c]).await?.remove(0)?)
    }

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
