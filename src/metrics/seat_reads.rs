//! `seatflow_reconcile_seat_hash_reads_total`: the sweep's reads of seat
//! hashes by the reader that answered them, counted by the store and read
//! at each scrape. A `crate` count that grows against a single Redis means
//! the fast reader stands aside (its log line says why):
//! the reads still succeed, only at a higher cost in CPU.

use std::sync::Mutex;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, Opts};

use crate::store::redis::SeatHashReads;

pub const FAMILY: &str = "seatflow_reconcile_seat_hash_reads_total";

type Counts = Box<dyn Fn() -> SeatHashReads + Send + Sync>;

pub struct SeatHashReadMetrics {
    /// The store's counts (`RedisStore::seat_hash_reads`).
    counts: Counts,
    reads: IntCounterVec,
    /// One scrape at a time brings the counters up to the store's.
    catching_up: Mutex<()>,
}

impl SeatHashReadMetrics {
    #[allow(clippy::expect_used, reason = "a fixed, valid family")]
    pub fn new(counts: impl Fn() -> SeatHashReads + Send + Sync + 'static) -> SeatHashReadMetrics {
        let reads = IntCounterVec::new(
            Opts::new(
                FAMILY,
                "Reads of seat hashes (one a chunk's pipeline), by reader: `fast` (the \
                 reconciler's own RESP2 reader) or `crate` (the redis crate: a cluster, a Unix socket, \
                 redis.fast_seat_reads = false, or the fast reader standing aside).",
            ),
            &["reader"],
        )
        .expect("valid family");
        for reader in ["fast", "crate"] {
            reads.with_label_values(&[reader]);
        }
        SeatHashReadMetrics {
            counts: Box::new(counts),
            reads,
            catching_up: Mutex::new(()),
        }
    }
}

impl Collector for SeatHashReadMetrics {
    fn desc(&self) -> Vec<&Desc> {
        self.reads.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _one = self.catching_up.lock().unwrap_or_else(|p| p.into_inner());
        let now = (self.counts)();
        for (reader, total) in [("fast", now.fast), ("crate", now.through_crate)] {
            let counter = self.reads.with_label_values(&[reader]);
            counter.inc_by(total.saturating_sub(counter.get()));
        }
        self.reads.collect()
    }
}
