//! The schema the contract relies on, judged against the one MySQL has
//! (rule 17). Pure: the store reads `information_schema` into
//! [`SchemaFacts`]; [`judge`] says how it deviates from the contract and,
//! for each deviation, what the reconciler may still do
//! ([`Handling`]). What a data check then finds decides the holds
//! (`model::holds`). The table of decisions is in
//! docs/seatflow-contract.md ("When the schema deviates"); it and
//! [`handling`] say the same things.

use std::fmt;

/// The contract's tables the reconciler reads (`hall` is never read).
pub const CONTRACT_TABLES: [&str; 4] = ["hall_seat", "showtime", "ticket_order", "order_seat"];

/// The reconciler's audit table: its `seat_no` copies the contract's.
pub const AUDIT_TABLE: &str = "reconcile_fix";

/// What the reconciler writes into `ticket_order.cancel_reason`.
pub const CANCEL_REASON_CHARS: u64 = "RECONCILE_EXPIRED".len() as u64;

/// A column's type family: the types the reconciler reads the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Any integer type (signed; an unsigned one is its own deviation).
    Integer,
    /// Any string type, with the contract's length.
    Text(u64),
    /// `DATETIME` or `TIMESTAMP`, any precision.
    DateTime,
}

/// One column as the contract defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnSpec {
    pub table: &'static str,
    pub column: &'static str,
    /// As the contract writes it: the `MODIFY` of the fix.
    pub definition: &'static str,
    pub family: Family,
    pub nullable: bool,
}

const fn col(
    table: &'static str,
    column: &'static str,
    definition: &'static str,
    family: Family,
    nullable: bool,
) -> ColumnSpec {
    ColumnSpec {
        table,
        column,
        definition,
        family,
        nullable,
    }
}

use Family::{DateTime, Integer, Text};

/// Every column of the contract's tables, as `migrations/reference`
/// creates them.
pub const COLUMNS: [ColumnSpec; 24] = [
    col("hall_seat", "hall_id", "BIGINT NOT NULL", Integer, false),
    col(
        "hall_seat",
        "seat_no",
        "VARCHAR(16) NOT NULL",
        Text(16),
        false,
    ),
    col("hall_seat", "row_label", "VARCHAR(8) NULL", Text(8), true),
    col("hall_seat", "col_no", "INT NULL", Integer, true),
    col(
        "hall_seat",
        "enabled",
        "TINYINT(1) NOT NULL DEFAULT 1",
        Integer,
        false,
    ),
    col("showtime", "id", "BIGINT NOT NULL", Integer, false),
    col("showtime", "movie_id", "BIGINT NOT NULL", Integer, false),
    col("showtime", "hall_id", "BIGINT NOT NULL", Integer, false),
    col(
        "showtime",
        "starts_at",
        "DATETIME(3) NOT NULL",
        DateTime,
        false,
    ),
    col(
        "showtime",
        "status",
        "VARCHAR(16) NOT NULL",
        Text(16),
        false,
    ),
    col(
        "ticket_order",
        "id",
        "BIGINT NOT NULL AUTO_INCREMENT",
        Integer,
        false,
    ),
    col(
        "ticket_order",
        "order_no",
        "VARCHAR(40) NOT NULL",
        Text(40),
        false,
    ),
    col("ticket_order", "user_id", "BIGINT NOT NULL", Integer, false),
    col(
        "ticket_order",
        "showtime_id",
        "BIGINT NOT NULL",
        Integer,
        false,
    ),
    col(
        "ticket_order",
        "status",
        "VARCHAR(16) NOT NULL",
        Text(16),
        false,
    ),
    col(
        "ticket_order",
        "expires_at",
        "DATETIME(3) NOT NULL",
        DateTime,
        false,
    ),
    col(
        "ticket_order",
        "created_at",
        "DATETIME(3) NOT NULL",
        DateTime,
        false,
    ),
    col(
        "ticket_order",
        "paid_at",
        "DATETIME(3) NULL",
        DateTime,
        true,
    ),
    col(
        "ticket_order",
        "cancelled_at",
        "DATETIME(3) NULL",
        DateTime,
        true,
    ),
    col(
        "ticket_order",
        "cancel_reason",
        "VARCHAR(32) NULL",
        Text(32),
        true,
    ),
    col("order_seat", "order_id", "BIGINT NOT NULL", Integer, false),
    col(
        "order_seat",
        "showtime_id",
        "BIGINT NOT NULL",
        Integer,
        false,
    ),
    col(
        "order_seat",
        "seat_no",
        "VARCHAR(16) NOT NULL",
        Text(16),
        false,
    ),
    col(
        "order_seat",
        "active",
        "TINYINT(1) NULL DEFAULT 1",
        Integer,
        true,
    ),
];

