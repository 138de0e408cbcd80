//! Rules the types alone cannot say: ranges, URL schemes, the key prefix,
//! cron expressions, the shard and the instance name. Pure: what it needs of
//! the machine (the host name) is passed in.

use std::time::Duration;

use super::secret::{password_of, with_password};
use super::{
    COVERED_SWEEP, ConfigError, JobSettings, MINUTE_SWEEP, PassSettings, SecretUrl, Settings,
    UNCOVERED_PASS_EVERY, redact_url,
};
use crate::model::Kind;
use crate::schedule;

impl Settings {
    /// Checks every rule and fills what defaults to the host: the instance
    /// name and, with `sharding.index = -1`, the StatefulSet ordinal.
    pub(super) fn validated(mut self, hostname: Option<&str>) -> Result<Settings, ConfigError> {
        for (key, d) in self.durations() {
            at_most_a_year(key, d)?;
        }
        validate_url("mysql.url", &self.mysql.url, &["mysql", "mariadb"])?;
        self.merge_passwords()?;
        // Its parameters (`ssl-mode`, `charset`, …) as the driver reads them:
        // a value it refuses is a configuration error, found here rather
        // than at the first connection.
        mysql_driver_reads("mysql.url", &self.mysql.url)?;
        if !self.mysql.replica_url.is_empty() {
            validate_url(
                "mysql.replica_url",
                &self.mysql.replica_url,
                &["mysql", "mariadb"],
            )?;
            mysql_driver_reads("mysql.replica_url", &self.mysql.replica_url)?;
        }
        if self.mysql.max_replica_lag < Duration::from_secs(1) {
            return Err(ConfigError::new(
                "mysql.max_replica_lag",
                "must be at least 1s (a replica reports its lag in whole seconds)",
            ));
        }
        in_range("mysql.max_connections", self.mysql.max_connections, 1, 256)?;
        positive("mysql.connect_timeout", self.mysql.connect_timeout)?;
        if self.mysql.lock_wait_timeout < Duration::from_secs(1) {
            return Err(ConfigError::new(
                "mysql.lock_wait_timeout",
                "must be at least 1s (MySQL counts it in whole seconds)",
            ));
        }

        validate_url("redis.url", &self.redis.url, &["redis", "rediss"])?;
        for url in &self.redis.cluster_urls {
            validate_url("redis.cluster_urls", url, &["redis", "rediss"])?;
        }
        for (key, url) in std::iter::once(("redis.url", &self.redis.url)).chain(
            self.redis
                .cluster_urls
                .iter()
                .map(|u| ("redis.cluster_urls", u)),
        ) {
            redis::IntoConnectionInfo::into_connection_info(url.expose())
                .map_err(|e| ConfigError::new(key, driver_words(&e.to_string())))?;
        }
        if self.redis.key_prefix.contains(['{', '}']) || self.redis.key_prefix.is_empty() {
            return Err(ConfigError::new(
                "redis.key_prefix",
                "must be non-empty and must not contain braces (they form the hash tag)",
            ));
        }
        positive("redis.response_timeout", self.redis.response_timeout)?;

        let r = &mut self.reconcile;
        if r.lock_ttl < Duration::from_secs(1) {
            return Err(ConfigError::new(
                "reconcile.lock_ttl",
                "must be at least 1s",
            ));
        }
        in_range("reconcile.scan_chunk", r.scan_chunk, 1, 10_000)?;
        in_range("reconcile.retry_attempts", r.retry_attempts, 1, 20)?;
        if r.retry_base_delay > r.retry_max_delay {
            return Err(ConfigError::new(
                "reconcile.retry_base_delay",
                format!(
                    "{} is longer than reconcile.retry_max_delay = {}",
                    humantime::format_duration(r.retry_base_delay),
                    humantime::format_duration(r.retry_max_delay)
                ),
            ));
        }
        if r.instance.trim().is_empty() {
            r.instance = hostname
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .unwrap_or("seatflow-reconciler")
                .to_string();
        }
        // The audit's `instance` columns hold 128 characters; a longer name
        // would fail every audit row (never truncated: rule 17).
        let chars = self.reconcile.instance.chars().count();
        if chars > MAX_INSTANCE_CHARS {
            return Err(ConfigError::new(
                "reconcile.instance",
                format!(
                    "is {chars} characters long (the host name when unset); the audit keeps at most {MAX_INSTANCE_CHARS}"
                ),
            ));
        }
        if self.changes.mysql_server_id == 0 {
            self.changes.mysql_server_id = server_id_of(&self.reconcile.instance);
        }

        // Audit retention may well exceed a year (compliance); ten years at most.
        if self.audit.retention > 10 * MAX_DURATION {
            return Err(ConfigError::new(
                "audit.retention",
                "is longer than ten years",
            ));
        }
        in_range("audit.prune_batch", self.audit.prune_batch, 1, 100_000)?;
        positive("http.header_timeout", self.http.header_timeout)?;
        in_range("http.max_connections", self.http.max_connections, 1, 10_000)?;
        positive("daemon.shutdown_timeout", self.daemon.shutdown_timeout)?;
        self.sharding.index = shard_index(self.sharding.total, self.sharding.index, hostname)?;

        tracing_subscriber::EnvFilter::try_new(&self.log.level)
            .map_err(|e| ConfigError::new("log.level", format!("invalid filter: {e}")))?;

        for kind in Kind::ALL {
            validate_job(kind, self.job(kind))?;
        }
        let expired = self.schedule(Kind::ExpiredOrders);
        schedule::validate(expired)
            .map_err(|reason| ConfigError::new("jobs.expired_orders.schedule", reason))?;
        if self.pass.schedule.trim().eq_ignore_ascii_case("auto") {
            let both = self.changes.both_sources();
            self.pass.schedule = if both { COVERED_SWEEP } else { MINUTE_SWEEP }.into();
            self.pass.while_uncovered = both.then_some(UNCOVERED_PASS_EVERY);
        }
        self.pass.validated()?;
        in_range(
            "changes.queue_capacity",
            self.changes.queue_capacity,
            1,
            10_000_000,
        )?;
        in_range(
            "changes.max_checks_per_second",
            self.changes.max_checks_per_second,
            1,
            100_000,
        )?;
        Ok(self)
    }
}

