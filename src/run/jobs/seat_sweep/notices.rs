//! What a sweep says about data it leaves alone: bad data summarised once
//! per showtime (rule 8, 14), our own keys of the wrong type (rule 13), rows
//! outside the contract (rules 12, 15), stuck showtime leases. Log volume
//! stays bounded whatever the data; each problem is counted once per run,
//! and a problem that stays is logged once an hour (`repeats.rs`).

use std::collections::HashSet;

use crate::model::{Kind, ShowtimeId};
use crate::plan;
use crate::repeats::{PROBLEM_EVERY, Repeats};
use crate::run::context::Context;

use super::Sweep;

impl<'a> Sweep<'a, '_> {
    /// Rows outside the contract (rules 12, 15): counted by the job that
    /// reports bad data, once per run.
    pub(super) fn unknown(&mut self, rows: &[crate::model::contract::UnknownRow]) {
        if rows.is_empty() {
            return;
        }
        let reporter = self.bad_data.reporter;
        let kind = if self.jobs.iter().any(|j| j.kind == reporter) {
            reporter
        } else {
            self.jobs[0].kind
        };
        let idx = self.jobs.iter().position(|j| j.kind == kind).unwrap_or(0);
        self.unknown_rows.report(&mut self.jobs[idx].report, rows);
    }

    /// Rule 13: one of our own keys (suspect, done, cursor) found in the
    /// wrong shape. It holds only derived state, so it is replaced (by the
    /// script that found it, or by the next write of this run), and never
    /// stops a repair or the run. Reported once per key per run: a WARN
    /// naming it (at most `OwnKeys::MAX_LINES` lines a run) and one
    /// `invalid_data` error of `owner`, else of the job that reports bad
    /// data (or this sweep's first job).
    pub(super) fn own_key(
        &mut self,
        owner: Option<Kind>,
        key: &str,
        what: &'static str,
        action: &str,
    ) {
        if !self.own_keys.seen.insert(key.to_string()) {
            return;
        }
        let reporter = self.bad_data.reporter;
        let owner = owner
            .filter(|k| self.jobs.iter().any(|j| j.kind == *k))
            .or_else(|| {
                self.jobs
                    .iter()
                    .any(|j| j.kind == reporter)
                    .then_some(reporter)
            })
            .unwrap_or(self.jobs[0].kind);
        self.job(owner).report.invalid();
        if self.own_keys.seen.len() <= OwnKeys::MAX_LINES {
            tracing::warn!(
                key,
                what,
                action,
                "reconciler key of the wrong type (rule 13)"
            );
        }
    }

    /// Reports the own keys a script replaced.
    pub(super) fn replaced(&mut self, keys: &[String]) {
        for key in keys {
            let what = if key.contains("reconcile:suspect:") {
                "suspect records"
            } else {
                "done records"
            };
            self.own_key(None, key, what, "replaced");
        }
    }
}

/// Bad data, logged once per showtime per sweep as one summarised line
/// (count and the first few problems, values cut short), and at most
/// `MAX_LINES` such lines per sweep; the rest is one closing count. Log
/// volume stays bounded whatever the data.
pub(super) struct BadDataLog {
    /// The one job that counts and logs bad data in this run.
    pub(super) reporter: Kind,
    /// A showtime whose bad data stays is logged once an hour.
    repeats: Repeats,
    logged: usize,
    showtimes: u64,
    problems: u64,
}

impl BadDataLog {
    const MAX_LINES: usize = 20;
    const EXAMPLES: usize = 3;

    pub(super) fn new(reporter: Kind, repeats: Repeats) -> BadDataLog {
        BadDataLog {
            reporter,
            repeats,
            logged: 0,
            showtimes: 0,
            problems: 0,
        }
    }

    pub(super) fn showtime(
        &mut self,
        key: &str,
        showtime_id: ShowtimeId,
        anomalies: &[plan::Anomaly],
    ) {
        self.showtimes += 1;
        self.problems += anomalies.len() as u64;
        if self.logged >= Self::MAX_LINES {
            return;
        }
        let Some(unlogged) = self.repeats.sighting(key, PROBLEM_EVERY) else {
            return;
        };
        self.logged += 1;
        let examples = anomalies
            .iter()
            .take(Self::EXAMPLES)
            .map(plan::Anomaly::describe)
            .collect::<Vec<_>>()
            .join("; ");
        tracing::warn!(
            key,
            showtime_id,
            problems = anomalies.len(),
            examples,
            seen_since_last_line = unlogged,
            "invalid data left alone"
        );
    }

    pub(super) fn summarise(&self) {
        if self.showtimes as usize > self.logged {
            tracing::warn!(
                showtimes = self.showtimes,
                problems = self.problems,
                logged_showtimes = self.logged,
                "invalid data left alone in more showtimes than logged one by one"
            );
        }
    }
}

/// Our own keys found in the wrong shape this run (rule 13), each reported once.
#[derive(Default)]
pub(super) struct OwnKeys {
    seen: HashSet<String>,
}

impl OwnKeys {
    const MAX_LINES: usize = 20;

    pub(super) fn summarise(&self) {
        if self.seen.len() > Self::MAX_LINES {
            tracing::warn!(
                keys = self.seen.len(),
                logged = Self::MAX_LINES,
                "reconciler keys of the wrong type: more than logged one by one (rule 13)"
            );
        }
    }
}

/// Rule 13: a showtime lease without expiry that is not ours blocks its
/// showtime for ever. It is reported (WARN naming the key, `stuck_leases`),
/// never deleted or taken over: another reconciler version might own it; an
/// operator decides.
/// Logged once an hour per lease, with the passes since that skipped it.
pub(crate) fn log_stuck_lease(ctx: &Context, showtime_id: ShowtimeId) {
    let key = ctx.redis.keys.showtime_lease(showtime_id);
    let Some(unlogged) = ctx.repeats.sighting(&key, PROBLEM_EVERY) else {
        return;
    };
    tracing::warn!(
        key,
        showtime_id,
        skipped_since_last_line = unlogged,
        "showtime lease without expiry held by someone else: showtime skipped until an operator \
         removes it (see the runbook, SeatflowReconcilerStuckLease)"
    );
}

/// The problem "seatflow's seat key is not a hash", as a run reports it once.
pub(crate) fn wrong_type_problem(key: &str) -> String {
    format!("seat key of the wrong type {key}")
}
