//! Pacing of the daemon's reads (rule 14): the pace spends a latency budget
//! instead of keeping to a fixed rate. It climbs while every recent Redis
//! read answered within `REDIS_BUDGET` of the learned baseline, and halves
//! when more than one in a hundred did not (the spec's budget is on live
//! holds' p99, and a hold waits on Redis and the CPU as our reads do), or
//! when MySQL answers far slower than usual. Additive increase,
//! multiplicative decrease, as TCP does; the anchors are pt-table-checksum's
//! `--max-load` and `--chunk-time`, redis-full-check's `--qps` (kept as an
//! optional cap, `pass.max_hashes_per_second`), and TCP Vegas' idea of
//! judging the queue by the time over the lowest one seen.
//!
//! Reading each hash once per interval comes first, up to `NEED_UP_TO`: a
//! pass tells the pacer the pace it needs to finish by its deadline
//! (`need`), and the pace never falls below that, or below `NEED_UP_TO`
//! for a pass that needs more; the pass's measured fit (`pass_fit`) then
//! says how many shards would do. The budget wins too when
//! Redis stays under pressure: a back-off now and then is noise on a busy
//! machine, but back-offs in a row with no calm window between them, each
//! with more than one read in ten late, mean something else is loading
//! Redis (another client), and each one more halves what the pass may ask
//! for. Decisions only: the caller
//! measures and sleeps.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Where the pace starts: on two cores, a pace that live holds barely
/// notice (benches/results/2026-12-04-pacing.md).
const START_RATE: f64 = 2000.0;
/// The most a pass's need takes the pace to (`Pacer::need`). Paced, a
/// pass reads Redis and MySQL one after the other, so it asks for
/// `NEED_OVER_BARE` (2.5) times the bare rate: at 100 k showtimes a minute
/// that is 4,167 hashes a second (benches/results/2026-12-06-pace-100k.md).
const NEED_UP_TO: f64 = 5000.0;
/// How much faster than the bare rate a paced pass asks to read: a chunk
/// reads Redis, then MySQL, then repairs, and at 100 k showtimes the hash
/// reads are well under half of a chunk's time (at twice the bare rate a
/// pass read 100 k showtimes in 75 s, not 60).
const NEED_OVER_BARE: f64 = 2.5;
/// A sleep ends on the timer's next millisecond at the earliest, so a read
/// that keeps to its slot exactly loses the rest of that millisecond each
/// time its slot is shorter than the sleep and the round trip: at 4 hashes
/// a batch, 3,000 and 5,000 a second both read at about 2,700. Reads this
/// far behind their slots are still owed, so the pace is kept on average;
/// a pause saves no more than this (no burst).
const TIMER_SLACK: Duration = Duration::from_millis(2);
/// The pace never falls below this: a pass slows down under pressure, it
/// never stops.
const FLOOR_RATE: f64 = 100.0;
/// While every recent read answers within the budget, the pace climbs by
/// this share per second of reads at the pace (10 %: from 2,000 to 10,000
/// hashes/s in about 17 s).
const RISE_PER_SECOND: f64 = 0.10;
/// How much longer than its baseline a Redis read may take. A live hold
/// queued behind our reads, or waiting for a core, waits about as much
/// longer as they do, so this is the budget the spec gives holds (+1 ms).
const REDIS_BUDGET: Duration = Duration::from_millis(1);
/// The recent Redis reads judged together: the budget is on the p99, so
/// more than `WINDOW / 100` over it is pressure.
const WINDOW: usize = 100;
/// Reads over the budget in more than one in this many of the recent ones
/// is another client loading Redis, not a busy host's noise: only then
/// does a back-off count as pressure that yields what the pass needs. On
/// two cores shared with MySQL a few reads in a hundred come late by a
/// scheduler's slice whatever Redis does; counting those took the pace of
/// 10 k showtimes to 108 hashes a second (the pass needed 167).
const LOADED_ONE_IN: usize = 10;
/// A MySQL read is slow when it takes longer than this many times its
/// baseline…
const MYSQL_SLOW_FACTOR: f64 = 3.0;
/// …plus this much: jitter is not pressure.
const MYSQL_SLOW_SLACK: Duration = Duration::from_millis(5);
/// After a back-off, this many reads are not judged: the halved pace needs
/// time to show (and the reads over budget before it are forgotten).
const COOLDOWN_READS: u32 = 50;

