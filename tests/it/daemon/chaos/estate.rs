//! The chaos test's estate, and what the contract says of the showtimes the
//! reconciler must leave alone.
//!
//! Three halls of different sizes and layouts, each with disabled template
//! seats (an aisle, broken seats, a closed row): the contract's hash has a
//! field for every *enabled* template seat only, so a disabled seat is
//! never warmed, sold, rebuilt or repaired. Showtimes in every status the
//! contract defines (`SCHEDULED | ON_SALE | CLOSED | CANCELLED`): the
//! expected state is defined for ON_SALE showtimes only, which are the ones
//! the application sells and the reconciler repairs. The others are
//! "hands off": whatever their hash holds (none, or one with what would be
//! drift on sale) and whatever their orders say, the reconciler changes
//! nothing of theirs — no field, no hash rebuilt, no order, no audit row.

use std::collections::BTreeMap;

use seatflow_reconciler::model::{SeatNo, ShowtimeId};
use seatflow_test_support::TestEnv;

/// The showtime whose hash Redis loses in the middle of the traffic (hall
/// 1: its rebuild must leave the aisle out).
pub const LOST_IN_TRAFFIC: ShowtimeId = 3;
/// The showtime whose hash Redis loses once the traffic has stopped, right
/// before the reconciler-only phase (hall 3: its rebuild must leave the
/// closed row out, and is judged from the stores).
pub const LOST_BEFORE_CUT: ShowtimeId = 8;

/// A hall template: every seat of `rows` × `cols`, some disabled.
pub struct Hall {
    pub id: i64,
    pub enabled: Vec<SeatNo>,
    pub disabled: Vec<SeatNo>,
}

pub struct Showtime {
    pub id: ShowtimeId,
    pub hall: i64,
    pub status: &'static str,
}

pub struct Estate {
    pub halls: BTreeMap<i64, Hall>,
    pub showtimes: Vec<Showtime>,
}

/// (hall, rows, cols, disabled seats).
fn layouts() -> Vec<(i64, usize, usize, Vec<String>)> {
    // Hall 1, large: an aisle (column 7 of every row) and two broken seats.
    let mut aisle: Vec<String> = (0..9)
        .map(|r| {
            format!(
                "{}-7",
                seatflow_reconciler::ops::demo::fixtures::row_label(r)
            )
        })
        .collect();
    aisle.extend(["I-1".to_string(), "I-13".to_string()]);
    // Hall 2, small (it sells out): wheelchair spaces and a broken seat.
    let spaces = ["A-1", "A-8", "C-4"].map(String::from).to_vec();
    // Hall 3, middle: its last row closed.
    let closed_row = (1..=10).map(|c| format!("G-{c}")).collect();
    vec![(1, 9, 13, aisle), (2, 5, 8, spaces), (3, 7, 10, closed_row)]
}

impl Estate {
    /// Writes the estate as seatflow would: templates, showtimes, the hashes
    /// of ON_SALE showtimes warmed from their enabled seats, and the
    /// hands-off showtimes with their orders and hashes (see `hands_off`).
    pub async fn build(env: &TestEnv) -> Estate {
        let pool = env.ctx.mysql.pool();
        let mut halls = BTreeMap::new();
        for (id, rows, cols, disabled) in layouts() {
            let all = env.fx.hall(id, rows, cols).await.unwrap();
            for seat in &disabled {
                let n = sqlx::query(
                    "UPDATE hall_seat SET enabled = 0 WHERE hall_id = ? AND seat_no = ?",
                )
                .bind(id)
                .bind(seat)
                .execute(pool)
                .await
                .unwrap()
                .rows_affected();
                assert_eq!(n, 1, "hall {id} has a seat {seat}");
            }
            let enabled = all.into_iter().filter(|s| !disabled.contains(s)).collect();
            halls.insert(
                id,
                Hall {
                    id,
                    enabled,
                    disabled,
                },
            );
        }
        let mut showtimes = Vec::new();
        // On sale: three showtimes per hall, starting every half hour.
        for s in 1..=9 {
            let hall = 1 + (s - 1) / 3;
            env.fx.showtime(s, hall, 30 * s, "ON_SALE").await.unwrap();
            env.fx
                .warm_all(s, &halls[&hall].enabled, &[])
                .await
                .unwrap();
            showtimes.push(Showtime {
                id: s,
                hall,
                status: "ON_SALE",
            });
        }
        let estate = Estate { halls, showtimes };
        estate.hands_off(env).await
    }

