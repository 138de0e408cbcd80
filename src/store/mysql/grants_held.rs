//! Whether this user holds the grants the reconciler needs (rule 18),
//! asked before any is needed: each grant's statement is prepared, never
//! run (MySQL and MariaDB check privileges, to the column, at prepare).

use super::audit::{
    CLOSE_ABANDONED_RUNS, FINISH_RUN, FIX_COLUMNS, FIX_ONCE, INSERT_FIXES, INSERT_RUN, PRUNE_FIXES,
    PRUNE_RUNS, RECENT_FIXES,
};
use super::grants::{
    Grant, GrantsRefused, grantee, migrate_statements, needed, replica_reads, statements_for,
};
use super::orders::{CANCEL_ORDERS, END_ORDER_SEATS};
use super::*;
use crate::error::{Denial, Error, Result};
use sqlx::Executor as _;

/// The statements that need `grant` (the reconciler's own, or one that
/// reads like them).
fn probes(grant: &Grant) -> Vec<String> {
    let fix_values = format!(
        "{INSERT_FIXES}VALUES ({}){FIX_ONCE}",
        ["?"; FIX_COLUMNS].join(", ")
    );
    match (grant.privilege, grant.table) {
        ("SELECT", "reconcile_fix") => vec![RECENT_FIXES.into()],
        ("SELECT", table) => vec![format!("SELECT * FROM {table} WHERE FALSE")],
        ("UPDATE", "ticket_order") => vec![format!("{CANCEL_ORDERS}? WHERE FALSE")],
        ("UPDATE", "order_seat") => vec![format!("{END_ORDER_SEATS} AND FALSE")],
        ("INSERT", "reconcile_run") => vec![INSERT_RUN.into()],
        ("UPDATE", "reconcile_run") => vec![FINISH_RUN.into(), CLOSE_ABANDONED_RUNS.into()],
        ("INSERT" | "UPDATE", "reconcile_fix") => vec![fix_values],
        ("DELETE", "reconcile_fix") => vec![PRUNE_FIXES.into()],
        ("DELETE", "reconcile_run") => vec![PRUNE_RUNS.into()],
        _ => Vec::new(),
    }
}

impl MysqlStore {
    /// The grants this user lacks, each with the `GRANT` that gives it;
    /// `retention`: audit rows are deleted (`audit.retention`). None when
    /// it holds them all.
    pub async fn missing_grants(&self, retention: bool) -> Result<Option<GrantsRefused>> {
        let Some(found) = self.refused(&needed(retention)).await? else {
            return Ok(None);
        };
        Ok(found.into_grants(Vec::new()))
    }

    /// What `mysql.replica_url`'s user lacks on the replica, asked of the
    /// replica: the reads of a pass's chunks, and the privilege to ask
    /// its lag (without it every chunk reads the primary).
    pub async fn missing_replica_grants(&self) -> Result<Option<GrantsRefused>> {
        let Some(found) = self.refused(&replica_reads()).await? else {
            return Ok(None);
        };
        let lag = match self.replica_report().await {
            Ok(_) => Vec::new(),
            Err(e) => match Denial::of(&e) {
                // The server names the privilege it wants: MariaDB's
                // SLAVE MONITOR, MySQL's REPLICATION CLIENT.
                Some(d) => vec![d.need],
                None => return Err(e),
            },
        };
        Ok(found.into_grants(lag))
    }

    /// The statements that give this user what `migrate` needs, in its
    /// database (`grants::migrate_statements`).
    pub async fn migrate_remedy(&self, retention: bool, binlog: bool) -> Result<Vec<String>> {
        let (db, user): (Option<String>, String) =
            sqlx::query_as("SELECT DATABASE(), CURRENT_USER()")
                .fetch_one(&self.pool)
                .await?;
        let db = db.unwrap_or_default();
        Ok(migrate_statements(&db, &grantee(&user), retention, binlog))
    }

    /// Which of `grants` this user lacks in its database (None: no
    /// database in the URL, nothing to check here; the runs say so).
    async fn refused(&self, grants: &[Grant]) -> Result<Option<Refused>> {
        let mut conn = self.pool.acquire().await?;
        let (db, user): (Option<String>, String) =
            sqlx::query_as("SELECT DATABASE(), CURRENT_USER()")
                .fetch_one(&mut *conn)
                .await?;
        let Some(db) = db else {
            return Ok(None);
        };
        let mut refused: Vec<Grant> = Vec::new();
        for grant in grants {
            for sql in probes(grant) {
                let sql = sqlx::SqlSafeStr::into_sql_str(sqlx::AssertSqlSafe(sql));
                match conn.prepare(sql).await.map_err(Error::from) {
                    Ok(_) => {}
                    Err(e) if Denial::of(&e).is_some() => {
                        if !refused.contains(grant) {
                            refused.push(*grant);
                        }
                    }
                    // The server answered otherwise (a table not migrated
                    // yet, a column the schema check names): not a grant's
                    // business; the run that needs it says so.
                    Err(Error::Mysql(sqlx::Error::Database(e))) => {
                        tracing::debug!(grant = ?grant, error = %e, "a grant not checked");
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(Some(Refused {
            db,
            grantee: grantee(&user),
            grants: refused,
        }))
    }
}

/// The grants a user was found to lack in its database.
struct Refused {
    db: String,
    grantee: String,
    grants: Vec<Grant>,
}

impl Refused {
    /// With the server-wide privileges `global` also refused; None when
    /// nothing is.
    fn into_grants(self, global: Vec<String>) -> Option<GrantsRefused> {
        if self.grants.is_empty() && global.is_empty() {
            return None;
        }
        let mut refused: Vec<String> = self
            .grants
            .iter()
            .map(|g| format!("{} on {} ({})", g.privilege, g.table, g.why))
            .collect();
        let mut remedy = statements_for(&self.grants, &self.db, &self.grantee);
        for privilege in global {
            refused.push(format!("{privilege} (to ask the replica its lag)"));
            remedy.push(format!("GRANT {privilege} ON *.* TO {};", self.grantee));
        }
        Some(GrantsRefused { refused, remedy })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every grant is checked by a statement, with or without retention.
    #[test]
    fn every_grant_has_a_statement_that_needs_it() {
        for retention in [false, true] {
            for g in needed(retention) {
                assert!(!probes(&g).is_empty(), "{g:?}");
            }
        }
    }
}
