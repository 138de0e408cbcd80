//! Cron schedules: six fields (seconds first), evaluated in UTC. A
//! [`Schedule`] is parsed once, when the daemon starts; the daemon's
//! scheduler (`tokio-cron-scheduler`) fires at the times it names, each fire
//! works out its slot with [`Schedule::slot_at`], and `/status` shows the
//! next fire from the same expression, so the three always agree.

use chrono::{DateTime, Utc};

/// Parses a schedule (seconds required, day-of-month AND day-of-week).
pub fn parse(raw: &str) -> Result<croner::Cron, croner::errors::CronError> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Required)
        .dom_and_dow(true)
        .build()
        .parse(raw)
}

/// A schedule parsed once, asked at every fire.
#[derive(Debug, Clone)]
pub struct Schedule {
    raw: String,
    cron: croner::Cron,
}

impl Schedule {
    pub fn new(raw: &str) -> Result<Schedule, croner::errors::CronError> {
        Ok(Schedule {
            raw: raw.to_string(),
            cron: parse(raw)?,
        })
    }

    /// The expression as configured (what `tokio-cron-scheduler` is given).
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The first fire strictly after `t`, in whole seconds. Whole seconds
    /// make it the same slot in every process: the search keeps the start
    /// time's fraction of a second, which differs between replicas, and a
    /// pass record for 12:00:00.4 must count as done for 12:00:00.7.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let at = self.cron.find_next_occurrence(&t, false).ok()?;
        whole_seconds(at)
    }

    /// From the first fire after `t` to the one after it.
    pub fn interval_after(&self, t: DateTime<Utc>) -> Option<std::time::Duration> {
        let first = self.next_after(t)?;
        (self.next_after(first)? - first).to_std().ok()
    }

    /// The slot of a fire at `now`: the latest time the schedule names at
    /// or before `now`, in whole seconds. `tokio-cron-scheduler` never hands
    /// a job its scheduled time and fires up to half a second after it (or
    /// later, on a busy runtime), so the job works it out; replicas fired at
    /// different fractions of the same second agree on it.
    pub fn slot_at(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Truncated first: the search keeps the fraction, and an occurrence
        // at :00 is "at or before" :00.4.
        let now = whole_seconds(now)?;
        let at = self.cron.find_previous_occurrence(&now, true).ok()?;
        whole_seconds(at)
    }
}

fn whole_seconds(t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.timestamp(), 0)
}

/// Why a schedule is not usable, in words for a configuration error.
pub fn validate(raw: &str) -> Result<(), String> {
    let fields = raw.split_whitespace().count();
    if fields != 6 {
        return Err(format!(
            "cron expression {raw:?} must have 6 fields (seconds first), has {fields}"
        ));
    }
    let cron = parse(raw).map_err(|e| format!("invalid cron expression {raw:?}: {e}"))?;
    match cron.find_next_occurrence(&Utc::now(), false) {
        Ok(_) => Ok(()),
        Err(_) => Err(format!("cron expression {raw:?} never fires")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rfc3339: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(rfc3339).unwrap().to_utc()
    }

    fn slot(schedule: &str, now: &str) -> String {
        Schedule::new(schedule)
            .unwrap()
            .slot_at(at(now))
            .unwrap()
            .to_rfc3339()
    }

    #[test]
    fn six_fields_seconds_first() {
        assert!(validate("0 * * * * *").is_ok());
        assert!(validate("* * * * *").unwrap_err().contains("6 fields"));
        assert!(
            validate("0 0 25 * * *")
                .unwrap_err()
                .contains("invalid cron")
        );
        assert!(
            validate("0 0 0 30 2 *")
                .unwrap_err()
                .contains("never fires")
        );
        assert!(Schedule::new("nonsense").is_err());
        let parsed = Schedule::new("0 * * * * *").unwrap();
        let t = at("2026-12-03T10:00:00Z");
        let next = parsed.next_after(t).unwrap();
        assert_eq!(next.to_rfc3339(), "2026-12-03T10:01:00+00:00");
        // Whatever fraction of a second the search starts from (croner
        // keeps it: 10:01:00.437 without the truncation, a different slot
        // in each replica, which let a standby run a pass already run).
        let later = t + chrono::Duration::milliseconds(437);
        assert_eq!(parsed.next_after(later), Some(next));
        assert_eq!(parsed.as_str(), "0 * * * * *");
        assert_eq!(
            parsed.interval_after(t),
            Some(std::time::Duration::from_secs(60))
        );
        let quarter = Schedule::new("0 */15 * * * *").unwrap();
        assert_eq!(
            quarter.interval_after(later),
            Some(std::time::Duration::from_secs(900))
        );
    }

    #[test]
    fn a_fire_s_slot_is_the_latest_occurrence_at_or_before_it_in_whole_seconds() {
        let minute = "0 * * * * *";
        // Fired 0.4 s after the slot (the scheduler's half-second tick).
        assert_eq!(
            slot(minute, "2026-12-03T10:00:00.4Z"),
            "2026-12-03T10:00:00+00:00"
        );
        // Fired exactly on it: the slot itself, not the one before.
        assert_eq!(
            slot(minute, "2026-12-03T10:00:00Z"),
            "2026-12-03T10:00:00+00:00"
        );
        // Fired late by 3 s: still the last occurrence.
        assert_eq!(
            slot(minute, "2026-12-03T10:00:03.2Z"),
            "2026-12-03T10:00:00+00:00"
        );
        // Just before the next one: still this one.
        assert_eq!(
            slot(minute, "2026-12-03T10:00:59.999Z"),
            "2026-12-03T10:00:00+00:00"
        );
        let every_5s = "*/5 * * * * *";
        assert_eq!(
            slot(every_5s, "2026-12-03T10:00:05.3Z"),
            "2026-12-03T10:00:05+00:00"
        );
        assert_eq!(
            slot(every_5s, "2026-12-03T10:00:09.9Z"),
            "2026-12-03T10:00:05+00:00"
        );
        assert_eq!(
            slot(every_5s, "2026-12-03T10:00:10Z"),
            "2026-12-03T10:00:10+00:00"
        );
        // Two replicas fired at different fractions of the same second
        // agree, and the slot is the fire `next_after` named before it.
        let s = Schedule::new(every_5s).unwrap();
        let a = s.slot_at(at("2026-12-03T10:00:05.012Z"));
        let b = s.slot_at(at("2026-12-03T10:00:05.497Z"));
        assert_eq!(a, b);
        assert_eq!(a, s.next_after(at("2026-12-03T10:00:01.7Z")));
        assert_eq!(a.unwrap().timestamp_subsec_nanos(), 0);
    }
}
