use super::*;
use crate::model::holds::{ContractState, Finding, Holds, ReadShape, SeatHold};
use std::collections::HashMap;

/// The reference schema as MariaDB describes it, with the audit table.
fn contract() -> SchemaFacts {
    let mut columns: Vec<ColumnFacts> = COLUMNS
        .iter()
        .map(|c| {
            let (data_type, column_type, max_chars) = match c.family {
                Family::Integer if c.column == "col_no" => ("int", "int(11)".to_string(), None),
                Family::Integer if c.definition.starts_with("TINYINT") => {
                    ("tinyint", "tinyint(1)".to_string(), None)
                }
                Family::Integer => ("bigint", "bigint(20)".to_string(), None),
                Family::Text(n) => ("varchar", format!("varchar({n})"), Some(n)),
                Family::DateTime => ("datetime", "datetime(3)".to_string(), None),
            };
            let text = max_chars.is_some();
            ColumnFacts {
                table: c.table.into(),
                column: c.column.into(),
                data_type: data_type.into(),
                column_type,
                nullable: c.nullable,
                max_chars,
                charset: text.then(|| "utf8mb4".into()),
                collation: text.then(|| "utf8mb4_general_ci".into()),
            }
        })
        .collect();
    columns.push(ColumnFacts {
        table: AUDIT_TABLE.into(),
        column: "seat_no".into(),
        data_type: "varchar".into(),
        column_type: "varchar(16)".into(),
        nullable: true,
        max_chars: Some(16),
        charset: Some("utf8mb4".into()),
        collation: Some("utf8mb4_general_ci".into()),
    });
    let mut indexes: Vec<IndexFacts> = KEYS
        .iter()
        .map(|k| IndexFacts {
            table: k.table.into(),
            name: k.name.into(),
            unique: true,
            columns: k.columns.iter().map(|c| (c.to_string(), None)).collect(),
        })
        .collect();
    indexes.push(IndexFacts {
        table: "ticket_order".into(),
        name: "idx_order_showtime_status".into(),
        unique: false,
        columns: vec![("showtime_id".into(), None), ("status".into(), None)],
    });
    SchemaFacts { columns, indexes }
}

fn column<'a>(facts: &'a mut SchemaFacts, table: &str, name: &str) -> &'a mut ColumnFacts {
    facts
        .columns
        .iter_mut()
        .find(|c| c.table == table && c.column == name)
        .expect("a contract column")
}

fn kinds(deviations: &[Deviation]) -> Vec<(&str, &str, DeviationKind)> {
    deviations
        .iter()
        .map(|d| (d.table, d.column, d.kind))
        .collect()
}

fn decide(facts: &SchemaFacts, findings: &[(Proof, Finding)]) -> ContractState {
    let findings: HashMap<Proof, Finding> = findings.iter().cloned().collect();
    ContractState::decide(facts, judge(facts), &findings)
}

#[test]
fn the_reference_schema_deviates_in_nothing() {
    let facts = contract();
    assert_eq!(judge(&facts), Vec::new());
    let state = decide(&facts, &[]);
    assert!(state.holds.is_empty());
    assert_eq!(state.shape.audit_seat_chars, Some(16));
    assert_eq!(
        ReadShape {
            audit_seat_chars: None,
            ..state.shape
        },
        ReadShape::default()
    );
}

