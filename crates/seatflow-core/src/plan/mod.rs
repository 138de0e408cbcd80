//! The planner: pure decisions, no I/O. Given one showtime's hall template,
//! its MySQL occupancy and what Redis holds, it says which drift exists and
//! which compare-and-set repairs restore the contract's expected state.
//! Every job's decisions come from here, so they are property-tested without
//! any server (see the tests at the bottom and `tests/it/repairs/planner_props.rs`).

use crate::model::holds::SeatHold;
use crate::model::{
    Holding, Kind, SeatFields, SeatNo, SeatRepair, SeatState, SeatTruth, ShowtimeOccupancy,
    Template,
};

/// What the scan found at `{prefix}seat:{S}`.
#[derive(Debug, Clone, Copy)]
pub enum HashObservation<'a> {
    /// The key does not exist.
    Missing,
    /// A hash, as HGETALL returned it.
    Present(&'a SeatFields),
    /// The key exists but is not a hash (bad data: left alone).
    WrongType,
}

/// One showtime as the scan saw it.
#[derive(Debug, Clone, Copy)]
pub struct ShowtimeInput<'a> {
    /// Enabled seats of the hall template.
    pub template: &'a Template,
    /// The rows that may hold its seats: valid occupancies, and rows the
    /// contract does not explain under the template seat they name.
    pub occupancy: ShowtimeOccupancy<'a>,
    pub hash: HashObservation<'a>,
    /// What the schema's deviations let be written here (rule 17).
    pub hold: SeatHold,
}

/// Bad data: reported (`errors_total{stage="invalid_data"}`), never repaired
/// on a guess, never fatal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anomaly {
    /// The hall of an ON_SALE showtime has no enabled seats.
    EmptyTemplate,
    /// The seat key exists but is not a hash.
    WrongType,
    /// A field whose value is not `0`, `1` or `2`.
    InvalidValue { seat: SeatNo, raw: String },
    /// A field that is not an enabled template seat.
    UnknownField { seat: SeatNo },
    /// A valid occupancy of a seat that is not an enabled template seat.
    OccupancyOutsideTemplate { seat: SeatNo },
}

impl Anomaly {
    /// One line for a log or report; data from the stores is cut to
    /// `SHOWN_CHARS`, so a 1 MB junk value costs a few dozen bytes.
    pub fn describe(&self) -> String {
        match self {
            Anomaly::EmptyTemplate => "hall template has no enabled seats".into(),
            Anomaly::WrongType => "seat key is not a hash".into(),
            Anomaly::InvalidValue { seat, raw } => {
                format!("seat {} has invalid value {}", shown(seat), quoted(raw))
            }
            Anomaly::UnknownField { seat } => {
                format!("field {} is not a template seat", shown(seat))
            }
            Anomaly::OccupancyOutsideTemplate { seat } => {
                format!(
                    "seat {} is occupied but not an enabled template seat",
                    shown(seat)
                )
            }
        }
    }
}

/// Most characters of a stored value that a message shows.
const SHOWN_CHARS: usize = 40;

/// A name from a store (a seat number), cut to `SHOWN_CHARS`.
pub fn shown(raw: &str) -> String {
    let (head, cut) = cut_short(raw);
    if cut {
        format!("{head}… ({} bytes)", raw.len())
    } else {
        head
    }
}

/// A value from a store, quoted and cut to `SHOWN_CHARS`.
fn quoted(raw: &str) -> String {
    let (head, cut) = cut_short(raw);
    if cut {
        format!("{head:?}… ({} bytes)", raw.len())
    } else {
        format!("{head:?}")
    }
}

fn cut_short(raw: &str) -> (String, bool) {
    let mut chars = raw.chars();
    let head: String = chars.by_ref().take(SHOWN_CHARS).collect();
    let cut = chars.next().is_some();
    (head, cut)
}

/// Everything the planner concluded about one showtime.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShowtimePlan {
    /// Some when the hash is missing: the full hash to create (only if still absent).
    pub rebuild: Option<Vec<(SeatNo, SeatState)>>,
    pub repairs: Vec<SeatRepair>,
    pub anomalies: Vec<Anomaly>,
    /// The jobs of the repairs (a rebuild is one) the hold kept from this
    /// plan, one entry each.
    pub held_back: Vec<Kind>,
}

impl ShowtimePlan {
    pub fn repairs_of(&self, kind: Kind) -> impl Iterator<Item = &SeatRepair> {
        self.repairs.iter().filter(move |r| r.kind == kind)
    }
}

