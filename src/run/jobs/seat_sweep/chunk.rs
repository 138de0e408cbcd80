//! One chunk of a sweep: templates (cached per hall), the occupancy named
//! by template seats, the pure plan of each showtime, grace decisions and
//! suspect records, then the repairs in parts of the pace's batch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::model::holds::ContractState;
use crate::model::{Kind, Occupancy, SeatRepair, ShowtimeId, Template};
use crate::plan::{self, HashObservation, ShowtimeInput, ShowtimePlan};
use crate::run::context::ChunkSource;
use crate::store::mysql::ShowtimeRow;
use crate::store::redis::{HashRead, ShowtimeRead, SuspectOp};

use super::super::{Finding, strict};
use super::notices::wrong_type_problem;
use super::read::{Fetched, WhatToRead};
use super::{ChunkWork, Planned, Sweep, TEMPLATE_CACHE_HALLS};

impl<'a> Sweep<'a, '_> {
    pub(super) async fn load_templates(
        &mut self,
        page: &[ShowtimeRow],
        source: &mut ChunkSource,
    ) -> Result<(), Error> {
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
        let missing = &missing;
        let (loaded, unknown) = ctx
            .bulk_read(source, "read templates", |db| async move {
                db.templates(missing).await
            })
            .await?;
        self.unknown(&unknown);
        self.templates
            .extend(loaded.into_iter().map(|(h, t)| (h, Arc::new(t))));
        Ok(())
    }

    pub(super) fn what_to_read(&self) -> WhatToRead {
        WhatToRead {
            suspects: self.ctx.settings.reconcile.orphan_grace.as_millis() > 0
                && self.jobs.iter().any(|j| j.kind.needs_grace()),
            // missing-hashes alone needs occupancy only where a hash is missing.
            occupancy_where_missing_only: self.jobs.iter().all(|j| j.kind == Kind::MissingHashes),
        }
    }

    /// Plans one chunk and repairs what its jobs may repair.
    pub(super) async fn chunk(&mut self, fetched: Fetched) -> Result<(), Error> {
        let Fetched {
            page,
            reads,
            read_at,
            mut source,
            ..
        } = fetched;
        if page.is_empty() {
            return Ok(());
        }
        let ctx = self.ctx;
        let (now_ms, reads, occupancy) = reads?;
        // Read, so planned here: checks asked for before need not wait.
        self.opts.tell(|| Finding::Read {
            showtimes: page.iter().map(|s| s.id).collect(),
            at: read_at,
            by_pass: self.opts.check.is_none(),
        });
        self.load_templates(&page, &mut source).await?;
        let occupancy = strict::name_seats(ctx, &page, &self.templates, occupancy).await?;
        self.unknown(&occupancy.unknown);
        let occupancy = occupancy.occupancy;
        let grace_ms = ctx.settings.reconcile.orphan_grace.as_millis() as i64;
        let with_suspects = self.what_to_read().suspects;
        let mut work = ChunkWork::default();
        let mut suspect_ops: Vec<(ShowtimeId, Vec<SuspectOp>)> = Vec::new();
        // A check re-reads MySQL for the seats it defers
        // (`confirm_deferred`); a pass, which defers many, does not.
        let confirm_deferred = self.opts.check.is_some();
        let mut deferred: Vec<(ShowtimeId, Vec<Planned>)> = Vec::new();
        // What the schema's deviations hold (rule 17).
        let holds = ctx.mysql.contract();
        for (showtime, read) in page.iter().zip(&reads) {
            let template = self
                .templates
                .get(&showtime.hall_id)
                .cloned()
                .unwrap_or_default();
            let plan = plan_of(&template, &occupancy, showtime.id, read, &holds);
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
                job.report.held_back +=
                    plan.held_back.iter().filter(|k| **k == job.kind).count() as u64;
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
                    // Checked when its grace ends, not a pass later. A check
                    // asks for those it records now once it has marked them
                    // (`confirm_deferred`, a few ms later): not twice.
                    let ends_in_ms = match confirm_deferred {
                        true => g.known_ends_in_ms,
                        false => g.ends_in_ms,
                    };
                    if let Some(in_ms) = ends_in_ms.filter(|_| !self.opts.dry_run) {
                        let at = Instant::now() + Duration::from_millis(in_ms.max(0) as u64);
                        let showtime = showtime.id;
                        self.opts.tell(|| Finding::GraceEnds { showtime, at });
                    }
                    ops.extend(suspect_changes(job.kind, &g, read));
                    if confirm_deferred {
                        // Those recorded now go without their record: the
                        // confirmation marks it with the rows it reads.
                        let seen: Vec<Planned> = g
                            .deferred
                            .iter()
                            .map(
                                |repair| match g.record.iter().any(|(s, _)| *s == repair.seat) {
                                    true => Planned {
                                        repair: repair.clone(),
                                        suspect: None,
                                    },
                                    false => with_sighting(repair.clone(), read),
                                },
                            )
                            .collect();
                        if !seen.is_empty() {
                            deferred.push((showtime.id, seen));
                        }
                    }
                    g.ready
                } else {
                    candidates
                };
                let n = job.take(ready.len());
                planned.extend(
                    ready
                        .into_iter()
                        .take(n)
                        .map(|repair| with_sighting(repair, read)),
                );
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
        if !deferred.is_empty() {
            self.confirm_deferred(deferred).await?;
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
    pub(super) async fn pause(&self, items: usize) {
        if let Some(p) = &self.opts.pacer {
            tokio::time::sleep(p.reserve(items, Instant::now())).await;
        }
    }

    /// `items` in parts of the pace's batch (one part when unpaced or
    /// empty: no part). The caller paces the parts.
    pub(super) fn paced_parts<T>(&self, mut items: Vec<T>) -> Vec<Vec<T>> {
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
    pub(super) fn suspect_ttl_ms(&self) -> i64 {
        let grace_ms = self.ctx.settings.reconcile.orphan_grace.as_millis() as i64;
        (grace_ms * 4).max(600_000)
    }
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

/// A seat to repair (or to confirm), with its suspect record when the repair
/// is its kind's: an orphan's, of the value it watches. A raise waits for no
/// grace, even on a seat whose hold was a suspect before its order came
/// (the order's activity would otherwise restart a grace on the raise).
fn with_sighting(repair: SeatRepair, read: &ShowtimeRead) -> Planned {
    let suspect = read
        .suspects
        .get(&repair.seat)
        .and_then(|raw| plan::Suspect::decode(raw))
        .filter(|s| {
            let watched = plan::suspect_state(repair.kind);
            watched == Some(s.state) && repair.observed == watched
        });
    Planned { suspect, repair }
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

/// The plan of one showtime read with `read`: the planner's input as a
/// chunk gives it (also `inspect`'s, through `seen.rs`).
pub(super) fn plan_of(
    template: &Template,
    occupancy: &Occupancy,
    showtime: ShowtimeId,
    read: &ShowtimeRead,
    contract: &ContractState,
) -> ShowtimePlan {
    plan::plan_showtime(ShowtimeInput {
        template,
        occupancy: occupancy.of(showtime),
        hash: observation(read),
        hold: contract.holds.seat(showtime).0,
    })
}

fn observation(read: &ShowtimeRead) -> HashObservation<'_> {
    match &read.hash {
        HashRead::Missing => HashObservation::Missing,
        HashRead::WrongType => HashObservation::WrongType,
        HashRead::Fields(f) => HashObservation::Present(f),
    }
}