/// The user's case: `order_seat.showtime_id` made NULL-able. Harmless
/// while no row has a NULL; a row whose order names its showtime holds
/// lowering there; one that names none holds it everywhere.
#[test]
fn a_nullable_showtime_id_is_proved_on_the_data() {
    let mut facts = contract();
    column(&mut facts, "order_seat", "showtime_id").nullable = true;
    let found = judge(&facts);
    assert_eq!(
        kinds(&found),
        [("order_seat", "showtime_id", DeviationKind::Nullable)]
    );
    assert_eq!(found[0].handling, Handling::Proved(Proof::NullShowtimeRows));
    assert_eq!(
        found[0].fix,
        "ALTER TABLE order_seat MODIFY showtime_id BIGINT NOT NULL"
    );

    let none = Finding::NullShowtimeRows {
        rows: vec![],
        more: false,
    };
    let state = decide(&facts, &[(Proof::NullShowtimeRows, none)]);
    assert!(state.holds.is_empty());
    assert!(!state.judged[0].holds, "{:?}", state.judged);
    assert!(state.shape.null_showtime_rows);

    let attributed = Finding::NullShowtimeRows {
        rows: vec![("order 7 seat A-1".into(), Some(5))],
        more: false,
    };
    let state = decide(&facts, &[(Proof::NullShowtimeRows, attributed)]);
    assert!(state.judged[0].holds);
    assert_eq!(state.holds.seat(5).0, SeatHold::Lowering);
    assert_eq!(state.holds.seat(6).0, SeatHold::None);

    for anywhere in [
        Finding::NullShowtimeRows {
            rows: vec![("order 7 seat A-1".into(), None)],
            more: false,
        },
        Finding::NullShowtimeRows {
            rows: vec![("order 7 seat A-1".into(), Some(5))],
            more: true,
        },
        Finding::Failed("timeout".into()),
    ] {
        let state = decide(&facts, &[(Proof::NullShowtimeRows, anywhere.clone())]);
        assert_eq!(state.holds.seat(6).0, SeatHold::Lowering, "{anywhere:?}");
    }
    // No finding at all (the check was not run) holds as a failed one.
    assert_eq!(decide(&facts, &[]).holds.seat(6).0, SeatHold::Lowering);

    // Without an index that leads with the column, no check is cheap.
    facts.indexes.retain(|i| i.name != "uq_occupancy");
    let found = judge(&facts);
    let nullable = found
        .iter()
        .find(|d| d.kind == DeviationKind::Nullable)
        .expect("the deviation");
    assert!(matches!(
        nullable.handling,
        Handling::Holds(Reach::Lowering, _)
    ));
}

/// One NULL-able column of every other kind is read row by row: harmless
/// whatever the data, and nothing is held.
#[test]
fn other_nullable_columns_are_read_row_by_row() {
    for (table, name) in [
        ("ticket_order", "showtime_id"),
        ("ticket_order", "status"),
        ("ticket_order", "expires_at"),
        ("showtime", "hall_id"),
        ("showtime", "status"),
        ("hall_seat", "enabled"),
        ("hall_seat", "seat_no"),
        ("order_seat", "order_id"),
        ("order_seat", "seat_no"),
    ] {
        let mut facts = contract();
        column(&mut facts, table, name).nullable = true;
        let found = judge(&facts);
        assert_eq!(kinds(&found), [(table, name, DeviationKind::Nullable)]);
        assert!(
            matches!(found[0].handling, Handling::Harmless(_)),
            "{table}.{name}: {:?}",
            found[0].handling
        );
        assert!(decide(&facts, &[]).holds.is_empty(), "{table}.{name}");
    }
}