/// A key the contract relies on: a unique index over exactly these columns
/// (whole columns, no prefix), whatever its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    pub table: &'static str,
    /// The contract's name for it (the metric's `column` label).
    pub name: &'static str,
    pub columns: &'static [&'static str],
    /// The fix when it is missing.
    pub add: &'static str,
}

pub const KEYS: [KeySpec; 5] = [
    KeySpec {
        table: "hall_seat",
        name: "PRIMARY",
        columns: &["hall_id", "seat_no"],
        add: "ALTER TABLE hall_seat ADD PRIMARY KEY (hall_id, seat_no)",
    },
    KeySpec {
        table: "showtime",
        name: "PRIMARY",
        columns: &["id"],
        add: "ALTER TABLE showtime ADD PRIMARY KEY (id)",
    },
    KeySpec {
        table: "ticket_order",
        name: "PRIMARY",
        columns: &["id"],
        add: "ALTER TABLE ticket_order ADD PRIMARY KEY (id)",
    },
    KeySpec {
        table: "order_seat",
        name: "PRIMARY",
        columns: &["order_id", "seat_no"],
        add: "ALTER TABLE order_seat ADD PRIMARY KEY (order_id, seat_no)",
    },
    KeySpec {
        table: "order_seat",
        name: "uq_occupancy",
        columns: &["showtime_id", "seat_no", "active"],
        add: "ALTER TABLE order_seat ADD UNIQUE KEY uq_occupancy (showtime_id, seat_no, active)",
    },
];

/// One column as `information_schema.COLUMNS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnFacts {
    pub table: String,
    pub column: String,
    /// `DATA_TYPE`, lower case: `bigint`, `varchar`.
    pub data_type: String,
    /// `COLUMN_TYPE`, lower case: `bigint(20) unsigned`.
    pub column_type: String,
    pub nullable: bool,
    /// `CHARACTER_MAXIMUM_LENGTH` (characters) of a string type.
    pub max_chars: Option<u64>,
    pub charset: Option<String>,
    pub collation: Option<String>,
}

/// One index as `information_schema.STATISTICS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFacts {
    pub table: String,
    pub name: String,
    pub unique: bool,
    /// In order: each column, and its prefix length when only a prefix is indexed.
    pub columns: Vec<(String, Option<u64>)>,
}

/// The schema MySQL has for the contract's tables and the audit table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchemaFacts {
    pub columns: Vec<ColumnFacts>,
    pub indexes: Vec<IndexFacts>,
}

impl SchemaFacts {
    pub fn column(&self, table: &str, column: &str) -> Option<&ColumnFacts> {
        self.columns
            .iter()
            .find(|c| c.table == table && c.column == column)
    }

    fn has_table(&self, table: &str) -> bool {
        self.columns.iter().any(|c| c.table == table)
    }

    /// A unique index over exactly `columns`, no prefix.
    fn has_unique(&self, table: &str, columns: &[&str]) -> bool {
        self.indexes.iter().any(|i| {
            i.table == table
                && i.unique
                && i.columns.len() == columns.len()
                && i.columns
                    .iter()
                    .zip(columns)
                    .all(|((c, prefix), want)| c == want && prefix.is_none())
        })
    }

    /// Some index (unique or not) whose first column is `column`: a data
    /// check on it is an index range.
    pub fn leads_an_index(&self, table: &str, column: &str) -> bool {
        self.indexes
            .iter()
            .any(|i| i.table == table && i.columns.first().is_some_and(|(c, _)| c == column))
    }
}

