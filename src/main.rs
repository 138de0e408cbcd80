//! `seatflow-reconciler`: parse the command line, load settings, dispatch.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use seatflow_reconciler::config::Settings;
use seatflow_reconciler::model::Kind;
use seatflow_reconciler::ops::access::start;
use seatflow_reconciler::run::context::Context;
use seatflow_reconciler::run::jobs::{self, RunRequest, Trigger};
use seatflow_reconciler::{metrics::telemetry, ops::demo, ops::push};
use tokio_util::sync::CancellationToken;

#[path = "cli/check_config.rs"]
mod check_config;
#[path = "cli/migrate.rs"]
mod migrate;

/// Exit codes of `once` (and of every command that connects).
const EXIT_FAILED: u8 = 1;
const EXIT_CONFIG: u8 = 2;
const EXIT_UNREACHABLE: u8 = 3;

/// How often the daemon looks at its TLS files for a rotation.
const TLS_WATCH: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Parser)]
#[command(
    version,
    about = "Keeps seatflow's Redis seat hashes and MySQL orders consistent",
    after_help = "Start with `seatflow-reconciler demo`; the documents: README.md and docs/."
)]
struct Cli {
    /// TOML file with the settings to override (see config/default.toml).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// The daemon: the seat jobs' pass and expired-orders, each on its cron
    /// schedule; HTTP on http.listen (/metrics, /healthz, /readyz, /status,
    /// POST /jobs/{job}/run).
    #[command(after_help = "Examples:
  seatflow-reconciler --config /etc/seatflow-reconciler/config.toml run
  SEATFLOW__RECONCILE__DRY_RUN=true seatflow-reconciler run   # report drift, write nothing

More: docs/operations.md (deployment shapes, /status, shutdown).")]
    Run,
    /// Run every job once and exit: 0 all completed, 1 a job failed or was
    /// partial, 2 bad configuration or usage, 3 MySQL or Redis unreachable.
    #[command(after_help = "Examples:
  seatflow-reconciler once --dry-run                     # what it would repair
  seatflow-reconciler once --job orphan-locks --showtime 42 --output json

More: docs/operations.md (\"once\": output, exit codes, the CronJob).")]
    Once {
        /// Job to run (repeatable): expired-orders, paid-seats,
        /// missing-hashes, orphan-locks, sold-orphans. Default: all five.
        #[arg(long = "job", value_name = "JOB", value_parser = parse_kind)]
        jobs: Vec<Kind>,
        /// Detect and report drift; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Only these showtimes (repeatable).
        #[arg(long = "showtime", value_name = "ID")]
        showtimes: Vec<i64>,
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
        /// Push this run's metrics to a Prometheus Pushgateway (push-add).
        #[arg(long, value_name = "URL")]
        pushgateway: Option<String>,
    },
    /// Show one showtime's seat map: Redis against what MySQL implies.
    #[command(after_help = "Examples:
  seatflow-reconciler inspect --showtime 42
  seatflow-reconciler inspect --showtime 42 --seat A-12   # the order, suspect time, last repairs

More: docs/troubleshooting.md (\"How to look\").")]
    Inspect {
        #[arg(long, value_name = "ID")]
        showtime: i64,
        /// Details of one seat: occupying order, suspect time, last repairs.
        #[arg(long, value_name = "SEAT")]
        seat: Option<String>,
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Apply the reconciler's own tables (audit).
    #[command(after_help = "Examples:
  seatflow-reconciler migrate                        # once per release, before `once` or `run`
  seatflow-reconciler migrate --reference-schema     # also seatflow's tables (a test database)

More: docs/operations.md (\"Upgrades and migrations\").")]
    Migrate {
        /// Also create seatflow's reference tables (tests, demo, local development).
        #[arg(long)]
        reference_schema: bool,
    },
    /// Validate the configuration and print it (secrets redacted).
    #[command(after_help = "Examples:
  seatflow-reconciler --config my.toml check-config
  SEATFLOW__PASS__SCHEDULE='0 */5 * * * *' seatflow-reconciler check-config

More: docs/configuration.md (every key), docs/security.md (grants, ACL).")]
    CheckConfig,
    /// Self-contained demo: seed every kind of drift, repair it. Runs on its
    /// own throwaway redis-server and mariadbd (installed, not running),
    /// removed afterwards.
    #[command(after_help = "Examples:
  seatflow-reconciler demo
  seatflow-reconciler demo --keep     # leave the servers running; prints how to use and stop them

More: README.md (\"Quick start\").")]
    Demo {
        /// Run on the configured mysql.url and redis.url instead (database
        /// seatflow_demo, dropped only if the demo created it; key prefix
        /// seatflow-demo:).
        #[arg(long)]
        use_configured_servers: bool,
        /// Leave the private servers running with the demo's data, and print
        /// how to point `run`, `inspect`, `once` and a Prometheus at them
        /// and how to stop them.
        #[arg(long)]
        keep: bool,
    },
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    s.parse()
}

