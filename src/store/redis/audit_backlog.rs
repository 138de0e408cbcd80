//! The audit backlog: rows of Redis repairs that MySQL refused, kept in
//! `{prefix}reconcile:audit-backlog` (a list) until a run writes them
//! (rule 10). A backlog key of another type is moved aside, never deleted.

use super::*;
use crate::error::Result;
use redis::Value;

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
}
