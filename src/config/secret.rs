//! Values that must never be printed (safety rule 11): `Debug` and `Display`
//! show them redacted; only `expose()` gives the real value, for connecting.

use std::fmt;

use serde::Deserialize;

/// A URL that may carry a password: shown with the password as `***`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SecretUrl(String);

impl SecretUrl {
    pub fn new(url: impl Into<String>) -> Self {
        SecretUrl(url.into())
    }

    /// The real URL, for connecting only. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// An empty URL is an unset one (`mysql.replica_url`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
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

/// A secret string (the admin token): shown as `***`, or `""` when unset so
/// that `check-config` still tells whether one is configured.
#[derive(Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The real value, for comparing only. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "\"\"" } else { "***" })
    }
}

/// Query parameters whose values are printed: the drivers' own that carry
/// no secret (a mode, a file's path, a character set, a database number).
/// Any other parameter's value is printed as `***`: a password may come as
/// `?password=`, as `?pass=` (redis-rs reads it for a Unix socket), or under
/// a name no list here foresees.
const PRINTED_PARAMETERS: &[&str] = &[
    "ssl-mode",
    "sslmode",
    "ssl-ca",
    "sslca",
    "ssl-cert",
    "sslcert",
    "ssl-key",
    "sslkey",
    "charset",
    "collation",
    "statement-cache-capacity",
    "socket",
    "timezone",
    "time-zone",
    "db",
    "protocol",
    "user",
];

/// A URL as it may be printed (rule 11): its password and the value of
/// every parameter that may hold a secret (see [`PRINTED_PARAMETERS`]) as
/// `***`. Text that does not parse as a URL keeps only its scheme and
/// what follows the credentials, up to its parameters.
pub fn redact_url(raw: &str) -> String {
    let Ok(mut u) = url::Url::parse(raw) else {
        let head = raw.split_once('?').map_or(raw, |(head, _)| head);
        let head = match (head.find("://"), head.rfind('@')) {
            (Some(s), Some(at)) if at > s => format!("{}://***{}", &head[..s], &head[at..]),
            _ => head.to_string(),
        };
        return if head.len() < raw.len() {
            format!("{head}?***")
        } else {
            head
        };
    };
    if u.password().is_some() {
        let _ = u.set_password(Some("***"));
    }
    if let Some(query) = u.query() {
        // Piece by piece, as written: only a value to hide changes.
        let redacted: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if !printed(name) => format!("{name}=***"),
                _ => pair.to_string(),
            })
            .collect();
        u.set_query(Some(&redacted.join("&")));
    }
    u.to_string()
}

/// Whether a parameter's value may be printed (`name` as written in the URL).
fn printed(name: &str) -> bool {
    let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
    PRINTED_PARAMETERS.contains(&name.to_ascii_lowercase().as_str())
}

/// `url` with `password` as its password, percent-encoded (any character
/// works); an error when the URL has a password already.
pub fn with_password(url: &SecretUrl, password: &str) -> Result<SecretUrl, String> {
    let mut u = url::Url::parse(url.expose())
        .map_err(|e| format!("cannot add a password to an invalid URL: {e}"))?;
    if u.password().is_some() {
        return Err("the URL carries a password already: give it in one place".into());
    }
    // Url::set_password leaves `%` as it is (it takes pre-encoded input),
    // so a password like `50%off` would be read back as something else:
    // encode every byte that is not alphanumeric ourselves.
    let encoded =
        percent_encoding::utf8_percent_encode(password, percent_encoding::NON_ALPHANUMERIC)
            .to_string();
    u.set_password(Some(&encoded))
        .map_err(|()| "this URL cannot carry a password".to_string())?;
    Ok(SecretUrl::new(u.to_string()))
}

/// The password of `section` (`mysql`, `redis`): `password`, or the content
/// of `password_file` (one trailing newline dropped), or none. Errors name
/// the key.
pub fn password_of(
    section: &str,
    password: &Secret,
    password_file: &str,
) -> Result<Option<String>, super::ConfigError> {
    match (password.is_empty(), password_file.is_empty()) {
        (true, true) => Ok(None),
        (false, true) => Ok(Some(password.expose().to_string())),
        (true, false) => {
            let text = std::fs::read_to_string(password_file).map_err(|e| {
                super::ConfigError::new(
                    format!("{section}.password_file"),
                    format!("cannot read {password_file}: {e}"),
                )
            })?;
            let text = text
                .strip_suffix('\n')
                .map(|t| t.strip_suffix('\r').unwrap_or(t))
                .unwrap_or(&text);
            Ok(Some(text.to_string()))
        }
        (false, false) => Err(super::ConfigError::new(
            format!("{section}.password"),
            format!("set {section}.password or {section}.password_file, not both"),
        )),
    }
}

/// Keys whose values are secrets: shown as `***` when set.
const SECRET_KEYS: &[&str] = &["admin_token", "password"];
/// Keys holding connection URLs (one or a list): their passwords redacted.
const URL_KEYS: &[&str] = &["url", "cluster_urls", "replica_url"];

