//! Asks the server which of the reconciler's uses its ACL refuses this user
//! (rule 18), before any is needed: `redis.acl_check_cmd` in a script, on
//! the single server or on every primary of a cluster (each has its own
//! ACL). Nothing is run and nothing written.

use super::*;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};

/// What the server said about the uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AclVerdict {
    /// The indexes of the refused uses (none: every use is allowed), with
    /// the node that refused them in a cluster.
    Refused(Vec<(usize, Option<String>)>),
    /// The server cannot tell (Redis before 7.0 has no `acl_check_cmd`).
    CannotTell,
}

impl RedisStore {
    /// Which of `uses` (each a command's words) this user may not make,
    /// asked without making them.
    pub async fn acl_refuses(&self, uses: &[&[String]]) -> Result<AclVerdict> {
        let mut cmd = evalsha(&ACL_CHECK, &[]);
        for argv in uses {
            cmd.arg(argv.len());
            for word in argv.iter() {
                cmd.arg(word);
            }
        }
        let replies: Vec<(Option<String>, Value)> = match &self.conn {
            RedisConn::Single(_) => vec![(None, self.pipeline(&[cmd]).await?.remove(0)?)],
            RedisConn::Cluster(conn) => {
                self.trip();
                let reply = conn
                    .clone()
                    .route_command(
                        cmd,
                        RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
                    )
                    .await?;
                let Value::Map(replies) = reply else {
                    return Err(Error::Protocol(format!(
                        "the ACL check on every primary: {reply:?}"
                    )));
                };
                replies
                    .into_iter()
                    .map(|(addr, reply)| Ok((Some(from_value::<String>(addr)?), reply)))
                    .collect::<Result<_>>()?
            }
        };
        let mut refused = Vec::new();
        for (node, reply) in replies {
            if let Value::Int(-1) = reply {
                return Ok(AclVerdict::CannotTell);
            }
            for n in from_value::<Vec<usize>>(reply)? {
                let index = n
                    .checked_sub(1)
                    .filter(|i| *i < uses.len())
                    .ok_or_else(|| {
                        Error::Protocol(format!("the ACL check named use {n} of {}", uses.len()))
                    })?;
                refused.push((index, node.clone()));
            }
        }
        Ok(AclVerdict::Refused(refused))
    }
}
