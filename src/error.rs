//! One error type for store I/O, with the bounded `stage` label it is counted
//! under and whether retrying can help (safety rule 9).

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
    /// Our lease on a showtime expired or was taken over: writes were fenced.
    #[error("lease on showtime {0} lost")]
    LeaseLost(i64),
    /// A reply we could not interpret (a bug or an incompatible server).
    #[error("unexpected reply: {0}")]
    Protocol(String),
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

/// MySQL: lock wait timeout, deadlock.
const TRANSIENT_MYSQL_CODES: [&str; 2] = ["1205", "1213"];

impl Error {
    /// The `stage` label of `seatflow_reconcile_errors_total`.
    pub fn stage(&self) -> Stage {
        match self {
            Error::Mysql(_) | Error::Migrate(_) => Stage::Mysql,
            Error::Redis(_) | Error::Protocol(_) => Stage::Redis,
            Error::LeaseLost(_) => Stage::Lock,
        }
    }

    /// Connection resets, timeouts, deadlocks: worth another try. Logic
    /// errors (bad SQL, script errors, wrong types) are not.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Mysql(e) => mysql_transient(e),
            Error::Redis(e) => redis_transient(e),
            Error::Migrate(_) | Error::LeaseLost(_) | Error::Protocol(_) => false,
        }
    }
}

fn mysql_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => {
            // sqlx's MySQL error code is the numeric server code as a string.
            db.code()
                .is_some_and(|c| TRANSIENT_MYSQL_CODES.contains(&c.as_ref()))
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
