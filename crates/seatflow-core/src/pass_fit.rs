//! **Pure**: whether a shard's pass fits its interval at the pace it was
//! measured at, and, when it does not, what would make it fit: more shards,
//! or a longer interval. Shown in `/status` and as gauges the overrun alert
//! quotes, so that an overrunning pass says what to do.

use std::time::Duration;

use serde::Serialize;

/// A pass should take at most this share of its interval: room for a slow
/// minute, a hand-over and the pacer's back-offs.
pub const HEADROOM: f64 = 0.8;

/// A pass that swept only part of its shard (the tail of the estate, after
/// the passes before it were cut short) is judged by only when it swept at
/// least this many: paced reads are spaced out, so `n` of them take `n - 1`
/// spacings, and a pass of 4 at 10 a second looks like 13 a second (one of
/// 1 like hundreds). From 20 on, that error is under 6 %.
const MIN_PARTIAL_SAMPLE: u64 = 20;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PassFit {
    /// Showtimes the last pass swept per second (its own pace).
    pub showtimes_per_second: f64,
    /// The shard's ON_SALE showtimes.
    pub showtimes: u64,
    /// A whole pass of the shard at that pace.
    pub seconds_needed: f64,
    /// From one fire of `pass.schedule` to the next.
    pub interval_seconds: f64,
    /// The last pass covered the shard within its interval.
    pub fits: bool,
    /// `sharding.total` at which each shard's pass takes at most 80 % of
    /// the interval at this pace (replicas read in parallel).
    pub shards_to_fit: u32,
    /// The shortest interval a pass of this shard fits in with that room,
    /// at today's sharding.
    pub interval_to_fit_seconds: u64,
}

/// Measures the pass that swept `scanned` of the shard's `showtimes` in
/// `took` (`cut_short`: stopped at the next fire). None when it swept
/// nothing, or too little of its shard to tell its pace (the last fit then
/// stands).
pub fn measure(
    scanned: u64,
    showtimes: u64,
    cut_short: bool,
    took: Duration,
    interval: Duration,
    shards: u32,
) -> Option<PassFit> {
    if scanned == 0 || took.is_zero() || interval.is_zero() {
        return None;
    }
    if scanned < showtimes && scanned < MIN_PARTIAL_SAMPLE {
        return None;
    }
    let rate = scanned as f64 / took.as_secs_f64();
    let needed = showtimes as f64 / rate;
    let interval_s = interval.as_secs_f64();
    let shards_to_fit = (f64::from(shards.max(1)) * needed / (HEADROOM * interval_s)).ceil();
    Some(PassFit {
        showtimes_per_second: rate,
        showtimes,
        seconds_needed: needed,
        interval_seconds: interval_s,
        fits: !cut_short && needed <= interval_s,
        shards_to_fit: (shards_to_fit as u32).max(1),
        interval_to_fit_seconds: (needed / HEADROOM).ceil() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn an_overrunning_pass_says_how_many_shards_or_how_long_an_interval_would_fit() {
        // 100,000 showtimes, a one-minute pass that swept 42,000 of them.
        let fit = measure(42_000, 100_000, true, 60 * SECOND, 60 * SECOND, 1).unwrap();
        assert_eq!(fit.showtimes_per_second, 700.0);
        assert_eq!(fit.showtimes, 100_000);
        assert!((fit.seconds_needed - 142.857).abs() < 0.01);
        assert!(!fit.fits);
        // 143 s at 80 % of 60 s: 3 shards (each 33,334 showtimes, 48 s).
        assert_eq!(fit.shards_to_fit, 3);
        assert_eq!(fit.interval_to_fit_seconds, 179);
        // Already at two shards: each needs 143 s of its 60: 6 in all.
        assert_eq!(
            measure(42_000, 100_000, true, 60 * SECOND, 60 * SECOND, 2)
                .unwrap()
                .shards_to_fit,
            6
        );
    }

    #[test]
    fn a_pass_with_room_fits_and_needs_no_more_shards() {
        let fit = measure(10_000, 10_000, false, 8 * SECOND, 60 * SECOND, 1).unwrap();
        assert!(fit.fits);
        assert_eq!(fit.shards_to_fit, 1);
        assert_eq!(fit.interval_to_fit_seconds, 10);
        // Close to the interval: it fits, but not with the room asked for.
        let tight = measure(10_000, 10_000, false, 55 * SECOND, 60 * SECOND, 1).unwrap();
        assert!(tight.fits);
        assert_eq!(tight.shards_to_fit, 2);
    }

    #[test]
    fn a_pass_that_swept_nothing_has_no_pace_to_judge_by() {
        assert_eq!(measure(0, 10, true, 60 * SECOND, 60 * SECOND, 1), None);
        assert_eq!(measure(10, 10, false, Duration::ZERO, 60 * SECOND, 1), None);
    }

    #[test]
    fn a_short_tail_of_the_estate_is_too_small_a_sample() {
        // The last 4 of 40 showtimes, read at 10 a second: 3 spacings.
        let tail = 306 * Duration::from_millis(1);
        assert_eq!(measure(4, 40, false, tail, 2 * SECOND, 1), None);
        // A whole shard of 4 is what it is, whatever the pace.
        assert!(measure(4, 4, false, tail, 2 * SECOND, 1).unwrap().fits);
        // A part of 20 or more is judged.
        let part = measure(20, 40, true, 2 * SECOND, 2 * SECOND, 1).unwrap();
        assert_eq!(part.showtimes_per_second, 10.0);
    }
}