/// Which store a measured read went to; each has its own baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    Redis,
    Mysql,
}

/// Times the pace was halved so far, by the store that answered slowly:
/// which one holds a pass back is what an operator asks next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Backoffs {
    pub redis: u64,
    pub mysql: u64,
}

impl Backoffs {
    /// (store label, count), as the metric's `store` label spells it.
    pub fn by_store(self) -> [(&'static str, u64); 2] {
        [("redis", self.redis), ("mysql", self.mysql)]
    }
}

/// What a read says about the pressure on its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Every recent read within the budget: room to climb.
    Room,
    /// Within the budget at p99: hold the pace.
    Hold,
    /// Over it: halve.
    Slow,
    /// Over it in more than one read in `LOADED_ONE_IN`: halve, and count
    /// as pressure.
    Loaded,
}

/// One store's reads: the baseline time per item (the lowest seen, rising
/// only slowly, so that our own pressure stands out against it) and which
/// of the recent reads went over the budget.
#[derive(Debug, Clone, Default)]
struct Reads {
    baseline_per_item_s: Option<f64>,
    /// The last WINDOW reads (a ring): over the budget or not.
    over: Vec<bool>,
    next: usize,
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
                let over = excess > REDIS_BUDGET.as_secs_f64();
                if self.over.len() < WINDOW {
                    self.over.push(over);
                } else {
                    self.over[self.next] = over;
                }
                self.next = (self.next + 1) % WINDOW;
                let count = self.over.iter().filter(|o| **o).count();
                if count > WINDOW / 100 && count * LOADED_ONE_IN > self.over.len() {
                    Verdict::Loaded
                } else if count > WINDOW / 100 {
                    Verdict::Slow
                } else if count == 0 && self.over.len() == WINDOW {
                    Verdict::Room
                } else {
                    Verdict::Hold
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
    backoffs: Backoffs,
    /// The last reservation had to wait: the pace, not the stores, set how
    /// fast the pass went (climbing is pointless otherwise).
    binding: bool,
    /// The pace the pass in progress needs to finish by its deadline when
    /// that is at most `START_RATE` (and the cap), else 0: the pace never
    /// falls below it, halved for each Redis back-off in a row past the
    /// first (`pressure`).
    need: f64,
    /// Redis back-offs since a whole window of reads last went by without
    /// one.
    pressure: u32,
}

impl State {
    /// The pace: the budget's, or what the pass needs as far as Redis'
    /// pressure allows, whichever is more.
    fn pace(&self) -> f64 {
        let yielded = self.pressure.saturating_sub(1).min(30);
        self.rate.max(self.need / f64::from(1u32 << yielded))
    }
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
                reads: [Reads::default(), Reads::default()],
                cooldown: 0,
                backoffs: Backoffs::default(),
                binding: false,
                need: 0.0,
                pressure: 0,
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

    /// The current pace, in seat hashes per second: the budget's, or what
    /// the pass needs (as far as Redis' pressure allows) if that is more.
    pub fn rate(&self) -> f64 {
        self.state().pace()
    }

    /// The pass in progress needs `per_second` hashes a second to finish by
    /// its deadline; 0 when it has none (or is done). A need past
    /// `NEED_UP_TO` (or the cap) is met up to it: such a pass overruns even
    /// at that pace, and the pass's fit says how many shards would do, but
    /// it still reads as much of the estate as a pace live holds barely
    /// notice allows (dropping to the budget's pace instead read 100 k
    /// showtimes at a tenth of that on a busy host).
    pub fn need(&self, per_second: f64) {
        let up_to = self.cap.map_or(NEED_UP_TO, |c| c.min(NEED_UP_TO));
        self.state().need = per_second.clamp(0.0, up_to);
    }

