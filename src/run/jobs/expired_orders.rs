//! `expired-orders`: cancel PENDING orders past `expires_at + buffer`
//! through seatflow's cancel chain — a conditional status update and
//! `active = NULL` in one transaction (rule 3), then the seats of the
//! order's own `order_seat` rows, each in the row's showtime, `"1"` → `"0"`
//! by fenced compare-and-set under the showtime lease of the row's
//! showtime, where a fresh confirmation shows that nothing else holds the seat
//! (rule 15).

use std::collections::BTreeMap;

use crate::error::Error;
use crate::model::{Kind, SeatNo, SeatRepair, SeatState, ShowtimeId};
use crate::run::showtime_leases::RunLeases;
use crate::store::mysql::{Cancels, ExpiredOrder, Keyset, RunIdentity};
use crate::store::redis::{Fenced, Replied, SeatBatch};

use super::RunOptions;
use super::audit_log::AuditLog;
use super::report::JobReport;
use super::strict::UnknownRows;
use crate::run::context::Context;
use crate::run::progress::{Progress, Unit};

/// Most orders with an undecodable deadline reported per run.
const UNKNOWN_ORDERS_LISTED: usize = 100;

pub async fn run(ctx: &Context, opts: &RunOptions, audit: &mut AuditLog<'_>) -> JobReport {
    let mut report = JobReport::new(Kind::ExpiredOrders);
    let mut unknown = UnknownRows::new(opts.reported.clone(), ctx.repeats.clone());
    let leases = RunLeases::new(
        ctx.redis.clone(),
        ctx.settings.reconcile.lock_ttl,
        ctx.leases.clone(),
    );
    if let Err(e) = cancel_expired(ctx, opts, audit, &mut report, &leases, &mut unknown).await {
        tracing::error!(kind = "expired_orders", error = %e, "job stopped");
        report.fail(&e);
    }
    unknown.summarise();
    if let Err(e) = leases.release_all().await {
        report.error(&e);
    }
    report
}

/// Pages through the expired PENDING orders and cancels each chunk.
async fn cancel_expired(
    ctx: &Context,
    opts: &RunOptions,
    audit: &mut AuditLog<'_>,
    report: &mut JobReport,
    leases: &RunLeases,
    unknown: &mut UnknownRows,
) -> Result<(), Error> {
    // Rule 17: a schema whose orders cannot be read as the contract has
    // them (a column missing, or of a type the reads do not take) holds
    // the whole job; the page would fail, or be read in another type's terms.
    if let Some(why) = &ctx.mysql.contract().holds.order_reads {
        report.fatal = Some(format!(
            "held back by the schema: {why} (see the contract deviations)"
        ));
        return Ok(());
    }
    let job = ctx.settings.job(Kind::ExpiredOrders);
    let buffer = chrono::Duration::from_std(ctx.settings.reconcile.expired_order_buffer)
        .unwrap_or(chrono::Duration::MAX);
    let now = ctx.retry("read clock", || ctx.mysql.now_utc()).await?;
    let deadline = now - buffer;
    // Due orders whose deadline nobody can read: reported, never cancelled.
    match ctx
        .retry("read unknown orders", || {
            ctx.mysql
                .unknown_expired(deadline, ctx.scope(&opts.showtimes), UNKNOWN_ORDERS_LISTED)
        })
        .await
    {
        Ok(rows) => unknown.report(report, &rows),
        Err(e) => report.error(&e),
    }
    let mut budget = job.batch_size;
    let mut progress = Progress::new(opts.progress, Kind::ExpiredOrders.cli_name(), Unit::Orders);
    // The due orders' count is worth a query only when someone watches.
    let total = if opts.progress {
        let scope = ctx.scope(&opts.showtimes);
        let n = ctx
            .retry("count expired orders", || {
                ctx.mysql.count_expired(deadline, scope)
            })
            .await?;
        Some(n.min(job.scan_limit as u64))
    } else {
        None
    };
    let mut after: Option<Keyset> = None;
    loop {
        if opts.stop.is_cancelled() {
            report.fatal = Some("interrupted by shutdown".into());
            return Ok(());
        }
        let want = ctx
            .settings
            .reconcile
            .scan_chunk
            .min(job.scan_limit - report.scanned as usize);
        if want == 0 {
            break;
        }
        let read = ctx
            .retry("read expired orders", || {
                ctx.mysql
                    .expired_page(deadline, after, want, ctx.scope(&opts.showtimes))
            })
            .await?;
        after = read.last;
        let short = read.read < want;
        report.scanned += read.read as u64;
        // Rule 16: an order whose row does not decode is one row.
        unknown.report(report, &read.unknown);
        let page = read.orders;
        // Rule 12: a status only the collation calls PENDING is left alone.
        let (page, misspelled): (Vec<_>, Vec<_>) = page.into_iter().partition(|o| o.exact);
        for o in &misspelled {
            report.invalid();
            tracing::warn!(
                order_id = o.id,
                showtime_id = o.showtime_id,
                "order status is not spelled PENDING exactly; left alone"
            );
        }
        report.drift += page.len() as u64;
        for o in page.iter().take(super::report::MAX_EXAMPLES) {
            report.example(|| {
                format!(
                    "order {} of showtime {} expired at {}",
                    o.id, o.showtime_id, o.expires_at
                )
            });
        }
        // Rule 17: a schema the cancel cannot be sure of holds every cancel.
        if let Some(why) = &ctx.mysql.contract().holds.cancels {
            if report.held_back == 0 {
                report.example(|| format!("cancels held back by the schema: {why}"));
            }
            report.held_back += page.len() as u64;
            progress.tick(report.scanned, total, report.fixed);
            if short {
                break;
            }
            continue;
        }
        let take = page.len().min(budget);
        budget -= take;
        report.backlog += (page.len() - take) as u64;
        if !opts.dry_run
            && take > 0
            && let Err(e) = cancel_chunk(
                ctx,
                &page[..take],
                deadline,
                Chain {
                    audit,
                    report,
                    leases,
                    unknown,
                    opts,
                },
            )
            .await
        {
            tracing::warn!(error = %e, "expired-order chunk failed; skipped for this run");
            report.quarantine(&e, page[..take].iter().map(|o| o.showtime_id));
        }
        progress.tick(report.scanned, total, report.fixed);
        if short {
            break;
        }
    }
    progress.finish();
    Ok(())
}

