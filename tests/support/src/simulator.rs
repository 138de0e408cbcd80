//! A seatflow traffic simulator: the contract's application flows performed
//! for real against Redis and MySQL — hold, create order, pay, cancel,
//! refund, abandon — concurrently, with "crashes" in every window between
//! the two stores. The chaos test runs it against live reconcilers and
//! checks its log against the audit trail. These are the application's
//! writes (its own Lua hold, its own conditional updates), not ours.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::Rng;
use rand::seq::IndexedRandom;
use redis::Script;
use seatflow_reconciler::store::redis::RedisConn;
use sqlx::mysql::MySqlPool;
use tokio_util::sync::CancellationToken;

use seatflow_reconciler::model::{SeatNo, ShowtimeId};
use seatflow_reconciler::store::redis::Keys;

/// seatflow's hold: every requested seat must be "0"; then all become "1".
const HOLD_LUA: &str = r#"
for i = 1, #ARGV do
  if redis.call('HGET', KEYS[1], ARGV[i]) ~= '0' then return 0 end
end
for i = 1, #ARGV do redis.call('HSET', KEYS[1], ARGV[i], '1') end
return 1
"#;

/// seatflow's seat transitions after a commit: "from" → "to" where still "from".
const MOVE_LUA: &str = r#"
for i = 2, #ARGV do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[1]:sub(1, 1) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[1]:sub(2, 2))
  end
end
return 1
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

/// What one flow did to its seats, with wall-clock times in ms.
#[derive(Debug, Clone)]
pub struct HoldRecord {
    pub flow: Flow,
    pub showtime: ShowtimeId,
    pub seats: Vec<SeatNo>,
    /// Taken just before the hold script ran.
    pub held_at: i64,
    pub order_id: Option<i64>,
    /// Taken just after the order's INSERT committed.
    pub committed_at: Option<i64>,
    /// Taken just after the pay commit.
    pub paid_at: Option<i64>,
    /// Taken just after the cancel or refund commit (occupancy ended).
    pub ended_at: Option<i64>,
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
}

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub showtimes: Vec<(ShowtimeId, Vec<SeatNo>)>,
    pub workers: usize,
    /// Deadline of abandoned orders (short, so they expire during the test).
    pub abandon_expiry: Duration,
    /// The longest pause between two steps of a flow (its in-flight window).
    pub max_step_delay: Duration,
}

#[derive(Clone)]
pub struct Simulator {
    pub pool: MySqlPool,
    pub redis: RedisConn,
    pub keys: Keys,
    hold: Arc<Script>,
    moves: Arc<Script>,
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

impl Simulator {
    pub fn new(pool: MySqlPool, redis: RedisConn, keys: Keys) -> Simulator {
        Simulator {
            pool,
            redis,
            keys,
            hold: Arc::new(Script::new(HOLD_LUA)),
            moves: Arc::new(Script::new(MOVE_LUA)),
        }
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
                    let outcome = sim.flow(flow, &cfg).await;
                    let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
                    match outcome {
                        Ok(Some(record)) => {
                            *log.flows.entry(format!("{flow:?}")).or_default() += 1;
                            if record.order_id.is_none() && flow != Flow::CrashAfterHold {
                                log.order_conflicts += 1;
                            }
                            log.holds.push(record);
                        }
                        Ok(None) => log.sold_out += 1,
                        Err(e) => {
                            log.errors += 1;
                            tracing::debug!(error = %e, ?flow, "simulated flow failed");
                        }
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

    async fn move_seats(
        &self,
        showtime: ShowtimeId,
        seats: &[SeatNo],
        from_to: &str,
    ) -> anyhow::Result<()> {
        let mut c = self.redis.clone();
        let mut inv = self.moves.key(self.keys.seat(showtime));
        inv.arg(from_to);
        for s in seats {
            inv.arg(s);
        }
        inv.invoke_async::<i64>(&mut c).await?;
        Ok(())
    }

    /// One customer journey. `None` when the seats were not free.
    pub async fn flow(&self, flow: Flow, cfg: &SimConfig) -> anyhow::Result<Option<HoldRecord>> {
        let (showtime, seats) = {
            let mut rng = rand::rng();
            let (id, template) = cfg.showtimes.choose(&mut rng).expect("showtimes");
            let n = rng.random_range(1..=2usize).min(template.len());
            let seats: Vec<SeatNo> = template.choose_multiple(&mut rng, n).cloned().collect();
            (*id, seats)
        };
        let mut record = HoldRecord {
            flow,
            showtime,
            seats: seats.clone(),
            held_at: now_ms(),
            order_id: None,
            committed_at: None,
            paid_at: None,
            ended_at: None,
        };
        let mut c = self.redis.clone();
        let mut hold = self.hold.key(self.keys.seat(showtime));
        for s in &seats {
            hold.arg(s);
        }
        if hold.invoke_async::<i64>(&mut c).await? != 1 {
            return Ok(None);
        }
        if flow == Flow::CrashAfterHold {
            return Ok(Some(record));
        }
        self.pause(cfg).await;

        let expiry = if flow == Flow::Abandon {
            cfg.abandon_expiry
        } else {
            Duration::from_secs(900)
        };
        let order = match self.insert_order(showtime, &seats, expiry).await {
            Ok(id) => id,
            Err(e) => {
                // uq_occupancy refused the seat: seatflow compensates its hold.
                self.move_seats(showtime, &seats, "10").await?;
                tracing::debug!(error = %e, "order insert refused; hold compensated");
                return Ok(Some(record));
            }
        };
        record.order_id = Some(order);
        record.committed_at = Some(now_ms());
        if flow == Flow::Abandon {
            return Ok(Some(record));
        }
        self.pause(cfg).await;

        if flow == Flow::Cancel || flow == Flow::CrashAfterCancel {
            if self.end_order(order, "PENDING", "CANCELLED").await? {
                record.ended_at = Some(now_ms());
                if flow == Flow::Cancel {
                    self.move_seats(showtime, &seats, "10").await?;
                }
            }
            return Ok(Some(record));
        }
        let paid = sqlx::query(
            "UPDATE ticket_order SET status = 'PAID', paid_at = UTC_TIMESTAMP(3) WHERE id = ? AND status = 'PENDING'",
        )
        .bind(order)
        .execute(&self.pool)
        .await?
        .rows_affected()
            == 1;
        if !paid {
            return Ok(Some(record));
        }
        record.paid_at = Some(now_ms());
        if flow == Flow::CrashAfterPay {
            return Ok(Some(record));
        }
        self.move_seats(showtime, &seats, "12").await?;
        if flow == Flow::Purchase {
            return Ok(Some(record));
        }
        self.pause(cfg).await;
        if self.end_order(order, "PAID", "REFUNDED").await? {
            record.ended_at = Some(now_ms());
            if flow == Flow::Refund {
                self.move_seats(showtime, &seats, "20").await?;
            }
        }
        Ok(Some(record))
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
