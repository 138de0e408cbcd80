//! Logging: `tracing` to stderr, text or JSON per `log.format`.
//!
//! - JSON is one flat object a line: `timestamp`, `level`, `message`, the
//!   fields of every enclosing span (the run's `run_id`, the job's `kind`)
//!   and the event's own fields. Values are numbers, booleans or strings,
//!   never Rust `Debug` renderings of structures.
//! - Fatal errors (before or after the subscriber exists) go through
//!   [`fatal`], in the same format, whatever the filter says.
//! - Dependencies' chatter is filtered by default (`NOISY`); a target named
//!   in `log.level` or `RUST_LOG` keeps what it asks for.

use std::fmt;
use std::io::{IsTerminal, Write as _};
use std::path::Path;
use std::sync::OnceLock;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::config::{LogFormat, LogSettings};

/// Dependencies that log routine internals at INFO (sqlx's statement
/// logs, the scheduler's "Job creator created"): WARN and up only, unless
/// the filter names them.
pub const NOISY: [&str; 3] = ["sqlx", "tower_http", "tokio_cron_scheduler"];

/// The filter: `RUST_LOG` when set, else `log.level`; either way, with the
/// [`NOISY`] targets at `warn` unless the filter mentions them.
pub fn filter(level: &str) -> EnvFilter {
    let base = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| level.to_string());
    let mut directives = base.clone();
    for target in NOISY {
        if !base.contains(target) {
            directives.push_str(&format!(",{target}=warn"));
        }
    }
    EnvFilter::try_new(directives.trim_start_matches(','))
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"))
}

/// The format of this process's log lines, for [`fatal`].
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Sets the format [`fatal`] uses, when [`init`] cannot run (the settings did
/// not load). The first call wins.
pub fn set_format(format: LogFormat) {
    let _ = FORMAT.set(format);
}

/// Installs the global subscriber.
pub fn init(settings: &LogSettings) {
    set_format(settings.format);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter(&settings.level))
        .with_writer(|| AboveTheBars)
        .with_target(false);
    let _ = match settings.format {
        LogFormat::Json => builder
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}

/// Writes a fatal error to stderr in the log format, bypassing the filter:
/// `{"level":"ERROR","fatal":true,"message":...}` or `error: ...`.
pub fn fatal(message: &str) {
    let format = FORMAT.get().copied().unwrap_or(LogFormat::Text);
    let line = match format {
        LogFormat::Json => {
            let mut m = Map::new();
            m.insert("timestamp".into(), Value::String(now()));
            m.insert("level".into(), Value::String("ERROR".into()));
            m.insert("fatal".into(), Value::Bool(true));
            m.insert("message".into(), Value::String(message.to_string()));
            Value::Object(m).to_string()
        }
        LogFormat::Text => format!("error: {message}"),
    };
    let _ = writeln!(AboveTheBars, "{line}");
}

/// stderr, with any progress bars stepped around (`progress::suspend`):
/// a log line is never drawn into a bar.
struct AboveTheBars;

impl std::io::Write for AboveTheBars {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        crate::run::progress::suspend(|| std::io::stderr().lock().write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        crate::run::progress::suspend(|| std::io::stderr().lock().write_all(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// The log format to use when the settings could not be loaded: what
/// `SEATFLOW__LOG__FORMAT` or the `--config` file's `[log] format` asks for
/// (the defaults' is text).
pub fn format_hint(config_file: Option<&Path>) -> LogFormat {
    let parse = |s: &str| LogFormat::try_from(s.trim().to_string()).ok();
    if let Some(f) = std::env::var("SEATFLOW__LOG__FORMAT")
        .ok()
        .and_then(|v| parse(&v))
    {
        return f;
    }
    config_file
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|text| text.parse::<toml::Table>().ok())
        .and_then(|t| t.get("log")?.get("format")?.as_str().and_then(parse))
        .unwrap_or(LogFormat::Text)
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// One flat JSON object per event: span fields (outermost first), then the
/// event's fields, which win on a clash.
struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut m = Map::new();
        m.insert("timestamp".into(), Value::String(now()));
        m.insert(
            "level".into(),
            Value::String(event.metadata().level().as_str().into()),
        );
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                if let Some(fields) = ext.get::<FormattedFields<N>>()
                    && let Ok(Value::Object(o)) = serde_json::from_str::<Value>(&fields.fields)
                {
                    m.extend(o);
                }
            }
        }
        event.record(&mut Fields(&mut m));
        writeln!(writer, "{}", Value::Object(m))
    }
}

/// Collects an event's fields as JSON values.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().into(), Value::String(value.into()));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), Value::Bool(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().into(), Value::String(value.to_string()));
    }
    /// `%value` (Display) arrives here too, formatted by Display.
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), Value::String(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noisy_dependencies_are_quiet_unless_named() {
        // The filter reads RUST_LOG, which wins when set.
        if std::env::var("RUST_LOG").is_ok() {
            return;
        }
        let f = filter("info").to_string();
        assert!(f.contains("sqlx=warn"), "{f}");
        assert!(f.contains("tokio_cron_scheduler=warn"), "{f}");
        let f = filter("info,sqlx=debug").to_string();
        assert!(f.contains("sqlx=debug") && !f.contains("sqlx=warn"), "{f}");
    }

    #[test]
    fn the_format_hint_reads_the_config_file() {
        let dir = std::env::temp_dir().join(format!("sf-hint-{}.toml", uuid::Uuid::new_v4()));
        std::fs::write(&dir, "[log]\nformat = \"json\"\n[mysql]\nurl = 3\n").unwrap();
        let hint = format_hint(Some(&dir));
        std::fs::remove_file(&dir).unwrap();
        if std::env::var("SEATFLOW__LOG__FORMAT").is_err() {
            assert_eq!(hint, LogFormat::Json);
            assert_eq!(format_hint(None), LogFormat::Text);
        }
    }
}
