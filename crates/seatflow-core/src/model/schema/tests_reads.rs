//! The judgement of what the reads rely on besides nullability and keys:
//! the types each read takes (`types.rs`), the jobs a column holds
//! (`uses.rs`), the indexes and the triggers (`indexes.rs`).

use super::tests::{column, contract, kinds, state_of};
use super::*;
use crate::model::holds::{Finding, SeatHold};

/// The indexes the reads rely on, and the triggers: warnings, each with its
/// statement, never a hold; an index name already taken is not reused.
#[test]
fn missing_indexes_and_triggers_warn_and_hold_nothing() {
    let mut facts = contract();
    for i in facts
        .indexes
        .iter_mut()
        .filter(|i| i.name == "idx_order_status_expires")
    {
        i.columns = vec![("expires_at".into(), None)];
    }
    facts.triggers.push(TriggerFacts {
        table: "ticket_order".into(),
        name: "no_cancel".into(),
        timing: "BEFORE".into(),
        event: "UPDATE".into(),
    });
    let found = judge(&facts);
    assert_eq!(
        kinds(&found),
        [
            ("ticket_order", "status", DeviationKind::Index),
            ("ticket_order", "BEFORE UPDATE", DeviationKind::Trigger),
        ]
    );
    assert_eq!(
        found[0].fix,
        "CREATE INDEX idx_order_status_expires_2 ON ticket_order (status, expires_at)"
    );
    assert_eq!(found[1].fix, "DROP TRIGGER `no_cancel`");
    let state = state_of(&facts, &[]);
    assert!(state.holds.is_empty());
    assert!(state.judged.iter().all(|j| j.warns && !j.holds));
}

/// Types judged by the table the decoders share: a TIMESTAMP or a narrower
/// integer is read, a DATE or a VARBINARY is not, and holds only the jobs
/// that use the column; an ENUM status must hold every contract value.
#[test]
fn types_are_judged_by_what_the_reads_take() {
    let set = |facts: &mut SchemaFacts, t: &str, c: &str, data_type: &str, column_type: &str| {
        let col = column(facts, t, c);
        col.data_type = data_type.into();
        col.column_type = column_type.into();
    };
    let mut facts = contract();
    set(
        &mut facts,
        "showtime",
        "starts_at",
        "timestamp",
        "timestamp(3)",
    );
    set(
        &mut facts,
        "ticket_order",
        "expires_at",
        "timestamp",
        "timestamp",
    );
    set(
        &mut facts,
        "order_seat",
        "order_id",
        "decimal",
        "decimal(18,0)",
    );
    set(&mut facts, "hall_seat", "enabled", "tinyint", "tinyint(4)");
    assert_eq!(judge(&facts), Vec::new());

    let mut facts = contract();
    set(&mut facts, "ticket_order", "created_at", "date", "date");
    let found = judge(&facts);
    assert_eq!(
        kinds(&found),
        [("ticket_order", "created_at", DeviationKind::Type)]
    );
    let holds = state_of(&facts, &[]).holds;
    assert!(holds.seat_writes.is_some(), "the sweep reads it");
    assert_eq!(
        (holds.cancels, holds.order_reads),
        (None, None),
        "the cancel does not"
    );

    let mut facts = contract();
    set(
        &mut facts,
        "order_seat",
        "seat_no",
        "varbinary",
        "varbinary(16)",
    );
    let found = judge(&facts);
    assert_eq!(
        kinds(&found),
        [("order_seat", "seat_no", DeviationKind::Type)]
    );
    assert_eq!(
        found[0].fix,
        "ALTER TABLE order_seat MODIFY seat_no VARCHAR(16) NOT NULL"
    );

    let mut facts = contract();
    set(
        &mut facts,
        "ticket_order",
        "status",
        "enum",
        "enum('PENDING','PAID','REFUNDED')",
    );
    let state = state_of(&facts, &[]);
    assert_eq!(
        kinds(&judge(&facts)),
        [("ticket_order", "status", DeviationKind::Type)],
        "an ENUM without CANCELLED is a type the cancel cannot write"
    );
    assert!(state.holds.cancels.is_some());
    assert!(
        state.judged[0].detail.contains("CANCELLED"),
        "{:?}",
        state.judged
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
    let state = state_of(&facts, &[]);
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
    // It holds the jobs that read it: the seat jobs, not expired-orders.
    let holds = state_of(&facts, &[]).holds;
    assert!(holds.seat_writes.is_some());
    assert_eq!((holds.cancels, holds.order_reads), (None, None));

    let mut facts = contract();
    facts
        .columns
        .retain(|c| !(c.table == "ticket_order" && c.column == "expires_at"));
    let found = judge(&facts);
    assert_eq!(
        kinds(&found),
        [("ticket_order", "expires_at", DeviationKind::Missing)]
    );
    assert_eq!(found[0].kind.label(), "missing");
    assert_eq!(
        found[0].fix, "ALTER TABLE ticket_order ADD COLUMN expires_at DATETIME(3) NOT NULL",
        "a column that is not there is added, not modified"
    );

    // A missing column holds only the jobs that use it.
    let mut facts = contract();
    facts
        .columns
        .retain(|c| !(c.table == "ticket_order" && c.column == "cancel_reason"));
    let holds = state_of(&facts, &[]).holds;
    assert!(holds.cancels.is_some(), "the cancel writes it");
    assert_eq!(
        holds.seat(1).0,
        SeatHold::None,
        "the seat jobs do not use it"
    );
    assert_eq!(holds.order_reads, None, "the page does not read it");
    let mut facts = contract();
    facts
        .columns
        .retain(|c| !(c.table == "hall_seat" && c.column == "row_label"));
    let state = state_of(&facts, &[]);
    assert!(state.holds.is_empty(), "it orders the seat map only");
    assert_eq!(state.shape.seat_order("hs."), "hs.col_no, hs.seat_no");

    let mut facts = contract();
    facts.indexes.retain(|i| i.name != "uq_occupancy");
    let found = judge(&facts);
    assert_eq!(
        kinds(&found),
        [
            ("order_seat", "uq_occupancy", DeviationKind::MissingKey),
            ("order_seat", "showtime_id", DeviationKind::Index),
        ]
    );
    assert!(matches!(found[0].handling, Handling::Harmless(_)));
    assert_eq!(
        found[0].fix,
        "ALTER TABLE order_seat ADD UNIQUE KEY uq_occupancy (showtime_id, seat_no, active)"
    );
    assert!(matches!(found[1].handling, Handling::Warns(_)));
    assert_eq!(
        found[1].fix,
        "CREATE INDEX idx_order_seat_showtime ON order_seat (showtime_id)"
    );
    let state = state_of(&facts, &[]);
    assert!(state.holds.is_empty(), "a missing index holds nothing");
    assert!(state.judged[1].warns && !state.judged[1].holds);

    // A unique key over a prefix of seat_no: two names one seat to MySQL.
    let mut facts = contract();
    for i in facts
        .indexes
        .iter_mut()
        .filter(|i| i.name == "uq_occupancy")
    {
        i.columns[1].1 = Some(4);
    }
    assert_eq!(state_of(&facts, &[]).holds.seat(1).0, SeatHold::Lowering);

    let mut facts = contract();
    facts.indexes.retain(|i| i.table != "showtime");
    let state = state_of(
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
    let state = state_of(&facts, &[]);
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
    let state = state_of(&facts, &[]);
    assert!(state.holds.is_empty(), "the cancel checks each id");
    assert!(!state.shape.order_ids_unique);
}
