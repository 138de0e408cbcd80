//! The one way into a run: what asked for it (a [`Trigger`]) turned into a
//! [`RunRequest`] in one place, which resolves the jobs, the options, the
//! pace, the bad-data reporter, the deadline and whether the run takes its
//! shard's pass lease. `jobs::run` takes the request and returns a
//! [`RunResult`]; what the change queue needs from a run (grace ends to
//! check, what it read and when, what it repaired) leaves the run one way,
//! through the request's [`Outbox`], as the run goes: nothing comes back in.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::RunOptions;
use super::pass_run::PassOutcome;
use super::report::RunReport;
use crate::config::Settings;
use crate::model::{Kind, ShowtimeId};
use crate::run::context::Context;
use crate::run::pass_lease::KeptPass;
use seatflow_core::changes::queue::Source;

/// What asked for a run.
#[derive(Debug, Clone)]
pub enum Trigger {
    /// The enabled seat jobs' pass: fired by `pass.schedule` for `slot`
    /// (it stops before the next fire), or started outside it (`None`: a
    /// gap, the daemon's start, a source down). `rebuild`: whether it
    /// rebuilds missing seat hashes past `batch_size`, and how. `cadence`:
    /// for a pass outside the schedule, the passes' cadence while a change
    /// source is down (None: the schedule's interval in force).
    Pass {
        slot: Option<DateTime<Utc>>,
        rebuild: Rebuild,
        cadence: Option<Duration>,
    },
    /// `expired-orders` fired by its own schedule.
    ExpiredOrders,
    /// The admin endpoint: one job now (a seat job runs as a pass of its own).
    Admin { kind: Kind },
    /// A change-driven check of `showtimes`, asked for by `source`
    /// (`expired-orders` runs too when the source may be an order's
    /// deadline: `Source::asks_for_orders`).
    Check {
        source: Source,
        showtimes: Vec<ShowtimeId>,
    },
    /// The CLI's `once`: the jobs it names, under the shard's pass lease.
    Once {
        kinds: Vec<Kind>,
        dry_run: bool,
        showtimes: Vec<ShowtimeId>,
        progress: bool,
    },
    /// A caller of the library (the demo's tour, the tests): these jobs
    /// with these options, outside any pass (no pass lease).
    Direct { kinds: Vec<Kind>, opts: RunOptions },
}

/// Whether a pass rebuilds missing seat hashes past `batch_size` (see
/// [`RunOptions::rebuild`]), and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rebuild {
    /// No: `missing-hashes` within its `batch_size`.
    No,
    /// Redis lost its data while this process ran: past `batch_size`, and
    /// unpaced unless `pass.max_hashes_per_second` caps the pace (see
    /// [`paced`]).
    AfterLoss,
}

impl Trigger {
    /// Fired by a schedule (`pass.schedule`, or `expired-orders`' own).
    pub fn is_scheduled(&self) -> bool {
        matches!(
            self,
            Trigger::Pass { slot: Some(_), .. } | Trigger::ExpiredOrders
        )
    }

    /// For log lines: `pass`, `check`, `once`, `admin`, the job's label.
    pub fn label(&self) -> &'static str {
        match self {
            Trigger::Pass { .. } => "pass",
            Trigger::ExpiredOrders => Kind::ExpiredOrders.label(),
            Trigger::Admin { .. } => "admin",
            Trigger::Check { .. } => "check",
            Trigger::Once { .. } => "once",
            Trigger::Direct { .. } => "direct",
        }
    }
}

/// A run, fully described: built by [`RunRequest::new`] alone.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub trigger: Trigger,
    /// The jobs, in the contract's order (`expired-orders` first).
    pub kinds: Vec<Kind>,
    pub opts: RunOptions,
    /// The pass lease's slot (Unix ms; 0 outside the schedule) when the
    /// seat jobs take their shard's pass lease first; None when they take
    /// none (a dry run, named showtimes, a check, a library caller).
    pub pass_slot_ms: Option<i64>,
    /// A pass's interval: from its fire to the next, or for a pass outside
    /// the schedule one of the cadence in force. What its pace aims to
    /// finish within and its fit is judged by (None: not a pass, or a
    /// schedule with no next fire).
    pub interval: Option<Duration>,
}

