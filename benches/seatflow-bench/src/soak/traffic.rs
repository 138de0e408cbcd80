//! Live seatflow traffic during the soak (`--traffic-showtimes`): the chaos
//! test's customers (`seatflow-simulator`) buy, cancel, refund and abandon
//! orders on a share of the estate, and crash in each of the contract's
//! windows; now and then a showtime's hash is lost. At the end, each crash's
//! drift is matched with its repair in the audit, and the delay from the
//! moment it became repairable is reported per kind and per what found it
//! (the run's `check` source: `event`, `grace`, `deadline`, or `sweep`).
//!
//! Which source can see what: a crash after the hold leaves a Redis write
//! (an event) and no order; a lost hash is a `del` event; an abandoned order
//! has a deadline. A crash after a MySQL commit (pay, cancel, refund) leaves
//! nothing in Redis to hear of: only a sweep (or a MySQL change source)
//! finds it.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, NaiveDateTime, Utc};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use seatflow_reconciler::model::ShowtimeId;
use seatflow_reconciler::store::redis::RedisConn;
use seatflow_simulator::{Flow, HoldRecord, SimConfig, SimLog, Simulator};

use super::drift::{FixRow, nearest_rank};
use crate::bench::Bench;
use crate::estate::Estate;

/// How long an abandoned order stays PENDING (then it expires).
const ABANDON_EXPIRY: Duration = Duration::from_secs(30);
/// The longest pause between two steps of a flow (a customer's think time).
const MAX_STEP_DELAY: Duration = Duration::from_secs(2);
/// Slowest repairs kept per kind (in the JSON).
const SLOWEST_KEPT: usize = 5;

/// The drift a crash (or a loss) leaves, and the repair that ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CrashKind {
    /// Crash after the hold, before the order: `"1"` with no order.
    OrphanLock,
    /// Crash after the cancel commit, before `"0"`.
    CancelledLock,
    /// Crash after the pay commit, before `"2"`.
    PaidNotSold,
    /// Crash after the refund commit, before `"0"`: a sold orphan.
    RefundedSold,
    /// An abandoned order, past its deadline.
    ExpiredOrder,
    /// The showtime's hash lost (`DEL`, as an eviction or a flush would).
    LostHash,
    /// Crash after opening sales (`SCHEDULED` -> `ON_SALE` committed),
    /// before the hash is warmed: only MySQL knows.
    OpenedNotWarmed,
}

impl CrashKind {
    pub fn label(self) -> &'static str {
        match self {
            CrashKind::OrphanLock => "orphan lock (crash after hold)",
            CrashKind::CancelledLock => "lock of a cancelled order",
            CrashKind::PaidNotSold => "paid seat not sold",
            CrashKind::RefundedSold => "refunded seat still sold",
            CrashKind::ExpiredOrder => "expired order",
            CrashKind::LostHash => "lost seat hash",
            CrashKind::OpenedNotWarmed => "opened, hash never warmed",
        }
    }

    /// The audit's kind of its repair.
    fn repair(self) -> &'static str {
        match self {
            CrashKind::OrphanLock | CrashKind::CancelledLock | CrashKind::RefundedSold => {
                "seat_released"
            }
            CrashKind::PaidNotSold => "seat_set",
            CrashKind::ExpiredOrder => "order_cancelled",
            CrashKind::LostHash | CrashKind::OpenedNotWarmed => "hash_rebuilt",
        }
    }

    /// What a crash flow leaves (None: the flow ends cleanly).
    fn of(flow: Flow) -> Option<CrashKind> {
        match flow {
            Flow::CrashAfterHold => Some(CrashKind::OrphanLock),
            Flow::CrashAfterCancel => Some(CrashKind::CancelledLock),
            Flow::CrashAfterPay => Some(CrashKind::PaidNotSold),
            Flow::CrashAfterRefund => Some(CrashKind::RefundedSold),
            Flow::Abandon => Some(CrashKind::ExpiredOrder),
            Flow::Purchase | Flow::Cancel | Flow::Refund => None,
        }
    }
}

/// The waits the reconciler must keep, as the daemons were configured.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Waits {
    pub orphan_grace_s: f64,
    pub expired_order_buffer_s: f64,
}

