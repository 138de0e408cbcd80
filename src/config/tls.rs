//! TLS settings of both stores: MySQL's verification mode, and the PEM
//! files (CA bundle, client certificate and key) that are checked when the
//! configuration loads, each error naming its key. Also the watch on those
//! files that lets the daemon restart when a mounted Secret rotates them.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

use super::{ConfigError, MysqlSettings, RedisSettings, Settings};

/// `mysql.tls_mode`, spelled as in MySQL's `--ssl-mode`, in lower case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(try_from = "String")]
pub enum MysqlTlsMode {
    /// `""`: `verify_identity` when a `mysql.tls_*_file` is set; otherwise
    /// whatever `mysql.url` says (`?ssl-mode=`), by default `preferred`.
    #[default]
    Unset,
    Disabled,
    Preferred,
    Required,
    VerifyCa,
    VerifyIdentity,
}

impl MysqlTlsMode {
    const NAMES: [(&'static str, MysqlTlsMode); 6] = [
        ("", MysqlTlsMode::Unset),
        ("disabled", MysqlTlsMode::Disabled),
        ("preferred", MysqlTlsMode::Preferred),
        ("required", MysqlTlsMode::Required),
        ("verify_ca", MysqlTlsMode::VerifyCa),
        ("verify_identity", MysqlTlsMode::VerifyIdentity),
    ];
}

impl TryFrom<String> for MysqlTlsMode {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        Self::NAMES
            .iter()
            .find(|(name, _)| *name == s)
            .map(|(_, mode)| *mode)
            .ok_or_else(|| {
                format!(
                    "{s:?} is not a TLS mode: use \"\" (the default), disabled, preferred, \
                     required, verify_ca or verify_identity"
                )
            })
    }
}

/// An empty string is an unset file.
fn file(value: &str) -> Option<&Path> {
    (!value.is_empty()).then(|| Path::new(value))
}

impl MysqlSettings {
    pub fn tls_ca(&self) -> Option<&Path> {
        file(&self.tls_ca_file)
    }

    pub fn tls_cert(&self) -> Option<&Path> {
        file(&self.tls_cert_file)
    }

    pub fn tls_key(&self) -> Option<&Path> {
        file(&self.tls_key_file)
    }

    /// The mode in force: an unset mode with a TLS file is `verify_identity`.
    pub fn effective_tls_mode(&self) -> MysqlTlsMode {
        match self.tls_mode {
            MysqlTlsMode::Unset if self.tls_ca().is_some() || self.tls_cert().is_some() => {
                MysqlTlsMode::VerifyIdentity
            }
            mode => mode,
        }
    }
}

impl RedisSettings {
    pub fn tls_ca(&self) -> Option<&Path> {
        file(&self.tls_ca_file)
    }

    pub fn tls_cert(&self) -> Option<&Path> {
        file(&self.tls_cert_file)
    }

    pub fn tls_key(&self) -> Option<&Path> {
        file(&self.tls_key_file)
    }
}

impl Settings {
    /// Every TLS file the settings name (for the daemon's watch).
    pub fn tls_files(&self) -> Vec<PathBuf> {
        let (m, r) = (&self.mysql, &self.redis);
        [m.tls_ca(), m.tls_cert(), m.tls_key()]
            .into_iter()
            .chain([r.tls_ca(), r.tls_cert(), r.tls_key()])
            .flatten()
            .map(Path::to_path_buf)
            .collect()
    }

    /// Every TLS file exists and parses; a client certificate comes with
    /// its key and matches it; TLS files are not set for a plain-text
    /// connection.
    pub(super) fn validated_tls_files(self) -> Result<Settings, ConfigError> {
        let m = &self.mysql;
        validate_files("mysql", m.tls_ca(), m.tls_cert(), m.tls_key())?;
        let has_files = m.tls_ca().is_some() || m.tls_cert().is_some();
        if has_files && m.tls_mode == MysqlTlsMode::Disabled {
            return Err(ConfigError::new(
                "mysql.tls_mode",
                "is disabled, but mysql.tls_ca_file or mysql.tls_cert_file is set: \
                 unset the files or choose a mode that uses TLS",
            ));
        }

        let r = &self.redis;
        validate_files("redis", r.tls_ca(), r.tls_cert(), r.tls_key())?;
        if r.tls_ca().is_some() || r.tls_cert().is_some() {
            let plain = |url: &super::SecretUrl| !url.expose().starts_with("rediss://");
            let which = if r.cluster_urls.is_empty() {
                plain(&r.url).then_some("redis.url")
            } else {
                r.cluster_urls
                    .iter()
                    .any(plain)
                    .then_some("redis.cluster_urls")
            };
            if let Some(key) = which {
                return Err(ConfigError::new(
                    key,
                    "must use rediss:// (TLS) when redis.tls_ca_file or redis.tls_cert_file is set",
                ));
            }
        }
        Ok(self)
    }
}

