//! One error type for store I/O, with the bounded `stage` label it is counted
//! under and whether retrying can help (safety rule 9), and whether it is a
//! refused permission (`denial`, rule 18).

mod denial;

pub use denial::{Denial, mysql_need, redis_need};

/// Errors of the store layer. Messages never contain URLs or passwords:
/// neither driver puts the connection string into its errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("mysql: {0}")]
    Mysql(#[from] sqlx::Error),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("mysql migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Our showtime lease expired or was taken over: writes were fenced.
    #[error("showtime lease lost (showtime {0})")]
    LeaseLost(i64),
    /// A Redis reply we could not interpret (a bug or an incompatible server).
    #[error("unexpected reply: {0}")]
    Protocol(String),
    /// MySQL broke an invariant it should keep (a statement changed other
    /// rows than the ones we hold locked): refused rather than guessed.
    #[error("mysql: {0}")]
    MysqlInvariant(String),
    /// A TLS file that could not be read when connecting (`what` names it).
    #[error("{what}: {source}")]
    TlsFile {
        stage: Stage,
        what: String,
        source: std::io::Error,
    },
    /// The replication connection that reads MySQL's binlog
    /// (`store::mysql::binlog`): its connect, queries and stream.
    #[error("mysql binlog: {0}")]
    Binlog(#[from] mysql_async::Error),
    /// The binlog cannot be read as the server is set up: each privilege to
    /// grant or setting to change, as the statement to run.
    #[error("the MySQL binlog cannot be read: {}", .0.join("; "))]
    BinlogSetup(Vec<String>),
    /// The binlog stream ended or lost its place (a purged position, a table
    /// whose shape changed, a silent connection): changes may have been
    /// missed since its last position, a gap.
    #[error("mysql binlog gap: {0}")]
    BinlogGap(String),
    /// A repair whose audit row would not fit `reconcile_fix` (a seat name
    /// wider than its `seat_no`): not made, never truncated (rules 10, 17).
    #[error(
        "seat {seat:?} of showtime {showtime} is longer than reconcile_fix.seat_no ({width} characters): not repaired; run `seatflow-reconciler migrate` to widen the audit"
    )]
    AuditTooNarrow {
        showtime: i64,
        seat: String,
        width: u64,
    },
    /// The run's `reconcile_run` row could not be written: no repair is
    /// made without it (rule 10: every audit row has its run).
    #[error("the run is not recorded in reconcile_run ({0}): no repair made without it")]
    RunNotRecorded(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where an error happened: the `stage` label of
/// `seatflow_reconcile_errors_total`, a bounded set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    Mysql,
    Redis,
    Lock,
    Audit,
    InvalidData,
}

impl Stage {
    pub const ALL: [Stage; 5] = [
        Stage::Mysql,
        Stage::Redis,
        Stage::Lock,
        Stage::Audit,
        Stage::InvalidData,
    ];

    pub const fn label(self) -> &'static str {
        match self {
            Stage::Mysql => "mysql",
            Stage::Redis => "redis",
            Stage::Lock => "lock",
            Stage::Audit => "audit",
            Stage::InvalidData => "invalid_data",
        }
    }
}

/// MySQL's 1045, whichever driver met it.
const ACCESS_DENIED: &str = "access denied: wrong user or password, or a server that accepts TLS \
     connections only (MariaDB says so with require_secure_transport): see mysql.tls_mode";

/// MySQL: lock wait timeout, deadlock.
const TRANSIENT_MYSQL_CODES: [u16; 2] = [1205, 1213];

impl Error {
    /// The `stage` label of `seatflow_reconcile_errors_total`.
    pub fn stage(&self) -> Stage {
        match self {
            Error::Mysql(_)
            | Error::Migrate(_)
            | Error::MysqlInvariant(_)
            | Error::Binlog(_)
            | Error::BinlogSetup(_)
            | Error::BinlogGap(_) => Stage::Mysql,
            Error::Redis(_) | Error::Protocol(_) => Stage::Redis,
            Error::LeaseLost(_) => Stage::Lock,
            Error::TlsFile { stage, .. } => *stage,
            Error::AuditTooNarrow { .. } | Error::RunNotRecorded(_) => Stage::Audit,
        }
    }

    /// Connection resets, timeouts, deadlocks: worth another try. Logic
    /// errors (bad SQL, script errors, wrong types) are not.
    /// A certificate or handshake problem is never transient.
    pub fn is_transient(&self) -> bool {
        if self.tls_problem().is_some() {
            return false;
        }
        match self {
            Error::Mysql(e) => mysql_transient(e),
            Error::Redis(e) => redis_transient(e),
            // A broken connection, not a refused statement.
            Error::Binlog(e) => e.is_fatal(),
            Error::BinlogGap(_) => true,
            Error::Migrate(_)
            | Error::LeaseLost(_)
            | Error::Protocol(_)
            | Error::MysqlInvariant(_)
            | Error::BinlogSetup(_)
            | Error::TlsFile { .. }
            | Error::AuditTooNarrow { .. }
            | Error::RunNotRecorded(_) => false,
        }
    }

