//! The start's check (rules 18 and 19), one for `run`, `once` and
//! `check-config`: each store and source the settings turn on is asked
//! what the command will need of it, and a store that could not be reached
//! is judged the same way, so that `check-config` exits 2 whenever `run`
//! with the same settings would (and `run`, on what it reached, whenever
//! `check-config` finds a permission or setting missing), and names what
//! it could not check.
//! The binary prints the findings and picks the exit code.

use std::time::Duration;

use super::probe::{self, Asked};
use super::{Missing, redis_access, redis_user};
use crate::config::{Secret, Settings};
use crate::error::{Denial, Error, Stage};
use crate::store::mysql::MysqlStore;
use crate::store::redis::RedisStore;

/// The longest the replica's check waits for it: a replica is a fallback,
/// and one that does not answer is no reason to hold the start.
const REPLICA_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// What a command will use of the stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `run` (and `check-config`, which checks for it): subscriptions to
    /// keyspace events, the binlog, the replica.
    Daemon,
    /// `once`: the stores and the replica, no change source.
    Once,
}

/// What the start found of one store or source.
#[derive(Debug)]
pub enum Finding {
    /// Asked, and nothing it needs is refused.
    Allowed(&'static str),
    /// A permission it needs is refused: a configuration error, with what
    /// to run.
    Missing(Missing),
    /// A setting is wrong (a TLS problem, a refused login, a server
    /// setting the binlog needs): a configuration error naming the key.
    Misconfigured { key: String, message: String },
    /// It did not answer: `run` and `once` cannot start; `check-config`
    /// says it did not check it.
    Unreachable { what: &'static str, message: String },
    /// Not asked: the settings do not use it, the server cannot tell, or
    /// what it depends on was not reached.
    NotChecked { what: &'static str, why: String },
}

impl Finding {
    /// Whether the start stops on it with exit 2.
    pub fn is_config_error(&self) -> bool {
        matches!(self, Finding::Missing(_) | Finding::Misconfigured { .. })
    }
}

/// A store the command reached, or the error of its connection.
pub type Reached<'a, T> = Result<&'a T, &'a Error>;

/// The configuration key a refused login points at: the password's own
/// key when the password was given apart from the URL, else the URL (its
/// user and password, or none where the server needs one).
pub fn credential_key(settings: &Settings, stage: Stage) -> &'static str {
    let apart = |password: &Secret, file: &str| !password.is_empty() || !file.is_empty();
    match stage {
        Stage::Mysql if apart(&settings.mysql.password, &settings.mysql.password_file) => {
            "mysql.password"
        }
        Stage::Mysql => "mysql.url",
        _ if apart(&settings.redis.password, &settings.redis.password_file) => "redis.password",
        _ => "redis.url",
    }
}

/// The ACL rule for the configured Redis user, as the daemon needs it.
pub fn redis_rule(settings: &Settings) -> String {
    redis_access(settings, true).setuser(&redis_user(settings))
}

/// What a failure to reach a store (or `what` of it: its binlog) means
/// for the start: a TLS problem or a refused login is a configuration
/// error naming the key; a refused permission is missing; anything else,
/// unreachable (only the store that failed is named, and its URL redacted).
pub fn connect_failure(settings: &Settings, e: &Error, what: &str) -> Finding {
    let stage = e.stage();
    let store = stage.label();
    if let Some(d) = Denial::of(e) {
        let remedy = match stage {
            Stage::Redis => vec![redis_rule(settings)],
            _ => Vec::new(),
        };
        return Finding::Missing(Missing::of(d, remedy));
    }
    if let Some(problem) = e.tls_problem() {
        return Finding::Misconfigured {
            key: format!("{store}.{}", problem.setting()),
            message: format!(
                "TLS with {store}{what} failed: {} ({e})",
                problem.describe()
            ),
        };
    }
    if let Some(why) = e.login_refused() {
        return Finding::Misconfigured {
            key: credential_key(settings, stage).to_string(),
            message: format!("{store}{what} refused us: {why} ({e})"),
        };
    }
    let url = match stage {
        Stage::Redis => settings.redis.url.to_string(),
        _ => settings.mysql.url.to_string(),
    };
    Finding::Unreachable {
        what: if stage == Stage::Redis {
            "Redis"
        } else {
            "MySQL"
        },
        message: format!("cannot reach {store}{what} at {url}: {e}"),
    }
}

/// Every store and source `command` uses with these settings, asked what
/// it refuses of what the command needs; `mysql` and `redis` as the
/// command reached them.
pub async fn probe(
    settings: &Settings,
    mysql: Reached<'_, MysqlStore>,
    redis: Reached<'_, RedisStore>,
    command: Command,
) -> Vec<Finding> {
    let retention = !settings.audit.retention.is_zero();
    let mut found = Vec::new();
    found.push(match mysql {
        Ok(m) => asked(
            "MySQL grants",
            probe::mysql_asked(m, retention).await,
            |e| connect_failure(settings, &e, ""),
        ),
        Err(e) => connect_failure(settings, e, ""),
    });
    found.push(match redis {
        Ok(r) => {
            let access = redis_access(settings, command == Command::Daemon);
            let rule = redis_rule(settings);
            let result = probe::redis_asked(r, &access, rule).await;
            asked("Redis ACL", result, |e| connect_failure(settings, &e, ""))
        }
        Err(e) => connect_failure(settings, e, ""),
    });
    if command == Command::Daemon {
        found.push(binlog(settings, mysql.is_ok()).await);
    }
    found.push(replica(settings, mysql.ok()).await);
    found
}

/// A store's answer as a finding; `failed`: what an error means.
fn asked(
    what: &'static str,
    result: crate::error::Result<Asked>,
    failed: impl FnOnce(Error) -> Finding,
) -> Finding {
    match result {
        Ok(Asked::Allowed) => Finding::Allowed(what),
        Ok(Asked::Refused(m)) => Finding::Missing(m),
        Ok(Asked::CannotTell) => Finding::NotChecked {
            what,
            why: "this server cannot check them ahead (acl_check_cmd needs Redis 7.0): a \
                  refusal is named when it is met"
                .into(),
        },
        Err(e) => failed(e),
    }
}

/// The binlog source (`changes.mysql_binlog`), started as `run` starts it
/// (its privileges and the server's settings are checked first) and
/// dropped.
async fn binlog(settings: &Settings, mysql_reached: bool) -> Finding {
    const WHAT: &str = "MySQL binlog";
    if !settings.changes.mysql_binlog {
        return Finding::NotChecked {
            what: WHAT,
            why: "changes.mysql_binlog is off".into(),
        };
    }
    if !mysql_reached {
        return Finding::NotChecked {
            what: WHAT,
            why: "MySQL was not reached".into(),
        };
    }
    match crate::run::context::start_binlog(settings, None).await {
        Ok(source) => {
            tracing::info!(position = %source.position(), "the MySQL binlog can be read");
            Finding::Allowed(WHAT)
        }
        Err(e @ Error::BinlogSetup(_)) => Finding::Misconfigured {
            key: "changes.mysql_binlog".into(),
            message: e.to_string(),
        },
        Err(e) => connect_failure(settings, &e, " (its binlog, changes.mysql_binlog)"),
    }
}

/// `mysql.replica_url`'s replica: what its user refuses of a pass's bulk
/// reads and of the question of its lag. One that cannot be reached is a
/// fallback (a pass reads the primary), never a failed start.
async fn replica(settings: &Settings, primary: Option<&MysqlStore>) -> Finding {
    const WHAT: &str = "MySQL replica";
    let not_checked = |why: String| Finding::NotChecked { what: WHAT, why };
    if settings.mysql.replica_url.is_empty() {
        return not_checked("mysql.replica_url is not set".into());
    }
    let Some(primary) = primary else {
        return not_checked("MySQL was not reached".into());
    };
    let misconfigured = |e: &Error| Finding::Misconfigured {
        key: "mysql.replica_url".into(),
        message: format!("the replica refused us: {e}"),
    };
    let replica = match crate::run::context::connect_replica(settings, primary) {
        Ok(Some(replica)) => replica,
        Ok(None) => return not_checked("mysql.replica_url is not set".into()),
        Err(e) => return misconfigured(&e),
    };
    // One connection first: its error says why (the pool, retrying a
    // refused connection, would say only that it timed out).
    let asking = async {
        replica.store().connect_once().await?;
        probe::replica_asked(replica.store()).await
    };
    match tokio::time::timeout(REPLICA_CHECK_TIMEOUT, asking).await {
        Ok(Ok(Asked::Refused(m))) => Finding::Missing(m),
        Ok(Ok(_)) => Finding::Allowed(WHAT),
        Ok(Err(e)) if e.login_refused().is_some() || e.tls_problem().is_some() => misconfigured(&e),
        Ok(Err(e)) => match Denial::of(&e) {
            Some(d) => Finding::Missing(Missing::of(d.on_replica(), Vec::new())),
            None => not_checked(format!(
                "cannot reach it ({e}); a pass reads the primary meanwhile"
            )),
        },
        Err(_) => not_checked(format!(
            "no answer within {}s; a pass reads the primary meanwhile",
            REPLICA_CHECK_TIMEOUT.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_refusals_and_wrong_settings_stop_the_start() {
        let findings = [
            (Finding::Allowed("MySQL grants"), false),
            (
                Finding::Missing(Missing {
                    who: probe::REPLICA,
                    refused: vec!["SLAVE MONITOR".into()],
                    remedy: Vec::new(),
                }),
                true,
            ),
            (
                Finding::Misconfigured {
                    key: "changes.mysql_binlog".into(),
                    message: String::new(),
                },
                true,
            ),
            (
                Finding::Unreachable {
                    what: "Redis",
                    message: String::new(),
                },
                false,
            ),
            (
                Finding::NotChecked {
                    what: "MySQL binlog",
                    why: String::new(),
                },
                false,
            ),
        ];
        for (finding, stops) in findings {
            assert_eq!(finding.is_config_error(), stops, "{finding:?}");
        }
    }
}