/// What the cancel chain writes to: the job's audit and report, the run's
/// showtime leases, and the run's report of rows outside the contract.
struct Chain<'c, 'a> {
    audit: &'c mut AuditLog<'a>,
    report: &'c mut JobReport,
    leases: &'c RunLeases,
    unknown: &'c mut UnknownRows,
    opts: &'c RunOptions,
}

async fn cancel_chunk(
    ctx: &Context,
    orders: &[ExpiredOrder],
    deadline: chrono::NaiveDateTime,
    chain: Chain<'_, '_>,
) -> Result<(), Error> {
    // Order ids with their deadlines (the drift's first moment), by showtime.
    let mut by_showtime: BTreeMap<ShowtimeId, Vec<(i64, chrono::NaiveDateTime)>> = BTreeMap::new();
    for o in orders {
        by_showtime
            .entry(o.showtime_id)
            .or_default()
            .push((o.id, o.expires_at));
    }
    let ids: Vec<ShowtimeId> = by_showtime.keys().copied().collect();
    let leases = chain.leases;
    let acquired = leases.acquire(&ids).await?;
    replaced_leases(ctx, chain.report, chain.opts, &acquired.replaced);
    for busy in &acquired.busy {
        chain.report.skipped_busy += 1;
        chain.report.backlog += by_showtime[busy].len() as u64;
        if acquired.stuck.contains(busy) {
            chain.report.stuck_leases += 1;
            super::seat_sweep::log_stuck_lease(ctx, *busy);
        } else {
            tracing::info!(
                kind = "expired_orders",
                showtime_id = busy,
                "showtime busy (showtime lease held by another reconciler); skipped this run"
            );
        }
    }
    let result = cancel_locked(ctx, &acquired.taken, &by_showtime, deadline, chain).await;
    // The order's showtimes, and any other showtime a release went to.
    let released = leases.release(&leases.held()).await;
    result?;
    released
}