    /// What went wrong with TLS, when it is a matter of configuration
    /// (certificates, names, modes) that retrying cannot mend.
    pub fn tls_problem(&self) -> Option<TlsProblem> {
        match self {
            Error::TlsFile { .. } => Some(TlsProblem::Setup),
            Error::Mysql(e) => mysql_tls_problem(e),
            Error::Redis(e) => chain_problem(e).or_else(|| text_problem(&e.to_string())),
            Error::Binlog(e) => binlog_tls_problem(e),
            Error::Migrate(_)
            | Error::LeaseLost(_)
            | Error::Protocol(_)
            | Error::MysqlInvariant(_)
            | Error::BinlogSetup(_)
            | Error::BinlogGap(_)
            | Error::AuditTooNarrow { .. }
            | Error::RunNotRecorded(_) => None,
        }
    }

    /// The server refused the login or the database named in the URL: a
    /// configuration error too, never transient.
    pub fn login_refused(&self) -> Option<&'static str> {
        match self {
            Error::Mysql(sqlx::Error::Database(db)) => match db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(|e| e.number())
            {
                // The server's error number (`code()` is the SQLSTATE).
                Some(1045) => Some(ACCESS_DENIED),
                Some(1049) => Some("unknown database"),
                Some(3159) => Some(TlsProblem::TlsRequired.describe()),
                _ => None,
            },
            Error::Binlog(mysql_async::Error::Server(e)) => match e.code {
                1045 => Some(ACCESS_DENIED),
                1049 => Some("unknown database"),
                _ => None,
            },
            // redis-rs reports a refused AUTH at connect as its own kind
            // (no server code), later ones with the server's code.
            Error::Redis(e) if redis_codes(e).iter().any(|c| c == "NOAUTH") => {
                Some("the server needs a password and none was given")
            }
            Error::Redis(e)
                if e.kind() == redis::ErrorKind::AuthenticationFailed
                    || redis_codes(e).iter().any(|c| c == "WRONGPASS") =>
            {
                Some("authentication failed: wrong user or password")
            }
            _ => None,
        }
    }
}

/// The server's error codes in a Redis error, a pipeline's included (a
/// pipeline whose every command met NOAUTH has no code of its own).
fn redis_codes(e: &redis::RedisError) -> Vec<String> {
    let mut codes: Vec<String> = e.code().map(str::to_string).into_iter().collect();
    if let Some(items) = e.clone().into_server_errors() {
        codes.extend(items.iter().map(|(_, item)| item.code().to_string()));
    }
    codes
}

/// Why TLS with a store failed, for the operator: what to fix, and which
/// setting of the store (`<store>.<setting>`) to look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsProblem {
    /// The server's certificate chains to no trusted CA.
    UnknownIssuer,
    /// The server's certificate is not for the host name we connected to.
    NameMismatch,
    /// The server's certificate has expired.
    Expired,
    /// The server's certificate is not valid yet.
    NotValidYet,
    /// The server's certificate was refused for another reason.
    BadCertificate,
    /// The server refused the handshake: our client certificate (mutual TLS).
    ClientRefused,
    /// The server did not answer in TLS.
    NotTls,
    /// The server accepts TLS connections only, and we spoke plain text.
    TlsRequired,
    /// Our own TLS set-up failed (a file, a key, an unsupported option).
    Setup,
}

impl TlsProblem {
    pub fn describe(self) -> &'static str {
        match self {
            TlsProblem::UnknownIssuer => {
                "the server's certificate is signed by an unknown issuer (not by a CA in the CA bundle)"
            }
            TlsProblem::NameMismatch => {
                "name mismatch: the server's certificate is not valid for the host name in the URL"
            }
            TlsProblem::Expired => "the server's certificate has expired",
            TlsProblem::NotValidYet => "the server's certificate is not valid yet",
            TlsProblem::BadCertificate => "the server's certificate was refused",
            TlsProblem::ClientRefused => {
                "the server refused our client certificate (mutual TLS): check the client certificate and key"
            }
            TlsProblem::NotTls => "the server did not answer in TLS on this port",
            TlsProblem::TlsRequired => {
                "the server accepts TLS connections only, and this one was plain text"
            }
            TlsProblem::Setup => "the TLS set-up failed",
        }
    }

    /// The setting of the store to look at: `tls_ca_file`, `url`, `tls_cert_file`.
    pub fn setting(self) -> &'static str {
        match self {
            TlsProblem::UnknownIssuer | TlsProblem::Setup => "tls_ca_file",
            TlsProblem::ClientRefused => "tls_cert_file",
            TlsProblem::NameMismatch
            | TlsProblem::Expired
            | TlsProblem::NotValidYet
            | TlsProblem::BadCertificate
            | TlsProblem::NotTls
            | TlsProblem::TlsRequired => "url",
        }
    }
}

