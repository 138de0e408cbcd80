//! `check-config`: the configuration in effect (secrets redacted), then
//! what the stores it reaches say of it: the schema MySQL has, judged
//! against the contract (rule 17), and what each store and source the
//! settings turn on refuses (rule 18), by the start's own check
//! (`access::start`), so that it exits 2 whenever `run` with the same
//! settings would; what it could not check is said as such. A module of
//! the binary (exit codes and stdout are the CLI's).

use std::path::Path;
use std::process::ExitCode;

use seatflow_reconciler::config::Settings;
use seatflow_reconciler::metrics::telemetry;
use seatflow_reconciler::ops::access::start::{self, Finding};

use super::{EXIT_CONFIG, EXIT_FAILED, print_deviations, verdict};

/// `check-config` once the settings have loaded: what is in effect, then
/// the schema's and the permissions' checks.
pub(super) async fn run(settings: &Settings, config: Option<&Path>) -> ExitCode {
    // The settings are valid (they loaded); print what is in effect.
    match seatflow_reconciler::config::effective_toml(config, std::env::vars()) {
        Ok(text) => {
            seatflow_reconciler::outln!(
                "# configuration is valid; in effect (secrets redacted):\n{text}"
            );
            for line in &settings.renamed {
                seatflow_reconciler::outln!("# renamed: {line}");
            }
            // One connection for both checks.
            let mysql = seatflow_reconciler::run::context::connect_mysql(settings).await;
            let schema = check_schema(settings, &mysql).await;
            let access = check_config_access(settings, &mysql).await;
            if let Ok(primary) = &mysql {
                check_replica(settings, primary).await;
            }
            // The worse of the two: a configuration error over a failure.
            if schema == ExitCode::SUCCESS {
                access
            } else if access == ExitCode::SUCCESS {
                schema
            } else {
                ExitCode::from(EXIT_CONFIG)
            }
        }
        Err(e) => {
            telemetry::fatal(&e.to_string());
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

/// `check-config`'s second half: the schema MySQL has, judged against the
/// contract (rule 17). Every deviation is printed with its fix; one that
/// holds repairs back is warned of too, exit 0 as `run` starts. A MySQL that could not be reached is said
/// (the permissions' check judges why: a refused login or a TLS problem is
/// exit 2 naming the key, as for every command).
async fn check_schema(
    settings: &Settings,
    mysql: &seatflow_reconciler::error::Result<seatflow_reconciler::store::mysql::MysqlStore>,
) -> ExitCode {
    let url = settings.mysql.url.to_string();
    let store = match mysql {
        Ok(store) => store,
        Err(e) => {
            seatflow_reconciler::outln!("# schema: not checked (MySQL was not reached)");
            tracing::warn!(error = %e, "the schema was not checked: cannot reach MySQL at {url}");
            return ExitCode::SUCCESS;
        }
    };
    let state = match store.judge_contract().await {
        Ok(state) => state,
        // A table it may not read: named by the permissions' check below.
        Err(e) if seatflow_reconciler::error::Denial::of(&e).is_some() => {
            seatflow_reconciler::outln!(
                "# schema: not checked (a table of it may not be read: {e})"
            );
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            telemetry::fatal(&format!("could not read the schema at {url}: {e}"));
            return ExitCode::from(EXIT_FAILED);
        }
    };
    print_deviations(&state);
    let holding: Vec<String> = state
        .holding()
        .map(|j| {
            let d = &j.deviation;
            format!("{}.{} ({})", d.table, d.column, d.kind.label())
        })
        .collect();
    if holding.is_empty() {
        return ExitCode::SUCCESS;
    }
    // `run` starts over such a schema and holds only what it touches, so
    // this is a warning, not an exit 2 (rule 19: exit 2 exactly when `run`
    // would).
    tracing::warn!(
        "the schema deviates from the contract and holds repairs back: {} (fixes above; docs/seatflow-contract.md, \"When the schema deviates\"); run starts and holds them until fixed",
        holding.join(", ")
    );
    ExitCode::SUCCESS
}

/// `check-config`'s third part: the start's check of every store and
/// source the settings turn on, as `run` makes it (`mysql`: as the
/// schema's check reached it). A line for each: every permission there,
/// what is missing (exit 2, each `GRANT` or ACL rule to run), or not
/// checked and why (a store down, a source off).
async fn check_config_access(
    settings: &Settings,
    mysql: &seatflow_reconciler::error::Result<seatflow_reconciler::store::mysql::MysqlStore>,
) -> ExitCode {
    let redis = seatflow_reconciler::run::context::connect_redis(settings).await;
    let findings = start::probe(
        settings,
        mysql.as_ref(),
        redis.as_ref(),
        start::Command::Daemon,
    )
    .await;
    for finding in &findings {
        match finding {
            Finding::Allowed(what) => {
                seatflow_reconciler::outln!(
                    "# permissions: {what}: every one the reconciler needs"
                );
            }
            Finding::Missing(m) => {
                seatflow_reconciler::outln!("# permissions: {} user: missing (below)", m.who)
            }
            Finding::Misconfigured { key, .. } => {
                seatflow_reconciler::outln!("# permissions: not checked: `{key}` is wrong (below)");
            }
            Finding::Unreachable { what, message } => {
                seatflow_reconciler::outln!("# permissions: {what}: not checked (unreachable)");
                tracing::warn!("{message}");
            }
            Finding::NotChecked { what, why } => {
                seatflow_reconciler::outln!("# permissions: {what}: not checked ({why})");
            }
        }
    }
    // Only what would stop `run` with exit 2 stops here.
    let stopping: Vec<Finding> = findings
        .into_iter()
        .filter(Finding::is_config_error)
        .collect();
    match verdict(&stopping) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// `check-config`'s last line with `mysql.replica_url`: where a pass's bulk
/// reads would go now, and why. Never an error: a replica that cannot be
/// read is a fallback to the primary.
async fn check_replica(
    settings: &Settings,
    primary: &seatflow_reconciler::store::mysql::MysqlStore,
) {
    match seatflow_reconciler::run::context::connect_replica(settings, primary) {
        Ok(Some(replica)) => {
            let (reason, error) = replica.choose().await;
            let why = error.map(|e| format!(": {e}")).unwrap_or_default();
            seatflow_reconciler::outln!(
                "# mysql.replica_url: a pass's bulk reads would go to the {} ({}){why}",
                reason.server(),
                reason.label()
            );
        }
        Ok(None) => {}
        Err(e) => seatflow_reconciler::outln!(
            "# mysql.replica_url: not usable ({e}); a pass reads the primary"
        ),
    }
}
