//! The estate: what is seeded, generated deterministically per showtime, and
//! its drift.

use std::ops::Range;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use seatflow_reconciler::ops::demo::fixtures::row_label;

use crate::args::EstateArgs;

/// Seats per row of the generated hall template (`A-1` … `A-20`, `B-1` …).
pub const SEATS_PER_ROW: usize = 20;
/// Share of occupied seats held by PAID orders; the rest are PENDING.
const PAID_SHARE: f64 = 0.8;
/// Largest order, in seats (orders take 1..=this many seats).
const MAX_ORDER_SEATS: usize = 4;

/// Who occupies a seat in MySQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occupant {
    Free,
    Pending,
    Paid,
}

impl Occupant {
    /// The contract's expected Redis value.
    pub fn expected(self) -> u8 {
        match self {
            Occupant::Free => b'0',
            Occupant::Pending => b'1',
            Occupant::Paid => b'2',
        }
    }
}

/// The three seat-level drifts, each from one of seatflow's crash windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftKind {
    /// Paid in MySQL, the `"1"` → `"2"` step lost.
    PaidSeat,
    /// Held in Redis, the order never inserted.
    OrphanLock,
    /// Refunded in MySQL, the `"2"` → `"0"` step lost.
    SoldOrphan,
}

impl DriftKind {
    pub const ALL: [DriftKind; 3] = [
        DriftKind::PaidSeat,
        DriftKind::OrphanLock,
        DriftKind::SoldOrphan,
    ];

    /// The value the crash left in Redis.
    pub fn injected(self) -> u8 {
        match self {
            DriftKind::PaidSeat | DriftKind::OrphanLock => b'1',
            DriftKind::SoldOrphan => b'2',
        }
    }

    /// Whether a seat with this occupant can carry this drift.
    fn fits(self, occupant: Occupant) -> bool {
        match self {
            DriftKind::PaidSeat => occupant == Occupant::Paid,
            DriftKind::OrphanLock | DriftKind::SoldOrphan => occupant == Occupant::Free,
        }
    }

    /// The counter under `fixed` in `once --output json` that repairs it.
    pub fn counter(self) -> &'static str {
        match self {
            DriftKind::PaidSeat => "paid_seats_fixed",
            DriftKind::OrphanLock => "orphan_locks_released",
            DriftKind::SoldOrphan => "sold_orphans_released",
        }
    }
}

/// The statuses the estate's orders have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pending,
    Paid,
    /// Paid, then refunded: its seats are released (`active` NULL).
    Refunded,
}

impl Status {
    pub fn as_sql(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::Paid => "PAID",
            Status::Refunded => "REFUNDED",
        }
    }
}

/// One order: its status and seat indices.
pub struct OrderSeed {
    pub status: Status,
    pub seats: Vec<usize>,
}

/// One drifted seat, kept so the drift can be re-injected between repetitions.
pub struct Drift {
    pub showtime: i64,
    pub seat: usize,
    pub kind: DriftKind,
}

/// One showtime as seeded.
pub struct ShowtimeSeed {
    pub id: i64,
    pub hall: i64,
    /// Redis value per seat index, drift included.
    pub values: Vec<u8>,
    pub orders: Vec<OrderSeed>,
    pub drift: Vec<Drift>,
}

/// The shape of the estate; each showtime is generated from its own seed, so
/// the estate does not depend on seeding order or batch sizes.
pub struct Estate {
    pub showtimes: usize,
    pub seats: usize,
    pub halls: usize,
    pub occupancy: f64,
    pub drift: f64,
    pub seed: u64,
    /// `A-1`, `A-2`, …: every hall has the same template.
    pub seat_names: Vec<String>,
}

impl Estate {
    pub fn new(args: &EstateArgs, drift: f64) -> Estate {
        let seat_names = (0..args.seats)
            .map(|i| format!("{}-{}", row_label(i / SEATS_PER_ROW), i % SEATS_PER_ROW + 1))
            .collect();
        Estate {
            showtimes: args.showtimes,
            seats: args.seats,
            halls: args.halls,
            occupancy: args.occupancy,
            drift,
            seed: args.seed,
            seat_names,
        }
    }

    pub fn total_seats(&self) -> u64 {
        (self.showtimes * self.seats) as u64
    }

    /// Drifted seats of the showtime at `index`, numbered estate-wide: an exact
    /// share of the total, spread evenly, so 1 % of 3 M seats is 30,000 seats.
    fn drift_numbers(&self, index: usize) -> Range<u64> {
        let upto = |i: usize| (i as f64 * self.seats as f64 * self.drift).floor() as u64;
        upto(index)..upto(index + 1)
    }

