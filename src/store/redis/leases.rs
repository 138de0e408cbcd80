//! Both kinds of lease: the showtime lease (`reconcile:lock:{S}`,
//! rule 2) and a shard's pass lease with its done record.

use super::*;
use crate::error::{Error, Result};
use crate::model::{Shard, ShowtimeId};
use redis::Cmd;

/// What trying to take one showtime lease did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseTake {
    /// Ours now.
    Taken,
    /// Ours now; the lease key was of another type than a string (nobody's
    /// lease: rule 13) and was replaced.
    Replaced,
    /// Someone's lease (a string): left alone.
    Busy,
}

impl LeaseTake {
    pub fn is_taken(self) -> bool {
        self != LeaseTake::Busy
    }
}

/// A pass lease's value: `token:claimed_ms instance`. The instance is
/// everything after the first space (as every version has read it); the
/// claim time rides on the token, so a value of an older version
/// (`token instance`) still names its holder, with no time.
pub fn pass_lease_value(token: &str, claimed_ms: i64, instance: &str) -> String {
    format!("{token}:{claimed_ms} {instance}")
}

/// The instance in a pass lease's value.
fn lease_holder(value: &str) -> String {
    value
        .split_once(' ')
        .map(|(_, who)| who)
        .unwrap_or(value)
        .to_string()
}

/// When the holder claimed the pass lease (Unix ms), if its value says.
fn lease_claimed_ms(value: &str) -> Option<i64> {
    let (token, _) = value.split_once(' ')?;
    token.rsplit_once(':')?.1.parse().ok()
}

/// What claiming a shard's pass found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassClaim {
    /// Ours now. `last`: the shard's last completed pass, if any.
    Claimed {
        last: Option<PassRecord>,
        /// Our own key was of the wrong type and was replaced (rule 13).
        replaced: bool,
    },
    /// Another reconciler runs it since `since_ms` (None: a value without
    /// the time); `pttl_ms` -1 means a lease without expiry.
    Held {
        holder: String,
        since_ms: Option<i64>,
        pttl_ms: i64,
    },
    /// This schedule slot's pass was already completed.
    Done { record: PassRecord },
}

/// A completed pass: the schedule slot it served, when it finished, by whom.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassRecord {
    pub slot_ms: i64,
    pub finished_ms: i64,
    pub instance: String,
}

impl PassRecord {
    pub fn encode(&self) -> String {
        format!("{} {} {}", self.slot_ms, self.finished_ms, self.instance)
    }

    /// None for a value not written by `encode` (rule 13: read as no record).
    pub fn decode(text: &str) -> Option<PassRecord> {
        let mut parts = text.splitn(3, ' ');
        let slot_ms = parts.next()?.parse().ok()?;
        let finished_ms = parts.next()?.parse().ok()?;
        let instance = parts.next()?.to_string();
        Some(PassRecord {
            slot_ms,
            finished_ms,
            instance,
        })
    }
}

/// Extends a lease (either kind) if its value is still `value`: both kinds
/// are a string holding their owner's value, so one script serves both.
fn renew(key: String, value: &str, ttl_ms: u64) -> Cmd {
    let mut c = evalsha(&LEASE_RENEW, &[key]);
    c.arg(value).arg(ttl_ms);
    c
}

/// Compare-and-delete of a lease (either kind) whose value is `value`.
fn release(key: String, value: &str) -> Cmd {
    let mut c = evalsha(&LEASE_RELEASE, &[key]);
    c.arg(value);
    c
}

impl RedisStore {
    /// Tries to take each showtime lease (`SET PX` with our token where
    /// there is none), in one round trip. A lease key of another type than a
    /// string is nobody's lease (rule 13): it is replaced and reported as
    /// `LeaseTake::Replaced`.
    pub async fn acquire_leases(
        &self,
        token: &str,
        ids: &[ShowtimeId],
        ttl_ms: u64,
    ) -> Result<Vec<LeaseTake>> {
        let cmds: Vec<Cmd> = ids
            .iter()
            .map(|&id| {
                let mut c = evalsha(&LEASE_ACQUIRE, &[self.keys.showtime_lease(id)]);
                c.arg(token).arg(ttl_ms);
                c
            })
            .collect();
        self.replies(&cmds, |r| match from_value::<i64>(r?)? {
            1 => Ok(LeaseTake::Taken),
            0 => Ok(LeaseTake::Busy),
            2 => Ok(LeaseTake::Replaced),
            other => Err(Error::Protocol(format!("lease script replied {other}"))),
        })
        .await
    }

    /// PTTL of each showtime lease in one round trip: ms left, -1 no
    /// expiry, -2 gone.
    pub async fn lease_pttls(&self, ids: &[ShowtimeId]) -> Result<Vec<i64>> {
        let cmds: Vec<Cmd> = ids
            .iter()
            .map(|&id| redis::cmd("PTTL").arg(self.keys.showtime_lease(id)).clone())
            .collect();
        self.replies(&cmds, |r| from_value(r?)).await
    }

