//! Pacing of the daemon's reads (rule 14): the pace spends a latency budget
//! instead of keeping to a fixed rate. It climbs while Redis answers our
//! reads within `REDIS_BUDGET` of their learned baseline, and halves when it
//! no longer does or when MySQL answers far slower than usual. Additive
//! increase, multiplicative decrease, as TCP does; the anchors are
//! pt-table-checksum's `--max-load` and `--chunk-time`, redis-full-check's
//! `--qps` (kept as an optional cap, `sweep.max_hashes_per_second`), and
//! TCP Vegas' idea of judging the queue by the time over the lowest one
//! seen. Decisions only: the caller measures and sleeps.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where the pace starts: on two cores, a pace that live holds barely
/// notice (benches/README.md, "Soak").
const START_RATE: f64 = 2000.0;
/// The pace never falls below this: a pass slows down under pressure, it
/// never stops.
const FLOOR_RATE: f64 = 100.0;
/// While reads answer within half the budget, the pace climbs by this share
/// per second of reads at the pace (10 %: from 2,000 to 10,000 hashes/s in
/// about 17 s).
const RISE_PER_SECOND: f64 = 0.10;
/// How much longer than its baseline a Redis read may take, smoothed over
/// recent reads, before the pace halves. A live hold queued behind our reads
/// waits about as much longer as they do, so this is the budget the spec
/// gives holds (+1 ms at p99).
const REDIS_BUDGET: Duration = Duration::from_millis(1);
/// Weight of the latest read in the smoothed excess (about the last ten).
const EXCESS_WEIGHT: f64 = 0.1;
/// A MySQL read is slow when it takes longer than this many times its
/// baseline…
const MYSQL_SLOW_FACTOR: f64 = 3.0;
/// …plus this much: jitter is not pressure.
const MYSQL_SLOW_SLACK: Duration = Duration::from_millis(5);
/// After a back-off, this many reads are not judged: the halved pace needs
/// time to show.
const COOLDOWN_READS: u32 = 8;

/// Which store a measured read went to; each has its own baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    Redis,
    Mysql,
}

/// What a read says about the pressure on its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Within half the budget: room to climb.
    Room,
    /// Within the budget: hold the pace.
    Hold,
    /// Over it: halve.
    Slow,
}

/// One store's reads: the baseline time per item (the lowest seen, rising
/// only slowly, so that our own pressure stands out against it) and the
/// smoothed time over it.
#[derive(Debug, Clone, Copy, Default)]
struct Reads {
    baseline_per_item_s: Option<f64>,
    excess_s: f64,
}

impl Reads {
    /// Learns from `took` for `items` and returns its time over the
    /// baseline (0 for the first read).
    fn learn(&mut self, items: usize, took: Duration) -> f64 {
        let items = items.max(1) as f64;
        let per_item = took.as_secs_f64() / items;
        let Some(base) = self.baseline_per_item_s else {
            self.baseline_per_item_s = Some(per_item);
            return 0.0;
        };
        // Down at once, up slowly (a lasting change, such as larger hashes,
        // becomes the baseline after some hundred reads).
        let weight = if per_item < base { 0.5 } else { 0.01 };
        self.baseline_per_item_s = Some(base + (per_item - base) * weight);
        (per_item - base).max(0.0) * items
    }

    fn judge(&mut self, store: Store, items: usize, took: Duration) -> Verdict {
        let base = self.baseline_per_item_s;
        let excess = self.learn(items, took);
        match store {
            Store::Redis => {
                self.excess_s += (excess - self.excess_s) * EXCESS_WEIGHT;
                let budget = REDIS_BUDGET.as_secs_f64();
                if self.excess_s > budget {
                    Verdict::Slow
                } else if self.excess_s > budget / 2.0 {
                    Verdict::Hold
                } else {
                    Verdict::Room
                }
            }
            // A few large reads per chunk: each judged on its own.
            Store::Mysql => {
                let usual = base.unwrap_or(0.0) * items.max(1) as f64;
                let limit = MYSQL_SLOW_FACTOR * usual + MYSQL_SLOW_SLACK.as_secs_f64();
                if base.is_some() && took.as_secs_f64() > limit {
                    Verdict::Slow
                } else {
                    Verdict::Hold
                }
            }
        }
    }
}

#[derive(Debug)]
struct State {
    rate: f64,
    next_at: Option<Instant>,
    reads: [Reads; 2],
    cooldown: u32,
    backoffs: u64,
    /// The last reservation had to wait: the pace, not the stores, set how
    /// fast the pass went (climbing is pointless otherwise).
    binding: bool,
}

/// One per daemon: its pace outlives a pass, so what it learned carries over.
#[derive(Debug)]
pub struct Pacer {
    cap: Option<f64>,
    batch: usize,
    state: Mutex<State>,
}

