//! The schema MySQL has for the contract's tables (rule 17): two reads of
//! `information_schema`, judged by `model::schema`, and the data checks
//! its deviations need (each an index range, or a read of the small
//! template table). The last verdict is kept with the store: its reads
//! adapt to it (`ReadShape`) and the jobs obey its holds.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::sql::*;
use super::*;
use crate::error::Result;
use crate::model::holds::{ContractState, Finding};
use crate::model::schema::{
    self, CheckFacts, ColumnFacts, IndexFacts, Proof, SchemaFacts, TriggerFacts,
};
use crate::model::{SeatNo, ShowtimeId};

/// The columns of the contract's tables and the audit table.
/// docs/seatflow-contract.md's checklist runs this same text (a test
/// compares them), as it runs [`INDEXES_QUERY`].
///
/// The two are sent as text (`raw_sql`), not as prepared statements, and
/// with no UNION or ORDER BY (the rows are sorted here): MariaDB 10.11.19
/// crashed once in our CI (SIGSEGV in `free_tmp_table` under
/// `Prepared_statement::execute`) re-executing the earlier single
/// statement, a UNION of both tables ordered in SQL, from sqlx's cache of
/// prepared statements. We could not reproduce it; this shape leaves
/// MariaDB no prepared statement over `information_schema` to re-execute
/// and no temporary table but the ones `information_schema` itself needs.
pub const COLUMNS_QUERY: &str = "\
SELECT TABLE_NAME AS tbl, COLUMN_NAME AS col,
       DATA_TYPE AS data_type, COLUMN_TYPE AS column_type, IS_NULLABLE AS nullable,
       CAST(CHARACTER_MAXIMUM_LENGTH AS SIGNED) AS max_chars,
       CHARACTER_SET_NAME AS charset, COLLATION_NAME AS collation
  FROM information_schema.COLUMNS
 WHERE TABLE_SCHEMA = DATABASE()
   AND TABLE_NAME IN ('hall_seat', 'showtime', 'ticket_order', 'order_seat', 'reconcile_fix')";

/// Every index column of the same tables (see [`COLUMNS_QUERY`]).
pub const INDEXES_QUERY: &str = "\
SELECT TABLE_NAME AS tbl, COLUMN_NAME AS col, INDEX_NAME AS index_name,
       CAST(NON_UNIQUE AS SIGNED) AS non_unique, CAST(SEQ_IN_INDEX AS SIGNED) AS seq,
       CAST(SUB_PART AS SIGNED) AS sub_part
  FROM information_schema.STATISTICS
 WHERE TABLE_SCHEMA = DATABASE()
   AND TABLE_NAME IN ('hall_seat', 'showtime', 'ticket_order', 'order_seat', 'reconcile_fix')";

/// The triggers on the contract's tables (see [`COLUMNS_QUERY`]): each may
/// refuse or rewrite the cancel's writes. `information_schema.TRIGGERS`
/// lists only the triggers of tables the user has the TRIGGER privilege
/// on: the reconciler's least-privilege user sees none, and every cancel is
/// read back before its seats are released all the same.
pub const TRIGGERS_QUERY: &str = "\
SELECT EVENT_OBJECT_TABLE AS tbl, TRIGGER_NAME AS name,
       ACTION_TIMING AS timing, EVENT_MANIPULATION AS event
  FROM information_schema.TRIGGERS
 WHERE TRIGGER_SCHEMA = DATABASE()
   AND EVENT_OBJECT_TABLE IN ('hall_seat', 'showtime', 'ticket_order', 'order_seat')";

