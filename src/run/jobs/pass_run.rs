//! A run whose seat jobs take their shard's pass lease first (`pass_lease`), so
//! that reconcilers on the same data never sweep a shard at the same time:
//! the daemon's passes, its admin runs, and `once`. Which runs do is the
//! request's to say (`RunRequest::pass_slot_ms`): dry runs and runs of given
//! showtimes take none (they write nothing, or are an operator's targeted
//! repair under the showtime lease).

use crate::model::Kind;
use crate::run::context::Context;
use std::sync::Arc;

use crate::run::jobs::RunOptions;
use crate::run::jobs::report::{JobReport, RunReport, SkipReason, SkippedJob};
use crate::run::pass_lease::{self, Claimed, HeldPass};
use crate::store::redis::PassRecord;

/// What a run under the pass lease came to: ran, stood by, could not
/// claim, or needed no pass lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassOutcome {
    /// None taken: no seat job, a dry run, or given showtimes.
    NotNeeded,
    /// Ours: the seat jobs ran. `took_over_from`: the instance that ran the
    /// shard's last pass, when another one. `recorded`: the pass was
    /// recorded as done for its slot (false when stopped, failed or lost).
    Ran {
        took_over_from: Option<String>,
        last: Option<PassRecord>,
        recorded: bool,
    },
    /// Redis did not answer the claim: the seat jobs failed this run.
    ClaimFailed,
    /// Another reconciler runs this shard's pass (or ran this slot's): the
    /// seat jobs stood by and are not in the report.
    StoodBy {
        holder: String,
        /// Since when (Unix ms): the holder's claim, or when this slot's
        /// pass was done; None when the lease does not say.
        since_ms: Option<i64>,
        already_done: bool,
        stuck: bool,
    },
}

/// What claiming the shard's pass leaves a run to do (`jobs::run` does it).
pub(super) enum Claim {
    /// Ours: every job runs under `opts` (fenced by the lease, stopped
    /// with it), then [`finish`].
    Ours { held: Held, opts: RunOptions },
    /// Not ours: only the jobs that need no pass lease run, with `failed`
    /// (the seat jobs, when the claim itself failed) recorded beside them
    /// and `skipped` (the seat jobs, when another reconciler has the pass)
    /// in the report; `outcome` says which.
    NotOurs {
        failed: Vec<JobReport>,
        skipped: Vec<SkippedJob>,
        outcome: PassOutcome,
    },
}

/// The pass lease a run holds while its seat jobs run.
pub(super) struct Held {
    pass: Arc<HeldPass>,
    last: Option<PassRecord>,
    took_over_from: Option<String>,
}

/// Claims the pass of the context's shard for `slot_ms` (0: outside the
/// schedule) for a run of `kinds`: through the lease the daemon keeps for
/// its own shard, or a claim of its own.
pub(super) async fn claim(ctx: &Context, kinds: &[Kind], opts: &RunOptions, slot_ms: i64) -> Claim {
    let shard = ctx.shard;
    let me = &ctx.settings.reconcile.instance;
    // The daemon's own shard: the lease it keeps between passes.
    let kept = opts.kept_pass.as_ref().filter(|k| k.shard() == shard);
    let claimed = match kept {
        Some(kept) => kept.claim(ctx, slot_ms).await.map(|(claimed, _)| claimed),
        None => pass_lease::claim(ctx, shard, slot_ms, &opts.stop).await,
    };
    let claimed = match claimed {
        Ok(c) => c,
        Err(e) => {
            // Redis did not answer the claim: the seat jobs fail this run
            // (their sweep could not have read Redis either), and the run's
            // row says so.
            tracing::error!(shard = shard.index, error = %e, "could not claim the pass");
            let failed = seat_jobs(kinds)
                .map(|kind| {
                    let mut failed = JobReport::new(kind);
                    failed.fail(&e);
                    failed.finish();
                    failed
                })
                .collect();
            return Claim::NotOurs {
                failed,
                skipped: Vec::new(),
                outcome: PassOutcome::ClaimFailed,
            };
        }
    };
    let (pass, last) = match claimed {
        Claimed::Ours { pass, last } => (pass, last),
        Claimed::Held {
            holder,
            since_ms,
            stuck,
        } => {
            let by = StoodBy {
                holder,
                since_ms,
                already_done: false,
                stuck,
            };
            return stand_by(ctx, kinds, by);
        }
        Claimed::Done(record) => {
            let by = StoodBy {
                holder: record.instance,
                since_ms: Some(record.finished_ms),
                already_done: true,
                stuck: false,
            };
            return stand_by(ctx, kinds, by);
        }
    };
    let took_over_from = last
        .as_ref()
        .map(|l| l.instance.clone())
        .filter(|who| who != me);
    if let Some(from) = &took_over_from {
        tracing::info!(
            shard = shard.index,
            from,
            "took over the pass (the last one was run by another reconciler)"
        );
    }
    let opts = RunOptions {
        fence: Some(pass.fence()),
        // A kept lease outlives the pass (its fence stops the pass when
        // lost); the pass's own stop may start another one.
        stop: match kept {
            Some(_) => opts.stop.clone(),
            None => pass.stop_token(),
        },
        ..opts.clone()
    };
    let held = Held {
        pass,
        last,
        took_over_from,
    };
    Claim::Ours { held, opts }
}