impl RunRequest {
    /// The one place a trigger becomes a run. `stop` is cancelled when the
    /// process stops; `outbox` receives what a change queue needs and
    /// `kept` is the pass lease the daemon keeps for its own shard (the
    /// daemon's; None elsewhere).
    pub fn new(
        ctx: &Context,
        trigger: Trigger,
        stop: CancellationToken,
        outbox: Option<Outbox>,
        kept: Option<Arc<KeptPass>>,
    ) -> RunRequest {
        let settings = &ctx.settings;
        let capped = settings.pass.max_hashes_per_second > 0;
        // A run the daemon starts: its settings' dry run, its pace, one
        // bad-data reporter whatever it runs.
        let daemon = |deadline, check, showtimes: &[ShowtimeId]| RunOptions {
            dry_run: settings.reconcile.dry_run,
            showtimes: showtimes.to_vec(),
            stop: stop.clone(),
            bad_data_reporter: settings.bad_data_reporter(),
            pacer: ctx.pacer.clone(),
            deadline,
            check,
            outbox: outbox.clone(),
            kept_pass: kept.clone(),
            ..RunOptions::default()
        };
        // What a pass's pace aims to finish within, and its fit is judged
        // by; a seat job started alone from the admin endpoint runs as a
        // pass of its own, outside the schedule.
        let interval = match &trigger {
            Trigger::Pass { slot, cadence, .. } => pass_interval(ctx, *slot, *cadence),
            Trigger::Admin { kind } if kind.is_seat_job() => pass_interval(ctx, None, None),
            _ => None,
        };
        // A pass outside the schedule has no deadline: its pace aims to end
        // it within one interval of the cadence in force (at the budget's
        // pace alone, 10 k showtimes a minute apart took 120 s).
        let pace_by = |deadline: Option<tokio::time::Instant>| {
            deadline.or(interval.map(|i| tokio::time::Instant::now() + i))
        };
        let mut opts = match &trigger {
            Trigger::Pass { slot, rebuild, .. } => {
                let deadline = slot.and_then(|s| ctx.pass_deadline(s));
                RunOptions {
                    rebuild: *rebuild != Rebuild::No,
                    pacer: paced(&trigger, capped).then(|| ctx.pacer.clone()).flatten(),
                    pace_by: pace_by(deadline),
                    ..daemon(deadline, None, &[])
                }
            }
            Trigger::Admin { .. } => RunOptions {
                pace_by: pace_by(None),
                ..daemon(None, None, &[])
            },
            Trigger::ExpiredOrders => daemon(None, None, &[]),
            Trigger::Check {
                source, showtimes, ..
            } => daemon(None, Some(*source), showtimes),
            Trigger::Once {
                dry_run,
                showtimes,
                progress,
                ..
            } => RunOptions {
                dry_run: *dry_run || settings.reconcile.dry_run,
                showtimes: showtimes.clone(),
                progress: *progress,
                stop: stop.clone(),
                ..RunOptions::default()
            },
            Trigger::Direct { opts, .. } => opts.clone(),
        };
        let kinds = RunRequest::kinds_of(settings, &trigger);
        opts.replica_reads = replica_reads(&trigger, &opts);
        let pass_slot_ms = pass_lease_slot(&trigger, &kinds, &opts);
        RunRequest {
            trigger,
            kinds,
            opts,
            pass_slot_ms,
            interval,
        }
    }

    /// The jobs `trigger` runs, in the contract's order: what a fire or
    /// an admin run is skipped and counted for before any request is built.
    pub fn kinds_of(settings: &Settings, trigger: &Trigger) -> Vec<Kind> {
        let enabled = settings.enabled_jobs().into_iter();
        match trigger {
            Trigger::Pass { .. } => enabled.filter(|k| k.is_seat_job()).collect(),
            Trigger::ExpiredOrders => vec![Kind::ExpiredOrders],
            Trigger::Admin { kind } => vec![*kind],
            Trigger::Check { source, .. } => {
                let orders = source.asks_for_orders();
                enabled.filter(|k| orders || k.is_seat_job()).collect()
            }
            Trigger::Once { kinds, .. } | Trigger::Direct { kinds, .. } => kinds.clone(),
        }
    }

    /// A library caller's run of `kinds` with `opts` (no pass lease).
    pub fn direct(ctx: &Context, kinds: &[Kind], opts: RunOptions) -> RunRequest {
        let trigger = Trigger::Direct {
            kinds: kinds.to_vec(),
            opts: opts.clone(),
        };
        RunRequest::new(ctx, trigger, opts.stop, None, None)
    }
}

