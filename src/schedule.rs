//! Cron schedules: six fields (seconds first), evaluated in UTC. The
//! daemon fires at the times `next_fire_after` gives, and `/status` shows
//! the same, so the two always agree.

use chrono::{DateTime, Utc};

/// Parses a schedule (seconds required, day-of-month AND day-of-week).
pub fn parse(raw: &str) -> Result<croner::Cron, croner::errors::CronError> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Required)
        .dom_and_dow(true)
        .build()
        .parse(raw)
}

/// Why a schedule is not usable, in words for a configuration error.
pub fn check(raw: &str) -> Result<(), String> {
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

/// The next time a schedule fires after now (UTC).
pub fn next_fire(schedule: &str) -> Option<DateTime<Utc>> {
    next_fire_after(schedule, Utc::now())
}

/// The first time a schedule fires strictly after `t`, in whole seconds.
/// Whole seconds make it the same slot in every process: the search keeps
/// the start time's fraction of a second, which differs between replicas,
/// and a pass record for 12:00:00.4 must count as done for 12:00:00.7.
pub fn next_fire_after(schedule: &str, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let at = parse(schedule).ok()?.find_next_occurrence(&t, false).ok()?;
    DateTime::from_timestamp(at.timestamp(), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn six_fields_seconds_first() {
        assert!(check("0 * * * * *").is_ok());
        assert!(check("* * * * *").unwrap_err().contains("6 fields"));
        assert!(check("0 0 25 * * *").unwrap_err().contains("invalid cron"));
        assert!(check("0 0 0 30 2 *").unwrap_err().contains("never fires"));
        assert!(next_fire("*/5 * * * * *").is_some());
        assert!(next_fire("nonsense").is_none());
        let t = DateTime::parse_from_rfc3339("2026-12-03T10:00:00Z")
            .unwrap()
            .to_utc();
        let next = next_fire_after("0 * * * * *", t).unwrap();
        assert_eq!(next.to_rfc3339(), "2026-12-03T10:01:00+00:00");
        // Whatever fraction of a second the search starts from (croner
        // keeps it: 10:01:00.437 without the truncation, a different slot
        // in each replica, which let a standby run a pass already run).
        let later = t + chrono::Duration::milliseconds(437);
        assert_eq!(next_fire_after("0 * * * * *", later), Some(next));
    }
}
