//! TLS to Redis (`rediss://`): the PEM files as the settings give them,
//! in the crate's form for its connections (`certificates`) and as the
//! same client for the fast reader's (`client_like_the_crates`).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::TlsConnector;

/// TLS material for `rediss://`, as plain PEM bytes (filled from the
/// settings). Empty: the system's roots, no client certificate.
#[derive(Clone, Default)]
pub struct RedisTls {
    /// CA bundle; when set, the only roots trusted.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate and key, for mutual TLS.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

/// A TLS client for one server, as the crate would be.
pub(super) struct Tls {
    pub(super) connector: TlsConnector,
    pub(super) server: ServerName<'static>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("ca_pem", &self.ca_pem.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl RedisTls {
    /// redis-rs's form, or `None` when nothing is configured.
    pub fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.ca_pem.is_none() && self.client.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca_pem.clone(),
        })
    }

    /// The TLS client the crate builds for `rediss://` (`create_rustls_config`
    /// in redis 1.x, with this build's features: no `#insecure`, system roots
    /// from `rustls-native-certs`): the CA bundle as the only roots where
    /// set, else the system's, refusing any that fails to load; its client
    /// certificate where set; the URL's host as the server name (SNI and the
    /// certificate's name). Why not, when it cannot be built.
    pub(super) fn client_like_the_crates(&self, host: &str) -> Result<Tls, String> {
        let mut roots = rustls::RootCertStore::empty();
        match &self.ca_pem {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| format!("redis.tls_ca_file: {e}"))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("redis.tls_ca_file: {e}"))?;
                }
            }
            None => {
                let mut system = rustls_native_certs::load_native_certs();
                if let Some(e) = system.errors.pop() {
                    return Err(format!("the system's CA certificates: {e}"));
                }
                for cert in system.certs {
                    roots
                        .add(cert)
                        .map_err(|e| format!("a system CA certificate: {e}"))?;
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let config = match &self.client {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("redis.tls_cert_file: {e}"))?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|e| format!("redis.tls_key_file: {e}"))?;
                config
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("redis.tls_key_file: {e}"))?
            }
            None => config.with_no_client_auth(),
        };
        let server = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
            server,
        })
    }
}