/// The slot (Unix ms; 0 outside the schedule) of the pass lease the seat
/// jobs of this run take first, or None. Seat jobs run under their shard's
/// pass lease, so reconcilers on the same data never sweep a shard at once;
/// a dry run writes nothing, named showtimes are an operator's repair under
/// the showtime lease, a check runs only on the shard's active replica, a
/// library caller runs outside any pass.
fn pass_lease_slot(trigger: &Trigger, kinds: &[Kind], opts: &RunOptions) -> Option<i64> {
    let under_pass = match trigger {
        Trigger::Pass { .. } | Trigger::Admin { .. } | Trigger::Once { .. } => {
            kinds.iter().any(|k| k.is_seat_job()) && !opts.dry_run && opts.showtimes.is_empty()
        }
        Trigger::ExpiredOrders | Trigger::Check { .. } | Trigger::Direct { .. } => false,
    };
    let slot_ms = match trigger {
        Trigger::Pass { slot: Some(s), .. } => s.timestamp_millis(),
        _ => 0,
    };
    under_pass.then_some(slot_ms)
}

/// A pass's interval (see [`RunRequest::interval`]): a scheduled pass's
/// from its slot to the next fire; one outside the schedule, `cadence` or
/// else the schedule's interval now.
fn pass_interval(
    ctx: &Context,
    slot: Option<DateTime<Utc>>,
    cadence: Option<Duration>,
) -> Option<Duration> {
    let schedule = ctx.pass_schedule.as_ref();
    match slot {
        Some(s) => (schedule?.next_after(s)? - s).to_std().ok(),
        None => cadence.or_else(|| schedule?.interval_after(Utc::now())),
    }
}

/// Whether a daemon's run of `trigger` paces its reads (rule 14). A pass
/// that rebuilds after Redis lost its data while this process ran reads
/// unpaced, as `once` does for catch-up, unless an operator capped the pace
/// (`capped`): the hashes ahead of it are missing, so no live hold waits on
/// them, and every second it saves is a second of empty halls; paced, a
/// loss at 10 k showtimes was rebuilt at the floor's 100 hashes a second
/// while another client loaded Redis (minutes for what takes seconds).
fn paced(trigger: &Trigger, capped: bool) -> bool {
    capped
        || !matches!(
            trigger,
            Trigger::Pass {
                rebuild: Rebuild::AfterLoss,
                ..
            }
        )
}

/// Whether the run's bulk reads may go to the replica: a sweep of the
/// estate (a pass, a scheduled or admin run, `once`) may. A check may not:
/// the change it was asked for may not have reached the replica yet, and it
/// reads a few showtimes. Named showtimes are an operator's repair of
/// those, read where they were written. A library caller says so itself.
fn replica_reads(trigger: &Trigger, opts: &RunOptions) -> bool {
    match trigger {
        Trigger::Pass { .. }
        | Trigger::ExpiredOrders
        | Trigger::Admin { .. }
        | Trigger::Once { .. } => opts.showtimes.is_empty(),
        Trigger::Check { .. } => false,
        Trigger::Direct { opts, .. } => opts.replica_reads,
    }
}

/// What a run came to: its report, and for a run under the pass lease
/// what the claim found.
#[derive(Debug)]
pub struct RunResult {
    pub report: RunReport,
    pub pass: PassOutcome,
}

/// What a run tells a change queue as it goes (one way: nothing is
/// answered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Deferred seats of `showtime` are ready at `at`: check it then
    /// rather than a pass later.
    GraceEnds { showtime: ShowtimeId, at: Instant },
    /// `showtimes` were read from `at` on: what changed before, this run
    /// sees (a check waiting for it need not run).
    Read {
        showtimes: Vec<ShowtimeId>,
        at: Instant,
        /// Read by a pass (whose repairs the checks may have missed).
        by_pass: bool,
    },
    /// `kind` repaired a seat (or the hash) of `showtime`.
    Repaired {
        showtime: ShowtimeId,
        kind: Kind,
        by_pass: bool,
    },
}

/// Where a run's [`Finding`]s go: a channel the change queue drains, and a
/// wake-up for the task that drains it.
#[derive(Debug, Clone)]
pub struct Outbox {
    tx: tokio::sync::mpsc::UnboundedSender<Finding>,
    wake: Arc<tokio::sync::Notify>,
}

