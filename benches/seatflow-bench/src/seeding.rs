//! Seeding: multi-row INSERTs and pipelined HSETs, several in flight.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use seatflow_reconciler::ops::demo::fixtures::row_label;

use crate::bench::{Bench, SEED_IN_FLIGHT};
use crate::estate::{Drift, DriftKind, Estate, SEATS_PER_ROW, ShowtimeSeed, Status};

/// Showtimes generated, and written to Redis in one pipeline, per seeding step.
const SEED_STEP: usize = 500;
/// A multi-row INSERT is sent once its text reaches this size: tens of
/// thousands of `order_seat` rows per statement, far below max_allowed_packet.
const MAX_STATEMENT_BYTES: usize = 1 << 20;

/// One multi-row INSERT being built as literal SQL text. Literal values (all
/// generated here: integers and `[A-Z0-9-]` names) keep the statement far
/// below the 65,535-placeholder limit of a prepared statement.
struct Insert {
    head: &'static str,
    sql: String,
}

impl Insert {
    pub fn new(head: &'static str) -> Insert {
        Insert {
            head,
            sql: String::new(),
        }
    }

    /// The text to append one `(…)` tuple to.
    pub fn row(&mut self) -> &mut String {
        if self.sql.is_empty() {
            self.sql.push_str(self.head);
        } else {
            self.sql.push(',');
        }
        &mut self.sql
    }

    fn take_if_full(&mut self) -> Option<String> {
        (self.sql.len() >= MAX_STATEMENT_BYTES).then(|| std::mem::take(&mut self.sql))
    }

    pub fn take(&mut self) -> Option<String> {
        (!self.sql.is_empty()).then(|| std::mem::take(&mut self.sql))
    }
}

/// Timestamps of the seeded rows, as SQL literals (computed once).
struct Clock {
    now: chrono::NaiveDateTime,
    created: String,
    paid: String,
    refunded: String,
    /// PENDING orders expire in an hour: none is expired during the run.
    pending_expires: String,
    paid_expires: String,
}

impl Clock {
    pub fn new() -> Clock {
        let now = chrono::Utc::now().naive_utc();
        let at = |offset_s: i64| {
            let t = now + chrono::TimeDelta::seconds(offset_s);
            format!("'{}'", t.format("%Y-%m-%d %H:%M:%S%.3f"))
        };
        Clock {
            now,
            created: at(-600),
            paid: at(-540),
            refunded: at(-300),
            pending_expires: at(3600),
            paid_expires: at(300),
        }
    }

    /// Showtimes start a day from now, a minute apart, in id order.
    fn starts_at(&self, id: i64) -> String {
        let t = self.now + chrono::TimeDelta::days(1) + chrono::TimeDelta::minutes(id);
        format!("'{}'", t.format("%Y-%m-%d %H:%M:%S%.3f"))
    }
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct SeedStats {
    /// This run's seeding: with a kept estate (`--reuse`), Redis only.
    pub seconds: f64,
    /// How long seeding MySQL took when the estate was seeded.
    #[serde(default)]
    pub mysql_seconds: Option<f64>,
    pub showtimes: u64,
    pub orders: u64,
    pub order_seats: u64,
    pub hash_fields: u64,
    pub drift_by_kind: BTreeMap<DriftKind, u64>,
    /// Redis `used_memory` after seeding, in MB.
    pub redis_used_memory_mb: f64,
}

impl SeedStats {
    pub fn drift_total(&self) -> u64 {
        self.drift_by_kind.values().sum()
    }
}

pub struct Seeder<'a> {
    bench: &'a Bench,
    estate: &'a Estate,
    clock: Clock,
    showtimes: Insert,
    orders: Insert,
    order_seats: Insert,
    in_flight: JoinSet<Result<()>>,
    next_order_id: i64,
    stats: SeedStats,
    drift: Vec<Drift>,
    /// False for a kept estate (`--reuse`): its rows are there already.
    mysql: bool,
}

