//! Change-driven checks: showtimes are checked seconds after something
//! changed them (a Redis keyspace event on the seat hash, a grace period
//! ending), through a de-duplicating work queue; the scheduled pass stays as
//! the safety net for what no source saw, and starts at once after a gap.
//!
//! A check of a showtime is the pass's own code scoped to it
//! (`RunOptions::showtimes`): same reads, planner, lease, confirmation, scripts
//! and audit. Only the active holder of its shard's pass lease checks, so
//! replicas never double the work.
//!
//! Rooms: `queue` decides what is due, `events` reads keyspace messages
//! and the probe, `marker` tells a loss of Redis' data by its data markers
//! (all three pure, seatflow-core's `changes`); this file holds what the
//! daemon's tasks share; `change_watch/` (above the runner) runs those
//! tasks.

// The three pure rooms (seatflow-core).
pub use seatflow_core::changes::{events, marker, queue};

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;

use crate::capacity::RateWindow;
use crate::config::Settings;
use crate::metrics::ChangeMetrics;
use crate::model::{Kind, ShowtimeId};
use crate::run::jobs::report::{JobReport, RunReport};
use crate::run::jobs::{Finding, Outbox};
use events::{EventsState, Probe, Verdict};
use queue::{Added, Due, Limits, Source, WorkQueue};

/// A grace period's check runs this long after it ends: the seat's suspect
/// record and the clocks that judge it are Redis' and ours, a little apart.
const GRACE_MARGIN: Duration = Duration::from_millis(500);

/// What the daemon's change-driven checks share: the queue, the Redis
/// events' state, and their metrics.
pub struct Changes {
    queue: Mutex<WorkQueue>,
    /// Wakes the worker when something is queued.
    wake: Arc<tokio::sync::Notify>,
    /// Set by a gap; the runner starts a pass and clears it.
    gap: AtomicBool,
    /// Times Redis lost its data since the start (the data marker).
    data_losses: AtomicU64,
    /// Every configured source was on, with no gap, since the last pass of
    /// the shard ended: what the next pass repairs, they missed.
    watching: AtomicBool,
    /// `changes.mysql_binlog`: the binlog is one of the sources.
    binlog_configured: bool,
    /// The binlog reader streams (on the shard's active replica).
    binlog_streaming: AtomicBool,
    gap_wake: tokio::sync::Notify,
    probe: Mutex<Probe>,
    /// The binlog reader's, while it reads.
    binlog: Mutex<Option<BinlogStatus>>,
    /// How the Redis events' state is known when no probe says it.
    events_note: Mutex<Option<String>>,
    /// A check due this soon after a pass's read was asked for a change
    /// made before it (or a grace that just ended): the longer settle, and
    /// a second.
    check_soon: Duration,
    /// Where runs send what they find (given to every run the daemon
    /// starts), and its receiving end, drained by [`Changes::apply_findings`].
    outbox: Outbox,
    findings: Mutex<UnboundedReceiver<Finding>>,
    /// The current pass's accounting of what it only came first to.
    pass: Mutex<PassBeat>,
    /// Showtimes checked, over the last minutes (`capacity`).
    checked: Mutex<RateWindow>,
    pub metrics: ChangeMetrics,
}

/// Of the pass of this replica's shard under way: the showtimes it read
/// when a check of them was due within seconds ([`Changes::check_soon`]),
/// and its repairs of those by job: the pass came first to them; the
/// checks did not miss them.
#[derive(Debug, Default)]
struct PassBeat {
    due_at_read: HashSet<ShowtimeId>,
    beaten: BTreeMap<Kind, u64>,
}

impl std::fmt::Debug for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Changes").finish_non_exhaustive()
    }
}

/// `/status`'s `changes`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ChangesStatus {
    pub redis_events: EventsState,
    /// How the Redis events' state is known, when not by the probe (a dry
    /// run writes none: from the server's configuration, or cannot tell).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_events_note: Option<String>,
    pub queue_depth: usize,
    pub in_flight: usize,
    pub oldest_due_seconds: f64,
    pub dropped: u64,
    /// Only while the binlog reader reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binlog: Option<BinlogStatus>,
}

