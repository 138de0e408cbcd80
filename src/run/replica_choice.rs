//! A pass's bulk reads on a MySQL replica (`mysql.replica_url`). Before
//! each chunk the replica is asked its lag; the chunk reads it only when
//! both of its threads run and it is within `mysql.max_replica_lag`, else
//! the primary. It never waits for a late replica: a chunk read from the
//! primary is exactly a chunk without a replica, so a replica can make a
//! pass cheaper for the primary but never later or less safe.
//!
//! Safety does not rest on the replica being current: every write, and
//! every read that decides one (the confirmation before each seat write, a
//! rebuild's showtime, template and seats, expired orders), is the
//! primary's. A stale replica can only make a chunk see drift that is not
//! there (its confirmation then refuses it) or miss drift (a later pass
//! finds it). Change-driven checks read the primary: the change they were
//! asked for may not have reached the replica yet.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use prometheus::{Gauge, IntCounterVec, Opts};
use serde_json::json;

use crate::error::{Denial, Error};
use crate::store::mysql::MysqlStore;
// The judgement of a replica's report is pure (seatflow-core).
pub use seatflow_core::replica_lag::{Reason, judge};

/// The longest a chunk waits for the replica's answer before it reads the
/// primary.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// After the replica failed (unreachable, denied, not a replica, a failed
/// read) it is not asked again for this long: chunks go straight to the
/// primary rather than each waiting for a server that is down.
pub const RETRY_AFTER: Duration = Duration::from_secs(15);

/// The last answer, for `/status`.
#[derive(Debug, Clone)]
struct Last {
    at: DateTime<Utc>,
    reason: Reason,
    lag_seconds: Option<u64>,
    error: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    last: Option<Last>,
    resting_until: Option<Instant>,
    /// An ask after a rest is under way, off the chunks' path.
    asking: bool,
    /// The error of such an ask, for the next chunk's caller to record
    /// (a refused permission, rule 18).
    unrecorded: Option<Error>,
}

/// What one ask of the replica came to.
struct Answer {
    reason: Reason,
    lag_seconds: Option<u64>,
    /// The store's error, when it gave one.
    error: Option<Error>,
    /// What `/status` keeps of a failure: the error, or why there is none.
    why: Option<String>,
}

/// The replica, its last answer and the count of chunks by where they read.
pub struct Replica {
    store: MysqlStore,
    max_lag: Duration,
    state: Mutex<State>,
    chunks: IntCounterVec,
    lag: Gauge,
}

#[allow(clippy::expect_used, reason = "constant, valid metrics")]
impl Replica {
    pub fn new(store: MysqlStore, max_lag: Duration) -> Replica {
        let chunks = IntCounterVec::new(
            Opts::new(
                "seatflow_reconcile_bulk_reads_total",
                "Chunks of a pass by the MySQL server their bulk reads (pages, occupancy, templates) went to, and why: replica/current, else primary with the replica's state (lagging, stopped, not_a_replica, unreachable, denied, resting), plus one primary/read_failed for each read the replica failed.",
            ),
            &["server", "reason"],
        )
        .expect("a valid metric");
        for reason in Reason::ALL {
            chunks.with_label_values(&[reason.server(), reason.label()]);
        }
        let lag = Gauge::new(
            "seatflow_reconcile_replica_lag_seconds",
            "The lag the MySQL replica last reported (Seconds_Behind_Master); NaN when unknown (stopped, unreachable, not asked yet).",
        )
        .expect("a valid metric");
        lag.set(f64::NAN);
        Replica {
            store,
            max_lag,
            state: Mutex::default(),
            chunks,
            lag,
        }
    }

    /// The replica's store (its pool, the primary's schema verdict).
    pub fn store(&self) -> &MysqlStore {
        &self.store
    }

