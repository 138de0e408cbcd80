//! An error that says a store refused a permission (rule 18): told apart
//! from other errors and named as what to give (`+hset`, `UPDATE on
//! ticket_order`).

use super::{Error, Stage};

/// What a store refused: its store and the permission, as the ACL or the
/// GRANT names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Denial {
    pub store: Stage,
    /// MySQL: the replica of `mysql.replica_url` refused it, not the primary.
    pub replica: bool,
    pub need: String,
}

impl Denial {
    /// The permission `e` says was refused, if it is such an error.
    pub fn of(e: &Error) -> Option<Denial> {
        use sqlx::migrate::MigrateError;
        let (store, need) = match e {
            Error::Redis(e) => (Stage::Redis, redis_error_need(e)?),
            Error::Mysql(sqlx::Error::Database(db))
            | Error::Migrate(
                MigrateError::Execute(sqlx::Error::Database(db))
                | MigrateError::ExecuteMigration(sqlx::Error::Database(db), _),
            ) => {
                let e = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()?;
                (Stage::Mysql, mysql_need(e.number(), e.message())?)
            }
            Error::Binlog(mysql_async::Error::Server(e)) => {
                (Stage::Mysql, mysql_need(e.code, &e.message)?)
            }
            // The binlog reader's start names what it lacks, among the
            // server's settings it needs.
            Error::BinlogSetup(lines) => (
                Stage::Mysql,
                lines.iter().find_map(|l| {
                    let rest = l.strip_prefix("missing privilege ")?;
                    Some(rest.split([',', '(']).next()?.trim().to_string())
                })?,
            ),
            _ => return None,
        };
        Some(Denial {
            store,
            replica: false,
            need,
        })
    }

    /// The same refusal, met on the replica.
    pub fn on_replica(self) -> Denial {
        Denial {
            replica: true,
            ..self
        }
    }

    /// Who refused, as `/status` and the metric's `store` label name it:
    /// `mysql`, `mysql_replica` or `redis`.
    pub fn who(&self) -> &'static str {
        if self.replica {
            "mysql_replica"
        } else {
            self.store.label()
        }
    }
}

/// [`redis_need`] of a Redis error, or of the first of a pipeline's.
fn redis_error_need(e: &redis::RedisError) -> Option<String> {
    let of_items = e.clone().into_server_errors().and_then(|items| {
        items
            .iter()
            .find_map(|(_, item)| redis_need(Some(item.code()), item.details().unwrap_or_default()))
    });
    of_items.or_else(|| redis_need(e.code(), e.detail().unwrap_or_default()))
}

/// The permission a Redis error names: the command (`+hset`), or that a
/// key or channel pattern is missing. A script's own refusal does not say
/// which command or key (`check-config` names it).
pub fn redis_need(code: Option<&str>, detail: &str) -> Option<String> {
    if code == Some("NOPERM") {
        if let Some(rest) = detail.split("run the '").nth(1)
            && let Some((command, _)) = rest.split_once('\'')
        {
            return Some(format!("+{command}"));
        }
        if detail.contains("keys") {
            return Some("a key pattern (~)".into());
        }
        if detail.contains("channels") {
            return Some("a channel pattern (&)".into());
        }
        return Some("NOPERM".into());
    }
    if detail.contains("The user executing the script can't run this command") {
        return Some("a command of a script (+)".into());
    }
    if detail.contains("The user executing the script can't access") {
        return Some("a key pattern of a script (~)".into());
    }
    None
}

/// The privilege a MySQL error names: `UPDATE on ticket_order`,
/// `UPDATE on ticket_order.cancel_reason`, a server-wide one such as
/// `REPLICATION SLAVE`, or the database itself.
pub fn mysql_need(code: u16, message: &str) -> Option<String> {
    match code {
        // ER_TABLEACCESS_DENIED_ERROR, ER_COLUMNACCESS_DENIED_ERROR:
        // "UPDATE command denied to user 'u'@'h' for table `db`.`t`" (MySQL:
        // 't'), "... for column 'c' in table 't'".
        1142 | 1143 => {
            let (privilege, rest) = message.split_once(" command denied")?;
            let table = last_name(rest.rsplit_once(" table ")?.1);
            let column = rest
                .split_once(" column ")
                .and_then(|(_, c)| c.split_once(" in table "))
                .map(|(c, _)| last_name(c));
            Some(match column {
                Some(c) => format!("{privilege} on {table}.{c}"),
                None => format!("{privilege} on {table}"),
            })
        }
        // ER_DBACCESS_DENIED_ERROR.
        1044 => Some("access to the database".into()),
        // ER_SPECIFIC_ACCESS_DENIED_ERROR: "Access denied; you need (at
        // least one of) the REPLICATION SLAVE privilege(s) for this
        // operation". Of several, any one will do: the last is the narrow
        // one (before it the broad SUPER the server still takes).
        1227 => {
            let rest = message.split_once(" the ")?.1;
            let listed = rest.split_once(" privilege")?.0;
            Some(listed.rsplit(", ").next()?.trim().to_string())
        }
        _ => None,
    }
}