fn main() -> ExitCode {
    // One process-wide TLS provider, before any rediss:// or TLS MySQL connection.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let settings = match Settings::load(cli.config.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            // JSON too when the environment or the file asks for it.
            telemetry::set_format(telemetry::format_hint(cli.config.as_deref()));
            telemetry::fatal(&e.to_string());
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let mut log = settings.log.clone();
    if matches!(cli.command, Command::Demo { .. }) {
        // The demo speaks on stdout; keep stderr to warnings.
        log.level = "warn".into();
    }
    telemetry::init(&log);
    for line in &settings.renamed {
        tracing::warn!(renamed = %line, "a setting under its former name: rename it");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(dispatch(cli.command, settings, cli.config))
}

async fn dispatch(command: Command, settings: Settings, config: Option<PathBuf>) -> ExitCode {
    match command {
        Command::Run => {
            // Certificates are read when connecting: when a TLS file changes
            // (a rotated Secret), stop gracefully and exit 0, so that the
            // orchestrator starts the daemon again with the new files.
            let rotated =
                seatflow_reconciler::config::tls_files_changed(settings.tls_files(), TLS_WATCH);
            let ctx = match connect(settings).await {
                Ok(ctx) => ctx,
                Err(code) => return code,
            };
            if let Err(code) = start_probe(&ctx, start::Command::Daemon).await {
                return code;
            }
            let mut signals = match Signals::install() {
                Ok(s) => s,
                Err(e) => {
                    telemetry::fatal(&format!("installing signal handlers: {e}"));
                    return ExitCode::from(EXIT_FAILED);
                }
            };
            let shutdown = async move {
                tokio::select! {
                    () = signals.next() => {
                        tracing::info!("signal received (a second signal exits at once)");
                    }
                    path = rotated => {
                        tracing::warn!(
                            file = %path.display(),
                            "a TLS file changed: stopping, to be restarted with the new certificates"
                        );
                    }
                }
                tokio::spawn(async move {
                    signals.next().await;
                    tracing::warn!("second signal: exiting at once");
                    std::process::exit(130);
                });
            };
            match seatflow_reconciler::daemon::run(ctx, shutdown).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    telemetry::fatal(&format!("daemon failed: {e}"));
                    ExitCode::from(EXIT_FAILED)
                }
            }
        }
        Command::Inspect {
            showtime,
            seat,
            output,
        } => {
            let ctx = match connect(settings).await {
                Ok(ctx) => ctx,
                Err(code) => return code,
            };
            match inspect(&ctx, showtime, seat.as_deref(), output).await {
                Ok(code) => code,
                Err(e) => {
                    telemetry::fatal(&e.to_string());
                    ExitCode::from(EXIT_FAILED)
                }
            }
        }
        Command::CheckConfig => check_config::run(&settings, config.as_deref()).await,
        Command::Demo {
            use_configured_servers,
            keep,
        } => match demo::run(
            settings,
            if use_configured_servers {
                demo::Servers::Configured
            } else {
                demo::Servers::Private
            },
            keep,
            interrupted(),
        )
        .await
        {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                telemetry::fatal(&format!("demo failed: {e:#}"));
                ExitCode::from(EXIT_FAILED)
            }
        },
        Command::Migrate { reference_schema } => migrate::run(&settings, reference_schema).await,
        Command::Once {
            jobs,
            dry_run,
            showtimes,
            output,
            pushgateway,
        } => {
            let dry_run = dry_run || settings.reconcile.dry_run;
            let kinds = selected_kinds(&jobs);
            let ctx = match connect(settings).await {
                Ok(ctx) => ctx,
                Err(code) => return code,
            };
            if let Err(code) = start_probe(&ctx, start::Command::Once).await {
                return code;
            }
            let trigger = Trigger::Once {
                kinds,
                dry_run,
                showtimes,
                progress: std::io::stderr().is_terminal(),
            };
            // The seat jobs take their shard's pass lease: while a daemon
            // (or another `once`) sweeps it, they stand by.
            let request = RunRequest::new(&ctx, trigger, CancellationToken::new(), None, None);
            let report = jobs::run(&ctx, request).await.report;
            match output {
                Output::Json => seatflow_reconciler::outln!("{}", report.to_json()),
                Output::Text => seatflow_reconciler::out!("{}", report.to_text()),
            }
            if let Some(url) = pushgateway
                && let Err(e) =
                    push::push_runs(&url, &report.jobs, &report.contract_deviations).await
            {
                telemetry::fatal(&format!("pushing metrics to the Pushgateway: {e}"));
                return ExitCode::from(EXIT_FAILED);
            }
            ExitCode::from(report.exit_code() as u8)
        }
    }
}

