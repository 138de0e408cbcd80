//! The per-showtime loop: the sweep a seatflow engineer would write first,
//! the yardstick the spec sets beside the floor ("≥ 1.5× faster than the
//! per-showtime loop"). One ON_SALE showtime at a time, soonest first: its
//! hash (HGETALL), its occupancy (one query by `showtime_id`, the contract's
//! join), each differing seat set by a compare-and-set script. No lease,
//! confirmation, grace or audit: what the reconciler adds for safety is
//! its own cost, not the loop's.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::Result;

use crate::bench::Bench;
use crate::report::{LoopCounts, Phase};
use crate::services::Load;

/// Sets a field only if it still holds the value read (a hold in between
/// wins): `KEYS[1]` the hash, `ARGV` field, observed, new.
const SET_IF_UNCHANGED: &str = r"
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0";

/// A showtime's valid occupancy: seat → order status.
const SHOWTIME_OCCUPANCY: &str = "SELECT os.seat_no, o.status FROM order_seat os \
     JOIN ticket_order o ON o.id = os.order_id \
     WHERE os.showtime_id = ? AND os.active = 1 AND o.status IN ('PENDING', 'PAID')";

pub struct LoopRun {
    pub seconds: f64,
    pub counts: LoopCounts,
    pub load: Load,
}

impl Bench {
    /// The loop over every ON_SALE showtime, timed, with the services' counters.
    pub async fn per_showtime_loop(&self) -> Result<LoopRun> {
        let before = self.snapshot().await?;
        let started = Instant::now();
        let counts = self.loop_over_showtimes().await?;
        let seconds = started.elapsed().as_secs_f64();
        let load = before.load_until(&self.snapshot().await?);
        Ok(LoopRun {
            seconds,
            counts,
            load,
        })
    }

    async fn loop_over_showtimes(&self) -> Result<LoopCounts> {
        let mut conn = self.redis.clone();
        let script = redis::Script::new(SET_IF_UNCHANGED);
        let mut templates: HashMap<i64, Vec<String>> = HashMap::new();
        let mut counts = LoopCounts::default();
        let showtimes: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT id, hall_id FROM showtime WHERE status = 'ON_SALE' ORDER BY starts_at, id",
        )
        .fetch_all(&self.pool)
        .await?;
        for (showtime, hall) in showtimes {
            if let std::collections::hash_map::Entry::Vacant(e) = templates.entry(hall) {
                let seats = sqlx::query_scalar(
                    "SELECT seat_no FROM hall_seat WHERE hall_id = ? AND enabled = 1",
                )
                .bind(hall)
                .fetch_all(&self.pool)
                .await?;
                e.insert(seats);
            }
            let key = self.keys.seat(showtime);
            let hash: HashMap<String, String> = redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut conn)
                .await?;
            counts.round_trips += 1;
            let held: HashMap<String, String> = sqlx::query_as(SHOWTIME_OCCUPANCY)
                .bind(showtime)
                .fetch_all(&self.pool)
                .await?
                .into_iter()
                .collect();
            for seat in &templates[&hall] {
                let expected = expected_value(held.get(seat).map(String::as_str));
                let Some(observed) = hash.get(seat) else {
                    continue; // a hash rebuild is another job
                };
                if observed == expected {
                    continue;
                }
                counts.drift += 1;
                let set: i64 = script
                    .key(&key)
                    .arg(seat)
                    .arg(observed)
                    .arg(expected)
                    .invoke_async(&mut conn)
                    .await?;
                counts.round_trips += 1;
                counts.repaired += set as u64;
            }
            counts.showtimes += 1;
        }
        Ok(counts)
    }
}

/// The contract's value for a seat held by an order of `status` (None: free).
fn expected_value(status: Option<&str>) -> &'static str {
    match status {
        Some("PAID") => "2",
        Some(_) => "1",
        None => "0",
    }
}

impl LoopRun {
    pub fn into_phase(self, seats: u64, floor_s: f64, showtimes: usize) -> Phase {
        let trips = self.counts.round_trips;
        Phase {
            name: "per-showtime loop".into(),
            wall_s: self.seconds,
            in_process_s: None,
            seats_per_s: seats as f64 / self.seconds,
            vs_floor: self.seconds / floor_s,
            redis_round_trips: Some(trips),
            round_trips_per_100_showtimes: Some(trips as f64 * 100.0 / showtimes as f64),
            peak_rss_mb: None,
            launcher_rss_mb: None,
            // This process ran the loop.
            cpu_s: Some(self.load.bench_cpu_s),
            floor: None,
            reconciler: None,
            per_showtime: Some(self.counts),
            load: self.load,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::expected_value;

    #[test]
    fn the_loop_expects_the_contracts_values() {
        assert_eq!(expected_value(Some("PAID")), "2");
        assert_eq!(expected_value(Some("PENDING")), "1");
        assert_eq!(expected_value(None), "0");
    }
}
