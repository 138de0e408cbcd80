//! **Pure**: what one replica carries at the rates this process measured,
//! and how many shards the estate and its traffic need. A shard's pass
//! covers its showtimes at the pace the last pass was measured at
//! (`pass_fit`); its active replica checks the showtimes its changes name,
//! at most `changes.max_checks_per_second`. `/status` shows it as
//! `capacity`; docs/operations.md ("Capacity") has the measured figures.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::pass_fit::{HEADROOM, PassFit};

/// The checks' rate is the mean over the last five minutes (in ten-second
/// buckets): long enough to smooth a burst, short enough to follow the day.
pub const RATE_WINDOW: Duration = Duration::from_secs(300);
const BUCKET: Duration = Duration::from_secs(10);
/// A rate over less than this is not shown: a first minute says little.
const MIN_OBSERVED: Duration = Duration::from_secs(60);

/// Events counted over a sliding window, for a rate a second.
#[derive(Debug, Clone)]
pub struct RateWindow {
    since: Instant,
    /// (bucket number since `since`, events in it), oldest first.
    buckets: VecDeque<(u64, u64)>,
}

impl RateWindow {
    pub fn new(now: Instant) -> RateWindow {
        RateWindow {
            since: now,
            buckets: VecDeque::new(),
        }
    }

    fn bucket(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.since).as_secs() / BUCKET.as_secs()
    }

    /// `n` events at `now`.
    pub fn add(&mut self, now: Instant, n: u64) {
        let b = self.bucket(now);
        match self.buckets.back_mut() {
            Some((last, count)) if *last == b => *count += n,
            _ => self.buckets.push_back((b, n)),
        }
        self.forget(now);
    }

    fn forget(&mut self, now: Instant) {
        let keep = RATE_WINDOW.as_secs() / BUCKET.as_secs();
        let oldest = self.bucket(now).saturating_sub(keep);
        while self.buckets.front().is_some_and(|(b, _)| *b < oldest) {
            self.buckets.pop_front();
        }
    }

    /// Events a second over the window (or since the start, when that is
    /// shorter); None before [`MIN_OBSERVED`].
    pub fn per_second(&mut self, now: Instant) -> Option<f64> {
        self.forget(now);
        let observed = now.saturating_duration_since(self.since).min(RATE_WINDOW);
        if observed < MIN_OBSERVED {
            return None;
        }
        let events: u64 = self.buckets.iter().map(|(_, n)| n).sum();
        Some(events as f64 / observed.as_secs_f64())
    }
}

/// `/status`'s `capacity`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Capacity {
    /// Showtimes one shard's pass covers within 80 % of its interval at the
    /// last measured pace (None: no pass measured yet).
    pub showtimes_per_shard: Option<u64>,
    /// Showtimes this replica checked a second over the last five minutes
    /// (None: no change source, or too soon to tell).
    pub checks_per_second: Option<f64>,
    /// The most it may check a second (`changes.max_checks_per_second`).
    pub checks_per_second_budget: Option<u32>,
    /// `sharding.total` at which each shard's pass fits (`pass_fit`).
    pub shards_for_estate: Option<u32>,
    /// `sharding.total` at which each shard's checks stay within 80 % of
    /// the budget, at the traffic measured here (spread evenly by `id mod
    /// total`).
    pub shards_for_traffic: Option<u32>,
    /// The larger of the two: what this estate and its traffic need.
    pub shards_needed: Option<u32>,
}

/// What one replica carries at the measured rates, and the shards needed,
/// for a deployment of `shards` shards.
pub fn judge(
    fit: Option<&PassFit>,
    shards: u32,
    checks_per_second: Option<f64>,
    budget: Option<u32>,
) -> Capacity {
    let shards = shards.max(1);
    let showtimes_per_shard =
        fit.map(|f| (f.showtimes_per_second * f.interval_seconds * HEADROOM).floor() as u64);
    let shards_for_traffic = match (checks_per_second, budget) {
        (Some(rate), Some(budget)) if budget > 0 => {
            let estate_rate = rate * f64::from(shards);
            Some(((estate_rate / (HEADROOM * f64::from(budget))).ceil() as u32).max(1))
        }
        _ => None,
    };
    let shards_for_estate = fit.map(|f| f.shards_to_fit);
    Capacity {
        showtimes_per_shard,
        checks_per_second,
        checks_per_second_budget: budget,
        shards_for_estate,
        shards_for_traffic,
        shards_needed: shards_for_estate.max(shards_for_traffic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn the_rate_is_the_mean_over_the_last_five_minutes() {
        let start = Instant::now();
        let mut w = RateWindow::new(start);
        // Too soon to tell.
        w.add(start, 10);
        assert_eq!(w.per_second(start + 30 * SECOND), None);
        // 2 a second for a minute.
        for s in 1..=60 {
            w.add(start + s * SECOND, 2);
        }
        let rate = w.per_second(start + 60 * SECOND).unwrap();
        assert!((rate - 130.0 / 60.0).abs() < 1e-9, "{rate}");
        // Ten minutes later with nothing since: the burst has left the window.
        assert_eq!(w.per_second(start + 660 * SECOND), Some(0.0));
        // 1 a second for five minutes: 1 a second (within a bucket).
        let later = start + 700 * SECOND;
        for s in 0..300 {
            w.add(later + s * SECOND, 1);
        }
        let rate = w.per_second(later + 300 * SECOND).unwrap();
        assert!((0.95..=1.0).contains(&rate), "{rate}");
    }

    fn fit(rate: f64, showtimes: u64, interval: f64, shards_to_fit: u32) -> PassFit {
        PassFit {
            showtimes_per_second: rate,
            showtimes,
            seconds_needed: showtimes as f64 / rate,
            interval_seconds: interval,
            fits: true,
            shards_to_fit,
            interval_to_fit_seconds: 0,
        }
    }

    #[test]
    fn a_shard_carries_its_pace_over_most_of_the_interval() {
        // 300 showtimes a second over a 20-minute interval: 288,000 each.
        let c = judge(Some(&fit(300.0, 100_000, 1200.0, 1)), 1, None, None);
        assert_eq!(c.showtimes_per_shard, Some(288_000));
        assert_eq!(c.shards_for_estate, Some(1));
        assert_eq!(c.shards_for_traffic, None);
        assert_eq!(c.shards_needed, Some(1));
    }

    #[test]
    fn traffic_beyond_the_check_budget_needs_more_shards() {
        // 20 checks a second allowed; 12 a second here: within 80 %.
        let c = judge(None, 1, Some(12.0), Some(20));
        assert_eq!(c.shards_for_traffic, Some(1));
        // 20 a second on each of 2 shards: 40 for the estate, 3 shards.
        let c = judge(Some(&fit(300.0, 100_000, 60.0, 2)), 2, Some(20.0), Some(20));
        assert_eq!(c.shards_for_traffic, Some(3));
        assert_eq!(c.shards_for_estate, Some(2));
        assert_eq!(c.shards_needed, Some(3));
        // No traffic is one shard's worth.
        assert_eq!(
            judge(None, 4, Some(0.0), Some(20)).shards_for_traffic,
            Some(1)
        );
    }
}
