//! A seatflow traffic simulator: the contract's application flows performed
//! for real against Redis and MySQL — hold, create order, pay, cancel,
//! refund, abandon — concurrently, with "crashes" in every window between
//! the two stores. The chaos test runs it against live reconcilers. These
//! are the application's writes (its own Lua hold, its own conditional
//! updates), not ours.
//!
//! Harm is seen by the customers themselves, in Redis's own order of
//! events, with no clock: the hold script also records, in a key of the
//! simulator's own under the showtime's tag, which flow holds each seat;
//! every later step of the flow checks, in the same atomic script as its
//! move, that its seats still hold what the contract lets them hold at that
//! step and that no one else took them meanwhile. A seat changed under a
//! customer whose order was (or was about to be) committed is harm. A Redis
//! loss ([`Simulator::lose_hash`]) bumps a counter the steps compare, so
//! seats lost with the hash are told apart from seats taken.
//!
//! The estate is whatever [`SimConfig::showtimes`] lists: each showtime with
//! the seats a customer may pick (its hall's enabled seats), so halls of
//! different sizes and disabled seats need nothing else here. A small hall
//! sells out: a customer who finds no free seat waits a step before trying
//! again, as people do, rather than spinning on a full showtime.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::Rng;
use rand::seq::IndexedRandom;
use redis::Script;
use seatflow_reconciler::store::redis::RedisConn;
use sqlx::mysql::MySqlPool;
use tokio_util::sync::CancellationToken;

use seatflow_reconciler::model::{SeatNo, ShowtimeId};
use seatflow_reconciler::store::redis::Keys;

/// seatflow's hold: every requested seat must be "0"; then all become "1".
/// Instrumented: KEYS[2] (the simulator's) records the holding flow
/// (ARGV[1]) per seat; the reply is the Redis-loss generation of KEYS[3],
/// or -1 when a seat was not free.
const HOLD_LUA: &str = r#"
for i = 2, #ARGV do
  if redis.call('HGET', KEYS[1], ARGV[i]) ~= '0' then return -1 end
end
for i = 2, #ARGV do
  redis.call('HSET', KEYS[1], ARGV[i], '1')
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[1])
end
return tonumber(redis.call('GET', KEYS[3]) or '0')
"#;

/// seatflow's seat transitions after a commit: "from" → "to" where still
/// "from" (ARGV[3], e.g. "12"; empty: a look only). Instrumented: for each
/// seat, what the flow (ARGV[1], holding since generation ARGV[2]) finds
/// before the move: "lost" when the hash was lost since, else the value
/// ("" when absent) and whether the flow still holds it ("value|own" or
/// "value|other").
const STEP_LUA: &str = r#"
local lost = tostring(tonumber(redis.call('GET', KEYS[3]) or '0')) ~= ARGV[2]
local out = {}
for i = 4, #ARGV do
  local v = redis.call('HGET', KEYS[1], ARGV[i])
  if lost then
    out[#out + 1] = 'lost'
  else
    local own = redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[1]
    out[#out + 1] = (v or '') .. (own and '|own' or '|other')
  end
  if ARGV[3] ~= '' and v == ARGV[3]:sub(1, 1) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[3]:sub(2, 2))
  end
end
return out
"#;

/// A Redis loss of one showtime: its hash gone, the loss counter bumped, in
/// one step.
const LOSE_LUA: &str = r#"
redis.call('DEL', KEYS[1])
return redis.call('INCR', KEYS[2])
"#;

/// The flows, with where each one stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Flow {
    /// hold → order → pay → "2".
    Purchase,
    /// hold → order → cancel → "0".
    Cancel,
    /// hold → order → pay → "2" → refund → "0".
    Refund,
    /// hold → order, never paid: it expires (the lost "expire" message).
    Abandon,
    /// Crash after the Redis hold, before the order: an orphan lock.
    CrashAfterHold,
    /// Crash after the pay commit, before "2": a paid seat not sold.
    CrashAfterPay,
    /// Crash after the cancel commit, before "0": a lock with no order.
    CrashAfterCancel,
    /// Crash after the refund commit, before "0": a sold orphan.
    CrashAfterRefund,
}