/// How a schema deviates (the metric's `kind` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviationKind {
    MissingTable,
    MissingColumn,
    /// Another type family (a string where a number is read, …).
    Type,
    /// An unsigned integer where the contract has a signed one.
    Unsigned,
    /// NULL allowed where the contract says NOT NULL.
    Nullable,
    /// NOT NULL where the contract allows NULL.
    NotNull,
    /// Another length of a string column.
    Length,
    /// A character set in which the exact comparisons see other bytes.
    Charset,
    /// `hall_seat.seat_no` compared otherwise than `order_seat.seat_no`.
    Collation,
    /// A key the contract relies on is missing (or covers other columns,
    /// or a prefix).
    MissingKey,
}

impl DeviationKind {
    pub fn label(self) -> &'static str {
        match self {
            DeviationKind::MissingTable => "missing_table",
            DeviationKind::MissingColumn => "missing_column",
            DeviationKind::Type => "type",
            DeviationKind::Unsigned => "unsigned",
            DeviationKind::Nullable => "nullable",
            DeviationKind::NotNull => "not_null",
            DeviationKind::Length => "length",
            DeviationKind::Charset => "charset",
            DeviationKind::Collation => "collation",
            DeviationKind::MissingKey => "missing_key",
        }
    }
}

/// A data check that decides whether a deviation holds anything now: each
/// an index range or a read of the (small) template table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Proof {
    /// `order_seat` rows whose `showtime_id` is NULL (an index range).
    NullShowtimeRows,
    /// Showtime ids on more than one row (`showtime` has no unique id).
    DuplicateShowtimes,
    /// Enabled template seats of one hall that `order_seat.seat_no`'s
    /// comparison takes as one name: in this character set and collation.
    SeatGroups { charset: String, collation: String },
    /// Ids beyond BIGINT in an unsigned key column (`showtime`,
    /// `ticket_order`): those rows are never read.
    IdsBeyondBigint { table: &'static str },
}

/// What a deviation may touch when it is not harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reach {
    /// No seat is lowered anywhere (raises MySQL proves go on).
    Lowering,
    /// No seat write anywhere (the reads it would rest on cannot be trusted).
    SeatWrites,
    /// No expired order is cancelled.
    Cancels,
    /// Seat writes and cancels.
    Everything,
    /// Repairs of seats whose name does not fit the audit's column.
    LongSeatNames,
}

/// What the reconciler does about a deviation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handling {
    /// Harmless whatever the data: how the reads take it.
    Harmless(&'static str),
    /// Harmless while the data check finds nothing; what it finds is held
    /// (`model::holds` decides how far).
    Proved(Proof),
    /// Holds this regardless of the data.
    Holds(Reach, &'static str),
}

/// One way the schema deviates from the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deviation {
    pub table: &'static str,
    /// A column, or a key's contract name (`PRIMARY`, `uq_occupancy`), or
    /// empty for a missing table.
    pub column: &'static str,
    pub kind: DeviationKind,
    /// What MySQL has: `bigint(20) unsigned NULL`, `utf8mb4_bin`.
    pub found: String,
    /// What the contract says.
    pub expected: String,
    /// The statement that would bring the schema back to the contract.
    pub fix: String,
    pub handling: Handling,
}

impl fmt::Display for Deviation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.column.is_empty() {
            self.table.to_string()
        } else {
            format!("{}.{}", self.table, self.column)
        };
        write!(
            f,
            "{what} ({}): {}, the contract has {}",
            self.kind.label(),
            self.found,
            self.expected
        )
    }
}

/// Character sets whose bytes for ASCII text are not ASCII: `BINARY status
/// = 'PAID'` is false for every row of them.
const WIDE_CHARSETS: [&str; 4] = ["ucs2", "utf16", "utf16le", "utf32"];

fn family_of(data_type: &str) -> Option<Family> {
    Some(match data_type {
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" => Integer,
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "binary"
        | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" | "enum" => Text(0),
        "datetime" | "timestamp" => DateTime,
        _ => return None,
    })
}

/// `bigint(20) unsigned NULL`: the type and nullability MySQL has.
fn described(c: &ColumnFacts) -> String {
    format!(
        "{} {}",
        c.column_type,
        if c.nullable { "NULL" } else { "NOT NULL" }
    )
}

