//! Settings, typed. Where they come from is `sources.rs` (defaults, file,
//! environment), the rules the types cannot say are `check.rs`, and values
//! that must never be printed are `secret.rs`. Every error names its key.

mod secret;
mod sources;
mod tls;
mod validate;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::model::{Kind, Shard};

pub use secret::effective_toml;
pub use secret::{Secret, SecretUrl, redact_url};
pub use sources::DEFAULT_TOML;
pub use tls::{MysqlTlsMode, tls_files_changed};

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

#[derive(Debug, Clone, Deserialize)]
pub struct MysqlSettings {
    pub url: SecretUrl,
    pub max_connections: u32,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// The sessions' `innodb_lock_wait_timeout` (whole seconds, at least 1).
    #[serde(with = "humantime_serde")]
    pub lock_wait_timeout: Duration,
    /// Unset: `verify_identity` when a `tls_*_file` is set, else as the URL says.
    pub tls_mode: MysqlTlsMode,
    /// PEM files; an empty string is unset.
    pub tls_ca_file: String,
    pub tls_cert_file: String,
    pub tls_key_file: String,
    /// Set into `url` (percent-encoded) at load; empty is unset.
    pub password: Secret,
    /// A file holding the password (a mounted Secret); empty is unset.
    pub password_file: String,
    /// A replica of the same data for a pass's bulk reads (pages,
    /// occupancy, templates); empty is off. It takes the primary's TLS
    /// settings and, when its URL carries none, the primary's password.
    pub replica_url: SecretUrl,
    /// Above this lag (the replica's own report, asked each chunk) a chunk
    /// is read from the primary.
    #[serde(with = "humantime_serde")]
    pub max_replica_lag: Duration,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RedisSettings {
    pub url: SecretUrl,
    pub cluster_urls: Vec<SecretUrl>,
    pub key_prefix: String,
    #[serde(with = "humantime_serde")]
    pub response_timeout: Duration,
    /// The sweep's reads of seat hashes on a reader of its own
    /// (`store/redis/bulk_read.rs`) where the server allows one.
    pub fast_seat_reads: bool,
    /// PEM files; an empty string is unset.
    pub tls_ca_file: String,
    pub tls_cert_file: String,
    pub tls_key_file: String,
    /// Set into `url` and every `cluster_urls` entry at load; empty is unset.
    pub password: Secret,
    /// A file holding the password (a mounted Secret); empty is unset.
    pub password_file: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct HttpSettings {
    pub listen: SocketAddr,
    /// Empty disables the admin endpoint.
    pub admin_token: Secret,
    #[serde(with = "humantime_serde")]
    pub header_timeout: Duration,
    pub max_connections: usize,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ReconcileSettings {
    pub dry_run: bool,
    #[serde(with = "humantime_serde")]
    pub expired_order_buffer: Duration,
    #[serde(with = "humantime_serde")]
    pub orphan_grace: Duration,
    #[serde(with = "humantime_serde")]
    pub lock_ttl: Duration,
    pub scan_chunk: usize,
    /// Who this process is in the audit; empty in the file means the host name.
    pub instance: String,
    pub retry_attempts: u32,
    #[serde(with = "humantime_serde")]
    pub retry_base_delay: Duration,
    #[serde(with = "humantime_serde")]
    pub retry_max_delay: Duration,
}

impl ReconcileSettings {
    pub fn retry(&self) -> RetrySettings {
        RetrySettings {
            attempts: self.retry_attempts,
            base_delay: self.retry_base_delay,
            max_delay: self.retry_max_delay,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct RetrySettings {
    pub attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum LogFormat {
    Text,
    Json,
}

/// In the project's words, not serde's ("enum LogFormat does not have
/// variant constructor …").
impl TryFrom<String> for LogFormat {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("{other:?} is not a log format: use text or json")),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct AuditSettings {
    /// Audit rows older than this are pruned; zero keeps them for ever.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    /// Rows deleted per statement while pruning.
    pub prune_batch: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct DaemonSettings {
    /// How long running batches may take to finish after SIGTERM.
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// Each scheduled run starts after a random delay up to this, so that
    /// replicas do not fire in lockstep.
    #[serde(with = "humantime_serde")]
    pub start_jitter: Duration,
}

/// `sharding.total` and `sharding.index`; once checked, the index is the
/// resolved one (never -1).
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct ShardingSettings {
    pub total: u32,
    pub index: i64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct LogSettings {
    pub format: LogFormat,
    pub level: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct JobSettings {
    pub enabled: bool,
    /// `expired_orders` only: the seat jobs run in the shared pass, on
    /// `pass.schedule` (see [`Settings::schedule`]).
    #[serde(default)]
    schedule: Option<String>,
    pub batch_size: usize,
    pub scan_limit: usize,
}

/// `pass.schedule = "auto"`: a pass every minute...
pub const MINUTE_SWEEP: &str = "0 * * * * *";
/// ... or every 20 minutes when both change sources are configured (Redis
/// keyspace events and the MySQL binlog): measured in `benches/results/2026-12-05-both-sources.md`
/// (the pass is then a third of the reads, the checks the rest).
pub const COVERED_SWEEP: &str = "0 */20 * * * *";
/// ... with a pass every minute still while either source is down.
pub const UNCOVERED_PASS_EVERY: Duration = Duration::from_secs(60);

/// `[pass]` (formerly `[pass]`, still read): the daemon's shared pass of
/// the seat jobs.
#[derive(Debug, Clone, Deserialize)]
pub struct PassSettings {
    /// When a pass starts (six-field cron, UTC). `auto` at load becomes
    /// [`MINUTE_SWEEP`], or [`COVERED_SWEEP`] when both change sources are
    /// configured.
    pub schedule: String,
    /// Set when the schedule was `auto` and both change sources are
    /// configured: while either is down, a pass runs this often anyway
    /// ([`UNCOVERED_PASS_EVERY`]).
    #[serde(skip)]
    pub while_uncovered: Option<Duration>,
    /// Showtimes starting before now + this are swept from the soonest in
    /// every pass; the rest continue from the cursors. Zero: cursors only.
    #[serde(with = "humantime_serde")]
    pub soonest_window: Duration,
    /// Pace the daemon's reads (`once` always reads unpaced).
    pub pace: bool,
    /// An optional cap on the pace, in seat hashes per second (0: none; the
    /// pace follows Redis' answer times).
    pub max_hashes_per_second: u32,
    /// Seat hashes per Redis round trip while paced.
    pub hashes_per_batch: usize,
    /// The pass lease (a shard's pass among reconcilers): renewed every
    /// third of it, kept between passes by the daemon holding its own
    /// shard's; a holder silent this long is taken over.
    #[serde(with = "humantime_serde")]
    pub pass_lease_ttl: Duration,
    /// How long after a fire a reconciler waits before it runs the pass of
    /// a shard that is not its own and that nobody ran.
    #[serde(with = "humantime_serde")]
    pub takeover_after: Duration,
}

/// `[changes]`: change-driven checks between passes (src/daemon/change_state.rs).
#[derive(Debug, Clone, Deserialize)]
pub struct ChangesSettings {
    /// Redis keyspace notifications on the seat hashes: `auto` subscribes
    /// and uses them wherever the server sends them; `off` never subscribes.
    pub redis_events: RedisEvents,
    /// Least time between two checks of one showtime, however many changes.
    #[serde(with = "humantime_serde")]
    pub min_interval: Duration,
    /// How long after a keyspace notification its showtime is checked: the
    /// application's own next step (the order after a hold, `"2"` after a
    /// payment) lands first, and a burst of changes is one check.
    #[serde(with = "humantime_serde")]
    pub event_settle: Duration,
    /// Most showtimes checked a second (each check reads its seat hash once).
    pub max_checks_per_second: u32,
    /// Most showtimes waiting for a check; past it a change is dropped and
    /// counted as a gap (and an expedited pass covers it).
    pub queue_capacity: usize,
    /// Reads MySQL's row binlog as a replica (on the shard's active
    /// replica): each committed change to `ticket_order`, `order_seat` or
    /// `showtime` asks for a check of its showtimes.
    pub mysql_binlog: bool,
    /// How long after its commit a change's showtime is checked: the
    /// application's own follow-up (pay → `"2"`, cancel → `"0"`, open sales
    /// → warm) lands first.
    #[serde(with = "humantime_serde")]
    pub mysql_settle: Duration,
    /// The server id the binlog reader registers with: unique among the
    /// server's replicas. 0 (the default) is derived from
    /// `reconcile.instance` at load (never 0 after it).
    pub mysql_server_id: u32,
}

impl ChangesSettings {
    /// Both change sources are configured: Redis keyspace events (where
    /// the server sends them) and the MySQL binlog.
    pub fn both_sources(&self) -> bool {
        self.mysql_binlog && self.redis_events == RedisEvents::Auto
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum RedisEvents {
    Auto,
    Off,
}

impl TryFrom<String> for RedisEvents {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "auto" => Ok(RedisEvents::Auto),
            "off" => Ok(RedisEvents::Off),
            other => Err(format!("{other:?} is not a choice: use auto or off")),
        }
    }
}

/// `[jobs.<job>]`, one section per job.
#[derive(Debug, Clone, Deserialize)]
struct JobsSettings {
    expired_orders: JobSettings,
    paid_seats: JobSettings,
    missing_hashes: JobSettings,
    orphan_locks: JobSettings,
    sold_orphans: JobSettings,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Settings {
    pub mysql: MysqlSettings,
    pub redis: RedisSettings,
    pub http: HttpSettings,
    pub reconcile: ReconcileSettings,
    pub audit: AuditSettings,
    pub daemon: DaemonSettings,
    pub sharding: ShardingSettings,
    pub log: LogSettings,
    pub pass: PassSettings,
    pub changes: ChangesSettings,
    jobs: JobsSettings,
    /// Keys set under a renamed section's old name (`sweep.*`), each as a
    /// line to warn with at start.
    #[serde(skip)]
    pub renamed: Vec<String>,
}

impl Settings {
    pub fn job(&self, kind: Kind) -> &JobSettings {
        let j = &self.jobs;
        match kind {
            Kind::ExpiredOrders => &j.expired_orders,
            Kind::PaidSeats => &j.paid_seats,
            Kind::MissingHashes => &j.missing_hashes,
            Kind::OrphanLocks => &j.orphan_locks,
            Kind::SoldOrphans => &j.sold_orphans,
        }
    }

    pub fn job_mut(&mut self, kind: Kind) -> &mut JobSettings {
        let j = &mut self.jobs;
        match kind {
            Kind::ExpiredOrders => &mut j.expired_orders,
            Kind::PaidSeats => &mut j.paid_seats,
            Kind::MissingHashes => &mut j.missing_hashes,
            Kind::OrphanLocks => &mut j.orphan_locks,
            Kind::SoldOrphans => &mut j.sold_orphans,
        }
    }

    /// The enabled jobs, in the contract's order: what the daemon runs,
    /// exports series for and checks changes with.
    pub fn enabled_jobs(&self) -> Vec<Kind> {
        Kind::ALL
            .into_iter()
            .filter(|k| self.job(*k).enabled)
            .collect()
    }

    /// The enabled seat jobs: the pass's jobs.
    pub fn pass_jobs(&self) -> Vec<Kind> {
        Kind::SEAT_JOBS
            .into_iter()
            .filter(|k| self.job(*k).enabled)
            .collect()
    }

    /// The job that counts and logs bad data in the daemon, whatever it
    /// runs (so one bad value is always counted under one job): the first
    /// enabled seat job, else the first enabled job.
    pub fn bad_data_reporter(&self) -> Option<Kind> {
        let enabled = self.enabled_jobs();
        let seat = enabled.iter().copied().find(|k| k.is_seat_job());
        seat.or_else(|| enabled.first().copied())
    }

    /// The schedule a job runs on in the daemon: its own for
    /// `expired_orders`, the shared pass's for the seat jobs.
    pub fn schedule(&self, kind: Kind) -> &str {
        match (kind, &self.job(kind).schedule) {
            (Kind::ExpiredOrders, Some(own)) => own,
            _ => &self.pass.schedule,
        }
    }

    /// Sets `expired_orders`' schedule, or the pass's for a seat job (tests).
    pub fn set_schedule(&mut self, kind: Kind, schedule: &str) {
        match kind {
            Kind::ExpiredOrders => self.jobs.expired_orders.schedule = Some(schedule.into()),
            _ => {
                self.pass.schedule = schedule.into();
                self.pass.while_uncovered = None;
            }
        }
    }

    /// This replica's share of the showtimes.
    pub fn shard(&self) -> Shard {
        Shard {
            total: self.sharding.total,
            index: self.sharding.index as u32,
        }
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
        let env: Vec<(String, String)> = env.into_iter().collect();
        let hostname = host_name(&env);
        Self::from_sources(file, env, hostname.as_deref())
    }

    /// Settings from these sources and this host name. Of the machine it
    /// reads only the TLS files the settings name (they must parse as PEM).
    pub fn from_sources(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        hostname: Option<&str>,
    ) -> Result<Settings, ConfigError> {
        let (merged, renamed) = sources::merge(file, env)?;
        let mut settings: Settings = merged
            .try_deserialize()
            .map_err(|e| ConfigError::new(sources::error_key(&e), e.to_string()))?;
        settings.renamed = renamed;
        settings.validated(hostname)?.validated_tls_files()
    }
}

/// The host name: `HOSTNAME` (set in every Kubernetes pod), else /etc/hostname.
fn host_name(env: &[(String, String)]) -> Option<String> {
    env.iter()
        .find(|(k, _)| k == "HOSTNAME")
        .map(|(_, v)| v.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
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
        let loaded = Settings::load_with_env(Some(&f.0), env(vars));
        std::fs::remove_file(&f.0).unwrap();
        loaded
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
            ("[pass]\nschedule = \"* * * * *\"\n", "pass.schedule"),
            (
                "[jobs.expired_orders]\nschedule = \"0 0 25 * * *\"\n",
                "jobs.expired_orders.schedule",
            ),
            ("[pass]\nhashes_per_batch = 0\n", "pass.hashes_per_batch"),
            ("[pass]\npass_lease_ttl = \"10ms\"\n", "pass.pass_lease_ttl"),
            ("[pass]\npace = \"yes\"\n", "pass.pace"),
            (
                "[jobs.sold_orphans]\nbatch_size = -1\n",
                "jobs.sold_orphans.batch_size",
            ),
            ("[redis]\nurl = \"http://x\"\n", "redis.url"),
            (
                "[mysql]\nurl = \"mysql://root@db/x?ssl-mode=bogus\"\n",
                "mysql.url",
            ),
            ("[redis]\nurl = \"redis://db/notanumber\"\n", "redis.url"),
            ("[redis]\nkey_prefix = \"a{b\"\n", "redis.key_prefix"),
            ("[http]\nlisten = \"nowhere\"\n", "http.listen"),
            ("[log]\nformat = \"xml\"\n", "log.format"),
            (
                "[jobs.paid_seats]\nbatch_size = 1.5\n",
                "jobs.paid_seats.batch_size",
            ),
            ("[mysql]\nmax_connections = 1.5\n", "mysql.max_connections"),
            ("[http]\nadmin_token = 42\n", "http.admin_token"),
            (
                "[reconcile]\norphan_grace = \"100000000y\"\n",
                "reconcile.orphan_grace",
            ),
            ("[pass]\nschedule = \"0 0 0 30 2 *\"\n", "pass.schedule"),
            (
                "[reconcile]\nretry_base_delay = \"3s\"\nretry_max_delay = \"1s\"\n",
                "reconcile.retry_base_delay",
            ),
        ];
        for (text, key) in cases {
            let e = load_toml(text, &[]).unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
            // The project's words, never serde's.
            for serde_words in ["variant constructor", "enum "] {
                assert!(!e.reason.contains(serde_words), "{text}: {e}");
            }
        }
        let e = load_toml("[log]\nformat = \"yaml\"\n", &[]).unwrap_err();
        assert!(
            e.reason
                .contains("\"yaml\" is not a log format: use text or json"),
            "{e}"
        );
    }

    #[test]
    fn retired_keys_name_their_replacement() {
        let e = load_toml("[pass]\nlease_ttl = \"15s\"\n", &[]).unwrap_err();
        assert_eq!(e.key, "pass.lease_ttl");
        assert!(e.reason.contains("pass.pass_lease_ttl"), "{e}");
    }

    #[test]
    fn a_seat_jobs_former_schedule_is_read_as_the_pass_schedule_with_a_warning() {
        let s = load_toml("[jobs.paid_seats]\nschedule = \"10 * * * * *\"\n", &[]).unwrap();
        assert_eq!(s.pass.schedule, "10 * * * * *");
        assert_eq!(
            s.renamed,
            [
                "jobs.paid_seats.schedule is now pass.schedule; the old name is read until 0.3: the seat jobs share one pass"
            ]
        );
        // Several, agreeing: one schedule, a warning for each.
        let agree = "[jobs.paid_seats]\nschedule = \"*/5 * * * * *\"\n[jobs.sold_orphans]\nschedule = \"*/5 * * * * *\"\n";
        let s = load_toml(agree, &[]).unwrap();
        assert_eq!(s.pass.schedule, "*/5 * * * * *");
        assert_eq!(s.renamed.len(), 2, "{:?}", s.renamed);
        // Disagreeing: no schedule an operator set is dropped in silence.
        let apart = "[jobs.paid_seats]\nschedule = \"*/5 * * * * *\"\n[jobs.orphan_locks]\nschedule = \"0 * * * * *\"\n";
        let e = load_toml(apart, &[]).unwrap_err();
        assert_eq!(e.key, "jobs.orphan_locks.schedule");
        assert!(
            e.reason.contains("jobs.paid_seats.schedule")
                && e.reason.contains("set pass.schedule alone"),
            "{e}"
        );
        // Beside the new name: an error naming both.
        let both = "[pass]\nschedule = \"0 * * * * *\"\n[jobs.missing_hashes]\nschedule = \"0 * * * * *\"\n";
        let e = load_toml(both, &[]).unwrap_err();
        assert_eq!(e.key, "jobs.missing_hashes.schedule");
        assert!(e.reason.contains("pass.schedule"), "{e}");
        // The environment likewise.
        let vars = [("SEATFLOW__JOBS__ORPHAN_LOCKS__SCHEDULE", "0 * * * * *")];
        let s = Settings::load_with_env(None, env(&vars)).unwrap();
        assert_eq!(s.pass.schedule, "0 * * * * *");
        assert_eq!(s.renamed.len(), 1, "{:?}", s.renamed);
        let apart = [
            ("SEATFLOW__JOBS__ORPHAN_LOCKS__SCHEDULE", "0 * * * * *"),
            ("SEATFLOW__JOBS__PAID_SEATS__SCHEDULE", "30 * * * * *"),
        ];
        assert!(Settings::load_with_env(None, env(&apart)).is_err());
        let both = [
            ("SEATFLOW__JOBS__ORPHAN_LOCKS__SCHEDULE", "0 * * * * *"),
            ("SEATFLOW__PASS__SCHEDULE", "0 * * * * *"),
        ];
        let e = Settings::load_with_env(None, env(&both)).unwrap_err();
        assert_eq!(e.key, "jobs.orphan_locks.schedule");
        // A bad value under the old name is named by its new one.
        let e = load_toml("[jobs.sold_orphans]\nschedule = \"* * * * *\"\n", &[]).unwrap_err();
        assert_eq!(e.key, "pass.schedule");
        // expired-orders keeps a schedule of its own: no warning.
        let s = load_toml("[jobs.expired_orders]\nschedule = \"7 * * * * *\"\n", &[]).unwrap();
        assert!(s.renamed.is_empty());
    }

    #[test]
    fn the_former_sweep_section_is_read_as_pass_with_a_warning() {
        let s = load_toml("[sweep]\nschedule = \"*/5 * * * * *\"\npace = false\n", &[]).unwrap();
        assert_eq!(s.pass.schedule, "*/5 * * * * *");
        assert!(!s.pass.pace);
        assert_eq!(s.renamed.len(), 2, "{:?}", s.renamed);
        assert!(s.renamed[0].contains("sweep.") && s.renamed[0].contains("is now pass."));
        let vars = [("SEATFLOW__SWEEP__MAX_HASHES_PER_SECOND", "700")];
        let s = Settings::load_with_env(None, env(&vars)).unwrap();
        assert_eq!(s.pass.max_hashes_per_second, 700);
        assert_eq!(
            s.renamed,
            [
                "sweep.max_hashes_per_second is now pass.max_hashes_per_second; the old name is read until 0.3: the section holds the pass's settings (a sweep is what a pass reads of the showtimes)"
            ]
        );
        // Under both names: an error naming both, in a file or the environment.
        let e = load_toml("[sweep]\npace = false\n[pass]\npace = true\n", &[]).unwrap_err();
        assert_eq!(e.key, "sweep.pace");
        assert!(e.reason.contains("pass.pace"), "{e}");
        let both = [
            ("SEATFLOW__SWEEP__PACE", "false"),
            ("SEATFLOW__PASS__PACE", "true"),
        ];
        let e = Settings::load_with_env(None, env(&both)).unwrap_err();
        assert_eq!(e.key, "sweep.pace");
        // A bad value under the old name is named by its new one.
        let e = load_toml("[sweep]\nschedule = \"* * * * *\"\n", &[]).unwrap_err();
        assert_eq!(e.key, "pass.schedule");
        // The new name alone warns of nothing.
        let s = load_toml("[pass]\npace = false\n", &[]).unwrap();
        assert!(s.renamed.is_empty());
    }

    #[test]
    fn seat_jobs_run_on_the_pass_schedule() {
        let s = load_toml(
            "[pass]\nschedule = \"*/5 * * * * *\"\n[jobs.expired_orders]\nschedule = \"7 * * * * *\"\n",
            &[],
        )
        .unwrap();
        for k in Kind::SEAT_JOBS {
            assert_eq!(s.schedule(k), "*/5 * * * * *");
        }
        assert_eq!(s.schedule(Kind::ExpiredOrders), "7 * * * * *");
        assert!(s.pass.pace, "pacing is on by default");
    }

    #[test]
    fn environment_strings_stay_strings() {
        let s = Settings::load_with_env(
            None,
            env(&[
                ("SEATFLOW__HTTP__ADMIN_TOKEN", "00042"),
                ("SEATFLOW__REDIS__KEY_PREFIX", "1e3"),
                ("SEATFLOW__RECONCILE__INSTANCE", "007"),
                ("SEATFLOW__JOBS__PAID_SEATS__BATCH_SIZE", "0009"),
                ("SEATFLOW__REDIS__CLUSTER_URLS", "redis://a:1, redis://b:2"),
            ]),
        )
        .unwrap();
        assert_eq!(s.http.admin_token.expose(), "00042");
        assert_eq!(s.redis.key_prefix, "1e3");
        assert_eq!(s.reconcile.instance, "007");
        assert_eq!(s.job(Kind::PaidSeats).batch_size, 9);
        assert_eq!(s.redis.cluster_urls.len(), 2);
        assert!(!format!("{s:?}").contains("00042"));
    }

    #[test]
    fn the_host_name_fills_instance_and_shard() {
        let s = Settings::from_sources(
            None,
            env(&[
                ("SEATFLOW__SHARDING__TOTAL", "3"),
                ("SEATFLOW__SHARDING__INDEX", "-1"),
            ]),
            Some("seatflow-reconciler-2"),
        )
        .unwrap();
        assert_eq!(s.shard(), Shard { total: 3, index: 2 });
        assert_eq!(s.reconcile.instance, "seatflow-reconciler-2");
    }

    /// The audit keeps an instance name whole or not at all (rule 17): a
    /// name longer than its column is a configuration error naming the key,
    /// whether given or the host's.
    #[test]
    fn an_instance_name_must_fit_the_audit() {
        let long = "r".repeat(129);
        let given = Settings::from_sources(
            None,
            env(&[("SEATFLOW__RECONCILE__INSTANCE", long.as_str())]),
            None,
        );
        let e = given.expect_err("refused").to_string();
        assert!(e.contains("reconcile.instance"), "{e}");
        let host = Settings::from_sources(None, env(&[]), Some(long.as_str()));
        assert!(host.is_err());
        let fits = "é".repeat(128);
        assert!(
            Settings::from_sources(None, env(&[]), Some(fits.as_str())).is_ok(),
            "characters, not bytes"
        );
    }

    #[test]
    fn the_auto_sweep_is_a_minute_and_twenty_with_both_change_sources() {
        let plain = load_toml("", &[]).unwrap();
        assert_eq!(plain.pass.schedule, MINUTE_SWEEP);
        assert_eq!(plain.pass.while_uncovered, None);
        let binlog = "[changes]\nmysql_binlog = true\n";
        let both = load_toml(binlog, &[]).unwrap();
        assert_eq!(both.pass.schedule, COVERED_SWEEP);
        assert_eq!(both.pass.while_uncovered, Some(UNCOVERED_PASS_EVERY));
        // One source alone: the sweep is still what finds the other's drift.
        let no_events = load_toml(&format!("{binlog}redis_events = \"off\"\n"), &[]).unwrap();
        assert_eq!(no_events.pass.schedule, MINUTE_SWEEP);
        // The operator's schedule wins, and is not tightened.
        let mine = load_toml(
            &format!("{binlog}[pass]\nschedule = \"0 */5 * * * *\"\n"),
            &[],
        )
        .unwrap();
        assert_eq!(mine.pass.schedule, "0 */5 * * * *");
        assert_eq!(mine.pass.while_uncovered, None);
    }

    #[test]
    fn the_binlog_is_off_by_default_and_its_server_id_comes_from_the_instance() {
        let of = |instance: &str| {
            load_toml(&format!("[reconcile]\ninstance = \"{instance}\"\n"), &[]).unwrap()
        };
        let (a, b) = (of("reconciler-0"), of("reconciler-1"));
        assert!(!a.changes.mysql_binlog);
        assert_eq!(a.changes.mysql_settle, Duration::from_secs(3));
        assert_ne!(a.changes.mysql_server_id, 0);
        assert_ne!(a.changes.mysql_server_id, b.changes.mysql_server_id);
        assert_eq!(
            a.changes.mysql_server_id,
            of("reconciler-0").changes.mysql_server_id
        );
        let set = load_toml(
            "[changes]\nmysql_binlog = true\nmysql_server_id = 4242\n",
            &[],
        )
        .unwrap();
        assert!(set.changes.mysql_binlog);
        assert_eq!(set.changes.mysql_server_id, 4242);
        let e = load_toml("[changes]\nmysql_settle = \"2years\"\n", &[]).unwrap_err();
        assert_eq!(e.key, "changes.mysql_settle");
    }
}