/// The user's case: a template whose `seat_no` compares otherwise than
/// `order_seat`'s; and the other ways for two template seats to be one
/// seat to `uq_occupancy`: another character set, or no key on the template.
#[test]
fn template_seats_are_grouped_under_order_seats_comparison() {
    let mut facts = contract();
    column(&mut facts, "hall_seat", "seat_no").collation = Some("utf8mb4_bin".into());
    let found = judge(&facts);
    assert_eq!(
        kinds(&found),
        [("hall_seat", "seat_no", DeviationKind::Collation)]
    );
    let groups = Proof::SeatGroups {
        charset: "utf8mb4".into(),
        collation: "utf8mb4_general_ci".into(),
    };
    assert_eq!(found[0].handling, Handling::Proved(groups.clone()));
    assert!(
        found[0].fix.contains("COLLATE utf8mb4_general_ci"),
        "{}",
        found[0].fix
    );
    let state = decide(
        &facts,
        &[(
            groups.clone(),
            Finding::SeatGroups {
                groups: vec![],
                more: false,
            },
        )],
    );
    assert!(!state.judged[0].holds);
    assert_eq!(
        state.shape.seat_groups,
        Some(("utf8mb4".into(), "utf8mb4_general_ci".into()))
    );
    let state = decide(
        &facts,
        &[(
            groups.clone(),
            Finding::SeatGroups {
                groups: vec![(3, vec!["A-01".into(), "a-01".into()])],
                more: false,
            },
        )],
    );
    assert!(state.judged[0].holds);
    // Enforced where templates are read, not by a showtime-wide hold.
    assert!(state.holds.is_empty());

    let mut facts = contract();
    column(&mut facts, "hall_seat", "seat_no").charset = Some("latin1".into());
    assert_eq!(
        kinds(&judge(&facts)),
        [("hall_seat", "seat_no", DeviationKind::Collation)]
    );

    let mut facts = contract();
    facts
        .indexes
        .retain(|i| !(i.table == "hall_seat" && i.name == "PRIMARY"));
    let found = judge(&facts);
    assert_eq!(
        kinds(&found),
        [("hall_seat", "PRIMARY", DeviationKind::MissingKey)]
    );
    assert_eq!(found[0].handling, Handling::Proved(groups));
}

#[test]
fn unsigned_ids_are_read_up_to_bigint_and_other_types_hold_their_table() {
    let mut facts = contract();
    column(&mut facts, "showtime", "id").column_type = "bigint(20) unsigned".into();
    column(&mut facts, "order_seat", "showtime_id").column_type = "bigint(20) unsigned".into();
    let found = judge(&facts);
    assert_eq!(
        found.iter().map(|d| &d.handling).collect::<Vec<_>>(),
        [
            &Handling::Proved(Proof::IdsBeyondBigint { table: "showtime" }),
            &Handling::Harmless(
                "read row by row: a value beyond BIGINT makes its row unknown (rule 16)"
            ),
        ]
    );
    assert!(ReadShape::of(&facts).showtime_id_unsigned);

    let mut facts = contract();
    let c = column(&mut facts, "showtime", "hall_id");
    c.data_type = "varchar".into();
    c.column_type = "varchar(20)".into();
    let state = decide(&facts, &[]);
    assert_eq!(state.holds.seat(1).0, SeatHold::All);
    assert_eq!(state.holds.cancels, None);

    let mut facts = contract();
    let c = column(&mut facts, "ticket_order", "expires_at");
    c.data_type = "varchar".into();
    c.column_type = "varchar(30)".into();
    let state = decide(&facts, &[]);
    assert_eq!(state.holds.seat(1).0, SeatHold::All);
    assert!(state.holds.cancels.is_some());

    // Read only for display, or not at all: harmless.
    let mut facts = contract();
    let c = column(&mut facts, "ticket_order", "user_id");
    c.data_type = "varchar".into();
    c.column_type = "varchar(30)".into();
    assert_eq!(decide(&facts, &[]).holds, Holds::default());

    // Other integer widths and datetime types read the same.
    let mut facts = contract();
    column(&mut facts, "showtime", "hall_id").data_type = "int".into();
    column(&mut facts, "showtime", "starts_at").data_type = "timestamp".into();
    assert_eq!(judge(&facts), Vec::new());
}

#[test]
fn what_the_cancel_writes_must_fit() {
    let mut facts = contract();
    column(&mut facts, "ticket_order", "cancel_reason").max_chars = Some(10);
    let state = decide(&facts, &[]);
    assert!(state.holds.cancels.is_some());
    assert_eq!(state.holds.seat(1).0, SeatHold::None);
    column(&mut facts, "ticket_order", "cancel_reason").max_chars = Some(255);
    assert!(decide(&facts, &[]).holds.is_empty(), "wider is harmless");

    let mut facts = contract();
    column(&mut facts, "order_seat", "active").nullable = false;
    assert!(decide(&facts, &[]).holds.cancels.is_some());

    let mut facts = contract();
    column(&mut facts, "showtime", "status").charset = Some("utf16".into());
    let found = judge(&facts);
    assert_eq!(
        kinds(&found),
        [("showtime", "status", DeviationKind::Charset)]
    );
}