/// The binlog reader's server id when `changes.mysql_server_id` is 0: a
/// `reconcile_run.instance` and `reconcile_fix.instance` are VARCHAR(128).
const MAX_INSTANCE_CHARS: usize = 128;

/// hash (FNV-1a) of the instance name, so that two reconcilers differ and
/// one keeps its id across restarts (its new dump ends its old one). Within
/// 1,000,000 ..= 4,294,967,295: never 0, above the small ids servers are
/// usually given.
pub fn server_id_of(instance: &str) -> u32 {
    let hash = instance.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    1_000_000 + hash % (u32::MAX - 1_000_000 + 1)
}

/// The longest duration any key takes: a year. Longer ones are mistakes, and
/// far longer ones overflow the clock arithmetic at run time.
const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

fn at_most_a_year(key: &str, d: Duration) -> Result<(), ConfigError> {
    if d > MAX_DURATION {
        Err(ConfigError::new(
            key,
            format!("{} is longer than a year", humantime::format_duration(d)),
        ))
    } else {
        Ok(())
    }
}

impl Settings {
    /// Every duration setting with its key.
    fn durations(&self) -> [(&'static str, Duration); 18] {
        let (m, r, c, d) = (&self.mysql, &self.redis, &self.reconcile, &self.daemon);
        [
            ("mysql.connect_timeout", m.connect_timeout),
            ("mysql.max_replica_lag", m.max_replica_lag),
            ("mysql.lock_wait_timeout", m.lock_wait_timeout),
            ("redis.response_timeout", r.response_timeout),
            ("reconcile.expired_order_buffer", c.expired_order_buffer),
            ("reconcile.orphan_grace", c.orphan_grace),
            ("reconcile.lock_ttl", c.lock_ttl),
            ("reconcile.retry_base_delay", c.retry_base_delay),
            ("reconcile.retry_max_delay", c.retry_max_delay),
            ("http.header_timeout", self.http.header_timeout),
            ("daemon.shutdown_timeout", d.shutdown_timeout),
            ("daemon.start_jitter", d.start_jitter),
            ("pass.soonest_window", self.pass.soonest_window),
            ("pass.pass_lease_ttl", self.pass.pass_lease_ttl),
            ("pass.takeover_after", self.pass.takeover_after),
            ("changes.min_interval", self.changes.min_interval),
            ("changes.event_settle", self.changes.event_settle),
            ("changes.mysql_settle", self.changes.mysql_settle),
        ]
    }
}

impl PassSettings {
    fn validated(&self) -> Result<(), ConfigError> {
        schedule::validate(&self.schedule)
            .map_err(|reason| ConfigError::new("pass.schedule", reason))?;
        in_range(
            "pass.max_hashes_per_second",
            self.max_hashes_per_second,
            0,
            1_000_000,
        )?;
        in_range("pass.hashes_per_batch", self.hashes_per_batch, 1, 10_000)?;
        if self.pass_lease_ttl < Duration::from_secs(1) {
            return Err(ConfigError::new(
                "pass.pass_lease_ttl",
                "must be at least 1s",
            ));
        }
        Ok(())
    }
}

fn validate_job(kind: Kind, job: &JobSettings) -> Result<(), ConfigError> {
    let key = |field: &str| format!("jobs.{}.{field}", kind.label());
    in_range(&key("batch_size"), job.batch_size, 1, 10_000_000)?;
    in_range(&key("scan_limit"), job.scan_limit, 1, 100_000_000)?;
    Ok(())
}

fn in_range<T: PartialOrd + std::fmt::Display>(
    key: &str,
    value: T,
    min: T,
    max: T,
) -> Result<(), ConfigError> {
    if value >= min && value <= max {
        Ok(())
    } else {
        Err(ConfigError::new(
            key,
            format!("{value} is out of range {min}..={max}"),
        ))
    }
}

fn positive(key: &str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() {
        Err(ConfigError::new(key, "must be greater than 0"))
    } else {
        Ok(())
    }
}

impl Settings {
    /// Sets `mysql.password` / `redis.password` (or their `_file`) into the
    /// URLs, percent-encoded. Reads the password files (mounted Secrets).
    fn merge_passwords(&mut self) -> Result<(), ConfigError> {
        let m = &mut self.mysql;
        if let Some(pw) = password_of("mysql", &m.password, &m.password_file)? {
            m.url = with_password(&m.url, &pw).map_err(|e| ConfigError::new("mysql.url", e))?;
            // The replica's own password, if its URL carries one, stays.
            if !m.replica_url.is_empty() && !has_password(&m.replica_url) {
                m.replica_url = with_password(&m.replica_url, &pw)
                    .map_err(|e| ConfigError::new("mysql.replica_url", e))?;
            }
        }
        let r = &mut self.redis;
        if let Some(pw) = password_of("redis", &r.password, &r.password_file)? {
            r.url = with_password(&r.url, &pw).map_err(|e| ConfigError::new("redis.url", e))?;
            for url in &mut r.cluster_urls {
                *url = with_password(url, &pw)
                    .map_err(|e| ConfigError::new("redis.cluster_urls", e))?;
            }
        }
        Ok(())
    }
}

/// Whether `url` carries a password of its own (an invalid URL: no, and
/// `validate_url` names it).
fn has_password(url: &SecretUrl) -> bool {
    url::Url::parse(url.expose()).is_ok_and(|u| u.password().is_some())
}

/// Whether the MySQL driver reads `url` (`key`): its parameters (`ssl-mode`,
/// `charset`, …) as the driver reads them.
fn mysql_driver_reads(key: &str, url: &SecretUrl) -> Result<(), ConfigError> {
    url.expose()
        .parse::<sqlx::mysql::MySqlConnectOptions>()
        .map(drop)
        .map_err(|e| ConfigError::new(key, driver_words(&e.to_string())))
}

/// A driver's refusal of a URL, without its "error with configuration:"
/// preamble (the key names what is wrong; the URL is never repeated).
fn driver_words(message: &str) -> String {
    let m = message.trim();
    m.strip_prefix("error with configuration: ")
        .unwrap_or(m)
        .to_string()
}

fn validate_url(key: &str, url: &SecretUrl, schemes: &[&str]) -> Result<(), ConfigError> {
    let raw = url.expose();
    let parsed = url::Url::parse(raw)
        .map_err(|e| ConfigError::new(key, format!("invalid URL {}: {e}", redact_url(raw))))?;
    if !schemes.contains(&parsed.scheme()) {
        return Err(ConfigError::new(
            key,
            format!("scheme must be one of {}", schemes.join(", ")),
        ));
    }
    Ok(())
}

/// Validates the shard index; -1 takes the StatefulSet ordinal from the host name.
fn shard_index(total: u32, index: i64, hostname: Option<&str>) -> Result<i64, ConfigError> {
    in_range("sharding.total", total, 1, 4096)?;
    let total = i64::from(total);
    if index != -1 {
        in_range("sharding.index", index, 0, total - 1)?;
        return Ok(index);
    }
    let ordinal = hostname
        .and_then(|h| h.trim().rsplit_once('-'))
        .and_then(|(_, n)| n.parse::<i64>().ok())
        .ok_or_else(|| {
            ConfigError::new(
                "sharding.index",
                format!("-1 needs a host name ending in -N (a StatefulSet pod), got {hostname:?}"),
            )
        })?;
    if ordinal >= total {
        return Err(ConfigError::new(
            "sharding.index",
            format!("the host name's ordinal {ordinal} is not below sharding.total = {total}"),
        ));
    }
    Ok(ordinal)
}

#[cfg(test)]
mod tests {
    use super::shard_index;

