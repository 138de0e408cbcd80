//! A run whose seat jobs take their shard's pass lease first (`pass_lease`), so
//! that reconcilers on the same data never sweep a shard at the same time:
//! the daemon's passes, its admin runs, and `once`. Which runs do is the
//! request's to say (`RunRequest::pass_slot_ms`): dry runs and runs of given
//! showtimes take none (they write nothing, or are an operator's targeted
//! repair under the showtime lease).

use crate::model::Kind;
use crate::run::context::Context;
use crate::run::jobs::report::{JobReport, RunReport, SkipReason, SkippedJob};
use crate::run::jobs::{RunOptions, RunResult, run_as};
use crate::run::pass_lease::{self, Claimed};
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

/// Runs `kinds` as run `run_id`; the seat jobs only if this process gets
/// the pass of its context's shard for `slot_ms` (0: outside the schedule).
pub(super) async fn under_pass_lease(
    ctx: &Context,
    kinds: &[Kind],
    opts: &RunOptions,
    slot_ms: i64,
    run_id: String,
) -> RunResult {
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
            let failed = kinds
                .iter()
                .filter(|k| k.is_seat_job())
                .map(|kind| {
                    let mut failed = JobReport::new(*kind);
                    failed.fail(&e);
                    failed.finish();
                    failed
                })
                .collect();
            return RunResult {
                report: run_as(ctx, &others(kinds), opts, run_id, failed).await,
                pass: PassOutcome::ClaimFailed,
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
            return stand_by(ctx, kinds, opts, run_id, by).await;
        }
        Claimed::Done(record) => {
            let by = StoodBy {
                holder: record.instance,
                since_ms: Some(record.finished_ms),
                already_done: true,
                stuck: false,
            };
            return stand_by(ctx, kinds, opts, run_id, by).await;
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
    let fenced = RunOptions {
        fence: Some(pass.fence()),
        // A kept lease outlives the pass (its fence stops the pass when
        // lost); the pass's own stop may start another one.
        stop: match kept {
            Some(_) => opts.stop.clone(),
            None => pass.stop_token(),
        },
        ..opts.clone()
    };
    let report = run_as(ctx, kinds, &fenced, run_id, Vec::new()).await;
    let completed = !fenced.stop.is_cancelled()
        && !fenced.fenced_out()
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
    RunResult {
        report,
        pass: PassOutcome::Ran {
            took_over_from,
            last,
            recorded,
        },
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
async fn stand_by(
    ctx: &Context,
    kinds: &[Kind],
    opts: &RunOptions,
    run_id: String,
    by: StoodBy,
) -> RunResult {
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
    let others = others(kinds);
    let mut report = if others.is_empty() {
        RunReport::new(run_id, opts.dry_run, Vec::new(), 0)
    } else {
        run_as(ctx, &others, opts, run_id, Vec::new()).await
    };
    let reason = if already_done {
        SkipReason::PassDone
    } else {
        SkipReason::PassHeld
    };
    report.skipped = kinds
        .iter()
        .filter(|k| k.is_seat_job())
        .map(|kind| SkippedJob {
            kind: *kind,
            reason,
            shard: shard.index,
            holder: holder.clone(),
            since: since_ms.and_then(chrono::DateTime::from_timestamp_millis),
        })
        .collect();
    RunResult {
        report,
        pass: PassOutcome::StoodBy {
            holder,
            since_ms,
            already_done,
            stuck,
        },
    }
}

/// The jobs of `kinds` that need no pass lease (`expired-orders`).
fn others(kinds: &[Kind]) -> Vec<Kind> {
    kinds.iter().copied().filter(|k| !k.is_seat_job()).collect()
}
