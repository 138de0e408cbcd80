//! `check-config`: the configuration in effect (secrets redacted), then
//! what the stores it reaches say of it: the schema MySQL has, judged
//! against the contract (rule 17), and each store's permissions (rule 18).
//! A module of the binary (exit codes and stdout are the CLI's).

use std::path::Path;
use std::process::ExitCode;

use seatflow_reconciler::config::Settings;
use seatflow_reconciler::error::Stage;
use seatflow_reconciler::telemetry;

use super::{
    EXIT_CONFIG, EXIT_FAILED, credential_key, print_deviations, print_missing, redis_rule,
    store_failed,
};

/// `check-config` once the settings have loaded: what is in effect, then
/// the schema's and the permissions' checks.
pub(super) async fn run(settings: &Settings, config: Option<&Path>) -> ExitCode {
    // The settings are valid (they loaded); print what is in effect.
    match seatflow_reconciler::config::effective_toml(config, std::env::vars()) {
        Ok(text) => {
            println!("# configuration is valid; in effect (secrets redacted):\n{text}");
            for line in &settings.renamed {
                println!("# renamed: {line}");
            }
            // One connection for both checks.
            let mysql = seatflow_reconciler::context::connect_mysql(settings).await;
            let schema = check_schema(settings, &mysql).await;
            let access = check_config_access(settings, mysql.as_ref().ok()).await;
            if let Ok(primary) = &mysql {
                check_replica(settings, primary).await;
            }
            // The worse of the two: a configuration error over a failure.
            if schema == ExitCode::SUCCESS {
                access
            } else {
                schema
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
/// holds repairs back is exit 2. A MySQL that does not answer is said and
/// is no error here (the configuration itself is valid); a refused login
/// or a TLS problem is exit 2 naming the key, as for every command.
async fn check_schema(
    settings: &Settings,
    mysql: &seatflow_reconciler::error::Result<seatflow_reconciler::store::mysql::MysqlStore>,
) -> ExitCode {
    let url = settings.mysql.url.to_string();
    let store = match mysql {
        Ok(store) => store,
        Err(e) if e.tls_problem().is_some() || e.login_refused().is_some() => {
            return store_failed(e, credential_key(settings, Stage::Mysql), &url, "");
        }
        Err(e) => {
            tracing::warn!(error = %e, "the schema was not checked: cannot reach MySQL at {url}");
            return ExitCode::SUCCESS;
        }
    };
    let state = match store.check_contract().await {
        Ok(state) => state,
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
    telemetry::fatal(&format!(
        "the schema deviates from the contract and holds repairs back: {} (fixes above; docs/seatflow-contract.md, \"When the schema deviates\")",
        holding.join(", ")
    ));
    ExitCode::from(EXIT_CONFIG)
}

/// `check-config`'s third part: the permissions of each store the
/// configuration reaches (as the daemon needs them; `mysql`: the store the
/// schema's check reached, if it did). A store that does not answer is
/// said and is no error here, as for the schema.
async fn check_config_access(
    settings: &Settings,
    mysql: Option<&seatflow_reconciler::store::mysql::MysqlStore>,
) -> ExitCode {
    use seatflow_reconciler::access;
    let mut missing = Vec::new();
    if let Some(mysql) = mysql {
        match access::check::mysql_missing(mysql, !settings.audit.retention.is_zero()).await {
            Ok(m) => missing.extend(m),
            Err(e) => tracing::warn!(error = %e, "the MySQL grants were not checked"),
        }
    }
    match seatflow_reconciler::context::connect_redis(settings).await {
        Ok(redis) => {
            let rule = access::redis_access(settings, true);
            match access::check::redis_missing(&redis, &rule, redis_rule(settings)).await {
                Ok(m) => missing.extend(m),
                Err(e) => tracing::warn!(error = %e, "the Redis ACL was not checked"),
            }
        }
        Err(e) => match seatflow_reconciler::error::Denial::of(&e) {
            Some(d) => missing.push(access::Missing::of(d, vec![redis_rule(settings)])),
            None => tracing::warn!(error = %e, "the Redis ACL was not checked: cannot reach Redis"),
        },
    }
    if missing.is_empty() {
        println!("# permissions: every one the reconciler needs");
        return ExitCode::SUCCESS;
    }
    println!("# permissions: missing");
    print_missing(&missing)
}

/// `check-config`'s last line with `mysql.replica_url`: where a pass's bulk
/// reads would go now, and why. Never an error: a replica that cannot be
/// read is a fallback to the primary.
async fn check_replica(
    settings: &Settings,
    primary: &seatflow_reconciler::store::mysql::MysqlStore,
) {
    match seatflow_reconciler::context::connect_replica(settings, primary) {
        Ok(Some(replica)) => {
            let (reason, error) = replica.choose().await;
            let why = error.map(|e| format!(": {e}")).unwrap_or_default();
            println!(
                "# mysql.replica_url: a pass's bulk reads would go to the {} ({}){why}",
                reason.server(),
                reason.label()
            );
        }
        Ok(None) => {}
        Err(e) => println!("# mysql.replica_url: not usable ({e}); a pass reads the primary"),
    }
}
