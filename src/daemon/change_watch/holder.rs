//! The keeper of this process's own shard's pass lease (`pass::KeptPass`):
//! every second it makes sure the shard has a holder. The holder keeps its
//! lease between passes (renewed in the background). A standby claims it
//! the moment the holder's lease is gone (the holder died, was stopped, or
//! could not renew it). A failed claim (Redis away, `NOSCRIPT` after a
//! restart, a refused command or key) is tried again with a growing wait,
//! up to [`MAX_WAIT`], until it succeeds or another holder is seen. Once a
//! pass has run, becoming the holder after a time without one (`regained`)
//! is a gap (`no_holder`): the shard's changes went unchecked meanwhile,
//! and a pass runs at once. `/readyz`, `/status` and `seatflow_reconcile_pass_active`
//! follow what it finds (`Runner::holding`).

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use crate::daemon::change_state::Changes;
use crate::daemon::runner::Runner;
use crate::run::pass_lease::{Claimed, Holding};

/// How often the holder is checked: a standby sees a lease gone within this.
pub(super) const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Longest wait between two claims that failed.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(5);

/// The next wait after a failure: doubled from `wait`, up to [`MAX_WAIT`],
/// with jitter (half to all of it), so that replicas cut off together do
/// not claim in lockstep when Redis is back.
fn after_failure(wait: Duration) -> Duration {
    let ceiling = (wait * 2).clamp(CHECK_EVERY, MAX_WAIT);
    rand::rng().random_range(ceiling / 2..=ceiling)
}

pub(super) async fn keep_pass(runner: &Arc<Runner>, changes: &Changes) {
    let Some(kept) = runner.kept_pass().cloned() else {
        return;
    };
    let ctx = &runner.ctx;
    let stop = runner.stopping();
    let mut wait = Duration::ZERO;
    let mut shown: Option<Holding> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = kept.woken() => {}
            _ = stop.cancelled() => return,
        }
        // As this check finds it, before its claim (which renews a lapsed
        // lease: the time without holder would go unseen).
        let found = kept.holding();
        let mut claimed_now = false;
        wait = match kept.keep(ctx).await {
            Ok((Claimed::Ours { .. }, fresh)) => {
                claimed_now = fresh;
                CHECK_EVERY
            }
            Ok(_) => CHECK_EVERY,
            Err(e) => {
                ctx.denials.note(&e);
                after_failure(wait)
            }
        };
        let Some(holding) = runner.holding() else {
            return;
        };
        if regained(shown.as_ref(), &found, &holding, claimed_now) && runner.passes_started() {
            // What the pace learned while the shard had no holder (reads
            // refused, timed out, retried) says nothing of Redis' load now:
            // kept, a permission given back found the pace at its floor and
            // the pass that follows took a minute to reach a lost hash at
            // 10 k showtimes.
            if let Some(pacer) = &ctx.pacer {
                pacer.start_again();
            }
            changes.gap("no_holder");
        }
        log_change(shown.as_ref(), &holding);
        shown = Some(holding);
    }
}

/// Whether this process has just become the holder (`now`) after a time
/// the shard had none it could tell of (another holder gone, a claim
/// failing, its own lease not renewed), as the last check saw it (`last`)
/// or this one found it before its claim (`found`: the claim renews a
/// lapsed lease, which would hide the lapse), or claimed it afresh: a gap,
/// since nobody checked the shard's changes meanwhile. Not at the first
/// check (`last` None): the daemon's first pass covers its start.
fn regained(last: Option<&Holding>, found: &Holding, now: &Holding, claimed_now: bool) -> bool {
    let Some(last) = last else {
        return false;
    };
    *now == Holding::Held && (claimed_now || *last != Holding::Held || *found != Holding::Held)
}

/// One line when who holds the pass changes (not every second).
fn log_change(before: Option<&Holding>, now: &Holding) {
    let same = match (before, now) {
        (Some(Holding::NoHolder { why: a, .. }), Holding::NoHolder { why: b, .. }) => {
            // The seconds in "not renewed for N s" change every second.
            a.split(" for ").next() == b.split(" for ").next()
        }
        (Some(b), n) => b == n,
        (None, _) => false,
    };
    if same {
        return;
    }
    match now {
        Holding::Held => tracing::info!("this process holds its shard's pass"),
        Holding::Standby { holder } => {
            tracing::info!(
                holder,
                "the shard's pass is held by another reconciler; standing by"
            )
        }
        Holding::NoHolder { why, .. } => tracing::warn!(
            why,
            "the shard's pass has no holder; claiming it again until it has one \
             (/readyz answers 503 meanwhile)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn becoming_the_holder_after_a_time_without_one_is_a_gap() {
        let none = Holding::NoHolder {
            why: "x".into(),
            since: chrono::Utc::now(),
        };
        let standby = Holding::Standby { holder: "b".into() };
        let held = Holding::Held;
        // The start: its first pass covers it.
        assert!(!regained(None, &none, &held, true));
        // (last check, this one's start, now, claimed afresh): a gap?
        let cases = [
            ((&none, &held, &held, false), true, "a lapse renewed"),
            (
                (&held, &none, &held, false),
                true,
                "a lapse renewed by this claim",
            ),
            ((&none, &none, &held, true), true, "a failed claim retried"),
            ((&standby, &standby, &held, true), true, "a holder gone"),
            ((&held, &held, &held, true), true, "lost and claimed again"),
            ((&held, &held, &held, false), false, "kept"),
            ((&held, &none, &none, false), false, "still none"),
            ((&none, &none, &standby, false), false, "another holds it"),
        ];
        for ((last, found, now, fresh), gap, what) in cases {
            assert_eq!(regained(Some(last), found, now, fresh), gap, "{what}");
        }
    }

    #[test]
    fn a_failed_claim_waits_longer_each_time_up_to_the_cap() {
        let mut wait = Duration::ZERO;
        for _ in 0..20 {
            let next = after_failure(wait);
            assert!(next <= MAX_WAIT, "{next:?}");
            assert!(next >= CHECK_EVERY / 2, "{next:?}");
            assert!(
                next * 2 >= (wait * 2).clamp(CHECK_EVERY, MAX_WAIT),
                "{wait:?} -> {next:?}"
            );
            wait = next;
        }
    }
}
