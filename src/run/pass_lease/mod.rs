//! One active runner per shard's pass. Reconcilers on the same data
//! (replicas, sidecars, a CronJob) share each shard's pass through a lease
//! in Redis (the pass lease), under the same rules as the showtime lease:
//! `SET NX PX` of a random token (the value names the instance), renewed
//! while the pass runs, compare-and-delete to release. A record of the last completed pass
//! (its schedule slot) lets the others see that this slot is done.
//!
//! Fencing: the holder renews every third of the TTL and stops writing as
//! soon as it cannot be sure the pass lease is still its own (its last
//! renewal is older than two thirds of the TTL, or a renewal found it gone),
//! so a holder that paused past its lease writes nothing when it wakes. Its
//! repairs are fenced a second time by the showtime lease (rule 2).
//!
//! The daemon keeps its own shard's pass lease from one pass to the next
//! (`kept.rs`): the holder is the shard's active replica between passes
//! too, and a standby sees within seconds whether it is alive.

mod kept;
pub use kept::{Holding, KeptPass};

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::model::Shard;
use crate::run::context::Context;
use crate::store::redis::{PassClaim, PassRecord, RedisStore, pass_lease_value};

/// Whether this process may still write as the holder of a pass.
#[derive(Debug)]
pub struct PassFence {
    ttl: Duration,
    renewed_at: Mutex<Instant>,
    lost: AtomicBool,
    /// Why the last renewal failed, while none succeeded since.
    problem: Mutex<Option<String>>,
}

impl PassFence {
    fn new(ttl: Duration, claimed_at: Instant) -> PassFence {
        PassFence {
            ttl,
            renewed_at: Mutex::new(claimed_at),
            lost: AtomicBool::new(false),
            problem: Mutex::new(None),
        }
    }

    /// True while the lease is surely ours: not found lost, and renewed
    /// (the renewal sent) within two thirds of its TTL.
    pub fn holds(&self) -> bool {
        let renewed_at = *self.renewed_at.lock().unwrap_or_else(|p| p.into_inner());
        !self.lost.load(Ordering::SeqCst) && renewed_at.elapsed() < self.ttl * 2 / 3
    }

    fn renewed(&self, sent_at: Instant) {
        *self.renewed_at.lock().unwrap_or_else(|p| p.into_inner()) = sent_at;
        *self.problem.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn renewal_failed(&self, why: String) {
        *self.problem.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
    }

    fn lose(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }

    /// Found gone or someone else's: never ours again.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Why the holder cannot be sure of its lease now: its renewals have
    /// failed for two thirds of the TTL (with the last one's error). None
    /// while it holds, or once lost.
    pub fn lapsed(&self) -> Option<String> {
        if self.holds() || self.is_lost() {
            return None;
        }
        let renewed_at = *self.renewed_at.lock().unwrap_or_else(|p| p.into_inner());
        let problem = self
            .problem
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Some(format!(
            "the pass lease has not been renewed for {} s{}",
            renewed_at.elapsed().as_secs(),
            problem.map_or(String::new(), |p| format!(": {p}"))
        ))
    }
}

/// What claiming a shard's pass found.
pub enum Claimed {
    /// Ours: run it, then `finish` or `release` (or `record` it and keep
    /// the lease: the daemon's own shard, `KeptPass`).
    Ours {
        pass: Arc<HeldPass>,
        /// The shard's last completed pass, by whoever ran it.
        last: Option<PassRecord>,
    },
    /// Another reconciler runs it, since `since_ms` when its lease says.
    /// `stuck`: its lease has no expiry (not set by us; reported, never
    /// taken over — rule 13).
    Held {
        holder: String,
        since_ms: Option<i64>,
        stuck: bool,
    },
    /// This slot's pass was already completed.
    Done(PassRecord),
}

/// A pass lease we hold; renewed in the background until finished,
/// released or dropped.
pub struct HeldPass {
    redis: RedisStore,
    shard: Shard,
    value: String,
    ttl: Duration,
    instance: String,
    fence: Arc<PassFence>,
    /// Cancelled when the lease is lost (or the caller's token is).
    stop: CancellationToken,
    renewer: tokio::task::JoinHandle<()>,
}

/// Tries to take `shard`'s pass for the schedule slot `slot_ms` (0: a pass
/// outside the schedule). `stop` is the caller's: the held pass's token is
/// its child.
pub async fn claim(
    ctx: &Context,
    shard: Shard,
    slot_ms: i64,
    stop: &CancellationToken,
) -> Result<Claimed> {
    let ttl = ctx.settings.pass.pass_lease_ttl;
    let instance = ctx.settings.reconcile.instance.clone();
    let value = pass_lease_value(
        &uuid::Uuid::new_v4().simple().to_string(),
        chrono::Utc::now().timestamp_millis(),
        &instance,
    );
    let sent_at = Instant::now();
    let claim = ctx
        .retry("claim pass", || {
            ctx.redis
                .claim_pass(shard, &value, ttl.as_millis() as u64, slot_ms)
        })
        .await?;
    Ok(match claim {
        PassClaim::Claimed { last, replaced } => {
            if replaced {
                tracing::warn!(
                    key = ctx.redis.keys.pass_lease(shard),
                    "pass keys of the wrong type replaced (rule 13)"
                );
            }
            let fence = Arc::new(PassFence::new(ttl, sent_at));
            let stop = stop.child_token();
            let renewer = tokio::spawn(renew(
                ctx.redis.clone(),
                shard,
                value.clone(),
                ttl,
                fence.clone(),
                stop.clone(),
            ));
            Claimed::Ours {
                pass: Arc::new(HeldPass {
                    redis: ctx.redis.clone(),
                    shard,
                    value,
                    ttl,
                    instance,
                    fence,
                    stop,
                    renewer,
                }),
                last,
            }
        }
        PassClaim::Held {
            holder,
            since_ms,
            pttl_ms,
        } => Claimed::Held {
            holder,
            since_ms,
            stuck: pttl_ms == -1,
        },
        PassClaim::Done { record } => Claimed::Done(record),
    })
}

/// Renews every third of the TTL; on loss, fences and stops the pass.
async fn renew(
    redis: RedisStore,
    shard: Shard,
    value: String,
    ttl: Duration,
    fence: Arc<PassFence>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(ttl / 3) => {}
            _ = stop.cancelled() => return,
        }
        let sent_at = Instant::now();
        match redis
            .renew_pass(shard, &value, ttl.as_millis() as u64)
            .await
        {
            Ok(true) => fence.renewed(sent_at),
            Ok(false) => {
                tracing::warn!(
                    shard = shard.index,
                    "pass lease lost to another reconciler; this pass stops and writes nothing more"
                );
                fence.lose();
                stop.cancel();
                return;
            }
            // Not known either way: the fence lapses on its own if this lasts.
            Err(e) => {
                tracing::warn!(shard = shard.index, error = %e, "could not renew the pass lease");
                fence.renewal_failed(e.to_string());
            }
        }
    }
}