impl Pacer {
    /// `max_per_second`: an optional cap on the pace (0: none).
    pub fn new(max_per_second: u32, batch: usize) -> Pacer {
        let cap = (max_per_second > 0).then(|| f64::from(max_per_second));
        Pacer {
            cap,
            batch: batch.max(1),
            state: Mutex::new(State {
                rate: cap.map_or(START_RATE, |c| c.min(START_RATE)),
                next_at: None,
                reads: [Reads::default(); 2],
                cooldown: 0,
                backoffs: 0,
                binding: false,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn floor(&self) -> f64 {
        self.cap.map_or(FLOOR_RATE, |c| c.min(FLOOR_RATE))
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
        s.binding = start > now;
        start - now
    }

    /// Learns from a read of `items` that took `took`: halves the pace when
    /// its store is over budget, climbs when Redis has room and the pace is
    /// what holds the pass back.
    pub fn observe(&self, store: Store, items: usize, took: Duration) {
        let mut s = self.state();
        let verdict = s.reads[store as usize].judge(store, items, took);
        if s.cooldown > 0 {
            s.cooldown -= 1;
            return;
        }
        match verdict {
            Verdict::Slow => {
                s.rate = (s.rate / 2.0).max(self.floor());
                s.cooldown = COOLDOWN_READS;
                s.backoffs += 1;
            }
            Verdict::Room if store == Store::Redis && s.binding => {
                // `items` at the pace take items / rate seconds.
                let climbed = s.rate + RISE_PER_SECOND * items as f64;
                s.rate = self.cap.map_or(climbed, |c| climbed.min(c));
            }
            Verdict::Room | Verdict::Hold => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const US: Duration = Duration::from_micros(1);

    /// Reserves and observes `n` Redis reads of `items` that each took `took`,
    /// with the pace binding (each reservation made at the same instant).
    fn paced_reads(p: &Pacer, n: usize, items: usize, took: Duration) {
        let t0 = Instant::now();
        for _ in 0..n {
            p.reserve(items, t0);
            p.observe(Store::Redis, items, took);
        }
    }

    #[test]
    fn reads_are_spaced_at_the_pace() {
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
    fn without_a_cap_the_pace_climbs_while_redis_answers_at_its_baseline() {
        let p = Pacer::new(0, 4);
        assert_eq!(p.rate(), START_RATE);
        // Some seconds of reads at the pace, all at the baseline: each adds
        // 10 % of what it read (4 × 0.1 hashes/s).
        paced_reads(&p, 5_000, 4, 200 * US);
        assert!(
            (p.rate() - 2.0 * START_RATE).abs() < 1.0,
            "climbed: {}",
            p.rate()
        );
        assert_eq!(p.backoffs(), 0);
    }

    #[test]
    fn the_pace_does_not_climb_when_it_is_not_what_holds_the_pass_back() {
        let p = Pacer::new(0, 4);
        // Each read reserved after the last one's room ran out: no wait.
        let mut t = Instant::now();
        for _ in 0..5_000 {
            assert_eq!(p.reserve(4, t), Duration::ZERO);
            p.observe(Store::Redis, 4, 200 * US);
            t += 10 * MS;
        }
        assert_eq!(p.rate(), START_RATE);
    }

    #[test]
    fn a_cap_bounds_the_climb_and_the_start() {
        let p = Pacer::new(1000, 4);
        assert_eq!(p.rate(), 1000.0);
        paced_reads(&p, 5_000, 4, 200 * US);
        assert_eq!(p.rate(), 1000.0);
        let high = Pacer::new(3000, 4);
        assert_eq!(high.rate(), START_RATE);
        paced_reads(&high, 5_000, 4, 200 * US);
        assert_eq!(high.rate(), 3000.0);
    }

    #[test]
    fn reads_lasting_over_the_budget_halve_the_pace_and_it_climbs_back() {
        let p = Pacer::new(0, 4);
        paced_reads(&p, 50, 4, 200 * US);
        let before = p.rate();
        // A single slow read is jitter: the smoothed excess stays in budget.
        paced_reads(&p, 1, 4, 3 * MS);
        assert_eq!(p.backoffs(), 0);
        paced_reads(&p, 50, 4, 200 * US);
        // Reads that stay 3 ms over the baseline: the queue is ours.
        paced_reads(&p, 30, 4, 3 * MS);
        assert!(p.backoffs() >= 1);
        assert!(p.rate() < before, "{} < {before}", p.rate());
        let low = p.rate();
        paced_reads(&p, 3_000, 4, 200 * US);
        assert!(p.rate() > low, "climbs back: {} > {low}", p.rate());
    }

    #[test]
    fn the_pace_never_falls_below_its_floor() {
        let p = Pacer::new(0, 10);
        p.observe(Store::Mysql, 200, 20 * MS);
        for _ in 0..200 {
            p.observe(Store::Mysql, 200, Duration::from_secs(10));
        }
        assert_eq!(p.rate(), FLOOR_RATE);
        // A cap below the floor is the floor.
        let slow = Pacer::new(50, 10);
        for i in 1..200 {
            slow.observe(Store::Redis, 10, i * MS);
        }
        assert!(slow.backoffs() > 0);
        assert_eq!(slow.rate(), 50.0);
    }

    #[test]
    fn each_store_is_judged_against_its_own_baseline() {
        let p = Pacer::new(0, 10);
        // MySQL pages are slow in absolute terms but usual for MySQL.
        for _ in 0..20 {
            p.observe(Store::Mysql, 200, 40 * MS);
            p.observe(Store::Redis, 10, MS / 4);
        }
        assert_eq!(p.backoffs(), 0);
        // A MySQL read far over its own baseline is pressure.
        p.observe(Store::Mysql, 200, 200 * MS);
        assert_eq!(p.backoffs(), 1);
    }
}
