//! The schema judged before a run (rule 17): every pass, `once` and
//! scheduled run reads it afresh (one `information_schema` statement, and
//! the data checks its deviations need); a change-driven check takes a
//! verdict at most [`CHECK_FRESH`] old. The deviations that hold something
//! are logged on every run that read the schema, with the statement that
//! fixes them; the harmless ones once an hour.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::error::Error;
use crate::model::holds::{ContractState, Judged};
use crate::repeats::PROBLEM_EVERY;
use crate::run::context::Context;

/// How old a verdict a change-driven check may act on: checks come many a
/// minute, and a schema changes by a migration, not by the second.
pub const CHECK_FRESH: Duration = Duration::from_secs(60);

/// The verdict a run acts on: read now, or for a check (`check`) the last
/// one when it is fresh enough.
pub async fn judged(ctx: &Context, check: bool) -> Result<Arc<ContractState>, Error> {
    if check && let Some(state) = ctx.mysql.contract_within(CHECK_FRESH) {
        return Ok(state);
    }
    let state = ctx
        .retry("read the schema", || ctx.mysql.judge_contract())
        .await?;
    log_deviations(ctx, &state, check);
    Ok(state)
}

/// The daemon's start (rule 17: "at start"): the schema read and judged
/// before the first pass, its deviations logged. A schema that cannot be
/// read is said; the first pass reads it again.
pub async fn at_start(ctx: &Context) {
    match ctx.mysql.judge_contract().await {
        Ok(state) => log_deviations(ctx, &state, false),
        Err(e) => {
            tracing::warn!(error = %e, "could not read the schema; the first pass reads it again")
        }
    }
}

/// A run reads the schema: each holding deviation is logged (a check's
/// refresh, once an hour), each warning and each harmless one once an
/// hour.
fn log_deviations(ctx: &Context, state: &ContractState, check: bool) {
    for j in &state.judged {
        let d = &j.deviation;
        let key = format!(
            "contract deviation {}.{} {}",
            d.table,
            d.column,
            d.kind.label()
        );
        // A holding one on every run that read the schema (a check's
        // refresh, once an hour); the others once an hour.
        let due = (j.holds && !check) || ctx.repeats.sighting(&key, PROBLEM_EVERY).is_some();
        if !due {
            continue;
        }
        if j.holds || j.warns {
            tracing::warn!(
                table = d.table,
                column = d.column,
                kind = d.kind.label(),
                found = %d.found,
                expected = %d.expected,
                holds = j.holds,
                detail = %j.detail,
                fix = %d.fix,
                "the schema deviates from the contract: {}",
                if j.holds {
                    "repairs it may touch are held back (rule 17)"
                } else {
                    "nothing is held back, but see what it costs"
                }
            );
        } else {
            tracing::info!(
                table = d.table,
                column = d.column,
                kind = d.kind.label(),
                found = %d.found,
                expected = %d.expected,
                harmless = %j.detail,
                fix = %d.fix,
                "the schema deviates from the contract, harmlessly now"
            );
        }
    }
}

/// One deviation as a report, `/status` and `check-config` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviationReport {
    pub table: &'static str,
    pub column: &'static str,
    pub kind: &'static str,
    pub found: String,
    pub expected: String,
    /// Something is held back because of it.
    pub holds: bool,
    /// Nothing is held back, but it costs something (a missing index, a
    /// trigger): logged as a warning.
    pub warns: bool,
    /// Why harmless, or what it holds and why.
    pub detail: String,
    pub fix: String,
}

impl From<&Judged> for DeviationReport {
    fn from(j: &Judged) -> DeviationReport {
        let d = &j.deviation;
        DeviationReport {
            table: d.table,
            column: d.column,
            kind: d.kind.label(),
            found: d.found.clone(),
            expected: d.expected.clone(),
            holds: j.holds,
            warns: j.warns,
            detail: j.detail.clone(),
            fix: d.fix.clone(),
        }
    }
}

impl DeviationReport {
    /// Every deviation of a verdict, holding ones first, then warnings.
    pub fn all(state: &ContractState) -> Vec<DeviationReport> {
        let mut out: Vec<DeviationReport> = state.judged.iter().map(Into::into).collect();
        out.sort_by_key(|d| (!d.holds, !d.warns));
        out
    }

    /// Two lines: what deviates, then what it holds (or why it is
    /// harmless) and the fix.
    pub fn describe(&self) -> String {
        let what = if self.column.is_empty() {
            self.table.to_string()
        } else {
            format!("{}.{}", self.table, self.column)
        };
        format!(
            "{what} ({}): {}, the contract has {}\n    {}: {}\n    fix: {}",
            self.kind,
            self.found,
            self.expected,
            match (self.holds, self.warns) {
                (true, _) => "holds",
                (false, true) => "warns (holds nothing)",
                (false, false) => "harmless",
            },
            self.detail,
            self.fix
        )
    }
}
