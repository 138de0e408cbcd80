//! The four seat-map jobs (`paid-seats`, `missing-hashes`, `orphan-locks`,
//! `sold-orphans`): sweep ON_SALE showtimes soonest-first in chunks, plan
//! each with the pure planner, and repair this job's drift under the
//! per-showtime mutex.
//!
//! Per chunk: 1 SQL page + 1 SQL template read (new halls only) + 1 SQL
//! occupancy read + 1 Redis pipeline of HGETALLs; then, only where there is
//! something to repair, 1 pipeline of leases, 1 SQL re-check, 1 pipeline of
//! repair scripts and 1 pipeline of releases.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Error;
use crate::lease::Leases;
use crate::model::{Kind, SeatNo, ShowtimeId};
use crate::plan::{self, Anomaly, HashObservation, SeatRepair, ShowtimeInput};
use crate::store::mysql::{FixRecord, Keyset, ShowtimeRow};
use crate::store::redis::{Fenced, HashRead, SeatBatch, ShowtimeRead, SuspectOp};

use super::audit::AuditLog;
use super::progress::Progress;
use super::report::JobReport;
use super::{Context, RunOptions};

/// Most hall templates kept between chunks; cleared when exceeded.
const TEMPLATE_CACHE_HALLS: usize = 1024;

/// Work found in one showtime of a chunk.
enum Work {
    Seats(Vec<Planned>),
    Rebuild,
}

/// A seat repair and, for orphans, since when the seat has been a suspect.
struct Planned {
    repair: SeatRepair,
    suspect_since_ms: Option<i64>,
}

pub async fn run(
    ctx: &Context,
    kind: Kind,
    opts: &RunOptions,
    audit: &mut AuditLog<'_>,
) -> JobReport {
    let mut sweep = Sweep {
        ctx,
        kind,
        opts,
        report: JobReport::new(kind),
        leases: Leases::new(
            ctx.redis.clone(),
            ctx.settings.reconcile.lock_ttl,
            ctx.leases.clone(),
        ),
        templates: HashMap::new(),
        budget: ctx.settings.job(kind).batch_size,
        progress: Progress::new(opts.progress, kind),
    };
    if let Err(e) = sweep.sweep(audit).await {
        tracing::error!(kind = kind.label(), error = %e, "job stopped");
        sweep.report.fail(&e);
    }
    if let Err(e) = sweep.leases.release_all().await {
        sweep.report.error(&e);
    }
    sweep.report
}

struct Sweep<'a> {
    ctx: &'a Context,
    kind: Kind,
    opts: &'a RunOptions,
    report: JobReport,
    leases: Leases,
    templates: HashMap<i64, Arc<Vec<SeatNo>>>,
    /// Repairs this run may still apply.
    budget: usize,
    progress: Progress,
}

