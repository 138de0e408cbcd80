//! Settings: `config/default.toml` (compiled in, the single list of keys and
//! defaults), then `--config FILE`, then `SEATFLOW__SECTION__KEY` variables.
//! Every error names the offending key; secrets cannot be printed.

use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use config::{Config, Environment, File, FileFormat, Map, Value, ValueKind};
use serde::Deserialize;

use crate::model::Kind;

/// The defaults, and the list of every valid key.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// A configuration problem, always tied to one key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration key `{key}`: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

impl ConfigError {
    fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// A URL that may carry a password: `Debug`/`Display` show it redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    pub fn new(url: impl Into<String>) -> Self {
        SecretUrl(url.into())
    }
    /// The real URL, for connecting only. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

/// Replaces the password of a URL (and any text that looks like one) by `***`.
pub fn redact_url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(u) => u.to_string(),
        // Not parseable: hide everything between "://" and "@" to be safe.
        Err(_) => match (raw.find("://"), raw.rfind('@')) {
            (Some(s), Some(at)) if at > s => format!("{}://***{}", &raw[..s], &raw[at..]),
            _ => raw.to_string(),
        },
    }
}

#[derive(Debug, Clone)]
pub struct MysqlSettings {
    pub url: SecretUrl,
    pub max_connections: u32,
    pub connect_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub url: SecretUrl,
    pub cluster_urls: Vec<SecretUrl>,
    pub key_prefix: String,
    pub response_timeout: Duration,
}

#[derive(Clone)]
pub struct HttpSettings {
    pub listen: SocketAddr,
    /// Empty disables the admin endpoint.
    pub admin_token: String,
}

impl fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSettings")
            .field("listen", &self.listen)
            .field(
                "admin_token",
                &if self.admin_token.is_empty() {
                    ""
                } else {
                    "***"
                },
            )
            .finish()
    }
}

#[derive(Debug, Clone)]
pub struct ReconcileSettings {
    pub dry_run: bool,
    pub expired_order_buffer: Duration,
    pub orphan_grace: Duration,
    pub lock_ttl: Duration,
    pub scan_chunk: usize,
    pub instance: String,
    pub retry: RetrySettings,
}

#[derive(Debug, Clone, Copy)]
pub struct RetrySettings {
    pub attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct DaemonSettings {
    /// How long running batches may take to finish after SIGTERM.
    pub shutdown_timeout: Duration,
    /// Each scheduled run starts after a random delay up to this, so that
    /// replicas do not fire in lockstep.
    pub start_jitter: Duration,
}

/// This replica's share of the showtimes: `id % total == index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub total: u32,
    pub index: u32,
}

impl Shard {
    pub const ALL: Shard = Shard { total: 1, index: 0 };

    pub fn covers(&self, showtime: i64) -> bool {
        showtime.rem_euclid(self.total as i64) == self.index as i64
    }
}

#[derive(Debug, Clone)]
pub struct LogSettings {
    pub format: LogFormat,
    pub level: String,
}

#[derive(Debug, Clone)]
pub struct JobSettings {
    pub enabled: bool,
    pub schedule: String,
    pub batch_size: usize,
    pub scan_limit: usize,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub mysql: MysqlSettings,
    pub redis: RedisSettings,
    pub http: HttpSettings,
    pub reconcile: ReconcileSettings,
    pub daemon: DaemonSettings,
    pub sharding: Shard,
    pub log: LogSettings,
    jobs: [JobSettings; 5],
}

impl Settings {
    pub fn job(&self, kind: Kind) -> &JobSettings {
        &self.jobs[kind as usize]
    }

    pub fn job_mut(&mut self, kind: Kind) -> &mut JobSettings {
        &mut self.jobs[kind as usize]
    }

    /// Loads defaults, then `file`, then the process environment.
    pub fn load(file: Option<&Path>) -> Result<Settings, ConfigError> {
        Self::load_with_env(file, std::env::vars())
    }

