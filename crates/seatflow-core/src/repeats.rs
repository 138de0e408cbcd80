//! Log lines for problems that come back: the same bad seat hash, row
//! outside the contract or stuck showtime lease is met by every pass, and
//! an idle daemon finishes a run every minute. Each such line is written
//! once per interval per problem, with the number of sightings since the
//! last one, so the log stays readable whatever stays broken. Only the
//! lines are thinned: every sighting is still counted in the run's report
//! and its metrics.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A repeated problem's line: once an hour.
pub const PROBLEM_EVERY: Duration = Duration::from_secs(3600);
/// A run that found nothing: its summary once a minute at most.
pub const QUIET_RUN_EVERY: Duration = Duration::from_secs(60);
/// Problems remembered at most; past this, those not logged within their
/// interval are forgotten first (memory stays bounded whatever the data).
const MAX_REMEMBERED: usize = 100_000;

/// The process's memory of what it logged when (shared by its runs).
#[derive(Debug, Clone, Default)]
pub struct Repeats(Arc<Mutex<HashMap<String, Seen>>>);

#[derive(Debug, Clone, Copy)]
struct Seen {
    logged_at: Instant,
    /// Sightings since `logged_at` that wrote no line.
    unlogged: u64,
}

impl Repeats {
    /// A sighting of `key` now: `Some(n)` when a line is due (n sightings
    /// went unlogged since the last line), `None` to stay quiet.
    pub fn sighting(&self, key: &str, every: Duration) -> Option<u64> {
        self.sighting_at(key, every, Instant::now())
    }

    fn sighting_at(&self, key: &str, every: Duration, now: Instant) -> Option<u64> {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = seen.get_mut(key) {
            if now.saturating_duration_since(s.logged_at) < every {
                s.unlogged += 1;
                return None;
            }
            let unlogged = s.unlogged;
            *s = Seen {
                logged_at: now,
                unlogged: 0,
            };
            return Some(unlogged);
        }
        if seen.len() >= MAX_REMEMBERED {
            seen.retain(|_, s| now.saturating_duration_since(s.logged_at) < every);
            if seen.len() >= MAX_REMEMBERED {
                seen.clear();
            }
        }
        seen.insert(
            key.to_string(),
            Seen {
                logged_at: now,
                unlogged: 0,
            },
        );
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_logged_once_per_interval_with_the_sightings_since() {
        let r = Repeats::default();
        let t0 = Instant::now();
        let hour = Duration::from_secs(3600);
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(r.sighting_at("seat:1", hour, at(0)), Some(0));
        for minute in 1..=59 {
            assert_eq!(r.sighting_at("seat:1", hour, at(minute * 60)), None);
        }
        assert_eq!(
            r.sighting_at("seat:2", hour, at(120)),
            Some(0),
            "another problem"
        );
        assert_eq!(
            r.sighting_at("seat:1", hour, at(3600)),
            Some(59),
            "an hour on: one line, counting the 59 unlogged"
        );
        assert_eq!(r.sighting_at("seat:1", hour, at(3660)), None);
    }

    #[test]
    fn memory_stays_bounded() {
        let r = Repeats::default();
        let now = Instant::now();
        for i in 0..MAX_REMEMBERED + 10 {
            r.sighting_at(&i.to_string(), Duration::from_secs(60), now);
        }
        assert!(r.0.lock().unwrap().len() <= MAX_REMEMBERED);
    }
}
