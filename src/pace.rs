//! Pacing of the daemon's reads (rule 14): a ceiling on seat hashes read per
//! second, in small batches, and an automatic back-off when Redis or MySQL
//! answer slower than usual. Additive increase, multiplicative decrease, as
//! TCP does; the anchors are pt-table-checksum's `--max-load` and
//! `--chunk-time` and redis-full-check's `--qps`. Decisions only: the caller
//! measures and sleeps.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The pace never falls below this share of the ceiling: a pass slows
/// down under pressure, it never stops.
const FLOOR_SHARE: f64 = 0.05;
/// Each fast batch gives back this share of the ceiling.
const RECOVERY_SHARE: f64 = 0.02;
/// A read is slow when it takes longer than this many times its usual time…
const SLOW_FACTOR: f64 = 3.0;
/// …plus this much: sub-millisecond jitter is not pressure.
const SLOW_SLACK: Duration = Duration::from_millis(1);
/// After a back-off, this many reads are not judged: the halved pace needs
/// time to show.
const COOLDOWN_READS: u32 = 8;

/// Which store a measured read went to; each has its own usual time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    Redis,
    Mysql,
}

/// The usual time per item of one store's reads: a moving average of the
/// reads that were not slow, so that a slowdown stands out against it.
#[derive(Debug, Clone, Copy, Default)]
struct Usual {
    per_item_s: Option<f64>,
}

impl Usual {
    /// Whether `took` for `items` is slow, and learns from it.
    fn judge(&mut self, items: usize, took: Duration) -> bool {
        let per_item = took.as_secs_f64() / items.max(1) as f64;
        let Some(usual) = self.per_item_s else {
            self.per_item_s = Some(per_item);
            return false;
        };
        let limit = SLOW_FACTOR * usual * items.max(1) as f64 + SLOW_SLACK.as_secs_f64();
        let slow = took.as_secs_f64() > limit;
        // A lasting slowdown becomes the new usual only slowly (after some
        // two hundred slow reads), so the pace stays down while it lasts.
        let weight = if slow { 0.002 } else { 0.05 };
        self.per_item_s = Some(usual + (per_item - usual) * weight);
        slow
    }
}

#[derive(Debug)]
struct State {
    rate: f64,
    next_at: Option<Instant>,
    usual: [Usual; 2],
    cooldown: u32,
    backoffs: u64,
}

/// One per daemon: its pace outlives a pass, so a back-off carries over.
#[derive(Debug)]
pub struct Pacer {
    ceiling: f64,
    batch: usize,
    state: Mutex<State>,
}

impl Pacer {
    pub fn new(max_per_second: u32, batch: usize) -> Pacer {
        let ceiling = f64::from(max_per_second.max(1));
        Pacer {
            ceiling,
            batch: batch.max(1),
            state: Mutex::new(State {
                rate: ceiling,
                next_at: None,
                usual: [Usual::default(); 2],
                cooldown: 0,
                backoffs: 0,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Seat hashes per Redis round trip.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The current pace, in seat hashes per second.
    pub fn rate(&self) -> f64 {
        self.state().rate
    }

    /// How many times the pace was halved so far.
    pub fn backoffs(&self) -> u64 {
        self.state().backoffs
    }

    /// Reserves `items` reads at the current pace: how long to wait before
    /// sending them. Time not used is not saved up, so there is no burst
    /// after a pause.
    pub fn reserve(&self, items: usize, now: Instant) -> Duration {
        let mut s = self.state();
        let start = s.next_at.map_or(now, |at| at.max(now));
        s.next_at = Some(start + Duration::from_secs_f64(items as f64 / s.rate));
        start - now
    }

    /// Learns from a read of `items` that took `took`: halves the pace when
    /// it was slow for its store, and climbs back a little when it was not.
    pub fn observe(&self, store: Store, items: usize, took: Duration) {
        let mut s = self.state();
        let slow = s.usual[store as usize].judge(items, took);
        if s.cooldown > 0 {
            s.cooldown -= 1;
            return;
        }
        if slow {
            s.rate = (s.rate / 2.0).max(self.ceiling * FLOOR_SHARE);
            s.cooldown = COOLDOWN_READS;
            s.backoffs += 1;
        } else {
            s.rate = (s.rate + self.ceiling * RECOVERY_SHARE).min(self.ceiling);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn reads_are_spaced_at_the_ceiling() {
        let p = Pacer::new(1000, 10);
        let t0 = Instant::now();
        assert_eq!(p.reserve(10, t0), Duration::ZERO);
        // 10 hashes at 1000/s take 10 ms of the budget.
        assert_eq!(p.reserve(10, t0), 10 * MS);
        assert_eq!(p.reserve(10, t0 + 5 * MS), 15 * MS);
        // Idle time is not saved up: no burst after a pause.
        let later = t0 + Duration::from_secs(5);
        assert_eq!(p.reserve(10, later), Duration::ZERO);
        assert_eq!(p.reserve(10, later), 10 * MS);
    }

    #[test]
    fn a_slow_store_halves_the_pace_and_fast_reads_restore_it() {
        let p = Pacer::new(1000, 10);
        for _ in 0..20 {
            p.observe(Store::Redis, 10, MS / 2);
        }
        assert_eq!(p.rate(), 1000.0);
        p.observe(Store::Redis, 10, 20 * MS);
        assert_eq!(p.rate(), 500.0);
        assert_eq!(p.backoffs(), 1);
        // During the cooldown a slow read does not halve again.
        p.observe(Store::Redis, 10, 20 * MS);
        assert_eq!(p.rate(), 500.0);
        for _ in 0..100 {
            p.observe(Store::Redis, 10, MS / 2);
        }
        assert_eq!(p.rate(), 1000.0, "recovers to the ceiling, never above");
    }

    #[test]
    fn the_pace_never_falls_below_its_floor() {
        let p = Pacer::new(1000, 10);
        p.observe(Store::Mysql, 200, 20 * MS);
        for _ in 0..100 {
            p.observe(Store::Mysql, 200, Duration::from_secs(10));
        }
        assert_eq!(p.rate(), 50.0);
    }

    #[test]
    fn each_store_is_judged_against_its_own_usual_time() {
        let p = Pacer::new(1000, 10);
        // MySQL pages are slow in absolute terms but usual for MySQL.
        for _ in 0..20 {
            p.observe(Store::Mysql, 200, 40 * MS);
            p.observe(Store::Redis, 10, MS / 4);
        }
        assert_eq!(p.backoffs(), 0);
        // Sub-millisecond jitter is not pressure.
        p.observe(Store::Redis, 10, MS);
        assert_eq!(p.backoffs(), 0);
    }
}
