//! Property tests of the pure planner: for any template, occupancy and hash
//! contents, applying its repairs (as the compare-and-set scripts would)
//! reaches the contract's expected state, touches nothing it cannot be sure
//! of, and a second plan over the result finds nothing to do.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use seatflow_reconciler::model::holds::SeatHold;
use seatflow_reconciler::model::{
    Holding, Kind, Occupancy, OrderStatus, SeatFields, SeatRepair, SeatState, SeatTruth, Template,
};
use seatflow_reconciler::plan::{
    self, Anomaly, HashObservation, ShowtimeInput, ShowtimePlan, apply_grace,
};

#[derive(Debug, Clone)]
enum Cell {
    Absent,
    Value(&'static str),
}

fn cell() -> impl Strategy<Value = Cell> {
    prop_oneof![
        3 => Just(Cell::Value("0")),
        2 => Just(Cell::Value("1")),
        2 => Just(Cell::Value("2")),
        1 => Just(Cell::Value("x")),
        1 => Just(Cell::Absent),
    ]
}

fn holding() -> impl Strategy<Value = Holding> {
    prop_oneof![
        2 => Just(Holding::Valid(OrderStatus::Pending)),
        2 => Just(Holding::Valid(OrderStatus::Paid)),
        // A row outside the contract (a status it does not spell, `active`
        // 0, another showtime's order, a seat named only by the collation).
        1 => Just(Holding::Unknown { order_id: 99 }),
    ]
}

/// The rows on one seat: mostly none or one, sometimes a valid and an
/// unknown row together (the collation folds `a-01` onto `A-01`).
fn occupant() -> impl Strategy<Value = Vec<Holding>> {
    prop_oneof![
        3 => Just(Vec::new()),
        3 => holding().prop_map(|h| vec![h]),
        1 => (holding(), holding()).prop_map(|(a, b)| vec![a, b]),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    template: Vec<String>,
    occupancy: HashMap<String, Vec<Holding>>,
    hash: Option<HashMap<String, String>>,
}

impl Case {
    fn truth(&self, seat: &str) -> SeatTruth {
        SeatTruth::of(self.occupancy.get(seat).into_iter().flatten().copied())
    }
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..30, any::<bool>(), 0usize..3, 0usize..3).prop_flat_map(
        |(n, hash_present, extra_fields, extra_occupied)| {
            (
                proptest::collection::vec((occupant(), cell()), n),
                proptest::collection::vec(cell(), extra_fields),
                proptest::collection::vec(occupant(), extra_occupied),
            )
                .prop_map(move |(seats, extras, outside)| {
                    let template: Vec<String> =
                        (0..seats.len()).map(|i| format!("S-{i}")).collect();
                    let mut occupancy = HashMap::new();
                    let mut hash = HashMap::new();
                    for (i, (occ, c)) in seats.into_iter().enumerate() {
                        if !occ.is_empty() {
                            occupancy.insert(template[i].clone(), occ);
                        }
                        if let Cell::Value(v) = c {
                            hash.insert(template[i].clone(), v.to_string());
                        }
                    }
                    for (i, c) in extras.into_iter().enumerate() {
                        if let Cell::Value(v) = c {
                            hash.insert(format!("X-{i}"), v.to_string());
                        }
                    }
                    for (i, o) in outside.into_iter().enumerate() {
                        if !o.is_empty() {
                            occupancy.insert(format!("Y-{i}"), o);
                        }
                    }
                    let hash = (hash_present && !hash.is_empty()).then_some(hash);
                    Case {
                        template,
                        occupancy,
                        hash,
                    }
                })
        },
    )
}

fn plan_of(c: &Case, hash: &Option<HashMap<String, String>>) -> ShowtimePlan {
    // A map's iteration order is arbitrary: the fields reach the planner in
    // any order, as from a hash written in another order than the template.
    let fields: Option<SeatFields> = hash.as_ref().map(|h| h.iter().collect());
    plan_with(c, fields.as_ref())
}

fn plan_with(c: &Case, fields: Option<&SeatFields>) -> ShowtimePlan {
    let template = Template::new(c.template.clone());
    let occupancy: Occupancy = c
        .occupancy
        .iter()
        .flat_map(|(s, o)| o.iter().map(move |h| (1, s, *h)))
        .collect();
    plan::plan_showtime(ShowtimeInput {
        template: &template,
        occupancy: occupancy.of(1),
        hash: match fields {
            Some(f) => HashObservation::Present(f),
            None => HashObservation::Missing,
        },
        hold: SeatHold::None,
    })
}

/// Applies a plan the way the Lua scripts do: rebuild only a missing hash,
/// set a field only if it still holds the observed value.
fn apply(
    hash: &Option<HashMap<String, String>>,
    p: &ShowtimePlan,
) -> Option<HashMap<String, String>> {
    if let Some(fields) = &p.rebuild {
        assert!(hash.is_none());
        return Some(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), v.as_redis().to_string()))
                .collect(),
        );
    }
    let mut h = hash.clone()?;
    for r in &p.repairs {
        let current = h.get(&r.seat).map(String::as_str);
        if current == r.observed.map(SeatState::as_redis) {
            h.insert(r.seat.clone(), r.target.as_redis().to_string());
        }
    }
    Some(h)
}

