//! The work queue of change-driven checks: "check showtime S at or after
//! time T". Pure (every call takes `now`), so its rules are tested without a
//! clock or a server.
//!
//! The shape of kube-runtime's scheduler and client-go's work queue:
//! - **de-duplicated**: S waits at most once; adding it again keeps the
//!   earlier due time (at one time, the weightier source: a deadline over a
//!   retry over a grace end over an event). A grace end or a deadline due
//!   after that earlier check is carried, and waits again once it is done:
//!   a check before its time cannot do its work;
//! - **two lanes**: known repairs (grace ends, deadlines, retries) and
//!   events share each hand-out half and half (either takes what the other
//!   leaves), so neither a storm of events nor a flood of grace ends holds
//!   the other up;
//! - **never two checks of one S at once**: S handed out is *in flight*;
//!   an add meanwhile is remembered and S waits again once the check is done,
//!   so a change during a check is never lost;
//! - **a minimum interval per showtime**: S is not handed out again within
//!   `min_interval` of its last check, however many events arrive;
//! - **retries with backoff** after a failed check;
//! - **bounded**: past `capacity` waiting showtimes a new one is dropped and
//!   counted as a gap (the caller then starts an expedited sweep, which covers
//!   every showtime anyway).
//!
//! Hand-written rather than `tokio_util::time::DelayQueue` plus a map: the
//! decisions are the product here, and with `now` passed in they are plain
//! functions a property test can drive; the consumer sleeps until
//! [`WorkQueue::next_due`].

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::model::ShowtimeId;

/// What asked for a check: the label of `drift_age_seconds{source}` and of
/// the queue's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A Redis keyspace event on the showtime's seat hash.
    Event,
    /// A transaction committed in MySQL that touched the showtime's orders,
    /// seats or row (read from the binlog).
    Binlog,
    /// A PENDING order of the showtime reached its deadline.
    Deadline,
    /// A suspect seat of the showtime reached the end of its grace period.
    Grace,
    /// A check that failed, tried again.
    Retry,
}

impl Source {
    /// Which wins when one showtime is asked for by two sources: a deadline
    /// (its check also runs `expired-orders`), a retry (which may be one),
    /// a grace end, a commit in MySQL, an event.
    fn rank(self) -> u8 {
        match self {
            Source::Event => 0,
            Source::Binlog => 1,
            Source::Grace => 2,
            Source::Retry => 3,
            Source::Deadline => 4,
        }
    }

    /// The lane it waits in: known repairs (grace ends, deadlines, retries),
    /// or mere changes (events, commits).
    fn lane(self) -> usize {
        matches!(self, Source::Event | Source::Binlog) as usize
    }

    /// Whether it waits for a moment to come (a grace's end, a deadline, a
    /// backoff): a check before that moment cannot do its work, so an
    /// earlier check of the showtime does not replace it. An event's or a
    /// commit's change has happened when it is asked for: any later check
    /// sees it.
    fn timed(self) -> bool {
        !matches!(self, Source::Event | Source::Binlog)
    }

    /// Whether a seat sweep's read does its work once its cause is past: an
    /// event's or a commit's change, or a grace's end, is seen by the seat
    /// jobs; a deadline
    /// needs `expired-orders`, which no seat read runs (and a retry may be
    /// one).
    fn seen_by_a_read(self) -> bool {
        matches!(self, Source::Event | Source::Binlog | Source::Grace)
    }

    pub const ALL: [Source; 5] = [
        Source::Event,
        Source::Binlog,
        Source::Deadline,
        Source::Grace,
        Source::Retry,
    ];

    /// Whether its check runs `expired-orders` too: a deadline's, and a
    /// retry's (which may be one).
    pub fn asks_for_orders(self) -> bool {
        matches!(self, Source::Deadline | Source::Retry)
    }

    pub fn label(self) -> &'static str {
        match self {
            Source::Event => "event",
            Source::Binlog => "binlog",
            Source::Deadline => "deadline",
            Source::Grace => "grace",
            Source::Retry => "retry",
        }
    }
}

