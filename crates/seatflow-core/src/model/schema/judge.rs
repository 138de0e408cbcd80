//! The judging: how the schema MySQL has deviates from the contract's
//! ([`judge`]), and for each deviation what the reconciler may still do
//! ([`handling`]: the table in docs/seatflow-contract.md, "When the schema
//! deviates").

use std::borrow::Cow;

use super::types::{self, Family};
use super::uses::{self, Use};
use super::{
    AUDIT_TABLE, CANCEL_REASON_CHARS, COLUMNS, CONTRACT_TABLES, ColumnFacts, ColumnSpec, Deviation,
    DeviationKind, Handling, KEYS, KeySpec, Proof, Reach, Read, SchemaFacts,
};

/// Character sets whose bytes for ASCII text are not ASCII: `BINARY status
/// = 'PAID'` is false for every row of them.
const WIDE_CHARSETS: [&str; 4] = ["ucs2", "utf16", "utf16le", "utf32"];

/// `bigint(20) unsigned NULL`: the type and nullability MySQL has.
fn described(c: &ColumnFacts) -> String {
    format!(
        "{} {}",
        c.column_type,
        if c.nullable { "NULL" } else { "NOT NULL" }
    )
}

/// Every way `facts` deviates from the contract, in the order of
/// [`COLUMNS`], then [`KEYS`], the audit table, the indexes the reads rely
/// on and the triggers.
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
                handling: unreadable(
                    uses::of_table(table),
                    "every read of the table fails".into(),
                ),
            });
        }
    }
    for spec in COLUMNS.iter() {
        if !facts.has_table(spec.table) {
            continue;
        }
        match facts.column(spec.table, spec.column) {
            None => out.push(Deviation {
                fix: add_column(facts, spec),
                ..deviation(
                    spec,
                    DeviationKind::Missing,
                    "no such column".into(),
                    unreadable(
                        uses::of(spec.table, spec.column).and_then(Use::reach),
                        "every read of the column fails".into(),
                    ),
                )
            }),
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
    super::indexes::judge_indexes(facts, &mut out);
    super::indexes::judge_triggers(facts, &mut out);
    super::indexes::judge_checks(facts, &mut out);
    for d in &mut out {
        if d.handling == Handling::Proved(Proof::NullShowtimeRows)
            && !facts.leads_an_index("order_seat", "showtime_id")
        {
            d.handling = Handling::Holds(
                Reach::Lowering,
                "no index leads with order_seat.showtime_id, so its NULL rows cannot be found cheaply".into(),
            );
        }
    }
    out
}

/// `ALTER TABLE t ADD COLUMN c <the contract's definition>`; an
/// AUTO_INCREMENT column must be a key as it is added: the primary one when
/// the table has none (it went with the column), else a unique one.
fn add_column(facts: &SchemaFacts, spec: &ColumnSpec) -> String {
    let key = match spec.extra.contains("AUTO_INCREMENT") {
        false => "",
        true if facts
            .indexes
            .iter()
            .any(|i| i.table == spec.table && i.name == "PRIMARY") =>
        {
            " UNIQUE"
        }
        true => " PRIMARY KEY",
    };
    format!(
        "ALTER TABLE {} ADD COLUMN {} {}{key}",
        spec.table,
        spec.column,
        spec.definition()
    )
}

/// A deviation of `spec`'s column, fixed by giving it the contract's
/// definition (in `charset` when it needs one).
fn deviation(
    spec: &ColumnSpec,
    kind: DeviationKind,
    found: String,
    handling: Handling,
) -> Deviation {
    Deviation {
        table: spec.table,
        column: spec.column,
        kind,
        found,
        expected: spec.definition(),
        fix: modify(spec, None),
        handling,
    }
}

/// `ALTER TABLE t MODIFY c <the contract's definition>`, the character set
/// where MySQL takes it: after the type, before the nullability.
fn modify(spec: &ColumnSpec, charset: Option<&str>) -> String {
    format!(
        "ALTER TABLE {} MODIFY {} {}",
        spec.table,
        spec.column,
        spec.definition_in(charset)
    )
}

/// What a column (or table) that the reads cannot take holds: the jobs
/// that use it ([`uses::USES`]), or nothing when none reads it.
fn unreadable(reach: Option<Reach>, why: Cow<'static, str>) -> Handling {
    match reach {
        Some(reach) => Handling::Holds(reach, why),
        None => Handling::Harmless(
            "no job reads it; the seat map's order leaves it out (inspect shows it empty)",
        ),
    }
}

fn judge_column(spec: &ColumnSpec, found: &ColumnFacts, out: &mut Vec<Deviation>) {
    let reach = uses::of(spec.table, spec.column).and_then(Use::reach);
    if let Err(why) = types::accepts(spec.read, found) {
        out.push(deviation(
            spec,
            DeviationKind::Type,
            described(found),
            unreadable(reach, format!("the reads do not take it: {why}").into()),
        ));
        return;
    }
    let family = Family::of_data_type(&found.data_type);
    if family == Family::Integer
        && found.column_type.contains("unsigned")
        && spec.read != Read::Unread
    {
        out.push(deviation(
            spec,
            DeviationKind::Unsigned,
            described(found),
            handling(spec, DeviationKind::Unsigned),
        ));
    }
    for (differs, kind) in [
        (found.nullable && !spec.nullable, DeviationKind::Nullable),
        (!found.nullable && spec.nullable, DeviationKind::NotNull),
    ] {
        if differs {
            out.push(deviation(
                spec,
                kind,
                described(found),
                handling(spec, kind),
            ));
        }
    }
    // An ENUM's length is its longest member's: its members are judged.
    if let (Some(want), Some(have), true) = (spec.chars, found.max_chars, family == Family::Text)
        && want != have
    {
        let mut d = deviation(
            spec,
            DeviationKind::Length,
            described(found),
            handling(spec, DeviationKind::Length),
        );
        if spec.column == "cancel_reason" && have >= CANCEL_REASON_CHARS {
            d.handling =
                Handling::Harmless("wide enough for the RECONCILE_EXPIRED the cancel writes");
        }
        out.push(d);
    }
    if matches!(spec.read, Read::Spelled(_))
        && let Some(cs) = &found.charset
        && WIDE_CHARSETS.contains(&cs.as_str())
    {
        out.push(Deviation {
            expected: "utf8mb4".into(),
            fix: modify(spec, Some("utf8mb4")),
            ..deviation(
                spec,
                DeviationKind::Charset,
                format!("CHARACTER SET {cs}"),
                unreadable(
                    reach,
                    "BINARY status = 'ON_SALE' compares the column's bytes, which for ASCII text in this character set are not ASCII".into(),
                ),
            )
        });
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
    // A binary `order_seat.seat_no` compares bytes: no two template seats
    // are one seat to it (its type is its own deviation, with its fix).
    let (Some(charset), Some(collation)) = (&rows.charset, &rows.collation) else {
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
            "ALTER TABLE hall_seat MODIFY seat_no VARCHAR({}) CHARACTER SET {charset} COLLATE {collation} NOT NULL",
            // `order_seat.seat_no`'s own width (the template's names are
            // its names), within what `migrate` lets the audit hold.
            rows.max_chars.unwrap_or(16).clamp(16, 512),
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
    // A binary `order_seat.seat_no` (no collation) compares bytes: two
    // template seats are one seat to it only when byte-equal, and the
    // template reads byte-equal names as one seat already.
    let (Some(charset), Some(collation)) = (&rows.charset, &rows.collation) else {
        return None;
    };
    if keyed && same {
        return None;
    }
    Some(Proof::SeatGroups {
        charset: charset.clone(),
        collation: collation.clone(),
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
                "a seat name longer than the audit's column is not repaired (its audit row would not fit)"
                    .into(),
            ),
        });
    }
}

/// The decision for a deviating column: what may it touch? The table in
/// docs/seatflow-contract.md says the same, with the reasons.
pub fn handling(spec: &ColumnSpec, kind: DeviationKind) -> Handling {
    use DeviationKind as K;
    let table = spec.table;
    match kind {
        // A column the reads cannot take holds the jobs that use it.
        K::MissingTable | K::Missing | K::Type | K::Charset => unreadable(
            uses::of(table, spec.column).and_then(Use::reach),
            "the reads cannot take the column".into(),
        ),
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
                "the cancel chain sets active = NULL, which the column refuses".into(),
            ),
            _ => Handling::Harmless("the reads take every value the column can hold"),
        },
        K::Length => match (table, spec.column) {
            ("ticket_order", "cancel_reason") => Handling::Holds(
                Reach::Cancels,
                "the cancel writes RECONCILE_EXPIRED (17 characters) into it".into(),
            ),
            _ => Handling::Harmless(
                "values are read whole; a longer seat_no needs an audit column as wide (reconcile_fix.seat_no)",
            ),
        },
        K::Collation | K::MissingKey | K::Index | K::Trigger | K::Check => {
            Handling::Harmless("judged elsewhere")
        }
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
            "no index leads with ticket_order.id: the cancel's locking read would lock every order"
                .into(),
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
                    "a unique key over a prefix of seat_no makes two seat names one seat to MySQL"
                        .into(),
                )
            } else {
                Handling::Harmless(
                    "the reads compare seat_no with the column's own collation and take two valid rows on a seat as unknown; nothing stops seatflow from selling a seat twice, though",
                )
            }
        }
    }
}