    /// As [`Settings::load`], with the environment given explicitly (tests).
    pub fn load_with_env(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, ConfigError> {
        let mut builder =
            Config::builder().add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml));
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError::new(
                    "--config",
                    format!("file {} does not exist", path.display()),
                ));
            }
            builder = builder.add_source(File::from(path).format(FileFormat::Toml));
        }
        let env: Map<String, String> = env
            .into_iter()
            .filter(|(k, _)| k.starts_with("SEATFLOW__"))
            .collect();
        builder = builder.add_source(
            Environment::with_prefix("SEATFLOW")
                .prefix_separator("__")
                .separator("__")
                .list_separator(",")
                .with_list_parse_key("redis.cluster_urls")
                .try_parsing(true)
                .source(Some(env)),
        );
        let merged = builder
            .build()
            .map_err(|e| ConfigError::new(error_key(&e), e.to_string()))?;
        reject_unknown_keys(&merged)?;
        let raw: RawSettings = merged
            .try_deserialize()
            .map_err(|e| ConfigError::new(error_key(&e), e.to_string()))?;
        raw.validate()
    }
}

/// The key a `config` error is about, when it says; otherwise the whole file.
fn error_key(e: &config::ConfigError) -> String {
    let text = e.to_string();
    text.rsplit_once("for key `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(key, _)| key.to_string())
        .unwrap_or_else(|| "<file>".to_string())
}

fn flatten_keys(prefix: &str, table: &Map<String, Value>, out: &mut BTreeSet<String>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match &v.kind {
            ValueKind::Table(t) => flatten_keys(&key, t, out),
            _ => {
                out.insert(key);
            }
        }
    }
}

/// Every key set anywhere must be one of `default.toml`'s keys.
fn reject_unknown_keys(merged: &Config) -> Result<(), ConfigError> {
    let defaults = Config::builder()
        .add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml))
        .build()
        .expect("default.toml is valid");
    let mut known = BTreeSet::new();
    let defaults = defaults.cache.into_table().expect("defaults are a table");
    flatten_keys("", &defaults, &mut known);
    let mut seen = BTreeSet::new();
    let table = merged
        .cache
        .clone()
        .into_table()
        .map_err(|e| ConfigError::new(error_key(&e), e.to_string()))?;
    flatten_keys("", &table, &mut seen);
    match seen.difference(&known).next() {
        Some(key) => Err(ConfigError::new(key.clone(), "unknown key")),
        None => Ok(()),
    }
}

// Raw, as written; `validate` turns it into `Settings` or a key-naming error.

#[derive(Deserialize)]
struct RawSettings {
    mysql: RawMysql,
    redis: RawRedis,
    http: RawHttp,
    reconcile: RawReconcile,
    daemon: RawDaemon,
    sharding: RawSharding,
    log: RawLog,
    jobs: std::collections::HashMap<String, RawJob>,
}

#[derive(Deserialize)]
struct RawMysql {
    url: String,
    max_connections: i64,
    connect_timeout: String,
}

#[derive(Deserialize)]
struct RawRedis {
    url: String,
    cluster_urls: Vec<String>,
    key_prefix: String,
    response_timeout: String,
}

#[derive(Deserialize)]
struct RawHttp {
    listen: String,
    admin_token: String,
}

#[derive(Deserialize)]
struct RawReconcile {
    dry_run: bool,
    expired_order_buffer: String,
    orphan_grace: String,
    lock_ttl: String,
    scan_chunk: i64,
    instance: String,
    retry_attempts: i64,
    retry_base_delay: String,
    retry_max_delay: String,
}

#[derive(Deserialize)]
struct RawDaemon {
    shutdown_timeout: String,
    start_jitter: String,
}

#[derive(Deserialize)]
struct RawSharding {
    total: i64,
    index: i64,
}

#[derive(Deserialize)]
struct RawLog {
    format: String,
    level: String,
}

#[derive(Deserialize)]
struct RawJob {
    enabled: bool,
    schedule: String,
    batch_size: i64,
    scan_limit: i64,
}

/// Parses `"90s"`, `"2m"`, `"500ms"`.
pub fn parse_duration(key: &str, raw: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(raw.trim())
        .map_err(|e| ConfigError::new(key, format!("invalid duration {raw:?}: {e}")))
}

fn in_range(key: &str, value: i64, min: i64, max: i64) -> Result<i64, ConfigError> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::new(
            key,
            format!("{value} is out of range {min}..={max}"),
        ))
    }
}