    /// Where the next chunk's bulk reads go, counted: the replica is asked
    /// its lag (at most [`ASK_TIMEOUT`]) unless it rests after a failure.
    /// When a rest ends the replica is asked again off the chunks' path,
    /// so a replica that stays down costs a pass nothing after its first
    /// failure. A failure's error is returned for the caller's record of
    /// refused permissions (rule 18).
    pub async fn choose(self: &Arc<Self>) -> (Reason, Option<Error>) {
        let (resting, ask_behind) = {
            let mut state = self.lock();
            match state.resting_until {
                Some(until) if Instant::now() < until => (true, false),
                Some(_) => (true, !std::mem::replace(&mut state.asking, true)),
                None => (false, false),
            }
        };
        if resting {
            if ask_behind {
                let me = Arc::clone(self);
                tokio::spawn(async move {
                    let answer = me.ask().await;
                    me.remember(answer.reason, answer.lag_seconds, answer.why);
                    let mut state = me.lock();
                    state.asking = false;
                    state.unrecorded = answer.error;
                });
            }
            self.count(Reason::Resting);
            let unrecorded = self.lock().unrecorded.take();
            return (Reason::Resting, unrecorded);
        }
        let answer = self.ask().await;
        self.remember(answer.reason, answer.lag_seconds, answer.why);
        self.count(answer.reason);
        (answer.reason, answer.error)
    }

    /// The replica's own report, judged; a failure with its cause.
    async fn ask(&self) -> Answer {
        let failed = |reason, e: Error| Answer {
            reason,
            lag_seconds: None,
            why: Some(e.to_string()),
            error: Some(e),
        };
        match tokio::time::timeout(ASK_TIMEOUT, self.store.replica_report()).await {
            Ok(Ok(report)) => {
                let (reason, lag_seconds) = judge(&report, self.max_lag);
                Answer {
                    reason,
                    lag_seconds,
                    error: None,
                    why: None,
                }
            }
            Ok(Err(e)) if Denial::of(&e).is_some() => failed(Reason::Denied, e),
            Ok(Err(e)) => failed(Reason::Unreachable, e),
            // The pool retries a refused connection until its own timeout
            // and would then say only that it timed out: one connection of
            // our own says why.
            Err(_) => match tokio::time::timeout(ASK_TIMEOUT, self.store.connect_once()).await {
                Ok(Err(e)) => failed(Reason::Unreachable, e),
                _ => Answer {
                    reason: Reason::Unreachable,
                    lag_seconds: None,
                    error: None,
                    why: Some(format!("no answer within {}s", ASK_TIMEOUT.as_secs())),
                },
            },
        }
    }

    /// A read on the replica failed: counted, and the replica rests.
    pub fn read_failed(&self, e: &Error) {
        tracing::warn!(error = %e, "a read on the MySQL replica failed; this chunk reads the primary");
        self.remember(Reason::ReadFailed, None, Some(e.to_string()));
        self.count(Reason::ReadFailed);
    }

    fn remember(&self, reason: Reason, lag_seconds: Option<u64>, error: Option<String>) {
        let mut state = self.lock();
        let changed = state.last.as_ref().map(|l| l.reason) != Some(reason);
        if changed && reason != Reason::Current {
            tracing::warn!(
                reason = reason.label(),
                lag_seconds,
                error = error.as_deref(),
                "bulk reads go to the MySQL primary, not the replica"
            );
        } else if changed {
            tracing::info!(lag_seconds, "bulk reads go to the MySQL replica");
        }
        state.resting_until = reason.rests().then(|| Instant::now() + RETRY_AFTER);
        state.last = Some(Last {
            at: Utc::now(),
            reason,
            lag_seconds,
            error,
        });
        self.lag.set(lag_seconds.map_or(f64::NAN, |l| l as f64));
    }

    fn count(&self, reason: Reason) {
        self.chunks
            .with_label_values(&[reason.server(), reason.label()])
            .inc();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The families to register (the daemon's `/metrics`).
    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![Box::new(self.chunks.clone()), Box::new(self.lag.clone())]
    }

    /// `/status`'s `mysql_replica`: the limit, the last answer and the
    /// chunks by where they read.
    pub fn status(&self) -> serde_json::Value {
        let state = self.lock();
        let mut chunks = serde_json::Map::new();
        for reason in Reason::ALL {
            let n = self
                .chunks
                .with_label_values(&[reason.server(), reason.label()])
                .get();
            chunks.insert(format!("{}/{}", reason.server(), reason.label()), json!(n));
        }
        json!({
            "max_lag_seconds": self.max_lag.as_secs(),
            "last": state.last.as_ref().map(|l| json!({
                "at": l.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                "reads": l.reason.server(),
                "reason": l.reason.label(),
                "lag_seconds": l.lag_seconds,
                "error": l.error,
            })),
            "chunks": chunks,
        })
    }
}