/// After the run of a pass that was ours (`opts`: the options it ran
/// under, `report`: what it did): recorded as done for its slot when its
/// seat jobs completed, released otherwise (a kept lease stays).
pub(super) async fn finish(
    ctx: &Context,
    held: Held,
    opts: &RunOptions,
    report: &RunReport,
    slot_ms: i64,
) -> PassOutcome {
    let shard = ctx.shard;
    let Held {
        pass,
        last,
        took_over_from,
    } = held;
    let kept = opts.kept_pass.as_ref().filter(|k| k.shard() == shard);
    let completed = !opts.stop.is_cancelled()
        && !opts.fenced_out()
        && report
            .jobs
            .iter()
            .filter(|j| j.kind.is_seat_job())
            .all(|j| !j.nothing_completed && j.fatal.is_none());
    let recorded = if completed {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let recorded = match kept {
            Some(_) => pass.record(slot_ms, now_ms).await,
            None => pass.finish(slot_ms, now_ms).await,
        };
        match recorded {
            Ok(true) => true,
            Ok(false) => {
                tracing::warn!(
                    shard = shard.index,
                    "the pass lease was lost before the pass was recorded"
                );
                false
            }
            Err(e) => {
                tracing::warn!(shard = shard.index, error = %e, "could not record the pass; its pass lease expires with its TTL");
                false
            }
        }
    } else {
        if kept.is_none() {
            pass.release().await;
        }
        false
    };
    PassOutcome::Ran {
        took_over_from,
        last,
        recorded,
    }
}

/// Who has the pass a run stood by for (see `PassOutcome::StoodBy`).
struct StoodBy {
    holder: String,
    since_ms: Option<i64>,
    already_done: bool,
    stuck: bool,
}

/// Another reconciler has this shard's pass: only the other jobs run, and
/// the report lists the seat jobs as skipped, naming the holder.
fn stand_by(ctx: &Context, kinds: &[Kind], by: StoodBy) -> Claim {
    let StoodBy {
        holder,
        since_ms,
        already_done,
        stuck,
    } = by;
    let shard = ctx.shard;
    if stuck {
        tracing::warn!(
            key = ctx.redis.keys.pass_lease(shard),
            holder,
            "pass lease without expiry held by someone else: this shard's pass waits \
             for an operator (see the runbook, SeatflowReconcilerPassStalled)"
        );
    } else if already_done {
        tracing::debug!(
            shard = shard.index,
            by = holder,
            "this slot's pass was run already; standing by"
        );
    } else {
        tracing::info!(
            shard = shard.index,
            holder,
            "the pass runs in another reconciler; standing by"
        );
    }
    let reason = if already_done {
        SkipReason::PassDone
    } else {
        SkipReason::PassHeld
    };
    let skipped = seat_jobs(kinds)
        .map(|kind| SkippedJob {
            kind,
            reason,
            shard: shard.index,
            holder: holder.clone(),
            since: since_ms.and_then(chrono::DateTime::from_timestamp_millis),
        })
        .collect();
    Claim::NotOurs {
        failed: Vec::new(),
        skipped,
        outcome: PassOutcome::StoodBy {
            holder,
            since_ms,
            already_done,
            stuck,
        },
    }
}

/// The seat jobs of `kinds`: those the pass lease is for.
fn seat_jobs(kinds: &[Kind]) -> impl Iterator<Item = Kind> + '_ {
    kinds.iter().copied().filter(|k| k.is_seat_job())
}

/// The jobs of `kinds` that need no pass lease (`expired-orders`).
pub(super) fn others(kinds: &[Kind]) -> Vec<Kind> {
    kinds.iter().copied().filter(|k| !k.is_seat_job()).collect()
}