    /// The showtimes not on sale, each with what would be drift if it were
    /// on sale: occupancy Redis does not show, locks and sales MySQL does
    /// not back, a missing field, a missing hash. PENDING orders here are
    /// far from their deadline, so nothing of theirs is due either.
    async fn hands_off(mut self, env: &TestEnv) -> Estate {
        let fx = &env.fx;
        let hour = 3600;
        let warm = |hall: i64, values: &[(&str, &str)], without: &[&str]| {
            let mut all: Vec<(String, String)> = self.halls[&hall]
                .enabled
                .iter()
                .filter(|s| !without.contains(&s.as_str()))
                .map(|s| (s.clone(), "0".to_string()))
                .collect();
            for (seat, v) in values {
                assert!(self.halls[&hall].enabled.iter().any(|s| s == seat));
                all.push((seat.to_string(), v.to_string()));
            }
            all
        };
        // Not on sale yet: seatflow warms the hash when sales open.
        fx.showtime(10, 1, 2 * 24 * 60, "SCHEDULED").await.unwrap();
        // Not on sale yet, but a hash is there (warmed early by hand), with
        // a lock and a sale nobody made.
        fx.showtime(11, 2, 2 * 24 * 60 + 60, "SCHEDULED")
            .await
            .unwrap();
        let h11 = warm(2, &[("B-2", "1"), ("B-3", "2")], &[]);
        // Sales over, the film started: a paid order whose seats are not
        // "2" (one absent), an orphan lock, two sold orphans (one of a
        // refunded order), a PENDING order's seat free.
        fx.showtime(12, 3, -90, "CLOSED").await.unwrap();
        fx.order(12, "PAID", &["A-1", "A-2", "A-3"], -hour)
            .await
            .unwrap();
        fx.order(12, "PENDING", &["D-5"], hour).await.unwrap();
        fx.order(12, "REFUNDED", &["E-6"], -hour).await.unwrap();
        let h12 = warm(
            3,
            &[("A-1", "1"), ("B-3", "1"), ("C-4", "2"), ("E-6", "2")],
            &["A-3"],
        );
        // Closed, and its hash gone (evicted after the show): no rebuild.
        fx.showtime(13, 1, -200, "CLOSED").await.unwrap();
        fx.order(13, "PAID", &["A-1"], -hour).await.unwrap();
        fx.order(13, "PENDING", &["A-2"], hour).await.unwrap();
        // Cancelled showtime, its hash left as it was.
        fx.showtime(14, 2, 600, "CANCELLED").await.unwrap();
        fx.order(14, "PAID", &["B-5"], -hour).await.unwrap();
        fx.order(14, "CANCELLED", &["B-6"], -hour).await.unwrap();
        let h14 = warm(2, &[("D-2", "1"), ("E-3", "2"), ("B-6", "1")], &[]);
        // Cancelled, no hash.
        fx.showtime(15, 3, 700, "CANCELLED").await.unwrap();
        fx.order(15, "PAID", &["A-1"], -hour).await.unwrap();
        for (id, values) in [(11, h11), (12, h12), (14, h14)] {
            let values: Vec<(&str, &str)> = values
                .iter()
                .map(|(s, v)| (s.as_str(), v.as_str()))
                .collect();
            fx.warm(id, &values).await.unwrap();
        }
        for (id, hall, status) in [
            (10, 1, "SCHEDULED"),
            (11, 2, "SCHEDULED"),
            (12, 3, "CLOSED"),
            (13, 1, "CLOSED"),
            (14, 2, "CANCELLED"),
            (15, 3, "CANCELLED"),
        ] {
            self.showtimes.push(Showtime { id, hall, status });
        }
        self
    }

    /// The ON_SALE showtimes with the seats a customer may pick.
    pub fn on_sale(&self) -> Vec<(ShowtimeId, Vec<SeatNo>)> {
        self.showtimes
            .iter()
            .filter(|s| s.status == "ON_SALE")
            .map(|s| (s.id, self.halls[&s.hall].enabled.clone()))
            .collect()
    }

    /// The showtimes the reconciler must leave alone.
    pub fn hands_off_ids(&self) -> Vec<ShowtimeId> {
        self.showtimes
            .iter()
            .filter(|s| s.status != "ON_SALE")
            .map(|s| s.id)
            .collect()
    }