/// The schema's deviations from the contract, as `# ` lines on stdout.
fn print_deviations(state: &seatflow_reconciler::model::holds::ContractState) {
    let all = seatflow_reconciler::run::jobs::deviations::DeviationReport::all(state);
    if all.is_empty() {
        seatflow_reconciler::outln!("# schema: as the contract has it");
        return;
    }
    seatflow_reconciler::outln!("# schema: deviates from the contract");
    for d in all {
        for line in d.describe().lines() {
            seatflow_reconciler::outln!("#   {line}");
        }
    }
}

/// SIGTERM and SIGINT, handled from the moment they are installed: `run`
/// installs them before the daemon serves `/healthz`, since a signal that
/// arrived between "healthy" and the first wait would otherwise kill the
/// process with the default action, skipping the graceful stop (seen once in CI).
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next SIGTERM or SIGINT.
    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

async fn inspect(
    ctx: &Context,
    showtime: i64,
    seat: Option<&str>,
    output: Output,
) -> seatflow_reconciler::error::Result<ExitCode> {
    let Some(map) = seatflow_reconciler::ops::inspect::load(ctx, showtime).await? else {
        telemetry::fatal(&format!("showtime {showtime} does not exist"));
        return Ok(ExitCode::from(EXIT_FAILED));
    };
    match (output, seat) {
        (Output::Json, _) => seatflow_reconciler::outln!("{}", map.to_json()),
        (Output::Text, None) => {
            seatflow_reconciler::out!("{}", map.render(std::io::stdout().is_terminal()))
        }
        (Output::Text, Some(seat)) => {
            let fixes = ctx.mysql.recent_fixes(showtime, seat, 5).await?;
            match map.seat_detail(seat, &fixes) {
                Some(text) => seatflow_reconciler::out!("{text}"),
                None => {
                    telemetry::fatal(&format!(
                        "seat {seat} is not in the template of showtime {showtime}'s hall"
                    ));
                    return Ok(ExitCode::from(EXIT_FAILED));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The requested jobs in the contract's order; all five when none named.
fn selected_kinds(requested: &[Kind]) -> Vec<Kind> {
    Kind::ALL
        .into_iter()
        .filter(|k| requested.is_empty() || requested.contains(k))
        .collect()
}

/// Resolves on SIGINT or SIGTERM; the handlers are installed at once, so a
/// signal that comes early is not lost (nor does it kill the process).
fn interrupted() -> impl std::future::Future<Output = ()> {
    let mut signals = Signals::install().expect("SIGINT and SIGTERM handlers");
    async move { signals.next().await }
}

/// Rule 18 at start, as `check-config` checks it (`access::start`): what
/// the stores and sources `command` uses refuse of what it needs, each
/// with what to run.
async fn start_probe(ctx: &Context, command: start::Command) -> Result<(), ExitCode> {
    let findings = start::probe(&ctx.settings, Ok(&ctx.mysql), Ok(&ctx.redis), command).await;
    verdict(&findings)
}

/// The start's findings that stop it, as fatal lines, and the exit code: 2
/// for a configuration error (a refused permission, a wrong setting),
/// else 3 for a store out of reach.
fn verdict(findings: &[start::Finding]) -> Result<(), ExitCode> {
    let mut code = None;
    for finding in findings {
        match finding {
            start::Finding::Missing(m) => {
                telemetry::fatal(&format!("configuration: {m}"));
                code = Some(EXIT_CONFIG);
            }
            start::Finding::Misconfigured { key, message } => {
                telemetry::fatal(&format!("configuration key `{key}`: {message}"));
                code = Some(EXIT_CONFIG);
            }
            start::Finding::Unreachable { message, .. } => {
                telemetry::fatal(message);
                code.get_or_insert(EXIT_UNREACHABLE);
            }
            start::Finding::Allowed(_) | start::Finding::NotChecked { .. } => {}
        }
    }
    code.map_or(Ok(()), |c| Err(ExitCode::from(c)))
}

/// Connects to both stores. A TLS problem (certificate, host name, mode) or
/// a refused login is a configuration error, exit 2 naming the setting;
/// anything else is "unreachable", exit 3 (`access::start` judges).
async fn connect(settings: Settings) -> Result<Context, ExitCode> {
    let judged_by = settings.clone();
    Context::connect(settings)
        .await
        .map_err(|e| stopped(&start::connect_failure(&judged_by, &e, "")))
}

/// The exit code of a finding that stops a command, said.
fn stopped(finding: &start::Finding) -> ExitCode {
    verdict(std::slice::from_ref(finding))
        .err()
        .unwrap_or(ExitCode::from(EXIT_FAILED))
}