    pub fn showtime(&self, index: usize) -> ShowtimeSeed {
        let id = index as i64 + 1;
        let mut rng = self.rng_of(index);
        let (occupants, mut orders) = self.orders(&mut rng);
        let mut values: Vec<u8> = occupants.iter().map(|o| o.expected()).collect();
        let mut drift = Vec::new();
        for n in self.drift_numbers(index) {
            // Rotate the kind estate-wide so the three get equal shares.
            let wanted = DriftKind::ALL[(n % 3) as usize];
            let Some((kind, seat)) = pick_drift_seat(&mut rng, &occupants, &values, wanted) else {
                continue;
            };
            values[seat] = kind.injected();
            if kind == DriftKind::SoldOrphan {
                // The refund happened in MySQL: the order is there, inactive.
                orders.push(OrderSeed {
                    status: Status::Refunded,
                    seats: vec![seat],
                });
            }
            drift.push(Drift {
                showtime: id,
                seat,
                kind,
            });
        }
        ShowtimeSeed {
            id,
            hall: (index % self.halls) as i64 + 1,
            values,
            orders,
            drift,
        }
    }

    /// A per-showtime seed: golden-ratio spread so neighbouring ids differ.
    fn rng_of(&self, index: usize) -> SmallRng {
        let id = index as u64 + 1;
        SmallRng::seed_from_u64(self.seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// Who occupies each seat of the showtime at `index` in MySQL (the
    /// showtime regenerated from its seed, without drift).
    pub fn occupants(&self, index: usize) -> Vec<Occupant> {
        self.orders(&mut self.rng_of(index)).0
    }

    /// Exactly `occupancy` of the seats, in orders of 1..=MAX_ORDER_SEATS seats.
    pub fn orders(&self, rng: &mut SmallRng) -> (Vec<Occupant>, Vec<OrderSeed>) {
        let taken = (self.seats as f64 * self.occupancy).round() as usize;
        let mut seats = rand::seq::index::sample(rng, self.seats, taken).into_vec();
        seats.sort_unstable();
        let mut occupants = vec![Occupant::Free; self.seats];
        let mut orders = Vec::new();
        let mut rest = seats.as_slice();
        while !rest.is_empty() {
            let n = rng.random_range(1..=MAX_ORDER_SEATS).min(rest.len());
            let (group, tail) = rest.split_at(n);
            rest = tail;
            let (status, occupant) = if rng.random_bool(PAID_SHARE) {
                (Status::Paid, Occupant::Paid)
            } else {
                (Status::Pending, Occupant::Pending)
            };
            for &s in group {
                occupants[s] = occupant;
            }
            orders.push(OrderSeed {
                status,
                seats: group.to_vec(),
            });
        }
        (occupants, orders)
    }
}

/// A random seat not yet drifted that can carry `wanted`, or else the next kind.
fn pick_drift_seat(
    rng: &mut SmallRng,
    occupants: &[Occupant],
    values: &[u8],
    wanted: DriftKind,
) -> Option<(DriftKind, usize)> {
    let start = DriftKind::ALL.iter().position(|k| *k == wanted)?;
    (0..3)
        .map(|i| DriftKind::ALL[(start + i) % 3])
        .find_map(|kind| {
            let candidates: Vec<usize> = (0..occupants.len())
                .filter(|&s| kind.fits(occupants[s]) && values[s] == occupants[s].expected())
                .collect();
            let seat = *candidates.get(rng.random_range(0..candidates.len().max(1)))?;
            Some((kind, seat))
        })
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    fn estate(args: &[&str]) -> Estate {
        let argv = ["seatflow-bench"].iter().chain(args);
        let args = crate::args::Cli::parse_from(argv).sweep;
        Estate::new(&args.estate, args.drift)
    }

    #[test]
    fn drift_is_an_exact_share_spread_over_every_showtime() {
        let e = estate(&["--showtimes=50", "--seats=300", "--drift=0.01"]);
        let drift: Vec<Drift> = (0..e.showtimes).flat_map(|i| e.showtime(i).drift).collect();
        assert_eq!(drift.len(), 150, "1 % of 50 × 300 seats");
        for kind in DriftKind::ALL {
            assert_eq!(drift.iter().filter(|d| d.kind == kind).count(), 50);
        }
        assert!((1..=50).all(|id| drift.iter().any(|d| d.showtime == id)));
    }

    #[test]
    fn a_showtime_depends_on_its_id_and_the_seed_only() {
        let e = estate(&["--showtimes=20", "--seats=40", "--seed=3"]);
        let larger = estate(&["--showtimes=5000", "--seats=40", "--seed=3"]);
        let other_seed = estate(&["--showtimes=20", "--seats=40", "--seed=4"]);
        let st = e.showtime(17);
        assert_eq!(st.values, larger.showtime(17).values);
        assert_ne!(st.values, other_seed.showtime(17).values);
        assert_eq!((st.id, st.hall), (18, 8));
        assert_eq!(e.seat_names[..3], ["A-1", "A-2", "A-3"]);
        assert_eq!(e.seat_names[20], "B-1");
    }

    #[test]
    fn occupancy_is_exact_and_seeded_values_match_it_but_for_drift() {
        let e = estate(&[
            "--showtimes=1",
            "--seats=100",
            "--occupancy=0.3",
            "--drift=0",
        ]);
        let st = e.showtime(0);
        let occupied: usize = st.orders.iter().map(|o| o.seats.len()).sum();
        assert_eq!(occupied, 30);
        let sizes = 1..=MAX_ORDER_SEATS;
        assert!(st.orders.iter().all(|o| sizes.contains(&o.seats.len())));
        assert_eq!(st.values.iter().filter(|v| **v != b'0').count(), 30);
    }
}