fn check_url(key: &str, raw: &str, schemes: &[&str]) -> Result<SecretUrl, ConfigError> {
    let parsed = url::Url::parse(raw)
        .map_err(|e| ConfigError::new(key, format!("invalid URL {}: {e}", redact_url(raw))))?;
    if !schemes.contains(&parsed.scheme()) {
        return Err(ConfigError::new(
            key,
            format!("scheme must be one of {}", schemes.join(", ")),
        ));
    }
    Ok(SecretUrl::new(raw))
}

/// Checks a six-field cron expression (seconds first).
pub fn check_schedule(key: &str, raw: &str) -> Result<(), ConfigError> {
    let fields = raw.split_whitespace().count();
    if fields != 6 {
        return Err(ConfigError::new(
            key,
            format!("cron expression {raw:?} must have 6 fields (seconds first), has {fields}"),
        ));
    }
    parse_schedule(raw)
        .map(|_| ())
        .map_err(|e| ConfigError::new(key, format!("invalid cron expression {raw:?}: {e}")))
}

/// Parses a schedule exactly as `tokio-cron-scheduler` does (seconds
/// required, day-of-month AND day-of-week), so next-fire times agree.
pub fn parse_schedule(raw: &str) -> Result<croner::Cron, croner::errors::CronError> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Required)
        .dom_and_dow(true)
        .build()
        .parse(raw)
}

impl RawSettings {
    fn validate(self) -> Result<Settings, ConfigError> {
        let mysql = MysqlSettings {
            url: check_url("mysql.url", &self.mysql.url, &["mysql", "mariadb"])?,
            max_connections: in_range("mysql.max_connections", self.mysql.max_connections, 1, 256)?
                as u32,
            connect_timeout: positive(
                "mysql.connect_timeout",
                parse_duration("mysql.connect_timeout", &self.mysql.connect_timeout)?,
            )?,
        };
        let cluster_urls = self
            .redis
            .cluster_urls
            .iter()
            .map(|u| check_url("redis.cluster_urls", u, &["redis", "rediss"]))
            .collect::<Result<Vec<_>, _>>()?;
        if self.redis.key_prefix.contains(['{', '}']) || self.redis.key_prefix.is_empty() {
            return Err(ConfigError::new(
                "redis.key_prefix",
                "must be non-empty and must not contain braces (they form the hash tag)",
            ));
        }
        let redis = RedisSettings {
            url: check_url("redis.url", &self.redis.url, &["redis", "rediss"])?,
            cluster_urls,
            key_prefix: self.redis.key_prefix,
            response_timeout: positive(
                "redis.response_timeout",
                parse_duration("redis.response_timeout", &self.redis.response_timeout)?,
            )?,
        };
        let http = HttpSettings {
            listen: self.http.listen.parse().map_err(|e| {
                ConfigError::new(
                    "http.listen",
                    format!("{:?} is not host:port: {e}", self.http.listen),
                )
            })?,
            admin_token: self.http.admin_token,
        };
        let r = self.reconcile;
        let lock_ttl = parse_duration("reconcile.lock_ttl", &r.lock_ttl)?;
        if lock_ttl < Duration::from_secs(1) {
            return Err(ConfigError::new(
                "reconcile.lock_ttl",
                "must be at least 1s",
            ));
        }
        let reconcile = ReconcileSettings {
            dry_run: r.dry_run,
            expired_order_buffer: parse_duration(
                "reconcile.expired_order_buffer",
                &r.expired_order_buffer,
            )?,
            orphan_grace: parse_duration("reconcile.orphan_grace", &r.orphan_grace)?,
            lock_ttl,
            scan_chunk: in_range("reconcile.scan_chunk", r.scan_chunk, 1, 10_000)? as usize,
            instance: if r.instance.trim().is_empty() {
                default_instance()
            } else {
                r.instance
            },
            retry: RetrySettings {
                attempts: in_range("reconcile.retry_attempts", r.retry_attempts, 1, 20)? as u32,
                base_delay: parse_duration("reconcile.retry_base_delay", &r.retry_base_delay)?,
                max_delay: parse_duration("reconcile.retry_max_delay", &r.retry_max_delay)?,
            },
        };
        let daemon = DaemonSettings {
            shutdown_timeout: positive(
                "daemon.shutdown_timeout",
                parse_duration("daemon.shutdown_timeout", &self.daemon.shutdown_timeout)?,
            )?,
            start_jitter: parse_duration("daemon.start_jitter", &self.daemon.start_jitter)?,
        };
        let sharding = shard(&self.sharding, std::env::var("HOSTNAME").ok().as_deref())?;
        let format = match self.log.format.as_str() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => {
                return Err(ConfigError::new(
                    "log.format",
                    format!("{other:?} is not \"text\" or \"json\""),
                ));
            }
        };
        tracing_subscriber::EnvFilter::try_new(&self.log.level)
            .map_err(|e| ConfigError::new("log.level", format!("invalid filter: {e}")))?;
        let log = LogSettings {
            format,
            level: self.log.level,
        };
        let mut jobs = self.jobs;
        let jobs = Kind::ALL.map(|kind| -> Result<JobSettings, ConfigError> {
            let key = |field: &str| format!("jobs.{}.{field}", kind.label());
            let raw = jobs
                .remove(kind.label())
                .ok_or_else(|| ConfigError::new(key("enabled"), "missing section"))?;
            check_schedule(&key("schedule"), &raw.schedule)?;
            Ok(JobSettings {
                enabled: raw.enabled,
                schedule: raw.schedule,
                batch_size: in_range(&key("batch_size"), raw.batch_size, 1, 10_000_000)? as usize,
                scan_limit: in_range(&key("scan_limit"), raw.scan_limit, 1, 100_000_000)? as usize,
            })
        });
        let [a, b, c, d, e] = jobs;
        Ok(Settings {
            mysql,
            redis,
            http,
            reconcile,
            daemon,
            sharding,
            log,
            jobs: [a?, b?, c?, d?, e?],
        })
    }
}