/// `t` of `` `db`.`t` ``, `'t'` or `t`.
fn last_name(quoted: &str) -> String {
    let name = quoted.trim().rsplit('.').next().unwrap_or_default();
    name.trim_matches(|c| c == '`' || c == '\'' || c == '"')
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_names_the_command_or_the_kind_of_pattern() {
        let nope = |d: &str| redis_need(Some("NOPERM"), d);
        assert_eq!(
            nope("this user has no permissions to run the 'script|load' command"),
            Some("+script|load".into())
        );
        // Redis 6.2's wording.
        assert_eq!(
            nope("User reconciler has no permissions to run the 'hset' command or its subcommand"),
            Some("+hset".into())
        );
        assert_eq!(
            nope("this user has no permissions to access one of the keys used as arguments"),
            Some("a key pattern (~)".into())
        );
        assert_eq!(
            nope("this user has no permissions to access one of the channels used as arguments"),
            Some("a channel pattern (&)".into())
        );
        assert_eq!(
            redis_need(
                Some("ERR"),
                "The user executing the script can't run this command or subcommand script: 5fe8, on @user_script:1."
            ),
            Some("a command of a script (+)".into())
        );
        assert_eq!(redis_need(Some("ERR"), "wrong number of arguments"), None);
        assert_eq!(
            redis_need(Some("WRONGTYPE"), "Operation against a key"),
            None
        );
    }

    #[test]
    fn mysql_names_the_privilege_and_the_table_both_servers_ways() {
        assert_eq!(
            mysql_need(
                1142,
                "UPDATE command denied to user 'r'@'127.0.0.1' for table `seatflow`.`ticket_order`"
            ),
            Some("UPDATE on ticket_order".into())
        );
        assert_eq!(
            mysql_need(
                1142,
                "DELETE command denied to user 'r'@'%' for table 'reconcile_fix'"
            ),
            Some("DELETE on reconcile_fix".into())
        );
        assert_eq!(
            mysql_need(
                1143,
                "UPDATE command denied to user 'r'@'%' for column 'cancel_reason' in table 'ticket_order'"
            ),
            Some("UPDATE on ticket_order.cancel_reason".into())
        );
        assert_eq!(
            mysql_need(
                1227,
                "Access denied; you need (at least one of) the REPLICATION SLAVE privilege(s) for this operation"
            ),
            Some("REPLICATION SLAVE".into())
        );
        // One of several: the narrow one, not SUPER.
        assert_eq!(
            mysql_need(
                1227,
                "Access denied; you need (at least one of) the SUPER, SLAVE MONITOR privilege(s) for this operation"
            ),
            Some("SLAVE MONITOR".into())
        );
        assert_eq!(mysql_need(1205, "Lock wait timeout exceeded"), None);
    }

    #[test]
    fn the_binlog_readers_missing_privilege_is_a_denial_its_missing_settings_are_not() {
        let setup = |lines: &[&str]| {
            Denial::of(&Error::BinlogSetup(
                lines.iter().map(|l| l.to_string()).collect(),
            ))
        };
        assert_eq!(
            setup(&[
                "binlog_format is MIXED, not ROW: SET GLOBAL binlog_format = 'ROW'",
                "missing privilege REPLICATION SLAVE, to read the binlog: GRANT REPLICATION SLAVE ON *.* TO 'r'@'%'",
            ]),
            Some(Denial {
                store: Stage::Mysql,
                replica: false,
                need: "REPLICATION SLAVE".into()
            })
        );
        assert_eq!(
            setup(&["missing privilege REPLICATION CLIENT (MariaDB: BINLOG MONITOR), to read"])
                .map(|d| d.need),
            Some("REPLICATION CLIENT".into())
        );
        assert_eq!(
            setup(&["the binlog is off: start the server with log_bin"]),
            None
        );
    }
}