    pub fn ids(&self) -> Vec<ShowtimeId> {
        self.showtimes.iter().map(|s| s.id).collect()
    }

    /// Statuses present, for the report.
    pub fn statuses(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for s in &self.showtimes {
            *out.entry(s.status).or_default() += 1;
        }
        out
    }

    pub fn describe(&self) -> String {
        let halls: Vec<String> = self
            .halls
            .values()
            .map(|h| {
                format!(
                    "hall {}: {} seats, {} disabled",
                    h.id,
                    h.enabled.len(),
                    h.disabled.len()
                )
            })
            .collect();
        format!("{}; showtimes {:?}", halls.join(", "), self.statuses())
    }
}

/// Everything of the hands-off showtimes, as the stores hold it: each seat
/// hash (None: no key), and their orders and order seats, every column.
#[derive(Debug, PartialEq, Eq)]
pub struct HandsOff {
    pub hashes: BTreeMap<ShowtimeId, Option<BTreeMap<String, String>>>,
    pub orders: Vec<String>,
    pub order_seats: Vec<String>,
}

impl HandsOff {
    pub async fn snapshot(env: &TestEnv, estate: &Estate) -> HandsOff {
        let ids = estate.hands_off_ids();
        let hashes = super::stores::seat_hashes(env, &ids).await;
        let list = ids
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let pool = env.ctx.mysql.pool();
        let orders = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT CONCAT_WS('|', id, order_no, user_id, showtime_id, status, expires_at, created_at, \
             IFNULL(paid_at, '-'), IFNULL(cancelled_at, '-'), IFNULL(cancel_reason, '-')) \
             FROM ticket_order WHERE showtime_id IN ({list}) ORDER BY id"
        )))
        .fetch_all(pool)
        .await
        .unwrap();
        let order_seats = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT CONCAT_WS('|', order_id, showtime_id, seat_no, IFNULL(active, '-')) \
             FROM order_seat WHERE showtime_id IN ({list}) ORDER BY order_id, seat_no"
        )))
        .fetch_all(pool)
        .await
        .unwrap();
        HandsOff {
            hashes,
            orders,
            order_seats,
        }
    }

    /// What differs from `before`, and what else shows the reconciler at
    /// work on these showtimes: audit rows naming them, or its own keys
    /// under their hash tag (a showtime lease, suspects, done operations).
    pub async fn touched(&self, before: &HandsOff, env: &TestEnv) -> Vec<String> {
        let mut out = Vec::new();
        for (id, was) in &before.hashes {
            let now = self.hashes.get(id).cloned().flatten();
            match (was, &now) {
                (Some(was), Some(now)) => {
                    let fields: std::collections::BTreeSet<&String> =
                        was.keys().chain(now.keys()).collect();
                    for f in fields {
                        let (a, b) = (was.get(f), now.get(f));
                        if a != b {
                            out.push(format!("showtime {id} seat {f}: {a:?} became {b:?}"));
                        }
                    }
                }
                (None, None) => {}
                _ => out.push(format!(
                    "showtime {id}: hash {} became {}",
                    if was.is_some() { "present" } else { "absent" },
                    if now.is_some() { "present" } else { "absent" }
                )),
            }
        }
        if self.orders != before.orders {
            out.push(format!(
                "orders {:?} became {:?}",
                before.orders, self.orders
            ));
        }
        if self.order_seats != before.order_seats {
            out.push(format!(
                "order seats {:?} became {:?}",
                before.order_seats, self.order_seats
            ));
        }
        for id in before.hashes.keys() {
            let rows: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM reconcile_fix WHERE showtime_id = ?")
                    .bind(id)
                    .fetch_one(env.ctx.mysql.pool())
                    .await
                    .unwrap();
            if rows > 0 {
                out.push(format!("showtime {id}: {rows} audit rows"));
            }
            let keys = &env.ctx.redis.keys;
            for key in [keys.showtime_lease(*id), keys.suspect(*id), keys.done(*id)] {
                let exists: i64 = env.redis(redis::cmd("EXISTS").arg(&key)).await;
                if exists > 0 {
                    out.push(format!("showtime {id}: the reconciler's key {key} exists"));
                }
            }
        }
        out
    }
}