    #[test]
    fn shards_come_from_config_or_the_statefulset_ordinal() {
        assert_eq!(shard_index(3, 2, None).unwrap(), 2);
        assert_eq!(
            shard_index(3, -1, Some("seatflow-reconciler-1")).unwrap(),
            1
        );
        assert_eq!(shard_index(3, 3, None).unwrap_err().key, "sharding.index");
        assert_eq!(
            shard_index(2, -1, Some("seatflow-reconciler-2"))
                .unwrap_err()
                .key,
            "sharding.index"
        );
        assert_eq!(
            shard_index(2, -1, Some("laptop")).unwrap_err().key,
            "sharding.index"
        );
        assert_eq!(shard_index(0, 0, None).unwrap_err().key, "sharding.total");
    }

    fn load(env: &[(&str, &str)]) -> Result<crate::config::Settings, crate::config::ConfigError> {
        crate::config::Settings::from_sources(
            None,
            env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            Some("test-host"),
        )
    }

    #[test]
    fn passwords_are_set_into_the_urls_percent_encoded() {
        let pw = "p@ss:w/rd%?#&";
        let s = load(&[
            ("SEATFLOW__MYSQL__URL", "mysql://app@db:3306/seatflow"),
            ("SEATFLOW__MYSQL__PASSWORD", pw),
            ("SEATFLOW__REDIS__URL", "redis://:@cache:6379"),
            (
                "SEATFLOW__REDIS__CLUSTER_URLS",
                "redis://a:6379,redis://b:6379",
            ),
            ("SEATFLOW__REDIS__PASSWORD", pw),
        ])
        .unwrap();
        let url = url::Url::parse(s.mysql.url.expose()).unwrap();
        assert_eq!(url.username(), "app");
        let decoded = |u: &url::Url| percent_decode(u.password().unwrap());
        assert_eq!(decoded(&url), pw);
        assert_eq!(url.host_str(), Some("db"));
        assert_eq!(url.path(), "/seatflow");
        for u in std::iter::once(&s.redis.url).chain(&s.redis.cluster_urls) {
            assert_eq!(decoded(&url::Url::parse(u.expose()).unwrap()), pw);
        }
        // Redacted everywhere: Debug of the settings, the URL's Display.
        let debug = format!("{s:?}");
        assert!(
            !debug.contains("p@ss") && !debug.contains("p%40ss"),
            "{debug}"
        );
        assert!(!s.mysql.url.to_string().contains("p%40ss"));
    }

