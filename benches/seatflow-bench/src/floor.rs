//! The raw-read floor: what merely reading every seat hash and all occupancy
//! costs, the yardstick of every sweep.

use std::time::Instant;

use anyhow::Result;
use futures_util::TryStreamExt as _;
use redis::Value;
use sqlx::Row;

use crate::bench::{Bench, id_chunks};
use crate::report::{FloorDetail, Phase};
use crate::services::Load;
use crate::verify::OCCUPANCY_SQL;

/// Floor measurements per run (after one warm-up); the fastest is kept.
const FLOOR_SAMPLES: usize = 3;

impl Bench {
    /// A floor is a lower bound, so the fastest of FLOOR_SAMPLES reads is
    /// taken: noise only ever adds time. This makes `× floor` conservative.
    /// Both reads at once are timed once, after the samples (for reference).
    pub async fn fastest_floor(&self) -> Result<FloorRun> {
        let mut best = self.floor().await?;
        for _ in 1..FLOOR_SAMPLES {
            let next = self.floor().await?;
            if next.seconds < best.seconds {
                best = next;
            }
        }
        best.overlapped_s = Some(self.overlapped_reads().await?);
        Ok(best)
    }

    /// The raw-read floor: every hash (one pipeline per `scan_chunk` showtimes,
    /// one in flight, as the reconciler reads) and one streaming read of all
    /// occupancy. Replies are decoded, nothing else is done with them.
    pub async fn floor(&self) -> Result<FloorRun> {
        let before = self.snapshot().await?;
        let started = Instant::now();
        let (fields, pipelines) = self.read_every_hash().await?;
        let redis_s = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let rows = self.stream_occupancy().await?;
        let mysql_s = started.elapsed().as_secs_f64();
        let load = before.load_until(&self.snapshot().await?);
        Ok(FloorRun {
            seconds: redis_s + mysql_s,
            redis_s,
            mysql_s,
            overlapped_s: None,
            fields,
            occupancy_rows: rows,
            pipelines,
            load,
        })
    }

    /// For reference, not the floor: both reads at once, one task each (so on
    /// both cores): what a sweep overlapping its Redis and MySQL reads could approach.
    pub async fn overlapped_reads(&self) -> Result<f64> {
        let started = Instant::now();
        let (a, b) = (self.clone(), self.clone());
        let hashes = tokio::spawn(async move { a.read_every_hash().await });
        let occupancy = tokio::spawn(async move { b.stream_occupancy().await });
        hashes.await??;
        occupancy.await??;
        Ok(started.elapsed().as_secs_f64())
    }

    async fn read_every_hash(&self) -> Result<(u64, u64)> {
        let mut conn = self.redis.clone();
        let (mut fields, mut pipelines) = (0u64, 0u64);
        for ids in id_chunks(self.showtimes, self.scan_chunk) {
            let mut pipe = redis::pipe();
            for id in ids {
                pipe.cmd("HGETALL").arg(self.keys.seat(id));
            }
            let replies: Vec<Value> = pipe.query_async(&mut conn).await?;
            fields += replies.iter().map(hash_len).sum::<u64>();
            pipelines += 1;
        }
        Ok((fields, pipelines))
    }

    /// Streams every occupancy row and decodes it by position, keeping
    /// nothing: the way the reconciler reads occupancy, minus what it keeps.
    async fn stream_occupancy(&self) -> Result<u64> {
        let mut rows = 0u64;
        let mut stream = sqlx::query(OCCUPANCY_SQL).fetch(&self.pool);
        while let Some(row) = stream.try_next().await? {
            let _: i64 = row.try_get(0)?;
            let _: &str = row.try_get(1)?;
            let _: &str = row.try_get(2)?;
            rows += 1;
        }
        Ok(rows)
    }
}

/// Fields in an HGETALL reply (an array of field, value under RESP2; a map under RESP3).
fn hash_len(v: &Value) -> u64 {
    match v {
        Value::Array(items) => items.len() as u64 / 2,
        Value::Map(pairs) => pairs.len() as u64,
        _ => 0,
    }
}

pub struct FloorRun {
    pub seconds: f64,
    pub redis_s: f64,
    pub mysql_s: f64,
    pub overlapped_s: Option<f64>,
    pub fields: u64,
    pub occupancy_rows: u64,
    pub pipelines: u64,
    pub load: Load,
}

impl FloorRun {
    pub fn into_phase(self, seats: u64, showtimes: usize) -> Phase {
        Phase {
            name: "floor (raw read)".into(),
            wall_s: self.seconds,
            in_process_s: None,
            seats_per_s: seats as f64 / self.seconds,
            vs_floor: 1.0,
            redis_round_trips: Some(self.pipelines),
            round_trips_per_100_showtimes: Some(self.pipelines as f64 * 100.0 / showtimes as f64),
            peak_rss_mb: None,
            launcher_rss_mb: None,
            // This process did the reading.
            cpu_s: Some(self.load.bench_cpu_s),
            floor: Some(FloorDetail {
                redis_s: self.redis_s,
                mysql_s: self.mysql_s,
                overlapped_s: self.overlapped_s,
                hash_fields: self.fields,
                occupancy_rows: self.occupancy_rows,
            }),
            reconciler: None,
            per_showtime: None,
            load: self.load,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_len_counts_fields_under_resp2_and_resp3() {
        let s = |v: &str| Value::BulkString(v.as_bytes().to_vec());
        let resp2 = Value::Array(vec![s("A-1"), s("0"), s("A-2"), s("2")]);
        let resp3 = Value::Map(vec![(s("A-1"), s("0"))]);
        assert_eq!(hash_len(&resp2), 2);
        assert_eq!(hash_len(&resp3), 1);
        assert_eq!(hash_len(&Value::Nil), 0);
    }
}