/// What [`WorkQueue::add`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// S now waits (it did not before).
    Queued,
    /// S already waited; it keeps the earlier due time.
    Merged,
    /// S is being checked; it waits again once that check is done.
    AfterCheck,
    /// The queue is full: S was not queued (a gap).
    Dropped,
}

/// A showtime handed out for a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    pub showtime: ShowtimeId,
    pub source: Source,
    /// When it was first due (for how long it waited).
    pub due: Instant,
    /// Failed checks of it so far, in a row.
    pub attempts: u32,
}

/// Most timed asks one waiting showtime carries for after its check (the
/// soonest are kept): past them, the deadlines read ahead and the checks
/// that defer a seat ask again.
const MAX_LATER: usize = 8;

#[derive(Debug, Clone)]
struct Waiting {
    due: Instant,
    source: Source,
    attempts: u32,
    /// Timed asks due after `due`, soonest first: each waits again once the
    /// check before it is done.
    later: Vec<(Instant, Source)>,
}

impl Waiting {
    fn new(due: Instant, source: Source, attempts: u32) -> Waiting {
        Waiting {
            due,
            source,
            attempts,
            later: Vec::new(),
        }
    }

    /// Which of two asks comes first: the earlier, and at one time the
    /// weightier source (a deadline's check also runs `expired-orders`).
    fn order(due: Instant, source: Source) -> (Instant, std::cmp::Reverse<u8>) {
        (due, std::cmp::Reverse(source.rank()))
    }

    /// Its asks: the one it waits for, then those it carries.
    fn asks(&self) -> impl Iterator<Item = (Instant, Source)> + '_ {
        std::iter::once((self.due, self.source)).chain(self.later.iter().copied())
    }

    /// One showtime's asks as one wait: the ask that comes first; the timed
    /// asks due after it, for after its check (which comes too soon to do
    /// their work). An event's change has happened when it is asked for, and
    /// an ask at the same time as a weightier one is covered by it.
    /// A commit's ask is carried too when the first check comes less than
    /// [`COMMIT_VISIBLE`] after the commit was read (`binlog_carry` before
    /// the commit's own time): the server sends a commit once it is in the
    /// binlog, before the engine's commit completes, so a check that came
    /// at once could read the rows as they were.
    fn from_asks(
        mut asks: Vec<(Instant, Source)>,
        attempts: u32,
        binlog_carry: Duration,
    ) -> Waiting {
        asks.sort_by_key(|(due, source)| Waiting::order(*due, *source));
        let (due, source) = asks[0];
        let too_soon = |d: Instant| d.checked_sub(binlog_carry).is_some_and(|t| due < t);
        let mut later: Vec<(Instant, Source)> = asks
            .into_iter()
            .skip(1)
            .filter(|(d, s)| *d > due && (s.timed() || (*s == Source::Binlog && too_soon(*d))))
            .collect();
        later.dedup();
        later.truncate(MAX_LATER);
        Waiting {
            due,
            source,
            attempts,
            later,
        }
    }

    /// One showtime asked for twice, with the failures so far.
    fn merge(self, other: Waiting, binlog_carry: Duration) -> Waiting {
        let attempts = self.attempts.max(other.attempts);
        Waiting::from_asks(
            self.asks().chain(other.asks()).collect(),
            attempts,
            binlog_carry,
        )
    }

    /// What waits once this one's check is done: the soonest of its later
    /// asks, carrying the others.
    fn after(mut self) -> Option<Waiting> {
        if self.later.is_empty() {
            return None;
        }
        let (due, source) = self.later.remove(0);
        Some(Waiting {
            due,
            source,
            attempts: 0,
            later: self.later,
        })
    }
}