impl<'a> Seeder<'a> {
    pub fn new(bench: &'a Bench, estate: &'a Estate, mysql: bool) -> Seeder<'a> {
        Seeder {
            bench,
            estate,
            clock: Clock::new(),
            showtimes: Insert::new(
                "INSERT INTO showtime (id, movie_id, hall_id, starts_at, status) VALUES ",
            ),
            orders: Insert::new(
                "INSERT INTO ticket_order (id, order_no, user_id, showtime_id, status, \
                 expires_at, created_at, paid_at, cancelled_at) VALUES ",
            ),
            order_seats: Insert::new(
                "INSERT INTO order_seat (order_id, showtime_id, seat_no, active) VALUES ",
            ),
            in_flight: JoinSet::new(),
            next_order_id: 0,
            stats: SeedStats::default(),
            drift: Vec::new(),
            mysql,
        }
    }

    /// Seeds the whole estate; returns what was written and the drift list.
    pub async fn run(mut self) -> Result<(SeedStats, Vec<Drift>)> {
        let started = Instant::now();
        if self.mysql {
            self.halls().await?;
        }
        for first in (0..self.estate.showtimes).step_by(SEED_STEP) {
            let last = (first + SEED_STEP).min(self.estate.showtimes);
            let mut pipe = redis::pipe();
            for index in first..last {
                let st = self.estate.showtime(index);
                self.add_rows(&st);
                self.add_hash(&mut pipe, &st);
                self.drift.extend(st.drift);
            }
            self.send_redis(pipe).await?;
            self.send_full_statements().await?;
        }
        for sql in [
            self.showtimes.take(),
            self.orders.take(),
            self.order_seats.take(),
        ]
        .into_iter()
        .flatten()
        {
            self.send_sql(sql).await?;
        }
        while let Some(done) = self.in_flight.join_next().await {
            done??;
        }
        // Fresh statistics, as a long-lived production database would have,
        // so the optimizer's plans do not depend on when auto-recalc ran.
        if self.mysql {
            sqlx::raw_sql("ANALYZE TABLE hall_seat, showtime, ticket_order, order_seat")
                .execute(&self.bench.pool)
                .await?;
        }
        self.stats.seconds = started.elapsed().as_secs_f64();
        self.stats.redis_used_memory_mb = self.bench.redis_used_memory_mb().await?;
        for d in &self.drift {
            *self.stats.drift_by_kind.entry(d.kind).or_default() += 1;
        }
        Ok((self.stats, self.drift))
    }

    /// Halls 1..=halls, each with the same template of enabled seats.
    pub async fn halls(&mut self) -> Result<()> {
        let mut halls = Insert::new("INSERT INTO hall (id, name) VALUES ");
        let mut seats = Insert::new(
            "INSERT INTO hall_seat (hall_id, seat_no, row_label, col_no, enabled) VALUES ",
        );
        for hall in 1..=self.estate.halls {
            write!(halls.row(), "({hall},'Bench hall {hall}')")?;
            for (i, name) in self.estate.seat_names.iter().enumerate() {
                let (row, col) = (row_label(i / SEATS_PER_ROW), i % SEATS_PER_ROW + 1);
                write!(seats.row(), "({hall},'{name}','{row}',{col},1)")?;
            }
        }
        for sql in [halls.take(), seats.take()].into_iter().flatten() {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&self.bench.pool)
                .await?;
        }
        Ok(())
    }

    fn add_rows(&mut self, st: &ShowtimeSeed) {
        self.stats.showtimes += 1;
        self.stats.orders += st.orders.len() as u64;
        self.stats.order_seats += st.orders.iter().map(|o| o.seats.len() as u64).sum::<u64>();
        if !self.mysql {
            return;
        }
        let (sid, c) = (st.id, &self.clock);
        // `write!` into a String cannot fail.
        let _ = write!(
            self.showtimes.row(),
            "({sid},1,{},{},'ON_SALE')",
            st.hall,
            c.starts_at(sid)
        );
        for order in &st.orders {
            self.next_order_id += 1;
            let oid = self.next_order_id;
            let (expires, paid, cancelled, active) = match order.status {
                Status::Pending => (&c.pending_expires, "NULL", "NULL", "1"),
                Status::Paid => (&c.paid_expires, c.paid.as_str(), "NULL", "1"),
                Status::Refunded => (
                    &c.paid_expires,
                    c.paid.as_str(),
                    c.refunded.as_str(),
                    "NULL",
                ),
            };
            let _ = write!(
                self.orders.row(),
                "({oid},'B{oid:012}',{user},{sid},'{status}',{expires},{created},{paid},{cancelled})",
                user = oid % 100_000,
                status = order.status.as_sql(),
                created = c.created,
            );
            for &seat in &order.seats {
                let name = &self.estate.seat_names[seat];
                let _ = write!(self.order_seats.row(), "({oid},{sid},'{name}',{active})");
            }
        }
    }

    /// The app's "open sales": one HSET of every seat (drift already applied).
    fn add_hash(&mut self, pipe: &mut redis::Pipeline, st: &ShowtimeSeed) {
        let cmd = pipe.cmd("HSET").arg(self.bench.keys.seat(st.id));
        for (name, value) in self.estate.seat_names.iter().zip(&st.values) {
            cmd.arg(name).arg(std::slice::from_ref(value));
        }
        cmd.ignore();
        self.stats.hash_fields += st.values.len() as u64;
    }

    async fn send_full_statements(&mut self) -> Result<()> {
        let full: Vec<String> = [
            self.showtimes.take_if_full(),
            self.orders.take_if_full(),
            self.order_seats.take_if_full(),
        ]
        .into_iter()
        .flatten()
        .collect();
        for sql in full {
            self.send_sql(sql).await?;
        }
        Ok(())
    }

    async fn send_sql(&mut self, sql: String) -> Result<()> {
        self.make_room().await?;
        let pool = self.bench.pool.clone();
        self.in_flight.spawn(async move {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&pool)
                .await?;
            Ok(())
        });
        Ok(())
    }

    async fn send_redis(&mut self, pipe: redis::Pipeline) -> Result<()> {
        self.make_room().await?;
        let mut conn = self.bench.redis.clone();
        self.in_flight.spawn(async move {
            pipe.query_async::<()>(&mut conn).await?;
            Ok(())
        });
        Ok(())
    }

    /// Backpressure: wait until fewer than SEED_IN_FLIGHT writes are pending.
    async fn make_room(&mut self) -> Result<()> {
        while self.in_flight.len() >= SEED_IN_FLIGHT {
            if let Some(done) = self.in_flight.join_next().await {
                done??;
            }
        }
        Ok(())
    }
}
