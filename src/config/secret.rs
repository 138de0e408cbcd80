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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn secrets_do_not_print() {
        let t = Secret::new("hunter2");
        assert_eq!(format!("{t:?}"), "***");
        assert_eq!(format!("{:?}", Secret::default()), "\"\"");
        assert_eq!(t.expose(), "hunter2");
    }
}