/// The CHECK constraints on the contract's tables (see [`COLUMNS_QUERY`]):
/// one may refuse the cancel's writes (MariaDB's JSON type is
/// `json_valid(col)`). Joined by name with the table's constraints, as
/// both MySQL and MariaDB describe them.
pub const CHECKS_QUERY: &str = "\
SELECT tc.TABLE_NAME AS tbl, cc.CONSTRAINT_NAME AS name, cc.CHECK_CLAUSE AS clause
  FROM information_schema.TABLE_CONSTRAINTS tc
  JOIN information_schema.CHECK_CONSTRAINTS cc
    ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA AND cc.CONSTRAINT_NAME = tc.CONSTRAINT_NAME
 WHERE tc.CONSTRAINT_TYPE = 'CHECK' AND tc.TABLE_SCHEMA = DATABASE()
   AND tc.TABLE_NAME IN ('hall_seat', 'showtime', 'ticket_order', 'order_seat')";

/// Rows a data check lists at most; more is "and more", held as a whole.
const LISTED: usize = 100;

/// `order_seat` rows with no showtime that may hold a seat (not ended by
/// the contract's own cancel or refund), with their order's showtime: an
/// index range of `uq_occupancy`.
pub const NULL_SHOWTIME_ROWS: &str = "\
SELECT os.order_id, os.seat_no, o.showtime_id AS order_showtime
  FROM order_seat os LEFT JOIN ticket_order o ON o.id = os.order_id
 WHERE os.showtime_id IS NULL
   AND NOT (os.active IS NULL AND (o.id IS NULL OR BINARY o.status IN ('CANCELLED', 'REFUNDED')))
 LIMIT 101";

/// Showtime ids on more than one row (when `showtime` has no unique id).
pub const DUPLICATE_SHOWTIMES: &str =
    "SELECT id FROM showtime GROUP BY id HAVING COUNT(*) > 1 ORDER BY id LIMIT 101";

/// A verdict and when it was reached.
type Checked = (Arc<ContractState>, Instant);

/// The last verdict on the schema, shared by every clone of the store.
#[derive(Clone, Default)]
pub(super) struct ContractCell(Arc<RwLock<Option<Checked>>>);

impl ContractCell {
    fn get(&self) -> Option<Checked> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, state: Arc<ContractState>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some((state, Instant::now()));
    }
}

/// A character set or collation name as `information_schema` gives it,
/// checked before it goes into SQL text.
fn identifier(name: &str) -> Option<&str> {
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .then_some(name)
}

impl MysqlStore {
    /// The last verdict on the schema (the contract's own shape, holding
    /// nothing, before the first [`MysqlStore::judge_contract`]).
    pub fn contract(&self) -> Arc<ContractState> {
        self.contract
            .get()
            .map_or_else(|| Arc::new(ContractState::default()), |(s, _)| s)
    }

    /// The verdict when it is younger than `age`; None when it is older or
    /// there is none yet.
    pub fn contract_within(&self, age: Duration) -> Option<Arc<ContractState>> {
        self.contract
            .get()
            .filter(|(_, at)| at.elapsed() < age)
            .map(|(s, _)| s)
    }

    /// Reads the schema, judges it and runs the data checks its deviations
    /// need; keeps the verdict. A data check that fails counts as finding
    /// the worst (its deviation holds).
    pub async fn judge_contract(&self) -> Result<Arc<ContractState>> {
        let facts = self.schema_facts().await?;
        let deviations = schema::judge(&facts);
        let mut findings = HashMap::new();
        for proof in ContractState::proofs(&deviations) {
            let finding = self
                .prove(&proof)
                .await
                .unwrap_or_else(|e| Finding::Failed(e.to_string()));
            findings.insert(proof, finding);
        }
        let state = Arc::new(ContractState::judge(&facts, deviations, &findings));
        self.contract.set(Arc::clone(&state));
        Ok(state)
    }

    /// The contract's tables as `information_schema` describes them. A
    /// table or column this user may not read is an error naming the
    /// refused grant (rule 18), never a missing one: see [`Self::unseen`].
    pub async fn schema_facts(&self) -> Result<SchemaFacts> {
        let facts = self.described().await?;
        self.unseen(&facts).await?;
        Ok(facts)
    }