async fn cancel_locked(
    ctx: &Context,
    taken: &[ShowtimeId],
    by_showtime: &BTreeMap<ShowtimeId, Vec<(i64, chrono::NaiveDateTime)>>,
    deadline: chrono::NaiveDateTime,
    chain: Chain<'_, '_>,
) -> Result<(), Error> {
    let Chain {
        audit,
        report,
        leases,
        unknown,
        opts,
    } = chain;
    let order_ids: Vec<i64> = taken
        .iter()
        .flat_map(|s| by_showtime[s].iter().map(|(id, _)| *id))
        .collect();
    let expired_at: BTreeMap<i64, chrono::NaiveDateTime> = taken
        .iter()
        .flat_map(|s| by_showtime[s].iter().copied())
        .collect();
    if order_ids.is_empty() {
        return Ok(());
    }
    // The database's clock before the first attempt: a retry recognises
    // cancels of ours that committed although their reply was lost.
    let since = ctx.retry("read clock", || ctx.mysql.now_utc()).await?;
    let identity = RunIdentity {
        run_id: audit.run_id(),
        instance: &ctx.settings.reconcile.instance,
    };
    race_window!(crate::race_window::EXPIRED_BEFORE_CANCEL);
    // Rule 10: the cancel's audit rows need their run's row first.
    audit.ensure_run().await?;
    let Cancels {
        cancelled,
        refused,
        locked,
        refused_by_mysql,
        rewritten,
    } = ctx
        .retry("cancel expired orders", || {
            ctx.mysql
                .cancel_expired(&order_ids, deadline, since, &identity)
        })
        .await?;
    unknown.report(report, &refused);
    // Rule 16: a cancel MySQL refused or rewrote costs its order alone:
    // reported with MySQL's words, still due, tried again next run.
    for (order, why) in &refused_by_mysql {
        not_cancelled(report, *order, &format!("MySQL refused its cancel ({why})"));
    }
    for (order, why) in &rewritten {
        not_cancelled(
            report,
            *order,
            &format!("MySQL rewrote its cancel: {why}; rolled back"),
        );
    }
    if !locked.is_empty() {
        // The application holds them (paying or cancelling): not waited
        // for; a later run takes what is still due.
        tracing::info!(
            orders = ?locked,
            "expired orders whose rows another transaction holds; skipped, not waited for"
        );
        report.skipped_locked += locked.len() as u64;
        report.backlog += locked.len() as u64;
    }
    let skipped = order_ids.len().saturating_sub(
        cancelled.len() + refused.len() + locked.len() + refused_by_mysql.len() + rewritten.len(),
    );
    if skipped > 0 {
        tracing::info!(
            skipped,
            "orders paid or cancelled by seatflow since the scan; left alone"
        );
    }
    // The seats of the cancelled orders' own rows, each in the row's showtime.
    let mut releases: Vec<(ShowtimeId, SeatNo, i64)> = Vec::new();
    for order in &cancelled {
        report.fixed += 1;
        // Drift age: the order held its seats from its deadline until this
        // cancel (the database's clock on both sides).
        if let Some(at) = expired_at.get(&order.id) {
            report.observe_drift_age((since - *at).num_milliseconds().max(0) as u64);
        }
        releases.extend(
            order
                .seats
                .iter()
                .map(|(showtime, seat)| (*showtime, seat.clone(), order.id)),
        );
    }
    // The MySQL side is committed; a failure below leaves "1"s that the
    // orphan-locks job releases later, as after any crash in this window.
    race_window!(crate::race_window::EXPIRED_AFTER_CANCEL);
    // A row in a showtime we do not hold yet (its order says another): take
    // the showtime lease of that showtime too, or leave the seat to
    // orphan-locks.
    let mut others: Vec<ShowtimeId> = releases
        .iter()
        .map(|(s, _, _)| *s)
        .filter(|s| !taken.contains(s))
        .collect();
    others.sort_unstable();
    others.dedup();
    let extra = leases.acquire(&others).await?;
    replaced_leases(ctx, report, opts, &extra.replaced);
    if !extra.busy.is_empty() {
        tracing::info!(
            showtimes = ?extra.busy,
            "seats of cancelled orders in busy showtimes left to orphan-locks"
        );
    }
    releases.retain(|(s, _, _)| !extra.busy.contains(s));
    // Rule 17: a schema that holds every seat write holds the release too;
    // its confirmation would read the columns in doubt. Left to
    // orphan-locks, once the schema is fixed.
    if let Some(why) = &ctx.mysql.contract().holds.seat_writes {
        if !releases.is_empty() {
            tracing::info!(
                seats = releases.len(),
                why = %why,
                "seats of cancelled orders not released: the schema holds every seat write"
            );
        }
        releases.clear();
    }
    // Rule 15: release only what MySQL, asked now in its own terms, shows
    // held by nothing else (no valid order, no row outside the contract,
    // no row whose seat name a person reads as the seat: rule 17).
    let asked: Vec<(ShowtimeId, SeatNo, bool)> = releases
        .iter()
        .map(|(s, seat, _)| (*s, seat.clone(), true))
        .collect();
    let (fresh, rows) = ctx
        .retry("confirm seats", || ctx.mysql.confirm_seats_as_read(&asked))
        .await?;
    unknown.report(report, &rows);
    let mut batches: BTreeMap<ShowtimeId, SeatReleases> = BTreeMap::new();
    let shape = ctx.mysql.contract().shape.clone();
    for ((showtime, seat, order), now) in releases.into_iter().zip(fresh) {
        if !now.truth.allows(Some(SeatState::Locked), SeatState::Free) {
            tracing::info!(
                showtime_id = showtime,
                seat = %seat,
                order_id = order,
                "seat of a cancelled order is held by another row in MySQL; not released"
            );
            continue;
        }
        if let Err(e) = super::seat_sweep::fits_audit(&shape, showtime, &seat) {
            // Rules 10 and 17: no write without its whole audit row.
            tracing::warn!(order_id = order, error = %e, "seat of a cancelled order not released");
            report.error(&e);
            continue;
        }
        let entry = batches.entry(showtime).or_default();
        entry.repairs.push(SeatRepair {
            kind: Kind::ExpiredOrders,
            seat,
            observed: Some(SeatState::Locked),
            target: SeatState::Free,
        });
        entry.orders.push(order);
    }
    let ids: Vec<ShowtimeId> = batches.keys().copied().collect();
    let lost = leases.renew_due(&ids).await?;
    for id in &lost {
        report.error(&Error::LeaseLost(*id));
    }
    let batches: Vec<(ShowtimeId, SeatReleases)> = batches
        .into_iter()
        .filter(|(id, _)| !lost.contains(id))
        .collect();
    let calls: Vec<SeatBatch> = batches
        .iter()
        .map(|(id, b)| SeatBatch::new(*id, b.repairs.clone()))
        .collect();
    if calls.is_empty() {
        return Ok(());
    }
    let token = leases.token().to_string();
    let results = ctx
        .retry("release seats", || ctx.redis.repair_seats(&token, &calls))
        .await?;
    for ((id, batch), Replied { reply, replaced }) in batches.iter().zip(results) {
        // Rule 13: our own keys of the wrong type were replaced by the script.
        for key in &replaced {
            report.invalid();
            tracing::warn!(
                key,
                action = "replaced",
                "reconciler key of the wrong type (rule 13)"
            );
        }
        match reply {
            Ok(Fenced::Done(applied)) => {
                for ((r, order), ok) in batch.repairs.iter().zip(&batch.orders).zip(applied) {
                    if ok {
                        audit
                            .seat(*id, &r.seat, Some(*order), r.observed, r.target)
                            .await;
                    }
                }
            }
            Ok(Fenced::LeaseLost) => report.error(&Error::LeaseLost(*id)),
            Ok(Fenced::SeatKeyWrongType) => {
                // Seatflow's key is not a hash (rules 8, 12, 13): left alone,
                // one problem per run whichever job meets it first.
                let key = ctx.redis.keys.seat(*id);
                if opts
                    .reported
                    .first(&super::seat_sweep::wrong_type_problem(&key))
                {
                    report.invalid();
                    tracing::warn!(
                        key = %key,
                        "seat key of the wrong type; seats of cancelled orders left alone"
                    );
                }
            }
            Err(e) => report.quarantine(&e, [*id]),
        }
    }
    Ok(())
}