/// Validates the shard; index -1 takes the StatefulSet ordinal from the host name.
fn shard(raw: &RawSharding, hostname: Option<&str>) -> Result<Shard, ConfigError> {
    let total = in_range("sharding.total", raw.total, 1, 4096)?;
    let index = if raw.index == -1 {
        let ordinal = hostname
            .and_then(|h| h.rsplit_once('-'))
            .and_then(|(_, n)| n.parse::<i64>().ok())
            .ok_or_else(|| {
                ConfigError::new(
                    "sharding.index",
                    format!(
                        "-1 needs a host name ending in -N (a StatefulSet pod), got {hostname:?}"
                    ),
                )
            })?;
        if ordinal >= total {
            return Err(ConfigError::new(
                "sharding.index",
                format!("the host name's ordinal {ordinal} is not below sharding.total = {total}"),
            ));
        }
        ordinal
    } else {
        in_range("sharding.index", raw.index, 0, total - 1)?
    };
    Ok(Shard {
        total: total as u32,
        index: index as u32,
    })
}

fn positive(key: &str, d: Duration) -> Result<Duration, ConfigError> {
    if d.is_zero() {
        Err(ConfigError::new(key, "must be greater than 0"))
    } else {
        Ok(d)
    }
}

fn default_instance() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "seatflow-reconciler".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn load_toml(text: &str, vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let mut f = tempfile_in_target();
        f.1.write_all(text.as_bytes()).unwrap();
        Settings::load_with_env(Some(&f.0), env(vars))
    }

    fn tempfile_in_target() -> (std::path::PathBuf, std::fs::File) {
        let path = std::env::temp_dir().join(format!("seatflow-cfg-{}.toml", uuid::Uuid::new_v4()));
        let file = std::fs::File::create(&path).unwrap();
        (path, file)
    }

    #[test]
    fn defaults_load_and_match_the_spec() {
        let s = Settings::load_with_env(None, env(&[])).unwrap();
        assert_eq!(s.mysql.url.expose(), "mysql://root@127.0.0.1:3306/seatflow");
        assert_eq!(s.redis.key_prefix, "seatflow:");
        assert_eq!(s.http.listen.to_string(), "127.0.0.1:9464");
        assert_eq!(s.reconcile.expired_order_buffer, Duration::from_secs(60));
        assert_eq!(s.reconcile.orphan_grace, Duration::from_secs(120));
        assert_eq!(s.reconcile.lock_ttl, Duration::from_secs(30));
        assert_eq!(s.reconcile.scan_chunk, 200);
        assert!(!s.reconcile.dry_run);
        for k in Kind::ALL {
            assert!(s.job(k).enabled);
        }
    }

    #[test]
    fn file_then_environment_override() {
        let s = load_toml(
            "[reconcile]\norphan_grace = \"2m\"\n[jobs.paid_seats]\nbatch_size = 7\n",
            &[
                ("SEATFLOW__RECONCILE__DRY_RUN", "true"),
                ("SEATFLOW__JOBS__PAID_SEATS__BATCH_SIZE", "9"),
                ("SEATFLOW__MYSQL__URL", "mysql://u:hunter2@db:3306/x"),
            ],
        )
        .unwrap();
        assert_eq!(s.reconcile.orphan_grace, Duration::from_secs(120));
        assert!(s.reconcile.dry_run);
        assert_eq!(s.job(Kind::PaidSeats).batch_size, 9);
        assert_eq!(s.mysql.url.expose(), "mysql://u:hunter2@db:3306/x");
        let shown = format!("{s:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = load_toml("[reconcile]\norphan_grase = \"2m\"\n", &[]).unwrap_err();
        assert_eq!(e.key, "reconcile.orphan_grase");
        let e = Settings::load_with_env(None, env(&[("SEATFLOW__HTTP__PORT", "1")])).unwrap_err();
        assert_eq!(e.key, "http.port");
        let e = load_toml("[jobs.refunds]\nenabled = true\n", &[]).unwrap_err();
        assert_eq!(e.key, "jobs.refunds.enabled");
    }

    #[test]
    fn invalid_values_are_named() {
        let cases = [
            ("[reconcile]\nlock_ttl = \"soon\"\n", "reconcile.lock_ttl"),
            ("[reconcile]\nscan_chunk = 0\n", "reconcile.scan_chunk"),
            ("[reconcile]\ndry_run = \"maybe\"\n", "reconcile.dry_run"),
            (
                "[jobs.orphan_locks]\nschedule = \"* * * * *\"\n",
                "jobs.orphan_locks.schedule",
            ),
            (
                "[jobs.orphan_locks]\nschedule = \"0 0 25 * * *\"\n",
                "jobs.orphan_locks.schedule",
            ),
            (
                "[jobs.sold_orphans]\nbatch_size = -1\n",
                "jobs.sold_orphans.batch_size",
            ),
            ("[redis]\nurl = \"http://x\"\n", "redis.url"),
            ("[redis]\nkey_prefix = \"a{b\"\n", "redis.key_prefix"),
            ("[http]\nlisten = \"nowhere\"\n", "http.listen"),
            ("[log]\nformat = \"xml\"\n", "log.format"),
        ];
        for (text, key) in cases {
            let e = load_toml(text, &[]).unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
        }
    }

    #[test]
    fn shards_come_from_config_or_the_statefulset_ordinal() {
        let raw = |total, index| RawSharding { total, index };
        assert_eq!(
            shard(&raw(3, 2), None).unwrap(),
            Shard { total: 3, index: 2 }
        );
        assert_eq!(
            shard(&raw(3, -1), Some("seatflow-reconciler-1")).unwrap(),
            Shard { total: 3, index: 1 }
        );
        assert_eq!(shard(&raw(3, 3), None).unwrap_err().key, "sharding.index");
        assert_eq!(
            shard(&raw(2, -1), Some("seatflow-reconciler-2"))
                .unwrap_err()
                .key,
            "sharding.index"
        );
        assert_eq!(
            shard(&raw(2, -1), Some("laptop")).unwrap_err().key,
            "sharding.index"
        );
        assert_eq!(shard(&raw(0, 0), None).unwrap_err().key, "sharding.total");
        assert!(Shard { total: 3, index: 1 }.covers(4));
        assert!(!Shard { total: 3, index: 1 }.covers(5));
    }

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("mysql://root:s3cret@db:3306/seatflow"),
            "mysql://root:***@db:3306/seatflow"
        );
        assert_eq!(redact_url("redis://:pw@h:6379"), "redis://:***@h:6379");
        assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
        assert!(!redact_url("bad://us er:pw@x").contains("pw"));
    }
}
