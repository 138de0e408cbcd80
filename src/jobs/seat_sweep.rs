//! The four seat-map jobs (`paid-seats`, `missing-hashes`, `orphan-locks`,
//! `sold-orphans`): sweep ON_SALE showtimes soonest-first in chunks, plan
//! each with the pure planner, and repair the jobs' drift under the
//! per-showtime mutex.
//!
//! Several seat jobs run together (as `once` does) share one sweep: each hash
//! is read once, planned once, locked once, and all of a showtime's repairs
//! go in one script call; each job keeps its own budget, report and audit.
//!
//! Per chunk: 1 SQL page + 1 SQL template read (new halls only) + 1 SQL
//! occupancy read + 1 Redis pipeline of HGETALLs; then, only where there is
//! something to repair, 1 pipeline of leases, 1 SQL re-check, 1 pipeline of
//! repair scripts and 1 pipeline of releases. The next chunk's page, hashes
//! and occupancy are read while the current chunk is planned and repaired.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use crate::error::Error;
use crate::lease::RunLeases;
use crate::model::{FixAction, SeatRepair, SeatState};
use crate::model::{Kind, SeatNo, ShowtimeId, Template};
use crate::pace::{Pacer, Store};
use crate::plan::{self, HashObservation, ShowtimeInput};
use crate::store::mysql::{FixRecord, Keyset, OccupancyRead, ShowtimeRow};
use crate::store::redis::{
    CursorMove, Fenced, HashRead, Replied, SeatBatch, ShowtimeRead, SuspectOp,
};

use super::RunOptions;
use super::audit::AuditLog;
use super::progress::Progress;
use super::report::JobReport;
use super::strict::{self, UnknownRows};
use crate::context::Context;

/// Most hall templates kept between chunks; cleared when exceeded.
const TEMPLATE_CACHE_HALLS: usize = 1024;

/// Most showtimes outside the contract reported per sweep.
const UNKNOWN_SHOWTIMES_LISTED: usize = 100;

/// A seat repair and, for orphans, since when the seat has been a suspect.
struct Planned {
    repair: SeatRepair,
    suspect_since_ms: Option<i64>,
}

/// What a chunk found to do, across the sweep's jobs.
#[derive(Default)]
struct ChunkWork {
    rebuilds: Vec<ShowtimeId>,
    seats: Vec<(ShowtimeId, Vec<Planned>)>,
}

/// One job's share of a sweep.
struct Job<'a> {
    kind: Kind,
    report: JobReport,
    /// Repairs this run may still apply.
    budget: usize,
    /// Where this job's next run resumes when this one ran out of budget.
    resume: Option<Option<Keyset>>,
    audit: AuditLog<'a>,
}

impl Job<'_> {
    /// Reserves up to `n` repairs from the run's budget; the rest is backlog.
    fn take(&mut self, n: usize) -> usize {
        let granted = n.min(self.budget);
        self.budget -= granted;
        self.report.backlog += (n - granted) as u64;
        granted
    }
}

/// Runs the seat jobs `kinds` (one sweep when their cursors agree) and
/// returns each job's report with its audit log, in the order given.
pub async fn run<'a>(
    ctx: &'a Context,
    kinds: &[Kind],
    opts: &RunOptions,
    audits: Vec<AuditLog<'a>>,
) -> Vec<(JobReport, AuditLog<'a>)> {
    let Some(&first) = kinds.first() else {
        return Vec::new();
    };
    let reporter = opts.bad_data_reporter.unwrap_or(first);
    run_with_reporter(ctx, kinds, opts, audits, reporter).await
}