/// Which job owns the disagreement between what Redis shows and what MySQL
/// implies, and so which repair fixes it. `None` when they agree.
///
/// The occupancy direction (Redis shows less than an order holds) belongs to
/// `paid-seats`, and so does every absent field of a present hash (the
/// contract gives every enabled template seat a field); the Redis direction
/// (Redis shows more than any order holds) to `orphan-locks` (`"1"`) and
/// `sold-orphans` (`"2"`).
pub fn classify(observed: Option<SeatState>, expected: SeatState) -> Option<Kind> {
    use SeatState::*;
    match (observed, expected) {
        (Some(o), e) if o == e => None,
        (None, _) | (_, Sold) => Some(Kind::PaidSeats),
        (Some(Sold), _) => Some(Kind::SoldOrphans),
        (Some(Locked), Free) => Some(Kind::OrphanLocks),
        (Some(Free), Locked) => Some(Kind::PaidSeats),
        (Some(Free), Free) | (Some(Locked), Locked) => unreachable!("equal states return early"),
    }
}

/// The expected hash of a showtime: every template seat at the state its
/// occupancy implies. A seat that a row outside the contract may hold is
/// left out unless a valid occupancy raises it (rule 15: writing `"0"`
/// where nothing was would lower it).
pub fn expected_hash(
    template: &Template,
    occupancy: ShowtimeOccupancy<'_>,
) -> Vec<(SeatNo, SeatState)> {
    let (truths, _) = seat_truths(template, occupancy, SeatHold::None);
    rebuilt_fields(template, &truths)
}

fn rebuilt_fields(template: &Template, truths: &[SeatTruth]) -> Vec<(SeatNo, SeatState)> {
    template
        .seats()
        .iter()
        .zip(truths)
        .filter(|(_, t)| t.allows(None, t.expected()))
        .map(|(seat, t)| (seat.clone(), t.expected()))
        .collect()
}

/// What MySQL says of each template seat, by position, and the valid
/// occupancies of seats that are not enabled template seats (sorted, each
/// once). Rows outside the contract name template seats already (the
/// reader resolved them with MySQL's own comparison); one that names none
/// blocks nothing here. A seat is also unknown (raised, never lowered, rule
/// 15) when a row may hold any seat of the showtime, when the hold keeps
/// the showtime from being lowered, and when MySQL takes it for another
/// template seat (`Template::uncertain`, rule 17).
fn seat_truths<'o>(
    template: &Template,
    occupancy: ShowtimeOccupancy<'o>,
    hold: SeatHold,
) -> (Vec<SeatTruth>, Vec<&'o str>) {
    let everything_unknown = occupancy.holds_any_seat() || hold != SeatHold::None;
    let mut truths: Vec<SeatTruth> = (0..template.len())
        .map(|i| SeatTruth {
            valid: None,
            unknown: everything_unknown || template.uncertain(i),
        })
        .collect();
    let mut outside = Vec::new();
    for (seat, holding) in occupancy.iter() {
        match (template.find(seat.as_bytes()), holding) {
            (Some(i), _) => truths[i].add(holding),
            (None, Holding::Valid(_)) => outside.push(seat),
            (None, Holding::Unknown { .. }) => {}
        }
    }
    outside.sort_unstable();
    outside.dedup();
    (truths, outside)
}

/// Plans one showtime. Pure and total: any input yields a plan.
///
/// Runs for every showtime of every sweep, so it works on positions in the
/// template (dense arrays, no per-showtime maps) and on the reply's bytes.
pub fn plan_showtime(input: ShowtimeInput<'_>) -> ShowtimePlan {
    if input.hold == SeatHold::None {
        return plan_within(input);
    }
    // What the hold keeps back: the plan without it, less the plan with it.
    let free = plan_within(ShowtimeInput {
        hold: SeatHold::None,
        ..input
    });
    let mut held = plan_within(input);
    held.held_back = free
        .repairs
        .iter()
        .filter(|r| !held.repairs.contains(r))
        .map(|r| r.kind)
        .collect();
    if free.rebuild.is_some() && held.rebuild.is_none() {
        held.held_back.push(Kind::MissingHashes);
    }
    held
}