    /// Extends our leases; false where the lease is no longer ours.
    pub async fn renew_leases(
        &self,
        token: &str,
        ids: &[ShowtimeId],
        ttl_ms: u64,
    ) -> Result<Vec<bool>> {
        let cmds: Vec<Cmd> = ids
            .iter()
            .map(|&id| renew(self.keys.showtime_lease(id), token, ttl_ms))
            .collect();
        self.int_results(&cmds).await
    }

    /// Compare-and-delete of our leases; false where it was not ours any more.
    pub async fn release_leases(&self, token: &str, ids: &[ShowtimeId]) -> Result<Vec<bool>> {
        let cmds: Vec<Cmd> = ids
            .iter()
            .map(|&id| release(self.keys.showtime_lease(id), token))
            .collect();
        self.int_results(&cmds).await
    }

    /// Tries to take `shard`'s pass for `slot_ms` (0: outside the schedule).
    pub async fn claim_pass(
        &self,
        shard: Shard,
        value: &str,
        ttl_ms: u64,
        slot_ms: i64,
    ) -> Result<PassClaim> {
        let mut c = evalsha(
            &PASS_CLAIM,
            &[self.keys.pass_lease(shard), self.keys.pass_record(shard)],
        );
        c.arg(value).arg(ttl_ms).arg(slot_ms);
        let (code, text, pttl, replaced): (i64, String, i64, i64) =
            from_value(self.pipeline(&[c]).await?.remove(0)?)?;
        let replaced = replaced == 1;
        match code {
            1 => Ok(PassClaim::Claimed {
                last: PassRecord::decode(&text),
                replaced,
            }),
            0 => Ok(PassClaim::Held {
                holder: lease_holder(&text),
                since_ms: lease_claimed_ms(&text),
                pttl_ms: pttl,
            }),
            2 => Ok(PassClaim::Done {
                record: PassRecord::decode(&text).unwrap_or_default(),
            }),
            other => Err(Error::Protocol(format!("pass claim replied {other}"))),
        }
    }

    /// Extends our pass lease; false when it is not ours any more.
    pub async fn renew_pass(&self, shard: Shard, value: &str, ttl_ms: u64) -> Result<bool> {
        let c = renew(self.keys.pass_lease(shard), value, ttl_ms);
        Ok(self.int_results(&[c]).await?[0])
    }

    /// Gives the lease back without recording a pass (stopped, failed).
    pub async fn release_pass(&self, shard: Shard, value: &str) -> Result<bool> {
        let c = release(self.keys.pass_lease(shard), value);
        Ok(self.int_results(&[c]).await?[0])
    }

    /// Records the completed pass and, when `release`, releases the lease,
    /// if still ours (false: nothing written).
    pub async fn finish_pass(
        &self,
        shard: Shard,
        value: &str,
        record: &PassRecord,
        release: bool,
    ) -> Result<bool> {
        let mut c = evalsha(
            &PASS_FINISH,
            &[self.keys.pass_lease(shard), self.keys.pass_record(shard)],
        );
        c.arg(value)
            .arg(record.encode())
            .arg(if release { "1" } else { "0" });
        Ok(self.int_results(&[c]).await?[0])
    }

    /// Who holds the pass now (instance), and the last completed pass.
    pub async fn read_pass(&self, shard: Shard) -> Result<(Option<String>, Option<PassRecord>)> {
        let cmds = [
            redis::cmd("GET").arg(self.keys.pass_lease(shard)).clone(),
            redis::cmd("GET").arg(self.keys.pass_record(shard)).clone(),
        ];
        let mut r = self.pipeline(&cmds).await?.into_iter();
        // A key of the wrong type reads as nothing here; the next claim replaces it.
        let mut text = || -> Option<String> {
            r.next()
                .and_then(|v| v.ok())
                .and_then(|v| from_value::<Option<String>>(v).ok())
                .flatten()
        };
        let holder = text().map(|v| lease_holder(&v));
        let record = text().and_then(|t| PassRecord::decode(&t));
        Ok((holder, record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_lease_value_names_its_holder_and_claim_time() {
        let v = pass_lease_value("0123abcd", 1_764_800_000_000, "replica-a");
        assert_eq!(lease_holder(&v), "replica-a");
        assert_eq!(lease_claimed_ms(&v), Some(1_764_800_000_000));
        // An older version's value: the holder, no time.
        assert_eq!(lease_holder("0123abcd replica-b"), "replica-b");
        assert_eq!(lease_claimed_ms("0123abcd replica-b"), None);
        assert_eq!(lease_claimed_ms("garbage"), None);
    }
}
