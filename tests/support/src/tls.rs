//! TLS for tests: a private CA and certificates made with the `openssl`
//! command in a temp dir, and private TLS servers (`redis-server` with its
//! TLS port only, `mariadbd` with `--ssl-*`) started on them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::servers::{PrivateServer, Ready, TempDir, tool};

/// A key and certificate pair (PEM files).
#[derive(Debug, Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Certificates signed by a private CA: `server` for 127.0.0.1 and
/// localhost, `wrong_name` for another host, `expired` (for 127.0.0.1, but
/// out of date), `client` for mutual TLS; `other_ca` signed none of them.
pub struct Pki {
    pub ca: PathBuf,
    pub other_ca: PathBuf,
    pub server: Pair,
    pub wrong_name: Pair,
    pub expired: Pair,
    pub client: Pair,
    dir: TempDir,
}

const SERVER_NAMES: &str = "IP:127.0.0.1,DNS:localhost";

impl Pki {
    pub fn new() -> Pki {
        let dir = TempDir::new("pki").unwrap();
        let d = dir.path().to_owned();
        let ca = self_signed(&d, "ca", "seatflow test CA");
        let other_ca = self_signed(&d, "other-ca", "someone else's CA");
        let server = signed(&d, "server", "localhost", SERVER_NAMES, "serverAuth", 30);
        let wrong_name = signed(
            &d,
            "wrong-name",
            "db.example.com",
            "DNS:db.example.com",
            "serverAuth",
            30,
        );
        let expired = signed(&d, "expired", "localhost", SERVER_NAMES, "serverAuth", -1);
        let client = signed(
            &d,
            "client",
            "seatflow-reconciler",
            "DNS:seatflow-reconciler",
            "clientAuth",
            30,
        );
        Pki {
            ca: ca.cert,
            other_ca: other_ca.cert,
            server,
            wrong_name,
            expired,
            client,
            dir,
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new(tool("openssl", "openssl"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("running openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const EC_KEY: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

fn self_signed(dir: &Path, name: &str, cn: &str) -> Pair {
    let (cert, key) = (format!("{name}.pem"), format!("{name}.key"));
    let subject = format!("/CN={cn}");
    let mut args = vec!["req", "-x509", "-nodes", "-days", "30", "-subj", &subject];
    args.extend(EC_KEY);
    args.extend(["-keyout", &key, "-out", &cert]);
    openssl(dir, &args);
    Pair {
        cert: dir.join(cert),
        key: dir.join(key),
    }
}

/// A certificate signed by `ca`, valid for `days` from now (negative: it
/// expired before it was issued).
fn signed(dir: &Path, name: &str, cn: &str, names: &str, usage: &str, days: i32) -> Pair {
    let (cert, key, csr, ext) = (
        format!("{name}.pem"),
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.ext"),
    );
    std::fs::write(
        dir.join(&ext),
        format!("subjectAltName={names}\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n"),
    )
    .unwrap();
    let subject = format!("/CN={cn}");
    let mut args = vec!["req", "-new", "-nodes", "-subj", &subject];
    args.extend(EC_KEY);
    args.extend(["-keyout", &key, "-out", &csr]);
    openssl(dir, &args);
    let days = days.to_string();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            &days,
            "-extfile",
            &ext,
            "-out",
            &cert,
        ],
    );
    // The servers may run as another user than the one who wrote the files.
    for f in [&cert, &key] {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    Pair {
        cert: dir.join(cert),
        key: dir.join(key),
    }
}

/// A started `redis-server` that speaks TLS only (`--port 0`), presenting
/// `cert`; client certificates signed by `pki.ca` are `optional` or
/// required (`yes`).
pub fn tls_redis(pki: &Pki, cert: &Pair, auth_clients: &str) -> PrivateServer {
    let mut s = PrivateServer::new("redis-tls", tool("redis-server", "redis-server")).unwrap();
    let (port, dir) = (s.port().to_string(), s.dir().to_owned());
    s.args(["--port", "0", "--tls-port", &port, "--bind", "127.0.0.1"])
        .arg("--tls-cert-file")
        .arg(&cert.cert)
        .arg("--tls-key-file")
        .arg(&cert.key)
        .arg("--tls-ca-cert-file")
        .arg(&pki.ca)
        .args(["--tls-auth-clients", auth_clients])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        // A plain-text PING cannot check a TLS port: it accepts connections
        // once it serves (it has no data to load).
        .ready(Ready::Tcp, Duration::from_secs(60));
    s.start().unwrap();
    s
}

/// A started `mariadbd` with TLS on (the files `server.pem`/`server.key`
/// in its directory, copied from `pki.server`, so a test can swap them and
/// `FLUSH SSL`), refusing plain-text connections (`require_secure_transport`).
pub fn tls_mariadb(pki: &Pki) -> PrivateServer {
    let mut s = crate::servers::private_mariadb("mariadb-tls");
    let dir = s.dir().to_owned();
    std::fs::copy(&pki.server.cert, dir.join("server.pem")).unwrap();
    std::fs::copy(&pki.server.key, dir.join("server.key")).unwrap();
    s.arg("--skip-log-bin")
        .arg(format!("--ssl-ca={}", pki.ca.display()))
        .arg(format!("--ssl-cert={}", dir.join("server.pem").display()))
        .arg(format!("--ssl-key={}", dir.join("server.key").display()))
        .arg("--require-secure-transport=ON");
    s.start().unwrap();
    s
}
