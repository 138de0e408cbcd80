//! The start's check (rule 18): what each store's user may not do of what
//! the reconciler will need, asked of the servers without doing it (Redis:
//! `acl_check_cmd`; MySQL: statements prepared, never run).

use super::Missing;
use super::redis_acl::{self, RedisAccess};
use crate::error::{Denial, Result, Stage};
use crate::store::mysql::MysqlStore;
use crate::store::redis::{AclVerdict, RedisStore};

/// What a store said when asked.
#[derive(Debug)]
pub enum Asked {
    /// Nothing the reconciler needs is refused.
    Allowed,
    Refused(Missing),
    /// The server cannot tell ahead (Redis before 7.0 has no
    /// `acl_check_cmd`): a refusal is named when it is met.
    CannotTell,
}

impl Asked {
    fn of(missing: Option<Missing>) -> Asked {
        missing.map_or(Asked::Allowed, Asked::Refused)
    }

    pub fn missing(self) -> Option<Missing> {
        match self {
            Asked::Refused(m) => Some(m),
            Asked::Allowed | Asked::CannotTell => None,
        }
    }
}

/// What the Redis user may not do of `access`'s uses, with `remedy`, the
/// rule to run (the daemon's whole rule: one rule serves every command).
pub async fn redis_asked(
    redis: &RedisStore,
    access: &RedisAccess,
    remedy: String,
) -> Result<Asked> {
    let uses = access.uses();
    let argvs: Vec<&[String]> = uses.iter().map(|u| u.argv.as_slice()).collect();
    let refused: Vec<String> = match redis.acl_refuses(&argvs).await {
        Ok(AclVerdict::CannotTell) => return Ok(Asked::CannotTell),
        Ok(AclVerdict::Refused(refused)) => {
            // Per node in a cluster (each has its own ACL).
            let mut nodes: Vec<&Option<String>> = refused.iter().map(|(_, n)| n).collect();
            nodes.dedup();
            nodes
                .into_iter()
                .map(|node| {
                    let indexes: Vec<usize> = refused
                        .iter()
                        .filter(|(_, n)| n == node)
                        .map(|(i, _)| *i)
                        .collect();
                    let on = node.as_ref().map_or(String::new(), |n| format!(" on {n}"));
                    format!(
                        "the ACL{on} lacks {}",
                        redis_acl::missing_tokens(&uses, &indexes).join(" ")
                    )
                })
                .collect()
        }
        // The check itself refused (`EVALSHA`, or the scripts' load).
        Err(e) => match Denial::of(&e) {
            Some(d) => vec![format!("the check's own script: needs {} ({e})", d.need)],
            None => return Err(e),
        },
    };
    if refused.is_empty() {
        return Ok(Asked::Allowed);
    }
    Ok(Asked::Refused(Missing {
        who: Stage::Redis.label(),
        refused,
        remedy: vec![remedy],
    }))
}

/// The grants the MySQL user lacks; `retention`: audit rows are deleted.
pub async fn mysql_asked(mysql: &MysqlStore, retention: bool) -> Result<Asked> {
    Ok(Asked::of(mysql.missing_grants(retention).await?.map(|g| {
        Missing {
            who: Stage::Mysql.label(),
            refused: g.refused,
            remedy: g.remedy,
        }
    })))
}

/// What `mysql.replica_url`'s user lacks on the replica (`replica`: its
/// store).
pub async fn replica_asked(replica: &MysqlStore) -> Result<Asked> {
    Ok(Asked::of(replica.missing_replica_grants().await?.map(
        |g| Missing {
            who: REPLICA,
            refused: g.refused,
            remedy: g.remedy,
        },
    )))
}

/// The replica's name where a refusal is named (as `Denial::who`).
pub const REPLICA: &str = "mysql_replica";

/// Both stores' findings, MySQL's first.
pub async fn missing(
    mysql: &MysqlStore,
    redis: &RedisStore,
    access: &RedisAccess,
    remedy: String,
    retention: bool,
) -> Result<Vec<Missing>> {
    let mut all: Vec<Missing> = mysql_asked(mysql, retention)
        .await?
        .missing()
        .into_iter()
        .collect();
    all.extend(redis_asked(redis, access, remedy).await?.missing());
    Ok(all)
}
