//! Every permission a store refused while the reconciler ran (rule 18),
//! kept for `/status` and `seatflow_reconcile_permission_denied_total`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus::{IntCounterVec, Opts};

use crate::error::{Denial, Error};

/// The last time a denial was met, and how often.
#[derive(Debug, Clone)]
struct Seen {
    count: u64,
    last: chrono::DateTime<chrono::Utc>,
    error: String,
}

/// Every permission refused since the process started, shared by every
/// clone (the context's): `/status` lists them, the counter counts them.
#[derive(Clone)]
pub struct Denials {
    seen: Arc<Mutex<BTreeMap<Denial, Seen>>>,
    counter: IntCounterVec,
}

#[allow(clippy::expect_used, reason = "a constant, valid metric")]
impl Default for Denials {
    fn default() -> Self {
        Denials {
            seen: Arc::default(),
            counter: IntCounterVec::new(
                Opts::new(
                    "seatflow_reconcile_permission_denied_total",
                    "Operations a store refused for lack of a permission, by store and the permission it names.",
                ),
                &["store", "need"],
            )
            .expect("a valid metric"),
        }
    }
}

impl Denials {
    /// Counts `e` when it is a refused permission; returns what it names.
    pub fn note(&self, e: &Error) -> Option<Denial> {
        let denial = Denial::of(e)?;
        self.record(&denial, 1, &e.to_string());
        Some(denial)
    }

    /// [`note`](Self::note) of an error of `mysql.replica_url`'s replica:
    /// named as the replica's, not the primary's.
    pub fn note_replica(&self, e: &Error) -> Option<Denial> {
        let denial = Denial::of(e)?.on_replica();
        self.record(&denial, 1, &e.to_string());
        Some(denial)
    }

    /// Counts `denial` met `times` times, the last with `error`.
    pub fn record(&self, denial: &Denial, times: u64, error: &str) {
        self.counter
            .with_label_values(&[denial.who(), &denial.need])
            .inc_by(times);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let entry = seen.entry(denial.clone()).or_insert(Seen {
            count: 0,
            last: chrono::Utc::now(),
            error: String::new(),
        });
        entry.count += times;
        entry.last = chrono::Utc::now();
        entry.error = error.to_string();
    }

    /// Counts what a job's report met (`JobReport::denied`).
    pub fn record_all(&self, denied: &BTreeMap<Denial, (u64, String)>) {
        for (denial, (times, error)) in denied {
            self.record(denial, *times, error);
        }
    }

    /// The counter, for the daemon's registry.
    pub fn counter(&self) -> IntCounterVec {
        self.counter.clone()
    }

    /// `/status`'s `permissions.denied`: each refused permission, how often,
    /// when last and the store's own words.
    pub fn to_json(&self) -> serde_json::Value {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.iter()
            .map(|(d, s)| {
                serde_json::json!({
                    "store": d.who(),
                    "need": d.need,
                    "count": s.count,
                    "last_seen": s.last.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    "error": s.error,
                })
            })
            .collect()
    }
}
