//! The writes of a sweep, under showtime leases (rule 2): the MySQL
//! confirmation of exactly the planned seats in MySQL's own terms (rules 4 and
//! 15), the fenced compare-and-set scripts (rules 1 and 13), rebuilds of
//! missing hashes, and their audit (rule 10).

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Error;
use crate::model::{FixAction, Kind, SeatNo, SeatRows, SeatState, ShowtimeId, Template};
use crate::plan;
use crate::store::mysql::{FixRecord, SeatConfirmation};
use crate::store::redis::{Fenced, Replied, SeatBatch, SuspectOp};

use super::super::Finding;
use super::notices::log_stuck_lease;
use super::{ChunkWork, Planned, Sweep};

/// Missing hashes confirmed together before they are written one by one:
/// one statement for several instead of one a hash (a loss at 10 k
/// showtimes rebuilt 57 hashes a second one by one). Few, so that each is
/// still written within milliseconds of its read: while its hash is missing
/// no customer can hold a seat (seatflow's hold needs the seat at "0"), so
/// what can change meanwhile is an order in flight committing or ending.
const REBUILD_GROUP: usize = 16;

impl<'a> Sweep<'a, '_> {
    /// A check's MySQL confirmation of the seats it defers (rule 4). A record
    /// this check wrote just now is started over with the mark of the rows
    /// it reads (from then on, "orphaned throughout" is asked of MySQL, not
    /// of clocks: a customer who cancelled a second before the sighting
    /// costs no slack). A record whose seat's rows changed since it was
    /// written (an order that came and went since the hold was seen, then
    /// cancelled or refunded with the seat write lost) was not orphaned
    /// throughout: its grace restarts at once, not at its end plus a whole
    /// new grace. A check reads a few showtimes; a pass, which defers many
    /// seats, leaves this to the confirmation before the repair.
    pub(super) async fn confirm_deferred(
        &mut self,
        deferred: Vec<(ShowtimeId, Vec<Planned>)>,
    ) -> Result<(), Error> {
        let mut fresh = self
            .confirm_seats("confirm deferred seats", &deferred)
            .await?;
        let mut restart = Restarts::default();
        for (id, planned) in deferred {
            for p in planned {
                let now = fresh.next().unwrap_or_default();
                if !plan::confirms(&p.repair, &now.truth) {
                    continue;
                }
                match p.suspect {
                    None => restart.seat(id, &p, now.rows),
                    Some(s) if !s.orphaned_throughout(&now.rows) => {
                        tracing::info!(kind = p.repair.kind.label(), showtime_id = id, seat = %p.repair.seat, "order activity on a deferred seat since it was first seen orphaned; grace period restarts now");
                        restart.seat(id, &p, now.rows);
                    }
                    Some(_) => {}
                }
            }
        }
        self.restart_graces(restart).await
    }

    /// The MySQL confirmation of exactly the `planned` seats, in MySQL's own
    /// terms (a lowering write also in the other showtimes its showtime's
    /// orders may hold rows in): one confirmation per seat, in order; the rows
    /// outside the contract among them are reported.
    async fn confirm_seats(
        &mut self,
        what: &'static str,
        planned: &[(ShowtimeId, Vec<Planned>)],
    ) -> Result<std::vec::IntoIter<SeatConfirmation>, Error> {
        let ctx = self.ctx;
        let seats: Vec<(ShowtimeId, SeatNo, bool)> = planned
            .iter()
            .flat_map(|(id, planned)| {
                planned.iter().map(|p| {
                    let r = &p.repair;
                    (*id, r.seat.clone(), SeatState::lowers(r.observed, r.target))
                })
            })
            .collect();
        let (fresh, unknown) = ctx.retry(what, || ctx.mysql.confirm_seats(&seats)).await?;
        self.unknown(&unknown);
        Ok(fresh.into_iter())
    }

    /// Writes restarted suspect records, marked with the rows the confirmation
    /// read and first seen at Redis' time *after* that read (so that every
    /// order write the mark does not show came later, and changes it). Their
    /// grace starts over, so each showtime is checked when it ends, not a
    /// pass later (no event comes: the change was in MySQL).
    async fn restart_graces(&mut self, restart: Restarts) -> Result<(), Error> {
        if restart.seats.is_empty() || self.opts.dry_run || self.opts.fenced_out() {
            return Ok(());
        }
        let ctx = self.ctx;
        let now_ms = ctx
            .retry("read the time", || ctx.redis.server_time_ms())
            .await?;
        let ops = restart.ops(now_ms);
        let ttl_ms = self.suspect_ttl_ms();
        let replaced = ctx
            .retry("restart suspects", || {
                ctx.redis.update_suspects(&ops, ttl_ms)
            })
            .await?;
        self.replaced(&replaced);
        let at = std::time::Instant::now() + ctx.settings.reconcile.orphan_grace;
        for (showtime, _) in &ops {
            let showtime = *showtime;
            self.opts.tell(|| Finding::GraceEnds { showtime, at });
        }
        Ok(())
    }

    pub(super) async fn apply(&mut self, mut work: ChunkWork, now_ms: i64) -> Result<(), Error> {
        let ctx = self.ctx;
        let mut ids: Vec<ShowtimeId> = work.rebuilds.clone();
        ids.extend(work.seats.iter().map(|(id, _)| *id));
        let acquired = ctx
            .retry("acquire leases", || self.leases.acquire(&ids))
            .await?;
        for id in &acquired.replaced {
            self.own_key(
                None,
                &ctx.redis.keys.showtime_lease(*id),
                "lease",
                "replaced",
            );
        }
        for id in &acquired.busy {
            let stuck = acquired.stuck.contains(id);
            if stuck {
                log_stuck_lease(ctx, *id);
            } else {
                tracing::info!(
                    showtime_id = id,
                    "showtime busy (showtime lease held by another reconciler); skipped this run"
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

    pub(super) async fn repair_seats(
        &mut self,
        work: Vec<(ShowtimeId, Vec<Planned>)>,
        now_ms: i64,
    ) -> Result<(), Error> {
        let ctx = self.ctx;
        race_window!(crate::race_window::SEAT_BEFORE_CONFIRM);
        // Rules 4 and 15: re-read exactly these seats right before writing.
        let mut fresh = self.confirm_seats("confirm seats", &work).await?;
        let mut batches: Vec<SeatBatch> = Vec::new();
        let mut restart = Restarts::default();
        // When each seat's drift was first seen (its suspect record, else
        // this scan: drift age, first sighting → repair), and the order the
        // confirmation found holding it (for the audit).
        let mut first_seen: HashMap<(ShowtimeId, SeatNo), (i64, Option<i64>)> = HashMap::new();
        let shape = ctx.mysql.contract().shape.clone();
        for (id, planned) in work {
            let mut keep = Vec::new();
            for p in planned {
                let seat = &p.repair.seat;
                let kind = p.repair.kind.label();
                let now = fresh.next().unwrap_or_default();
                if !plan::confirms(&p.repair, &now.truth) {
                    tracing::info!(kind, showtime_id = id, seat = %seat, "seat changed in MySQL since the scan; not repaired");
                } else if let Err(e) = fits_audit(&shape, id, seat) {
                    // Rules 10 and 17: no write without its whole audit row.
                    tracing::warn!(kind, showtime_id = id, error = %e, "repair not made");
                    self.job(p.repair.kind).report.error(&e);
                } else if let Some(s) = p.suspect
                    && !s.orphaned_throughout(&now.rows)
                {
                    // An order came or went on this seat since it was first
                    // seen orphaned: the orphanhood was not continuous, so
                    // the grace period starts over.
                    tracing::info!(kind, showtime_id = id, seat = %seat, "order activity on the seat since it was first seen orphaned; grace period restarts");
                    self.job(p.repair.kind).report.deferred += 1;
                    restart.seat(id, &p, now.rows);
                } else {
                    first_seen.insert(
                        (id, p.repair.seat.clone()),
                        (p.suspect.map_or(now_ms, |s| s.first_seen_ms), now.order_id),
                    );
                    keep.push(p.repair);
                }
            }
            if !keep.is_empty() {
                batches.push(SeatBatch::new(id, keep));
            }
        }
        self.restart_graces(restart).await?;
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
        let kinds: Vec<Kind> = batches.iter().flat_map(kinds_in).collect();
        if !self.run_recorded(&kinds).await {
            return Ok(());
        }
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
                            let (showtime, kind) = (id, r.kind);
                            let by_pass = self.opts.check.is_none();
                            self.opts.tell(|| Finding::Repaired {
                                showtime,
                                kind,
                                by_pass,
                            });
                            let job = self.job(r.kind);
                            job.report.fixed += 1;
                            let (seen_ms, order_id) = first_seen
                                .get(&(id, r.seat.clone()))
                                .copied()
                                .unwrap_or((now_ms, None));
                            job.report.observe_drift_since(seen_ms);
                            job.audit
                                .seat(id, &r.seat, order_id, r.observed, r.target)
                                .await;
                        } else {
                            tracing::info!(kind = r.kind.label(), showtime_id = id, seat = %r.seat, "seat changed in Redis since the scan; left alone");
                        }
                    }
                }
                Ok(Fenced::LeaseLost) => {
                    tracing::warn!(
                        showtime_id = id,
                        "showtime lease lost before repair; nothing written"
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
    pub(super) async fn rebuild(
        &mut self,
        ids: Vec<ShowtimeId>,
        seen_ms: i64,
    ) -> Result<(), Error> {
        let ctx = self.ctx;
        let halls: HashMap<ShowtimeId, i64> = ctx
            .retry("read showtimes", || {
                ctx.mysql
                    .on_sale_page(None, None, ids.len(), ctx.scope(&ids))
            })
            .await?
            .rows
            .into_iter()
            .map(|s| (s.id, s.hall_id))
            .collect();
        // With a replica, the cached templates may be the replica's, older
        // than the primary's: a rebuild writes the primary's.
        let from_primary: Option<HashMap<i64, Arc<Template>>> = match ctx.replica {
            Some(_) => {
                let mut hall_ids: Vec<i64> = halls.values().copied().collect();
                hall_ids.sort_unstable();
                hall_ids.dedup();
                let (read, _) = ctx
                    .retry("read templates", || ctx.mysql.templates(&hall_ids))
                    .await?;
                Some(read.into_iter().map(|(h, t)| (h, Arc::new(t))).collect())
            }
            None => None,
        };
        let token = self.leases.token().to_string();
        for group in ids.chunks(REBUILD_GROUP) {
            let templates = from_primary.as_ref().unwrap_or(&self.templates);
            let mut planned: Vec<(ShowtimeId, Arc<Template>)> = Vec::with_capacity(group.len());
            for &id in group {
                match halls.get(&id).and_then(|h| templates.get(h)) {
                    Some(template) => planned.push((id, template.clone())),
                    None => tracing::info!(
                        showtime_id = id,
                        "showtime left ON_SALE since the scan; not rebuilt"
                    ),
                }
            }
            let seats: Vec<(ShowtimeId, SeatNo, bool)> = planned
                .iter()
                .flat_map(|(id, t)| t.seats().iter().map(|seat| (*id, seat.clone(), true)))
                .collect();
            if seats.is_empty() {
                continue;
            }
            // Each hash is written from this read, a few writes after it
            // (see `REBUILD_GROUP`); it also asks for rows whose seat name
            // reads as a template seat (rule 17).
            let (fresh, unknown) = ctx
                .retry("confirm seats", || ctx.mysql.confirm_seats_as_read(&seats))
                .await?;
            self.unknown(&unknown);
            let mut fresh = fresh.as_slice();
            for (id, template) in planned {
                let (own, rest) = fresh.split_at(template.seats().len().min(fresh.len()));
                fresh = rest;
                self.rebuild_one(id, &template, own, &token, seen_ms)
                    .await?;
            }
        }
        Ok(())
    }

    /// Rebuilds the missing hash of `id` from `fresh`, its seats' reading
    /// on the primary (in the template's order).
    async fn rebuild_one(
        &mut self,
        id: ShowtimeId,
        template: &Template,
        fresh: &[SeatConfirmation],
        token: &str,
        seen_ms: i64,
    ) -> Result<(), Error> {
        let ctx = self.ctx;
        let fields: Vec<(SeatNo, SeatState)> = template
            .seats()
            .iter()
            .zip(fresh)
            .filter(|(_, h)| h.truth.allows(None, h.truth.expected()))
            .map(|(seat, h)| (seat.clone(), h.truth.expected()))
            .collect();
        if fields.is_empty() {
            // Every seat may be held by a row outside the contract (or
            // the hall has no seat): no hash can be written that
            // MySQL's rows allow. Left absent; the rows are reported.
            tracing::info!(
                showtime_id = id,
                "no seat of the missing hash can be written by the contract; not rebuilt"
            );
            return Ok(());
        }
        let one = [id];
        let lost = ctx
            .retry("renew leases", || self.leases.renew_due(&one))
            .await?;
        if !lost.is_empty() {
            self.job(Kind::MissingHashes)
                .report
                .error(&Error::LeaseLost(id));
            return Ok(());
        }
        race_window!(crate::race_window::SEAT_BEFORE_REBUILD);
        if !self.run_recorded(&[Kind::MissingHashes]).await {
            return Ok(());
        }
        let op_id = uuid::Uuid::new_v4().simple().to_string();
        let result = ctx
            .retry("rebuild hash", || {
                ctx.redis.rebuild_hash(token, &op_id, id, &fields)
            })
            .await;
        let result = match result {
            Ok(Replied { reply, replaced }) => {
                self.replaced(&replaced);
                Ok(reply)
            }
            Err(e) => Err(e),
        };
        if let Ok(Fenced::Done(true)) = result {
            let (showtime, kind) = (id, Kind::MissingHashes);
            let by_pass = self.opts.check.is_none();
            self.opts.tell(|| Finding::Repaired {
                showtime,
                kind,
                by_pass,
            });
        }
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
        Ok(())
    }
}

impl Sweep<'_, '_> {
    /// Rule 10, every audit row has its run: the run's `reconcile_run` row
    /// is there (recorded now if MySQL refused it when the run began), or
    /// the repairs of `kinds` are not made, an `audit` error each.
    async fn run_recorded(&mut self, kinds: &[Kind]) -> bool {
        let Some(first) = self.jobs.first() else {
            return false;
        };
        let Err(e) = first.audit.ensure_run().await else {
            return true;
        };
        tracing::warn!(error = %e, "repairs not made");
        let mut kinds = kinds.to_vec();
        kinds.sort_unstable();
        kinds.dedup();
        for kind in kinds {
            self.job(kind).report.error(&e);
        }
        false
    }
}

/// A repair of `seat` may be made only if its audit row fits
/// `reconcile_fix.seat_no` whole (rules 10 and 17: never truncated).
pub(crate) fn fits_audit(
    shape: &crate::model::holds::ReadShape,
    showtime: ShowtimeId,
    seat: &str,
) -> Result<(), Error> {
    match shape.audit_seat_chars {
        Some(width) if !shape.fits_audit(seat) => Err(Error::AuditTooNarrow {
            showtime,
            seat: seat.to_string(),
            width,
        }),
        _ => Ok(()),
    }
}

/// The jobs that own a batch's repairs.
pub(super) fn kinds_in(batch: &SeatBatch) -> Vec<Kind> {
    let mut kinds: Vec<Kind> = batch.repairs.iter().map(|r| r.kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds
}

/// Suspect records to start over: each seat with the rows its confirmation read.
#[derive(Default)]
struct Restarts {
    seats: Vec<(ShowtimeId, SeatNo, SeatState, SeatRows)>,
}

impl Restarts {
    fn seat(&mut self, showtime: ShowtimeId, p: &Planned, rows: SeatRows) {
        let state = p.repair.observed.unwrap_or(p.repair.target);
        self.seats
            .push((showtime, p.repair.seat.clone(), state, rows));
    }

    /// The writes, by showtime: each record replaced by one first seen at
    /// `now_ms` with its rows' mark.
    fn ops(self, now_ms: i64) -> Vec<(ShowtimeId, Vec<SuspectOp>)> {
        let mut out: Vec<(ShowtimeId, Vec<SuspectOp>)> = Vec::new();
        for (showtime, seat, state, rows) in self.seats {
            let encoded = plan::Suspect::seen_with(state, now_ms, &rows).encode();
            let ops = [
                SuspectOp::Clear {
                    seat: seat.clone(),
                    state: Some(state),
                },
                SuspectOp::Record { seat, encoded },
            ];
            match out.last_mut() {
                Some((id, same)) if *id == showtime => same.extend(ops),
                _ => out.push((showtime, ops.into())),
            }
        }
        out
    }
}