const WEIGHTED: [(Flow, u32); 8] = [
    (Flow::Purchase, 30),
    (Flow::Cancel, 15),
    (Flow::Refund, 10),
    (Flow::Abandon, 10),
    (Flow::CrashAfterHold, 12),
    (Flow::CrashAfterPay, 8),
    (Flow::CrashAfterCancel, 8),
    (Flow::CrashAfterRefund, 7),
];

impl Flow {
    pub fn is_crash(self) -> bool {
        matches!(
            self,
            Flow::CrashAfterHold
                | Flow::CrashAfterPay
                | Flow::CrashAfterCancel
                | Flow::CrashAfterRefund
        )
    }
}

/// What one flow did to its seats.
#[derive(Debug, Clone)]
pub struct HoldRecord {
    pub flow: Flow,
    pub showtime: ShowtimeId,
    pub seats: Vec<SeatNo>,
    pub order_id: Option<i64>,
    /// The order's INSERT was refused because a seat was occupied in MySQL
    /// although Redis had let this customer hold it.
    pub refused_occupied: bool,
    /// The showtime's hash was lost (and rebuilt) while the flow held seats.
    pub lost: bool,
    /// Seats found changed by someone else at a step where the contract
    /// protects them (the customer's order committed, or about to be):
    /// "<step>: <seat> was <value>, <own|other>".
    pub disturbed: Vec<String>,
    /// Taken right before the order's INSERT (its `created_at` is later).
    pub ordered_at: Option<DateTime<Utc>>,
    /// Taken right before the hold (the seats became "1" after it).
    pub held_at: DateTime<Utc>,
    /// The order's INSERT returned more than the orphan grace after the
    /// hold began: seatflow writes its order within the grace, so a
    /// reconciler may rightly have released the seats before it (a stalled
    /// machine kept the customer past its in-flight window). Not judged;
    /// counted by `late_orders`.
    pub late: bool,
    /// Taken right before the flow's last write to either store: where a
    /// crash flow's drift begins (an age measured from it is never short).
    pub last_write_at: DateTime<Utc>,
}

impl HoldRecord {
    /// The seats of an order that was, or was being, committed were changed
    /// under the customer (not by a Redis loss).
    pub fn harmed(&self) -> bool {
        !self.lost && !self.late && !self.disturbed.is_empty()
    }
}

#[derive(Debug, Default)]
pub struct SimLog {
    pub flows: BTreeMap<String, u64>,
    pub sold_out: u64,
    pub order_conflicts: u64,
    pub errors: u64,
    pub holds: Vec<HoldRecord>,
}

impl SimLog {
    pub fn total_flows(&self) -> u64 {
        self.flows.values().sum()
    }
    pub fn crashes(&self) -> u64 {
        self.holds.iter().filter(|h| h.flow.is_crash()).count() as u64
    }
    /// Flows whose order was written past the orphan grace (not judged).
    pub fn late_orders(&self) -> usize {
        self.holds.iter().filter(|h| h.late).count()
    }
    /// Flows whose order was written within the orphan grace: those
    /// `harmed` judges.
    pub fn timely_orders(&self) -> usize {
        let ordered = self.holds.iter().filter(|h| h.order_id.is_some());
        ordered.filter(|h| !h.late).count()
    }
}

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub showtimes: Vec<(ShowtimeId, Vec<SeatNo>)>,
    pub workers: usize,
    /// Deadline of abandoned orders (short, so they expire during the test).
    pub abandon_expiry: Duration,
    /// The longest pause between two steps of a flow (its in-flight window).
    pub max_step_delay: Duration,
    /// The reconcilers' `reconcile.orphan_grace`: an order written later
    /// than this after its hold is `HoldRecord::late`.
    pub orphan_grace: Duration,
}

#[derive(Clone)]
pub struct Simulator {
    pub pool: MySqlPool,
    pub redis: RedisConn,
    pub keys: Keys,
    hold: Arc<Script>,
    step: Arc<Script>,
    /// Flows between their hold and their last step, right now.
    in_flight: Arc<AtomicI64>,
    /// Flows that held their seats and finished so far, and crashes among them.
    finished: Arc<AtomicI64>,
    crashed: Arc<AtomicI64>,
    /// The same, by flow, while the traffic runs.
    finished_by_flow: Arc<Mutex<BTreeMap<Flow, i64>>>,
}

