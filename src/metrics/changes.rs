//! The change-driven checks' families (src/daemon/change_state.rs): [`ChangeMetrics`],
//! exported only by a daemon whose changes are on.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts};

use super::families::Families;
use super::{DRIFT_AGE_BUCKETS, Metrics};
use crate::model::Kind;

/// The change-driven checks' families (src/daemon/change_state.rs), exported by a daemon
/// whose changes are on.
#[derive(Clone)]
pub struct ChangeMetrics {
    /// Keyspace notifications on seat hashes received (probe ones excluded).
    pub events: prometheus::IntCounter,
    /// Of those, our own repair scripts' writes: no check is asked for them.
    pub own_events: prometheus::IntCounter,
    /// Moments a source may have missed a change, by `reason`.
    pub gaps: IntCounterVec,
    /// Checks of a showtime run, by `source` (what asked for it).
    pub checks: IntCounterVec,
    /// Repairs made by checks, by `kind` and `source`.
    pub fixes: IntCounterVec,
    /// Repairs a pass made while every configured source was on with no gap,
    /// where no check was due within seconds: missed by the checks.
    pub missed: IntCounterVec,
    /// The drift ages of the checks' repairs, by `kind` and `source`.
    pub drift_age: HistogramVec,
    pub queue_depth: IntGauge,
    pub queue_oldest_due: prometheus::Gauge,
    /// 1 for the Redis events' current state (`on`, `off`, ...), 0 for the rest.
    pub redis_events: IntGaugeVec,
    /// Every family above, for [`Metrics::export_changes`].
    families: Families,
}

/// Why a change may have been missed (`seatflow_reconcile_change_gaps_total{reason}`).
/// `topology_changed`: a Redis Cluster's primaries or their slots changed
/// (a failover, a resharding), and the subscription was made again.
/// `start`: the daemon started (nobody listened before), and its first pass
/// ran at once instead of at the schedule's first fire.
/// `binlog_lost`: the MySQL binlog stream ended or failed (or started
/// again: commits before its new position were not read).
/// `binlog_position_lost`: the binlog reader could not resume where it (or
/// the shard's reader before it) stopped: the saved position belongs to
/// another server, or the server cannot send from it (purged), and it read
/// on from the server's current position (or found it missing after Redis
/// lost its data).
/// `no_holder`: this process claimed its shard's pass, which had no live
/// holder (the last one died, lost its lease, or could not renew it): the
/// changes since went unchecked.
/// `redis_data_lost`: Redis lost its data (a flush, a restart without
/// persistence, a failover to an empty replica, an eviction), seen by the
/// data marker: the seat hashes and the reconciler's own keys are gone.
pub const GAP_REASONS: [&str; 9] = [
    "connection_lost",
    "queue_full",
    "events_stopped",
    "topology_changed",
    "start",
    "binlog_lost",
    "binlog_position_lost",
    "no_holder",
    "redis_data_lost",
];

impl ChangeMetrics {
    /// Every series at 0, for the enabled jobs `kinds` and each check's
    /// `sources`.
    pub fn new(kinds: &[Kind], sources: &[&str]) -> ChangeMetrics {
        let by_kind_and_source = || {
            sources
                .iter()
                .flat_map(|src| kinds.iter().map(move |k| [k.label(), *src]))
        };
        let mut f = Families::default();
        ChangeMetrics {
            events: f.add(
                prometheus::IntCounter::new(
                    "seatflow_reconcile_change_events_total",
                    "Redis keyspace notifications received on seat hashes.",
                )
                .unwrap(),
            ),
            own_events: f.add(
                prometheus::IntCounter::new(
                    "seatflow_reconcile_change_events_own_total",
                    "Of the keyspace notifications on seat hashes, those of the reconciler's own repair writes (inside its scripts' writing bracket): no check is asked for them.",
                )
                .unwrap(),
            ),
            gaps: f.add_at_zero(
                IntCounterVec::new(
                    Opts::new(
                        "seatflow_reconcile_change_gaps_total",
                        "Moments a change may have been missed (a subscription lost, a full queue, events stopped, a Redis Cluster topology changed, the binlog stream or its position lost, a shard's pass without holder, Redis' data lost); each starts a pass.",
                    ),
                    &["reason"],
                )
                .unwrap(),
                GAP_REASONS.map(|r| [r]),
            ),
            checks: f.add_at_zero(
                IntCounterVec::new(
                    Opts::new(
                        "seatflow_reconcile_change_checks_total",
                        "Showtimes checked between passes, by what asked for the check.",
                    ),
                    &["source"],
                )
                .unwrap(),
                sources.iter().map(|src| [*src]),
            ),
            fixes: f.add_at_zero(
                IntCounterVec::new(
                    Opts::new(
                        "seatflow_reconcile_change_fixes_total",
                        "Repairs made by checks between passes (also counted in seatflow_reconcile_fixes_total).",
                    ),
                    &["kind", "source"],
                )
                .unwrap(),
                by_kind_and_source(),
            ),
            missed: f.add_at_zero(
                IntCounterVec::new(
                    Opts::new(
                        "seatflow_reconcile_change_missed_total",
                        "Repairs a pass made while every configured change source was on with no gap since the previous pass, in showtimes no check was due for within seconds: drift the change-driven checks missed (with Redis events alone, MySQL-only changes among them).",
                    ),
                    &["kind"],
                )
                .unwrap(),
                kinds.iter().filter(|k| k.is_seat_job()).map(|k| [k.label()]),
            ),
            drift_age: f.add_at_zero(
                HistogramVec::new(
                    HistogramOpts::new(
                        "seatflow_reconcile_change_drift_age_seconds",
                        "seatflow_reconcile_drift_age_seconds of the repairs made by checks between passes, by what asked for the check (the passes' are the rest).",
                    )
                    .buckets(DRIFT_AGE_BUCKETS.to_vec()),
                    &["kind", "source"],
                )
                .unwrap(),
                by_kind_and_source(),
            ),
            queue_depth: f.add(
                IntGauge::new(
                    "seatflow_reconcile_change_queue_depth",
                    "Showtimes waiting for a check.",
                )
                .unwrap(),
            ),
            queue_oldest_due: f.add(
                prometheus::Gauge::new(
                    "seatflow_reconcile_change_queue_oldest_due_seconds",
                    "How long the most overdue waiting showtime has been due.",
                )
                .unwrap(),
            ),
            redis_events: f.add(
                IntGaugeVec::new(
                    Opts::new(
                        "seatflow_reconcile_redis_events",
                        "1 for whether Redis sends the keyspace notifications the checks need: on, off, unknown (not probed yet), unavailable (no subscription), disabled (changes.redis_events = off) or standby (another replica runs the shard's passes and listens).",
                    ),
                    &["state"],
                )
                .unwrap(),
            ),
            families: f,
        }
    }

    /// Shows the Redis events' state: 1 for `state`, 0 for the rest of `all`.
    pub fn show_redis_events(&self, state: &str, all: &[&str]) {
        for s in all {
            self.redis_events
                .with_label_values(&[s])
                .set((*s == state) as i64);
        }
    }
}

impl Metrics {
    /// Exports the change-driven checks' metrics (the daemon, changes on).
    pub fn export_changes(&self, m: &ChangeMetrics) {
        m.families.register(&self.registry);
    }
}
