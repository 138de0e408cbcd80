//! The four seat-map jobs (`paid-seats`, `missing-hashes`, `orphan-locks`,
//! `sold-orphans`): sweep ON_SALE showtimes soonest-first in chunks, plan
//! each with the pure planner, and repair the jobs' drift under the
//! showtime lease (the spec's per-showtime mutex).
//!
//! Several seat jobs run together (as `once` does) share one sweep: each hash
//! is read once, planned once, leased once, and all of a showtime's repairs
//! go in one script call; each job keeps its own budget, report and audit.
//!
//! Per chunk: 1 SQL page + 1 SQL template read (new halls only) + 1 SQL
//! occupancy read + 1 Redis pipeline of HGETALLs; then, only where there is
//! something to repair, 1 pipeline of showtime leases, 1 SQL confirmation, 1
//! pipeline of repair scripts and 1 pipeline of lease releases. The next
//! chunk's page, hashes and occupancy are read while the current chunk is
//! planned and repaired.
//!
//! Rooms: this file covers the estate (budgets, cursors, the soonest window,
//! the ring, the loop over a segment's chunks); `read.rs` reads a chunk; `chunk.rs` plans it; `repair.rs`
//! writes its repairs; `notices.rs` reports what is left alone.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Error;
use crate::model::SeatRepair;
use crate::model::{Kind, ShowtimeId, Template};
use crate::run::showtime_leases::RunLeases;
use crate::store::mysql::{Keyset, PageEnd};
use crate::store::redis::CursorMove;

use super::RunOptions;
use super::audit_log::AuditLog;
use super::report::JobReport;
use super::strict::UnknownRows;
use crate::run::context::Context;
use crate::run::progress::{Progress, Unit};

mod chunk;
mod notices;
mod read;
mod repair;
pub mod seen;

use notices::{BadDataLog, OwnKeys};
pub(crate) use notices::{log_stuck_lease, wrong_type_problem};
use read::{Fetched, fetch};
pub(crate) use repair::fits_audit;

/// Most hall templates kept between chunks; cleared when exceeded.
const TEMPLATE_CACHE_HALLS: usize = 1024;

/// Most showtimes outside the contract reported per sweep.
const UNKNOWN_SHOWTIMES_LISTED: usize = 100;

/// A seat repair and, for orphans, its suspect record (None for a seat
/// with no record, or deferred by a check that recorded it just now).
struct Planned {
    repair: SeatRepair,
    suspect: Option<crate::plan::Suspect>,
}

/// What a chunk found to do, across the sweep's jobs.
#[derive(Default)]
struct ChunkWork {
    rebuilds: Vec<ShowtimeId>,
    seats: Vec<(ShowtimeId, Vec<Planned>)>,
}

/// One job's share of a sweep.
struct JobShare<'a> {
    kind: Kind,
    report: JobReport,
    /// Repairs this run may still apply.
    budget: usize,
    /// Where this job's next run resumes when this one ran out of budget.
    resume: Option<Option<Keyset>>,
    audit: AuditLog<'a>,
}

impl JobShare<'_> {
    /// Reserves up to `n` repairs from the run's budget; the rest is backlog.
    fn take(&mut self, n: usize) -> usize {
        let granted = n.min(self.budget);
        self.budget -= granted;
        self.report.backlog += (n - granted) as u64;
        granted
    }
}