/// What the contract lets a flow's seats hold at a step: while its order is
/// being written or PENDING, "1".
const PENDING: &[&str] = &["1"];
/// A paid seat is "1" until seatflow (or the paid-seats repair) makes it "2".
const PAID: &[&str] = &["1", "2"];
/// Paid and moved to "2".
const SOLD: &[&str] = &["2"];
/// After the flow's own end commit the seats are not its any more.
const ANY: &[&str] = &[];

impl Simulator {
    pub fn new(pool: MySqlPool, redis: RedisConn, keys: Keys) -> Simulator {
        Simulator {
            pool,
            redis,
            keys,
            hold: Arc::new(Script::new(HOLD_LUA)),
            step: Arc::new(Script::new(STEP_LUA)),
            in_flight: Arc::new(AtomicI64::new(0)),
            finished: Arc::new(AtomicI64::new(0)),
            crashed: Arc::new(AtomicI64::new(0)),
            finished_by_flow: Arc::default(),
        }
    }

    /// Flows that held their seats and finished so far, and the crashes
    /// among them, while the traffic runs (the log comes at its end).
    pub fn flows_so_far(&self) -> (i64, i64) {
        (
            self.finished.load(Ordering::SeqCst),
            self.crashed.load(Ordering::SeqCst),
        )
    }

