//! The judging: how the schema MySQL has deviates from the contract's
//! ([`judge`]), and for each deviation what the reconciler may still do
//! ([`handling`]: the table in docs/seatflow-contract.md, "When the schema
//! deviates").

use super::Family::{DateTime, Integer, Text};
use super::{
    AUDIT_TABLE, CANCEL_REASON_CHARS, COLUMNS, CONTRACT_TABLES, ColumnFacts, ColumnSpec, Deviation,
    DeviationKind, Family, Handling, KEYS, KeySpec, Proof, Reach, SchemaFacts,
};

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
                "a row with no seat_no may hold any seat of its showtime: the sweep and the confirmation read such rows and lower nothing in that showtime",
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