/// As `run`; bad data is counted and logged by `reporter` alone, so that one
/// bad value is one `invalid_data` error and one log line, whichever jobs
/// saw it.
async fn run_with_reporter<'a>(
    ctx: &'a Context,
    kinds: &[Kind],
    opts: &RunOptions,
    audits: Vec<AuditLog<'a>>,
    reporter: Kind,
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
    // Jobs whose cursors went apart (different scan limits, a failed run)
    // sweep one by one, each from its own place.
    let shared = cursors.windows(2).all(|w| match (&w[0], &w[1]) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    });
    if kinds.len() > 1 && !shared {
        let mut out = Vec::with_capacity(kinds.len());
        for (kind, audit) in kinds.iter().zip(audits) {
            out.extend(
                Box::pin(run_with_reporter(
                    ctx,
                    &[*kind],
                    opts,
                    vec![audit],
                    reporter,
                ))
                .await,
            );
        }
        return out;
    }
    let jobs = kinds
        .iter()
        .zip(audits)
        .map(|(&kind, audit)| Job {
            kind,
            report: JobReport::new(kind),
            budget: ctx.settings.job(kind).batch_size,
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
        jobs,
        leases: RunLeases::new(
            ctx.redis.clone(),
            ctx.settings.reconcile.lock_ttl,
            ctx.leases.clone(),
        ),
        templates: HashMap::new(),
        progress: Progress::new(opts.progress, label, "showtimes"),
        bad_data: BadDataLog::new(reporter),
        own_keys: OwnKeys::default(),
        unknown_rows: UnknownRows::new(opts.reported.clone()),
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
        Ok(cursor) => sweep.sweep(cursor).await,
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
    chunks_ok: u64,
    last_failure: Option<String>,
    /// Stopped at the deadline.
    cut_short: bool,
}

/// A job's cursor key in this context's shard.
fn cursor_key(ctx: &Context, kind: Kind) -> String {
    ctx.redis.keys.shard_cursor(kind.label(), ctx.mysql.shard())
}

struct Sweep<'a, 'o> {
    ctx: &'a Context,
    opts: &'o RunOptions,
    jobs: Vec<Job<'a>>,
    leases: RunLeases,
    templates: HashMap<i64, Arc<Template>>,
    progress: Progress,
    bad_data: BadDataLog,
    own_keys: OwnKeys,
    unknown_rows: UnknownRows,
}

impl<'a> Sweep<'a, '_> {
    /// Rows outside the contract (rules 12, 15): counted by the job that
    /// reports bad data, once per run.
    fn unknown(&mut self, rows: &[crate::contract::UnknownRow]) {
        if rows.is_empty() {
            return;
        }
        let reporter = self.bad_data.reporter;
        let kind = if self.jobs.iter().any(|j| j.kind == reporter) {
            reporter
        } else {
            self.jobs[0].kind
        };
        let idx = self.jobs.iter().position(|j| j.kind == kind).unwrap_or(0);
        self.unknown_rows.report(&mut self.jobs[idx].report, rows);
    }

    /// Rule 13: one of our own keys (suspect, done, cursor) found in the
    /// wrong shape. It holds only derived state, so it is replaced (by the
    /// script that found it, or by the next write of this run), and never
    /// stops a repair or the run. Reported once per key per run: a WARN
    /// naming it (at most `OwnKeys::MAX_LINES` lines a run) and one
    /// `invalid_data` error of `owner`, else of the job that reports bad
    /// data (or this sweep's first job).
    fn own_key(&mut self, owner: Option<Kind>, key: &str, what: &'static str, action: &str) {
        if !self.own_keys.seen.insert(key.to_string()) {
            return;
        }
        let reporter = self.bad_data.reporter;
        let owner = owner
            .filter(|k| self.jobs.iter().any(|j| j.kind == *k))
            .or_else(|| {
                self.jobs
                    .iter()
                    .any(|j| j.kind == reporter)
                    .then_some(reporter)
            })
            .unwrap_or(self.jobs[0].kind);
        self.job(owner).report.invalid();
        if self.own_keys.seen.len() <= OwnKeys::MAX_LINES {
            tracing::warn!(
                key,
                what,
                action,
                "reconciler key of the wrong type (rule 13)"
            );
        }
    }

    /// Reports the own keys a script replaced.
    fn replaced(&mut self, keys: &[String]) {
        for key in keys {
            let what = if key.contains("reconcile:suspect:") {
                "suspect records"
            } else {
                "done records"
            };
            self.own_key(None, key, what, "replaced");
        }
    }

    #[allow(
        clippy::expect_used,
        reason = "repairs are planned only for the sweep's jobs"
    )]
    fn job(&mut self, kind: Kind) -> &mut Job<'a> {
        self.jobs
            .iter_mut()
            .find(|j| j.kind == kind)
            .expect("repairs only of the sweep's jobs")
    }

    fn fixed(&self) -> u64 {
        self.jobs.iter().map(|j| j.report.fixed).sum()
    }

    async fn sweep(&mut self, cursor_seen: Option<String>) -> Result<(), Error> {
        let ctx = self.ctx;
        // A shared sweep stops at the smallest scan limit of its jobs.
        let scan_limit = self
            .jobs
            .iter()
            .map(|j| ctx.settings.job(j.kind).scan_limit)
            .min()
            .unwrap_or(0);
        // The total is only worth a COUNT query when someone watches.
        let total = if self.opts.progress {
            let n = ctx
                .retry("count showtimes", || {
                    ctx.mysql.count_on_sale(&self.opts.showtimes)
                })
                .await?;
            Some(n.min(scan_limit as u64))
        } else {
            None
        };
        let mut scan = Scan {
            limit: scan_limit,
            total,
            ..Scan::default()
        };
        // Showtimes the contract does not explain are on no page: say so.
        let unknown = ctx
            .retry("read unknown showtimes", || {
                ctx.mysql
                    .unknown_showtimes(&self.opts.showtimes, UNKNOWN_SHOWTIMES_LISTED)
            })
            .await?;
        self.unknown(&unknown);
        let cursor = cursor_seen.as_deref().and_then(Keyset::decode);
        // Soonest first (rule 14): the showtimes starting within the window
        // are swept in every pass, from the soonest; the cursors only move
        // through the rest, so a large far-future estate never starves them.
        let window = ctx.settings.sweep.soonest_window;
        let horizon = (self.opts.showtimes.is_empty() && !window.is_zero())
            .then(|| chrono::Utc::now().naive_utc() + window);
        let (after, mut reached_end) = match horizon {
            None => match self.scan(cursor, None, &mut scan).await? {
                Some(end) => end,
                None => return Ok(()),
            },
            Some(horizon) => {
                let window_end = Keyset {
                    at: horizon,
                    id: i64::MIN,
                };
                // A window larger than one run can scan goes on from the
                // cursor, so that its later showtimes get their turn too.
                let near_from = cursor.filter(|c| *c < window_end);
                match self.scan(near_from, Some(horizon), &mut scan).await? {
                    None => return Ok(()),
                    Some((after, false)) => (after, false),
                    Some((near_after, true)) => {
                        let from = cursor.filter(|c| *c > window_end).unwrap_or(window_end);
                        match self.scan(Some(from), None, &mut scan).await? {
                            Some((after, reached)) => (after.or(near_after), reached),
                            None => return Ok(()),
                        }
                    }
                }
            }
        };
        self.progress.finish();
        if let Some(e) = scan.last_failure
            && scan.chunks_ok == 0
        {
            for j in &mut self.jobs {
                j.report.fatal = Some(format!("every chunk failed; last: {e}"));
                j.report.nothing_completed = true;
            }
        }
        if !reached_end && let Some(after) = after {
            let unscanned = ctx
                .retry("count backlog", || {
                    ctx.mysql.count_on_sale_after(after, &self.opts.showtimes)
                })
                .await?;
            for j in &mut self.jobs {
                j.report.backlog += unscanned;
                j.report.cut_short = scan.cut_short && unscanned > 0;
            }
            // Stopped at the scan limit exactly where the estate ends: the
            // next run starts over instead of scanning nothing.
            reached_end = unscanned == 0;
        }
        let mut replaced_cursors = Vec::new();
        if self.opts.showtimes.is_empty() && !self.opts.dry_run && !self.opts.fenced_out() {
            for j in &self.jobs {
                let next = match j.resume {
                    Some(at) => at,
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

    /// Scans from `from` (exclusive) to the end of the estate, or to the
    /// showtimes starting at `before`, within what is left of the scan
    /// limit. Returns where it stopped and whether it reached the end, or
    /// None when the run was stopped (shutdown, lost pass lease).
    async fn scan(
        &mut self,
        from: Option<Keyset>,
        before: Option<chrono::NaiveDateTime>,
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
            let want = chunk.min(scan.limit - scan.scanned);
            let fetched = match prefetched.take() {
                Some(f) => f,
                None => match fetch(ctx, self.opts, what, after, before, want).await? {
                    Some(f) => f,
                    None => return Ok(Some((after, false))),
                },
            };
            let (page, want) = (&fetched.page, fetched.want);
            let page_start = after;
            if let Some(last) = page.last() {
                after = Some(Keyset {
                    at: last.starts_at,
                    id: last.id,
                });
            }
            scan.scanned += page.len();
            let end_of_estate = page.len() < want;
            let page_ids: Vec<ShowtimeId> = page.iter().map(|s| s.id).collect();
            let had_budget: Vec<bool> = self.jobs.iter().map(|j| j.budget > 0).collect();
            for j in &mut self.jobs {
                j.report.scanned += page.len() as u64;
            }
            let next_want = if end_of_estate {
                0
            } else {
                chunk.min(scan.limit - scan.scanned)
            };
            let next = fetch(ctx, self.opts, what, after, before, next_want);
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
                .tick(scan.scanned as u64, scan.total, self.fixed());
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

    /// Why the sweep must stop now, if it must.
    fn stopped(&self) -> Option<&'static str> {
        if self.opts.fenced_out() {
            Some("pass lease lost to another reconciler; stopped without writing more")
        } else if self.opts.stop.is_cancelled() {
            Some("interrupted by shutdown")
        } else {
            None
        }
    }

    async fn load_templates(&mut self, page: &[ShowtimeRow]) -> Result<(), Error> {
        let mut missing: Vec<i64> = page
            .iter()
            .map(|s| s.hall_id)
            .filter(|h| !self.templates.contains_key(h))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        if self.templates.len() + missing.len() > TEMPLATE_CACHE_HALLS {
            self.templates.clear();
        }
        let ctx = self.ctx;
        let (loaded, unknown) = ctx
            .retry("read templates", || ctx.mysql.templates(&missing))
            .await?;
        self.unknown(&unknown);
        self.templates.extend(
            loaded
                .into_iter()
                .map(|(h, seats)| (h, Arc::new(Template::new(seats)))),
        );
        Ok(())
    }

    fn what_to_read(&self) -> WhatToRead {
        WhatToRead {
            suspects: self.ctx.settings.reconcile.orphan_grace.as_millis() > 0
                && self.jobs.iter().any(|j| j.kind.needs_grace()),
            // missing-hashes alone needs occupancy only where a hash is missing.
            occupancy_where_missing_only: self.jobs.iter().all(|j| j.kind == Kind::MissingHashes),
        }
    }

    /// Plans one chunk and repairs what its jobs may repair.
    async fn chunk(&mut self, fetched: Fetched) -> Result<(), Error> {
        let Fetched { page, reads, .. } = fetched;
        if page.is_empty() {
            return Ok(());
        }
        let ctx = self.ctx;
        let (now_ms, reads, occupancy) = reads?;
        self.load_templates(&page).await?;
        let occupancy = strict::name_seats(ctx, &page, &self.templates, occupancy).await?;
        self.unknown(&occupancy.unknown);
        let occupancy = occupancy.occupancy;
        let grace_ms = ctx.settings.reconcile.orphan_grace.as_millis() as i64;
        let with_suspects = self.what_to_read().suspects;
        let mut work = ChunkWork::default();
        let mut suspect_ops: Vec<(ShowtimeId, Vec<SuspectOp>)> = Vec::new();
        for (showtime, read) in page.iter().zip(&reads) {
            let template = self
                .templates
                .get(&showtime.hall_id)
                .cloned()
                .unwrap_or_default();
            let plan = plan::plan_showtime(ShowtimeInput {
                template: &template,
                occupancy: occupancy.of(showtime.id),
                hash: observation(read),
            });
            let key = ctx.redis.keys.seat(showtime.id);
            if read.suspects_wrong_type {
                // Read as no records: every seat's grace clock starts now,
                // the safe direction (a release can only come later).
                let action = if self.opts.dry_run {
                    "read as no records; left as is (dry run)"
                } else {
                    "read as no records; replaced"
                };
                self.own_key(
                    None,
                    &ctx.redis.keys.suspect(showtime.id),
                    "suspect records",
                    action,
                );
            }
            if !plan.anomalies.is_empty() {
                self.bad_data.showtime(&key, showtime.id, &plan.anomalies);
            }
            let mut planned = Vec::new();
            let mut ops = Vec::new();
            let reporter = self.bad_data.reporter;
            // A seat key of the wrong type is one problem per run, whichever
            // job meets it first (expired-orders may have).
            let counted = plan
                .anomalies
                .iter()
                .filter(|a| {
                    **a != plan::Anomaly::WrongType
                        || self.opts.reported.first(&wrong_type_problem(&key))
                })
                .count();
            for job in &mut self.jobs {
                if job.kind == reporter {
                    (0..counted).for_each(|_| job.report.invalid());
                }
                if job.kind == Kind::MissingHashes {
                    if plan.rebuild.is_some() {
                        job.report.drift += 1;
                        job.report.example(|| format!("{key} missing"));
                        if job.take(1) == 1 {
                            work.rebuilds.push(showtime.id);
                        }
                    }
                    continue;
                }
                let candidates: Vec<SeatRepair> = plan.repairs_of(job.kind).cloned().collect();
                job.report.drift += candidates.len() as u64;
                for c in &candidates {
                    job.report.example(|| describe(&key, c));
                }
                let ready = if with_suspects && job.kind.needs_grace() {
                    let g =
                        plan::apply_grace(job.kind, candidates, &read.suspects, now_ms, grace_ms);
                    job.report.deferred += g.deferred.len() as u64;
                    ops.extend(suspect_changes(job.kind, &g, read));
                    g.ready
                } else {
                    candidates
                };
                let n = job.take(ready.len());
                planned.extend(ready.into_iter().take(n).map(|repair| {
                    Planned {
                        suspect_since_ms: read
                            .suspects
                            .get(&repair.seat)
                            .and_then(|raw| plan::Suspect::decode(raw))
                            .map(|s| s.first_seen_ms),
                        repair,
                    }
                }));
            }
            // A wrong-typed suspect key is replaced even with nothing to record.
            if !ops.is_empty() || read.suspects_wrong_type {
                suspect_ops.push((showtime.id, ops));
            }
            if !planned.is_empty() {
                work.seats.push((showtime.id, planned));
            }
        }
        if self.opts.dry_run || self.opts.fenced_out() {
            return Ok(());
        }
        let ttl_ms = self.suspect_ttl_ms();
        for ops in self.paced_parts(suspect_ops) {
            self.pause(ops.len()).await;
            let replaced = ctx
                .retry("write suspects", || ctx.redis.update_suspects(&ops, ttl_ms))
                .await?;
            self.replaced(&replaced);
        }
        if work.rebuilds.is_empty() && work.seats.is_empty() {
            return Ok(());
        }
        // Paced, the repairs go a few showtimes per round trip too.
        let mut result = Ok(());
        let rebuilds = self.paced_parts(work.rebuilds);
        let seats = self.paced_parts(work.seats);
        let parts = rebuilds
            .into_iter()
            .map(|r| ChunkWork {
                rebuilds: r,
                seats: Vec::new(),
            })
            .chain(seats.into_iter().map(|s| ChunkWork {
                rebuilds: Vec::new(),
                seats: s,
            }));
        for part in parts {
            self.pause(part.rebuilds.len() + part.seats.len()).await;
            result = self.apply(part, now_ms).await;
            if result.is_err() {
                break;
            }
        }
        let held = self.leases.held();
        let released = self.leases.release(&held).await;
        result?;
        released
    }

    /// Waits for the pace's room for `items` more (nothing when unpaced).
    async fn pause(&self, items: usize) {
        if let Some(p) = &self.opts.pacer {
            tokio::time::sleep(p.reserve(items, Instant::now())).await;
        }
    }

    /// `items` in parts of the pace's batch (one part when unpaced or
    /// empty: no part). The caller paces the parts.
    fn paced_parts<T>(&self, mut items: Vec<T>) -> Vec<Vec<T>> {
        let Some(p) = &self.opts.pacer else {
            return if items.is_empty() {
                Vec::new()
            } else {
                vec![items]
            };
        };
        let mut parts = Vec::new();
        while !items.is_empty() {
            let rest = items.split_off(items.len().min(p.batch()));
            parts.push(std::mem::replace(&mut items, rest));
        }
        parts
    }

    /// Suspect records outlive several grace periods, and expire on their own
    /// when no run touches the showtime any more.
    fn suspect_ttl_ms(&self) -> i64 {
        let grace_ms = self.ctx.settings.reconcile.orphan_grace.as_millis() as i64;
        (grace_ms * 4).max(600_000)
    }

    async fn apply(&mut self, mut work: ChunkWork, now_ms: i64) -> Result<(), Error> {
        let ctx = self.ctx;
        let mut ids: Vec<ShowtimeId> = work.rebuilds.clone();
        ids.extend(work.seats.iter().map(|(id, _)| *id));
        let acquired = ctx
            .retry("acquire leases", || self.leases.acquire(&ids))
            .await?;
        for id in &acquired.replaced {
            self.own_key(None, &ctx.redis.keys.lease(*id), "lease", "replaced");
        }
        for id in &acquired.busy {
            let stuck = acquired.stuck.contains(id);
            if stuck {
                log_stuck_lease(&ctx.redis.keys.lease(*id), *id);
            } else {
                tracing::info!(
                    showtime_id = id,
                    "showtime busy (leased by another reconciler); skipped this run"
                );
            }
            let mut per_job: HashMap<Kind, u64> = HashMap::new();
            if work.rebuilds.contains(id) {
                per_job.insert(Kind::MissingHashes, 1);
            }
            for (_, planned) in work.seats.iter().filter(|(s, _)| s == id) {
                for p in planned {
                    *per_job.entry(p.repair.kind).or_default() += 1;
                }
            }
            for (kind, n) in per_job {
                let job = self.job(kind);
                job.report.skipped_busy += 1;
                job.report.stuck_leases += stuck as u64;
                job.report.backlog += n;
            }
        }
        work.rebuilds.retain(|id| !acquired.busy.contains(id));
        work.seats.retain(|(id, _)| !acquired.busy.contains(id));
        if !work.rebuilds.is_empty() {
            self.rebuild(std::mem::take(&mut work.rebuilds), now_ms)
                .await?;
        }
        if work.seats.is_empty() {
            return Ok(());
        }
        self.repair_seats(work.seats, now_ms).await
    }

    async fn repair_seats(
        &mut self,
        work: Vec<(ShowtimeId, Vec<Planned>)>,
        now_ms: i64,
    ) -> Result<(), Error> {
        let ctx = self.ctx;
        race_window!(crate::race_window::SEAT_BEFORE_RECHECK);
        // Rules 4 and 15: re-read exactly these seats right before writing,
        // asked in MySQL's own terms (a lowering write also in the other
        // showtimes its showtime's orders may hold rows in).
        let seats: Vec<(ShowtimeId, SeatNo, bool)> = work
            .iter()
            .flat_map(|(id, planned)| {
                planned.iter().map(|p| {
                    let r = &p.repair;
                    (*id, r.seat.clone(), SeatState::lowers(r.observed, r.target))
                })
            })
            .collect();
        let (fresh, unknown) = ctx
            .retry("re-check seats", || ctx.mysql.seat_history(&seats))
            .await?;
        self.unknown(&unknown);
        let mut fresh = fresh.into_iter();
        let mut batches: Vec<SeatBatch> = Vec::new();
        let mut restart: Vec<(ShowtimeId, Vec<SuspectOp>)> = Vec::new();
        // When each seat's drift was first seen: its suspect record, else
        // this scan (drift age, first sighting → repair).
        let mut first_seen: HashMap<(ShowtimeId, SeatNo), i64> = HashMap::new();
        for (id, planned) in work {
            let mut keep = Vec::new();
            let mut ops = Vec::new();
            for p in planned {
                let seat = &p.repair.seat;
                let kind = p.repair.kind.label();
                let history = fresh.next().unwrap_or_default();
                if !plan::still_valid(&p.repair, &history.truth) {
                    tracing::info!(kind, showtime_id = id, seat = %seat, "seat changed in MySQL since the scan; not repaired");
                } else if let Some(since) = p.suspect_since_ms
                    && !plan::orphaned_throughout(since, history.last_activity_ms)
                {
                    // An order came or went on this seat since it was first
                    // seen orphaned: the orphanhood was not continuous, so
                    // the grace period starts over.
                    tracing::info!(kind, showtime_id = id, seat = %seat, "order activity on the seat since it was first seen orphaned; grace period restarts");
                    self.job(p.repair.kind).report.deferred += 1;
                    let state = p.repair.observed.unwrap_or(p.repair.target);
                    ops.push(SuspectOp::Clear {
                        seat: seat.clone(),
                        state: Some(state),
                    });
                    ops.push(SuspectOp::Record {
                        seat: seat.clone(),
                        encoded: plan::Suspect {
                            state,
                            first_seen_ms: now_ms,
                        }
                        .encode(),
                    });
                } else {
                    first_seen.insert(
                        (id, p.repair.seat.clone()),
                        p.suspect_since_ms.unwrap_or(now_ms),
                    );
                    keep.push(p.repair);
                }
            }
            if !ops.is_empty() {
                restart.push((id, ops));
            }
            if !keep.is_empty() {
                batches.push(SeatBatch::new(id, keep));
            }
        }
        if !restart.is_empty() {
            let ttl_ms = self.suspect_ttl_ms();
            let replaced = ctx
                .retry("restart suspects", || {
                    ctx.redis.update_suspects(&restart, ttl_ms)
                })
                .await?;
            self.replaced(&replaced);
        }
        let ids: Vec<ShowtimeId> = batches.iter().map(|b| b.showtime).collect();
        let lost = ctx
            .retry("renew leases", || self.leases.renew_due(&ids))
            .await?;
        for batch in batches.iter().filter(|b| lost.contains(&b.showtime)) {
            for kind in kinds_in(batch) {
                self.job(kind)
                    .report
                    .error(&Error::LeaseLost(batch.showtime));
            }
        }
        batches.retain(|b| !lost.contains(&b.showtime));
        if batches.is_empty() {
            return Ok(());
        }
        race_window!(crate::race_window::SEAT_BEFORE_REPAIR);
        let token = self.leases.token().to_string();
        let results = ctx
            .retry("repair seats", || ctx.redis.repair_seats(&token, &batches))
            .await?;
        for (batch, Replied { reply, replaced }) in batches.iter().zip(results) {
            let id = batch.showtime;
            self.replaced(&replaced);
            match reply {
                Ok(Fenced::Done(applied)) => {
                    for (r, ok) in batch.repairs.iter().zip(applied) {
                        if ok {
                            let job = self.job(r.kind);
                            job.report.fixed += 1;
                            job.report.observe_drift_since(
                                first_seen
                                    .get(&(id, r.seat.clone()))
                                    .copied()
                                    .unwrap_or(now_ms),
                            );
                            job.audit
                                .seat(id, &r.seat, None, r.observed, r.target)
                                .await;
                        } else {
                            tracing::info!(kind = r.kind.label(), showtime_id = id, seat = %r.seat, "seat changed in Redis since the scan; left alone");
                        }
                    }
                }
                Ok(Fenced::LeaseLost) => {
                    tracing::warn!(
                        showtime_id = id,
                        "lease lost before repair; nothing written"
                    );
                    for kind in kinds_in(batch) {
                        self.job(kind).report.error(&Error::LeaseLost(id));
                    }
                }
                Ok(Fenced::SeatKeyWrongType) => {
                    // Seatflow's key changed type since the scan (rule 13):
                    // nothing written; the next scan reports it as bad data.
                    tracing::info!(
                        showtime_id = id,
                        "seat key no longer a hash; nothing written"
                    );
                }
                Err(e) => {
                    tracing::warn!(showtime_id = id, error = %e, "repair failed; showtime quarantined for this run");
                    for kind in kinds_in(batch) {
                        self.job(kind).report.quarantine(&e, [id]);
                    }
                }
            }
        }
        Ok(())
    }

    /// Rebuilds missing hashes from the template and a fresh read of every
    /// template seat, asked in MySQL's own terms (rule 15: a seat that a row
    /// outside the contract may hold gets no field unless a valid
    /// occupancy raises it).
    async fn rebuild(&mut self, ids: Vec<ShowtimeId>, seen_ms: i64) -> Result<(), Error> {
        let ctx = self.ctx;
        let halls: HashMap<ShowtimeId, i64> = ctx
            .retry("read showtimes", || {
                ctx.mysql.on_sale_page(None, None, ids.len(), &ids)
            })
            .await?
            .into_iter()
            .map(|s| (s.id, s.hall_id))
            .collect();
        let token = self.leases.token().to_string();
        for id in ids {
            let Some(template) = halls.get(&id).and_then(|h| self.templates.get(h)).cloned() else {
                tracing::info!(
                    showtime_id = id,
                    "showtime left ON_SALE since the scan; not rebuilt"
                );
                continue;
            };
            let seats: Vec<(ShowtimeId, SeatNo, bool)> = template
                .seats()
                .iter()
                .map(|seat| (id, seat.clone(), true))
                .collect();
            let (fresh, unknown) = ctx
                .retry("re-check seats", || ctx.mysql.seat_history(&seats))
                .await?;
            self.unknown(&unknown);
            let fields: Vec<(SeatNo, SeatState)> = template
                .seats()
                .iter()
                .zip(&fresh)
                .filter(|(_, h)| h.truth.allows(None, h.truth.expected()))
                .map(|(seat, h)| (seat.clone(), h.truth.expected()))
                .collect();
            let one = [id];
            let lost = ctx
                .retry("renew leases", || self.leases.renew_due(&one))
                .await?;
            if !lost.is_empty() {
                self.job(Kind::MissingHashes)
                    .report
                    .error(&Error::LeaseLost(id));
                continue;
            }
            let op_id = uuid::Uuid::new_v4().simple().to_string();
            let result = ctx
                .retry("rebuild hash", || {
                    ctx.redis.rebuild_hash(&token, &op_id, id, &fields)
                })
                .await;
            let result = match result {
                Ok(Replied { reply, replaced }) => {
                    self.replaced(&replaced);
                    Ok(reply)
                }
                Err(e) => Err(e),
            };
            let job = self.job(Kind::MissingHashes);
            match result {
                Ok(Fenced::Done(true)) => {
                    job.report.fixed += 1;
                    job.report.observe_drift_since(seen_ms);
                    job.audit
                        .push(FixRecord {
                            fix_id: uuid::Uuid::new_v4().simple().to_string(),
                            job: Kind::MissingHashes,
                            action: FixAction::HashRebuilt,
                            showtime_id: Some(id),
                            seat_no: None,
                            order_id: None,
                            before: Some("absent".into()),
                            after: Some(format!("{} seats", fields.len())),
                            at: chrono::Utc::now().naive_utc(),
                        })
                        .await;
                }
                Ok(Fenced::Done(false)) => {
                    tracing::info!(showtime_id = id, "hash appeared since the scan; left alone");
                }
                Ok(Fenced::SeatKeyWrongType) => {
                    tracing::info!(
                        showtime_id = id,
                        "a key of another type appeared at the seat hash since the scan; left alone"
                    );
                }
                Ok(Fenced::LeaseLost) => job.report.error(&Error::LeaseLost(id)),
                Err(e) => {
                    tracing::warn!(showtime_id = id, error = %e, "rebuild failed; skipped for this run");
                    job.report.quarantine(&e, [id]);
                }
            }
        }
        Ok(())
    }
}

/// Bad data, logged once per showtime per sweep as one summarised line
/// (count and the first few problems, values cut short), and at most
/// `MAX_LINES` such lines per sweep; the rest is one closing count. Log
/// volume stays bounded whatever the data.
struct BadDataLog {
    /// The one job that counts and logs bad data in this run.
    reporter: Kind,
    logged: usize,
    showtimes: u64,
    problems: u64,
}

impl BadDataLog {
    const MAX_LINES: usize = 20;
    const EXAMPLES: usize = 3;

    fn new(reporter: Kind) -> BadDataLog {
        BadDataLog {
            reporter,
            logged: 0,
            showtimes: 0,
            problems: 0,
        }
    }

    fn showtime(&mut self, key: &str, showtime_id: ShowtimeId, anomalies: &[plan::Anomaly]) {
        self.showtimes += 1;
        self.problems += anomalies.len() as u64;
        if self.logged >= Self::MAX_LINES {
            return;
        }
        self.logged += 1;
        let examples = anomalies
            .iter()
            .take(Self::EXAMPLES)
            .map(plan::Anomaly::describe)
            .collect::<Vec<_>>()
            .join("; ");
        tracing::warn!(
            key,
            showtime_id,
            problems = anomalies.len(),
            examples,
            "invalid data left alone"
        );
    }

    fn summarise(&self) {
        if self.showtimes as usize > self.logged {
            tracing::warn!(
                showtimes = self.showtimes,
                problems = self.problems,
                logged_showtimes = self.logged,
                "invalid data left alone in more showtimes than logged one by one"
            );
        }
    }
}

/// Our own keys found in the wrong shape this run (rule 13), each reported once.
#[derive(Default)]
struct OwnKeys {
    seen: HashSet<String>,
}

impl OwnKeys {
    const MAX_LINES: usize = 20;

    fn summarise(&self) {
        if self.seen.len() > Self::MAX_LINES {
            tracing::warn!(
                keys = self.seen.len(),
                logged = Self::MAX_LINES,
                "reconciler keys of the wrong type: more than logged one by one (rule 13)"
            );
        }
    }
}

/// Rule 13: a lease without expiry that is not ours blocks its showtime for
/// ever. It is reported (WARN naming the key, `stuck_leases`), never deleted
/// or taken over: another reconciler version might own it; an operator decides.
pub(crate) fn log_stuck_lease(key: &str, showtime_id: ShowtimeId) {
    tracing::warn!(
        key,
        showtime_id,
        "lease without expiry held by someone else: showtime skipped until an operator \
         removes it (see the runbook, SeatflowReconcilerStuckLease)"
    );
}

/// What a sweep reads besides the seat hashes.
#[derive(Debug, Clone, Copy)]
struct WhatToRead {
    /// Suspect records (grace-period jobs with a non-zero grace).
    suspects: bool,
    /// Occupancy only of showtimes whose hash is missing (missing-hashes alone).
    occupancy_where_missing_only: bool,
}

/// A page of showtimes and what the stores hold for them; `want` is how many
/// were asked for (fewer means the estate ends here).
struct Fetched {
    page: Vec<ShowtimeRow>,
    want: usize,
    /// Redis time, the hash reads and the occupancy; an error quarantines the chunk.
    reads: Result<(i64, Vec<ShowtimeRead>, OccupancyRead), Error>,
}

/// Reads the next page (`None` when `want` is 0 or the page is empty) and,
/// for a page, its seat hashes and occupancy. A failed page read stops the
/// sweep; failed hash or occupancy reads only quarantine the chunk.
async fn fetch(
    ctx: &Context,
    opts: &RunOptions,
    what: WhatToRead,
    after: Option<Keyset>,
    before: Option<chrono::NaiveDateTime>,
    want: usize,
) -> Result<Option<Fetched>, Error> {
    if want == 0 {
        return Ok(None);
    }
    let page = ctx
        .retry("read showtimes", || {
            ctx.mysql.on_sale_page(after, before, want, &opts.showtimes)
        })
        .await?;
    if page.is_empty() {
        return Ok(Some(Fetched {
            page,
            want,
            reads: Ok((0, Vec::new(), OccupancyRead::default())),
        }));
    }
    let ids: Vec<ShowtimeId> = page.iter().map(|s| s.id).collect();
    let read_hashes = || read_hashes(ctx, opts.pacer.as_deref(), &ids, what.suspects);
    let read_occupancy = |of: Vec<ShowtimeId>| async move {
        let started = Instant::now();
        let read = ctx
            .retry("read occupancy", || ctx.mysql.occupancy(&of))
            .await;
        if let Some(pacer) = &opts.pacer {
            pacer.observe(Store::Mysql, of.len(), started.elapsed());
        }
        read
    };
    let reads = if what.occupancy_where_missing_only {
        async {
            let (now_ms, reads) = read_hashes().await?;
            let missing = page
                .iter()
                .zip(&reads)
                .filter(|(_, r)| r.hash == HashRead::Missing)
                .map(|(s, _)| s.id)
                .collect();
            Ok((now_ms, reads, read_occupancy(missing).await?))
        }
        .await
    } else if opts.pacer.is_some() {
        // Paced: one store after the other (see `scan`).
        match read_hashes().await {
            Ok((now_ms, reads)) => read_occupancy(ids.clone())
                .await
                .map(|o| (now_ms, reads, o)),
            Err(e) => Err(e),
        }
    } else {
        // Both stores at once: the chunk waits for the slower, not the sum.
        let (hashes, occupancy) = tokio::join!(read_hashes(), read_occupancy(ids.clone()));
        hashes.and_then(|(now_ms, reads)| occupancy.map(|o| (now_ms, reads, o)))
    };
    Ok(Some(Fetched { page, want, reads }))
}

/// Reads the seat hashes (and suspect records) of `ids`: in one pipeline,
/// or paced, in small batches spaced out by the pacer, so that Redis is
/// never busy with one of ours for long and live holds barely notice.
async fn read_hashes(
    ctx: &Context,
    pacer: Option<&Pacer>,
    ids: &[ShowtimeId],
    with_suspects: bool,
) -> Result<(i64, Vec<ShowtimeRead>), Error> {
    let Some(pacer) = pacer else {
        return ctx
            .retry("read seat hashes", || {
                ctx.redis.read_showtimes(ids, with_suspects)
            })
            .await;
    };
    let mut first_now_ms = None;
    let mut out = Vec::with_capacity(ids.len());
    for batch in ids.chunks(pacer.batch()) {
        tokio::time::sleep(pacer.reserve(batch.len(), Instant::now())).await;
        let started = Instant::now();
        let (now_ms, reads) = ctx
            .retry("read seat hashes", || {
                ctx.redis.read_showtimes(batch, with_suspects)
            })
            .await?;
        pacer.observe(Store::Redis, batch.len(), started.elapsed());
        // The earliest clock reading: grace periods then count from the
        // earliest possible moment, never longer than they were.
        first_now_ms.get_or_insert(now_ms);
        out.extend(reads);
    }
    Ok((first_now_ms.unwrap_or_default(), out))
}

/// The jobs that own a batch's repairs.
fn kinds_in(batch: &SeatBatch) -> Vec<Kind> {
    let mut kinds: Vec<Kind> = batch.repairs.iter().map(|r| r.kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds
}

/// The problem "seatflow's seat key is not a hash", as a run reports it once.
pub(crate) fn wrong_type_problem(key: &str) -> String {
    format!("seat key of the wrong type {key}")
}

/// `seatflow:seat:{42} A-7: 1 -> 0`, for the report's examples.
fn describe(key: &str, c: &SeatRepair) -> String {
    format!(
        "{key} {}: {} -> {}",
        c.seat,
        c.observed.map(|s| s.as_redis()).unwrap_or("absent"),
        c.target.as_redis()
    )
}

/// The suspect records one grace decision writes and clears.
fn suspect_changes(kind: Kind, g: &plan::GracePlan, read: &ShowtimeRead) -> Vec<SuspectOp> {
    let watched = plan::suspect_state(kind);
    g.record
        .iter()
        .map(|(seat, s)| SuspectOp::Record {
            seat: seat.clone(),
            encoded: s.encode(),
        })
        .chain(g.clear.iter().map(|seat| SuspectOp::Clear {
            seat: seat.clone(),
            state: plan::Suspect::decode(&read.suspects[seat]).and(watched),
        }))
        .collect()
}

fn observation(read: &ShowtimeRead) -> HashObservation<'_> {
    match &read.hash {
        HashRead::Missing => HashObservation::Missing,
        HashRead::WrongType => HashObservation::WrongType,
        HashRead::Fields(f) => HashObservation::Present(f),
    }
}