/// Every way `facts` deviates from the contract, in the order of
/// [`COLUMNS`] and then [`KEYS`].
pub fn judge(facts: &SchemaFacts) -> Vec<Deviation> {
    let mut out = Vec::new();
    for table in CONTRACT_TABLES {
        if !facts.has_table(table) {
            out.push(Deviation {
                table,
                column: "",
                kind: DeviationKind::MissingTable,
                found: "no such table".into(),
                expected: "the table".into(),
                fix: "seatflow-reconciler migrate --reference-schema (or your seatflow's own migration)".into(),
                handling: Handling::Holds(Reach::Everything, "every read of it fails"),
            });
        }
    }
    for spec in COLUMNS.iter() {
        if !facts.has_table(spec.table) {
            continue;
        }
        match facts.column(spec.table, spec.column) {
            None => out.push(deviation(
                spec,
                DeviationKind::MissingColumn,
                "no such column".into(),
            )),
            Some(found) => judge_column(spec, found, &mut out),
        }
    }
    judge_seat_comparison(facts, &mut out);
    for key in KEYS.iter() {
        if facts.has_table(key.table) && !facts.has_unique(key.table, key.columns) {
            out.push(Deviation {
                table: key.table,
                column: key.name,
                kind: DeviationKind::MissingKey,
                found: indexes_of(facts, key.table),
                expected: format!("a unique key over ({})", key.columns.join(", ")),
                fix: key.add.into(),
                handling: handling_of_key(facts, key),
            });
        }
    }
    judge_audit(facts, &mut out);
    for d in &mut out {
        if d.handling == Handling::Proved(Proof::NullShowtimeRows)
            && !facts.leads_an_index("order_seat", "showtime_id")
        {
            d.handling = Handling::Holds(
                Reach::Lowering,
                "no index leads with order_seat.showtime_id, so its NULL rows cannot be found cheaply",
            );
        }
    }
    out
}

fn deviation(spec: &ColumnSpec, kind: DeviationKind, found: String) -> Deviation {
    Deviation {
        table: spec.table,
        column: spec.column,
        kind,
        found,
        expected: spec.definition.into(),
        fix: format!(
            "ALTER TABLE {} MODIFY {} {}",
            spec.table, spec.column, spec.definition
        ),
        handling: handling(spec, kind),
    }
}

fn judge_column(spec: &ColumnSpec, found: &ColumnFacts, out: &mut Vec<Deviation>) {
    let family = family_of(&found.data_type);
    let same_family = match (spec.family, family) {
        (Text(_), Some(Text(_))) => true,
        (want, Some(have)) => want == have,
        (_, None) => false,
    };
    if !same_family {
        out.push(deviation(spec, DeviationKind::Type, described(found)));
        return;
    }
    if spec.family == Integer && found.column_type.contains("unsigned") {
        out.push(deviation(spec, DeviationKind::Unsigned, described(found)));
    }
    if found.nullable && !spec.nullable {
        out.push(deviation(spec, DeviationKind::Nullable, described(found)));
    }
    if !found.nullable && spec.nullable {
        out.push(deviation(spec, DeviationKind::NotNull, described(found)));
    }
    if let (Text(want), Some(have)) = (spec.family, found.max_chars)
        && want != have
    {
        let mut d = deviation(spec, DeviationKind::Length, described(found));
        if spec.column == "cancel_reason" && have >= CANCEL_REASON_CHARS {
            d.handling =
                Handling::Harmless("wide enough for the RECONCILE_EXPIRED the cancel writes");
        }
        out.push(d);
    }
    if matches!(spec.family, Text(_))
        && spec.column == "status"
        && let Some(cs) = &found.charset
        && WIDE_CHARSETS.contains(&cs.as_str())
    {
        let mut d = deviation(spec, DeviationKind::Charset, format!("CHARACTER SET {cs}"));
        d.expected = "utf8mb4".into();
        d.fix = format!(
            "ALTER TABLE {} MODIFY {} {} CHARACTER SET utf8mb4",
            spec.table, spec.column, spec.definition
        );
        out.push(d);
    }
}

