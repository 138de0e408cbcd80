//! The daemon's passes (one active runner per shard) and their pace:
//! [`PassMetrics`], exported only by a daemon that has a pass.

use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts};

use super::Metrics;
use super::families::Families;
use crate::pace::Backoffs;

/// The daemon's passes (one active runner per shard) and their pace. Only
/// the daemon registers them: a `once` run has no schedule to keep.
#[derive(Clone)]
pub struct PassMetrics {
    pub active: IntGaugeVec,
    pub last_completed: GaugeVec,
    pub handovers: IntCounterVec,
    pub overruns: prometheus::IntCounter,
    pub pace: prometheus::Gauge,
    pub backoffs: IntCounterVec,
    /// The last pass's pace and the shards it would fit at (`pass_fit`).
    pub showtimes_per_second: GaugeVec,
    pub shards_to_fit: IntGaugeVec,
    /// From one fire of `pass.schedule` to the next: what the pass-stalled
    /// alert counts in (the `auto` schedule is a minute or 15).
    pub interval: prometheus::Gauge,
    /// Every family above, for [`Metrics::export_passes`].
    families: Families,
}

impl PassMetrics {
    /// The pass metrics, every `shard` series at 0, not yet exported
    /// ([`Metrics::export_passes`]): a daemon without seat jobs has no pass,
    /// and exports none of them.
    pub fn new(shards: u32) -> PassMetrics {
        let shard = &["shard"];
        let shards: Vec<[String; 1]> = (0..shards).map(|i| [i.to_string()]).collect();
        let mut f = Families::default();
        PassMetrics {
            active: f.add_at_zero(
                IntGaugeVec::new(
                    Opts::new(
                        "seatflow_reconcile_pass_active",
                        "1 while this process holds the shard's pass (its own shard's pass lease, kept between passes; a dry run, which takes no lease: once it ran a pass), 0 otherwise. A shard at 0 in every process has no holder: /readyz says why.",
                    ),
                    shard,
                )
                .unwrap(),
                &shards,
            ),
            last_completed: f.add_at_zero(
                GaugeVec::new(
                    Opts::new(
                        "seatflow_reconcile_pass_last_completed_timestamp_seconds",
                        "When this process last completed a pass of the shard (max over processes: the last pass by anyone).",
                    ),
                    shard,
                )
                .unwrap(),
                &shards,
            ),
            handovers: f.add_at_zero(
                IntCounterVec::new(
                    Opts::new(
                        "seatflow_reconcile_pass_handovers_total",
                        "Passes this process ran whose shard's previous pass another instance ran.",
                    ),
                    shard,
                )
                .unwrap(),
                &shards,
            ),
            overruns: f.add(
                prometheus::IntCounter::new(
                    "seatflow_reconcile_pass_overruns_total",
                    "Passes that reached the next fire before the end of the estate (the rest continues next pass).",
                )
                .unwrap(),
            ),
            pace: f.add(
                prometheus::Gauge::new(
                    "seatflow_reconcile_pace_hashes_per_second",
                    "The current pace of seat hash reads in passes (0: unpaced).",
                )
                .unwrap(),
            ),
            backoffs: f.add_at_zero(
                IntCounterVec::new(
                    Opts::new(
                        "seatflow_reconcile_pace_backoffs_total",
                        "Times the pace was halved because this store answered slower than usual.",
                    ),
                    &["store"],
                )
                .unwrap(),
                Backoffs::default().by_store().map(|(store, _)| [store]),
            ),
            showtimes_per_second: f.add_at_zero(
                GaugeVec::new(
                    Opts::new(
                        "seatflow_reconcile_pass_showtimes_per_second",
                        "Showtimes this process's last pass of the shard swept per second.",
                    ),
                    shard,
                )
                .unwrap(),
                &shards,
            ),
            shards_to_fit: f.add_at_zero(
                IntGaugeVec::new(
                    Opts::new(
                        "seatflow_reconcile_pass_shards_to_fit",
                        "sharding.total at which a pass of each shard takes at most 80 % of the sweep interval, at the last pass's pace.",
                    ),
                    shard,
                )
                .unwrap(),
                &shards,
            ),
            interval: f.add(
                prometheus::Gauge::new(
                    "seatflow_reconcile_pass_interval_seconds",
                    "From one fire of pass.schedule to the next, in seconds (0: no schedule).",
                )
                .unwrap(),
            ),
            families: f,
        }
    }
}

impl PassMetrics {
    /// Shows the pacer's state: its pace, and its back-offs so far (the
    /// counter catches up with the pacer's own count).
    pub fn show_pace(&self, rate: f64, backoffs: Backoffs) {
        self.pace.set(rate);
        for (store, count) in backoffs.by_store() {
            let c = self.backoffs.with_label_values(&[store]);
            c.inc_by(count.saturating_sub(c.get()));
        }
    }
}

impl Metrics {
    /// Exports the pass metrics (the daemon, when it has seat jobs).
    pub fn export_passes(&self, m: &PassMetrics) {
        m.families.register(&self.registry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_and_its_back_offs_are_shown_as_the_pacer_counts_them() {
        let m = PassMetrics::new(1);
        let b = |redis, mysql| Backoffs { redis, mysql };
        let shown = |store: &str| m.backoffs.with_label_values(&[store]).get();
        m.show_pace(2000.0, b(0, 0));
        m.show_pace(500.0, b(2, 0));
        m.show_pace(600.0, b(2, 0));
        assert_eq!(m.pace.get(), 600.0);
        assert_eq!((shown("redis"), shown("mysql")), (2, 0));
        m.show_pace(300.0, b(2, 1));
        assert_eq!((shown("redis"), shown("mysql")), (2, 1));
    }
}