impl Outbox {
    /// An outbox and its receiving end.
    pub fn new(
        wake: Arc<tokio::sync::Notify>,
    ) -> (Outbox, tokio::sync::mpsc::UnboundedReceiver<Finding>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Outbox { tx, wake }, rx)
    }

    pub fn send(&self, finding: Finding) {
        // The queue is gone only when the daemon stops: nothing to tell.
        if self.tx.send(finding).is_ok() {
            self.wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn once(kinds: &[Kind], dry_run: bool, showtimes: Vec<ShowtimeId>) -> Trigger {
        Trigger::Once {
            kinds: kinds.to_vec(),
            dry_run,
            showtimes,
            progress: false,
        }
    }

    #[test]
    fn seat_jobs_that_write_across_the_estate_take_the_pass_lease_and_nothing_else_does() {
        let slot = chrono::DateTime::from_timestamp_millis(1_700_000_000_000).unwrap();
        let opts = RunOptions::default();
        let dry = RunOptions {
            dry_run: true,
            ..RunOptions::default()
        };
        let named = RunOptions {
            showtimes: vec![7],
            ..RunOptions::default()
        };
        let seat = [Kind::OrphanLocks];
        let expired = [Kind::ExpiredOrders];
        let pass = Trigger::Pass {
            slot: Some(slot),
            rebuild: Rebuild::No,
            cadence: None,
        };
        // A scheduled pass claims its slot; one outside the schedule slot 0.
        assert_eq!(
            pass_lease_slot(&pass, &seat, &opts),
            Some(1_700_000_000_000)
        );
        let unscheduled = Trigger::Pass {
            slot: None,
            rebuild: Rebuild::No,
            cadence: None,
        };
        assert_eq!(pass_lease_slot(&unscheduled, &seat, &opts), Some(0));
        let admin = Trigger::Admin {
            kind: Kind::OrphanLocks,
        };
        assert_eq!(pass_lease_slot(&admin, &seat, &opts), Some(0));
        assert_eq!(
            pass_lease_slot(&once(&seat, false, vec![]), &seat, &opts),
            Some(0)
        );
        // Nothing to sweep, nothing written, or named showtimes: none.
        assert_eq!(pass_lease_slot(&pass, &expired, &opts), None);
        assert_eq!(pass_lease_slot(&pass, &seat, &dry), None);
        assert_eq!(
            pass_lease_slot(&once(&seat, false, vec![7]), &seat, &named),
            None
        );
        // A check, a job on its schedule, a library caller: never.
        let check = Trigger::Check {
            source: Source::Event,
            showtimes: vec![7],
        };
        assert_eq!(pass_lease_slot(&check, &seat, &opts), None);
        let job = Trigger::ExpiredOrders;
        assert_eq!(pass_lease_slot(&job, &expired, &opts), None);
        let direct = Trigger::Direct {
            kinds: seat.to_vec(),
            opts: opts.clone(),
        };
        assert_eq!(pass_lease_slot(&direct, &seat, &opts), None);
    }

    #[test]
    fn a_pass_that_rebuilds_after_a_data_loss_reads_unpaced_and_no_other_run() {
        let pass = |rebuild| Trigger::Pass {
            slot: None,
            rebuild,
            cadence: None,
        };
        assert!(!paced(&pass(Rebuild::AfterLoss), false));
        // An operator's cap holds for it too.
        assert!(paced(&pass(Rebuild::AfterLoss), true));
        assert!(paced(&pass(Rebuild::No), false));
        let check = Trigger::Check {
            source: Source::Event,
            showtimes: vec![1],
        };
        assert!(paced(&check, false));
    }

    #[test]
    fn sweeps_of_the_estate_may_read_the_replica_and_checks_never_do() {
        let opts = RunOptions::default();
        let named = RunOptions {
            showtimes: vec![7],
            ..RunOptions::default()
        };
        let estate = [
            Trigger::Pass {
                slot: None,
                rebuild: Rebuild::AfterLoss,
                cadence: None,
            },
            Trigger::ExpiredOrders,
            Trigger::Admin {
                kind: Kind::OrphanLocks,
            },
            once(&[Kind::OrphanLocks], false, vec![]),
        ];
        for trigger in &estate {
            assert!(replica_reads(trigger, &opts), "{trigger:?}");
            assert!(!replica_reads(trigger, &named), "{trigger:?} named");
        }
        let check = Trigger::Check {
            source: Source::Binlog,
            showtimes: vec![],
        };
        assert!(!replica_reads(&check, &opts));
        // A library caller's own choice.
        for may in [false, true] {
            let own = RunOptions {
                replica_reads: may,
                ..RunOptions::default()
            };
            let direct = Trigger::Direct {
                kinds: vec![Kind::OrphanLocks],
                opts: own.clone(),
            };
            assert_eq!(replica_reads(&direct, &own), may);
        }
    }
}
