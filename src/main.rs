//! `seatflow-reconciler`: parse the command line, load settings, dispatch.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use seatflow_reconciler::config::Settings;
use seatflow_reconciler::context::Context;
use seatflow_reconciler::error::Stage;
use seatflow_reconciler::jobs::{self, RunRequest, Trigger};
use seatflow_reconciler::model::Kind;
use seatflow_reconciler::{demo, push, telemetry};
use tokio_util::sync::CancellationToken;

#[path = "cli/check_config.rs"]
mod check_config;

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
            if let Err(code) = check_access(&ctx, true).await {
                return code;
            }
            if let Err(code) = check_binlog(&ctx).await {
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
        Command::Migrate { reference_schema } => {
            let ctx = match connect(settings).await {
                Ok(ctx) => ctx,
                Err(code) => return code,
            };
            // An ALTER of a large audit table takes a while: say so on a terminal.
            let step = seatflow_reconciler::progress::Activity::start(
                std::io::stderr().is_terminal(),
                "migrate",
                "applying the reconciler's tables",
            );
            let applied = ctx.mysql.migrate(reference_schema).await;
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
                    match ctx.mysql.check_contract().await {
                        Ok(state) => print_deviations(&state),
                        Err(e) => tracing::warn!(error = %e, "could not read the schema"),
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    telemetry::fatal(&e.to_string());
                    ExitCode::from(EXIT_FAILED)
                }
            }
        }
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
            if let Err(code) = check_access(&ctx, false).await {
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
                Output::Json => println!("{}", report.to_json()),
                Output::Text => print!("{}", report.to_text()),
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
    let all = seatflow_reconciler::jobs::contract::DeviationReport::all(state);
    if all.is_empty() {
        println!("# schema: as the contract has it");
        return;
    }
    println!("# schema: deviates from the contract");
    for d in all {
        for line in d.describe().lines() {
            println!("#   {line}");
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
    let Some(map) = seatflow_reconciler::inspect::load(ctx, showtime).await? else {
        telemetry::fatal(&format!("showtime {showtime} does not exist"));
        return Ok(ExitCode::from(EXIT_FAILED));
    };
    match (output, seat) {
        (Output::Json, _) => println!("{}", map.to_json()),
        (Output::Text, None) => print!("{}", map.render(std::io::stdout().is_terminal())),
        (Output::Text, Some(seat)) => {
            let fixes = ctx.mysql.recent_fixes(showtime, seat, 5).await?;
            match map.seat_detail(seat, &fixes) {
                Some(text) => print!("{text}"),
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

/// Connects to both stores. A TLS problem (certificate, host name, mode) or
/// a refused login is a configuration error, exit 2 naming the setting;
/// anything else is "unreachable", exit 3.
/// The configuration key a refused login points at: the password's own key
/// when the password was given apart from the URL, else the URL (its
/// user and password, or none where the server needs one).
fn credential_key(settings: &Settings, stage: Stage) -> &'static str {
    let apart = |password: &seatflow_reconciler::config::Secret, file: &str| {
        !password.is_empty() || !file.is_empty()
    };
    match stage {
        Stage::Mysql if apart(&settings.mysql.password, &settings.mysql.password_file) => {
            "mysql.password"
        }
        Stage::Mysql => "mysql.url",
        _ if apart(&settings.redis.password, &settings.redis.password_file) => "redis.password",
        _ => "redis.url",
    }
}

/// With `changes.mysql_binlog` on, starts the binlog source once before
/// serving: a missing privilege or server setting (each named as the
/// statement to run), a TLS problem or a refused login is a configuration
/// error, exit 2; a server that cannot be reached, exit 3.
async fn check_binlog(ctx: &Context) -> Result<(), ExitCode> {
    if !ctx.settings.changes.mysql_binlog {
        return Ok(());
    }
    let e = match ctx.start_binlog(None).await {
        Ok(source) => {
            tracing::info!(position = %source.position(), "the MySQL binlog can be read");
            return Ok(());
        }
        Err(e) => e,
    };
    if matches!(e, seatflow_reconciler::error::Error::BinlogSetup(_)) {
        telemetry::fatal(&format!("configuration key `changes.mysql_binlog`: {e}"));
        return Err(ExitCode::from(EXIT_CONFIG));
    }
    let key = credential_key(&ctx.settings, Stage::Mysql);
    let url = ctx.settings.mysql.url.to_string();
    Err(store_failed(
        &e,
        key,
        &url,
        " (its binlog, changes.mysql_binlog)",
    ))
}

/// The ACL rule for the configured Redis user (rule 18), as the daemon
/// needs it.
fn redis_rule(settings: &Settings) -> String {
    use seatflow_reconciler::access;
    access::redis_access(settings, true).setuser(&access::redis_user(settings))
}

/// Rule 18 at start: what either store's user may not do of what this
/// command needs (`subscribes`: the daemon, which subscribes to keyspace
/// events when they are on), each with what to run; exit 2 if anything.
async fn check_access(ctx: &Context, subscribes: bool) -> Result<(), ExitCode> {
    use seatflow_reconciler::access;
    let s = &ctx.settings;
    let found = access::check::missing(
        &ctx.mysql,
        &ctx.redis,
        &access::redis_access(s, subscribes),
        redis_rule(s),
        !s.audit.retention.is_zero(),
    )
    .await;
    match found {
        Ok(missing) if missing.is_empty() => Ok(()),
        Ok(missing) => Err(print_missing(&missing)),
        Err(e) => {
            telemetry::fatal(&format!("could not check the stores' permissions: {e}"));
            Err(ExitCode::from(EXIT_UNREACHABLE))
        }
    }
}

/// Each missing permission as a fatal line; exit 2.
fn print_missing(missing: &[seatflow_reconciler::access::Missing]) -> ExitCode {
    for m in missing {
        telemetry::fatal(&format!("configuration: {m}"));
    }
    ExitCode::from(EXIT_CONFIG)
}

/// The exit code and fatal line of a store that could not be used at
/// start: a TLS problem or a refused login is a configuration error naming
/// the key (`key`: the store's credential), anything else unreachable.
/// `what` follows the store's name (what of it was used).
fn store_failed(
    e: &seatflow_reconciler::error::Error,
    key: &str,
    url: &str,
    what: &str,
) -> ExitCode {
    let store = e.stage().label();
    if let Some(problem) = e.tls_problem() {
        telemetry::fatal(&format!(
            "configuration key `{store}.{}`: TLS with {store}{what} failed: {} ({e})",
            problem.setting(),
            problem.describe()
        ));
        return ExitCode::from(EXIT_CONFIG);
    }
    if let Some(why) = e.login_refused() {
        telemetry::fatal(&format!(
            "configuration key `{key}`: {store}{what} refused us: {why} ({e})"
        ));
        return ExitCode::from(EXIT_CONFIG);
    }
    // Only the store that failed, and its URL (redacted).
    telemetry::fatal(&format!("cannot reach {store}{what} at {url}: {e}"));
    ExitCode::from(EXIT_UNREACHABLE)
}

async fn connect(settings: Settings) -> Result<Context, ExitCode> {
    let (mysql, redis) = (settings.mysql.url.clone(), settings.redis.url.clone());
    let credential = |stage| credential_key(&settings, stage);
    let (mysql_key, redis_key) = (credential(Stage::Mysql), credential(Stage::Redis));
    let rule = redis_rule(&settings);
    Context::connect(settings).await.map_err(|e| {
        if let Some(d) = seatflow_reconciler::error::Denial::of(&e) {
            let remedy = if d.store == Stage::Redis {
                vec![rule.clone()]
            } else {
                Vec::new()
            };
            return print_missing(&[seatflow_reconciler::access::Missing::of(d, remedy)]);
        }
        let (key, url) = if e.stage() == Stage::Mysql {
            (mysql_key, &mysql)
        } else {
            (redis_key, &redis)
        };
        store_failed(&e, key, &url.to_string(), "")
    })
}