/// `/status`'s `changes.binlog`: where the MySQL binlog reader is
/// (`file:offset`, after the last transaction read whole), and where it
/// started from: `saved` (the position saved in Redis, or where its own
/// reading stopped) or `current` (the server's position then).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BinlogStatus {
    pub position: String,
    pub started_from: &'static str,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Changes {
    pub fn new(all: &Settings) -> Changes {
        let settings = &all.changes;
        let limits = Limits {
            capacity: settings.queue_capacity,
            min_interval: settings.min_interval,
            event_settle: settings.event_settle,
            mysql_settle: settings.mysql_settle,
            ..Limits::default()
        };
        let enabled = all.enabled_jobs();
        let wake = Arc::new(tokio::sync::Notify::new());
        let (outbox, findings) = Outbox::new(Arc::clone(&wake));
        let sources = Source::ALL.map(Source::label);
        let metrics = ChangeMetrics::new(&enabled, &sources);
        let changes = Changes {
            queue: Mutex::new(WorkQueue::new(limits)),
            wake,
            gap: AtomicBool::new(false),
            data_losses: AtomicU64::new(0),
            watching: AtomicBool::new(false),
            binlog_configured: settings.mysql_binlog,
            binlog_streaming: AtomicBool::new(false),
            gap_wake: tokio::sync::Notify::new(),
            probe: Mutex::new(Probe::default()),
            binlog: Mutex::new(None),
            events_note: Mutex::new(None),
            check_soon: settings.event_settle.max(settings.mysql_settle) + Duration::from_secs(1),
            outbox,
            findings: Mutex::new(findings),
            pass: Mutex::new(PassBeat::default()),
            checked: Mutex::new(RateWindow::new(Instant::now())),
            metrics,
        };
        changes.show_events();
        changes
    }

    /// Where the daemon's runs send what they find.
    pub fn outbox(&self) -> Outbox {
        self.outbox.clone()
    }

    /// Acts on what runs found since the last call: a grace end is a check
    /// then; a read drops the checks it did the work of (and, by a pass,
    /// notes those due within seconds); a pass's repair of one of those is
    /// one the checks did not miss.
    pub fn apply_findings(&self) {
        let mut findings = lock(&self.findings);
        while let Ok(finding) = findings.try_recv() {
            match finding {
                Finding::GraceEnds { showtime, at } => {
                    self.ask(showtime, at + GRACE_MARGIN, Source::Grace)
                }
                Finding::Read {
                    showtimes,
                    at,
                    by_pass,
                } => {
                    let mut q = lock(&self.queue);
                    if by_pass {
                        let by = at + self.check_soon;
                        let mut pass = lock(&self.pass);
                        for s in showtimes.iter().filter(|s| q.check_due_by(**s, by)) {
                            pass.due_at_read.insert(*s);
                        }
                    }
                    for s in showtimes {
                        q.swept(s, at);
                    }
                }
                Finding::Repaired {
                    showtime,
                    kind,
                    by_pass: true,
                } => {
                    let mut pass = lock(&self.pass);
                    if pass.due_at_read.contains(&showtime) {
                        *pass.beaten.entry(kind).or_default() += 1;
                    }
                }
                Finding::Repaired { by_pass: false, .. } => {}
            }
        }
    }

    /// A pass of this replica's own shard starts: its accounting starts
    /// afresh (another shard's pass came between).
    pub fn pass_starts(&self) {
        self.apply_findings();
        *lock(&self.pass) = PassBeat::default();
    }

    /// A check's job report, by what asked for the check.
    fn count_check_repairs(&self, job: &JobReport, source: Source) {
        let labels = [job.kind.label(), source.label()];
        self.metrics
            .fixes
            .with_label_values(&labels)
            .inc_by(job.fixed);
        let ages = self.metrics.drift_age.with_label_values(&labels);
        for seconds in job.drift_ages.replay() {
            ages.observe(seconds);
        }
    }

    /// A pass of this replica's shard ran with `report`. If every source
    /// was on with no gap since the last one, its repairs are what the
    /// change-driven checks missed, but for those it only came first to (a
    /// check was due within seconds of its read): counted by kind (with
    /// Redis events alone, MySQL-only changes among them, which they
    /// cannot see).
    pub fn pass_ended(&self, report: &RunReport) {
        self.apply_findings();
        let beaten = std::mem::take(&mut *lock(&self.pass)).beaten;
        let repaired: Vec<(Kind, u64)> = report
            .jobs
            .iter()
            .map(|j| {
                let first_to = beaten.get(&j.kind).copied().unwrap_or(0);
                (j.kind, j.fixed.saturating_sub(first_to))
            })
            .collect();
        self.count_missed(&repaired);
    }

    /// Repaired (per job) by a pass: missed by the checks if every source
    /// was on with no gap since the last pass.
    fn count_missed(&self, repaired: &[(Kind, u64)]) {
        let on = self.covered();
        if self.watching.swap(on, Ordering::SeqCst) {
            for (kind, n) in repaired {
                self.metrics
                    .missed
                    .with_label_values(&[kind.label()])
                    .inc_by(*n);
            }
        }
    }

    /// Every configured source sees changes now: Redis events are on and,
    /// when configured, the binlog streams. Then the sweep is only the net
    /// for what the sources miss.
    pub fn covered(&self) -> bool {
        self.redis_events() == EventsState::On
            && (!self.binlog_configured || self.binlog_streaming.load(Ordering::SeqCst))
    }

    /// Which configured source does not see changes now, in words.
    pub fn uncovered_why(&self) -> String {
        let mut why = Vec::new();
        let events = self.redis_events();
        if events != EventsState::On {
            why.push(format!("Redis keyspace events {}", events.label()));
        }
        if self.binlog_configured && !self.binlog_streaming.load(Ordering::SeqCst) {
            why.push("the MySQL binlog is not read".to_string());
        }
        why.join("; ")
    }

    /// The binlog reader started (true) or stopped streaming. Stopping ends
    /// the watch since the last pass (as a gap does).
    pub fn binlog_streams(&self, streaming: bool) {
        self.binlog_streaming.store(streaming, Ordering::SeqCst);
        if !streaming {
            self.watching.store(false, Ordering::SeqCst);
        }
    }

    /// Shows the Redis events' state in its gauge (called at each change
    /// of state: one away from `on` ends the watch since the last pass).
    pub fn show_events(&self) {
        if self.redis_events() != EventsState::On {
            self.watching.store(false, Ordering::SeqCst);
        }
        let all = EventsState::ALL.map(EventsState::label);
        self.metrics
            .show_redis_events(self.redis_events().label(), &all);
    }

    /// Asks for a check of `showtime` at `due`. A full queue drops it and
    /// counts a gap (a pass covers it).
    pub fn ask(&self, showtime: ShowtimeId, due: Instant, source: Source) {
        let added = lock(&self.queue).add(showtime, due, source);
        tracing::debug!(
            showtime_id = showtime,
            source = source.label(),
            due_in_ms = due.saturating_duration_since(Instant::now()).as_millis() as u64,
            added = ?added,
            "check asked for"
        );
        if added == Added::Dropped {
            self.gap("queue_full");
        }
        self.wake.notify_one();
    }

    /// A change may have been missed: counted, and a pass is asked for.
    pub fn gap(&self, reason: &str) {
        self.metrics.gaps.with_label_values(&[reason]).inc();
        self.watching.store(false, Ordering::SeqCst);
        self.gap.store(true, Ordering::SeqCst);
        self.gap_wake.notify_one();
    }

    /// Redis lost its data (its data marker is gone or was set again): a
    /// gap, and what was kept there (the binlog reader's saved position)
    /// is lost, not absent.
    pub fn data_lost(&self) {
        self.data_losses.fetch_add(1, Ordering::SeqCst);
        self.gap("redis_data_lost");
    }

    /// Times Redis lost its data since the start.
    pub fn data_losses(&self) -> u64 {
        self.data_losses.load(Ordering::SeqCst)
    }

    /// Another pass at once, for work the last one left (no gap: the one
    /// that started it was counted).
    pub fn pass_again(&self) {
        self.gap.store(true, Ordering::SeqCst);
        self.gap_wake.notify_one();
    }

    /// A pass starts now: the gaps flagged so far are covered by it.
    pub fn gaps_covered(&self) {
        self.gap.store(false, Ordering::SeqCst);
    }

    /// Waits for a gap and clears it.
    pub async fn next_gap(&self) {
        loop {
            if self.gap.swap(false, Ordering::SeqCst) {
                return;
            }
            self.gap_wake.notified().await;
        }
    }

    pub fn redis_events(&self) -> EventsState {
        lock(&self.probe).state()
    }

    /// The Redis events' state is `state`, known without a probe
    /// (disabled, standby, a dry run's reading of the configuration).
    pub fn events_are(&self, state: EventsState) {
        lock(&self.probe).set(state);
        self.show_events();
    }

    /// The subscription was lost (or could not be made).
    pub fn subscription_lost(&self) {
        lock(&self.probe).lost();
        self.show_events();
    }

    /// A probe went out to `keys` keys at `now`.
    pub fn probe_sent(&self, now: Instant, keys: usize) {
        lock(&self.probe).sent(now, keys);
    }

    /// The probe's event on key `key` arrived: the verdict it settles, if any.
    pub fn probe_seen(&self, key: usize, hash_event: bool) -> Option<Verdict> {
        let verdict = lock(&self.probe).seen(key, hash_event);
        self.show_events();
        verdict
    }

    /// The probe judged at `now` (a probe unanswered too long has stopped).
    pub fn probe_judged(&self, now: Instant) -> Option<Verdict> {
        let verdict = lock(&self.probe).judge(now);
        if verdict.is_some() {
            self.show_events();
        }
        verdict
    }

    /// When the soonest waiting check is due.
    pub fn next_due(&self) -> Option<Instant> {
        lock(&self.queue).next_due()
    }

    /// Hands out up to `max` checks due now (in flight until [`Changes::done`]).
    pub fn take_due(&self, now: Instant, max: usize) -> Vec<Due> {
        let due = lock(&self.queue).take_due(now, max);
        self.show_queue();
        due
    }

    /// The checks of `due` ended, `ok` or failed (then tried again after a
    /// backoff).
    pub fn done(&self, due: Vec<Due>, ok: bool) {
        let now = Instant::now();
        let mut q = lock(&self.queue);
        due.into_iter().for_each(|d| q.done(d, ok, now));
    }

    /// A check of `due` by `source` ended with `report`: its repairs and
    /// drift ages by source, and the queue's bookkeeping.
    pub fn check_ended(&self, report: &RunReport, source: Source, due: Vec<Due>) {
        for job in &report.jobs {
            self.count_check_repairs(job, source);
        }
        self.metrics
            .checks
            .with_label_values(&[source.label()])
            .inc_by(due.len() as u64);
        lock(&self.checked).add(Instant::now(), due.len() as u64);
        let ok = report.outcome() != crate::run::jobs::report::Outcome::Failure;
        self.done(due, ok);
        self.show_queue();
    }

    /// Showtimes checked a second over the last minutes (None: too soon).
    pub fn checks_per_second(&self) -> Option<f64> {
        lock(&self.checked).per_second(Instant::now())
    }

    /// Waits until something is queued (or a while has passed).
    pub async fn queued(&self) {
        self.wake.notified().await;
    }

    /// Brings the queue's gauges up to date (at each scrape, and by the worker).
    pub fn show_queue(&self) {
        let q = lock(&self.queue);
        self.metrics.queue_depth.set(q.len() as i64);
        self.metrics
            .queue_oldest_due
            .set(q.oldest_due_age(Instant::now()).as_secs_f64());
    }

    /// Says in `/status` how the Redis events' state is known when no probe
    /// says it (None: the probe says it).
    pub fn note_events(&self, note: Option<String>) {
        *lock(&self.events_note) = note;
    }

    /// Shows the binlog reader's state in `/status` (None: not reading).
    pub fn show_binlog(&self, status: Option<BinlogStatus>) {
        *lock(&self.binlog) = status;
    }

    pub fn status(&self) -> ChangesStatus {
        let binlog = lock(&self.binlog).clone();
        let q = lock(&self.queue);
        ChangesStatus {
            redis_events: self.redis_events(),
            redis_events_note: lock(&self.events_note).clone(),
            queue_depth: q.len(),
            in_flight: q.in_flight(),
            oldest_due_seconds: q.oldest_due_age(Instant::now()).as_secs_f64(),
            dropped: q.dropped(),
            binlog,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes() -> Changes {
        let settings = Settings::load_with_env(None, Vec::new()).unwrap();
        Changes::new(&settings)
    }

    fn events_on(c: &Changes) {
        c.probe_sent(Instant::now(), 1);
        c.probe_seen(0, true);
        c.probe_seen(0, false);
        c.show_events();
    }

    fn missed(c: &Changes) -> u64 {
        c.metrics.missed.with_label_values(&["paid_seats"]).get()
    }

    #[test]
    fn a_pass_counts_as_missed_only_what_it_repaired_after_a_whole_watch() {
        let c = changes();
        let repaired = [(Kind::PaidSeats, 3)];
        // Events not known on: nothing was watched.
        c.count_missed(&repaired);
        assert_eq!(missed(&c), 0);
        // On from here: the pass that starts the watch counts nothing, the
        // next one counts its repairs.
        events_on(&c);
        c.count_missed(&repaired);
        assert_eq!(missed(&c), 0);
        c.count_missed(&repaired);
        assert_eq!(missed(&c), 3);
        // A gap since the last pass: what the pass finds may be the gap's.
        c.gap("connection_lost");
        c.count_missed(&repaired);
        assert_eq!(missed(&c), 3);
        // Events that left `on` between two passes end the watch too.
        c.count_missed(&repaired);
        assert_eq!(missed(&c), 6);
        c.subscription_lost();
        c.show_events();
        events_on(&c);
        c.count_missed(&repaired);
        assert_eq!(missed(&c), 6);
    }

    #[test]
    fn with_the_binlog_configured_a_watch_needs_it_streaming_too() {
        let mut settings = Settings::load_with_env(None, Vec::new()).unwrap();
        settings.changes.mysql_binlog = true;
        let c = Changes::new(&settings);
        let repaired = [(Kind::PaidSeats, 2)];
        events_on(&c);
        assert!(
            !c.covered(),
            "events alone do not cover the binlog's changes"
        );
        c.count_missed(&repaired);
        c.count_missed(&repaired);
        assert_eq!(missed(&c), 0);
        c.binlog_streams(true);
        assert!(c.covered());
        c.count_missed(&repaired);
        c.count_missed(&repaired);
        assert_eq!(missed(&c), 2);
        // The stream stopped between two passes: no watch.
        c.binlog_streams(false);
        c.binlog_streams(true);
        c.count_missed(&repaired);
        assert_eq!(missed(&c), 2);
    }
}