impl HeldPass {
    pub fn fence(&self) -> Arc<PassFence> {
        self.fence.clone()
    }

    /// Cancelled when the lease is lost, or when the caller stops.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Records the pass as done for `slot_ms` and releases the lease.
    /// False when the lease was lost meanwhile (nothing recorded).
    pub async fn finish(&self, slot_ms: i64, finished_ms: i64) -> Result<bool> {
        self.renewer.abort();
        self.write_record(slot_ms, finished_ms, true).await
    }

    /// Records the pass as done for `slot_ms` and keeps the lease (renewed
    /// on): the holder stays the shard's holder. False when the lease was
    /// lost meanwhile (nothing recorded; the fence drops).
    pub async fn record(&self, slot_ms: i64, finished_ms: i64) -> Result<bool> {
        let recorded = self.write_record(slot_ms, finished_ms, false).await?;
        if !recorded {
            self.give_up();
        }
        Ok(recorded)
    }

    async fn write_record(&self, slot_ms: i64, finished_ms: i64, release: bool) -> Result<bool> {
        if !self.fence.holds() {
            return Ok(false);
        }
        let record = PassRecord {
            slot_ms,
            finished_ms,
            instance: self.instance.clone(),
        };
        self.redis
            .finish_pass(self.shard, &self.value, &record, release)
            .await
    }

    /// Renews the lease now (a holder whose renewals lapsed, asked before
    /// it is trusted again): true when it is still ours; false when it is
    /// gone or someone else's (then it is given up).
    pub async fn renew_now(&self) -> Result<bool> {
        let sent_at = Instant::now();
        let ttl_ms = self.ttl.as_millis() as u64;
        match self.redis.renew_pass(self.shard, &self.value, ttl_ms).await {
            Ok(true) => {
                self.fence.renewed(sent_at);
                Ok(true)
            }
            Ok(false) => {
                self.give_up();
                Ok(false)
            }
            Err(e) => {
                self.fence.renewal_failed(e.to_string());
                Err(e)
            }
        }
    }

    /// Stops holding without a word to Redis: the fence drops, renewals
    /// stop, and a pass under it stops (its stop token is cancelled).
    pub fn give_up(&self) {
        self.fence.lose();
        self.stop.cancel();
        self.renewer.abort();
    }

    /// Gives the lease back without recording a pass.
    pub async fn release(&self) {
        self.renewer.abort();
        if let Err(e) = self.redis.release_pass(self.shard, &self.value).await {
            tracing::warn!(shard = self.shard.index, error = %e, "could not release the pass lease; it expires with its TTL");
        }
    }
}

impl Drop for HeldPass {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fence holds only while both are true: not found lost, and
    /// renewed within two thirds of the TTL (no waiting: the claim time is
    /// set in the past).
    #[test]
    fn the_fence_holds_only_when_renewed_recently_and_not_lost() {
        let ttl = Duration::from_secs(15);
        let fresh = PassFence::new(ttl, Instant::now());
        assert!(fresh.holds());
        fresh.lose();
        assert!(!fresh.holds(), "a lease found lost stops writes at once");

        let stale = PassFence::new(ttl, Instant::now() - ttl * 2 / 3);
        assert!(!stale.holds(), "two thirds of the TTL without a renewal");
        stale.renewed(Instant::now());
        assert!(stale.holds(), "a renewal sent restores it");
    }
}