/// `<store>.tls_ca_file`, `.tls_cert_file`, `.tls_key_file`.
fn validate_files(
    store: &str,
    ca: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<(), ConfigError> {
    let name = |field: &str| format!("{store}.{field}");
    if let Some(path) = ca {
        let k = name("tls_ca_file");
        let certs = read_certificates(&k, path)?;
        let mut roots = rustls::RootCertStore::empty();
        for c in certs {
            roots.add(c).map_err(|e| {
                ConfigError::new(&k, format!("{}: not a CA certificate: {e}", path.display()))
            })?;
        }
    }
    match (cert, key) {
        (None, None) => Ok(()),
        (Some(_), None) => Err(ConfigError::new(
            name("tls_key_file"),
            format!(
                "must be set with {} (a client certificate needs its key)",
                name("tls_cert_file")
            ),
        )),
        (None, Some(_)) => Err(ConfigError::new(
            name("tls_cert_file"),
            format!(
                "must be set with {} (a client key needs its certificate)",
                name("tls_key_file")
            ),
        )),
        (Some(cert_path), Some(key_path)) => {
            let chain = read_certificates(&name("tls_cert_file"), cert_path)?;
            let k = name("tls_key_file");
            let bytes = read(&k, key_path)?;
            let private = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
                ConfigError::new(
                    &k,
                    format!("{}: no PEM private key ({e})", key_path.display()),
                )
            })?;
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| ConfigError::new(&k, e.to_string()))?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_client_auth_cert(chain, private)
                .map_err(|e| {
                    ConfigError::new(
                        &k,
                        format!(
                            "{} does not fit the certificate in {}: {e}",
                            key_path.display(),
                            name("tls_cert_file")
                        ),
                    )
                })?;
            Ok(())
        }
    }
}

fn read(key: &str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path)
        .map_err(|e| ConfigError::new(key, format!("cannot read {}: {e}", path.display())))
}

/// One or more PEM certificates, every one of them well-formed.
fn read_certificates(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let bytes = read(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::new(key, format!("{}: bad PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(ConfigError::new(
            key,
            format!("{}: no PEM certificate in it", path.display()),
        ));
    }
    Ok(certs)
}

/// Resolves with the first of `files` whose content differs from what it
/// is now, when this is called (checked every `every`; a file that cannot be
/// read counts as changed). Never resolves for an empty list. A Kubernetes
/// Secret volume swaps its files atomically, so a read never sees half of one.
pub fn tls_files_changed(
    files: Vec<PathBuf>,
    every: Duration,
) -> impl Future<Output = PathBuf> + Send + 'static {
    let first: Vec<Option<Vec<u8>>> = files.iter().map(|f| std::fs::read(f).ok()).collect();
    async move {
        if files.is_empty() {
            return std::future::pending().await;
        }
        loop {
            tokio::time::sleep(every).await;
            for (path, before) in files.iter().zip(&first) {
                if std::fs::read(path).ok() != *before {
                    return path.clone();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_spelled_exactly() {
        assert_eq!(
            MysqlTlsMode::try_from("verify_ca".to_string()),
            Ok(MysqlTlsMode::VerifyCa)
        );
        assert_eq!(
            MysqlTlsMode::try_from(String::new()),
            Ok(MysqlTlsMode::Unset)
        );
        assert!(MysqlTlsMode::try_from("VERIFY_CA".to_string()).is_err());
    }

    #[test]
    fn missing_and_unpaired_files_are_named() {
        let e = validate_files("redis", Some(Path::new("/nonexistent/ca.pem")), None, None)
            .unwrap_err();
        assert_eq!(e.key, "redis.tls_ca_file");
        assert!(e.reason.contains("/nonexistent/ca.pem"), "{e}");
        let e = validate_files("mysql", None, Some(Path::new("/x")), None).unwrap_err();
        assert_eq!(e.key, "mysql.tls_key_file");
        let e = validate_files("mysql", None, None, Some(Path::new("/x"))).unwrap_err();
        assert_eq!(e.key, "mysql.tls_cert_file");
    }

    #[test]
    fn a_file_without_pem_is_refused() {
        let path = std::env::temp_dir().join(format!("seatflow-notpem-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, "not a certificate\n").unwrap();
        let e = validate_files("mysql", Some(&path), None, None).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(e.key, "mysql.tls_ca_file");
        assert!(e.reason.contains("no PEM certificate"), "{e}");
    }

    #[tokio::test]
    async fn a_changed_file_is_noticed() {
        let path = std::env::temp_dir().join(format!("seatflow-watch-{}", uuid::Uuid::new_v4()));
        std::fs::write(&path, "one").unwrap();
        let watch = tokio::spawn(tls_files_changed(
            vec![path.clone()],
            Duration::from_millis(20),
        ));
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!watch.is_finished());
        std::fs::write(&path, "two").unwrap();
        let changed = tokio::time::timeout(Duration::from_secs(5), watch)
            .await
            .expect("noticed")
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(changed, path);
    }
}