/// An expired order whose cancel MySQL refused or rewrote: one `mysql`
/// error of the job, its words among the report's messages and in a WARN
/// line naming the order, and backlog (it is still due; the next run tries
/// it again).
fn not_cancelled(report: &mut JobReport, order: i64, what: &str) {
    report.error_at(crate::error::Stage::Mysql);
    report.backlog += 1;
    let line = format!("expired order {order} not cancelled: {what}");
    if report.error_messages.len() < super::report::MAX_EXAMPLES {
        report.error_messages.push(line.clone());
    }
    tracing::warn!(
        kind = "expired_orders",
        order_id = order,
        "{line}; the other orders of its chunk are cancelled, it is tried again next run"
    );
}

/// Rule 13: showtime lease keys of another type than a string were nobody's
/// lease; the acquisition replaced them. Each is reported once per run.
fn replaced_leases(ctx: &Context, report: &mut JobReport, opts: &RunOptions, ids: &[ShowtimeId]) {
    for id in ids {
        let key = ctx.redis.keys.showtime_lease(*id);
        if !opts.reported.first(&key) {
            continue;
        }
        report.invalid();
        tracing::warn!(
            key,
            what = "lease",
            action = "replaced",
            "reconciler key of the wrong type (rule 13)"
        );
    }
}

#[derive(Default)]
struct SeatReleases {
    repairs: Vec<SeatRepair>,
    orders: Vec<i64>,
}