/// Runs the seat jobs `kinds` (one sweep when their cursors agree) and
/// returns each job's report with its audit log, in the order given. Bad
/// data is counted and logged by `reporter` alone, so that one bad value is
/// one `invalid_data` error and one log line, whichever jobs saw it.
/// `ring`: a pass's sweep may go round the estate (see `cover`); jobs swept
/// one by one never do.
pub async fn run<'a>(
    ctx: &'a Context,
    kinds: &[Kind],
    opts: &RunOptions,
    audits: Vec<AuditLog<'a>>,
    reporter: Kind,
    ring: bool,
) -> Vec<(JobReport, AuditLog<'a>)> {
    let use_cursor = opts.showtimes.is_empty();
    let mut cursors = Vec::with_capacity(kinds.len());
    // Rule 13: a cursor key of the wrong type reads as no cursor (the sweep
    // starts over from the soonest showtime), is reported below, and is
    // replaced when the run writes its cursor.
    let mut wrong_cursors = Vec::new();
    for kind in kinds {
        let key = cursor_key(ctx, *kind);
        let seen = if use_cursor {
            ctx.retry("read cursor", || ctx.redis.read_cursor(&key))
                .await
                .map(|read| {
                    read.unwrap_or_else(|_| {
                        wrong_cursors.push((*kind, key.clone()));
                        None
                    })
                })
        } else {
            Ok(None)
        };
        cursors.push(seen);
    }
    // Jobs whose cursors went apart (different scan limits, a budget spent,
    // a failed run) sweep one by one, each from its own place to the
    // estate's end, never round it: the first would take the whole pass
    // and leave the others none.
    let shared = cursors.windows(2).all(|w| match (&w[0], &w[1]) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    });
    if kinds.len() > 1 && !shared {
        let mut out = Vec::with_capacity(kinds.len());
        for (kind, audit) in kinds.iter().zip(audits) {
            out.extend(Box::pin(run(ctx, &[*kind], opts, vec![audit], reporter, false)).await);
        }
        return out;
    }
    let jobs = kinds
        .iter()
        .zip(audits)
        .map(|(&kind, audit)| JobShare {
            kind,
            report: JobReport::new(kind),
            budget: opts.budget(&ctx.settings, kind),
            resume: None,
            audit,
        })
        .collect();
    let label = kinds
        .iter()
        .map(|k| k.cli_name())
        .collect::<Vec<_>>()
        .join("+");
    let mut sweep = Sweep {
        ctx,
        opts,
        ring,
        jobs,
        leases: RunLeases::new(
            ctx.redis.clone(),
            ctx.settings.reconcile.lock_ttl,
            ctx.leases.clone(),
        ),
        templates: HashMap::new(),
        progress: Progress::new(opts.progress, &label, Unit::Showtimes),
        bad_data: BadDataLog::new(reporter, ctx.repeats.clone()),
        own_keys: OwnKeys::default(),
        unknown_rows: UnknownRows::new(opts.reported.clone(), ctx.repeats.clone()),
    };
    for (kind, key) in wrong_cursors {
        let action = if opts.dry_run {
            "left as is (dry run)"
        } else {
            "replaced when this run writes its cursor"
        };
        sweep.own_key(Some(kind), &key, "cursor", action);
    }
    let cursor = match cursors.into_iter().next() {
        Some(Err(e)) => Err(e),
        Some(Ok(c)) => Ok(c),
        None => Ok(None),
    };
    if let Err(e) = match cursor {
        Ok(cursor) => sweep.cover(cursor).await,
        Err(e) => Err(e),
    } {
        let labels: Vec<&str> = kinds.iter().map(|k| k.label()).collect();
        tracing::error!(kinds = %labels.join(","), error = %e, "seat sweep stopped");
        sweep.jobs.iter_mut().for_each(|j| j.report.fail(&e));
    }
    sweep.bad_data.summarise();
    sweep.own_keys.summarise();
    sweep.unknown_rows.summarise();
    if let Err(e) = sweep.leases.release_all().await {
        sweep.jobs.iter_mut().for_each(|j| j.report.error(&e));
    }
    sweep
        .jobs
        .into_iter()
        .map(|j| (j.report, j.audit))
        .collect()
}

/// Where a sweep's scan stands, across its segments.
#[derive(Default)]
struct Scan {
    /// The most showtimes this sweep scans.
    limit: usize,
    scanned: usize,
    /// Showtimes to scan in all (for the progress line), when counted.
    total: Option<u64>,
    /// The scope's ON_SALE showtimes, when counted (a pass on a schedule):
    /// what is left of them sets the pace the pass needs.
    estate: Option<u64>,
    chunks_ok: u64,
    last_failure: Option<String>,
    /// Stopped at the deadline.
    cut_short: bool,
}

/// A job's cursor key in this context's shard.
fn cursor_key(ctx: &Context, kind: Kind) -> String {
    ctx.redis.keys.shard_cursor(kind.label(), ctx.shard)
}

