use super::*;
use crate::model::holds::{ContractState, Finding, Holds, ReadShape, SeatHold};
use std::collections::HashMap;

/// The reference schema as MariaDB describes it, with the audit table.
pub(super) fn contract() -> SchemaFacts {
    let mut columns: Vec<ColumnFacts> = COLUMNS
        .iter()
        .map(|c| {
            let column_type = match c.sql_type {
                "BIGINT" => "bigint(20)".to_string(),
                "INT" => "int(11)".to_string(),
                other => other.to_ascii_lowercase(),
            };
            let data_type =
                column_type[..column_type.find('(').unwrap_or(column_type.len())].to_string();
            let text = c.chars.is_some();
            ColumnFacts {
                table: c.table.into(),
                column: c.column.into(),
                data_type,
                column_type,
                nullable: c.nullable,
                max_chars: c.chars,
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
    for (table, name, cols) in [
        (
            "ticket_order",
            "idx_order_showtime_status",
            &["showtime_id", "status"][..],
        ),
        (
            "ticket_order",
            "idx_order_status_expires",
            &["status", "expires_at"][..],
        ),
        (
            "showtime",
            "idx_showtime_status_starts",
            &["status", "starts_at"][..],
        ),
    ] {
        indexes.push(IndexFacts {
            table: table.into(),
            name: name.into(),
            unique: false,
            columns: cols.iter().map(|c| (c.to_string(), None)).collect(),
        });
    }
    SchemaFacts {
        columns,
        indexes,
        triggers: Vec::new(),
        checks: Vec::new(),
    }
}

pub(super) fn column<'a>(
    facts: &'a mut SchemaFacts,
    table: &str,
    name: &str,
) -> &'a mut ColumnFacts {
    facts
        .columns
        .iter_mut()
        .find(|c| c.table == table && c.column == name)
        .expect("a contract column")
}

pub(super) fn kinds(deviations: &[Deviation]) -> Vec<(&str, &str, DeviationKind)> {
    deviations
        .iter()
        .map(|d| (d.table, d.column, d.kind))
        .collect()
}

pub(super) fn state_of(facts: &SchemaFacts, findings: &[(Proof, Finding)]) -> ContractState {
    let findings: HashMap<Proof, Finding> = findings.iter().cloned().collect();
    ContractState::judge(facts, judge(facts), &findings)
}

#[test]
fn the_reference_schema_deviates_in_nothing() {
    let facts = contract();
    assert_eq!(judge(&facts), Vec::new());
    let state = state_of(&facts, &[]);
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
    let state = state_of(&facts, &[(Proof::NullShowtimeRows, none)]);
    assert!(state.holds.is_empty());
    assert!(!state.judged[0].holds, "{:?}", state.judged);
    assert!(state.shape.null_showtime_rows);

    let attributed = Finding::NullShowtimeRows {
        rows: vec![("order 7 seat A-1".into(), Some(5))],
        more: false,
    };
    let state = state_of(&facts, &[(Proof::NullShowtimeRows, attributed)]);
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
        let state = state_of(&facts, &[(Proof::NullShowtimeRows, anywhere.clone())]);
        assert_eq!(state.holds.seat(6).0, SeatHold::Lowering, "{anywhere:?}");
    }
    // No finding at all (the check was not run) holds as a failed one.
    assert_eq!(state_of(&facts, &[]).holds.seat(6).0, SeatHold::Lowering);

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
        assert!(state_of(&facts, &[]).holds.is_empty(), "{table}.{name}");
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
    let state = state_of(
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
    let state = state_of(
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
        [
            ("hall_seat", "PRIMARY", DeviationKind::MissingKey),
            ("hall_seat", "hall_id", DeviationKind::Index),
        ]
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
    let state = state_of(&facts, &[]);
    assert_eq!(state.holds.seat(1).0, SeatHold::All);
    assert_eq!(state.holds.cancels, None);

    let mut facts = contract();
    let c = column(&mut facts, "ticket_order", "expires_at");
    c.data_type = "varchar".into();
    c.column_type = "varchar(30)".into();
    let state = state_of(&facts, &[]);
    assert_eq!(state.holds.seat(1).0, SeatHold::All);
    assert!(state.holds.cancels.is_some());

    // Read only for display, or not at all: harmless.
    let mut facts = contract();
    let c = column(&mut facts, "ticket_order", "user_id");
    c.data_type = "varchar".into();
    c.column_type = "varchar(30)".into();
    assert_eq!(state_of(&facts, &[]).holds, Holds::default());

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
    let state = state_of(&facts, &[]);
    assert!(state.holds.cancels.is_some());
    assert_eq!(state.holds.seat(1).0, SeatHold::None);
    column(&mut facts, "ticket_order", "cancel_reason").max_chars = Some(255);
    assert!(state_of(&facts, &[]).holds.is_empty(), "wider is harmless");

    let mut facts = contract();
    column(&mut facts, "order_seat", "active").nullable = false;
    assert!(state_of(&facts, &[]).holds.cancels.is_some());

    let mut facts = contract();
    column(&mut facts, "showtime", "status").charset = Some("utf16".into());
    let found = judge(&facts);
    assert_eq!(
        kinds(&found),
        [("showtime", "status", DeviationKind::Charset)]
    );
    assert_eq!(
        found[0].fix,
        "ALTER TABLE showtime MODIFY status VARCHAR(16) CHARACTER SET utf8mb4 NOT NULL",
        "the character set before the nullability"
    );
}
