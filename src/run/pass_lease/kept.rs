//! The daemon's own shard's pass lease, kept from one pass to the next: the
//! process holding it is the shard's holder between passes too (it checks
//! the shard's changes), so a standby tells within seconds whether the
//! shard has a live holder, and claims the lease when it has none. Every
//! claim the process makes for its own shard goes through here, one at a
//! time, so the process never stands by for itself.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::{Claimed, HeldPass, claim};
use crate::error::Result;
use crate::model::Shard;
use crate::run::context::Context;
use crate::store::redis::{PassClaim, PassRecord};

/// Who holds this process's own shard's pass, as this process knows it now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Holding {
    /// This process: its lease renewed within two thirds of its TTL.
    Held,
    /// Another reconciler, whose live lease the last check saw.
    Standby { holder: String },
    /// Nobody that this process can tell of: why, and since when.
    NoHolder { why: String, since: DateTime<Utc> },
}

impl Holding {
    /// The shard has a holder (this process or a live other one).
    pub fn has_holder(&self) -> bool {
        !matches!(self, Holding::NoHolder { .. })
    }
}

/// What the last claim found, when the pass was not made ours.
#[derive(Debug, Clone)]
enum Seen {
    /// No claim was answered yet.
    Nothing,
    /// Another reconciler's lease; `stuck`: one without expiry, which no
    /// reconciler sets (rule 13: reported, never taken over).
    Other { holder: String, stuck: bool },
    /// The claim failed (Redis away, a refused command or key).
    Failed { why: String },
}

/// The pass lease of the daemon's own shard, kept between passes.
pub struct KeptPass {
    shard: Shard,
    /// The daemon's stop: the kept lease's renewals end with it (never a
    /// single pass's stop, which may be cancelled to start another).
    stop: CancellationToken,
    /// One claim at a time: a fire, the admin endpoint, the keeper.
    claiming: tokio::sync::Mutex<()>,
    held: Mutex<Option<Arc<HeldPass>>>,
    /// The shard's last pass record as the claim of the lease held found
    /// it, until a pass under that lease takes it (so a hand-over is
    /// counted by the first pass, whoever claimed).
    last: Mutex<Option<PassRecord>>,
    seen: Mutex<Seen>,
    /// Since when nobody holds it as far as this process knows (None: held).
    no_holder_since: Mutex<Option<DateTime<Utc>>>,
    /// Wakes the keeper: check at once.
    wake: tokio::sync::Notify,
}

impl std::fmt::Debug for KeptPass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptPass")
            .field("shard", &self.shard)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The pure part of [`KeptPass::holding`]: from the hold this process
/// keeps (if any) and what its last claim saw.
fn judge(held: Option<&HeldPass>, seen: &Seen) -> Result<Holding, String> {
    if let Some(held) = held {
        if held.fence.holds() {
            return Ok(Holding::Held);
        }
        if let Some(why) = held.fence.lapsed() {
            return Err(why);
        }
    }
    match seen {
        Seen::Other {
            holder,
            stuck: false,
        } => Ok(Holding::Standby {
            holder: holder.clone(),
        }),
        Seen::Other {
            holder,
            stuck: true,
        } => Err(format!(
            "the pass lease is held by {holder} without an expiry, which no reconciler sets: \
             it waits for an operator (runbook: SeatflowReconcilerPassStalled)"
        )),
        Seen::Failed { why } => Err(format!("the pass lease could not be claimed: {why}")),
        Seen::Nothing if held.is_some() => {
            Err("the pass lease was found gone or taken over; claiming it again".to_string())
        }
        Seen::Nothing => Err("the pass lease has not been claimed yet".to_string()),
    }
}

impl KeptPass {
    /// Nothing held yet; `stop` is the daemon's.
    pub fn new(shard: Shard, stop: CancellationToken) -> KeptPass {
        KeptPass {
            shard,
            stop,
            claiming: tokio::sync::Mutex::new(()),
            held: Mutex::new(None),
            last: Mutex::new(None),
            seen: Mutex::new(Seen::Nothing),
            no_holder_since: Mutex::new(Some(Utc::now())),
            wake: tokio::sync::Notify::new(),
        }
    }

    pub fn shard(&self) -> Shard {
        self.shard
    }

    /// The pass for `slot_ms` (0: outside the schedule), for a pass to run
    /// under: the lease this process keeps, when it is still surely its own
    /// (one whose renewals lapsed is renewed first), else a fresh claim.
    /// `true` with a pass made ours by this call (the shard had no live
    /// holder). The shard's last pass record (`Claimed::Ours::last`) comes
    /// with the first pass after the claim that found it, whoever made it.
    pub async fn claim(&self, ctx: &Context, slot_ms: i64) -> Result<(Claimed, bool)> {
        let (claimed, fresh) = self.claim_or_keep(ctx, slot_ms).await?;
        Ok(match claimed {
            Claimed::Ours { pass, .. } => {
                let last = lock(&self.last).take();
                (Claimed::Ours { pass, last }, fresh)
            }
            other => (other, fresh),
        })
    }