/// The effective configuration (defaults, then `file`, then the
/// `SEATFLOW__…` variables of `env`) as TOML, every key present, secrets
/// redacted: what `check-config` prints.
pub fn effective_toml(
    file: Option<&std::path::Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<String, super::ConfigError> {
    let (merged, _) = super::sources::merge(file, env)?;
    let mut table: toml::Table = merged
        .try_deserialize()
        .map_err(|e| super::ConfigError::new(super::sources::error_key(&e), e.to_string()))?;
    // Environment values arrive as strings: shown with their default's type
    // (the settings parsed them that way, or loading would have failed).
    if let Ok(defaults) = super::sources::DEFAULT_TOML.parse::<toml::Table>() {
        typed_like(&mut table, &defaults);
    }
    redact_table(&mut table);
    toml::to_string_pretty(&table).map_err(|e| super::ConfigError::new("", e.to_string()))
}

fn typed_like(table: &mut toml::Table, defaults: &toml::Table) {
    for (key, value) in table.iter_mut() {
        let Some(default) = defaults.get(key) else {
            continue;
        };
        let typed = match (&*value, default) {
            (toml::Value::Table(_), toml::Value::Table(d)) => {
                if let toml::Value::Table(t) = value {
                    typed_like(t, d);
                }
                None
            }
            (toml::Value::String(s), toml::Value::Integer(_)) => {
                s.trim().parse().ok().map(toml::Value::Integer)
            }
            (toml::Value::String(s), toml::Value::Float(_)) => {
                s.trim().parse().ok().map(toml::Value::Float)
            }
            (toml::Value::String(s), toml::Value::Boolean(_)) => {
                s.trim().parse().ok().map(toml::Value::Boolean)
            }
            _ => None,
        };
        if let Some(v) = typed {
            *value = v;
        }
    }
}

fn redact_table(table: &mut toml::Table) {
    for (key, value) in table.iter_mut() {
        match value {
            toml::Value::Table(t) => redact_table(t),
            toml::Value::String(s) if SECRET_KEYS.contains(&key.as_str()) && !s.is_empty() => {
                *s = "***".into();
            }
            toml::Value::String(s) if URL_KEYS.contains(&key.as_str()) => *s = redact_url(s),
            toml::Value::Array(items) if URL_KEYS.contains(&key.as_str()) => {
                for item in items {
                    if let toml::Value::String(s) = item {
                        *s = redact_url(s);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_configuration_is_toml_with_secrets_redacted() {
        let env = [
            (
                "SEATFLOW__MYSQL__URL".to_string(),
                "mysql://app:hunter2@db:3306/seatflow".to_string(),
            ),
            (
                "SEATFLOW__HTTP__ADMIN_TOKEN".to_string(),
                "tok-secret".to_string(),
            ),
            (
                "SEATFLOW__REDIS__CLUSTER_URLS".to_string(),
                "redis://:pw1@a:6379,redis://b:6379".to_string(),
            ),
            (
                "SEATFLOW__JOBS__PAID_SEATS__BATCH_SIZE".to_string(),
                "7".to_string(),
            ),
        ];
        let text = effective_toml(None, env).unwrap();
        assert!(
            !text.contains("hunter2") && !text.contains("tok-secret") && !text.contains("pw1"),
            "{text}"
        );
        let t: toml::Table = text.parse().expect("valid TOML");
        assert_eq!(
            t["mysql"]["url"].as_str(),
            Some("mysql://app:***@db:3306/seatflow")
        );
        assert_eq!(t["http"]["admin_token"].as_str(), Some("***"));
        assert_eq!(t["jobs"]["paid_seats"]["batch_size"].as_integer(), Some(7));
        assert!(
            t["jobs"]["sold_orphans"]["batch_size"].is_integer()
                && t["jobs"]["expired_orders"]["schedule"].is_str()
                && t["pass"]["schedule"].is_str(),
            "every job, by name, and the pass: {text}"
        );
        assert!(
            t["reconcile"]["orphan_grace"].is_str(),
            "durations as written: {text}"
        );
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

    /// A secret in a parameter is a secret too, whatever its name; the
    /// drivers' own harmless parameters stay readable.
    #[test]
    fn secrets_in_parameters_are_redacted() {
        assert_eq!(
            redact_url("mysql://app@db:3306/seatflow?password=hunter2&ssl-mode=REQUIRED"),
            "mysql://app@db:3306/seatflow?password=***&ssl-mode=REQUIRED"
        );
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?db=2&pass=s3cret"),
            "redis+unix:///run/redis.sock?db=2&pass=***"
        );
        for raw in [
            "mysql://db/x?PASSWORD=hunter2",
            "mysql://db/x?api_token=hunter2",
            "redis://h:6379/?auth=hunter2&protocol=resp3",
            "mysql://db/x?ssl-ca=/ca.pem&anything=hunter2",
            "bad://us er:pw@x?password=hunter2",
            "not a url ?password=hunter2",
        ] {
            assert!(
                !redact_url(raw).contains("hunter2"),
                "{raw}: {}",
                redact_url(raw)
            );
        }
        assert!(redact_url("mysql://db/x?ssl-ca=/etc/ca.pem").contains("/etc/ca.pem"));
    }

    #[test]
    fn secrets_do_not_print() {
        let t = Secret::new("hunter2");
        assert_eq!(format!("{t:?}"), "***");
        assert_eq!(format!("{:?}", Secret::default()), "\"\"");
        assert_eq!(t.expose(), "hunter2");
    }
}