/// A contract `seat_no` wider than the audit's: repairs of the longer
/// names are held (per repair), and the fix is `migrate`.
#[test]
fn an_audit_column_narrower_than_the_seat_names_is_a_deviation() {
    let mut facts = contract();
    column(&mut facts, "order_seat", "seat_no").max_chars = Some(26);
    column(&mut facts, "hall_seat", "seat_no").max_chars = Some(26);
    let found = judge(&facts);
    assert_eq!(
        kinds(&found),
        [
            ("hall_seat", "seat_no", DeviationKind::Length),
            ("order_seat", "seat_no", DeviationKind::Length),
            (AUDIT_TABLE, "seat_no", DeviationKind::Length),
        ]
    );
    let state = decide(&facts, &[]);
    assert_eq!(state.holding().count(), 1);
    assert!(state.shape.fits_audit(&"x".repeat(16)));
    assert!(!state.shape.fits_audit(&"x".repeat(17)));
    assert!(
        state.shape.fits_audit(&"é".repeat(16)),
        "characters, not bytes"
    );
}

#[test]
fn missing_tables_columns_and_keys_say_how_to_fix_them() {
    let mut facts = contract();
    facts.columns.retain(|c| c.table != "showtime");
    let found = judge(&facts);
    assert_eq!(
        kinds(&found)[0],
        ("showtime", "", DeviationKind::MissingTable)
    );
    assert!(decide(&facts, &[]).holds.cancels.is_some());

    let mut facts = contract();
    facts
        .columns
        .retain(|c| !(c.table == "ticket_order" && c.column == "expires_at"));
    assert_eq!(
        kinds(&judge(&facts)),
        [("ticket_order", "expires_at", DeviationKind::MissingColumn)]
    );

    let mut facts = contract();
    facts.indexes.retain(|i| i.name != "uq_occupancy");
    let found = judge(&facts);
    assert_eq!(
        kinds(&found),
        [("order_seat", "uq_occupancy", DeviationKind::MissingKey)]
    );
    assert!(matches!(found[0].handling, Handling::Harmless(_)));
    assert_eq!(
        found[0].fix,
        "ALTER TABLE order_seat ADD UNIQUE KEY uq_occupancy (showtime_id, seat_no, active)"
    );

    // A unique key over a prefix of seat_no: two names one seat to MySQL.
    let mut facts = contract();
    for i in facts
        .indexes
        .iter_mut()
        .filter(|i| i.name == "uq_occupancy")
    {
        i.columns[1].1 = Some(4);
    }
    assert_eq!(decide(&facts, &[]).holds.seat(1).0, SeatHold::Lowering);

    let mut facts = contract();
    facts.indexes.retain(|i| i.table != "showtime");
    let state = decide(
        &facts,
        &[(
            Proof::DuplicateShowtimes,
            Finding::DuplicateShowtimes {
                ids: vec![4],
                more: false,
            },
        )],
    );
    assert_eq!(state.holds.seat(4).0, SeatHold::All);
    assert_eq!(state.holds.seat(5).0, SeatHold::None);

    let mut facts = contract();
    facts
        .indexes
        .retain(|i| i.table != "ticket_order" || i.name != "PRIMARY");
    let state = decide(&facts, &[]);
    assert!(
        state.holds.cancels.is_some(),
        "no index on id: a locking read by id would lock every order"
    );
    facts.indexes.push(IndexFacts {
        table: "ticket_order".into(),
        name: "idx_id".into(),
        unique: false,
        columns: vec![("id".into(), None)],
    });
    let state = decide(&facts, &[]);
    assert!(state.holds.is_empty(), "the cancel checks each id");
    assert!(!state.shape.order_ids_unique);
}