/// The queue's limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most showtimes waiting or in flight at once.
    pub capacity: usize,
    /// Least time between two checks of one showtime.
    pub min_interval: Duration,
    /// First retry after a failed check; doubled per failure up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// How long after its notification an event is due (its change is that
    /// much older than its due time).
    pub event_settle: Duration,
    /// How long after its commit is read a commit's check is due.
    pub mysql_settle: Duration,
}

/// How long after a commit is read from the binlog it is surely visible to
/// other sessions (the engine's commit follows the binlog write by far less).
pub const COMMIT_VISIBLE: Duration = Duration::from_secs(1);

impl Limits {
    /// A commit's ask due more than this after an earlier check is carried
    /// past it ([`COMMIT_VISIBLE`]).
    fn binlog_carry(&self) -> Duration {
        self.mysql_settle.saturating_sub(COMMIT_VISIBLE)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            capacity: 100_000,
            min_interval: Duration::from_secs(1),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            event_settle: Duration::from_secs(2),
            mysql_settle: Duration::from_secs(3),
        }
    }
}

/// How many checks may start now: a token bucket refilled at `per_second`,
/// holding at most a second's worth, so that checks between passes cost at
/// most that many seat-hash reads a second however many changes arrive (the
/// rest wait, de-duplicated, in the queue; the pass is the net).
#[derive(Debug, Clone, Copy)]
pub struct CheckBudget {
    per_second: f64,
    tokens: f64,
    at: Instant,
}

impl CheckBudget {
    pub fn new(per_second: u32, now: Instant) -> CheckBudget {
        let per_second = f64::from(per_second.max(1));
        CheckBudget {
            per_second,
            tokens: per_second,
            at: now,
        }
    }

    /// Checks that may start at `now` (whole ones).
    pub fn available(&mut self, now: Instant) -> usize {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.per_second);
        self.at = now;
        self.tokens.floor() as usize
    }

    /// `n` checks started.
    pub fn spend(&mut self, n: usize) {
        self.tokens -= n as f64;
    }

    /// How long until one more check may start.
    pub fn wait_for_one(&self) -> Duration {
        Duration::from_secs_f64(((1.0 - self.tokens) / self.per_second).max(0.0))
    }
}

/// Showtimes waiting for a check, in two lanes ordered by due time.
#[derive(Debug)]
pub struct WorkQueue {
    limits: Limits,
    /// By [`Source::lane`]: known repairs, and events.
    lanes: [BTreeSet<(Instant, ShowtimeId)>; 2],
    /// The lane the next hand-out starts with.
    first_lane: usize,
    waiting: HashMap<ShowtimeId, Waiting>,
    /// Being checked; `Some` when added again meanwhile.
    in_flight: HashMap<ShowtimeId, Option<Waiting>>,
    /// When each recently checked showtime may be checked again. Pruned as
    /// it passes, so it holds at most the showtimes checked within
    /// `min_interval`.
    not_before: HashMap<ShowtimeId, Instant>,
    dropped: u64,
}

impl WorkQueue {
    pub fn new(limits: Limits) -> WorkQueue {
        WorkQueue {
            limits,
            lanes: Default::default(),
            first_lane: 0,
            waiting: HashMap::new(),
            in_flight: HashMap::new(),
            not_before: HashMap::new(),
            dropped: 0,
        }
    }

    /// Asks for a check of `showtime` at or after `due`.
    pub fn add(&mut self, showtime: ShowtimeId, due: Instant, source: Source) -> Added {
        let ask = Waiting::new(due, source, 0);
        if let Some(again) = self.in_flight.get_mut(&showtime) {
            *again = Some(match again.take() {
                Some(w) => w.merge(ask, self.limits.binlog_carry()),
                None => ask,
            });
            return Added::AfterCheck;
        }
        match self.waiting.remove(&showtime) {
            Some(w) => {
                self.lanes[w.source.lane()].remove(&(w.due, showtime));
                self.wait(showtime, w.merge(ask, self.limits.binlog_carry()));
                Added::Merged
            }
            None if self.waiting.len() + self.in_flight.len() >= self.limits.capacity => {
                self.dropped += 1;
                Added::Dropped
            }
            None => {
                self.wait(showtime, ask);
                Added::Queued
            }
        }
    }