/// [`plan_showtime`] under `input.hold`: with `SeatHold::All` nothing is
/// planned (the anomalies are still reported).
fn plan_within(input: ShowtimeInput<'_>) -> ShowtimePlan {
    let mut plan = ShowtimePlan::default();
    let template = input.template;
    if template.is_empty() {
        plan.anomalies.push(Anomaly::EmptyTemplate);
        return plan;
    }
    let (truths, outside) = seat_truths(template, input.occupancy, input.hold);
    plan.anomalies.extend(
        outside
            .into_iter()
            .map(|seat| Anomaly::OccupancyOutsideTemplate { seat: seat.into() }),
    );

    let fields = match input.hash {
        HashObservation::WrongType => {
            plan.anomalies.push(Anomaly::WrongType);
            return plan;
        }
        HashObservation::Missing if input.hold == SeatHold::All => return plan,
        HashObservation::Missing => {
            plan.rebuild = Some(rebuilt_fields(template, &truths));
            return plan;
        }
        HashObservation::Present(_) if input.hold == SeatHold::All => return plan,
        HashObservation::Present(fields) => fields,
    };

    let mut observed: Vec<Option<&[u8]>> = vec![None; template.len()];
    let mut unknown: Vec<&[u8]> = Vec::new();
    for (i, (field, value)) in fields.pairs().enumerate() {
        match template.find_near(field, i) {
            Some(at) => observed[at] = Some(value),
            None => unknown.push(field),
        }
    }
    for ((seat, raw), truth) in template.seats().iter().zip(observed).zip(truths) {
        let observed = match raw {
            None => None,
            Some(raw) => match SeatState::from_bytes(raw) {
                Some(state) => Some(state),
                None => {
                    plan.anomalies.push(Anomaly::InvalidValue {
                        seat: seat.clone(),
                        raw: String::from_utf8_lossy(raw).into_owned(),
                    });
                    continue;
                }
            },
        };
        let expected = truth.expected();
        // A lowering write over a seat that a row outside the contract may
        // hold is never planned (rule 15); that row is reported by the reader.
        if let Some(kind) = classify(observed, expected)
            && truth.allows(observed, expected)
        {
            plan.repairs.push(SeatRepair {
                kind,
                seat: seat.clone(),
                observed,
                target: expected,
            });
        }
    }
    unknown.sort_unstable();
    plan.anomalies
        .extend(unknown.into_iter().map(|f| Anomaly::UnknownField {
            seat: String::from_utf8_lossy(f).into_owned(),
        }));
    plan
}

mod grace;

pub use grace::{CLOCK_SLACK_MS, GracePlan, Suspect, apply_grace, suspect_state};

