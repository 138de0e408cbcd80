//! The start's check (rule 18): what each store's user may not do of what
//! the reconciler will need, asked of the servers without doing it (Redis:
//! `acl_check_cmd`; MySQL: statements prepared, never run).

use super::Missing;
use super::redis_acl::{self, RedisAccess};
use crate::error::{Denial, Result, Stage};
use crate::store::mysql::MysqlStore;
use crate::store::redis::{AclVerdict, RedisStore};

/// What the Redis user may not do of `access`'s uses, with `remedy`, the
/// rule to run (the daemon's whole rule: one rule serves every command). A server that cannot tell (before Redis 7.0) is said in
/// the log and passes: a refusal is then met, and named, when it comes.
pub async fn redis_missing(
    redis: &RedisStore,
    access: &RedisAccess,
    remedy: String,
) -> Result<Option<Missing>> {
    let uses = access.uses();
    let argvs: Vec<&[String]> = uses.iter().map(|u| u.argv.as_slice()).collect();
    let refused: Vec<String> = match redis.acl_refuses(&argvs).await {
        Ok(AclVerdict::CannotTell) => {
            tracing::warn!(
                "this Redis cannot check its ACL ahead (acl_check_cmd needs Redis 7.0): a missing permission is named when it is met"
            );
            return Ok(None);
        }
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
        return Ok(None);
    }
    Ok(Some(Missing {
        store: Stage::Redis,
        refused,
        remedy: vec![remedy],
    }))
}

/// The grants the MySQL user lacks; `retention`: audit rows are deleted.
pub async fn mysql_missing(mysql: &MysqlStore, retention: bool) -> Result<Option<Missing>> {
    Ok(mysql.missing_grants(retention).await?.map(|g| Missing {
        store: Stage::Mysql,
        refused: g.refused,
        remedy: g.remedy,
    }))
}

/// Both stores' findings, MySQL's first.
pub async fn missing(
    mysql: &MysqlStore,
    redis: &RedisStore,
    access: &RedisAccess,
    remedy: String,
    retention: bool,
) -> Result<Vec<Missing>> {
    let mut all: Vec<Missing> = mysql_missing(mysql, retention).await?.into_iter().collect();
    all.extend(redis_missing(redis, access, remedy).await?);
    Ok(all)
}