    /// Puts `showtime` in line, no earlier than its minimum interval allows.
    fn wait(&mut self, showtime: ShowtimeId, mut w: Waiting) {
        if let Some(&not_before) = self.not_before.get(&showtime)
            && w.due < not_before
        {
            // Every ask moves to its minimum interval; those that then
            // fall at one time are one check, the weightiest.
            let asks = w.asks().map(|(due, s)| (due.max(not_before), s)).collect();
            w = Waiting::from_asks(asks, w.attempts, self.limits.binlog_carry());
        }
        self.lanes[w.source.lane()].insert((w.due, showtime));
        self.waiting.insert(showtime, w);
    }

    /// Hands out up to `max` showtimes due at `now`, each lane soonest
    /// first: one lane takes up to half (rounded up), the other the rest,
    /// and either what the other leaves; the lane that goes first takes
    /// turns, so that hand-outs of one share the lanes too. Each is in
    /// flight until [`WorkQueue::done`].
    pub fn take_due(&mut self, now: Instant, max: usize) -> Vec<Due> {
        let mut out = Vec::new();
        let (first, second) = (self.first_lane, 1 - self.first_lane);
        for (lane, upto) in [(first, max.div_ceil(2)), (second, max), (first, max)] {
            while out.len() < upto {
                let Some(&(due, showtime)) = self.lanes[lane].first() else {
                    break;
                };
                if due > now {
                    break;
                }
                self.lanes[lane].pop_first();
                self.hand_out(showtime, &mut out);
            }
        }
        if !out.is_empty() {
            self.first_lane = 1 - self.first_lane;
        }
        self.not_before.retain(|_, t| *t > now);
        out
    }

    fn hand_out(&mut self, showtime: ShowtimeId, out: &mut Vec<Due>) {
        if let Some(w) = self.waiting.remove(&showtime) {
            out.push(Due {
                showtime,
                source: w.source,
                due: w.due,
                attempts: w.attempts,
            });
            // Its later asks wait again once this check is done.
            self.in_flight.insert(showtime, w.after());
        }
    }

    /// The check of `taken` ended at `now`: `ok` or failed (then it is tried
    /// again after a backoff). An add during the check queues it once more.
    pub fn done(&mut self, taken: Due, ok: bool, now: Instant) {
        let again = self.in_flight.remove(&taken.showtime).flatten();
        self.not_before
            .insert(taken.showtime, now + self.limits.min_interval);
        let retry = (!ok).then(|| {
            let doublings = taken.attempts.min(16);
            let backoff = self
                .limits
                .backoff
                .saturating_mul(1 << doublings)
                .min(self.limits.max_backoff);
            Waiting::new(now + backoff, Source::Retry, taken.attempts + 1)
        });
        // Neither the change nor the retry waits longer than it asked; a
        // retry keeps its count of failures.
        let next = match (again, retry) {
            (Some(a), Some(r)) => Some(a.merge(r, self.limits.binlog_carry())),
            (a, r) => a.or(r),
        };
        if let Some(w) = next {
            // Never dropped: it takes the place its check held.
            self.wait(taken.showtime, w);
        }
    }

    /// `showtime` was read (by a pass or a check) from `read_at` on: a
    /// waiting check of an event or a grace end that came before that is
    /// dropped, since that read saw it (an event's change is `event_settle`
    /// older than its due time; a grace end is its due time). Whatever the
    /// read could not repair, the sweep that read it asks for again. A
    /// deadline stays: a seat read cancels no order.
    /// Whether a check of `showtime` runs now or is due by `by`.
    pub fn check_due_by(&self, showtime: ShowtimeId, by: Instant) -> bool {
        self.in_flight.contains_key(&showtime)
            || self.waiting.get(&showtime).is_some_and(|w| w.due <= by)
    }

