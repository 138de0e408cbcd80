//! How a run's report is shown: the `once --output json` shape (the serde
//! helpers its fields name), the text table, a job's counts in one log
//! field, a skipped job's line. The counting is `mod.rs`'s.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{JobReport, RunReport, SkipReason, SkippedJob};
use crate::error::Stage;
use crate::model::Kind;

pub(super) fn is_zero(n: &u64) -> bool {
    *n == 0
}

pub(super) fn serialize_kind<S: serde::Serializer>(k: &Kind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.label())
}

pub(super) fn serialize_stages<S: serde::Serializer>(
    m: &BTreeMap<Stage, u64>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(m.iter().map(|(stage, n)| (stage.label(), n)))
}

impl JobReport {
    /// The job's counts in one log field: `paid_seats success scanned=10 …`.
    pub fn counts(&self) -> String {
        format!(
            "{} {} scanned={} drift={} fixed={} deferred={} busy={} errors={} backlog={} invalid={} ms={}",
            self.kind.label(),
            self.outcome.label(),
            self.scanned,
            self.drift,
            self.fixed,
            self.deferred,
            self.skipped_busy,
            self.errors,
            self.backlog,
            self.invalid_data,
            self.duration_ms
        )
    }
}

impl SkippedJob {
    /// One line of the text report.
    fn describe(&self) -> String {
        let since = self
            .since
            .map(|t| {
                format!(
                    " since {}",
                    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                )
            })
            .unwrap_or_default();
        match self.reason {
            SkipReason::PassHeld => format!(
                "{}: skipped, shard {}'s pass is held by {}{since}",
                self.kind.cli_name(),
                self.shard,
                self.holder
            ),
            SkipReason::PassDone => format!(
                "{}: skipped, shard {}'s pass for this slot was done by {}{since}",
                self.kind.cli_name(),
                self.shard,
                self.holder
            ),
        }
    }
}

impl RunReport {
    #[allow(
        clippy::unwrap_used,
        clippy::expect_used,
        reason = "plain data of ours serializes"
    )]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("report serializes")
    }

    /// A readable table, then drift examples and failures.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let mode = if self.dry_run {
            " (dry run: nothing written)"
        } else {
            ""
        };
        let _ = writeln!(s, "run {}{mode} in {} ms", self.run_id, self.duration_ms);
        let _ = writeln!(
            s,
            "{:<15} {:<8} {:>8} {:>7} {:>7} {:>8} {:>5} {:>7} {:>8} {:>8}",
            "job",
            "outcome",
            "scanned",
            "drift",
            "fixed",
            "deferred",
            "busy",
            "errors",
            "backlog",
            "invalid"
        );
        for j in &self.jobs {
            let _ = writeln!(
                s,
                "{:<15} {:<8} {:>8} {:>7} {:>7} {:>8} {:>5} {:>7} {:>8} {:>8}",
                j.kind.cli_name(),
                j.outcome.label(),
                j.scanned,
                j.drift,
                j.fixed,
                j.deferred,
                j.skipped_busy,
                j.errors,
                j.backlog,
                j.invalid_data
            );
        }
        for j in &self.jobs {
            if !j.examples.is_empty() {
                let _ = writeln!(s, "\n{} — first drift found:", j.kind.cli_name());
                for e in &j.examples {
                    let _ = writeln!(s, "  {e}");
                }
            }
            if j.skipped_locked > 0 {
                let _ = writeln!(
                    s,
                    "\n{} — {} skipped: another transaction held their rows (taken by a later run)",
                    j.kind.cli_name(),
                    j.skipped_locked
                );
            }
            if j.held_back > 0 {
                let _ = writeln!(
                    s,
                    "\n{} — {} repairs held back by the schema's deviations (below)",
                    j.kind.cli_name(),
                    j.held_back
                );
            }
            if !j.quarantined.is_empty() {
                let _ = writeln!(
                    s,
                    "\n{} quarantined for this run (kept failing): showtimes {:?}",
                    j.kind.cli_name(),
                    j.quarantined
                );
            }
            if !j.errors_by_stage.is_empty() {
                let stages: Vec<String> = j
                    .errors_by_stage
                    .iter()
                    .map(|(stage, n)| format!("{} {n}", stage.label()))
                    .collect();
                let _ = writeln!(
                    s,
                    "\n{} errors by stage: {}",
                    j.kind.cli_name(),
                    stages.join(", ")
                );
            }
            for m in &j.error_messages {
                let _ = writeln!(s, "  error: {m}");
            }
            if let Some(f) = &j.fatal {
                let _ = writeln!(s, "\n{} stopped: {f}", j.kind.cli_name());
            }
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(s);
            for skipped in &self.skipped {
                let _ = writeln!(s, "{}", skipped.describe());
            }
        }
        if !self.contract_deviations.is_empty() {
            let _ = writeln!(
                s,
                "\nthe schema deviates from the contract (docs/seatflow-contract.md, \"When the schema deviates\"):"
            );
            for d in &self.contract_deviations {
                let _ = writeln!(s, "  {}", d.describe());
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn json_has_the_spec_shape() {
        let mut j = JobReport::new(Kind::OrphanLocks);
        j.fixed = 3;
        j.finish();
        let r = RunReport::new("r1".into(), false, vec![j], 12);
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["fixed"]["orphan_locks_released"], 3);
        assert_eq!(v["fixed"]["expired_cancelled"], 0);
        let job = &v["jobs"][0];
        assert_eq!(job["kind"], "orphan_locks");
        assert_eq!(job["outcome"], "success");
        for key in [
            "scanned",
            "drift",
            "fixed",
            "deferred",
            "skipped_busy",
            "errors",
            "backlog",
        ] {
            assert!(job[key].is_u64(), "{key}");
        }
        assert_eq!(r.exit_code(), 0);
        assert!(
            job.get("drift_examples").is_none() && job.get("error_messages").is_none(),
            "empty lists are left out: {job}"
        );
    }

    #[test]
    fn json_and_text_carry_the_same_errors_and_examples() {
        let mut j = JobReport::new(Kind::PaidSeats);
        j.drift = 1;
        j.example(|| "showtime 7 seat A-2: redis 0, mysql PAID".into());
        j.invalid();
        j.fail(&Error::Protocol("redis went away".into()));
        j.scanned = 1;
        j.finish();
        let r = RunReport::new("r2".into(), false, vec![j], 5);
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        let job = &v["jobs"][0];
        assert_eq!(
            job["drift_examples"][0],
            "showtime 7 seat A-2: redis 0, mysql PAID"
        );
        assert_eq!(job["errors"], 1);
        assert_eq!(job["errors_by_stage"]["invalid_data"], 1);
        let message = job["error_messages"][0].as_str().unwrap();
        assert!(message.contains("redis went away"), "{job}");
        assert!(
            job["stopped_by"]
                .as_str()
                .unwrap()
                .contains("redis went away")
        );
        let text = r.to_text();
        for needle in ["showtime 7 seat A-2", "redis went away", "invalid_data 1"] {
            assert!(
                text.contains(needle),
                "{needle} in the text report:\n{text}"
            );
        }
    }
}
