//! `migrate`: the reconciler's own tables (and with `--reference-schema`
//! seatflow's), then the schema as the reconciler will judge it (rule 17).
//! It needs MySQL only, with the grants `deploy/README.md` gives it
//! (`grants::migrate_statements`); a refusal is exit 2 naming them. A
//! module of the binary (exit codes and stdout are the CLI's).

use std::io::IsTerminal as _;
use std::process::ExitCode;

use seatflow_reconciler::config::Settings;
use seatflow_reconciler::error::{Denial, Error};
use seatflow_reconciler::metrics::telemetry;
use seatflow_reconciler::ops::access::{Missing, start};
use seatflow_reconciler::store::mysql::MysqlStore;

use super::{EXIT_FAILED, print_deviations, stopped};

/// `migrate` with these settings; `reference`: seatflow's tables too.
pub(super) async fn run(settings: &Settings, reference: bool) -> ExitCode {
    let mysql = match seatflow_reconciler::run::context::connect_mysql(settings).await {
        Ok(mysql) => mysql,
        Err(e) => return stopped(&start::connect_failure(settings, &e, "")),
    };
    // An ALTER of a large audit table takes a while: say so on a terminal.
    let step = seatflow_reconciler::run::progress::Activity::start(
        std::io::stderr().is_terminal(),
        "migrate",
        "applying the reconciler's tables",
    );
    let applied = mysql.migrate(reference).await;
    step.finish();
    match applied {
        Ok(widened) => {
            if let Some(chars) = widened {
                tracing::info!(
                    chars,
                    "reconcile_fix.seat_no widened to the contract's widest seat_no"
                );
            }
            tracing::info!("migrations applied");
            // Rule 17: what the reconciler will find, said now.
            match mysql.judge_contract().await {
                Ok(state) => print_deviations(&state),
                Err(e) => tracing::warn!(error = %e, "could not read the schema"),
            }
            ExitCode::SUCCESS
        }
        Err(e) => failed(settings, &mysql, &e).await,
    }
}

/// A failed migration: a refused privilege is exit 2 with every `GRANT`
/// `migrate` needs for this user (rule 18); anything else exit 1.
async fn failed(settings: &Settings, mysql: &MysqlStore, e: &Error) -> ExitCode {
    let Some(denial) = Denial::of(e) else {
        telemetry::fatal(&e.to_string());
        return ExitCode::from(EXIT_FAILED);
    };
    tracing::warn!(error = %e, "migrate was refused");
    let retention = !settings.audit.retention.is_zero();
    let binlog = settings.changes.mysql_binlog;
    let remedy = mysql
        .migrate_remedy(retention, binlog)
        .await
        .unwrap_or_default();
    stopped(&start::Finding::Missing(Missing::of(denial, remedy)))
}