    pub fn swept(&mut self, showtime: ShowtimeId, read_at: Instant) {
        if !self
            .waiting
            .get(&showtime)
            .is_some_and(|w| self.seen(w, read_at))
        {
            return;
        }
        let Some(w) = self.waiting.remove(&showtime) else {
            return;
        };
        self.lanes[w.source.lane()].remove(&(w.due, showtime));
        // What it carried for later waits on, unless that read saw it too.
        let mut rest = w.after();
        while let Some(next) = rest {
            if !self.seen(&next, read_at) {
                self.wait(showtime, next);
                break;
            }
            rest = next.after();
        }
    }

    /// Whether a seat read from `read_at` on did `w`'s work.
    fn seen(&self, w: &Waiting, read_at: Instant) -> bool {
        let cause = match w.source {
            Source::Event => w.due.checked_sub(self.limits.event_settle),
            _ => Some(w.due),
        };
        w.source.seen_by_a_read() && cause.is_none_or(|c| c <= read_at)
    }

    /// When the soonest waiting showtime is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.lanes
            .iter()
            .filter_map(|lane| lane.first().map(|(due, _)| *due))
            .min()
    }

    /// Showtimes waiting (not counting those in flight).
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Showtimes being checked.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Adds refused because the queue was full, since it was made.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// How long the most overdue waiting showtime has been due at `now`.
    pub fn oldest_due_age(&self, now: Instant) -> Duration {
        self.next_due()
            .map_or(Duration::ZERO, |due| now.saturating_duration_since(due))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits() -> Limits {
        Limits {
            capacity: 3,
            min_interval: Duration::from_secs(1),
            backoff: Duration::from_secs(2),
            max_backoff: Duration::from_secs(10),
            event_settle: Duration::from_secs(2),
            mysql_settle: Duration::from_secs(3),
        }
    }

    fn secs(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn a_showtime_waits_once_and_the_earlier_due_time_wins() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new(limits());
        assert_eq!(q.add(1, secs(t0, 5), Source::Event), Added::Queued);
        assert_eq!(q.add(1, secs(t0, 9), Source::Event), Added::Merged);
        assert_eq!(q.add(1, secs(t0, 2), Source::Event), Added::Merged);
        assert_eq!(q.len(), 1);
        assert!(q.take_due(secs(t0, 1), 10).is_empty());
        let due = q.take_due(secs(t0, 2), 10);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].showtime, due[0].source), (1, Source::Event));
        q.done(due[0], true, secs(t0, 2));
        // The later events' changes had happened: that check saw them.
        assert!(q.is_empty());
        assert_eq!(q.next_due(), None);
        // At one time, the weightier source (a deadline's check also runs
        // `expired-orders`).
        q.add(2, secs(t0, 20), Source::Event);
        q.add(2, secs(t0, 20), Source::Deadline);
        q.add(2, secs(t0, 20), Source::Grace);
        let due = q.take_due(secs(t0, 20), 10);
        assert_eq!(due[0].source, Source::Deadline);
    }

    /// A commit read from the binlog is a change like an event: in the
    /// events' lane, weightier than an event at one time, lighter than a
    /// grace end, not carried past an earlier check that comes once the
    /// commit is visible, and carried past one that comes sooner.
    #[test]
    fn a_binlog_commit_is_a_change_in_the_events_lane() {
        assert_eq!(Source::Binlog.lane(), Source::Event.lane());
        assert!(!Source::Binlog.timed());
        assert_eq!(Source::Binlog.label(), "binlog");
        let t0 = Instant::now();
        let mut q = WorkQueue::new(limits());
        q.add(1, secs(t0, 3), Source::Event);
        q.add(1, secs(t0, 3), Source::Binlog);
        let due = q.take_due(secs(t0, 3), 10);
        assert_eq!(due[0].source, Source::Binlog);
        q.done(due[0], true, secs(t0, 3));
        q.add(2, secs(t0, 5), Source::Binlog);
        q.add(2, secs(t0, 5), Source::Grace);
        let due = q.take_due(secs(t0, 5), 10);
        assert_eq!(due[0].source, Source::Grace);
        q.done(due[0], true, secs(t0, 5));
        // An earlier event's check sees a later commit's change: the commit
        // was read at 11 - 3 = 8 s, the check comes at 9 s, a second after.
        q.add(3, secs(t0, 9), Source::Event);
        q.add(3, secs(t0, 11), Source::Binlog);
        let due = q.take_due(secs(t0, 9), 10);
        assert_eq!(due[0].source, Source::Event);
        q.done(due[0], true, secs(t0, 9));
        assert!(q.is_empty());
        // A check due at once, as the commit is read (at 20 s), may come
        // before it is visible: the commit's check keeps its time.
        q.add(4, secs(t0, 20), Source::Event);
        q.add(4, secs(t0, 23), Source::Binlog);
        let due = q.take_due(secs(t0, 20), 10);
        assert_eq!(due[0].source, Source::Event);
        q.done(due[0], true, secs(t0, 20));
        assert_eq!(q.next_due(), Some(secs(t0, 23)));
    }

    /// A check that comes before a grace's end or a deadline cannot do
    /// their work (the seat is not ready, the order not yet due): they wait
    /// again after it, each at its own time.
    #[test]
    fn a_grace_end_or_deadline_after_an_earlier_check_waits_for_its_time() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new(limits());
        q.add(1, secs(t0, 5), Source::Grace);
        q.add(1, secs(t0, 9), Source::Deadline);
        q.add(1, secs(t0, 2), Source::Event);
        assert_eq!(q.len(), 1);
        let mut seen = Vec::new();
        let mut now = t0;
        while let Some(next) = q.next_due() {
            now = next;
            for d in q.take_due(now, 10) {
                seen.push(((d.due - t0).as_secs(), d.source));
                q.done(d, true, now);
            }
        }
        assert_eq!(
            seen,
            vec![
                (2, Source::Event),
                (5, Source::Grace),
                (9, Source::Deadline)
            ]
        );
        // A change during the check merges with what it carried.
        q.add(2, secs(now, 1), Source::Event);
        q.add(2, secs(now, 30), Source::Deadline);
        let taken = q.take_due(secs(now, 1), 10)[0];
        q.add(2, secs(now, 2), Source::Event);
        q.done(taken, true, secs(now, 1));
        let next = q.take_due(secs(now, 2), 10)[0];
        assert_eq!(next.source, Source::Event);
        q.done(next, true, secs(now, 2));
        assert_eq!(q.next_due(), Some(secs(now, 30)));
    }

    #[test]
    fn a_change_during_a_check_runs_it_once_more_after() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new(limits());
        q.add(1, t0, Source::Event);
        let taken = q.take_due(t0, 10)[0];
        // Never two checks at once: S is not handed out while in flight.
        assert_eq!(q.add(1, t0, Source::Event), Added::AfterCheck);
        assert_eq!(q.add(1, t0, Source::Event), Added::AfterCheck);
        assert!(q.take_due(secs(t0, 5), 10).is_empty());
        q.done(taken, true, secs(t0, 5));
        // Once more, and no earlier than its minimum interval.
        assert!(q.take_due(secs(t0, 5), 10).is_empty());
        let again = q.take_due(secs(t0, 6), 10);
        assert_eq!(again.len(), 1);
        assert!(q.is_empty() && q.in_flight() == 1);
    }

    #[test]
    fn events_within_the_minimum_interval_are_one_check() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new(limits());
        q.add(1, t0, Source::Event);
        let taken = q.take_due(t0, 10)[0];
        q.done(taken, true, t0);
        for _ in 0..100 {
            q.add(1, t0, Source::Event);
        }
        assert_eq!(q.len(), 1);
        assert_eq!(q.next_due(), Some(secs(t0, 1)));
    }

    #[test]
    fn a_failed_check_is_retried_with_a_growing_backoff() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new(limits());
        q.add(7, t0, Source::Event);
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..5 {
            let taken = q.take_due(now, 10);
            assert_eq!(taken.len(), 1);
            q.done(taken[0], false, now);
            let next = q.next_due().unwrap();
            waits.push((next - now).as_secs());
            now = next;
        }
        assert_eq!(waits, vec![2, 4, 8, 10, 10]);
        assert_eq!(q.take_due(now, 10)[0].source, Source::Retry);
    }

    #[test]
    fn known_repairs_and_events_share_each_hand_out() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new(Limits {
            capacity: 10,
            ..limits()
        });
        for s in 1..=3 {
            q.add(s, t0, Source::Event);
        }
        q.add(8, secs(t0, 4), Source::Grace);
        q.add(9, secs(t0, 5), Source::Grace);
        // Half each: the grace ends do not starve the earlier events.
        let first = q.take_due(secs(t0, 5), 2);
        assert_eq!(
            first.iter().map(|d| d.showtime).collect::<Vec<_>>(),
            vec![8, 1]
        );
        // One at a time, the lanes take turns.
        let one = |q: &mut WorkQueue| q.take_due(secs(t0, 5), 1)[0].showtime;
        assert_eq!((one(&mut q), one(&mut q)), (2, 9));
        // A lane with nothing due leaves its share to the other.
        assert_eq!(one(&mut q), 3);
        // An earlier event on a showtime waiting for its grace is checked
        // first, in the events' lane; the grace's end waits for after.
        q.add(7, secs(t0, 9), Source::Grace);
        q.add(7, secs(t0, 6), Source::Event);
        let next = q.take_due(secs(t0, 6), 1);
        assert_eq!((next[0].showtime, next[0].source), (7, Source::Event));
        q.done(next[0], true, secs(t0, 6));
        assert_eq!(q.next_due(), Some(secs(t0, 9)));
    }

    #[test]
    fn a_check_is_due_by_a_time_while_it_waits_for_it_or_runs() {
        let t0 = secs(Instant::now(), 100);
        let mut q = WorkQueue::new(limits());
        q.add(1, secs(t0, 2), Source::Event);
        q.add(2, secs(t0, 50), Source::Grace);
        assert!(q.check_due_by(1, secs(t0, 2)));
        assert!(!q.check_due_by(1, secs(t0, 1)));
        assert!(!q.check_due_by(2, secs(t0, 49)));
        assert!(!q.check_due_by(3, secs(t0, 100)), "never asked");
        // Taken for a check: due (it runs) until done.
        let taken = q.take_due(secs(t0, 2), 10);
        assert!(q.check_due_by(1, t0));
        q.done(taken[0], true, secs(t0, 3));
        assert!(!q.check_due_by(1, secs(t0, 10)));
    }

    #[test]
    fn a_read_after_the_change_drops_its_check_and_one_before_keeps_it() {
        let t0 = secs(Instant::now(), 100);
        let mut q = WorkQueue::new(limits());
        // An event at t0 is due at t0 + 2 (settle); a grace end at t0 + 50.
        q.add(1, secs(t0, 2), Source::Event);
        q.add(2, secs(t0, 50), Source::Grace);
        // A read that began before the change leaves it waiting.
        q.swept(1, t0 - Duration::from_millis(1));
        q.swept(2, secs(t0, 49));
        assert_eq!(q.len(), 2);
        // A read that began after it saw it: no check needed.
        q.swept(1, t0);
        q.swept(2, secs(t0, 50));
        assert!(q.is_empty());
        assert_eq!(q.next_due(), None);
        // A seat read cancels no order: a deadline stays, and so does one
        // carried by an event the read saw.
        q.add(3, secs(t0, 10), Source::Deadline);
        q.add(4, secs(t0, 60), Source::Deadline);
        q.add(4, secs(t0, 2), Source::Event);
        q.swept(3, secs(t0, 70));
        q.swept(4, secs(t0, 70));
        assert_eq!(q.len(), 2);
        let due = q.take_due(secs(t0, 70), 10);
        assert!(due.iter().all(|d| d.source == Source::Deadline), "{due:?}");
    }

    #[test]
    fn the_budget_lets_through_its_rate_and_a_second_at_most() {
        let t0 = Instant::now();
        let mut b = CheckBudget::new(20, t0);
        assert_eq!(b.available(t0), 20);
        b.spend(20);
        assert_eq!(b.available(t0), 0);
        assert_eq!(b.wait_for_one(), Duration::from_millis(50));
        assert_eq!(b.available(t0 + Duration::from_millis(500)), 10);
        // Idle for a minute: still one second's worth, not a minute's.
        assert_eq!(b.available(t0 + Duration::from_secs(60)), 20);
    }

    #[test]
    fn a_full_queue_drops_new_showtimes_and_counts_them_but_merges_known_ones() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new(limits());
        for s in 1..=3 {
            assert_eq!(q.add(s, t0, Source::Event), Added::Queued);
        }
        assert_eq!(q.add(4, t0, Source::Event), Added::Dropped);
        assert_eq!(q.add(2, t0, Source::Event), Added::Merged);
        assert_eq!((q.len(), q.dropped()), (3, 1));
    }

    proptest! {
        /// Whatever the sequence of adds (of every source), reads, checks and
        /// outcomes: a showtime is never handed out twice at once, never
        /// waits twice, the queue stays within its capacity, and no deadline
        /// is lost: each one not dropped is handed out, as a deadline, at or
        /// after its time.
        #[test]
        fn the_queue_keeps_its_rules(ops in prop::collection::vec((0u8..6, 0i64..6, 0u64..20), 1..200)) {
            let t0 = Instant::now();
            let mut q = WorkQueue::new(limits());
            let mut taken: Vec<Due> = Vec::new();
            let mut deadlines: Vec<(ShowtimeId, Instant)> = Vec::new();
            let mut now = t0;
            let hand_out = |q: &mut WorkQueue, taken: &mut Vec<Due>, deadlines: &mut Vec<(ShowtimeId, Instant)>, now: Instant| {
                for d in q.take_due(now, 2) {
                    assert!(!taken.iter().any(|t| t.showtime == d.showtime));
                    assert!(d.due <= now);
                    if d.source == Source::Deadline {
                        deadlines.retain(|(s, due)| *s != d.showtime || *due > now);
                    }
                    taken.push(d);
                }
            };
            for (op, s, at) in ops {
                now = now.max(secs(t0, at));
                match op {
                    0 => {
                        let source = [Source::Event, Source::Binlog][at as usize % 2];
                        q.add(s, secs(t0, at), source);
                    }
                    1 => {
                        let source = [Source::Grace, Source::Deadline, Source::Retry][at as usize % 3];
                        let due = secs(t0, at + 3);
                        if q.add(s, due, source) != Added::Dropped && source == Source::Deadline {
                            deadlines.push((s, due));
                        }
                    }
                    2 => hand_out(&mut q, &mut taken, &mut deadlines, now),
                    3 => q.swept(s, now),
                    _ => if let Some(d) = taken.pop() { q.done(d, at % 2 == 0, now); }
                }
                prop_assert!(q.len() + q.in_flight() <= limits().capacity);
                prop_assert_eq!(q.lanes.iter().map(BTreeSet::len).sum::<usize>(), q.waiting.len());
                prop_assert_eq!(q.in_flight(), taken.len());
            }
            // Drained, each check succeeding: every deadline came.
            for _ in 0..1_000 {
                for d in taken.drain(..) {
                    q.done(d, true, now);
                }
                let Some(next) = q.next_due() else { break };
                now = now.max(next);
                hand_out(&mut q, &mut taken, &mut deadlines, now);
            }
            prop_assert!(deadlines.is_empty(), "lost: {:?}", deadlines);
        }
    }
}