/// True when a repair planned from the scan is still right given a fresh
/// read of exactly its seat, asked in MySQL's own terms (rules 4 and 15,
/// right before the write): the fresh truth wants the planned target, the
/// same job owns the drift, and a lowering write finds no row of any kind
/// that may hold the seat.
pub fn confirms(repair: &SeatRepair, fresh: &SeatTruth) -> bool {
    fresh.allows(repair.observed, repair.target)
        && classify(repair.observed, fresh.expected()) == Some(repair.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::{Occupancy, OrderStatus};

    use SeatState::*;

    fn seats(names: &[&str]) -> Template {
        Template::new(names.iter().map(|s| s.to_string()).collect())
    }

    fn held(seats: &[(&str, OrderStatus)]) -> Occupancy {
        seats.iter().map(|(s, o)| (1, *s, *o)).collect()
    }

    fn fields(pairs: &[(&str, &str)]) -> SeatFields {
        pairs.iter().copied().collect()
    }

    /// Log lines name the seat and quote the value, and cut store data to
    /// 40 characters plus its size: a 1 MB junk value costs a few dozen bytes.
    #[test]
    fn anomaly_lines_name_the_seat_and_cut_long_store_data() {
        let short = Anomaly::InvalidValue {
            seat: "A-1".into(),
            raw: "9".into(),
        };
        assert_eq!(short.describe(), r#"seat A-1 has invalid value "9""#);
        let exactly_40 = "x".repeat(40);
        let long = Anomaly::InvalidValue {
            seat: exactly_40.clone(),
            raw: "y".repeat(1000),
        };
        assert_eq!(
            long.describe(),
            format!(
                "seat {exactly_40} has invalid value {:?}… (1000 bytes)",
                "y".repeat(40)
            )
        );
        let long_seat = Anomaly::UnknownField {
            seat: "z".repeat(41),
        };
        assert_eq!(
            long_seat.describe(),
            format!(
                "field {}… (41 bytes) is not a template seat",
                "z".repeat(40)
            )
        );
    }

    #[test]
    fn classify_covers_the_five_contract_cases() {
        assert_eq!(classify(Some(Free), Sold), Some(Kind::PaidSeats));
        assert_eq!(classify(Some(Locked), Sold), Some(Kind::PaidSeats));
        assert_eq!(classify(Some(Locked), Free), Some(Kind::OrphanLocks));
        assert_eq!(classify(Some(Sold), Free), Some(Kind::SoldOrphans));
        assert_eq!(classify(Some(Sold), Locked), Some(Kind::SoldOrphans));
        assert_eq!(classify(Some(Free), Locked), Some(Kind::PaidSeats));
        assert_eq!(classify(None, Free), Some(Kind::PaidSeats));
        for s in SeatState::ALL {
            assert_eq!(classify(Some(s), s), None);
        }
    }

    #[test]
    fn sold_orphan_goes_to_expected_not_blindly_free() {
        let template = seats(&["A-1", "A-2"]);
        let occ = held(&[("A-1", OrderStatus::Pending)]);
        let h = fields(&[("A-1", "2"), ("A-2", "2")]);
        let plan = plan_showtime(ShowtimeInput {
            template: &template,
            occupancy: occ.of(1),
            hash: HashObservation::Present(&h),
            hold: SeatHold::None,
        });
        let targets: Vec<_> = plan
            .repairs
            .iter()
            .map(|r| (r.seat.as_str(), r.target))
            .collect();
        assert_eq!(targets, vec![("A-1", Locked), ("A-2", Free)]);
        assert!(plan.repairs.iter().all(|r| r.kind == Kind::SoldOrphans));
    }

    /// The hash a rebuild writes: every template seat at its occupancy's
    /// state, and no field at all for a free seat that a row outside the
    /// contract may hold (rule 15), unless a valid occupancy raises it.
    #[test]
    fn expected_hash_overlays_occupancy_and_leaves_unknown_seats_out() {
        let template = seats(&["A-1", "A-2", "A-3", "A-4", "A-5"]);
        let occ: Occupancy = [
            (1, "A-1", Holding::Valid(OrderStatus::Pending)),
            (1, "A-2", Holding::Valid(OrderStatus::Paid)),
            (1, "A-4", Holding::Unknown { order_id: 9 }),
            (1, "A-5", Holding::Unknown { order_id: 8 }),
            (1, "A-5", Holding::Valid(OrderStatus::Pending)),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            expected_hash(&template, occ.of(1)),
            vec![
                ("A-1".to_string(), Locked),
                ("A-2".to_string(), Sold),
                ("A-3".to_string(), Free),
                ("A-5".to_string(), Locked),
            ]
        );
    }

    /// Rule 15 in the planner: a row outside the contract blocks every
    /// lowering write on its seat (and the fill of an absent field with
    /// "0"), never a raise to what a valid occupancy holds.
    #[test]
    fn a_seat_an_unknown_row_may_hold_is_never_lowered_but_may_be_raised() {
        let template = seats(&["A-1", "A-2", "A-3", "A-4"]);
        let occ: Occupancy = [
            (1, "A-1", Holding::Unknown { order_id: 9 }),
            (1, "A-2", Holding::Unknown { order_id: 9 }),
            (1, "A-3", Holding::Unknown { order_id: 8 }),
            (1, "A-3", Holding::Valid(OrderStatus::Paid)),
            (1, "A-4", Holding::Unknown { order_id: 7 }),
        ]
        .into_iter()
        .collect();
        let h = fields(&[("A-1", "2"), ("A-2", "1"), ("A-3", "0")]);
        let plan = plan_showtime(ShowtimeInput {
            template: &template,
            occupancy: occ.of(1),
            hash: HashObservation::Present(&h),
            hold: SeatHold::None,
        });
        let planned: Vec<_> = plan
            .repairs
            .iter()
            .map(|r| (r.seat.as_str(), r.observed, r.target))
            .collect();
        assert_eq!(planned, vec![("A-3", Some(Free), Sold)]);
    }

    /// A field missing from a present hash is paid-seats drift: filled with
    /// its expected value (the compare-and-set wants it still absent).
    #[test]
    fn an_absent_field_is_filled_with_its_expected_value() {
        let template = seats(&["A-1", "A-2", "A-3"]);
        let occ = held(&[("A-2", OrderStatus::Paid)]);
        let h = fields(&[("A-3", "0")]);
        let plan = plan_showtime(ShowtimeInput {
            template: &template,
            occupancy: occ.of(1),
            hash: HashObservation::Present(&h),
            hold: SeatHold::None,
        });
        let planned: Vec<_> = plan
            .repairs
            .iter()
            .map(|r| (r.kind, r.seat.as_str(), r.observed, r.target))
            .collect();
        assert_eq!(
            planned,
            vec![
                (Kind::PaidSeats, "A-1", None, Free),
                (Kind::PaidSeats, "A-2", None, Sold)
            ]
        );
        assert!(plan.anomalies.is_empty());
    }

    #[test]
    fn missing_hash_is_rebuilt_with_occupancy_overlay() {
        let template = seats(&["A-1", "A-2", "A-3"]);
        let occ = held(&[("A-1", OrderStatus::Pending), ("A-3", OrderStatus::Paid)]);
        let plan = plan_showtime(ShowtimeInput {
            template: &template,
            occupancy: occ.of(1),
            hash: HashObservation::Missing,
            hold: SeatHold::None,
        });
        assert_eq!(
            plan.rebuild.unwrap(),
            vec![
                ("A-1".into(), Locked),
                ("A-2".into(), Free),
                ("A-3".into(), Sold)
            ]
        );
    }

    #[test]
    fn bad_data_is_reported_and_left_alone() {
        let template = seats(&["A-1", "A-2", "A-3"]);
        let occ = held(&[("Z-9", OrderStatus::Paid)]);
        let h = fields(&[("A-1", "x"), ("A-2", "0"), ("B-7", "1")]);
        let plan = plan_showtime(ShowtimeInput {
            template: &template,
            occupancy: occ.of(1),
            hash: HashObservation::Present(&h),
            hold: SeatHold::None,
        });
        // A-3's absent field is drift (filled with "0"), not bad data.
        assert_eq!(plan.repairs.len(), 1);
        assert_eq!(
            plan.anomalies,
            vec![
                Anomaly::OccupancyOutsideTemplate { seat: "Z-9".into() },
                Anomaly::InvalidValue {
                    seat: "A-1".into(),
                    raw: "x".into()
                },
                Anomaly::UnknownField { seat: "B-7".into() },
            ]
        );
        let empty = plan_showtime(ShowtimeInput {
            template: &Template::default(),
            occupancy: occ.of(1),
            hash: HashObservation::Missing,
            hold: SeatHold::None,
        });
        assert_eq!(empty.anomalies, vec![Anomaly::EmptyTemplate]);
        assert!(empty.rebuild.is_none());
    }

    #[test]
    fn a_field_that_is_not_utf8_is_bad_data_not_a_failed_read() {
        let template = seats(&["A-1"]);
        let h = SeatFields::from_items(&[
            b"A-1".to_vec(),
            b"0".to_vec(),
            vec![0xff, b'!'],
            b"1".to_vec(),
        ]);
        let plan = plan_showtime(ShowtimeInput {
            template: &template,
            occupancy: Occupancy::default().of(1),
            hash: HashObservation::Present(&h),
            hold: SeatHold::None,
        });
        assert!(plan.repairs.is_empty());
        assert_eq!(
            plan.anomalies,
            vec![Anomaly::UnknownField {
                seat: "\u{fffd}!".into()
            }]
        );
    }

    #[test]
    fn confirmation_rejects_a_seat_whose_order_committed_meanwhile() {
        assert!(confirms(&orphan("A-1"), &truth(None)));
        assert!(!confirms(
            &orphan("A-1"),
            &truth(Some(OrderStatus::Pending))
        ));
        assert!(!confirms(&orphan("A-1"), &truth(Some(OrderStatus::Paid))));
        let unknown = SeatTruth {
            valid: None,
            unknown: true,
        };
        assert!(!confirms(&orphan("A-1"), &unknown));
    }

    fn truth(valid: Option<OrderStatus>) -> SeatTruth {
        SeatTruth {
            valid,
            unknown: false,
        }
    }

    /// The fresh state must still call for the repair's own target: a paid
    /// seat shown free whose order was refunded, the seat then taken by
    /// another customer's PENDING order, is still paid-seats drift ("0"
    /// should be "1"), but marking it sold would be wrong.
    #[test]
    fn confirmation_wants_the_planned_target_not_just_the_same_kind_of_drift() {
        let mark_sold = SeatRepair {
            kind: Kind::PaidSeats,
            seat: "A-1".into(),
            observed: Some(Free),
            target: Sold,
        };
        assert!(confirms(&mark_sold, &truth(Some(OrderStatus::Paid))));
        assert!(!confirms(&mark_sold, &truth(Some(OrderStatus::Pending))));
        assert!(!confirms(&mark_sold, &truth(None)));
    }

    /// An orphan lock's release of `seat` (the grace tests use it too).
    pub(super) fn orphan(seat: &str) -> SeatRepair {
        SeatRepair {
            kind: Kind::OrphanLocks,
            seat: seat.into(),
            observed: Some(Locked),
            target: Free,
        }
    }
}