/// `hall_seat.seat_no` in another character set or collation than
/// `order_seat.seat_no`: two template seats may then be one seat to
/// `uq_occupancy`.
fn judge_seat_comparison(facts: &SchemaFacts, out: &mut Vec<Deviation>) {
    let (Some(template), Some(rows)) = (
        facts.column("hall_seat", "seat_no"),
        facts.column("order_seat", "seat_no"),
    ) else {
        return;
    };
    if template.collation == rows.collation && template.charset == rows.charset {
        return;
    }
    let name = |c: &ColumnFacts| {
        format!(
            "{} {}",
            c.charset.as_deref().unwrap_or("binary"),
            c.collation.as_deref().unwrap_or("binary")
        )
    };
    out.push(Deviation {
        table: "hall_seat",
        column: "seat_no",
        kind: DeviationKind::Collation,
        found: name(template),
        expected: format!("order_seat.seat_no's {}", name(rows)),
        fix: format!(
            "ALTER TABLE hall_seat MODIFY seat_no VARCHAR({}) CHARACTER SET {} COLLATE {} NOT NULL",
            template.max_chars.unwrap_or(16).max(16),
            rows.charset.as_deref().unwrap_or("binary"),
            rows.collation.as_deref().unwrap_or("binary")
        ),
        handling: seat_groups(facts).map_or(
            Handling::Harmless("no comparison to make"),
            Handling::Proved,
        ),
    });
}

/// The comparison under which template seats must be distinct: that of
/// `order_seat.seat_no` (`uq_occupancy`'s), when `hall_seat`'s own key
/// does not already make them so (another comparison, or no key).
pub fn seat_groups(facts: &SchemaFacts) -> Option<Proof> {
    let template = facts.column("hall_seat", "seat_no")?;
    let rows = facts.column("order_seat", "seat_no")?;
    let keyed = facts.has_unique("hall_seat", &["hall_id", "seat_no"]);
    let same = template.collation == rows.collation && template.charset == rows.charset;
    if keyed && same {
        return None;
    }
    Some(Proof::SeatGroups {
        charset: rows.charset.clone().unwrap_or_else(|| "binary".into()),
        collation: rows.collation.clone().unwrap_or_else(|| "binary".into()),
    })
}

fn indexes_of(facts: &SchemaFacts, table: &str) -> String {
    let keys: Vec<String> = facts
        .indexes
        .iter()
        .filter(|i| i.table == table && i.unique)
        .map(|i| {
            let cols: Vec<String> = i
                .columns
                .iter()
                .map(|(c, prefix)| match prefix {
                    Some(n) => format!("{c}({n})"),
                    None => c.clone(),
                })
                .collect();
            format!("{} ({})", i.name, cols.join(", "))
        })
        .collect();
    if keys.is_empty() {
        "no unique key".into()
    } else {
        format!("unique keys {}", keys.join(", "))
    }
}

/// `reconcile_fix.seat_no` narrower than a contract `seat_no`: the audit of
/// a longer seat name would not fit (rule 10: such a repair is not made).
fn judge_audit(facts: &SchemaFacts, out: &mut Vec<Deviation>) {
    let Some(audit) = facts.column(AUDIT_TABLE, "seat_no") else {
        return;
    };
    let widest = ["hall_seat", "order_seat"]
        .iter()
        .filter_map(|t| facts.column(t, "seat_no")?.max_chars)
        .max()
        .unwrap_or(16);
    let width = audit.max_chars.unwrap_or(0);
    if width < widest {
        out.push(Deviation {
            table: AUDIT_TABLE,
            column: "seat_no",
            kind: DeviationKind::Length,
            found: described(audit),
            expected: format!("at least VARCHAR({widest}), as wide as the contract's seat_no"),
            fix: format!(
                "seatflow-reconciler migrate (ALTER TABLE {AUDIT_TABLE} MODIFY seat_no VARCHAR({widest}) NULL)"
            ),
            handling: Handling::Holds(
                Reach::LongSeatNames,
                "a seat name longer than the audit's column is not repaired (its audit row would not fit)",
            ),
        });
    }
}