proptest! {
    // Cases that failed once are kept beside this file (proptest's default
    // would now be tests/proptest-regressions/, tests/it having a main.rs).
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions"
        ))),
        ..ProptestConfig::with_cases(2000)
    })]

    #[test]
    fn repairs_reach_the_expected_state(c in case()) {
        let p = plan_of(&c, &c.hash);
        let after = apply(&c.hash, &p).expect("a hash exists after repair");
        for seat in &c.template {
            let before = c.hash.as_ref().and_then(|h| h.get(seat)).map(String::as_str);
            let truth = c.truth(seat);
            let expected = truth.expected().as_redis();
            let after_v = after.get(seat).map(String::as_str);
            match before {
                // Bad data is left alone.
                Some(v) if SeatState::from_redis(v).is_none() => prop_assert_eq!(after_v, Some(v)),
                // Rule 15: a seat a row outside the contract may hold is
                // never lowered (nor created free), only raised to what a
                // valid occupancy holds.
                _ if truth.unknown => {
                    let raised = before.and_then(SeatState::from_redis);
                    if after_v != before {
                        prop_assert_eq!(after_v, Some(expected), "seat {}", seat);
                        prop_assert!(!SeatState::lowers(raised, truth.expected()), "seat {} lowered", seat);
                    }
                }
                // Everything else, absent fields included, reaches the expected state.
                _ => prop_assert_eq!(after_v, Some(expected), "seat {}", seat),
            }
        }
        // Fields outside the template are never touched.
        if let Some(h) = &c.hash {
            for (k, v) in h.iter().filter(|(k, _)| !c.template.contains(k)) {
                prop_assert_eq!(after.get(k), Some(v));
            }
        }
        // Idempotent: planning the repaired state finds nothing to do.
        let again = plan_of(&c, &Some(after));
        prop_assert!(again.repairs.is_empty() && again.rebuild.is_none(), "{:?}", again);
    }

    #[test]
    fn every_repair_targets_the_expected_value_and_belongs_to_one_job(c in case()) {
        let p = plan_of(&c, &c.hash);
        let mut seen = HashSet::new();
        for r in &p.repairs {
            prop_assert!(seen.insert(r.seat.clone()), "one repair per seat");
            let truth = c.truth(&r.seat);
            prop_assert_eq!(r.target, truth.expected());
            prop_assert!(!(truth.unknown && SeatState::lowers(r.observed, r.target)), "{:?} lowered", r);
            prop_assert_ne!(Some(r.target), r.observed);
            match r.kind {
                Kind::OrphanLocks => prop_assert_eq!((r.observed, r.target), (Some(SeatState::Locked), SeatState::Free)),
                Kind::SoldOrphans => prop_assert_eq!(r.observed, Some(SeatState::Sold)),
                // Raises, and the fill of an absent field.
                Kind::PaidSeats => prop_assert!(r.target != SeatState::Free || r.observed.is_none()),
                other => prop_assert!(false, "unexpected kind {:?}", other),
            }
        }
        let invalid = p.anomalies.iter().filter(|a| matches!(a, Anomaly::InvalidValue { .. })).count();
        let bad_values = c.template.iter().filter(|s| c.hash.as_ref().and_then(|h| h.get(*s)).is_some_and(|v| v == "x")).count();
        prop_assert_eq!(invalid, bad_values);
    }

    #[test]
    fn the_order_of_the_hash_fields_does_not_matter(c in case(), rotate in 0usize..40) {
        let Some(h) = &c.hash else { return Ok(()) };
        // Template order first (the fast path), then the same fields rotated.
        let mut pairs: Vec<(&String, &String)> = c.template.iter().filter_map(|s| h.get_key_value(s)).collect();
        let mut extra: Vec<_> = h.iter().filter(|(k, _)| !c.template.contains(k)).collect();
        extra.sort();
        pairs.extend(extra);
        let in_order: SeatFields = pairs.iter().copied().collect();
        let n = pairs.len();
        pairs.rotate_left(rotate % n.max(1));
        let rotated: SeatFields = pairs.into_iter().collect();
        prop_assert_eq!(plan_with(&c, Some(&in_order)), plan_with(&c, Some(&rotated)));
    }

    #[test]
    fn grace_splits_candidates_and_only_releases_old_suspects(
        ages in proptest::collection::vec(proptest::option::of(0i64..300_000), 1..20),
        grace in 0i64..200_000,
    ) {
        let now = 1_000_000_000i64;
        let candidates: Vec<SeatRepair> = (0..ages.len()).map(|i| SeatRepair {
            kind: Kind::OrphanLocks, seat: format!("S-{i}"), observed: Some(SeatState::Locked), target: SeatState::Free,
        }).collect();
        let suspects: HashMap<String, String> = ages.iter().enumerate()
            .filter_map(|(i, a)| a.map(|a| (format!("S-{i}"), format!("1@{}", now - a))))
            .collect();
        let g = apply_grace(Kind::OrphanLocks, candidates.clone(), &suspects, now, grace);
        prop_assert_eq!(g.ready.len() + g.deferred.len(), candidates.len());
        for r in &g.ready {
            let i: usize = r.seat[2..].parse().unwrap();
            prop_assert!(grace == 0 || ages[i].is_some_and(|a| a >= grace));
        }
        for (seat, _) in &g.record {
            prop_assert!(!suspects.contains_key(seat));
        }
        prop_assert!(g.clear.is_empty());
    }
}