fn mysql_tls_problem(e: &sqlx::Error) -> Option<TlsProblem> {
    match e {
        sqlx::Error::Tls(inner) => Some(chain_problem(inner.as_ref()).unwrap_or(
            if inner.to_string().contains("does not support TLS") {
                TlsProblem::NotTls
            } else {
                TlsProblem::Setup
            },
        )),
        // MySQL 3159, MariaDB 4151 (require_secure_transport = ON).
        sqlx::Error::Database(db) if db.message().contains("insecure transport") => {
            Some(TlsProblem::TlsRequired)
        }
        _ => chain_problem(e),
    }
}

/// mysql_async's TLS errors: rustls' own in the chain, or a server that
/// does not offer TLS when we require it.
fn binlog_tls_problem(e: &mysql_async::Error) -> Option<TlsProblem> {
    match e {
        mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer) => {
            Some(TlsProblem::NotTls)
        }
        mysql_async::Error::Server(s) if s.message.contains("insecure transport") => {
            Some(TlsProblem::TlsRequired)
        }
        _ => chain_problem(e),
    }
}

/// The rustls error in `e`'s chain (an `io::Error` holds it in its inner
/// error, which `source()` skips), classified.
fn chain_problem(e: &(dyn std::error::Error + 'static)) -> Option<TlsProblem> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(r) = err.downcast_ref::<rustls::Error>() {
            return rustls_problem(r);
        }
        if let Some(inner) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            && let Some(p) = chain_problem(inner)
        {
            return Some(p);
        }
        next = err.source();
    }
    None
}

fn rustls_problem(e: &rustls::Error) -> Option<TlsProblem> {
    use rustls::{AlertDescription as A, CertificateError as C, Error as R};
    Some(match e {
        R::InvalidCertificate(c) => match c {
            C::UnknownIssuer => TlsProblem::UnknownIssuer,
            C::NotValidForName | C::NotValidForNameContext { .. } => TlsProblem::NameMismatch,
            C::Expired | C::ExpiredContext { .. } => TlsProblem::Expired,
            C::NotValidYet | C::NotValidYetContext { .. } => TlsProblem::NotValidYet,
            _ => TlsProblem::BadCertificate,
        },
        R::AlertReceived(
            A::BadCertificate
            | A::CertificateRequired
            | A::CertificateUnknown
            | A::CertificateExpired
            | A::CertificateRevoked
            | A::UnknownCA
            | A::AccessDenied,
        ) => TlsProblem::ClientRefused,
        R::InvalidMessage(_) | R::InappropriateMessage { .. } => TlsProblem::NotTls,
        R::AlertReceived(_) | R::PeerIncompatible(_) | R::NoCertificatesPresented => {
            TlsProblem::BadCertificate
        }
        R::InconsistentKeys(_) | R::General(_) => TlsProblem::Setup,
        _ => return None,
    })
}

/// Last resort, for a driver that flattened the rustls error into text
/// (the cluster client reports its first connections' errors as text).
fn text_problem(text: &str) -> Option<TlsProblem> {
    const PATTERNS: [(&str, TlsProblem); 7] = [
        ("UnknownIssuer", TlsProblem::UnknownIssuer),
        ("NotValidForName", TlsProblem::NameMismatch),
        ("certificate not valid for name", TlsProblem::NameMismatch),
        ("Expired", TlsProblem::Expired),
        ("certificate expired", TlsProblem::Expired),
        ("received fatal alert", TlsProblem::ClientRefused),
        ("received corrupt message", TlsProblem::NotTls),
    ];
    PATTERNS
        .iter()
        .find(|(p, _)| text.contains(p))
        .map(|(_, problem)| *problem)
}

fn mysql_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => {
            // The server's error number; `code()` is only the SQLSTATE (HY000).
            db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|m| TRANSIENT_MYSQL_CODES.contains(&m.number()))
        }
        _ => false,
    }
}

fn redis_transient(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.code(),
            Some("LOADING" | "TRYAGAIN" | "BUSY" | "MASTERDOWN")
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Errors are counted under the store they came from: a broken MySQL
    /// invariant is a `mysql` error, an unreadable Redis reply a `redis` one.
    #[test]
    fn errors_are_counted_under_their_true_stage() {
        assert_eq!(
            Error::MysqlInvariant("updated 1 of 2".into()).stage(),
            Stage::Mysql
        );
        assert_eq!(Error::Protocol("odd".into()).stage(), Stage::Redis);
        assert_eq!(Error::LeaseLost(1).stage(), Stage::Lock);
        assert!(!Error::MysqlInvariant("x".into()).is_transient());
    }
}