impl Sweep<'_> {
    async fn sweep(&mut self, audit: &mut AuditLog<'_>) -> Result<(), Error> {
        let ctx = self.ctx;
        let job = ctx.settings.job(self.kind);
        let chunk = ctx.settings.reconcile.scan_chunk;
        let use_cursor = self.opts.showtimes.is_empty();
        let cursor_key = ctx.redis.keys.cursor(self.kind.label());
        let cursor_seen = if use_cursor {
            ctx.retry("read cursor", || ctx.redis.get_string(&cursor_key))
                .await?
        } else {
            None
        };
        let start = cursor_seen.as_deref().and_then(Keyset::decode);
        let mut after = start;
        // Where the next run resumes when this one ran out of budget.
        let mut resume: Option<Option<Keyset>> = None;
        let mut reached_end = false;
        // The total is only worth a COUNT query when someone watches.
        let total = if self.opts.progress {
            let n = ctx
                .retry("count showtimes", || {
                    ctx.mysql.count_on_sale(&self.opts.showtimes)
                })
                .await?;
            Some(n.min(job.scan_limit as u64))
        } else {
            None
        };
        loop {
            if self.opts.stop.is_cancelled() {
                self.report.fatal = Some("interrupted by shutdown".into());
                return Ok(());
            }
            let want = chunk.min(job.scan_limit - self.report.scanned as usize);
            if want == 0 {
                break;
            }
            let page = ctx
                .retry("read showtimes", || {
                    ctx.mysql.on_sale_page(after, want, &self.opts.showtimes)
                })
                .await?;
            let page_start = after;
            if let Some(last) = page.last() {
                after = Some(Keyset {
                    at: last.starts_at,
                    id: last.id,
                });
            }
            self.report.scanned += page.len() as u64;
            let short = page.len() < want;
            let had_budget = self.budget > 0;
            match self.chunk(&page, audit).await {
                Ok(()) => {}
                // Quarantine the chunk for this run: counted, reported, skipped.
                Err(e) => {
                    tracing::warn!(kind = self.kind.label(), error = %e, first = page.first().map(|s| s.id), "chunk failed; skipped for this run");
                    self.report.quarantine(&e, page.iter().map(|s| s.id));
                }
            }
            self.progress
                .tick(self.report.scanned, total, self.report.fixed);
            if had_budget && self.budget == 0 && resume.is_none() {
                resume = Some(page_start);
            }
            if short {
                reached_end = true;
                break;
            }
        }
        self.progress.finish();
        if !reached_end && let Some(after) = after {
            self.report.backlog += ctx
                .retry("count backlog", || {
                    ctx.mysql.count_on_sale_after(after, &self.opts.showtimes)
                })
                .await?;
        }
        if use_cursor && !self.opts.dry_run {
            let next = match resume {
                Some(at) => at,
                None if reached_end => None,
                None => after,
            };
            let next = next.map(|k| k.encode());
            let moved = ctx
                .retry("write cursor", || {
                    ctx.redis
                        .set_cursor(&cursor_key, cursor_seen.as_deref(), next.as_deref())
                })
                .await?;
            if !moved {
                tracing::debug!(
                    kind = self.kind.label(),
                    "cursor moved by another instance; left as is"
                );
            }
        }
        Ok(())
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
        let loaded = ctx
            .retry("read templates", || ctx.mysql.templates(&missing))
            .await?;
        self.templates
            .extend(loaded.into_iter().map(|(h, seats)| (h, Arc::new(seats))));
        Ok(())
    }

    async fn chunk(&mut self, page: &[ShowtimeRow], audit: &mut AuditLog<'_>) -> Result<(), Error> {
        if page.is_empty() {
            return Ok(());
        }
        let ctx = self.ctx;
        self.load_templates(page).await?;
        let ids: Vec<ShowtimeId> = page.iter().map(|s| s.id).collect();
        let with_suspects =
            self.kind.needs_grace() && !ctx.settings.reconcile.orphan_grace.is_zero();
        let (now_ms, reads) = ctx
            .retry("read seat hashes", || {
                ctx.redis.read_showtimes(&ids, with_suspects)
            })
            .await?;
        // missing-hashes needs occupancy only where a hash is missing.
        let need_occupancy: Vec<ShowtimeId> = page
            .iter()
            .zip(&reads)
            .filter(|(_, r)| self.kind != Kind::MissingHashes || r.hash == HashRead::Missing)
            .map(|(s, _)| s.id)
            .collect();
        let occupancy = ctx
            .retry("read occupancy", || ctx.mysql.occupancy(&need_occupancy))
            .await?;

        let grace_ms = ctx.settings.reconcile.orphan_grace.as_millis() as i64;
        let mut work: Vec<(ShowtimeId, Work)> = Vec::new();
        let mut suspect_ops: Vec<(ShowtimeId, Vec<SuspectOp>)> = Vec::new();
        let empty = HashMap::new();
        for (showtime, read) in page.iter().zip(&reads) {
            let template = self
                .templates
                .get(&showtime.hall_id)
                .cloned()
                .unwrap_or_default();
            let occ = occupancy.get(&showtime.id).unwrap_or(&empty);
            let plan = plan::plan_showtime(ShowtimeInput {
                template: &template,
                occupancy: occ,
                hash: observation(read),
            });
            for anomaly in &plan.anomalies {
                self.invalid(showtime.id, anomaly);
            }
            if self.kind == Kind::MissingHashes {
                if plan.rebuild.is_some() {
                    self.report.drift += 1;
                    self.report
                        .example(|| format!("{} missing", ctx.redis.keys.seat(showtime.id)));
                    if self.take(1) == 1 {
                        work.push((showtime.id, Work::Rebuild));
                    }
                }
                continue;
            }
            let candidates: Vec<SeatRepair> = plan.repairs_of(self.kind).cloned().collect();
            self.report.drift += candidates.len() as u64;
            for c in candidates.iter() {
                let key = ctx.redis.keys.seat(showtime.id);
                self.report.example(|| {
                    format!(
                        "{key} {}: {} -> {}",
                        c.seat,
                        c.observed.map(|s| s.as_redis()).unwrap_or("absent"),
                        c.target.as_redis()
                    )
                });
            }
            let ready = if with_suspects {
                let g = plan::apply_grace(self.kind, candidates, &read.suspects, now_ms, grace_ms);
                self.report.deferred += g.deferred.len() as u64;
                let watched = plan::suspect_state(self.kind);
                let ops: Vec<SuspectOp> = g
                    .record
                    .iter()
                    .map(|(seat, s)| SuspectOp::Record {
                        seat: seat.clone(),
                        encoded: s.encode(),
                    })
                    .chain(g.clear.iter().map(|seat| SuspectOp::Clear {
                        seat: seat.clone(),
                        state: plan::Suspect::decode(&read.suspects[seat]).and(watched),
                    }))
                    .collect();
                if !ops.is_empty() {
                    suspect_ops.push((showtime.id, ops));
                }
                g.ready
            } else {
                candidates
            };
            let n = self.take(ready.len());
            let ready: Vec<Planned> = ready
                .into_iter()
                .take(n)
                .map(|repair| Planned {
                    suspect_since_ms: read
                        .suspects
                        .get(&repair.seat)
                        .and_then(|raw| plan::Suspect::decode(raw))
                        .map(|s| s.first_seen_ms),
                    repair,
                })
                .collect();
            if !ready.is_empty() {
                work.push((showtime.id, Work::Seats(ready)));
            }
        }
        if self.opts.dry_run {
            return Ok(());
        }
        if !suspect_ops.is_empty() {
            let ttl_ms = self.suspect_ttl_ms();
            ctx.retry("write suspects", || {
                ctx.redis.update_suspects(&suspect_ops, ttl_ms)
            })
            .await?;
        }
        if work.is_empty() {
            return Ok(());
        }
        let result = self.apply(work, now_ms, audit).await;
        let held = self.leases.held();
        let released = self.leases.release(&held).await;
        result?;
        released
    }

    /// Suspect records outlive several grace periods, and expire on their own
    /// when no run touches the showtime any more.
    fn suspect_ttl_ms(&self) -> i64 {
        let grace_ms = self.ctx.settings.reconcile.orphan_grace.as_millis() as i64;
        (grace_ms * 4).max(600_000)
    }

    /// Reserves up to `n` repairs from the run's budget; the rest is backlog.
    fn take(&mut self, n: usize) -> usize {
        let granted = n.min(self.budget);
        self.budget -= granted;
        self.report.backlog += (n - granted) as u64;
        granted
    }

    fn invalid(&mut self, showtime: ShowtimeId, anomaly: &Anomaly) {
        let key = self.ctx.redis.keys.seat(showtime);
        tracing::warn!(kind = self.kind.label(), key, showtime_id = showtime, problem = %anomaly.describe(), "invalid data left alone");
        self.report.invalid();
    }

    async fn apply(
        &mut self,
        work: Vec<(ShowtimeId, Work)>,
        now_ms: i64,
        audit: &mut AuditLog<'_>,
    ) -> Result<(), Error> {
        let ctx = self.ctx;
        let ids: Vec<ShowtimeId> = work.iter().map(|(id, _)| *id).collect();
        let acquired = ctx
            .retry("acquire leases", || self.leases.acquire(&ids))
            .await?;
        let mut work: Vec<(ShowtimeId, Work)> = work
            .into_iter()
            .filter(|(id, w)| {
                let busy = acquired.busy.contains(id);
                if busy {
                    let n = match w {
                        Work::Seats(r) => r.len(),
                        Work::Rebuild => 1,
                    };
                    self.report.skipped_busy += 1;
                    self.report.backlog += n as u64;
                    tracing::info!(
                        kind = self.kind.label(),
                        showtime_id = id,
                        "showtime busy (mutex held elsewhere); skipped this run"
                    );
                }
                !busy
            })
            .collect();
        if work.is_empty() {
            return Ok(());
        }
        if self.kind == Kind::MissingHashes {
            return self
                .rebuild(work.into_iter().map(|(id, _)| id).collect(), audit)
                .await;
        }
        // Safety rule 4: re-read exactly these seats right before writing.
        let seats: Vec<(ShowtimeId, SeatNo)> = work
            .iter()
            .flat_map(|(id, w)| match w {
                Work::Seats(p) => p.iter().map(|p| (*id, p.repair.seat.clone())).collect(),
                Work::Rebuild => Vec::new(),
            })
            .collect();
        let fresh = ctx
            .retry("re-check seats", || ctx.mysql.seat_history(&seats))
            .await?;
        let mut batches: Vec<SeatBatch> = Vec::new();
        let mut restart: Vec<(ShowtimeId, Vec<SuspectOp>)> = Vec::new();
        for (id, w) in work.drain(..) {
            let Work::Seats(planned) = w else { continue };
            let mut keep = Vec::new();
            let mut ops = Vec::new();
            for p in planned {
                let seat = &p.repair.seat;
                let history = fresh.get(&(id, seat.clone())).cloned().unwrap_or_default();
                if !plan::still_valid(&p.repair, history.occupant) {
                    tracing::info!(kind = self.kind.label(), showtime_id = id, seat = %seat, "seat changed in MySQL since the scan; not repaired");
                } else if let Some(since) = p.suspect_since_ms
                    && !plan::orphaned_throughout(since, history.last_activity_ms)
                {
                    // An order came or went on this seat since it was first
                    // seen orphaned: the orphanhood was not continuous, so
                    // the grace period starts over.
                    tracing::info!(kind = self.kind.label(), showtime_id = id, seat = %seat, "order activity on the seat since it was first seen orphaned; grace period restarts");
                    self.report.deferred += 1;
                    let state = p.repair.observed.expect("orphans are observed values");
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
            ctx.retry("restart suspects", || {
                ctx.redis.update_suspects(&restart, ttl_ms)
            })
            .await?;
        }
        let lost = ctx
            .retry("renew leases", || self.leases.renew_due(&ids))
            .await?;
        for id in &lost {
            self.report.error(&Error::LeaseLost(*id));
        }
        batches.retain(|b| !lost.contains(&b.showtime));
        if batches.is_empty() {
            return Ok(());
        }
        let token = self.leases.token().to_string();
        let results = ctx
            .retry("repair seats", || ctx.redis.repair_seats(&token, &batches))
            .await?;
        for (batch, result) in batches.iter().zip(results) {
            let id = &batch.showtime;
            match result {
                Ok(Fenced::Done(applied)) => {
                    for (r, ok) in batch.repairs.iter().zip(applied) {
                        if ok {
                            self.report.fixed += 1;
                            audit.seat(*id, &r.seat, None, r.observed, r.target).await;
                        } else {
                            tracing::info!(kind = self.kind.label(), showtime_id = id, seat = %r.seat, "seat changed in Redis since the scan; left alone");
                        }
                    }
                }
                Ok(Fenced::LeaseLost) => {
                    tracing::warn!(
                        kind = self.kind.label(),
                        showtime_id = id,
                        "lease lost before repair; nothing written"
                    );
                    self.report.error(&Error::LeaseLost(*id));
                }
                Err(e) => {
                    tracing::warn!(kind = self.kind.label(), showtime_id = id, error = %e, "repair failed; showtime quarantined for this run");
                    self.report.quarantine(&e, [*id]);
                }
            }
        }
        Ok(())
    }

    /// Rebuilds missing hashes from the template and a fresh occupancy read.
    async fn rebuild(
        &mut self,
        ids: Vec<ShowtimeId>,
        audit: &mut AuditLog<'_>,
    ) -> Result<(), Error> {
        let ctx = self.ctx;
        let fresh = ctx
            .retry("read occupancy", || ctx.mysql.occupancy(&ids))
            .await?;
        let halls: HashMap<ShowtimeId, i64> = ctx
            .retry("read showtimes", || {
                ctx.mysql.on_sale_page(None, ids.len(), &ids)
            })
            .await?
            .into_iter()
            .map(|s| (s.id, s.hall_id))
            .collect();
        let token = self.leases.token().to_string();
        let empty = HashMap::new();
        for id in ids {
            let Some(template) = halls.get(&id).and_then(|h| self.templates.get(h)).cloned() else {
                tracing::info!(
                    showtime_id = id,
                    "showtime left ON_SALE since the scan; not rebuilt"
                );
                continue;
            };
            let fields = plan::expected_hash(&template, fresh.get(&id).unwrap_or(&empty));
            let one = [id];
            let lost = ctx
                .retry("renew leases", || self.leases.renew_due(&one))
                .await?;
            if !lost.is_empty() {
                self.report.error(&Error::LeaseLost(id));
                continue;
            }
            let op_id = uuid::Uuid::new_v4().simple().to_string();
            match ctx
                .retry("rebuild hash", || {
                    ctx.redis.rebuild_hash(&token, &op_id, id, &fields)
                })
                .await
            {
                Ok(Fenced::Done(true)) => {
                    self.report.fixed += 1;
                    audit
                        .push(FixRecord {
                            fix_id: uuid::Uuid::new_v4().simple().to_string(),
                            job: self.kind,
                            kind: "hash_rebuilt",
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
                Ok(Fenced::LeaseLost) => self.report.error(&Error::LeaseLost(id)),
                Err(e) => {
                    tracing::warn!(showtime_id = id, error = %e, "rebuild failed; skipped for this run");
                    self.report.quarantine(&e, [id]);
                }
            }
        }
        Ok(())
    }
}

fn observation(read: &ShowtimeRead) -> HashObservation<'_> {
    match &read.hash {
        HashRead::Missing => HashObservation::Missing,
        HashRead::WrongType => HashObservation::WrongType,
        HashRead::Fields(f) => HashObservation::Present(f),
    }
}