    fn percent_decode(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' && i + 2 < b.len() {
                out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn password_files_are_read_and_conflicts_named() {
        let file = std::env::temp_dir().join(format!("sf-pw-{}", uuid::Uuid::new_v4()));
        std::fs::write(&file, "from-a-secret\n").unwrap();
        let path = file.to_str().unwrap();
        let s = load(&[("SEATFLOW__MYSQL__PASSWORD_FILE", path)]).unwrap();
        assert!(
            s.mysql.url.expose().contains(":from%2Da%2Dsecret@"),
            "trailing newline dropped"
        );
        let both = load(&[
            ("SEATFLOW__MYSQL__PASSWORD_FILE", path),
            ("SEATFLOW__MYSQL__PASSWORD", "x"),
        ]);
        std::fs::remove_file(&file).unwrap();
        assert_eq!(both.unwrap_err().key, "mysql.password");
        let missing = load(&[("SEATFLOW__REDIS__PASSWORD_FILE", "/nonexistent/pw")]);
        assert_eq!(missing.unwrap_err().key, "redis.password_file");
        let twice = load(&[
            ("SEATFLOW__MYSQL__URL", "mysql://app:old@db/seatflow"),
            ("SEATFLOW__MYSQL__PASSWORD", "new"),
        ]);
        assert_eq!(twice.unwrap_err().key, "mysql.url");
    }

    #[test]
    fn the_replica_is_off_by_default_and_takes_the_primarys_password_unless_it_has_its_own() {
        let s = load(&[]).unwrap();
        assert!(s.mysql.replica_url.is_empty());
        assert_eq!(s.mysql.max_replica_lag, std::time::Duration::from_secs(5));
        let s = load(&[
            ("SEATFLOW__MYSQL__URL", "mysql://app@db/seatflow"),
            ("SEATFLOW__MYSQL__REPLICA_URL", "mysql://app@db-ro/seatflow"),
            ("SEATFLOW__MYSQL__PASSWORD", "s3cret"),
        ])
        .unwrap();
        assert_eq!(
            s.mysql.replica_url.expose(),
            "mysql://app:s3cret@db-ro/seatflow"
        );
        assert!(!format!("{s:?}").contains("s3cret"));
        let s = load(&[
            (
                "SEATFLOW__MYSQL__REPLICA_URL",
                "mysql://ro:own@db-ro/seatflow",
            ),
            ("SEATFLOW__MYSQL__PASSWORD", "s3cret"),
        ])
        .unwrap();
        assert_eq!(
            s.mysql.replica_url.expose(),
            "mysql://ro:own@db-ro/seatflow"
        );
    }

    #[test]
    fn a_bad_replica_setting_is_named() {
        for (key, value, named) in [
            (
                "SEATFLOW__MYSQL__REPLICA_URL",
                "postgres://db/x",
                "mysql.replica_url",
            ),
            (
                "SEATFLOW__MYSQL__REPLICA_URL",
                "mysql://db/x?ssl-mode=sometimes",
                "mysql.replica_url",
            ),
            (
                "SEATFLOW__MYSQL__MAX_REPLICA_LAG",
                "500ms",
                "mysql.max_replica_lag",
            ),
            (
                "SEATFLOW__MYSQL__MAX_REPLICA_LAG",
                "soon",
                "mysql.max_replica_lag",
            ),
        ] {
            let e = load(&[(key, value)]).unwrap_err();
            assert_eq!(e.key, named, "{value}: {e}");
        }
    }
}