/// One drift to be repaired: from when, what ends it.
#[derive(Debug, Clone, PartialEq)]
struct Drift {
    kind: CrashKind,
    showtime: ShowtimeId,
    /// The seat (seat repairs) or the order (`order_cancelled`); neither
    /// for a lost hash.
    seat: Option<String>,
    order: Option<i64>,
    /// Where it began: no repair before this one counts.
    since: NaiveDateTime,
    /// When the reconciler may repair it at the earliest (after the grace
    /// or the deadline and its buffer).
    repairable: NaiveDateTime,
}

/// Delays of one kind, or of one kind and source.
#[derive(Debug, Default, Serialize)]
pub struct Delays {
    pub repaired: usize,
    pub p50_s: Option<f64>,
    pub p99_s: Option<f64>,
    pub max_s: Option<f64>,
}

impl Delays {
    fn of(mut v: Vec<f64>) -> Delays {
        v.sort_by(f64::total_cmp);
        Delays {
            repaired: v.len(),
            p50_s: nearest_rank(&v, 0.5),
            p99_s: nearest_rank(&v, 0.99),
            max_s: v.last().copied(),
        }
    }
}

#[derive(Debug, Default, Serialize)]
pub struct KindDelays {
    pub drifts: usize,
    /// Not repaired by the soak's end.
    pub open: usize,
    /// Delay from repairable to repaired, all sources.
    pub all: Delays,
    /// The same by what found it.
    pub by_source: BTreeMap<String, Delays>,
    /// The slowest repairs, to look into: what, when it began, its delay
    /// and what found it.
    pub slowest: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct TrafficReport {
    pub showtimes: usize,
    pub workers: usize,
    pub lose_every_s: u64,
    pub waits: Option<Waits>,
    /// Flows finished, by flow.
    pub flows: BTreeMap<String, u64>,
    pub flow_errors: u64,
    /// Drifts left out: their hash was lost while the crash flow held its
    /// seats or afterwards, before a repair of the seat (the rebuild from
    /// MySQL settled them), or the flow's order was refused.
    pub settled_by_a_loss: usize,
    /// Customers whose committed (or committing) order's seats were changed
    /// under them: must be zero.
    pub harmed: usize,
    /// Customers whose order came later than the orphan grace after their
    /// hold (a stalled host): the contract no longer protects their seats,
    /// so `harmed` does not judge them.
    pub late: usize,
    pub harm_examples: Vec<String>,
    pub by_kind: BTreeMap<CrashKind, KindDelays>,
}

/// The simulator running, and the losses and openings made so far.
pub struct Traffic {
    sim: Simulator,
    pool: sqlx::MySqlPool,
    showtimes: Vec<ShowtimeId>,
    workers: usize,
    rng: SmallRng,
    stop: CancellationToken,
    task: Option<JoinHandle<SimLog>>,
    losses: Vec<(ShowtimeId, DateTime<Utc>)>,
    /// `SCHEDULED` showtimes left to open, soonest last.
    to_open: Vec<ShowtimeId>,
    openings: Vec<(ShowtimeId, DateTime<Utc>)>,
}

/// Showtimes created `SCHEDULED` (after the estate's ids) for the openings:
/// one every 20 s for an hour.
const TO_OPEN: usize = 180;

/// The showtimes sales will open for, after the estate's ids.
fn scheduled(estate: &Estate) -> Vec<ShowtimeId> {
    let first = estate.showtimes as ShowtimeId + 1;
    (first..first + TO_OPEN as ShowtimeId).collect()
}

/// Creates the showtimes sales will open for, `SCHEDULED`: before the
/// daemons start, so that their creation (one transaction naming them all:
/// a burst of binlog checks) is not inside the measured window.
pub async fn schedule_openings(bench: &Bench, estate: &Estate) -> Result<()> {
    let mut insert = sqlx::QueryBuilder::<sqlx::MySql>::new(
        "INSERT INTO showtime (id, movie_id, hall_id, starts_at, status) ",
    );
    insert.push_values(scheduled(estate), |mut row, id| {
        row.push_bind(id)
            .push("1, 1, UTC_TIMESTAMP(3) + INTERVAL 1 DAY, 'SCHEDULED'");
    });
    insert.build().execute(&bench.pool).await?;
    Ok(())
}

/// Drift the soak made itself (not a customer's crash): what, where, when.
pub type Made = (CrashKind, ShowtimeId, DateTime<Utc>);

impl Traffic {
    /// Starts `workers` customers on `count` showtimes spread over the estate.
    pub async fn start(
        bench: &Bench,
        estate: &Estate,
        count: usize,
        workers: usize,
        orphan_grace: Duration,
    ) -> Result<Traffic> {
        let client = redis::Client::open(bench.redis_url.as_str())?;
        let conn = redis::aio::ConnectionManager::new(client).await?;
        let sim = Simulator::new(
            bench.pool.clone(),
            RedisConn::Single(conn),
            bench.keys.clone(),
        );
        let count = count.clamp(1, estate.showtimes);
        let showtimes: Vec<ShowtimeId> = (0..count)
            .map(|i| (i * estate.showtimes / count) as ShowtimeId + 1)
            .collect();
        let cfg = SimConfig {
            showtimes: showtimes
                .iter()
                .map(|id| (*id, estate.seat_names.clone()))
                .collect(),
            workers,
            abandon_expiry: ABANDON_EXPIRY,
            max_step_delay: MAX_STEP_DELAY,
            orphan_grace,
        };
        let mut to_open = scheduled(estate);
        to_open.reverse();
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let (sim, stop) = (sim.clone(), stop.clone());
            async move { sim.run(cfg, stop).await }
        });
        Ok(Traffic {
            sim,
            pool: bench.pool.clone(),
            showtimes,
            workers,
            rng: SmallRng::seed_from_u64(estate.seed ^ 0x7AFF1C),
            stop,
            task: Some(task),
            losses: Vec::new(),
            to_open,
            openings: Vec::new(),
        })
    }

    /// Sales open for one more showtime, and the hash is never warmed (the
    /// application crashed after the commit). False when none is left.
    pub async fn open_one(&mut self) -> Result<bool> {
        let Some(id) = self.to_open.pop() else {
            return Ok(false);
        };
        let at = Utc::now();
        sqlx::query("UPDATE showtime SET status = 'ON_SALE' WHERE id = ? AND status = 'SCHEDULED'")
            .bind(id)
            .execute(&self.pool)
            .await?;
        self.openings.push((id, at));
        Ok(true)
    }

    /// Redis loses one traffic showtime's hash.
    pub async fn lose_one(&mut self) -> Result<()> {
        let id = self.showtimes[self.rng.random_range(0..self.showtimes.len())];
        // Before the write: an age measured from here is never too short.
        let at = Utc::now();
        self.sim.lose_hash(id).await?;
        self.losses.push((id, at));
        Ok(())
    }

    /// Stops the customers (each finishes its flow) and returns their log,
    /// with the losses and openings.
    pub async fn finish(&mut self) -> Result<(SimLog, Vec<Made>)> {
        self.stop.cancel();
        let log = match self.task.take() {
            Some(t) => t.await?,
            None => SimLog::default(),
        };
        let losses = self
            .losses
            .drain(..)
            .map(|(s, at)| (CrashKind::LostHash, s, at));
        let openings = self
            .openings
            .drain(..)
            .map(|(s, at)| (CrashKind::OpenedNotWarmed, s, at));
        Ok((log, losses.chain(openings).collect()))
    }

    pub fn report(
        &self,
        log: &SimLog,
        made: &[Made],
        fixes: &[FixRow],
        waits: Waits,
        lose_every_s: u64,
    ) -> TrafficReport {
        let drifts = drifts(&log.holds, made, waits);
        let mut report = delays(&drifts, fixes);
        report.showtimes = self.showtimes.len();
        report.workers = self.workers;
        report.lose_every_s = lose_every_s;
        report.waits = Some(waits);
        report.flows = log.flows.clone();
        report.flow_errors = log.errors;
        report.settled_by_a_loss += log
            .holds
            .iter()
            .filter(|h| CrashKind::of(h.flow).is_some_and(|k| left_out(h, k)))
            .count();
        let harmed: Vec<&HoldRecord> = log.holds.iter().filter(|h| h.harmed()).collect();
        report.harmed = harmed.len();
        report.late = log.late_orders();
        report.harm_examples = harmed
            .iter()
            .take(5)
            .map(|h| {
                format!(
                    "showtime {} {:?} order {:?}: {}",
                    h.showtime,
                    h.flow,
                    h.order_id,
                    h.disturbed.join("; ")
                )
            })
            .collect();
        report
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn secs(d: f64) -> chrono::Duration {
    chrono::Duration::milliseconds((d * 1000.0).round() as i64)
}

/// A crash flow that left no drift of its kind: its hash was lost while it
/// held seats (the rebuild from MySQL settled it), or its order never came
/// to be (but for the orphan lock, which has none by design).
fn left_out(h: &HoldRecord, kind: CrashKind) -> bool {
    h.lost || (kind != CrashKind::OrphanLock && h.order_id.is_none())
}

/// The drifts the crash flows, the losses and the openings left.
fn drifts(holds: &[HoldRecord], made: &[Made], w: Waits) -> Vec<Drift> {
    let grace = secs(w.orphan_grace_s);
    let mut out = Vec::new();
    for h in holds {
        let Some(kind) = CrashKind::of(h.flow) else {
            continue;
        };
        if left_out(h, kind) {
            continue;
        }
        let since = h.last_write_at.naive_utc();
        match kind {
            CrashKind::ExpiredOrder => {
                let Some(ordered) = h.ordered_at else {
                    continue;
                };
                let due = ordered.naive_utc()
                    + secs(ABANDON_EXPIRY.as_secs_f64() + w.expired_order_buffer_s);
                out.push(Drift {
                    kind,
                    showtime: h.showtime,
                    seat: None,
                    order: h.order_id,
                    since,
                    repairable: due,
                });
            }
            _ => {
                let wait = match kind {
                    CrashKind::PaidNotSold => chrono::Duration::zero(),
                    _ => grace,
                };
                for seat in &h.seats {
                    out.push(Drift {
                        kind,
                        showtime: h.showtime,
                        seat: Some(seat.clone()),
                        order: None,
                        since,
                        repairable: since + wait,
                    });
                }
            }
        }
    }
    for (kind, showtime, at) in made {
        out.push(Drift {
            kind: *kind,
            showtime: *showtime,
            seat: None,
            order: None,
            since: at.naive_utc(),
            repairable: at.naive_utc(),
        });
    }
    out
}

/// Matches each drift with the first repair of its kind of the same seat
/// (order, hash) at or after it began; the delay counts from when it became
/// repairable. A seat's drift whose showtime's hash was lost after it began
/// and before that repair was settled by the loss (the rebuild from MySQL
/// set the seat as MySQL has it; no seat repair follows): counted apart,
/// as a crash flow's own loss is (else a later, unrelated repair of the
/// seat would be taken for its own).
fn delays(drifts: &[Drift], fixes: &[FixRow]) -> TrafficReport {
    let mut losses: HashMap<ShowtimeId, Vec<NaiveDateTime>> = HashMap::new();
    for d in drifts.iter().filter(|d| d.kind == CrashKind::LostHash) {
        losses.entry(d.showtime).or_default().push(d.since);
    }
    let lost_between = |d: &Drift, until: Option<NaiveDateTime>| {
        d.seat.is_some()
            && losses.get(&d.showtime).is_some_and(|at| {
                at.iter()
                    .any(|t| *t >= d.since && until.is_none_or(|u| *t < u))
            })
    };
    type Key<'a> = (&'a str, i64, Option<&'a str>, Option<i64>);
    let mut by_key: HashMap<Key, Vec<&FixRow>> = HashMap::new();
    for f in fixes {
        let (seat, order) = match f.kind.as_str() {
            "order_cancelled" => (None, f.order_id),
            "hash_rebuilt" => (None, None),
            _ => (f.seat.as_deref(), None),
        };
        by_key
            .entry((f.kind.as_str(), f.showtime, seat, order))
            .or_default()
            .push(f);
    }
    let mut report = TrafficReport::default();
    let mut slowest: BTreeMap<CrashKind, Vec<(f64, String)>> = BTreeMap::new();
    let mut all: BTreeMap<CrashKind, Vec<f64>> = BTreeMap::new();
    let mut by_source: BTreeMap<(CrashKind, String), Vec<f64>> = BTreeMap::new();
    for d in drifts {
        let key = (d.kind.repair(), d.showtime, d.seat.as_deref(), d.order);
        let repair = by_key.get(&key).and_then(|fs| {
            fs.iter()
                .filter(|f| f.fixed_at >= d.since)
                .min_by_key(|f| f.fixed_at)
        });
        if lost_between(d, repair.map(|f| f.fixed_at)) {
            report.settled_by_a_loss += 1;
            continue;
        }
        let k = report.by_kind.entry(d.kind).or_default();
        k.drifts += 1;
        let Some(f) = repair else {
            k.open += 1;
            continue;
        };
        let delay = (f.fixed_at - d.repairable).num_milliseconds() as f64 / 1000.0;
        all.entry(d.kind).or_default().push(delay);
        slowest.entry(d.kind).or_default().push((
            delay,
            format!(
                "showtime {} {}: began {}, repaired {:+.1} s after repairable, by {} ({})",
                d.showtime,
                d.seat
                    .clone()
                    .or(d.order.map(|o| format!("order {o}")))
                    .unwrap_or_else(|| "hash".into()),
                d.since.format("%H:%M:%S%.3f"),
                delay,
                f.found_by,
                f.job
            ),
        ));
        by_source
            .entry((d.kind, f.found_by.clone()))
            .or_default()
            .push(delay);
    }
    for (kind, v) in all {
        report.by_kind.entry(kind).or_default().all = Delays::of(v);
    }
    for (kind, mut v) in slowest {
        v.sort_by(|a, b| b.0.total_cmp(&a.0));
        report.by_kind.entry(kind).or_default().slowest =
            v.into_iter().take(SLOWEST_KEPT).map(|(_, s)| s).collect();
    }
    for ((kind, source), v) in by_source {
        report
            .by_kind
            .entry(kind)
            .or_default()
            .by_source
            .insert(source, Delays::of(v));
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn hold(flow: Flow, seats: &[&str], order: Option<i64>, written: &str) -> HoldRecord {
        HoldRecord {
            flow,
            showtime: 7,
            seats: seats.iter().map(|s| s.to_string()).collect(),
            order_id: order,
            refused_occupied: false,
            lost: false,
            disturbed: Vec::new(),
            ordered_at: order.map(|_| at(written)),
            held_at: at(written),
            late: false,
            last_write_at: at(written),
        }
    }

    fn fix(kind: &str, seat: Option<&str>, order: Option<i64>, t: &str, by: &str) -> FixRow {
        FixRow {
            showtime: 7,
            seat: seat.map(String::from),
            order_id: order,
            job: "x".into(),
            kind: kind.into(),
            fixed_at: at(t).naive_utc(),
            found_by: by.into(),
        }
    }

    #[test]
    fn each_crash_is_timed_from_when_it_became_repairable_and_by_its_finder() {
        let waits = Waits {
            orphan_grace_s: 120.0,
            expired_order_buffer_s: 60.0,
        };
        let mut lost = hold(Flow::CrashAfterHold, &["B-1"], None, "2026-01-01T00:00:00Z");
        lost.lost = true;
        let holds = vec![
            hold(
                Flow::CrashAfterHold,
                &["A-1", "A-2"],
                None,
                "2026-01-01T00:00:00Z",
            ),
            hold(
                Flow::CrashAfterPay,
                &["A-3"],
                Some(11),
                "2026-01-01T00:00:00Z",
            ),
            hold(Flow::Abandon, &["A-4"], Some(12), "2026-01-01T00:00:00Z"),
            hold(Flow::Purchase, &["A-5"], Some(13), "2026-01-01T00:00:00Z"),
            // Refused: its order never came to be, nothing to repair.
            hold(
                Flow::CrashAfterCancel,
                &["A-6"],
                None,
                "2026-01-01T00:00:00Z",
            ),
            lost,
        ];
        let made = [
            (CrashKind::LostHash, 9, at("2026-01-01T00:01:00Z")),
            (CrashKind::OpenedNotWarmed, 8, at("2026-01-01T00:01:10Z")),
        ];
        let d = drifts(&holds, &made, waits);
        assert_eq!(d.len(), 6, "{d:?}");
        let mut warmed = fix("hash_rebuilt", None, None, "2026-01-01T00:01:13Z", "binlog");
        warmed.showtime = 8;
        let mut rebuilt = fix("hash_rebuilt", None, None, "2026-01-01T00:01:02Z", "event");
        rebuilt.showtime = 9;
        let fixes = vec![
            // Before the crash: not its repair.
            fix(
                "seat_released",
                Some("A-1"),
                None,
                "2025-12-31T00:00:00Z",
                "sweep",
            ),
            fix(
                "seat_released",
                Some("A-1"),
                None,
                "2026-01-01T00:02:03Z",
                "grace",
            ),
            fix(
                "seat_released",
                Some("A-2"),
                None,
                "2026-01-01T00:02:04Z",
                "grace",
            ),
            fix(
                "seat_set",
                Some("A-3"),
                None,
                "2026-01-01T00:00:40Z",
                "sweep",
            ),
            fix(
                "order_cancelled",
                None,
                Some(12),
                "2026-01-01T00:01:31Z",
                "deadline",
            ),
            rebuilt,
            warmed,
        ];
        let r = delays(&d, &fixes);
        let orphan = &r.by_kind[&CrashKind::OrphanLock];
        assert_eq!((orphan.drifts, orphan.open), (2, 0));
        assert_eq!((orphan.all.p50_s, orphan.all.max_s), (Some(3.0), Some(4.0)));
        assert_eq!(orphan.by_source["grace"].repaired, 2);
        assert_eq!(r.by_kind[&CrashKind::PaidNotSold].all.max_s, Some(40.0));
        // 30 s expiry and 60 s buffer after the order: due at 00:01:30.
        let expired = &r.by_kind[&CrashKind::ExpiredOrder];
        assert_eq!(expired.by_source["deadline"].max_s, Some(1.0));
        assert_eq!(r.by_kind[&CrashKind::LostHash].all.max_s, Some(2.0));
        let opened = &r.by_kind[&CrashKind::OpenedNotWarmed];
        assert_eq!(opened.by_source["binlog"].max_s, Some(3.0));
        assert!(!r.by_kind.contains_key(&CrashKind::CancelledLock));

        // Without the fixes, all are open.
        let none = delays(&d, &[]);
        assert_eq!(none.by_kind.values().map(|k| k.open).sum::<usize>(), 6);
    }

    /// The hash lost while an orphan waits its grace: the rebuild settles
    /// the seat, and a later release of it (another order's, expired) is not
    /// this drift's repair. A loss before the drift, or after its repair,
    /// changes nothing.
    #[test]
    fn a_seat_drift_whose_hash_is_lost_before_its_repair_is_settled_by_the_loss() {
        let waits = Waits {
            orphan_grace_s: 120.0,
            expired_order_buffer_s: 60.0,
        };
        let holds = vec![
            hold(Flow::CrashAfterHold, &["A-1"], None, "2026-01-01T00:00:00Z"),
            hold(Flow::CrashAfterHold, &["A-2"], None, "2026-01-01T00:10:00Z"),
        ];
        let made = [
            (CrashKind::LostHash, 7, at("2026-01-01T00:01:00Z")),
            (CrashKind::LostHash, 7, at("2026-01-01T00:13:00Z")),
        ];
        let d = drifts(&holds, &made, waits);
        let fixes = vec![
            fix(
                "seat_released",
                Some("A-1"),
                None,
                "2026-01-01T00:20:00Z",
                "deadline",
            ),
            fix(
                "seat_released",
                Some("A-2"),
                None,
                "2026-01-01T00:12:02Z",
                "grace",
            ),
        ];
        let r = delays(&d, &fixes);
        assert_eq!(r.settled_by_a_loss, 1);
        let orphan = &r.by_kind[&CrashKind::OrphanLock];
        assert_eq!((orphan.drifts, orphan.open), (1, 0));
        assert_eq!(orphan.all.max_s, Some(2.0));
        // Not repaired, but its hash lost: settled too, not open.
        let none = delays(&d, &[]);
        assert_eq!(none.settled_by_a_loss, 2);
        assert!(!none.by_kind.contains_key(&CrashKind::OrphanLock));
    }
}