    /// The keeper's claim or renewal: [`KeptPass::claim`] outside the schedule,
    /// leaving the last pass record to the next pass.
    pub async fn keep(&self, ctx: &Context) -> Result<(Claimed, bool)> {
        self.claim_or_keep(ctx, 0).await
    }

    async fn claim_or_keep(&self, ctx: &Context, slot_ms: i64) -> Result<(Claimed, bool)> {
        let _one = self.claiming.lock().await;
        let kept = lock(&self.held).clone();
        if let Some(held) = kept {
            if !held.fence.is_lost() && (held.fence.holds() || held.renew_now().await?) {
                return Ok((
                    Claimed::Ours {
                        pass: held,
                        last: None,
                    },
                    false,
                ));
            }
            *lock(&self.held) = None;
        }
        let claimed = claim(ctx, self.shard, slot_ms, &self.stop).await;
        match &claimed {
            Ok(Claimed::Ours { pass, last }) => {
                *lock(&self.held) = Some(pass.clone());
                *lock(&self.last) = last.clone();
                *lock(&self.seen) = Seen::Nothing;
            }
            Ok(Claimed::Held { holder, stuck, .. }) => {
                *lock(&self.seen) = Seen::Other {
                    holder: holder.clone(),
                    stuck: *stuck,
                };
            }
            // This slot's pass was done; who holds the lease, the next
            // check (outside the schedule) tells.
            Ok(Claimed::Done(_)) => {}
            Err(e) => *lock(&self.seen) = Seen::Failed { why: e.to_string() },
        }
        claimed.map(|c| (c, true))
    }

    /// After Redis lost its data (the lease key with it): the lease kept
    /// is set again at once, before a standby claims it, so the shard's
    /// holder does not change; false when it was not kept, or someone else
    /// holds it now (then it is given up).
    pub async fn reassert(&self, ctx: &Context) -> Result<bool> {
        let _one = self.claiming.lock().await;
        let Some(held) = lock(&self.held).clone().filter(|h| !h.fence.is_lost()) else {
            return Ok(false);
        };
        let sent_at = std::time::Instant::now();
        let ttl_ms = held.ttl.as_millis() as u64;
        match ctx
            .redis
            .claim_pass(self.shard, &held.value, ttl_ms, 0)
            .await?
        {
            PassClaim::Claimed { .. } => {
                held.fence.renewed(sent_at);
                Ok(true)
            }
            PassClaim::Held { .. } | PassClaim::Done { .. } => {
                held.give_up();
                Ok(false)
            }
        }
    }

    /// Who holds the shard's pass now, as far as this process knows.
    pub fn holding(&self) -> Holding {
        let held = lock(&self.held).clone();
        let judged = judge(held.as_deref(), &lock(&self.seen));
        let mut since = lock(&self.no_holder_since);
        match judged {
            Ok(holding) => {
                *since = None;
                holding
            }
            Err(why) => Holding::NoHolder {
                why,
                since: *since.get_or_insert_with(Utc::now),
            },
        }
    }

    /// Whether this process holds it now.
    pub fn is_ours(&self) -> bool {
        lock(&self.held).as_ref().is_some_and(|h| h.fence.holds())
    }

    /// Asks the keeper to check at once.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Waits for [`KeptPass::wake`].
    pub async fn woken(&self) {
        self.wake.notified().await
    }

    /// Gives the lease back (the daemon stops): a standby takes it at once.
    pub async fn release(&self) {
        let held = lock(&self.held).take();
        if let Some(held) = held {
            held.give_up();
            held.release().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_no_hold_the_last_claim_says_who_holds_the_pass() {
        let other = |stuck| Seen::Other {
            holder: "replica-b".into(),
            stuck,
        };
        assert_eq!(
            judge(None, &other(false)),
            Ok(Holding::Standby {
                holder: "replica-b".into()
            })
        );
        let stuck = judge(None, &other(true)).unwrap_err();
        assert!(stuck.contains("replica-b without an expiry"), "{stuck}");
        let failed = judge(
            None,
            &Seen::Failed {
                why: "NOPERM no permission".into(),
            },
        )
        .unwrap_err();
        assert!(failed.contains("could not be claimed: NOPERM"), "{failed}");
        let first = judge(None, &Seen::Nothing).unwrap_err();
        assert!(first.contains("not been claimed yet"), "{first}");
    }

    #[test]
    fn a_standby_or_a_failed_claim_has_no_holder_only_when_it_says_so() {
        assert!(Holding::Held.has_holder());
        assert!(Holding::Standby { holder: "b".into() }.has_holder());
        assert!(
            !Holding::NoHolder {
                why: "x".into(),
                since: Utc::now()
            }
            .has_holder()
        );
    }
}