struct Sweep<'a, 'o> {
    ctx: &'a Context,
    opts: &'o RunOptions,
    /// The sweep may go round the estate (jobs sweeping together).
    ring: bool,
    jobs: Vec<JobShare<'a>>,
    leases: RunLeases,
    templates: HashMap<i64, Arc<Template>>,
    progress: Progress,
    bad_data: BadDataLog,
    own_keys: OwnKeys,
    unknown_rows: UnknownRows,
}

impl<'a> Sweep<'a, '_> {
    #[allow(
        clippy::expect_used,
        reason = "repairs are planned only for the sweep's jobs"
    )]
    fn job(&mut self, kind: Kind) -> &mut JobShare<'a> {
        self.jobs
            .iter_mut()
            .find(|j| j.kind == kind)
            .expect("repairs only of the sweep's jobs")
    }

    /// Repairs made so far (the progress line's count).
    fn repaired(&self) -> u64 {
        self.jobs.iter().map(|j| j.report.fixed).sum()
    }

    /// Covers the sweep's scope, one segment after another: the showtimes
    /// starting within `pass.soonest_window` first, then onwards from the
    /// cursors, and on a ring back from the start to where it began.
    async fn cover(&mut self, cursor_seen: Option<String>) -> Result<(), Error> {
        let ctx = self.ctx;
        // Rule 17: a schema whose reading of every showtime is in doubt
        // (a type the reads do not take, a missing table) holds every
        // seat write; the sweep would read for nothing.
        if let Some(why) = &ctx.mysql.contract().holds.seat_writes {
            for j in &mut self.jobs {
                j.report.fatal = Some(format!(
                    "held back by the schema: {why} (see the contract deviations)"
                ));
            }
            return Ok(());
        }
        // A shared sweep stops at the smallest scan limit of its jobs.
        let scan_limit = self
            .jobs
            .iter()
            .map(|j| ctx.settings.job(j.kind).scan_limit)
            .min()
            .unwrap_or(0);
        // The estate's size is worth a COUNT query when someone watches,
        // and for a daemon's pass, which says whether it fits and paces
        // itself to finish in time.
        let on_sale = if self.opts.progress || self.opts.pace_by.is_some() {
            let n = ctx
                .retry("count showtimes", || {
                    ctx.mysql.count_on_sale(ctx.scope(&self.opts.showtimes))
                })
                .await?;
            for j in &mut self.jobs {
                j.report.estate = Some(n);
            }
            Some(n)
        } else {
            None
        };
        let total = on_sale
            .filter(|_| self.opts.progress)
            .map(|n| n.min(scan_limit as u64));
        let mut scan = Scan {
            limit: scan_limit,
            total,
            estate: on_sale,
            ..Scan::default()
        };
        // Showtimes the contract does not explain are on no page: say so.
        let unknown = ctx
            .retry("read unknown showtimes", || {
                ctx.mysql
                    .unknown_showtimes(ctx.scope(&self.opts.showtimes), UNKNOWN_SHOWTIMES_LISTED)
            })
            .await?;
        self.unknown(&unknown);
        let cursor = cursor_seen.as_deref().and_then(Keyset::decode);
        // Soonest first (rule 14): the showtimes starting within the window
        // are swept in every pass, from the soonest; the cursors only move
        // through the rest, so a large far-future estate never starves them.
        let window = ctx.settings.pass.soonest_window;
        let horizon = (self.opts.showtimes.is_empty() && !window.is_zero())
            .then(|| chrono::Utc::now().naive_utc() + window);
        let window_end = horizon.map(|at| Keyset { at, id: i64::MIN });
        let (mut after, mut reached_end) = match window_end {
            None => match self.segment(cursor, None, &mut scan).await? {
                Some(end) => end,
                None => return Ok(()),
            },
            Some(window_end) => {
                // A window larger than one run can scan goes on from the
                // cursor, so that its later showtimes get their turn too.
                let near_from = cursor.filter(|c| *c < window_end);
                let near_end = Some(PageEnd::Before(window_end.at));
                match self.segment(near_from, near_end, &mut scan).await? {
                    None => return Ok(()),
                    Some((after, false)) => (after, false),
                    Some((near_after, true)) => {
                        let from = cursor.filter(|c| *c > window_end).unwrap_or(window_end);
                        match self.segment(Some(from), None, &mut scan).await? {
                            Some((after, reached)) => (after.or(near_after), reached),
                            None => return Ok(()),
                        }
                    }
                }
            }
        };
        // What this sweep leaves unread, when it stopped short: after where
        // it stopped, up to the estate's end or, on a ring, up to where it
        // began.
        let mut unread_end = None;
        // The ring: a pass on a schedule that reached the estate's end
        // before its deadline goes on from the start, back to where it
        // began, so only its deadline (or the scan limit) stops it: a pass
        // that cannot cover the estate reads at its full pace, and one that
        // can reads each showtime once (rule 14). `once`, a check, a run
        // with no deadline and jobs sweeping apart end at the estate's end.
        let mut ring_closed_at = None;
        if reached_end
            && self.ring
            && self.opts.deadline.is_some()
            && self.opts.showtimes.is_empty()
            && let Some(began) = cursor
        {
            // Before where it began: the estate's start, or past the soonest
            // window (read already) when the sweep began beyond it.
            let from = window_end.filter(|w| *w <= began);
            let back = Some(PageEnd::Through(began));
            match self.segment(from, back, &mut scan).await? {
                None => return Ok(()),
                Some((_, true)) => ring_closed_at = Some(began),
                Some((stopped, false)) => {
                    (after, reached_end) = (stopped, false);
                    unread_end = back;
                }
            }
        }
        self.progress.finish();
        if let Some(e) = scan.last_failure
            && scan.chunks_ok == 0
        {
            for j in &mut self.jobs {
                j.report.fatal = Some(format!("every chunk failed; last: {e}"));
                j.report.nothing_completed = true;
            }
        }
        if !reached_end && (after.is_some() || unread_end.is_some()) {
            let unscanned = ctx
                .retry("count backlog", || {
                    ctx.mysql.count_on_sale_between(
                        after,
                        unread_end,
                        ctx.scope(&self.opts.showtimes),
                    )
                })
                .await?;
            for j in &mut self.jobs {
                j.report.backlog += unscanned;
                j.report.cut_short = scan.cut_short && unscanned > 0;
            }
            // Stopped at the scan limit exactly where the estate ends: the
            // next run starts over instead of scanning nothing.
            reached_end = unscanned == 0 && unread_end.is_none();
        }
        let mut replaced_cursors = Vec::new();
        if self.opts.showtimes.is_empty() && !self.opts.dry_run && !self.opts.fenced_out() {
            for j in &self.jobs {
                // Round the ring, the next pass begins where this one did,
                // so that each showtime's reads stay a pass interval apart.
                let next = match j.resume {
                    Some(at) => at,
                    None if ring_closed_at.is_some() => ring_closed_at,
                    None if reached_end => None,
                    None => after,
                };
                let next = next.map(|k| k.encode());
                let key = self.cursor_key(j.kind);
                let moved = ctx
                    .retry("write cursor", || {
                        ctx.redis
                            .set_cursor(&key, cursor_seen.as_deref(), next.as_deref())
                    })
                    .await?;
                match moved {
                    CursorMove::Moved => {}
                    CursorMove::Raced => tracing::debug!(
                        kind = j.kind.label(),
                        "cursor moved by another instance; left as is"
                    ),
                    CursorMove::Replaced => replaced_cursors.push((j.kind, key)),
                }
            }
        }
        for (kind, key) in replaced_cursors {
            self.own_key(Some(kind), &key, "cursor", "replaced");
        }
        Ok(())
    }

    fn cursor_key(&self, kind: Kind) -> String {
        cursor_key(self.ctx, kind)
    }

    /// Sweeps one segment: chunk by chunk from `from` (exclusive) to the end
    /// of the estate, or to `end`, within what is left of the scan limit. Returns where it stopped and
    /// whether it reached the end, or None when the run was stopped
    /// (shutdown, lost pass lease).
    async fn segment(
        &mut self,
        from: Option<Keyset>,
        end: Option<PageEnd>,
        scan: &mut Scan,
    ) -> Result<Option<(Option<Keyset>, bool)>, Error> {
        let ctx = self.ctx;
        // Paced, a page holds at most a quarter of a second of reads, so
        // that the deadline and the stop are looked at that often.
        let chunk = match &self.opts.pacer {
            Some(p) => ctx
                .settings
                .reconcile
                .scan_chunk
                .min((p.rate() as usize / 4).max(p.batch())),
            None => ctx.settings.reconcile.scan_chunk,
        };
        let mut after = from;
        // While one chunk is planned and repaired, the next one is read: the
        // servers work on chunk k + 1 while this process works on chunk k.
        let what = self.what_to_read();
        let mut prefetched: Option<Fetched> = None;
        loop {
            if let Some(why) = self.stopped() {
                for j in &mut self.jobs {
                    j.report.fatal = Some(why.into());
                }
                return Ok(None);
            }
            if self
                .opts
                .deadline
                .is_some_and(|d| tokio::time::Instant::now() >= d)
            {
                scan.cut_short = true;
                return Ok(Some((after, false)));
            }
            self.tell_pacer_the_need(scan);
            let want = chunk.min(scan.limit.saturating_sub(scan.scanned));
            let mut fetched = match prefetched.take() {
                Some(f) => f,
                None => match fetch(ctx, self.opts, what, after, end, want).await? {
                    Some(f) => f,
                    None => return Ok(Some((after, false))),
                },
            };
            let (page, want, read) = (&fetched.page, fetched.want, fetched.read);
            let page_start = after;
            after = fetched.last.or(after);
            scan.scanned += read;
            let end_of_estate = read < want;
            let page_ids: Vec<ShowtimeId> = page.iter().map(|s| s.id).collect();
            let had_budget: Vec<bool> = self.jobs.iter().map(|j| j.budget > 0).collect();
            for j in &mut self.jobs {
                j.report.scanned += read as u64;
            }
            // Rule 16: a showtime whose row does not decode is one row.
            let unknown = std::mem::take(&mut fetched.unknown);
            self.unknown(&unknown);
            let next_want = if end_of_estate {
                0
            } else {
                chunk.min(scan.limit.saturating_sub(scan.scanned))
            };
            let next = fetch(ctx, self.opts, what, after, end, next_want);
            // Unpaced, the next chunk is read while this one is planned and
            // repaired. Paced, one thing at a time: the servers and this
            // process never all want the CPU at once, which live holds feel.
            let (done, next) = if self.opts.pacer.is_some() {
                let done = self.chunk(fetched).await;
                (done, next.await)
            } else {
                tokio::join!(self.chunk(fetched), next)
            };
            match done {
                // An empty page (a segment's end) checked nothing.
                Ok(()) if page_ids.is_empty() => {}
                Ok(()) => scan.chunks_ok += 1,
                Err(e) => {
                    // Quarantine the chunk for this run: counted, reported, skipped.
                    tracing::warn!(error = %e, first = page_ids.first(), "chunk failed; skipped for this run");
                    for j in &mut self.jobs {
                        j.report.quarantine(&e, page_ids.iter().copied());
                    }
                    scan.last_failure = Some(e.to_string());
                }
            }
            self.progress
                .tick(scan.scanned as u64, scan.total, self.repaired());
            for (j, had) in self.jobs.iter_mut().zip(had_budget) {
                if had && j.budget == 0 && j.resume.is_none() {
                    j.resume = Some(page_start);
                }
            }
            if end_of_estate {
                return Ok(Some((after, true)));
            }
            match next? {
                Some(f) => prefetched = Some(f),
                None => return Ok(Some((after, false))),
            }
        }
    }

    /// Tells the pacer what is left of the estate and the time left for it
    /// (to the deadline, or outside the schedule, one interval of the
    /// cadence), again every chunk, so a pass that falls behind asks for
    /// more.
    fn tell_pacer_the_need(&self, scan: &Scan) {
        let (Some(pacer), Some(deadline), Some(estate)) =
            (&self.opts.pacer, self.opts.pace_by, scan.estate)
        else {
            return;
        };
        let left = estate.saturating_sub(scan.scanned as u64);
        pacer.need_to_read(
            left,
            deadline.saturating_duration_since(tokio::time::Instant::now()),
        );
    }

    /// Why the sweep must stop now, if it must.
    fn stopped(&self) -> Option<&'static str> {
        if self.opts.fenced_out() {
            Some("pass lease lost to another reconciler; stopped without writing more")
        } else if self.opts.stop.is_cancelled() {
            Some("interrupted by shutdown, or by a new pass after Redis lost its data")
        } else {
            None
        }
    }
}