    /// Flows that held their seats and finished so far, by flow (a test can
    /// wait for the drift of each kind of crash, as it happens).
    pub fn finished_by_flow(&self) -> BTreeMap<Flow, i64> {
        self.finished_by_flow
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Flows that hold seats and have not taken their last step yet.
    pub fn holds_in_flight(&self) -> i64 {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// The simulator's record of who holds each seat of a showtime.
    fn owner_key(&self, showtime: ShowtimeId) -> String {
        format!("{}sim:owner:{{{showtime}}}", self.keys.prefix())
    }

    /// How many times the showtime's hash was lost.
    fn loss_key(&self, showtime: ShowtimeId) -> String {
        format!("{}sim:loss:{{{showtime}}}", self.keys.prefix())
    }

    /// Redis loses the showtime's hash (eviction, flush, failover).
    pub async fn lose_hash(&self, showtime: ShowtimeId) -> anyhow::Result<()> {
        let mut c = self.redis.clone();
        Script::new(LOSE_LUA)
            .key(self.keys.seat(showtime))
            .key(self.loss_key(showtime))
            .invoke_async::<i64>(&mut c)
            .await?;
        Ok(())
    }

    /// Runs `cfg.workers` concurrent customers until `stop` is cancelled.
    pub async fn run(&self, cfg: SimConfig, stop: CancellationToken) -> SimLog {
        let log = Arc::new(Mutex::new(SimLog::default()));
        let mut tasks = Vec::new();
        for _ in 0..cfg.workers {
            let (sim, cfg, stop, log) = (self.clone(), cfg.clone(), stop.clone(), log.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.is_cancelled() {
                    let flow = WEIGHTED
                        .choose_weighted(&mut rand::rng(), |(_, w)| *w)
                        .expect("weights")
                        .0;
                    let (record, failed) = sim.flow(flow, &cfg).await;
                    let sold_out = record.is_none() && failed.is_none();
                    if let Some(record) = &record {
                        sim.finished.fetch_add(1, Ordering::SeqCst);
                        if record.flow.is_crash() {
                            sim.crashed.fetch_add(1, Ordering::SeqCst);
                        }
                        *sim.finished_by_flow
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .entry(record.flow)
                            .or_default() += 1;
                    }
                    {
                        let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
                        if let Some(e) = failed {
                            log.errors += 1;
                            tracing::debug!(error = %e, ?flow, "simulated flow failed");
                        }
                        match record {
                            Some(record) => {
                                *log.flows.entry(format!("{flow:?}")).or_default() += 1;
                                if record.refused_occupied {
                                    log.order_conflicts += 1;
                                }
                                log.holds.push(record);
                            }
                            None => log.sold_out += 1,
                        }
                    }
                    if sold_out {
                        // Seats were taken (a small hall sells out): wait
                        // a step before trying again.
                        sim.pause(&cfg).await;
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        Arc::try_unwrap(log)
            .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
            .unwrap_or_default()
    }

    async fn pause(&self, cfg: &SimConfig) {
        let max = cfg.max_step_delay.as_millis() as u64;
        let ms = rand::rng().random_range(0..=max);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    /// One customer journey: its record (`None` when the seats were not
    /// free), and the error that cut it short, if any. What the flow saw
    /// before an error is kept.
    pub async fn flow(
        &self,
        flow: Flow,
        cfg: &SimConfig,
    ) -> (Option<HoldRecord>, Option<anyhow::Error>) {
        let (showtime, seats) = {
            let mut rng = rand::rng();
            let (id, template) = cfg.showtimes.choose(&mut rng).expect("showtimes");
            let n = rng.random_range(1..=2usize).min(template.len());
            let seats: Vec<SeatNo> = template.choose_multiple(&mut rng, n).cloned().collect();
            (*id, seats)
        };
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut c = self.redis.clone();
        let mut hold = self.hold.key(self.keys.seat(showtime));
        hold.key(self.owner_key(showtime))
            .key(self.loss_key(showtime))
            .arg(&token);
        for s in &seats {
            hold.arg(s);
        }
        let held_at = Utc::now();
        let generation = match hold.invoke_async::<i64>(&mut c).await {
            Ok(-1) => return (None, None),
            Ok(g) => g,
            Err(e) => return (None, Some(e.into())),
        };
        let mut held = Held {
            sim: self,
            token,
            generation,
            record: HoldRecord {
                flow,
                showtime,
                seats,
                order_id: None,
                refused_occupied: false,
                lost: false,
                disturbed: Vec::new(),
                ordered_at: None,
                held_at,
                late: false,
                last_write_at: held_at,
            },
        };
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let outcome = held.steps(cfg).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        (Some(held.record), outcome.err())
    }

    /// Whether the order has exactly this status now.
    async fn order_is(&self, order: i64, status: &str) -> anyhow::Result<bool> {
        let now: String = sqlx::query_scalar("SELECT status FROM ticket_order WHERE id = ?")
            .bind(order)
            .fetch_one(&self.pool)
            .await?;
        Ok(now == status)
    }

    async fn insert_order(
        &self,
        showtime: ShowtimeId,
        seats: &[SeatNo],
        expiry: Duration,
    ) -> anyhow::Result<i64> {
        let mut tx = self.pool.begin().await?;
        let no = format!("SIM-{}", uuid::Uuid::new_v4().simple());
        let id = sqlx::query(
            "INSERT INTO ticket_order (order_no, user_id, showtime_id, status, expires_at, created_at) \
             VALUES (?, 42, ?, 'PENDING', UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(3))",
        )
        .bind(&no)
        .bind(showtime)
        .bind(expiry.as_micros() as i64)
        .execute(&mut *tx)
        .await?
        .last_insert_id() as i64;
        for seat in seats {
            sqlx::query("INSERT INTO order_seat (order_id, showtime_id, seat_no, active) VALUES (?, ?, ?, 1)")
                .bind(id)
                .bind(showtime)
                .bind(seat)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(id)
    }

    /// seatflow's cancel/refund: conditional status change and `active =
    /// NULL` in one transaction. False when the order was no longer `from`.
    async fn end_order(&self, order: i64, from: &str, to: &str) -> anyhow::Result<bool> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE ticket_order SET status = ?, cancelled_at = UTC_TIMESTAMP(3), cancel_reason = 'USER' \
             WHERE id = ? AND status = ?",
        )
        .bind(to)
        .bind(order)
        .bind(from)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query("UPDATE order_seat SET active = NULL WHERE order_id = ?")
            .bind(order)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }
}

/// A flow that holds its seats: its steps after the hold.
struct Held<'a> {
    sim: &'a Simulator,
    token: String,
    generation: i64,
    record: HoldRecord,
}

impl Held<'_> {
    /// The flow after its hold. Each step that the contract protects looks
    /// at the seats (`PENDING`, `PAID`, `SOLD`): right before each of the
    /// flow's commits and after its pay commit, so every window in which
    /// its order was being written, valid or paid is covered up to its end.
    async fn steps(&mut self, cfg: &SimConfig) -> anyhow::Result<()> {
        let flow = self.record.flow;
        if flow == Flow::CrashAfterHold {
            return Ok(());
        }
        let sim = self.sim;
        sim.pause(cfg).await;

        let expiry = if flow == Flow::Abandon {
            cfg.abandon_expiry
        } else {
            Duration::from_secs(900)
        };
        self.record.ordered_at = Some(Utc::now());
        self.record.last_write_at = self.record.ordered_at.unwrap_or_else(Utc::now);
        let order = match sim
            .insert_order(self.record.showtime, &self.record.seats, expiry)
            .await
        {
            Ok(id) => {
                let took = (Utc::now() - self.record.held_at)
                    .to_std()
                    .unwrap_or_default();
                self.record.late = took > cfg.orphan_grace;
                id
            }
            Err(e) => {
                // uq_occupancy refused the seat: seatflow compensates its hold.
                self.record.refused_occupied = e.to_string().contains("Duplicate entry");
                self.step("10", ANY, "compensation").await?;
                tracing::debug!(error = %e, "order insert refused; hold compensated");
                return Ok(());
            }
        };
        self.record.order_id = Some(order);
        sim.pause(cfg).await;
        if flow == Flow::Abandon {
            // The customer is gone; the order stays PENDING until it expires
            // and is cancelled by the reconciler, which may have happened
            // by now on a slow machine: then the seats are not protected.
            self.step("", PENDING, "abandoned, order pending").await?;
            if !self.record.disturbed.is_empty() && !sim.order_is(order, "PENDING").await? {
                self.record.disturbed.clear();
            }
            return Ok(());
        }

        if flow == Flow::Cancel || flow == Flow::CrashAfterCancel {
            self.step("", PENDING, "before cancel").await?;
            self.record.last_write_at = Utc::now();
            if sim.end_order(order, "PENDING", "CANCELLED").await? && flow == Flow::Cancel {
                self.step("10", ANY, "cancel").await?;
            }
            return Ok(());
        }
        self.step("", PENDING, "before pay").await?;
        self.record.last_write_at = Utc::now();
        let paid = sqlx::query(
            "UPDATE ticket_order SET status = 'PAID', paid_at = UTC_TIMESTAMP(3) WHERE id = ? AND status = 'PENDING'",
        )
        .bind(order)
        .execute(&sim.pool)
        .await?
        .rows_affected()
            == 1;
        if !paid {
            return Ok(());
        }
        if flow == Flow::CrashAfterPay {
            // Crashed before "2": only a look, no move.
            self.step("", PAID, "paid, crashed before \"2\"").await?;
            return Ok(());
        }
        self.step("12", PAID, "pay").await?;
        if flow == Flow::Purchase {
            return Ok(());
        }
        sim.pause(cfg).await;
        self.step("", SOLD, "before refund").await?;
        self.record.last_write_at = Utc::now();
        if sim.end_order(order, "PAID", "REFUNDED").await? && flow == Flow::Refund {
            self.step("20", ANY, "refund").await?;
        }
        Ok(())
    }

    /// seatflow's move `from_to` ("" for none) of the flow's seats, and what
    /// it found: a seat whose value is not in `allowed` or that someone else
    /// holds is recorded as disturbed (`ANY`: not judged).
    async fn step(&mut self, from_to: &str, allowed: &[&str], what: &str) -> anyhow::Result<()> {
        let (sim, showtime) = (self.sim, self.record.showtime);
        if !from_to.is_empty() {
            self.record.last_write_at = Utc::now();
        }
        let mut c = sim.redis.clone();
        let mut inv = sim.step.key(sim.keys.seat(showtime));
        inv.key(sim.owner_key(showtime))
            .key(sim.loss_key(showtime))
            .arg(&self.token)
            .arg(self.generation)
            .arg(from_to);
        for s in &self.record.seats {
            inv.arg(s);
        }
        let found: Vec<String> = inv.invoke_async(&mut c).await?;
        for (seat, found) in self.record.seats.iter().zip(found) {
            if found == "lost" {
                self.record.lost = true;
                continue;
            }
            if allowed.is_empty() {
                continue;
            }
            let (value, holder) = found.split_once('|').unwrap_or((&found, "other"));
            if holder != "own" || !allowed.contains(&value) {
                self.record
                    .disturbed
                    .push(format!("{what}: {seat} was {value:?}, {holder}"));
            }
        }
        Ok(())
    }
}