/// The decision for a deviating column: what may it touch? The table in
/// docs/seatflow-contract.md says the same, with the reasons.
pub fn handling(spec: &ColumnSpec, kind: DeviationKind) -> Handling {
    use DeviationKind as K;
    let table = spec.table;
    let read = !matches!(
        (table, spec.column),
        ("showtime", "movie_id")
            | ("ticket_order", "user_id" | "order_no")
            | ("hall_seat", "row_label" | "col_no")
    );
    match kind {
        K::MissingTable | K::MissingColumn | K::Type | K::Charset if !read => Handling::Harmless(
            "not read, or read for display and order only (a value that does not decode is shown as empty)",
        ),
        K::MissingTable | K::MissingColumn => {
            Handling::Holds(Reach::Everything, "every read of the column fails")
        }
        K::Type | K::Charset => match (table, spec.column) {
            ("ticket_order", "cancel_reason") => Handling::Holds(
                Reach::Cancels,
                "the cancel writes RECONCILE_EXPIRED into it",
            ),
            ("ticket_order" | "order_seat", _) => Handling::Holds(
                Reach::Everything,
                "SQL compares it in another type's terms: which order holds a seat, and which is due, cannot be trusted",
            ),
            _ => Handling::Holds(
                Reach::SeatWrites,
                "SQL compares it in another type's terms: which showtime is on sale, and which template is its, cannot be trusted",
            ),
        },
        K::Unsigned => match (table, spec.column) {
            ("showtime", "id") => Handling::Proved(Proof::IdsBeyondBigint { table: "showtime" }),
            ("ticket_order", "id") => Handling::Proved(Proof::IdsBeyondBigint {
                table: "ticket_order",
            }),
            _ => Handling::Harmless(
                "read row by row: a value beyond BIGINT makes its row unknown (rule 16)",
            ),
        },
        K::Nullable => match (table, spec.column) {
            ("order_seat", "showtime_id") => Handling::Proved(Proof::NullShowtimeRows),
            ("order_seat", "seat_no") => Handling::Harmless(
                "a row with no seat_no may hold any seat of its showtime: the sweep and the re-check read such rows and lower nothing in that showtime",
            ),
            ("order_seat", "order_id") => Handling::Harmless(
                "a row with no order_id has no order: held (unknown) while active = 1, ended while NULL, as the contract reads a row whose order is gone",
            ),
            ("hall_seat", "seat_no" | "hall_id") => Handling::Harmless(
                "a template row with no seat or no hall is no seat of any hall: reported, never written",
            ),
            _ => Handling::Harmless(
                "read row by row: a NULL makes its row unknown (rule 16), reported with its key",
            ),
        },
        K::NotNull => match (table, spec.column) {
            ("order_seat", "active") => Handling::Holds(
                Reach::Cancels,
                "the cancel chain sets active = NULL, which the column refuses",
            ),
            _ => Handling::Harmless("the reads take every value the column can hold"),
        },
        K::Length => match (table, spec.column) {
            ("ticket_order", "cancel_reason") => Handling::Holds(
                Reach::Cancels,
                "the cancel writes RECONCILE_EXPIRED (17 characters) into it",
            ),
            _ => Handling::Harmless(
                "values are read whole; a longer seat_no needs an audit column as wide (reconcile_fix.seat_no)",
            ),
        },
        K::Collation | K::MissingKey => Handling::Harmless("judged elsewhere"),
    }
}

/// The decision for a missing key the contract relies on.
fn handling_of_key(facts: &SchemaFacts, key: &KeySpec) -> Handling {
    match (key.table, key.name) {
        ("hall_seat", _) => seat_groups(facts).map_or(
            Handling::Harmless("template seats are distinct"),
            Handling::Proved,
        ),
        ("showtime", _) => Handling::Proved(Proof::DuplicateShowtimes),
        ("ticket_order", _) if facts.leads_an_index("ticket_order", "id") => Handling::Harmless(
            "the cancel checks, in its transaction, that each order's id is on one row (an id on two rows is not cancelled)",
        ),
        ("ticket_order", _) => Handling::Holds(
            Reach::Cancels,
            "no index leads with ticket_order.id: the cancel's locking read would lock every order",
        ),
        ("order_seat", "PRIMARY") => {
            Handling::Harmless("a row read twice says the same thing twice")
        }
        _ => {
            let prefixed = facts.indexes.iter().any(|i| {
                i.table == "order_seat"
                    && i.unique
                    && i.columns.iter().any(|(c, p)| c == "seat_no" && p.is_some())
            });
            if prefixed {
                Handling::Holds(
                    Reach::Lowering,
                    "a unique key over a prefix of seat_no makes two seat names one seat to MySQL",
                )
            } else {
                Handling::Harmless(
                    "the reads compare seat_no with the column's own collation and take two valid rows on a seat as unknown; nothing stops seatflow from selling a seat twice, though",
                )
            }
        }
    }
}

#[cfg(test)]
mod tests;