    /// The pass in progress has `left` hashes to read `within` this time:
    /// it needs `NEED_OVER_BARE` times that bare rate (at least a second
    /// is assumed left, so the last chunks ask for no more than that).
    pub fn need_to_read(&self, left: u64, within: Duration) {
        let seconds = within.as_secs_f64().max(1.0);
        self.need(NEED_OVER_BARE * left as f64 / seconds);
    }

    /// Forgets what was learned of the stores (baselines, recent reads,
    /// pressure) and starts again at the starting pace, when what was
    /// judged no longer holds: Redis lost its data (a new server, or an
    /// empty one), or the shard had no holder for a while (its reads were
    /// refused, timed out or retried meanwhile). The back-off counts stay.
    pub fn start_again(&self) {
        let mut s = self.state();
        s.rate = self.cap.map_or(START_RATE, |c| c.min(START_RATE));
        s.reads = [Reads::default(), Reads::default()];
        s.cooldown = 0;
        s.pressure = 0;
    }

    /// How many times the pace was halved so far, by store.
    pub fn backoffs(&self) -> Backoffs {
        self.state().backoffs
    }

    /// Reserves `items` reads at the current pace: how long to wait before
    /// sending them. Time not used is saved up only to `TIMER_SLACK` (what
    /// a sleep overshoots), so there is no burst after a pause.
    pub fn reserve(&self, items: usize, now: Instant) -> Duration {
        let mut s = self.state();
        let owed_from = now.checked_sub(TIMER_SLACK).unwrap_or(now);
        let start = s.next_at.map_or(now, |at| at.max(owed_from));
        let rate = s.pace();
        s.next_at = Some(start + Duration::from_secs_f64(items as f64 / rate));
        s.binding = start > now;
        start.saturating_duration_since(now)
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
        let calm_window = s.reads[Store::Redis as usize].over.len() == WINDOW;
        match verdict {
            Verdict::Slow | Verdict::Loaded => {
                s.rate = (s.rate / 2.0).max(self.floor());
                s.cooldown = COOLDOWN_READS;
                match store {
                    Store::Redis => {
                        s.backoffs.redis += 1;
                        s.pressure += u32::from(verdict == Verdict::Loaded);
                    }
                    Store::Mysql => s.backoffs.mysql += 1,
                }
                s.reads[store as usize].over.clear();
            }
            Verdict::Room if store == Store::Redis && s.binding => {
                // `items` at the pace take items / rate seconds.
                let climbed = s.rate + RISE_PER_SECOND * items as f64;
                s.rate = self.cap.map_or(climbed, |c| climbed.min(c));
            }
            Verdict::Room | Verdict::Hold => {}
        }
        // A window of Redis reads since its last back-off, within budget.
        if store == Store::Redis && matches!(verdict, Verdict::Room | Verdict::Hold) && calm_window
        {
            s.pressure = 0;
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
    fn starting_again_forgets_the_pressure_and_keeps_the_counts() {
        let p = Pacer::new(0, 4);
        // A baseline of 0.1 ms a hash, then reads far over budget.
        paced_reads(&p, 100, 4, 400 * US);
        for _ in 0..5 {
            paced_reads(&p, 200, 4, 20 * MS);
        }
        assert!(p.rate() < START_RATE, "{}", p.rate());
        let backoffs = p.backoffs();
        assert!(backoffs.redis >= 2, "{backoffs:?}");
        p.start_again();
        assert_eq!(p.rate(), START_RATE);
        assert_eq!(p.backoffs(), backoffs);
        // A new baseline is learned: the first read after is no pressure.
        paced_reads(&p, 1, 4, 20 * MS);
        assert_eq!(p.rate(), START_RATE);
    }

    #[test]
    fn reads_are_spaced_at_the_pace() {
        let p = Pacer::new(1000, 10);
        let t0 = Instant::now();
        assert_eq!(p.reserve(10, t0), Duration::ZERO);
        // 10 hashes at 1000/s take 10 ms of the budget.
        assert_eq!(p.reserve(10, t0), 10 * MS);
        assert_eq!(p.reserve(10, t0 + 5 * MS), 15 * MS);
        // Idle time is saved up only as far as a sleep overshoots: no burst
        // after a pause.
        let later = t0 + Duration::from_secs(5);
        assert_eq!(p.reserve(10, later), Duration::ZERO);
        assert_eq!(p.reserve(10, later), 10 * MS - TIMER_SLACK);
    }

    #[test]
    fn sleeps_that_overshoot_their_slot_keep_the_pace() {
        // 4 hashes at 5,000 a second: a slot of 0.8 ms. Each sleep ends on
        // the timer's next millisecond, and the read takes 0.3 ms more.
        let p = Pacer::new(0, 4);
        p.need(5000.0);
        let t0 = Instant::now();
        let mut now = t0;
        for _ in 0..1_000 {
            let wait = p.reserve(4, now);
            let woke = if wait.is_zero() {
                now
            } else {
                let deadline = (now + wait - t0).as_nanos();
                t0 + Duration::from_nanos((deadline.div_ceil(1_000_000) * 1_000_000) as u64)
            };
            now = woke + 300 * US;
        }
        let per_second = 4_000.0 / (now - t0).as_secs_f64();
        assert!(per_second > 4_900.0, "{per_second} hashes a second");
    }

    #[test]
    fn without_a_cap_the_pace_climbs_while_redis_answers_at_its_baseline() {
        let p = Pacer::new(0, 4);
        assert_eq!(p.rate(), START_RATE);
        // Some seconds of reads at the pace, all at the baseline: once a
        // window of them is in, each adds 10 % of what it read (4 × 0.1
        // hashes/s).
        paced_reads(&p, 5_000, 4, 200 * US);
        let climbed = START_RATE + 0.4 * (5_000 - WINDOW + 1) as f64;
        assert!((p.rate() - climbed).abs() < 1.0, "climbed: {}", p.rate());
        assert_eq!(p.backoffs(), Backoffs::default());
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
        paced_reads(&p, 150, 4, 200 * US);
        let before = p.rate();
        // One slow read in a hundred is within a p99 budget: no back-off,
        // but no climb either while it is in the window.
        paced_reads(&p, 1, 4, 3 * MS);
        paced_reads(&p, 50, 4, 200 * US);
        assert_eq!(p.backoffs(), Backoffs::default());
        assert_eq!(p.rate(), before);
        // A second one within the window is over the p99: halve.
        paced_reads(&p, 1, 4, 3 * MS);
        assert_eq!(p.backoffs(), Backoffs { redis: 1, mysql: 0 });
        assert_eq!(p.rate(), before / 2.0);
        let low = p.rate();
        paced_reads(&p, 3_000, 4, 200 * US);
        assert!(p.rate() > low, "climbs back: {} > {low}", p.rate());
    }

    #[test]
    fn the_pace_never_falls_below_what_the_pass_needs_up_to_its_limit_or_the_cap() {
        let p = Pacer::new(0, 4);
        for _ in 0..3 {
            paced_reads(&p, 150, 4, 200 * US);
            paced_reads(&p, 2, 4, 3 * MS);
        }
        assert!(p.rate() < 500.0, "backed off: {}", p.rate());
        p.need(800.0);
        assert_eq!(p.rate(), 800.0);
        // Later than anything reserved so far.
        let t0 = Instant::now() + Duration::from_secs(3600);
        p.reserve(8, t0);
        assert_eq!(p.reserve(8, t0), 10 * MS - TIMER_SLACK, "8 hashes at 800/s");
        // A pass that cannot fit even at `NEED_UP_TO`: it reads at that
        // pace, no faster.
        p.need(NEED_UP_TO + 1.0);
        assert_eq!(p.rate(), NEED_UP_TO);
        p.need(NEED_UP_TO);
        assert_eq!(p.rate(), NEED_UP_TO);
        // A cap bounds the need too.
        let capped = Pacer::new(300, 4);
        for _ in 0..3 {
            paced_reads(&capped, 150, 4, 200 * US);
            paced_reads(&capped, 2, 4, 3 * MS);
        }
        let backed_off = capped.rate();
        assert!(backed_off < 300.0, "{backed_off}");
        capped.need(300.0);
        assert_eq!(capped.rate(), 300.0);
        capped.need(800.0);
        assert_eq!(capped.rate(), 300.0);
        p.need(0.0);
        assert!(p.rate() < 500.0);
        // What is left and the time left for it: the bare rate with its
        // margin (10 k a minute: 167 a second bare).
        p.need_to_read(10_000, Duration::from_secs(60));
        assert!((p.rate() - 10_000.0 / 60.0 * NEED_OVER_BARE).abs() < 0.01);
        p.need_to_read(100_000, Duration::from_secs(30));
        assert_eq!(p.rate(), NEED_UP_TO);
        p.need_to_read(0, Duration::ZERO);
        assert!(p.rate() < 500.0);
    }

    #[test]
    fn redis_under_pressure_wins_over_what_the_pass_needs() {
        let p = Pacer::new(0, 4);
        paced_reads(&p, 150, 4, 200 * US);
        p.need(800.0);
        // Another client loads Redis: back-off after back-off, no calm
        // window between them.
        paced_reads(&p, 200, 4, 3 * MS);
        let b = p.backoffs().redis;
        assert!(b >= 3, "{b}");
        assert!(p.rate() < 800.0, "the need yields: {}", p.rate());
        // Calm again for a window: the pass gets what it needs.
        paced_reads(&p, 101, 4, 200 * US);
        assert_eq!(p.rate(), 800.0);
        // One back-off now and then is noise: the need holds.
        paced_reads(&p, 2, 4, 3 * MS);
        assert_eq!(p.backoffs().redis, b + 1);
        assert_eq!(p.rate(), 800.0);
    }

    #[test]
    fn a_busy_hosts_noise_halves_the_pace_but_never_what_the_pass_needs() {
        let p = Pacer::new(0, 4);
        paced_reads(&p, 150, 4, 200 * US);
        p.need(800.0);
        // Two cores shared with MySQL and the process's own work: about
        // three reads in a hundred late by a scheduler's slice, for a long
        // time. Each window has its back-off, none is calm, but Redis is not
        // loaded: the pass keeps what it needs to finish by its deadline.
        for _ in 0..60 {
            paced_reads(&p, 33, 4, 200 * US);
            paced_reads(&p, 1, 4, 3 * MS);
        }
        assert!(p.backoffs().redis >= 10, "{:?}", p.backoffs());
        assert_eq!(p.rate(), 800.0);
    }

    #[test]
    fn the_pace_never_falls_below_its_floor() {
        let p = Pacer::new(0, 10);
        p.observe(Store::Mysql, 200, 20 * MS);
        // MySQL ever slower, past every cooldown.
        for round in 0..20 {
            for _ in 0..=COOLDOWN_READS {
                p.observe(Store::Mysql, 200, Duration::from_secs(10 << round));
            }
        }
        assert!(p.backoffs().mysql >= 5);
        assert_eq!(p.rate(), FLOOR_RATE);
        // A cap below the floor is the floor.
        let slow = Pacer::new(50, 10);
        for i in 1..200 {
            slow.observe(Store::Redis, 10, i * MS);
        }
        assert!(slow.backoffs().redis > 0);
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
        assert_eq!(p.backoffs(), Backoffs::default());
        // A MySQL read far over its own baseline is pressure.
        p.observe(Store::Mysql, 200, 200 * MS);
        assert_eq!(p.backoffs(), Backoffs { redis: 0, mysql: 1 });
    }
}
