//! Verification: every seat against what MySQL implies, independently of the
//! reconciler's code.

use std::collections::HashMap;
use std::ops::Range;
use std::time::Instant;

use anyhow::{Result, ensure};
use serde::Serialize;
use sqlx::{MySql, QueryBuilder, Row};

use crate::bench::{Bench, id_chunks};
use crate::estate::Estate;
use crate::numbers::thousands;

/// Showtimes per step of the seat-by-seat verification.
const VERIFY_CHUNK: usize = 1000;

#[derive(Debug, Default, Serialize)]
pub struct Verification {
    pub seconds: f64,
    pub seats_checked: u64,
    /// Seats whose Redis value (or absence) differs from what MySQL implies.
    pub wrong: u64,
    pub examples: Vec<String>,
}

impl Verification {
    /// One seat: field `seat` of the hash `key` (showtime `showtime`).
    pub fn check(&mut self, key: &str, seat: &str, redis: Option<&str>, expected: &str) {
        self.seats_checked += 1;
        if redis != Some(expected) {
            self.wrong += 1;
            if self.examples.len() < 5 {
                self.examples.push(format!(
                    "{key} field {seat}: redis {redis:?}, expected {expected:?}"
                ));
            }
        }
    }
}

impl Bench {
    /// Every seat of every ON_SALE showtime against what MySQL implies, read
    /// independently of the reconciler's code: template, occupancy, hash.
    /// The estate's shape is relied on: showtimes 1..=N, one shared template.
    pub async fn verify(&self, estate: &Estate) -> Result<Verification> {
        let started = Instant::now();
        let template: Vec<String> =
            sqlx::query_scalar("SELECT seat_no FROM hall_seat WHERE hall_id = 1 AND enabled = 1")
                .fetch_all(&self.pool)
                .await?;
        ensure!(
            template.len() == estate.seats,
            "hall 1 has {} enabled seats, expected {}",
            template.len(),
            estate.seats
        );
        let mut v = Verification::default();
        for ids in id_chunks(self.showtimes, VERIFY_CHUNK) {
            let occupancy = self.occupancy_of(ids.clone()).await?;
            let mut pipe = redis::pipe();
            for id in ids.clone() {
                pipe.cmd("HGETALL").arg(self.keys.seat(id));
            }
            let mut conn = self.redis.clone();
            let hashes: Vec<HashMap<String, String>> = pipe.query_async(&mut conn).await?;
            for (id, hash) in ids.zip(&hashes) {
                let key = self.keys.seat(id);
                for seat in &template {
                    let occupant = occupancy.get(&id).and_then(|seats| seats.get(seat));
                    let expected = match occupant.map(String::as_str) {
                        Some("PAID") => "2",
                        Some(_) => "1",
                        None => "0",
                    };
                    v.check(&key, seat, hash.get(seat).map(String::as_str), expected);
                }
            }
        }
        v.seconds = started.elapsed().as_secs_f64();
        Ok(v)
    }

    /// Showtime → seat → status of the valid order occupying it.
    async fn occupancy_of(&self, ids: Range<i64>) -> Result<HashMap<i64, HashMap<String, String>>> {
        let mut q = QueryBuilder::<MySql>::new(OCCUPANCY_SQL);
        q.push(" AND os.showtime_id >= ")
            .push_bind(ids.start)
            .push(" AND os.showtime_id < ")
            .push_bind(ids.end);
        let mut out: HashMap<i64, HashMap<String, String>> = HashMap::new();
        for r in q.build().fetch_all(&self.pool).await? {
            out.entry(r.try_get(0)?)
                .or_default()
                .insert(r.try_get(1)?, r.try_get(2)?);
        }
        Ok(out)
    }
}

/// Every valid occupancy: the read the floor streams (the contract's definition).
pub const OCCUPANCY_SQL: &str = "SELECT os.showtime_id, os.seat_no, o.status FROM order_seat os \
     JOIN ticket_order o ON o.id = os.order_id \
     WHERE os.active = 1 AND o.status IN ('PENDING', 'PAID')";

/// The verdict on the seat-by-seat checks after each run's repair sweep:
/// `None` when every seat matched MySQL, else a message with how many seats
/// were still wrong in which run and an example key.
pub fn unrepaired<'a>(after: impl ExactSizeIterator<Item = &'a Verification>) -> Option<String> {
    let runs = after.len();
    let failed: Vec<String> = after
        .enumerate()
        .filter(|(_, v)| v.wrong > 0)
        .map(|(i, v)| {
            format!(
                "run {}/{runs}: {} of {} seats still wrong after the sweep, e.g. {}",
                i + 1,
                thousands(v.wrong),
                thousands(v.seats_checked),
                v.examples
                    .first()
                    .map_or("(no example kept)", String::as_str)
            )
        })
        .collect();
    (!failed.is_empty()).then(|| format!("verification failed: {}", failed.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seat_left_wrong_fails_the_benchmark_and_is_named() {
        let checked = |wrong: &[(&str, &str)]| {
            let mut v = Verification::default();
            for seat in ["A-1", "A-2", "A-3"] {
                let redis = wrong
                    .iter()
                    .find(|(s, _)| *s == seat)
                    .map_or("0", |(_, value)| value);
                v.check("bench:seat:{7}", seat, Some(redis), "0");
            }
            v
        };
        let clean = [checked(&[]), checked(&[])];
        assert_eq!(unrepaired(clean.iter()), None);

        let second_wrong = [checked(&[]), checked(&[("A-2", "1"), ("A-3", "2")])];
        assert_eq!(
            unrepaired(second_wrong.iter()).as_deref(),
            Some(
                "verification failed: run 2/2: 2 of 3 seats still wrong after the sweep, \
                 e.g. bench:seat:{7} field A-2: redis Some(\"1\"), expected \"0\""
            )
        );
        // An absent hash is wrong too.
        let mut absent = Verification::default();
        absent.check("bench:seat:{8}", "A-1", None, "0");
        assert!(
            unrepaired([absent].iter())
                .is_some_and(|m| m.contains("1 of 1 seats") && m.contains("bench:seat:{8}"))
        );
    }
}
