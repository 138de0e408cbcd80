//! Least privilege (rule 18): what the Redis user must be allowed
//! (`redis_acl`: the documented rule) and the start's check of both stores
//! (`check`). The MySQL grants are `store::mysql::grants`; what a store
//! refused while running is `crate::run::refusals`.

pub mod probe;
// The ACL's judgement is pure (seatflow-core).
pub use seatflow_core::redis_acl;
pub mod start;

use crate::config::{RedisEvents, Settings};
use redis_acl::RedisAccess;

/// What a check found a store's user may not do, and what to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// Whose user: `mysql`, `mysql_replica` or `redis` (as `/status`
    /// names a refusal).
    pub who: &'static str,
    /// Each refused use or privilege, with what allows it.
    pub refused: Vec<String>,
    /// The statements that give the user what it needs.
    pub remedy: Vec<String>,
}

impl Missing {
    /// A refusal met (at connect, or by a check's own script), with what
    /// to run.
    pub fn of(denial: crate::error::Denial, remedy: Vec<String>) -> Missing {
        Missing {
            who: denial.who(),
            refused: vec![denial.need],
            remedy,
        }
    }
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} user may not do what the reconciler needs: {}; run: {}",
            self.who,
            self.refused.join("; "),
            self.remedy.join(" ")
        )
    }
}

/// How the settings use Redis; `subscribes`: the caller subscribes to
/// keyspace events when they are on (the daemon; `once` does not).
pub fn redis_access(settings: &Settings, subscribes: bool) -> RedisAccess {
    let r = &settings.redis;
    let db = redis::IntoConnectionInfo::into_connection_info(r.url.expose())
        .map(|info| info.redis_settings().db())
        .unwrap_or(0);
    RedisAccess {
        key_prefix: r.key_prefix.clone(),
        db,
        cluster: !r.cluster_urls.is_empty(),
        events: subscribes && settings.changes.redis_events == RedisEvents::Auto,
    }
}

/// The Redis user's name in `redis.url` (`default` when it names none).
pub fn redis_user(settings: &Settings) -> String {
    let url = settings
        .redis
        .cluster_urls
        .first()
        .unwrap_or(&settings.redis.url);
    url::Url::parse(url.expose())
        .ok()
        .map(|u| u.username().to_string())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

#[cfg(test)]
mod tests {
    use super::redis_acl::RedisAccess;
    use crate::store::mysql::grants::{grant_statements, migrate_statements};

    const DEPLOY_GUIDE: &str = include_str!("../../../deploy/README.md");

    /// deploy/README.md's lines are what the start's check asks for, word
    /// for word: an operator who pastes them gets a working reconciler.
    #[test]
    fn the_deploy_guide_gives_exactly_the_acl_lines_the_probe_asks_for() {
        for (cluster, events) in [(false, true), (true, true), (false, false)] {
            let access = RedisAccess {
                key_prefix: "seatflow:".into(),
                db: 0,
                cluster,
                events,
            };
            let line = format!("\n{}\n", access.setuser("reconciler"));
            let indented = line.replace('\n', "\n  ");
            assert!(
                DEPLOY_GUIDE.contains(&line)
                    || DEPLOY_GUIDE.contains(indented.trim_end_matches(' ')),
                "deploy/README.md, \"Redis ACL\", lacks (cluster {cluster}, events {events}):{line}"
            );
        }
    }

    #[test]
    fn the_deploy_guide_gives_exactly_the_grants_the_probe_asks_for() {
        for statements in [
            grant_statements("seatflow", "'reconciler'@'%'", true, true),
            migrate_statements("seatflow", "'reconciler'@'%'", true, true),
        ] {
            let block = format!("```sql\n{}\n```", statements.join("\n"));
            assert!(
                DEPLOY_GUIDE.contains(&block),
                "deploy/README.md, \"MySQL grants\", should have:\n{block}"
            );
        }
    }
}