    /// `information_schema` shows a user only the tables and columns it
    /// holds a privilege on: one the facts lack may be refused, not
    /// missing. Each such table is asked itself (a statement prepared,
    /// never run): a refusal is returned as the error; a table or column
    /// that is truly not there is the judge's to report.
    async fn unseen(&self, facts: &SchemaFacts) -> Result<()> {
        let audit = std::iter::once((schema::AUDIT_TABLE, "seat_no"));
        let expected = schema::COLUMNS.iter().map(|c| (c.table, c.column));
        let mut asked: Vec<&str> = Vec::new();
        for (table, column) in expected.chain(audit) {
            if facts.column(table, column).is_some() || asked.contains(&table) {
                continue;
            }
            asked.push(table);
            let sql = format!("SELECT * FROM `{table}` WHERE FALSE");
            let mut conn = self.pool.acquire().await?;
            let sql = sqlx::SqlSafeStr::into_sql_str(sqlx::AssertSqlSafe(sql));
            if let Err(e) = sqlx::Executor::prepare(&mut *conn, sql).await {
                let e = crate::error::Error::from(e);
                if crate::error::Denial::of(&e).is_some() {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// What `information_schema` says of the contract's tables.
    async fn described(&self) -> Result<SchemaFacts> {
        let columns = sqlx::raw_sql(COLUMNS_QUERY).fetch_all(&self.pool).await?;
        let mut index_rows = sqlx::raw_sql(INDEXES_QUERY).fetch_all(&self.pool).await?;
        let triggers = sqlx::raw_sql(TRIGGERS_QUERY).fetch_all(&self.pool).await?;
        let checks = sqlx::raw_sql(CHECKS_QUERY).fetch_all(&self.pool).await?;
        let mut facts = SchemaFacts::default();
        for r in &checks {
            facts.checks.push(CheckFacts {
                table: lossy(r, "tbl"),
                name: lossy(r, "name"),
                clause: lossy(r, "clause"),
            });
        }
        facts
            .checks
            .sort_by(|a, b| (&a.table, &a.name).cmp(&(&b.table, &b.name)));
        facts.checks.dedup();
        for r in &triggers {
            facts.triggers.push(TriggerFacts {
                table: lossy(r, "tbl"),
                name: lossy(r, "name"),
                timing: lossy(r, "timing").to_ascii_uppercase(),
                event: lossy(r, "event").to_ascii_uppercase(),
            });
        }
        facts
            .triggers
            .sort_by(|a, b| (&a.table, &a.name).cmp(&(&b.table, &b.name)));
        for r in &columns {
            facts.columns.push(ColumnFacts {
                table: lossy(r, "tbl"),
                column: lossy(r, "col"),
                data_type: lossy(r, "data_type").to_ascii_lowercase(),
                // As MySQL has it: the type lower case, ENUM members as spelled.
                column_type: lossy(r, "column_type"),
                nullable: lossy(r, "nullable") == "YES",
                max_chars: int(r, "max_chars").ok().map(|n| n.max(0) as u64),
                charset: text(r, "charset").ok(),
                collation: text(r, "collation").ok(),
            });
        }
        facts
            .columns
            .sort_by(|a, b| (&a.table, &a.column).cmp(&(&b.table, &b.column)));
        // An index's columns in their order, the indexes of a table together.
        index_rows
            .sort_by_cached_key(|r| (lossy(r, "tbl"), lossy(r, "index_name"), int(r, "seq").ok()));
        for r in &index_rows {
            let (table, name) = (lossy(r, "tbl"), lossy(r, "index_name"));
            let part = (
                lossy(r, "col"),
                int(r, "sub_part").ok().map(|n| n.max(0) as u64),
            );
            match facts.indexes.last_mut() {
                Some(i) if i.table == table && i.name == name => i.columns.push(part),
                _ => facts.indexes.push(IndexFacts {
                    table,
                    name,
                    unique: int(r, "non_unique") == Ok(0),
                    columns: vec![part],
                }),
            }
        }
        Ok(facts)
    }

    async fn prove(&self, proof: &Proof) -> Result<Finding> {
        Ok(match proof {
            Proof::NullShowtimeRows => {
                let rows = sqlx::query(NULL_SHOWTIME_ROWS)
                    .fetch_all(&self.pool)
                    .await?;
                let more = rows.len() > LISTED;
                let rows = rows
                    .iter()
                    .take(LISTED)
                    .map(|r| {
                        let order = int(r, "order_id")
                            .map_or_else(|_| "NULL".to_string(), |id| id.to_string());
                        let seat = text(r, "seat_no").unwrap_or_else(|_| "NULL".into());
                        (
                            format!("order_seat order {order} seat {seat}"),
                            int(r, "order_showtime").ok(),
                        )
                    })
                    .collect();
                Finding::NullShowtimeRows { rows, more }
            }
            Proof::DuplicateShowtimes => {
                let rows = sqlx::query(DUPLICATE_SHOWTIMES)
                    .fetch_all(&self.pool)
                    .await?;
                let more = rows.len() > LISTED;
                let ids: Vec<ShowtimeId> = rows
                    .iter()
                    .take(LISTED)
                    .filter_map(|r| int(r, "id").ok())
                    .collect();
                // An id that does not decode cannot be held alone.
                let more = more || ids.len() < rows.len().min(LISTED);
                Finding::DuplicateShowtimes { ids, more }
            }
            Proof::SeatGroups { charset, collation } => {
                let (groups, more) = self
                    .seat_groups(charset, collation, GroupsOf::Everywhere)
                    .await?;
                Finding::SeatGroups { groups, more }
            }
            Proof::IdsBeyondBigint { table } => {
                let rows = sqlx::query(sqlx::AssertSqlSafe(ids_beyond_bigint(table)))
                    .fetch_all(&self.pool)
                    .await?;
                let more = rows.len() > LISTED;
                let ids = rows.iter().take(LISTED).map(|r| lossy(r, "id")).collect();
                Finding::IdsBeyondBigint { ids, more }
            }
        })
    }

    /// Enabled template seats that `order_seat.seat_no`'s comparison
    /// (`charset`, `collation`) takes as one name: each group's names,
    /// byte-distinct, keyed by hall (or by showtime, for
    /// [`GroupsOf::Showtimes`]); and whether there were more groups than
    /// listed (only [`GroupsOf::Everywhere`] is cut short).
    pub async fn seat_groups(
        &self,
        charset: &str,
        collation: &str,
        of: GroupsOf<'_>,
    ) -> Result<(Vec<(i64, Vec<SeatNo>)>, bool)> {
        let (Some(cs), Some(coll)) = (identifier(charset), identifier(collation)) else {
            return Err(crate::error::Error::MysqlInvariant(format!(
                "order_seat.seat_no's character set {charset:?} or collation {collation:?} is not a name"
            )));
        };
        let everywhere = matches!(of, GroupsOf::Everywhere);
        let mut q = seat_groups_query(cs, coll, of);
        let rows = q.build().fetch_all(&self.pool).await?;
        let more = everywhere && rows.len() > LISTED;
        let listed = if everywhere { LISTED } else { rows.len() };
        let mut groups = Vec::new();
        for r in rows.iter().take(listed) {
            let Ok(owner) = int(r, "owner") else {
                continue;
            };
            let mut seats: Vec<SeatNo> =
                serde_json::from_str(&lossy(r, "seats")).unwrap_or_default();
            seats.sort();
            seats.dedup();
            if seats.len() > 1 {
                groups.push((owner, seats));
            }
        }
        Ok((groups, more))
    }
}

/// `SELECT … FROM <table> WHERE id > BIGINT's end`: ids the pages never
/// reach (an unsigned key column), at most 101.
pub fn ids_beyond_bigint(table: &str) -> String {
    format!(
        "SELECT CAST(id AS CHAR) AS id FROM {table} WHERE id > 9223372036854775807 ORDER BY id LIMIT 101"
    )
}

/// Groups of enabled template seats that the comparison `cs`/`coll` (two
/// checked names: `order_seat.seat_no`'s) takes for one name, per hall, or
/// per showtime for [`GroupsOf::Showtimes`]: `GROUP BY` under the
/// comparison, so it is MySQL's own equality (case, accents, trailing
/// spaces as the collation has them); each group's names as a JSON array.
pub fn seat_groups_query<'a>(
    cs: &str,
    coll: &str,
    of: GroupsOf<'a>,
) -> sqlx::QueryBuilder<sqlx::MySql> {
    let (key, from) = match of {
        GroupsOf::Showtimes(_) => (
            "s.id",
            "showtime s JOIN hall_seat hs ON hs.hall_id = s.hall_id",
        ),
        _ => ("hs.hall_id", "hall_seat hs"),
    };
    let mut q = sqlx::QueryBuilder::<sqlx::MySql>::new(format!(
        "SELECT {key} AS owner, JSON_ARRAYAGG(hs.seat_no) AS seats FROM {from} WHERE hs.enabled = 1"
    ));
    match of {
        GroupsOf::Everywhere => {}
        GroupsOf::Halls(ids) => push_in(&mut q, "hs.hall_id", ids),
        GroupsOf::Showtimes(ids) => push_in(&mut q, "s.id", ids),
    }
    // `binary` is a character set and a collation no `COLLATE` names (a
    // syntax error): the comparison of bytes is `CAST(… AS BINARY)`.
    let compared = if cs.eq_ignore_ascii_case("binary") || coll.eq_ignore_ascii_case("binary") {
        "CAST(hs.seat_no AS BINARY)".to_string()
    } else {
        format!("CONVERT(hs.seat_no USING {cs}) COLLATE {coll}")
    };
    q.push(format_args!(
        " GROUP BY {key}, {compared} \
         HAVING COUNT(DISTINCT CAST(hs.seat_no AS BINARY)) > 1 ORDER BY {key}"
    ));
    if matches!(of, GroupsOf::Everywhere) {
        q.push(" LIMIT 101");
    }
    q
}

/// Where [`MysqlStore::seat_groups`] looks.
#[derive(Debug, Clone, Copy)]
pub enum GroupsOf<'a> {
    Everywhere,
    Halls(NonEmpty<'a, i64>),
    Showtimes(NonEmpty<'a, ShowtimeId>),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/seatflow-contract.md's read-only checklist runs the statements
    /// the reconciler runs, word for word.
    #[test]
    fn the_checklist_runs_the_reconcilers_own_statements() {
        let doc = include_str!("../../../docs/seatflow-contract.md");
        let groups = seat_groups_query("utf8mb4", "utf8mb4_general_ci", GroupsOf::Everywhere);
        for statement in [
            COLUMNS_QUERY.to_string(),
            INDEXES_QUERY.to_string(),
            TRIGGERS_QUERY.to_string(),
            CHECKS_QUERY.to_string(),
            NULL_SHOWTIME_ROWS.to_string(),
            DUPLICATE_SHOWTIMES.to_string(),
            groups.sql().as_str().to_string(),
            ids_beyond_bigint("showtime"),
        ] {
            assert!(
                doc.contains(&format!("{statement};\n")),
                "the checklist lacks:\n{statement}"
            );
        }
    }

    #[test]
    fn only_names_go_into_the_statements() {
        assert_eq!(identifier("utf8mb4_0900_ai_ci"), Some("utf8mb4_0900_ai_ci"));
        for bad in ["", "utf8mb4 ", "x; DROP TABLE t", "a-b", "é"] {
            assert_eq!(identifier(bad), None, "{bad:?}");
        }
    }
}
