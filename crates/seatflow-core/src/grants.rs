//! The MySQL grants the reconciler's user needs (rule 18), table by table,
//! as the statements an operator runs (**pure**). The product's
//! `store/mysql/grants_held.rs` checks each by preparing (never running) a
//! statement that needs it.

/// One privilege on one table, and why it is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub privilege: &'static str,
    pub table: &'static str,
    pub why: &'static str,
}

const fn grant(privilege: &'static str, table: &'static str, why: &'static str) -> Grant {
    Grant {
        privilege,
        table,
        why,
    }
}

/// What the reconciler does with the database; `retention`: audit rows
/// older than `audit.retention` are deleted (any value but `"0s"`).
pub fn needed(retention: bool) -> Vec<Grant> {
    let retained =
        |table| retention.then(|| grant("DELETE", table, "audit retention (audit.retention)"));
    [
        Some(grant("SELECT", "hall_seat", "the templates")),
        Some(grant("SELECT", "showtime", "the showtimes on sale")),
        Some(grant("SELECT", "ticket_order", "the orders")),
        Some(grant("UPDATE", "ticket_order", "cancelling expired orders")),
        Some(grant("SELECT", "order_seat", "the seats orders hold")),
        Some(grant(
            "UPDATE",
            "order_seat",
            "releasing an expired order's seats",
        )),
        Some(grant("SELECT", "reconcile_run", "the audit: runs")),
        Some(grant("INSERT", "reconcile_run", "the audit: runs")),
        Some(grant(
            "UPDATE",
            "reconcile_run",
            "the audit: runs' outcomes",
        )),
        retained("reconcile_run"),
        Some(grant("SELECT", "reconcile_fix", "the audit: repairs")),
        Some(grant("INSERT", "reconcile_fix", "the audit: repairs")),
        Some(grant(
            "UPDATE",
            "reconcile_fix",
            "the audit: a repair recorded twice is one",
        )),
        retained("reconcile_fix"),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// `migrate`'s bookkeeping table (sqlx's: the migrations applied).
pub const MIGRATIONS_TABLE: &str = "_sqlx_migrations";

/// What `migrate` needs besides what [`needed`] gives the same user: the
/// reconciler's own tables made and altered, and its bookkeeping. Every
/// table's grant holds CREATE, so that MySQL and MariaDB take it before
/// the table exists (a fresh database); ALTER TABLE also needs the
/// table's INSERT (MySQL), which the run-time grants give.
pub fn migrate_needs() -> Vec<Grant> {
    let made = "migrate: the reconciler's own tables";
    let altered = "migrate: their later versions (indexes, seat_no as wide as the contract's)";
    let booked = "migrate: the migrations applied";
    vec![
        grant("CREATE", "reconcile_run", made),
        grant("ALTER", "reconcile_run", altered),
        grant("CREATE", "reconcile_fix", made),
        grant("ALTER", "reconcile_fix", altered),
        grant("SELECT", MIGRATIONS_TABLE, booked),
        grant("INSERT", MIGRATIONS_TABLE, booked),
        grant("UPDATE", MIGRATIONS_TABLE, booked),
        grant("CREATE", MIGRATIONS_TABLE, booked),
    ]
}

/// The statements that give `grantee` what the reconciler and its
/// `migrate` need ([`grant_statements`] with [`migrate_needs`]): the one
/// block for a user that runs both, each given before the tables exist.
pub fn migrate_statements(db: &str, grantee: &str, retention: bool, binlog: bool) -> Vec<String> {
    let mut grants = needed(retention);
    grants.extend(migrate_needs());
    let mut statements = statements_for(&grants, db, grantee);
    if binlog {
        statements.push(format!("GRANT {BINLOG_GRANT} ON *.* TO {grantee};"));
    }
    statements
}

/// What a pass's bulk reads need of `mysql.replica_url`'s user on the
/// replica (besides the privilege to ask its lag, which the server's
/// refusal names): the contract's tables, read.
pub fn replica_reads() -> Vec<Grant> {
    needed(false)
        .into_iter()
        .filter(|g| g.privilege == "SELECT" && !g.table.starts_with("reconcile_"))
        .collect()
}

/// The grants a user was found to lack, and the statements that give them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantsRefused {
    /// Each one, as `UPDATE on ticket_order (cancelling expired orders)`.
    pub refused: Vec<String>,
    /// One `GRANT` per table.
    pub remedy: Vec<String>,
}

/// The binlog reader's (`changes.mysql_binlog`): server-wide, as
/// replication is.
pub const BINLOG_GRANT: &str = "REPLICATION SLAVE, REPLICATION CLIENT";

/// `'user'@'host'` from `CURRENT_USER()`'s `user@host`.
pub fn grantee(current_user: &str) -> String {
    match current_user.rsplit_once('@') {
        Some((user, host)) => format!("'{user}'@'{host}'"),
        None => format!("'{current_user}'"),
    }
}

/// One `GRANT` of `privileges` on `table` of `db`.
pub fn grant_statement(privileges: &[&str], db: &str, table: &str, grantee: &str) -> String {
    format!(
        "GRANT {} ON `{}`.`{table}` TO {grantee};",
        privileges.join(", "),
        db.replace('`', "``")
    )
}

/// The statements that give `grantee` exactly what `needed` says, one per
/// table, and the binlog reader's when it reads the binlog.
pub fn grant_statements(db: &str, grantee: &str, retention: bool, binlog: bool) -> Vec<String> {
    let mut statements = statements_for(&needed(retention), db, grantee);
    if binlog {
        statements.push(format!("GRANT {BINLOG_GRANT} ON *.* TO {grantee};"));
    }
    statements
}

/// One `GRANT` per table of `grants`, in their order, with its privileges.
pub fn statements_for(grants: &[Grant], db: &str, grantee: &str) -> Vec<String> {
    let mut tables: Vec<&str> = Vec::new();
    for g in grants {
        if !tables.contains(&g.table) {
            tables.push(g.table);
        }
    }
    tables
        .iter()
        .map(|t| {
            let privileges: Vec<&str> = grants
                .iter()
                .filter(|g| g.table == *t)
                .map(|g| g.privilege)
                .collect();
            grant_statement(&privileges, db, t, grantee)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_table_gets_one_statement_with_its_privileges() {
        assert_eq!(
            grant_statements("seatflow", "'reconciler'@'%'", true, true),
            [
                "GRANT SELECT ON `seatflow`.`hall_seat` TO 'reconciler'@'%';",
                "GRANT SELECT ON `seatflow`.`showtime` TO 'reconciler'@'%';",
                "GRANT SELECT, UPDATE ON `seatflow`.`ticket_order` TO 'reconciler'@'%';",
                "GRANT SELECT, UPDATE ON `seatflow`.`order_seat` TO 'reconciler'@'%';",
                "GRANT SELECT, INSERT, UPDATE, DELETE ON `seatflow`.`reconcile_run` TO 'reconciler'@'%';",
                "GRANT SELECT, INSERT, UPDATE, DELETE ON `seatflow`.`reconcile_fix` TO 'reconciler'@'%';",
                "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'reconciler'@'%';",
            ]
        );
    }

    #[test]
    fn without_retention_nothing_is_deleted_and_without_binlog_nothing_replicated() {
        let statements = grant_statements("db", "'u'@'%'", false, false).join("\n");
        assert!(!statements.contains("DELETE"), "{statements}");
        assert!(!statements.contains("REPLICATION"), "{statements}");
    }

    #[test]
    fn migrate_adds_ddl_only_on_the_reconcilers_tables_each_with_create() {
        let statements = migrate_statements("seatflow", "'r'@'%'", true, false);
        assert_eq!(
            statements[4..],
            [
                "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER ON `seatflow`.`reconcile_run` TO 'r'@'%';",
                "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER ON `seatflow`.`reconcile_fix` TO 'r'@'%';",
                "GRANT SELECT, INSERT, UPDATE, CREATE ON `seatflow`.`_sqlx_migrations` TO 'r'@'%';",
            ]
        );
        // seatflow's own tables: as at run time.
        assert_eq!(
            statements[..4],
            grant_statements("seatflow", "'r'@'%'", true, false)[..4]
        );
    }

    #[test]
    fn a_replica_is_only_read() {
        let tables: Vec<&str> = replica_reads().iter().map(|g| g.table).collect();
        assert_eq!(
            tables,
            ["hall_seat", "showtime", "ticket_order", "order_seat"]
        );
        assert!(replica_reads().iter().all(|g| g.privilege == "SELECT"));
    }

    #[test]
    fn the_grantee_is_quoted_as_mysql_names_it() {
        assert_eq!(grantee("reconciler@%"), "'reconciler'@'%'");
        assert_eq!(grantee("a@b@10.0.0.1"), "'a@b'@'10.0.0.1'");
        assert_eq!(grantee("x"), "'x'");
        assert_eq!(
            grant_statement(&["SELECT"], "we`ird", "t", "'u'@'%'"),
            "GRANT SELECT ON `we``ird`.`t` TO 'u'@'%';"
        );
    }
}
