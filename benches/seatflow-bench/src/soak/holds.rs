//! The hold workload: what a ticketing client does to Redis while the daemon
//! sweeps. One connection on a thread of its own (no async runtime between the
//! clock and the socket) runs a seat-hold Lua script every `interval` and
//! records each call's latency under the phase it started in.
//!
//! The script holds a free seat and releases it again in the same call, so
//! the data never changes as anyone else sees it: the reconciler can neither
//! find drift in it nor repair it away, and the estate stays consistent with
//! MySQL (benches/README.md, "Soak", explains the choice).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use seatflow_reconciler::store::redis::Keys;

/// Which phase a latency sample belongs to (an index into `Latencies::by_phase`).
pub const IDLE: u8 = 0;
pub const OUTSIDE_PASS: u8 = 1;
pub const DURING_PASS: u8 = 2;
pub const PHASES: [&str; 3] = [
    "idle (no daemon)",
    "daemon, outside passes",
    "daemon, during a pass",
];

/// Hold a free seat (`"0"` → `"1"`) and release it (`"1"` → `"0"`) at once.
/// A missing hash or a taken seat is left alone (and the call returns 0).
const HOLD_SCRIPT: &str = r#"
if redis.call('HGET', KEYS[1], ARGV[1]) == '0' then
  redis.call('HSET', KEYS[1], ARGV[1], '1')
  redis.call('HSET', KEYS[1], ARGV[1], '0')
  return 1
end
return 0
"#;

/// Consecutive failed calls after which the workload gives up (and the soak fails).
const MAX_CONSECUTIVE_ERRORS: u32 = 50;

/// The hold latencies are also kept per window of this many seconds from
/// the workload's start, so that a load added for a while (another client
/// hammering Redis) can be judged against the windows around it.
pub const WINDOW_S: u64 = 30;

/// Latencies in nanoseconds, per phase, and per window and phase.
#[derive(Debug, Default)]
pub struct Latencies {
    pub by_phase: [Vec<u32>; 3],
    pub by_window: Vec<[Vec<u32>; 3]>,
    /// Calls that found their seat free (held and released).
    pub held: u64,
    pub errors: u64,
}

pub struct HoldWorkload {
    pub phase: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Latencies>>>,
}

impl HoldWorkload {
    /// Starts the workload on random seats of showtimes 1..=showtimes.
    pub fn start(
        redis_url: &str,
        keys: Keys,
        showtimes: usize,
        seat_names: Vec<String>,
        interval: Duration,
    ) -> Result<HoldWorkload> {
        let client = redis::Client::open(redis_url)?;
        let mut conn = client
            .get_connection()
            .context("the hold workload's connection")?;
        conn.set_read_timeout(Some(Duration::from_secs(10)))?;
        let script = redis::Script::new(HOLD_SCRIPT);
        // Loaded up front, so that every measured call is a plain EVALSHA.
        script.prepare_invoke().load(&mut conn)?;
        let phase = Arc::new(AtomicU8::new(IDLE));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (phase.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("hold-workload".into())
            .spawn(move || {
                let ctx = Loop {
                    conn,
                    script,
                    keys,
                    showtimes,
                    seat_names,
                    interval,
                };
                ctx.run(&p, &s)
            })?;
        Ok(HoldWorkload {
            phase,
            stop,
            thread: Some(thread),
        })
    }

    pub fn set_phase(&self, phase: u8) {
        self.phase.store(phase, Ordering::Relaxed);
    }

    /// Stops the workload and returns what it measured.
    pub fn finish(&mut self) -> Result<Latencies> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self
            .thread
            .take()
            .ok_or_else(|| anyhow!("finished twice"))?;
        thread
            .join()
            .map_err(|_| anyhow!("the hold workload panicked"))?
    }

    /// Whether the thread stopped on its own (too many errors).
    pub fn failed(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| t.is_finished())
    }
}

impl Drop for HoldWorkload {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Loop {
    conn: redis::Connection,
    script: redis::Script,
    keys: Keys,
    showtimes: usize,
    seat_names: Vec<String>,
    interval: Duration,
}

impl Loop {
    fn run(mut self, phase: &AtomicU8, stop: &AtomicBool) -> Result<Latencies> {
        let mut rng = SmallRng::seed_from_u64(0x5EA7);
        let mut out = Latencies::default();
        let mut consecutive_errors = 0;
        let mut next = Instant::now();
        let start = next;
        while !stop.load(Ordering::Relaxed) {
            let showtime = rng.random_range(1..=self.showtimes as i64);
            let seat = &self.seat_names[rng.random_range(0..self.seat_names.len())];
            let key = self.keys.seat(showtime);
            let tag = phase.load(Ordering::Relaxed).min(DURING_PASS) as usize;
            let started = Instant::now();
            let reply: redis::RedisResult<i64> =
                self.script.key(key).arg(seat).invoke(&mut self.conn);
            let took = started.elapsed();
            match reply {
                Ok(held) => {
                    consecutive_errors = 0;
                    out.held += held as u64;
                    let ns = u32::try_from(took.as_nanos()).unwrap_or(u32::MAX);
                    out.by_phase[tag].push(ns);
                    let window = ((started - start).as_secs() / WINDOW_S) as usize;
                    if out.by_window.len() <= window {
                        out.by_window.resize_with(window + 1, Default::default);
                    }
                    out.by_window[window][tag].push(ns);
                }
                Err(e) => {
                    out.errors += 1;
                    consecutive_errors += 1;
                    if consecutive_errors >= MAX_CONSECUTIVE_ERRORS {
                        bail!("the hold workload failed {consecutive_errors} times in a row: {e}");
                    }
                }
            }
            // A fixed rate, without bursts to catch up after a slow call.
            next += self.interval;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else {
                next = now;
            }
        }
        Ok(out)
    }
}
